# -*- coding: utf-8 -*-
# Copyright: gpuhost.sglang contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""A driver change (playbooks/driver.yml) on a real Debian 12 test host with the real CPU engine, through the real
router (SMG) under load: a fine driver is adopted, a 2x slower one and a garbage one are pinned back, an interrupted
change converges on the rerun; requests sent through the router during each change, 0 failed.

The driver packages are stand-ins with the real names (tests/fixtures/driver-change-apt-repo.sh) from a local apt
repository bound into the host; what their version changes is what the engine's stand-in launch module reads from
libcuda.so.1 (tests/integration/files/driver_change/gpuhost_cuda_standin.py): nothing, half speed, or wrong matrix
products. The reboot is simulated (tests/integration/files/driver_change/standin-reboot): a new boot id and the
server restarted, so the engine loads the installed library. The router's second worker is a fake server on the
controller (tests/integration/fakeserver.py), which serves while the host is out.

Cases in order on one host (each needs the previous one's driver): fine 580.95.05 -> 580.105.08 (adopted; the CI case),
then, marked long: 2x slower 580.126.09 (pinned back), garbage 580.142 (pinned back), and an interrupt (SIGINT to
ansible-playbook) of a change to a fine driver at its redeploy step, then the rerun (adopted).
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import json
import os
import re
import signal
import subprocess
import sys
import threading
import time
import urllib.request

import pytest
import yaml

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from fakeserver import free_port  # noqa: E402
from fleet_roll import load  # noqa: E402

from ansible_collections.gpuhost.sglang.plugins.module_utils.serving import router, server_args  # noqa: E402
from ansible_collections.gpuhost.sglang.plugins.plugin_utils import fleet  # noqa: E402
from ansible_collections.gpuhost.sglang.tests import harness  # noqa: E402

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
FILES = os.path.join(ROOT, "tests", "integration", "files", "driver_change")
TESTHOST = os.path.join(ROOT, "tests", "hosts", "testhost.py")
WHEELHOUSE = os.path.join(ROOT, ".cache", "wheelhouse")
MODELS = os.path.join(ROOT, ".cache", "tinymodel")
REPO = os.path.join(ROOT, ".cache", "driver-change-apt-repo")
SMG = harness.SMG
ENV = dict(os.environ, GPUHOST_TESTHOST_TAG=os.environ.get("GPUHOST_TESTHOST_TAG", "dc"))
NAME = "dchost"
MODEL = "/var/lib/sglang/models/tiny"
SSH_OPTS = ["-o", "BatchMode=yes", "-o", "StrictHostKeyChecking=no", "-o", "UserKnownHostsFile=/dev/null",
            "-o", "LogLevel=ERROR", "-o", "ConnectTimeout=5"]
HELD = ["libcuda1", "libnvidia-ml1", "nvidia-driver-cuda"]

pytestmark = [pytest.mark.testhosts, pytest.mark.engine]
if not (os.path.isdir(WHEELHOUSE) and os.path.isfile(os.path.join(MODELS, "good", "config.json"))):
    pytestmark.append(pytest.mark.skip(reason="fixtures missing: run tests/stages/20-fixtures.sh (make fixtures)"))
elif harness.NO_SMG:
    pytestmark.append(pytest.mark.skip(reason=harness.NO_SMG))


def ssh(host, command, check=True):
    proc = subprocess.run(["ssh", *SSH_OPTS, "-i", host["identity_file"], "root@%s" % host["address"], command],
                          capture_output=True, text=True, timeout=300, check=False)
    assert proc.returncode == 0 or not check, "ssh %r failed: %s" % (command, proc.stderr)
    return proc.stdout.strip()


def scp(host, src, dst):
    subprocess.run(["scp", *SSH_OPTS, "-i", host["identity_file"], src, "root@%s:%s" % (host["address"], dst)],
                   check=True, capture_output=True, timeout=60)


def playbook(host, name, extra=None, on_line=None):
    """ansible-playbook NAME against the test inventory; ``on_line(line, proc)`` sees each output line."""
    cmd = [os.path.join(os.path.dirname(sys.executable), "ansible-playbook"), "-i", host["inventory"],
           os.path.join(ROOT, "playbooks", name)]
    if extra:
        cmd += ["-e", json.dumps(extra)]
    t0 = time.monotonic()
    proc = subprocess.Popen(cmd, cwd=ROOT, env=harness.ansible_env(PYTHONUNBUFFERED="1"), stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True)
    lines = []
    deadline = t0 + 1500
    watchdog = threading.Timer(1500, proc.kill)   # a run that hangs without output fails too
    watchdog.start()
    log = open(os.path.join(os.path.dirname(host["inventory"]), "%s-%d.log" % (name, time.monotonic_ns())), "w")  # noqa: SIM115
    for line in proc.stdout:
        lines.append(line)
        log.write(line)
        log.flush()
        if on_line:
            on_line(line, proc)
        assert time.monotonic() < deadline, "the playbook ran past 1500 s"
    proc.wait()
    watchdog.cancel()
    log.close()
    return proc.returncode, "".join(lines), time.monotonic() - t0


def installed(host):
    out = ssh(host, "dpkg-query -W -f '${binary:Package} ${Version}\\n' nvidia-driver-cuda libcuda1 libnvidia-ml1 nvidia-smi")
    return dict(line.split() for line in out.splitlines()), sorted(ssh(host, "apt-mark showhold").split())


@pytest.fixture(scope="module")
def rig(tmp_path_factory):
    """The host with driver 580.95.05 deployed behind a real SMG with a fake second worker."""
    subprocess.run(["bash", os.path.join(ROOT, "tests", "fixtures", "driver-change-apt-repo.sh"), REPO], check=True,
                   capture_output=True, env=dict(os.environ, GPUHOST_ROOT=ROOT))
    subprocess.run([sys.executable, TESTHOST, "prepare"], env=ENV, check=True, capture_output=True)
    proc = subprocess.run([sys.executable, TESTHOST, "create", NAME, "--bind-ro", WHEELHOUSE + ":/opt/wheelhouse",
                           "--bind-ro", REPO + ":/opt/driver-repo"], env=ENV, check=True, capture_output=True, text=True)
    host = json.loads(proc.stdout.strip().splitlines()[-1])
    procs = []
    try:
        # the driver as the nvidia_driver role leaves it: exact versions, held, pinned in its preferences file
        pins = "".join("\\nPackage: %s\\nPin: version 580.95.05-1\\nPin-Priority: 1001\\n" % n for n in sorted(HELD + ["nvidia-smi"]))
        ssh(host, "echo 'deb [trusted=yes] file:/opt/driver-repo ./' >/etc/apt/sources.list.d/gpuhost-driver-test.list && "
                  "apt-get update -qq 2>/dev/null; DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "
                  "nvidia-driver-cuda=580.95.05-1 libcuda1=580.95.05-1 libnvidia-ml1=580.95.05-1 nvidia-smi=580.95.05-1 "
                  ">/dev/null && apt-mark hold %s >/dev/null && printf '# gpuhost test%s' >/etc/apt/preferences.d/gpuhost-nvidia && "
                  "mkdir -p /opt/sglang/bin /var/lib/gpuhost-standin && cat /proc/sys/kernel/random/uuid "
                  ">/var/lib/gpuhost-standin/boot_id" % (" ".join(HELD), pins))
        scp(host, os.path.join(FILES, "gpuhost_cuda_standin.py"), "/opt/sglang/bin/gpuhost_cuda_standin.py")
        scp(host, os.path.join(FILES, "standin-reboot"), "/usr/local/sbin/gpuhost-standin-reboot")
        fake_port, port, mport = free_port(), free_port(), free_port()
        procs.append(subprocess.Popen([sys.executable, os.path.join(ROOT, "tests", "integration", "fakeserver.py"),
                                       "--port", str(fake_port), "--model", MODEL], stdout=subprocess.DEVNULL,
                                      stderr=subprocess.DEVNULL, start_new_session=True))
        inv = tmp_path_factory.mktemp("inv")
        with open(os.path.join(ROOT, "inventories", "sandbox", "group_vars", "sglang_servers.yml")) as fh:
            gv = yaml.safe_load(fh)
        gv.update(sglang_model_controller_dir=os.path.join(MODELS, "good"), sglang_launch_module="gpuhost_cuda_standin",
                  driver_change_reboot_command="/usr/local/sbin/gpuhost-standin-reboot",
                  driver_change_boot_time_command="cat /var/lib/gpuhost-standin/boot_id",
                  driver_change_boot_id_path="/var/lib/gpuhost-standin/boot_id",
                  bench_report_dir=str(inv / "reports"), roll_drain_timeout=120)
        local = {"ansible_connection": "local", "ansible_host": "127.0.0.1", "ansible_become": False,
                 "ansible_python_interpreter": sys.executable}
        inventory = {"all": {"children": {
            "sglang_servers": {"hosts": {NAME: {"ansible_host": host["address"], "ansible_user": "root",
                                                "ansible_ssh_private_key_file": host["identity_file"],
                                                "ansible_python_interpreter": "/usr/bin/python3"}}, "vars": gv},
            "sglang_routers": {"hosts": {"rt": dict(local, router_port=port, router_prometheus_port=mport,
                                                    router_probe_model=MODEL, router_worker_discovery="file",
                                                    router_worker_manifest=str(inv / "workers.json"))}}}}}
        # the first deploy without the router group (deploy.yml would install SMG on the controller)
        servers = {"all": {"children": {"sglang_servers": inventory["all"]["children"]["sglang_servers"]}}}
        (inv / "servers.yml").write_text(yaml.safe_dump(servers))
        host["inventory"] = str(inv / "servers.yml")
        rc, out, _wall = playbook(host, "deploy.yml")
        assert rc == 0, out[-4000:]
        host["inventory"] = str(inv / "hosts.yml")
        (inv / "hosts.yml").write_text(yaml.safe_dump(inventory))
        with open(os.path.join(ROOT, "roles", "router", "defaults", "main.yml")) as fh:
            defaults = yaml.safe_load(fh)
        urls = [fleet.worker_url(host["address"], 30000), fleet.worker_url("127.0.0.1", fake_port)]
        # the router keeps its worker set in its file-discovery manifest (router_worker_discovery=file), as the router
        # role renders it; no retries, so that a request sent to a host in its change would show as failed
        (inv / "workers.json").write_text(router.manifest_text(urls))
        argv = [SMG, "launch"] + server_args.server_argv(fleet.router_options({
            "listen": "127.0.0.1", "port": port, "prometheus_port": mport, "backend": defaults["router_backend"],
            "policy": defaults["router_policy"], "worker_urls": urls, "health_check": defaults["router_health_check"],
            "retry": {"disable-retries": True}, "discovery_file": str(inv / "workers.json"),
            "options": {"discovery-check-interval-secs": 2}}))
        procs.append(subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True))
        host.update(base="http://127.0.0.1:%d" % port, metrics="http://127.0.0.1:%d/metrics" % mport, urls=urls,
                    manifest=str(inv / "workers.json"))
        deadline = time.monotonic() + 60
        while True:
            try:
                if json.load(urllib.request.urlopen(host["base"] + "/readiness", timeout=2)).get("healthy_workers") == 2:
                    break
            except OSError:
                pass
            assert time.monotonic() < deadline, "smg did not see both workers healthy"
            time.sleep(0.5)
        yield host
    finally:
        for p in procs:
            try:
                os.killpg(p.pid, signal.SIGTERM)
                p.wait(10)
            except OSError:
                pass
        subprocess.run([sys.executable, TESTHOST, "destroy", NAME], env=ENV, check=False, capture_output=True)


def change(rig, version, on_line=None, extra=None):
    """playbooks/driver.yml to ``version`` while serving_bench drives load through the router; returns rc, output,
    wall seconds and the load's totals with the requests each worker answered."""
    before = router.parse_worker_successes(urllib.request.urlopen(rig["metrics"], timeout=5).read().decode())
    totals = {"sent": 0, "completed": 0, "failed": {}, "runs": 0, "runs_without_results": []}
    stop = threading.Event()
    tmp = os.path.join(str(rig["inventory"]) + ".d", "load-%d" % time.monotonic_ns())
    os.makedirs(tmp)
    t = threading.Thread(target=load, args=(rig["base"], MODEL, stop, totals, tmp))
    t.start()
    try:
        rc, out, wall = playbook(rig, "driver.yml", dict({"driver_change_version": version}, **(extra or {})), on_line)
    finally:
        stop.set()
        t.join()
    spread = router.spread(before, router.parse_worker_successes(urllib.request.urlopen(rig["metrics"], timeout=5).read().decode()))
    totals["per_worker"] = dict((u, spread.get(u, 0)) for u in rig["urls"])
    with open(rig["manifest"]) as fh:
        listed = router.manifest_urls(fh.read())
    report = {"version": version, "manifest": listed, "rc": rc, "wall_s": round(wall, 1), "requests_sent": totals["sent"],
              "requests_completed": totals["completed"], "requests_failed": totals["failed"], "per_worker": totals["per_worker"]}
    print(json.dumps(report))
    assert totals["runs"] >= 1 and totals["sent"] > 0, totals
    assert totals["failed"] == {} and totals["completed"] == totals["sent"], report
    return rc, " ".join(out.split()), report


def history(rig):
    return [json.loads(line) for line in ssh(rig, "cat /var/lib/gpuhost-sglang/driver-change/history.jsonl").splitlines()]


# A whole change on a test host costs 7-8 min on CI's 2 cores (the first engine deploy about 4): opt-in like the other
# cases; docs/testing.md names the gates in make test that prove its behaviour.
@pytest.mark.long
def test_a_fine_driver_is_adopted(rig):
    rc, out, report = change(rig, "580.105.08")
    assert rc == 0, out[-4000:]
    assert installed(rig) == ({"nvidia-driver-cuda": "580.105.08-1", "libcuda1": "580.105.08-1", "libnvidia-ml1": "580.105.08-1",
                               "nvidia-smi": "580.105.08-1"}, HELD)
    assert "driver 580.105.08 adopted on %s (was 580.95.05)" % NAME in out, out[-3000:]
    assert history(rig)[-1]["result"] == "adopted"
    assert report["per_worker"][rig["urls"][0]] > 0, "no request reached the host through the router after it rejoined"
    assert sorted(report["manifest"]) == sorted(rig["urls"]), "the router's worker set does not list the host again"
    # a baseline for each driver: the old one kept, the new one recorded
    drivers = set()
    base = os.path.join(os.path.dirname(rig["inventory"]), "reports", "baselines")
    for f in sorted(os.listdir(base)):
        if f.endswith(".json") and not f.startswith("accuracy"):
            with open(os.path.join(base, f)) as fh:
                drivers.add(json.load(fh)["fingerprint"]["driver"])
    assert {"580.95.05", "580.105.08"} <= drivers, drivers


@pytest.mark.long
@pytest.mark.parametrize("version,cls", [("580.126.09", "regression"), ("580.142", "incoherent")])
def test_a_bad_driver_is_pinned_back(rig, version, cls):
    before = installed(rig)
    running = before[0]["libcuda1"].rsplit("-", 1)[0]
    rc, out, report = change(rig, version)
    assert sorted(report["manifest"]) == sorted(rig["urls"]), "the router's worker set does not list the host again"
    assert rc != 0 and "[%s]" % cls in out and "Pinned back to %s" % running in out, out[-4000:]
    assert installed(rig) == before
    assert history(rig)[-1]["result"] == "failed" and history(rig)[-1]["rejoined"]
    assert json.load(urllib.request.urlopen(rig["base"] + "/readiness", timeout=5)).get("healthy_workers") == 2


@pytest.mark.long
def test_an_interrupted_change_converges_on_the_rerun(rig):
    def interrupt(line, proc):
        if re.search(r"TASK \[Driver change \| serving role\b", line) and not getattr(interrupt, "done", False):
            interrupt.done = True
            proc.send_signal(signal.SIGINT)
    target = "580.105.08" if installed(rig)[0]["libcuda1"].startswith("580.95.05-") else "580.95.05"
    rc, out, report = change(rig, target, interrupt)
    assert rc != 0 and getattr(interrupt, "done", False), out[-3000:]
    assert rig["urls"][0] not in report["manifest"], "the host is back in the router before its driver was proven"
    rc, out, report = change(rig, target)
    assert rc == 0 and "resumed at redeploy" in out, out[-4000:]
    assert installed(rig)[0]["libcuda1"] == target + "-1" and sorted(report["manifest"]) == sorted(rig["urls"])
    assert history(rig)[-1]["result"] == "adopted" and history(rig)[-1]["resumed"] >= 1

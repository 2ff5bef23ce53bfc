# -*- coding: utf-8 -*-
# Copyright: gpuhost.sglang contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The serving role's gate on a real Debian 12 host with the real CPU engine.

Cases, in order on one host (each restart of the engine is real):
  good config passes the gate -> second run changed=0 -> misspelled flag rejected before any restart ->
  a config that fails to start is rolled back -> NaN model fails the canary and is rolled back ->
  random-weights model fails the canary and is rolled back -> the fallback chain takes its second entry -> a
  CUDA-graph capture crash teaches the next candidate (fallbacks that learn).
After every case the server answering is checked to be the last-known-good one (its unit file, its model,
its answers to the probes).

Needs root, the cached test-host rootfs, the engine wheelhouse and the tiny model (tests/stages/20-fixtures.sh).
By default it creates its own host; with GPUHOST_ROLE_TEST_SANDBOX=1 it runs on the sandbox host that
`make sandbox` deployed (tests/stages/31-sandbox.sh does that, saving a second engine install).
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import json
import os
import re
import signal
import subprocess
import sys
import time

import pytest

from ansible_collections.gpuhost.sglang.tests import harness

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
TESTHOST = os.path.join(ROOT, "tests", "hosts", "testhost.py")
WHEELHOUSE = os.path.join(ROOT, ".cache", "wheelhouse")
MODELS = os.path.join(ROOT, ".cache", "tinymodel")
ENV = dict(os.environ, GPUHOST_TESTHOST_TAG=os.environ.get("GPUHOST_TESTHOST_TAG", "ir"))
USE_SANDBOX = os.environ.get("GPUHOST_ROLE_TEST_SANDBOX") == "1"
# A host you deployed yourself: NAME:ADDRESS:INVENTORY (developers; the tests change and restart its server)
OWN_HOST = os.environ.get("GPUHOST_ROLE_TEST_HOST", "")
NAME = "sandbox" if USE_SANDBOX else (OWN_HOST.split(":")[0] if OWN_HOST else "sgrole")
SSH_OPTS = ["-o", "BatchMode=yes", "-o", "StrictHostKeyChecking=no", "-o", "UserKnownHostsFile=/dev/null",
            "-o", "LogLevel=ERROR", "-o", "ConnectTimeout=5"]

pytestmark = [pytest.mark.testhosts, pytest.mark.engine, pytest.mark.serving_role]

if not (os.path.isdir(WHEELHOUSE) and os.path.isfile(os.path.join(MODELS, "good", "config.json"))):
    pytestmark.append(pytest.mark.skip(reason="fixtures missing: run tests/stages/20-fixtures.sh (make fixtures)"))


def create_host(name, env, tmp_path_factory):
    """A fresh test host with the wheelhouse bound in and an inventory like the sandbox's (the tiny good model)."""
    subprocess.run([sys.executable, TESTHOST, "prepare"], env=env, check=True, capture_output=True)
    proc = subprocess.run([sys.executable, TESTHOST, "create", name, "--bind-ro", WHEELHOUSE + ":/opt/wheelhouse"],
                          env=env, check=True, capture_output=True, text=True)
    info = json.loads(proc.stdout.strip().splitlines()[-1])
    inv = tmp_path_factory.mktemp("inv")
    (inv / "hosts.yml").write_text(
        "all:\n  children:\n    sglang_servers:\n      hosts:\n        %s:\n          ansible_host: %s\n"
        "          ansible_user: root\n          ansible_ssh_private_key_file: %s\n"
        "          ansible_python_interpreter: /usr/bin/python3\n" % (name, info["address"], info["identity_file"]))
    (inv / "group_vars").mkdir()
    with open(os.path.join(ROOT, "inventories", "sandbox", "group_vars", "sglang_servers.yml")) as fh:
        gv = fh.read()
    gv = re.sub(r"(?m)^sglang_model_controller_dir:.*$", "sglang_model_controller_dir: %s/good" % MODELS, gv)
    (inv / "group_vars" / "sglang_servers.yml").write_text(gv)
    info["inventory"] = str(inv / "hosts.yml")
    return info


SANDBOX = {"name": "sandbox", "address": "10.231.200.2", "identity_file": "/var/cache/gpuhost-testhosts/id_ed25519",
           "inventory": os.path.join(ROOT, "inventories", "sandbox", "hosts.yml")}


@pytest.fixture(scope="module")
def host(tmp_path_factory):
    if USE_SANDBOX or OWN_HOST:  # GPUHOST_ROLE_TEST_HOST=NAME:ADDRESS:INVENTORY runs the cases on your own host
        if USE_SANDBOX:
            yield dict(SANDBOX)
        else:
            address, inventory = OWN_HOST.split(":", 2)[1:]
            yield dict(SANDBOX, name=NAME, address=address, inventory=inventory)
        return
    info = create_host(NAME, ENV, tmp_path_factory)
    try:
        yield info
    finally:
        subprocess.run([sys.executable, TESTHOST, "destroy", NAME], env=ENV, check=False, capture_output=True)


def deploy_cmd(host, extra=None, args=()):
    cmd = [os.path.join(os.path.dirname(sys.executable), "ansible-playbook"), "-i", host["inventory"],
           os.path.join(ROOT, "playbooks", "deploy.yml")] + list(args)
    if extra:
        cmd += ["-e", json.dumps(extra)]
    env = harness.ansible_env(PYTHONUNBUFFERED="1")
    return cmd, env


def result(returncode, text):
    recap = re.search(r"^%s\s+:\s+(.*)$" % NAME, text, re.M)
    counts = dict((k, int(v)) for k, v in re.findall(r"(\w+)=(\d+)", recap.group(1))) if recap else {}
    # the yaml callback folds long messages: compare with whitespace collapsed
    return returncode, " ".join(text.split()), counts


def deploy(host, extra=None, args=()):
    cmd, env = deploy_cmd(host, extra, args)
    proc = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=1500, check=False)
    return result(proc.returncode, proc.stdout + proc.stderr)


def deploy_with_fault(host, extra, faults, timeout=900):
    """Run a deploy; when a line of its output (a task header, or a progress line of the deploy transaction such as
    "sgrole: candidate 0: restarted (...), waiting for readiness") matches a pattern of ``faults`` ([(regex,
    action)]), run the action (a callable taking the Popen) once, in order. ``timeout`` bounds the whole deploy,
    output or not: past it the test fails (harness.watch_output). Returns deploy()'s tuple and the actions' results."""
    cmd, env = deploy_cmd(host, extra)
    proc = subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    text, done = harness.watch_output(proc, faults, timeout)
    return result(proc.returncode, text), done


def ssh(host, command):
    proc = subprocess.run(["ssh", *SSH_OPTS, "-i", host["identity_file"], "root@%s" % host["address"], command],
                          capture_output=True, text=True, timeout=120, check=False)
    assert proc.returncode == 0, "ssh %r failed: %s" % (command, proc.stderr)
    return proc.stdout.strip()


PROBE = r"""
import json, sys, urllib.request
sys.path.insert(0, "/tmp")
from probes import DEFAULT_PROBES
base = "http://127.0.0.1:30000"
model = json.load(urllib.request.urlopen(base + "/v1/models"))["data"][0]["id"]
ok = 0
for p in DEFAULT_PROBES:
    body = json.dumps({"model": model, "prompt": p["prompt"], "max_tokens": 12, "temperature": 0}).encode()
    req = urllib.request.Request(base + "/v1/completions", body, {"Content-Type": "application/json"})
    text = json.load(urllib.request.urlopen(req))["choices"][0]["text"]
    ok += p["expect"].lower() in text.lower()
print(json.dumps({"model": model, "correct": ok, "total": len(DEFAULT_PROBES)}))
"""


def serving_state(host):
    """What answers now: model id, probe score, and whether the live unit is the last-known-good copy."""
    subprocess.run(["scp", *SSH_OPTS, "-i", host["identity_file"],
                    os.path.join(ROOT, "plugins", "module_utils", "bench", "probes.py"), "root@%s:/tmp/probes.py" % host["address"]],
                   check=True, capture_output=True)
    answer = json.loads(ssh(host, "python3 -c '%s'" % PROBE.replace("'", "'\"'\"'")))
    answer["unit_is_lkg"] = ssh(host, "cmp -s /etc/systemd/system/sglang.service /etc/sglang/last-known-good/sglang.service"
                                      " && echo yes || echo no") == "yes"
    answer["since"] = ssh(host, "systemctl show -p ActiveEnterTimestampMonotonic --value sglang.service")
    return answer


def assert_lkg_serving(host):
    state = serving_state(host)
    assert state["model"] == "/var/lib/sglang/models/tiny", state
    assert state["correct"] == state["total"], state
    assert state["unit_is_lkg"], state
    return state


ROLLED_BACK = "Rolled back to last-known-good sglang.service at http://127.0.0.1:30000: ready, canary passed."
# Where each fault case leaves its proof (final message, what serves, the record): GPUHOST_ROLE_TEST_EVIDENCE=DIR
EVIDENCE = os.environ.get("GPUHOST_ROLE_TEST_EVIDENCE", "")


def final_message(out):
    """The play's closing message: the rollback summary, or the failed task's message, or the recap's tail."""
    match = re.search(r"No candidate passed the gate.*?(?:canary (?:passed|not run|FAILED.*?)\.|service was stopped\."
                      r"|server was not touched\.)", out)
    if match:
        return match.group(0)
    fails = re.findall(r"(?:fatal|failed): \[[^]]+\]: \S+! => (.{0,900}?)(?= TASK \[| PLAY RECAP|$)", out)
    return fails[-1] if fails else out[-600:]


def record_evidence(case, out, **facts):
    """Keep what a case proved (final message and the facts it asserted) under GPUHOST_ROLE_TEST_EVIDENCE."""
    if EVIDENCE:
        os.makedirs(EVIDENCE, exist_ok=True)
        with open(os.path.join(EVIDENCE, case + ".json"), "w") as fh:
            json.dump(dict(facts, final_message=final_message(out)), fh, indent=1)


def assert_rolled_back(rc, out, cls, host=None, case=None):
    """The play failed with the per-candidate summary naming ``cls`` (a regex) for candidate 0 and rolled back to
    the last-known-good, which then served; with ``host``: the record is whole and the old server answers."""
    assert rc != 0, out[-3000:]
    assert "Unknown error" not in out, out[-3000:]
    assert "No candidate passed the gate" in out, out[-3000:]
    assert re.search(r"candidate 0 .*?: (?:%s): " % cls, out), out[-3000:]
    assert ROLLED_BACK in out, out[-3000:]
    if host is None:
        return None
    meta = assert_record_whole(host)
    state = assert_lkg_serving(host)
    if case:
        record_evidence(case, out, serving=state, record_unit=meta["unit"], files=files_hash(host))
    return state


def test_good_config_passes_the_gate(host):
    rc, out, counts = deploy(host)
    assert rc == 0, out[-3000:]
    assert "candidate 0 passed the gate" in out
    assert_lkg_serving(host)


# A unit start, as systemd logs it (catalog entry "Unit started": systemd's catalog/systemd.catalog.in, the
# SD_MESSAGE_UNIT_STARTED id of src/systemd/sd-messages.h)
UNIT_STARTED = "39f53479d3a045ac8e11786248231fbf"


def starts_since(host, epoch):
    """How many times sglang.service was started on the host since ``epoch`` (host clock)."""
    return int(ssh(host, "journalctl -q --no-pager -u sglang.service MESSAGE_ID=%s --since @%d -o cat | wc -l"
                         % (UNIT_STARTED, epoch)))


def live_argv(host):
    return json.loads(ssh(host, "cat /etc/sglang/last-known-good/meta.json"))["argv"], \
        ssh(host, "systemctl show -p ExecStart --value sglang.service")


def test_second_run_changes_nothing(host):
    # stage 31 has just proven the plain rerun at changed=0: this one adds a fallback that would fail (transformers
    # serve cannot start on a CUDA device here). The base passes without a restart, so the fallback is never tried.
    # The model's parent as a Proxmox host's bind-mounted dataset presents itself: another group, another mode. The
    # role leaves a directory it did not make as the host set it (and reports no change).
    models = "/var/lib/sglang/models"
    was = ssh(host, "stat -c '%%G %%a' %s" % models).split()
    ssh(host, "chgrp nogroup %s && chmod 2775 %s" % (models, models))
    before = serving_state(host)
    try:
        rc, out, counts = deploy(host, {"sglang_fallback_chain": [{"device": "cuda"}]})
        dataset = ssh(host, "stat -c '%%G %%a' %s" % models)
    finally:
        # five digits: GNU chmod keeps a directory's setgid bit under a shorter numeric mode
        ssh(host, "chgrp %s %s && chmod 0%s %s" % (was[0], models, was[1].zfill(4), models))
    assert rc == 0, out[-3000:]
    assert dataset == "nogroup 2775", "the role changed the host's dataset %s: %s" % (models, dataset)
    assert "candidate 0 passed the gate" in out, out[-3000:]
    assert "candidate 1 passed the gate" not in out, out[-3000:]
    assert counts.get("changed") == 0, out[-3000:]
    after = assert_lkg_serving(host)
    assert after["since"] == before["since"], "the server was restarted although its configuration did not change"
    assert ssh(host, "systemctl is-active sglang.service") == "active"
    assert "cuda" not in live_argv(host)[1], "the failing fallback was installed"


def test_misspelled_flag_rejected_before_restart(host):
    before = serving_state(host)
    rc, out, _counts = deploy(host, {"sglang_options": {"device": "cpu", "continuous-batching": True, "cb-num-blocks": 256, "devcie": "cpu"}})
    assert rc != 0
    assert "devcie" in out
    after = assert_lkg_serving(host)
    assert after["since"] == before["since"], "the server was restarted for an invalid configuration"


def test_config_that_fails_to_start_is_rolled_back(host):
    # transformers serve on a CPU-only host cannot place the model on a CUDA device: startup fails
    cuda = {"device": "cuda", "continuous-batching": True, "cb-num-blocks": 256, "cb-max-batch-tokens": 2048}
    rc, out, _counts = deploy(host, {"sglang_options": cuda})
    assert_rolled_back(rc, out, "startup_failure|model_load|not_running|timeout")
    assert_lkg_serving(host)


@pytest.mark.parametrize("broken", ["nan", "random"])
def test_broken_model_fails_the_canary_and_is_rolled_back(host, broken):
    extra = {"sglang_model_controller_dir": os.path.join(MODELS, broken),
             "sglang_model_path": "/var/lib/sglang/models/%s" % broken}
    rc, out, _counts = deploy(host, extra)
    assert_rolled_back(rc, out, "incoherent")
    assert_lkg_serving(host)


def test_fallbacks_learn_from_a_graph_capture_crash(host):
    """Candidate 0 dies with a CUDA-graph capture signature in its journal: transformers serve prints the device
    string it cannot parse, here one that reads like SGLang's capture failure, and the readiness wait classifies the
    journal (class cuda_graph_capture, plugins/module_utils/serving/ready.py). The host's lesson for that class
    (sglang_fallback_lessons) goes on top of candidate 1's own change: it starts with both. It is also the case of a
    chain that takes its second entry (it replaced a case that proved only that, with one model load fewer in stage 31)."""
    crash = {"device": "Capture cuda graph failed", "continuous-batching": True, "cb-num-blocks": 256, "cb-max-batch-tokens": 2048}
    rc, out, _counts = deploy(host, {"sglang_options": crash, "sglang_fallback_chain": [{"cb-num-blocks": 128}],
                                     "sglang_fallback_lessons": {"cuda_graph_capture": {"device": "cpu"}}})
    assert rc == 0, out[-3000:]
    assert "candidate 0 FAILED the gate: cuda_graph_capture" in out, out[-3000:]
    assert "candidate 0 failed with cuda_graph_capture: every later candidate applies its lesson" in out, out[-3000:]
    assert "candidate 1 passed the gate" in out, out[-3000:]
    recorded, exec_start = live_argv(host)
    # its own change and what the crash taught; without the lesson it would run the crashing device again
    assert recorded[recorded.index("--device") + 1] == "cpu", recorded
    assert recorded[recorded.index("--cb-num-blocks") + 1] == "128", recorded
    assert_lkg_serving(host)
    record_evidence("learned_fallback", out, recorded_argv=recorded, exec_start=exec_start)
    # it leaves the fallback's configuration serving, as the case before it does: the next case restarts the default


# ---- deploy under faults, on the same host, serially; each case starts from the good last-known-good ----

KILL_MAIN = ("for i in $(seq 100); do p=$(systemctl show -p MainPID --value sglang.service);"
             " a=$(systemctl show -p ActiveState --value sglang.service);"
             " if [ \"$a\" = %s ] && [ \"$p\" != 0 ]; then kill -%s $p && echo $p && exit 0; fi; sleep 0.1; done; exit 1")


def files_hash(host):
    return ssh(host, "sha256sum /etc/systemd/system/sglang.service /etc/sglang/sglang.env /etc/sglang/last-known-good/*")


def assert_record_whole(host):
    """The last-known-good record parses and its copies are exactly its contents: nothing half-written."""
    meta = json.loads(ssh(host, "cat /etc/sglang/last-known-good/meta.json"))
    unit = ssh(host, "base64 -w0 /etc/sglang/last-known-good/sglang.service")
    env = ssh(host, "base64 -w0 /etc/sglang/last-known-good/env")
    assert (meta["unit_b64"], meta["env_b64"]) == (unit, env), "last-known-good copies differ from its record"
    return meta


def back_to_default(host):
    rc, out, _counts = deploy(host)
    assert rc == 0, out[-3000:]


def assert_converges(host):
    rc, out, counts = deploy(host)
    assert rc == 0, out[-3000:]
    assert counts.get("changed") == 0, out[-3000:]
    assert_record_whole(host)
    return assert_lkg_serving(host)


def test_fault_cases_start_from_the_default_configuration(host):
    # The live server is the previous case's fallback (another configuration): the default restarts it once. Two
    # harmless fallbacks in the chain must not be installed, restarted or gated after the base passed, and the
    # rerun with the same chain changes nothing and keeps the same server process.
    chain = {"sglang_fallback_chain": [{"cb-num-blocks": 128}, {"cb-num-blocks": 64}]}
    epoch = int(ssh(host, "date +%s"))
    rc, out, _counts = deploy(host, chain)
    assert rc == 0, out[-3000:]
    assert "candidate 0 passed the gate" in out, out[-3000:]
    for later in ("candidate 1 passed the gate", "candidate 2 passed the gate"):
        assert later not in out, out[-3000:]
    assert starts_since(host, epoch) == 1, "expected exactly one restart of the server"
    recorded, exec_start = live_argv(host)
    assert "--cb-num-blocks" in recorded and recorded[recorded.index("--cb-num-blocks") + 1] == "256", recorded
    assert "--cb-num-blocks 256" in exec_start, exec_start
    since = serving_state(host)["since"]
    rc, out, counts = deploy(host, chain)
    assert rc == 0, out[-3000:]
    assert counts.get("changed") == 0, out[-3000:]
    assert_record_whole(host)
    assert assert_lkg_serving(host)["since"] == since, "the rerun restarted the server"
    assert starts_since(host, epoch) == 1, "the rerun restarted the server"


@pytest.mark.parametrize("name,value,message", [
    ("sglang_ready_timeout", -5, "sglang_ready_timeout=-5 is out of range: allowed an integer, 10 to 86400."),
    ("sglang_restart_sec", -1, "sglang_restart_sec=-1 is out of range: allowed an integer, 0 to 3600."),
    ("sglang_start_limit_burst", 0, "sglang_start_limit_burst=0 is out of range: allowed an integer, 1 to 1000."),
    ("sglang_port", 70000, "sglang_port=70000 is out of range: allowed an integer, 1 to 65535."),
    # the fallback chain's worst case (here one candidate at sglang_ready_timeout, plus the restore) over its cap
    ("sglang_fallback_budget_seconds", 100, "sglang_fallback_budget_seconds=100 is below the fallback chain's worst case of"),
])
def test_bad_input_rejected_before_any_change(host, name, value, message):
    before, since = files_hash(host), serving_state(host)["since"]
    # the first case runs the whole play (the check comes before anything changes); the others only the preflight
    # tag, where the range check lives (CI time)
    first = name == "sglang_ready_timeout"
    rc, out, _counts = deploy(host, {name: value}, args=() if first else ["--tags", "sglang_preflight"])
    assert rc != 0
    assert message in out, out[-3000:]
    assert files_hash(host) == before, "%s=%s changed files on the host" % (name, value)
    assert serving_state(host)["since"] == since


def test_port_in_use_rolls_back_to_the_old_port(host):
    ssh(host, "setsid nohup python3 -c 'import socket,time; s=socket.socket(); s.bind((\"0.0.0.0\", 30001)); s.listen();"
              " time.sleep(3600)' >/dev/null 2>&1 </dev/null & echo $! > /run/f4-port-holder.pid")
    try:
        rc, out, _counts = deploy(host, {"sglang_port": 30001, "sglang_ready_timeout": 60})
    finally:
        ssh(host, "kill $(cat /run/f4-port-holder.pid); rm -f /run/f4-port-holder.pid")
    assert_rolled_back(rc, out, "port_in_use", host, "port_in_use")
    assert re.search(r"\[candidate 0 .*?: port_in_use: Another process holds the port .*Evidence: .*address already in use\]",
                     out), out[-3000:]


def unit_props(host):
    out = ssh(host, "systemctl show -p ActiveState,MainPID,NRestarts,Result sglang.service")
    return dict(line.split("=", 1) for line in out.splitlines() if "=" in line)


@pytest.mark.long
def test_crash_after_several_deploys_comes_back(host):
    for n in range(3):  # three deploy-initiated restarts: StartLimitBurst=3 per 600 s counts them all
        rc, out, _counts = deploy(host, {"sglang_environment": {"GPUHOST_DEPLOY": str(n)}})
        assert rc == 0, out[-3000:]
    pid = ssh(host, KILL_MAIN % ("active", "KILL"))
    deadline, props = time.monotonic() + 120, {}
    while time.monotonic() < deadline:
        props = unit_props(host)
        if props["ActiveState"] == "active" and props["MainPID"] not in ("0", pid):
            break
        if props["ActiveState"] == "failed":
            break
        time.sleep(2)
    assert props["ActiveState"] == "active", "the server did not come back after the crash: %s / %s" % (
        props, ssh(host, "journalctl -u sglang.service -n 4 -o cat --no-pager"))
    assert int(props["NRestarts"]) >= 1
    state = assert_lkg_serving(host)
    record_evidence("crash_after_deploys", "", serving=state, unit=props, killed_pid=pid,
                    journal=ssh(host, "journalctl -u sglang.service -n 6 -o cat --no-pager"))
    back_to_default(host)


@pytest.mark.long
def test_sigkill_during_readiness_wait_rolls_back(host):
    (rc, out, _counts), done = deploy_with_fault(host, {"sglang_environment": {"GPUHOST_FAULT": "kill-ready"}}, [
        (r"candidate 0: restarted \(", lambda proc: ssh(host, KILL_MAIN % ("activating", "KILL")))])
    assert done and done[0], "the server was not killed while starting"
    assert_rolled_back(rc, out, "startup_failure", host, "sigkill_readiness")
    assert_converges(host)


@pytest.mark.long
def test_disk_full_during_model_copy(host):
    ssh(host, "mkdir -p /var/lib/sglang/models/full && mount -t tmpfs -o size=256k tmpfs /var/lib/sglang/models/full")
    try:
        before, since = files_hash(host), serving_state(host)["since"]
        rc, out, _counts = deploy(host, {"sglang_model_path": "/var/lib/sglang/models/full"})
    finally:
        ssh(host, "umount /var/lib/sglang/models/full && rmdir /var/lib/sglang/models/full")
    assert rc != 0
    assert re.search(r"No space left on device|ENOSPC|not enough space", out, re.I), out[-3000:]
    assert files_hash(host) == before
    assert serving_state(host)["since"] == since
    state = assert_converges(host)
    record_evidence("disk_full", out, serving=state, files=before, record=assert_record_whole(host)["unit"])


@pytest.mark.long
def test_broken_venv_is_repaired_before_the_restart(host):
    site = ssh(host, "/opt/sglang/venv/bin/python -c 'import sysconfig; print(sysconfig.get_paths()[\"purelib\"])'")
    ssh(host, "rm -rf %s/uvicorn" % site)
    try:
        rc, out, _counts = deploy(host, {"sglang_environment": {"GPUHOST_FAULT": "venv"}})
        assert rc == 0, out[-3000:]
        assert re.search(r"reinstall the distributions whose modules are missing\] \*+ changed", out), out[-3000:]
        ssh(host, "/opt/sglang/venv/bin/python -c 'import uvicorn'")
        state = assert_lkg_serving(host)
        record_evidence("broken_venv", out, serving=state, files=files_hash(host))
    finally:  # the next cases start from the default configuration even when this one fails
        back_to_default(host)


@pytest.mark.long
def test_sigkill_during_canary_rolls_back(host):
    # stopped right after ready, killed when the canary starts: the canary cannot have finished before the kill
    (rc, out, _counts), done = deploy_with_fault(
        host, {"sglang_environment": {"GPUHOST_FAULT": "kill-canary"}, "sglang_gate_timeout": 20}, [
            (r"candidate 0: ready after .*coherence canary",
             lambda proc: (ssh(host, KILL_MAIN % ("active", "STOP")), ssh(host, KILL_MAIN % ("active", "KILL"))))])
    assert len(done) == 1 and all(done[0])
    assert_rolled_back(rc, out, "incoherent", host, "sigkill_canary")
    assert_converges(host)


@pytest.mark.long
def test_sigint_after_restart_then_rerun_converges(host):
    extra = {"sglang_environment": {"GPUHOST_FAULT": "sigint"}}
    before = assert_record_whole(host)
    (rc, out, _counts), done = deploy_with_fault(host, extra, [
        (r"candidate 0: restarted \(", lambda proc: proc.send_signal(signal.SIGINT) or time.monotonic())], timeout=600)
    took = time.monotonic() - done[0] if done else None
    # interrupted: the candidate in flight failed as interrupted, last-known-good restored and proven, the play failed
    assert done and rc not in (0, 99), out[-3000:]
    assert re.search(r"\[candidate 0 .*?: interrupted: interrupted \(SIGINT to ansible-playbook\)", out), out[-3000:]
    assert ROLLED_BACK in out, out[-3000:]
    # the record is still the previous one, whole, and the old server answers again
    assert assert_record_whole(host)["unit_b64"] == before["unit_b64"]
    assert_lkg_serving(host)
    interrupted = out
    rc, out, _counts = deploy(host, extra)
    assert rc == 0, out[-3000:]
    meta = assert_record_whole(host)
    assert meta["env_b64"] == ssh(host, "base64 -w0 /etc/sglang/sglang.env"), "the live config that passed is not recorded"
    assert_lkg_serving(host)
    rc, out2, counts = deploy(host, extra)
    assert rc == 0 and counts.get("changed") == 0, out2[-3000:]
    record_evidence("sigint_rerun", interrupted, serving=serving_state(host), files=files_hash(host), rerun_changed=counts,
                    interrupt_to_exit_seconds=round(took, 1))
    back_to_default(host)


@pytest.mark.long
def test_check_mode_reports_the_restart_and_no_gate(host):
    since = serving_state(host)["since"]
    rc, out, _counts = deploy(host, {"sglang_environment": {"GPUHOST_FAULT": "check"}}, args=["--check"])
    assert rc == 0, out[-3000:]
    assert "check mode: candidate 0 would restart (environment file changed); the gate was NOT run" in out, out[-3000:]
    assert "passed the gate" not in out
    assert serving_state(host)["since"] == since
    record_evidence("check_mode", out, serving=assert_converges(host), files=files_hash(host))


# ---- the candidate changed the engine version or the unit name ----

CUDA = {"device": "cuda", "continuous-batching": True, "cb-num-blocks": 256, "cb-max-batch-tokens": 2048}
STARTUP_FAILED = "startup_failure|model_load|not_running|timeout"


def live_venv(host, unit="sglang.service"):
    """The venv the unit's ExecStart runs (its interpreter's directory two levels up)."""
    return ssh(host, "grep -o '^ExecStart=[^ ]*' /etc/systemd/system/%s | cut -d= -f2 | xargs dirname | xargs dirname"
               % unit)


@pytest.mark.long
def test_engine_version_change_rolls_back_to_the_old_venv(host):
    """A candidate with another engine version installs into its own venv; the rollback serves from the old one,
    untouched. (The wheelhouse holds one transformers: the candidate's version is a new sglang_version label over
    the same pinned wheels, which is what selects the venv.)"""
    old = live_venv(host)
    stamp = ssh(host, "sha256sum %s/.gpuhost-install.json; stat -c %%Y %s/bin/python" % (old, old))
    rc, out, _counts = deploy(host, {"sglang_version": "5.24.0.post99", "sglang_options": CUDA})
    new = "/opt/sglang/venv-transformers-5.24.0.post99"
    state = assert_rolled_back(rc, out, STARTUP_FAILED, host)
    assert live_venv(host) == old != new
    assert assert_record_whole(host)["venv"] == old
    assert ssh(host, "sha256sum %s/.gpuhost-install.json; stat -c %%Y %s/bin/python" % (old, old)) == stamp, \
        "the last-known-good's venv was changed by the candidate"
    ssh(host, "test -x %s/bin/python" % new)  # the candidate's own venv, kept until a pass
    record_evidence("version_change", out, serving=state, old_venv=old, candidate_venv=new, files=files_hash(host))
    back_to_default(host)  # a pass removes the candidate's venv
    assert ssh(host, "test -e %s && echo left || echo gone" % new) == "gone"
    assert ssh(host, "readlink /opt/sglang/venv") == old
    assert_converges(host)


@pytest.mark.long
def test_unit_name_change_that_fails_rolls_back_to_the_old_unit(host):
    rc, out, _counts = deploy(host, {"sglang_service_name": "sglang-b", "sglang_options": CUDA})
    state = assert_rolled_back(rc, out, STARTUP_FAILED, host)
    left = ssh(host, "ls /etc/systemd/system/sglang-b.service /etc/systemd/system/sglang-b.service.d"
                     " /etc/sglang/sglang-b.env 2>/dev/null; systemctl is-active sglang-b.service || true")
    assert left in ("inactive", "unknown"), "the failed candidate's unit or files were left: %s" % left
    record_evidence("unit_rename_rollback", out, serving=state, candidate_left=left, files=files_hash(host))
    assert_converges(host)


@pytest.mark.long
def test_unit_name_change_that_passes_replaces_the_old_unit(host):
    rc, out, _counts = deploy(host, {"sglang_service_name": "sglang-b"})
    assert rc == 0, out[-3000:]
    assert "candidate 0 passed the gate" in out
    meta = json.loads(ssh(host, "cat /etc/sglang/last-known-good/meta.json"))
    assert meta["unit"] == "sglang-b.service"
    left = ssh(host, "ls /etc/systemd/system/sglang.service /etc/sglang/sglang.env /etc/sglang/last-known-good/sglang.service"
                     " 2>/dev/null; systemctl is-active sglang.service || true")
    assert left in ("inactive", "unknown"), "the renamed unit's old files were left: %s" % left
    assert ssh(host, "systemctl is-active sglang-b.service") == "active"
    record_evidence("unit_rename_pass", out, unit=meta["unit"], old_left=left)
    back_to_default(host)  # and back: the same path in the other direction
    assert ssh(host, "ls /etc/systemd/system/sglang-b.service /etc/sglang/sglang-b.env 2>/dev/null; true") == ""
    assert_converges(host)

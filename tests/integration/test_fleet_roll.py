# -*- coding: utf-8 -*-
# Copyright: gpuhost.sglang contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""A rolling deploy (playbooks/deploy.yml) under load through the real router loses no request; a configuration
that fails the canary halts the roll with the fleet serving.

The roll is the real one: deploy.yml's plan, capacity floor, drain through SMG's worker API (the smg_worker module),
the add back with a probe through the router, the halt on the first failed host and the failed host put back
behind the router, against the real SMG (the router role's defaults: policy, health checks; retries off, so that
they cannot hide a request sent to a restarting host). The two
serving hosts are inventory hosts on the controller (local connection), and the serving role is a stand-in
(tests/integration/files/fleet_roll/roles/sglang) that restarts a fake server with a start delay: nothing listens
on the host's port while it "starts", so a request the router sent there would fail. What the serving role itself
does (install, gate, rollback) is proven by tests/unit/plugins/plugin_utils/test_deploy_transaction.py and
stage 31's test_serving_role.py; what is tested here is the roll around it. The control case restarts a host
under the same load without the roll's drain and must lose requests: the load would see a lost one.

The load is gpuhost.sglang.serving_bench (chat API, streaming) run again and again until the roll has ended
(tests/integration/fleet_roll.py, which also runs the same roll against a real fleet by hand).
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
from fleet_roll import CHANGED, ORIGINAL, load, roll, summary  # noqa: E402

from ansible_collections.gpuhost.sglang.plugins.module_utils.serving import router, server_args  # noqa: E402
from ansible_collections.gpuhost.sglang.plugins.plugin_utils import fleet  # noqa: E402
from ansible_collections.gpuhost.sglang.tests import harness  # noqa: E402

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
FILES = os.path.join(ROOT, "tests", "integration", "files", "fleet_roll")
STANDIN = os.path.join(FILES, "standin_engine.py")
VENV, SMG = harness.ROUTER_VENV, harness.SMG
HOSTS = ["w1", "w2"]
START_DELAY = 2.0
MODEL = "/var/lib/sglang/models/tiny"

if harness.NO_SMG:
    pytestmark = pytest.mark.skip(reason=harness.NO_SMG)


def overlay(tmp):
    """A collections tree whose gpuhost.sglang is this checkout with the stand-in sglang and router roles."""
    coll = os.path.join(tmp, "ansible_collections", "gpuhost", "sglang")
    os.makedirs(os.path.join(coll, "roles"))
    for name in os.listdir(ROOT):
        if name not in ("roles", "collections"):
            os.symlink(os.path.join(ROOT, name), os.path.join(coll, name))
    for name in os.listdir(os.path.join(ROOT, "roles")):
        standin = os.path.join(FILES, "roles", name)
        os.symlink(standin if os.path.isdir(standin) else os.path.join(ROOT, "roles", name),
                   os.path.join(coll, "roles", name))
    return tmp


def restart(fleet_, host, config, delay=START_DELAY):
    """The stand-in's restart of ``host`` outside Ansible (the first deploy, and the control case)."""
    out = subprocess.run([sys.executable, STANDIN, os.path.join(fleet_["state"], host), str(fleet_["ports"][host]),
                          json.dumps(config), "--start-delay", str(delay)],
                         capture_output=True, text=True, check=True, timeout=120)
    return json.loads(out.stdout)


def state(fleet_, host):
    with open(os.path.join(fleet_["state"], host, "config.json")) as fh:
        config = json.load(fh)
    with open(os.path.join(fleet_["state"], host, "pid")) as fh:
        return config, json.load(fh)


def healthy(base):
    ready = json.load(urllib.request.urlopen(base + "/readiness", timeout=2))
    return ready.get("healthy_workers")


@pytest.fixture(scope="module")
def fleet_(tmp_path_factory):
    tmp = str(tmp_path_factory.mktemp("fleet"))
    ports = dict((h, free_port()) for h in HOSTS)
    port, mport = free_port(), free_port()
    f = {"state": os.path.join(tmp, "state"), "ports": ports, "base": "http://127.0.0.1:%d" % port,
         "metrics": "http://127.0.0.1:%d/metrics" % mport,
         "collections": overlay(os.path.join(tmp, "coll"))}
    # the router role's defaults, but no retries: with them (measured, smg 1.13.0) a restart of a host still in the
    # router lost no request either, the router sent the failed ones again elsewhere; without them only the drain
    # keeps the roll lossless, and the control case shows the difference
    with open(os.path.join(ROOT, "roles", "router", "defaults", "main.yml")) as fh:
        defaults = yaml.safe_load(fh)
    urls = [fleet.worker_url("127.0.0.1", ports[h]) for h in HOSTS]
    argv = [SMG, "launch"] + server_args.server_argv(fleet.router_options({
        "listen": "127.0.0.1", "port": port, "prometheus_port": mport, "backend": defaults["router_backend"],
        "policy": defaults["router_policy"], "worker_urls": urls, "health_check": defaults["router_health_check"],
        "retry": {"disable-retries": True}}))
    local = {"ansible_connection": "local", "ansible_host": "127.0.0.1", "ansible_become": False,
             "ansible_python_interpreter": sys.executable}
    inventory = {"all": {"vars": dict(local, sglang_standin_script=STANDIN, sglang_standin_state_dir=f["state"],
                                      sglang_standin_start_delay=START_DELAY, deploy_nccl=False, sglang_engine="standin",
                                      sglang_listen_address="127.0.0.1", sglang_model_path=MODEL,
                                      sglang_options=ORIGINAL),
                         "children": {"sglang_servers": {"hosts": dict((h, {"sglang_port": ports[h]}) for h in HOSTS)},
                                      "sglang_routers": {"hosts": {"rt": {
                                          "router_port": port, "router_prometheus_port": mport,
                                          "router_probe_model": "fake-model"}}}}}}
    f["inventory"] = os.path.join(tmp, "hosts.yml")
    with open(f["inventory"], "w") as fh:
        yaml.safe_dump(inventory, fh)
    proc = None
    try:
        for h in HOSTS:  # the first deploy
            restart(f, h, {"options": ORIGINAL, "model": MODEL}, delay=0)
        proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
        deadline = time.monotonic() + 60
        while True:
            try:
                if healthy(f["base"]) == 2:
                    break
            except OSError:
                pass
            assert time.monotonic() < deadline and proc.poll() is None, "smg did not become ready"
            time.sleep(0.3)
        yield f
    finally:
        if proc is not None:
            os.killpg(proc.pid, signal.SIGTERM)
            proc.wait(10)
        for h in HOSTS:  # the pid file is written at each start, before its canary
            try:
                with open(os.path.join(f["state"], h, "pid")) as fh:
                    os.killpg(int(fh.read()), signal.SIGTERM)
            except (OSError, ValueError):
                pass


def successes(fleet_):
    return router.parse_worker_successes(urllib.request.urlopen(fleet_["metrics"], timeout=5).read().decode())


def under_load(fleet_, action):
    """``action()`` while serving_bench drives load through the router; returns its result and the load's totals,
    with the requests each host answered through the router (``per_host``)."""
    before = successes(fleet_)
    totals = {"sent": 0, "completed": 0, "failed": {}, "runs": 0, "runs_without_results": []}
    stop = threading.Event()
    tmp = os.path.join(fleet_["state"], "bench-%d" % time.monotonic_ns())
    os.makedirs(tmp)
    t = threading.Thread(target=load, args=(fleet_["base"], "fake-model", stop, totals, tmp))
    t.start()
    try:
        time.sleep(2)
        result = action()
        time.sleep(2)
    finally:
        stop.set()
        t.join()
    spread = router.spread(before, successes(fleet_))
    totals["per_host"] = dict((h, spread.get(fleet.worker_url("127.0.0.1", fleet_["ports"][h]), 0)) for h in HOSTS)
    assert totals["runs"] >= 2 and totals["sent"] > 0, totals
    assert all(totals["per_host"].values()), "the load did not reach every host: %s" % totals
    return result, totals


def deploy(fleet_, extra):
    env = harness.ansible_env(ANSIBLE_COLLECTIONS_PATH=fleet_["collections"])
    return roll(fleet_["inventory"], extra, env=env)


def test_roll_under_load_through_the_router_loses_no_request(fleet_):
    before = dict((h, state(fleet_, h)[1]) for h in HOSTS)
    (rc, out, wall), totals = under_load(fleet_, lambda: deploy(fleet_, {"sglang_options": CHANGED, "roll_serial": 1,
                                                                         "roll_capacity_floor": 1}))
    report = dict(summary(rc, out, wall, totals), per_host=totals["per_host"])
    print(json.dumps(report))
    assert rc == 0, out[-4000:]
    assert totals["failed"] == {} and totals["completed"] == totals["sent"], report
    for h in HOSTS:  # every host restarted on the changed configuration, one batch after the other
        config, pid = state(fleet_, h)
        assert config["options"] == CHANGED and pid != before[h], (h, config, pid)
    assert sorted(report["out_of_router_s"]) == HOSTS, report
    assert all(s >= START_DELAY for s in report["out_of_router_s"].values()), report
    flat = " ".join(out.split())
    drained = [(m.group(1), m.start()) for m in
               re.finditer(r"drain this host out of the router[^]]*\] \**\s*changed: \[(\w+) ", flat)]
    back = [(m.group(1), m.start()) for m in
            re.finditer(r"back into the router, a request through it reaching this host\] \**\s*changed: \[(\w+) ", flat)]
    assert [h for h, _at in drained] == [h for h, _at in back] == HOSTS, (drained, back)
    assert drained[0][1] < back[0][1] < drained[1][1] < back[1][1], "w2 went out of the router before w1 was back"
    assert healthy(fleet_["base"]) == 2


def test_a_roll_that_fails_the_canary_halts_with_the_fleet_serving(fleet_):
    before = dict((h, state(fleet_, h)) for h in HOSTS)
    nan = {"sglang_model_path": "/var/lib/sglang/models/nan", "roll_serial": 1, "roll_capacity_floor": 1}
    (rc, out, wall), totals = under_load(fleet_, lambda: deploy(fleet_, nan))
    report = dict(summary(rc, out, wall, totals), per_host=totals["per_host"])
    print(json.dumps(report))
    assert rc != 0 and report["halted_at"] == ["w1"], out[-4000:]
    assert totals["failed"] == {} and totals["completed"] == totals["sent"], report
    assert state(fleet_, "w1")[0] == before["w1"][0], "w1 does not serve its last-known-good configuration"
    assert state(fleet_, "w1")[1] != before["w1"][1], "w1 was not restarted"
    assert state(fleet_, "w2") == before["w2"], "the roll touched w2 after w1 had failed"
    assert "w2" not in dict(re.findall(r"^(\S+)\s+: (ok=.*)$", out, re.M)), "the roll reached w2"
    assert healthy(fleet_["base"]) == 2, "the failed host is not back behind the router"


def test_control_a_restart_without_the_drain_loses_requests(fleet_):
    """Without the roll (no drain), the same restart under the same load loses requests: the proof above can fail."""
    config = {"options": ORIGINAL, "model": MODEL}
    _out, totals = under_load(fleet_, lambda: restart(fleet_, "w1", config))
    print(json.dumps(totals))
    assert totals["completed"] < totals["sent"], totals

# -*- coding: utf-8 -*-
# Copyright: gpuhost.sglang contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""A two-rank multi-node replica on two test hosts, deployed by playbooks/deploy.yml.

No CPU engine runs multi-node, so each rank runs the stand-in rank (roles/sglang/files/gpuhost_replica.py,
sglang_launch_module=gpuhost_replica) under the role's real unit, launcher and peer watch; everything before the
launch is the production path: SGLang 0.5.23 pre-staged in the engine venv (the parser venv of
tests/fixtures/sglang-venv.sh, put on the venv's path), each rank's argv validated by SGLang's own parser on its
host before any restart, the gate through rank 0 (readiness, canary), the replica rolled as one unit.

Cases, in order on the same two hosts: first deploy (rank 0 started first, rank 1 joins, rank 0 serves) ->
kill -9 rank 1: both ranks restart and the replica serves again (times printed) -> a roll of a changed option ->
a configuration whose canary fails: every rank rolled back to last-known-good, in order.
``python tests/integration/test_multinode_replica.py`` runs the cases and prints the figures.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import json
import os
import re
import subprocess
import sys
import time

import pytest

from ansible_collections.gpuhost.sglang.tests import harness

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from test_replica_restart_hosts import data_plane, ssh  # noqa: E402  (shared with the CI-sized test)

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
TESTHOST = os.path.join(ROOT, "tests", "hosts", "testhost.py")
SITE = os.path.join(os.environ.get("SGLANG_VENV") or os.path.join(ROOT, ".cache", "sglang-venv"), "lib", "python3.11", "site-packages")
MODELS = os.path.join(ROOT, ".cache", "tinymodel")
ENV = dict(os.environ, GPUHOST_TESTHOST_TAG=os.environ.get("GPUHOST_TESTHOST_TAG", "im"))
NAMES = ["mnr0", "mnr1"]

# ~15 min on the loaded 2-core machine (three deploys): past the CI budget; the CI-sized restart-together test is
# tests/integration/test_replica_restart_hosts.py
pytestmark = [pytest.mark.testhosts, pytest.mark.sglang, pytest.mark.long]

if not (os.path.isdir(os.path.join(SITE, "sglang")) and os.path.isfile(os.path.join(MODELS, "good", "config.json"))):
    pytestmark.append(pytest.mark.skip(reason="fixtures missing: tests/fixtures/sglang-venv.sh and tinymodel.sh"))

# The engine venv of this version (the role's default sglang_venv, one venv per engine version)
VENV = "/opt/sglang/venv-sglang-0.5.23"
# The engine as pre-staged: the role's install request for it, so the role finds it installed (tasks/install.yml)
STAMP = {"packages": ["sglang==0.5.23"], "requirements": "", "requirements_sha1": "", "extra_args": []}

GROUP_VARS = """---
sglang_engine: sglang
sglang_version: "0.5.23"
sglang_launch_module: gpuhost_replica
sglang_replica_group: replica_a
sglang_dist_port: 5757
sglang_dist_ifname: dp0
sglang_replica_watch_port: 5999
sglang_replica_join_timeout: 120
sglang_model_source: controller
sglang_model_controller_dir: %(models)s/good
sglang_model_path: /var/lib/sglang/models/tiny
sglang_listen_address: 0.0.0.0
sglang_port: 30000
sglang_gpu_arch: none
sglang_use_profile: false
sglang_metrics: false
sglang_toolchain_c: none
sglang_toolchain_cuda: none
sglang_cuda_driver_check: false
sglang_ready_timeout: 240
sglang_restart_sec: 2
sglang_options:
  tp-size: 2
  max-running-requests: 8
sglang_environment:
  GPUHOST_STANDIN_ANSWERS: /etc/sglang/standin-answers.json
  GPUHOST_STANDIN_COLLECTIVE_TIMEOUT: "600"
"""


def stage_engine(host):
    """SGLang 0.5.23 (the parser venv, bound read-only) on the engine venv's path, uvicorn/fastapi from the
    wheelhouse, the stand-in's canary answers."""
    sys.path.insert(0, os.path.join(ROOT, "plugins", "module_utils", "bench"))
    from probes import DEFAULT_PROBES  # pylint: disable=import-outside-toplevel
    answers = dict((p["prompt"], " " + p["expect"] + ".") for p in DEFAULT_PROBES)
    answers.update((p["question"], p["expect"] + ".") for p in DEFAULT_PROBES)
    # the same prompts answered wrong: a configuration that points the stand-in here fails the canary
    wrong = json.dumps(dict((k, " Nope.") for k in answers))
    answers = json.dumps(answers)
    ssh(host, "set -e; apt-get install -y -qq python3-venv >/dev/null 2>&1 || true; python3 -m venv %(v)s; "
              "echo /opt/sglang-site > %(v)s/lib/python3.11/site-packages/zz-sglang-0.5.23.pth; "
              "%(v)s/bin/pip install -q --no-index --find-links /opt/wheelhouse uvicorn fastapi; "
              "echo '%(stamp)s' > %(v)s/.gpuhost-install.json; mkdir -p /etc/sglang; "
              "echo '%(answers)s' > /etc/sglang/standin-answers.json; echo '%(wrong)s' > /etc/sglang/standin-wrong.json; "
              "chmod 0644 /etc/sglang/standin-answers.json /etc/sglang/standin-wrong.json"
        % {"v": VENV, "stamp": json.dumps(STAMP), "answers": answers.replace("'", ""), "wrong": wrong.replace("'", "")})


DATA_PLANE = ["10.233.7.1", "10.233.7.2"]


def create_hosts(tmp):
    subprocess.run([sys.executable, TESTHOST, "prepare"], env=ENV, check=True, capture_output=True)
    hosts = []
    for name in NAMES:
        proc = subprocess.run([sys.executable, TESTHOST, "create", name, "--bind-ro", SITE + ":/opt/sglang-site",
                               "--bind-ro", os.path.join(ROOT, ".cache", "wheelhouse") + ":/opt/wheelhouse"],
                              env=ENV, check=True, capture_output=True, text=True)
        hosts.append(json.loads(proc.stdout.strip().splitlines()[-1]))
    data_plane(["%s-%s" % (ENV["GPUHOST_TESTHOST_TAG"], h["name"]) for h in hosts], DATA_PLANE)
    os.makedirs(os.path.join(tmp, "group_vars"), exist_ok=True)
    lines = ["all:", "  children:", "    sglang_servers:", "      children:", "        replica_a:", "          hosts:"]
    for h in hosts:
        lines += ["            %s:" % h["name"], "              ansible_host: %s" % h["address"],
                  "              ansible_user: root", "              ansible_ssh_private_key_file: %s" % h["identity_file"],
                  "              ansible_python_interpreter: /usr/bin/python3",
                  "              sglang_dist_address: %s" % DATA_PLANE[hosts.index(h)]]
    with open(os.path.join(tmp, "hosts.yml"), "w") as fh:
        fh.write("\n".join(lines) + "\n")
    with open(os.path.join(tmp, "group_vars", "sglang_servers.yml"), "w") as fh:
        fh.write(GROUP_VARS % {"models": MODELS})
    for h in hosts:
        stage_engine(h)
    return hosts, os.path.join(tmp, "hosts.yml")


def destroy_hosts():
    subprocess.run([sys.executable, TESTHOST, "destroy", *NAMES], env=ENV, check=False, capture_output=True)


def deploy(inventory, extra=None):
    cmd = [os.path.join(os.path.dirname(sys.executable), "ansible-playbook"), "-i", inventory,
           os.path.join(ROOT, "playbooks", "deploy.yml"), "-e", "deploy_nccl=false"]
    if extra:
        cmd += ["-e", json.dumps(extra)]
    t0 = time.monotonic()
    proc = subprocess.run(cmd, cwd=ROOT, env=harness.ansible_env(PYTHONUNBUFFERED="1"), capture_output=True,
                          text=True, timeout=1200, check=False)
    return proc.returncode, proc.stdout + proc.stderr, time.monotonic() - t0


def unit(host):
    out = ssh(host, "systemctl show -p MainPID -p ActiveState -p ExecMainStartTimestampMonotonic -p NRestarts sglang.service")
    return dict(line.split("=", 1) for line in out.splitlines())


def models(host):
    return ssh(host, "python3 -c 'import json,urllib.request;print(json.load(urllib.request.urlopen("
                     "\"http://127.0.0.1:30000/v1/models\", timeout=3))[\"data\"][0][\"id\"])'", check=False)


def argv(host):
    return ssh(host, "tr '\\0' ' ' < /proc/$(systemctl show -p MainPID --value sglang.service)/cmdline")


@pytest.fixture(scope="module")
def replica(tmp_path_factory):
    destroy_hosts()
    hosts, inventory = create_hosts(str(tmp_path_factory.mktemp("mn")))
    try:
        yield hosts, inventory
    finally:
        destroy_hosts()


def first_deploy(replica):
    hosts, inventory = replica
    rc, out, secs = deploy(inventory)
    assert rc == 0, out[-4000:]
    r0, r1 = unit(hosts[0]), unit(hosts[1])
    assert r0["ActiveState"] == r1["ActiveState"] == "active"
    # rank 0 was started first; rank 1 joined it
    assert int(r0["ExecMainStartTimestampMonotonic"]) < int(r1["ExecMainStartTimestampMonotonic"])
    assert "--node-rank 0" in argv(hosts[0]) and "--node-rank 1" in argv(hosts[1])
    assert "--dist-init-addr %s:5757" % DATA_PLANE[0] in argv(hosts[1])
    assert "NCCL_SOCKET_IFNAME=dp0" in ssh(hosts[1], "tr '\\0' '\\n' < /proc/$(systemctl show -p MainPID --value sglang.service)/environ")
    assert models(hosts[0]) == "/var/lib/sglang/models/tiny" and models(hosts[1]) == ""
    assert "candidate 0 passed the gate" in " ".join(out.split())  # the yaml callback folds long messages
    return {"first_deploy_s": round(secs, 1)}


def kill_rank_1(replica):
    hosts, _inventory = replica
    before = [unit(h) for h in hosts]
    t0 = time.monotonic()
    ssh(hosts[1], "kill -9 %s" % before[1]["MainPID"])
    gone = back = None
    while time.monotonic() - t0 < 180:
        now = [unit(h) for h in hosts]
        if gone is None and now[0]["MainPID"] != before[0]["MainPID"]:
            gone = time.monotonic() - t0
        if gone is not None and models(hosts[0]) and all(n["ActiveState"] == "active" for n in now) \
                and all(n["MainPID"] != b["MainPID"] for n, b in zip(now, before)):
            back = time.monotonic() - t0
            break
        time.sleep(0.5)
    assert gone is not None, "rank 0 did not restart after rank 1 was killed"
    assert back is not None, "the replica did not serve again within 180 s"
    journal = ssh(hosts[0], "journalctl -u sglang.service --since '-5min' -o cat")
    assert "peer watch: rank 1 lost; aborting" in journal
    now = [unit(h) for h in hosts]
    return {"rank0_restarted_after_s": round(gone, 1), "replica_serving_again_after_s": round(back, 1),
            "nrestarts": [n["NRestarts"] for n in now]}


def roll_changed_option(replica):
    hosts, inventory = replica
    before = [unit(h) for h in hosts]
    rc, out, secs = deploy(inventory, {"sglang_options": {"tp-size": 2, "max-running-requests": 32}})
    assert rc == 0, out[-4000:]
    after = [unit(h) for h in hosts]
    assert all(a["MainPID"] != b["MainPID"] for a, b in zip(after, before))
    assert "--max-running-requests 32" in argv(hosts[0]) and "--max-running-requests 32" in argv(hosts[1])
    assert int(after[0]["ExecMainStartTimestampMonotonic"]) < int(after[1]["ExecMainStartTimestampMonotonic"])
    assert models(hosts[0]) == "/var/lib/sglang/models/tiny"
    plan = re.findall(r"batch \d+: [^'\n\"]*", out)
    return {"roll_s": round(secs, 1), "plan": plan[:2]}


def canary_failure_rolls_back(replica):
    """A configuration whose canary fails on rank 0: every rank gets last-known-good back (the previous roll's
    configuration), restarted in the same order, proven through rank 0."""
    hosts, inventory = replica
    before = [argv(h) for h in hosts]
    rc, out, secs = deploy(inventory, {"sglang_options": {"tp-size": 2, "max-running-requests": 32},
                                       "sglang_environment": {"GPUHOST_STANDIN_ANSWERS": "/etc/sglang/standin-wrong.json",
                                                              "GPUHOST_STANDIN_COLLECTIVE_TIMEOUT": "600"}})
    text = " ".join(out.split())
    assert rc != 0, out[-4000:]
    assert "incoherent" in text and "Rolled back to last-known-good sglang.service at http://127.0.0.1:30000: ready, canary passed." in text, out[-4000:]
    after = [unit(h) for h in hosts]
    assert all(a["ActiveState"] == "active" for a in after) and [argv(h) for h in hosts] == before
    assert int(after[0]["ExecMainStartTimestampMonotonic"]) < int(after[1]["ExecMainStartTimestampMonotonic"])
    assert "standin-wrong" not in ssh(hosts[0], "cat /etc/sglang/sglang.env") and models(hosts[0]) == "/var/lib/sglang/models/tiny"
    return {"failed_deploy_with_rollback_s": round(secs, 1)}


def test_replica_deploys_in_rank_order(replica):
    print(first_deploy(replica))


def test_killed_rank_restarts_the_replica(replica):
    print(kill_rank_1(replica))


def test_roll_of_a_changed_option(replica):
    print(roll_changed_option(replica))


def test_a_failing_canary_rolls_every_rank_back(replica):
    print(canary_failure_rolls_back(replica))


if __name__ == "__main__":
    import tempfile
    destroy_hosts()
    rep = create_hosts(tempfile.mkdtemp(prefix="mn-"))
    try:
        for case in (first_deploy, kill_rank_1, roll_changed_option, canary_failure_rolls_back):
            print(case.__name__, json.dumps(case(rep)), flush=True)
    finally:
        if os.environ.get("KEEP") != "1":
            destroy_hosts()

# -*- coding: utf-8 -*-
# Copyright: gpuhost.sglang contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The serving role's gate on a real Debian 12 host with the real CPU engine (issue 5, "Tests").

Cases, in order on one host (each restart of the engine is real):
  good config passes the gate -> second run changed=0 -> misspelled flag rejected before any restart ->
  a config that fails to start is rolled back -> NaN model fails the canary and is rolled back ->
  random-weights model fails the canary and is rolled back -> the fallback chain takes its second entry.
After every case the server answering is checked to be the last-known-good one (its unit file, its model,
its answers to the probes).

Needs root, the cached test-host rootfs, the engine wheelhouse and the tiny model (tests/stages/20-fixtures.sh).
By default it creates its own host; with GPUHOST_ROLE_TEST_SANDBOX=1 it runs on the sandbox host that
`make sandbox` deployed (tests/stages/50-sandbox.sh does that, saving a second engine install).
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import json
import os
import re
import subprocess
import sys

import pytest

from ansible_collections.gpuhost.sglang.tests import harness

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
TESTHOST = os.path.join(ROOT, "tests", "hosts", "testhost.py")
WHEELHOUSE = os.path.join(ROOT, ".cache", "wheelhouse")
MODELS = os.path.join(ROOT, ".cache", "tinymodel")
ENV = dict(os.environ, GPUHOST_TESTHOST_TAG="ir")
USE_SANDBOX = os.environ.get("GPUHOST_ROLE_TEST_SANDBOX") == "1"
NAME = "sandbox" if USE_SANDBOX else "sgrole"
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
    if USE_SANDBOX:
        yield dict(SANDBOX)
        return
    info = create_host(NAME, ENV, tmp_path_factory)
    try:
        yield info
    finally:
        subprocess.run([sys.executable, TESTHOST, "destroy", NAME], env=ENV, check=False, capture_output=True)


def deploy(host, extra=None):
    cmd = [os.path.join(os.path.dirname(sys.executable), "ansible-playbook"), "-i", host["inventory"],
           os.path.join(ROOT, "playbooks", "deploy.yml")]
    if extra:
        cmd += ["-e", json.dumps(extra)]
    env = harness.ansible_env()
    proc = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=1500, check=False)
    recap = re.search(r"^%s\s+:\s+(.*)$" % NAME, proc.stdout, re.M)
    counts = dict((k, int(v)) for k, v in re.findall(r"(\w+)=(\d+)", recap.group(1))) if recap else {}
    # the yaml callback folds long messages: compare with whitespace collapsed
    return proc.returncode, " ".join((proc.stdout + proc.stderr).split()), counts


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


def test_good_config_passes_the_gate(host):
    rc, out, counts = deploy(host)
    assert rc == 0, out[-3000:]
    assert "candidate 0 passed the gate" in out
    assert_lkg_serving(host)


def test_second_run_changes_nothing(host):
    rc, out, counts = deploy(host)
    assert rc == 0, out[-3000:]
    assert counts.get("changed") == 0, out[-3000:]


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
    assert rc != 0
    assert "No candidate passed the gate" in out
    assert re.search(r"candidate 0 .*: (startup_failure|model_load|not_running|timeout)", out), out[-3000:]
    assert "Rolled back to last-known-good: ready" in out
    assert_lkg_serving(host)


@pytest.mark.parametrize("broken", ["nan", "random"])
def test_broken_model_fails_the_canary_and_is_rolled_back(host, broken):
    extra = {"sglang_model_controller_dir": os.path.join(MODELS, broken),
             "sglang_model_path": "/var/lib/sglang/models/%s" % broken}
    rc, out, _counts = deploy(host, extra)
    assert rc != 0
    assert "No candidate passed the gate" in out
    assert re.search(r"candidate 0 .*: incoherent", out), out[-3000:]
    assert "Rolled back to last-known-good: ready" in out
    assert_lkg_serving(host)


def test_fallback_chain_takes_the_second_entry(host):
    cuda = {"device": "cuda", "continuous-batching": True, "cb-num-blocks": 256, "cb-max-batch-tokens": 2048}
    rc, out, _counts = deploy(host, {"sglang_options": cuda, "sglang_fallback_chain": [{"device": "cpu"}]})
    assert rc == 0, out[-3000:]
    assert "candidate 1 passed the gate" in out
    assert_lkg_serving(host)

# -*- coding: utf-8 -*-
# Copyright: gpuhost.sglang contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The host side of the deploy transaction (plugins/module_utils/serving/unit_host.py) in a scratch root with a
recorded systemctl: a replica rank's state (the unit's MainPID beside the peer watch's file) and a restore that
leaves the restart to the replica's ordered phases."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import json
import os

import pytest

from ansible_collections.gpuhost.sglang.plugins.module_utils.serving import unit_host


class Systemctl(object):
    def __init__(self, show="ActiveState=active\nMainPID=4242\n"):
        self.calls, self.show = [], show

    def __call__(self, argv):
        self.calls.append(argv[1:])
        return 0, self.show if argv[1] == "show" else "", ""


@pytest.mark.parametrize("content,expect", [
    (json.dumps({"all_joined": True, "pid": 4242}), {"all_joined": True, "pid": 4242}),
    ("{torn", None),
    (None, None),
])
def test_rank_state_reads_the_unit_and_the_peer_watch(tmp_path, content, expect):
    root = str(tmp_path)
    if content is not None:
        os.makedirs(os.path.join(root, "var/lib/sglang"))
        with open(os.path.join(root, "var/lib/sglang/replica.json"), "w") as fh:
            fh.write(content)
    out = unit_host.rank_state(root, Systemctl(), "sglang.service", "/var/lib/sglang/replica.json")
    assert out == {"active": "active", "pid": 4242, "replica": expect}


def test_inspect_says_what_the_transaction_reads_and_no_more(tmp_path):
    out = unit_host.inspect(str(tmp_path), Systemctl(), "sglang.service", "/etc/systemd/system", "/etc/sglang/sglang.env",
                            "/etc/sglang/last-known-good")
    # files: the sha256 (or None) of each file the deploy owns, which playbooks/tune.yml's "host untouched" check reads
    assert sorted(out) == ["active", "clock", "files", "invocation", "live_is_lkg", "lkg", "lkg_problem"]
    assert out["files"] and all(v is None for v in out["files"].values()), out["files"]


@pytest.mark.parametrize("show, expect", [
    ("ActiveState=active\nMainPID=4242\nInvocationID=5f0c0c6a2b6e4e4f9d1c3a7b8e9f0a1b\n", "5f0c0c6a2b6e4e4f9d1c3a7b8e9f0a1b"),
    ("ActiveState=activating\nMainPID=4242\nInvocationID=5f0c0c6a2b6e4e4f9d1c3a7b8e9f0a1b\n", ""),
    ("ActiveState=inactive\nMainPID=0\nInvocationID=\n", ""),
])
def test_the_invocation_vouches_for_an_active_process_only(tmp_path, show, expect):
    """inspect reads the live process's systemd invocation, and record stores it with the record: the no-op deploy
    compares the two (a process still starting, or none, vouches for nothing)."""
    run = Systemctl(show)
    out = unit_host.inspect(str(tmp_path), run, "sglang.service", "/etc/systemd/system", "/etc/sglang/sglang.env",
                            "/etc/sglang/last-known-good")
    assert out["invocation"] == expect
    assert run.calls == [["show", "-p", "ActiveState,MainPID,InvocationID", "sglang.service"]]
    root = str(tmp_path)
    unit_host.ensure_file(root, "/etc/systemd/system/sglang.service", "[Service]\n", 0o644, False)
    unit_host.ensure_file(root, "/etc/sglang/sglang.env", "A=1\n", 0o600, False)
    unit_host.record(root, run, "/etc/sglang/last-known-good", {"unit": "sglang.service"}, "sglang.service",
                     "/etc/systemd/system", "/etc/sglang/sglang.env", "[Service]\n", [], "", "", "", False)
    assert json.loads(unit_host.read_text(root, "/etc/sglang/last-known-good/meta.json"))["invocation"] == expect
    # another process later (a crash restart): written, and not reported as a change of the configuration
    again = unit_host.record(root, Systemctl("ActiveState=active\nInvocationID=0123\n"), "/etc/sglang/last-known-good",
                             {"unit": "sglang.service"}, "sglang.service", "/etc/systemd/system", "/etc/sglang/sglang.env",
                             "[Service]\n", [], "", "", "", False)
    assert again == [] and json.loads(unit_host.read_text(root, "/etc/sglang/last-known-good/meta.json"))["invocation"] == "0123"


@pytest.mark.parametrize("restart_it", [True, False])
def test_restore_writes_the_record_back_and_restarts_only_when_asked(tmp_path, restart_it):
    root, run = str(tmp_path), Systemctl()
    lkg = {"unit": "sglang.service", "unit_path": "/etc/systemd/system/sglang.service", "env_file": "/etc/sglang/sglang.env",
           "unit_b64": unit_host.b64("[Service]\nExecStart=old\n"), "env_b64": unit_host.b64("A=1\n")}
    unit_host.restore(root, run, lkg, "sglang.service", "/etc/systemd/system", "/etc/sglang/sglang.env", False, restart_it)
    assert unit_host.read_text(root, "/etc/systemd/system/sglang.service") == "[Service]\nExecStart=old\n"
    assert unit_host.read_text(root, "/etc/sglang/sglang.env") == "A=1\n"
    assert (["restart", "--no-block", "sglang.service"] in run.calls) is restart_it


@pytest.mark.parametrize("live_unit, live_env, expect", [
    ("[Service]\nExecStart=a\n", "A=1\n", {"unit_changed": False, "env_changed": False}),
    ("[Service]\nExecStart=old\n", "A=1\n", {"unit_changed": True, "env_changed": False}),
    ("[Service]\nExecStart=a\n", None, {"unit_changed": False, "env_changed": True}),
])
def test_inspect_previews_an_install_without_writing(tmp_path, live_unit, live_env, expect):
    root = str(tmp_path)
    unit_host.write_atomic(root, "/etc/systemd/system/sglang.service", live_unit, 0o644)
    if live_env is not None:
        unit_host.write_atomic(root, "/etc/sglang/sglang.env", live_env, 0o600)
    out = unit_host.inspect(root, Systemctl(), "sglang.service", "/etc/systemd/system", "/etc/sglang/sglang.env",
                            "/etc/sglang/last-known-good", {"unit_content": "[Service]\nExecStart=a\n", "env_content": "A=1\n"})
    assert out["preview"] == expect
    assert unit_host.read_text(root, "/etc/systemd/system/sglang.service") == live_unit
    assert unit_host.read_text(root, "/etc/sglang/sglang.env") == live_env


class FakeAction(object):
    """What ModuleHost (plugins/action/serving_deploy.py) calls: _execute_module, answered from a table."""

    def __init__(self, preview, ready=None):
        self.calls, self.preview, self.ready, self.args = [], preview, ready, []
        self.inspect_extra = {}

    def _execute_module(self, module_name, module_args, task_vars):
        self.calls.append((module_name.rpartition(".")[2], module_args.get("op")))
        self.args.append(dict(module_args))
        if module_args.get("op") == "inspect":
            out = {"lkg": {}, "active": "active", "clock": 1, "live_is_lkg": True, "preview": self.preview}
            out.update(self.inspect_extra)
            if module_args.get("health_url") and self.ready:
                out["ready"] = self.ready
            return out
        if module_name.endswith("serving_ready"):
            return {"state": "ready", "health": "200 (waited)"}
        return {"unit_changed": True, "env_changed": False}


MODULE_HOST_ARGS = {"unit": "sglang.service", "unit_dir": "/etc/systemd/system", "env_file": "/etc/sglang/sglang.env",
                    "lkg_dir": "/etc/sglang/lkg", "env_content": "A=1\n", "candidates": [{"unit_content": "U0"}],
                    "health_url": "http://127.0.0.1:30000/health", "api_key": ""}


@pytest.mark.parametrize("ready, phase, since, unit, waits", [
    ({"state": "ready", "health": "200"}, "all", 1, "sglang.service", 0),      # the no-op: answered by inspect
    ({"state": "starting", "health": "503"}, "all", 1, "sglang.service", 1),   # not ready then: a real wait
    ({"state": "ready", "health": "200"}, "all", 7, "sglang.service", 1),      # after a restart (another clock)
    ({"state": "ready", "health": "200"}, "all", 1, "sglang-b.service", 1),    # another unit
    ({"state": "ready", "health": "200"}, "gate", 1, "sglang.service", 1),     # a replica phase: no look at inspect
])
def test_module_host_takes_readiness_from_the_inspect_call_only_for_the_same_unit_and_clock(ready, phase, since, unit, waits):
    from ansible_collections.gpuhost.sglang.plugins.action.serving_deploy import ModuleHost
    action = FakeAction({"unit_changed": False, "env_changed": False}, ready)
    host = ModuleHost(action, {"inventory_hostname": "h1"}, dict(MODULE_HOST_ARGS, phase=phase))
    host.inspect()
    assert ("health_url" in action.args[0]) is (phase == "all")
    res = host.wait_ready(unit, MODULE_HOST_ARGS["health_url"], since, 60)
    assert action.calls.count(("serving_ready", None)) == waits
    assert res["state"] == "ready" and res["health"] == ("200" if waits == 0 else "200 (waited)")
    host.wait_ready("sglang.service", MODULE_HOST_ARGS["health_url"], 1, 60)   # the look answers once only
    assert action.calls.count(("serving_ready", None)) == waits + 1


def test_a_no_op_deploy_takes_readiness_from_the_inspect_call_whatever_its_clock():
    """The whole transaction over the module host: a no-op (nothing to install, the process that passed the gate)
    makes no serving_ready call, also when inspect's host clock has microseconds (the transaction once cut them off,
    and the look no longer matched: one serving_ready call more on every no-op)."""
    from ansible_collections.gpuhost.sglang.plugins.action.serving_deploy import ModuleHost
    from ansible_collections.gpuhost.sglang.plugins.plugin_utils.deploy import DeployTransaction
    action = FakeAction({"unit_changed": False, "env_changed": False}, {"state": "ready", "health": "200"})
    action.inspect_extra = {"clock": 1796322745.654321, "invocation": "inv-1",
                            "lkg": {"unit": "sglang.service", "invocation": "inv-1", "argv": ["serve"]}}
    host = ModuleHost(action, {"inventory_hostname": "h1"}, dict(MODULE_HOST_ARGS))
    spec = dict(MODULE_HOST_ARGS, candidates=[{"options": {}, "argv": ["serve"], "unit_content": "U0"}],
                base_url="http://127.0.0.1:30000", ready_timeout=60, probes=True, lkg_update=False, host="h1",
                meta={"engine": "sglang", "engine_version": "0.5.17"}, timeout_start_sec_min=300)
    out = DeployTransaction(host, spec).run()
    assert out["changed"] is False and [a["outcome"] for a in out["attempts"]] == ["passed"], out
    assert ("serving_ready", None) not in action.calls, action.calls


def test_module_host_forgets_the_inspect_look_once_the_host_changed():
    """A restart in the same second as inspect gives the same clock: the look must not answer for the new process."""
    from ansible_collections.gpuhost.sglang.plugins.action.serving_deploy import ModuleHost
    action = FakeAction({"unit_changed": True, "env_changed": False}, {"state": "ready", "health": "200"})
    host = ModuleHost(action, {"inventory_hostname": "h1"}, dict(MODULE_HOST_ARGS, phase="all"))
    host.inspect()
    host.install("U0")
    host.restart("")
    host.wait_ready("sglang.service", MODULE_HOST_ARGS["health_url"], 1, 60)
    assert action.calls.count(("serving_ready", None)) == 1


@pytest.mark.parametrize("preview, second_content, install_calls", [
    ({"unit_changed": False, "env_changed": False}, "U0", 0),   # the no-op: inspect answered for the install
    ({"unit_changed": False, "env_changed": False}, "U1", 1),   # another candidate's content: its own call
    ({"unit_changed": False, "env_changed": True}, "U0", 1),    # something would change: the real install
])
def test_module_host_installs_the_first_candidate_in_the_inspect_call_when_nothing_changes(
        preview, second_content, install_calls):
    from ansible_collections.gpuhost.sglang.plugins.action.serving_deploy import ModuleHost
    action = FakeAction(preview)
    host = ModuleHost(action, {"inventory_hostname": "h1"}, dict(MODULE_HOST_ARGS))
    host.inspect()
    first = host.install(second_content)
    assert action.calls.count(("serving_unit", "install")) == install_calls
    assert first["unit_changed"] is (install_calls == 1)
    host.install("U0")   # a later install always calls: the preview held for one install only
    assert action.calls.count(("serving_unit", "install")) == install_calls + 1


class CanaryAction(object):
    def __init__(self, answer):
        self.calls, self.answer = [], answer

    def _execute_module(self, module_name, module_args, task_vars):
        self.calls.append((module_name.rpartition(".")[2], dict(module_args), task_vars["ansible_python_interpreter"]))
        return self.answer


@pytest.mark.parametrize("answer, problems", [
    ({"failed_apis": [], "apis": {}}, []),
    ({"failed": True, "failed_apis": ["chat"], "apis": {"chat": {"msg": "serving_bench failed [incoherent]: x"}},
      "msg": "serving_bench failed [incoherent]: x"}, ["serving_bench failed [incoherent]: x"]),
    ({"failed": True, "msg": "MODULE FAILURE: no python"}, ["MODULE FAILURE: no python"]),
])
def test_module_host_canary_is_one_call_for_every_gate_api(answer, problems):
    from ansible_collections.gpuhost.sglang.plugins.action.serving_deploy import ModuleHost
    action = CanaryAction(answer)
    args = {"canary": {"apis": ["completions", "chat"], "probe_max_tokens": 32}, "api_key": "",
            "canary_python": "/opt/sglang/venv/bin/python"}
    assert ModuleHost(action, {"inventory_hostname": "h1"}, args).canary("http://127.0.0.1:30000") == problems
    [(module, margs, python)] = action.calls
    assert module == "serving_bench" and margs["probe_apis"] == ["completions", "chat"] and margs["probes_only"]
    assert python == "/opt/sglang/venv/bin/python" and margs["probe_max_tokens"] == 32

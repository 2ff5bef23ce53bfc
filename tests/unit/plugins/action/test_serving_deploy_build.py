# -*- coding: utf-8 -*-
# Copyright: gpuhost.sglang contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The serving_deploy action builds its own candidates from the role's inputs (``build``): one server_args call for
every option set (the module run as Ansible runs it, against the stand-in sglang parser), each unit file rendered
from the template by the template lookup with ExecStart from the argv the parser checked, then the transaction over
a host in memory (tests/harness/fake_deploy_host.py)."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import json
import os
import sys
from unittest import mock

import pytest
from ansible.errors import AnsibleActionFail
from ansible.parsing.dataloader import DataLoader
from ansible.plugins import loader as plugin_loader
from ansible.template import Templar

from ansible_collections.gpuhost.sglang.plugins.action.serving_deploy import ActionModule, check_args
from ansible_collections.gpuhost.sglang.plugins.module_utils.serving.server_args import systemd_exec
from ansible_collections.gpuhost.sglang.tests import harness
from ansible_collections.gpuhost.sglang.tests.harness.fake_deploy_host import FakeHost, unit_text

FAKE_SGLANG = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "modules", "fake_sglang")
PREFIX = ["/opt/sglang/venv/bin/python", "-m", "sglang.launch_server"]
# the unit as the fake host reads it (JSON); the candidate with the host chain's 0.8 is the one that starts
TEMPLATE = ('{"name": "{{ unit_name }}", "port": 30000, "exec": {{ sglang_exec_start | to_json }}, '
            '"behave": "{{ \'ok\' if \'0.8\' in sglang_exec_start or all_ok else \'fail_start\' }}"}')


@pytest.fixture
def setup(tmp_path):
    exe = tmp_path / "python"
    exe.write_text("#!/bin/sh\nPYTHONPATH=%s exec %s \"$@\"\n" % (FAKE_SGLANG, sys.executable))
    exe.chmod(0o755)
    template = tmp_path / "sglang.service.j2"
    template.write_text(TEMPLATE)
    return str(exe), str(template)


def make(setup, phase="all", **over):
    """The action over the stand-in parser and the template lookup; ``calls`` collects its module calls."""
    python, template = setup
    build = {"profile": {"options": {"tp-size": 2}}, "options": {"enable-dsa-fused-indexer": False},
             "fallback_chain": [{"mem-fraction-static": 0.8}], "managed": {"model-path": "/m"}, "prefix": PREFIX,
             "flags": {"negatable": [{"options": ["enable-dsa-fused-indexer"]}]}, "engine_version": "9.9.1",
             "python": python, "unit_template": template}
    build.update(over)
    args = {"unit": "sglang.service", "env_file": "/etc/sglang/sglang.env", "env_content": "HOME=/var/lib/sglang\n",
            "lkg_dir": "/etc/sglang/last-known-good", "health_url": "http://127.0.0.1:30000/health",
            "base_url": "http://127.0.0.1:30000", "canary_python": "/usr/bin/python3", "build": build, "phase": phase}
    if phase != "all":
        args["replica"] = {"rank": 0, "nnodes": 2, "head_address": "10.0.0.1", "dist_port": 5000, "state_file": "/r.json"}
    loader = DataLoader()
    task = mock.MagicMock(args=args, async_val=0, check_mode=False, diff=False)
    # the template lookup itself (its short name: this process has no collection loader for ansible.builtin.*)
    lookups = mock.MagicMock()
    lookups.lookup_loader.get = lambda name, **kw: plugin_loader.lookup_loader.get(name.rpartition(".")[2], **kw)
    act = ActionModule(task, mock.MagicMock(), mock.MagicMock(check_mode=False), loader=loader,
                       templar=Templar(loader=loader), shared_loader_obj=None)
    act._shared_loader_obj = lookups
    calls = []

    def execute(module_name, module_args, task_vars):
        answer = dict(harness.run_module(module_name.rpartition(".")[2], module_args, timeout=120))
        calls.append((module_name, module_args, answer))
        return answer

    act._execute_module = execute
    return act, calls, args


def run(setup, all_ok, **over):
    act, calls, _args = make(setup, **over)
    host = FakeHost()
    host.inventory_name = "box"
    host.serve(unit_text("old"))
    act._deploy_host = lambda task_vars, a: host
    with mock.patch("ansible_collections.gpuhost.sglang.plugins.action.serving_deploy.ActionBase.run", return_value={}):
        res = act.run(task_vars={"unit_name": "new", "all_ok": all_ok})
    return res, calls, host


def test_one_parser_call_and_the_live_unit_runs_the_argv_it_checked(setup):
    res, calls, host = run(setup, all_ok=False)
    assert [name for name, _a, _r in calls] == ["gpuhost.sglang.server_args"]
    sets = calls[0][1]["option_sets"]
    assert len(sets) == 2 and sets[1]["mem-fraction-static"] == 0.8 and calls[0][1]["negatable"] == ["enable-dsa-fused-indexer"]
    checked = calls[0][2]["results"]
    assert [a["outcome"] for a in res["attempts"]] == ["failed", "passed"]
    live = json.loads(host.live())
    assert live["exec"] == systemd_exec(PREFIX + checked[1]["argv"])
    assert "--no-enable-dsa-fused-indexer" in checked[1]["argv"]
    assert json.loads(host.record_meta()["unit_b64"])["exec"] == live["exec"]


def test_a_no_op_of_the_configuration_alone_skips_the_parser(setup):
    argv = PREFIX + ["--no-enable-dsa-fused-indexer", "--model-path", "/m", "--tp-size", "2"]
    res, calls, _host = run(setup, all_ok=True, fallbacks=False, lkg={"argv": argv, "engine_version": "9.9.1"})
    assert calls == [] and res["attempts"][0]["outcome"] == "passed"


def test_a_refused_option_fails_before_the_host_is_touched(setup):
    with pytest.raises(AnsibleActionFail, match=r"1 of 2 option sets have problems: set 1: .*--tp-sise is unknown") as info:
        run(setup, all_ok=True, fallback_chain=[{"tp-sise": 1}])
    assert [r["failed"] for r in info.value.result["results"]] == [False, True]


def test_a_replica_builds_the_configuration_alone_and_parses_it_in_its_first_phase_only(setup):
    """The same candidate in every phase (its unit rendered each time), the parser imported once, in prepare."""
    built = []
    for phase in ("prepare", "stop", "restart"):
        act, calls, args = make(setup, phase=phase)
        a = check_args(dict(args))
        built.append(act._build_candidates(a, {"unit_name": "rank", "all_ok": True}))
        assert [len(m[1]["option_sets"]) for m in calls] == ([1] if phase == "prepare" else [])
    assert built[0] == built[1] == built[2] and len(built[0]) == 1 and built[0][0]["options"] == {}

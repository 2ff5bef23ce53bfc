# -*- coding: utf-8 -*-
# Copyright: gpuhost.sglang contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""playbooks/tune.yml's campaign is tune_loop.CampaignLoop, the loop the GPU machine's launcher runs: the tune_step
action runs it until it needs the serving role, and the test answers each need as tasks/tune_step.yml does (the
role's deploy passed or failed with its attempt's class, the restore). The ladder is serving_bench's BenchRun
replaced by recorded-shape level results (the loop itself is what is under test here; tests/unit/plugins/
plugin_utils/test_tune_loop.py runs it against the stand-in engine, tests/integration/test_tune_sandbox.py through
the playbook on a real host)."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import json
import os
from unittest import mock

import pytest
import yaml

from ansible_collections.gpuhost.sglang.plugins.action import tune_step
from ansible_collections.gpuhost.sglang.plugins.module_utils.gpu import health
from ansible_collections.gpuhost.sglang.plugins.modules import tune_campaign
from ansible_collections.gpuhost.sglang.plugins.plugin_utils import tune_loop
from ansible_collections.gpuhost.sglang.tests.harness import fake_nvml

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..", "..", ".."))
BASE = {"attention-backend": "triton", "max-running-requests": 8}
DOC = {"name": "steps", "base": BASE,
       "space": {"max-running-requests": [16], "cb-num-blocks": ["plenty"], "chunked-prefill-size": [512]},
       "workload": {"concurrency": [1, 4], "input_len": 8, "output_len": 8, "trials": 1, "warmup": 0},
       "objective": {"concurrency": 4}, "adopt": {"enabled": False, "min_improvement": 0.05}}
# output tok/s each candidate's ladder measures (by index)
SPEED = {0: 100.0, 1: 150.0, 3: 120.0}
# gpu_facts' health on the nvidia-h200 machine, from its recorded NVML answers at idle
with open(os.path.join(ROOT, "tests", "unit", "plugins", "module_utils", "gpu", "fixtures", "h200_nvml_health_raw.json")) as fh:
    HEALTH = health.read(fake_nvml.ReplayNVML(json.load(fh)["before"]), kernel_log=([], None))
H200_STATE = {"state": "ok", "p2p": None, "gpus": [{"index": 0, "pcie_max": "gen5 x16", "pcie_width": 16,
                                                    "persistence_mode": True, "problems": []}]}
FA3 = {"outcome": "failed", "class": "unsupported_arch", "message": "Can not import FA3 in sgl_kernel",
       "journal_tail": ["ImportError: Can not import FA3 in sgl_kernel"]}


class Ladder(object):
    """serving_bench's BenchRun for one level (or finalize): a result of the shape serving_bench returns."""
    calls = []

    def __init__(self, params):
        self.p = params
        Ladder.calls.append(params)

    def execute(self):
        if self.p["mode"] == "finalize":
            return type("Res", (), {"failed": False, "msg": "finalized", "out": {}})()
        index = int(self.p["run_id"].split("-")[1])
        tps = SPEED.get(index, 105.0) * (1 + 0.1 * self.p["concurrency"])
        level = {"concurrency": self.p["concurrency"], "completed": 8, "output_throughput": tps, "total_throughput": 2 * tps,
                 "ttft_ms": {"p50": 10.0, "p99": 20.0}, "tpot_ms": {"p50": 5.0}, "itl_ms": {"p99": 6.0},
                 "e2e_ms": {"p99": 90.0}}
        return type("Res", (), {"failed": False, "msg": "ok %.0f tok/s" % tps, "out": {"results": [level]}})()


@pytest.fixture(name="ladder")
def ladder_fixture(monkeypatch):
    Ladder.calls = []
    monkeypatch.setattr(tune_loop, "BenchRun", Ladder)
    return Ladder


def verdicts(plan):
    out = []
    for c in plan["candidates"]:
        bad = c["options"].get("cb-num-blocks") == "plenty"
        out.append({"failed": bad, "argv": ["--x", str(c["index"])], "msg": "--cb-num-blocks: invalid value" if bad else "",
                    "errors": ["--cb-num-blocks: invalid int value: 'plenty'"] if bad else []})
    return out


def action(args):
    """The tune_step action as Ansible runs it (its argument spec checked), gpu_facts on the host a mock."""
    task = mock.MagicMock(args=args, async_val=0, check_mode=False, diff=False)
    connection = mock.MagicMock()
    connection._shell.tmpdir = "/tmp/x"
    act = tune_step.ActionModule(task, connection, mock.MagicMock(check_mode=False), loader=None, templar=None,
                                 shared_loader_obj=None)
    act._execute_module = mock.MagicMock(return_value={"changed": False, "gpu_count": 1, "health": HEALTH})
    return act


def plan_of(state_dir, doc):
    return tune_campaign.run({"action": "plan", "campaign": doc, "base_options": None, "profile_options": {},
                              "state_dir": state_dir}, False)


def play(state_dir, doc, answer, stop_at=None, modules=None):
    """tasks/tune_step.yml's loop: call the action, do what it needs (``answer``: key -> the role's outcome), hand
    the result back; ``stop_at``: a key whose deploy is interrupted (Ctrl-C: nothing answers it). Returns the needs
    in order and the last result."""
    plan = plan_of(state_dir, doc)["plan"]
    v = verdicts(plan)
    modules = [] if modules is None else modules
    answers, needs = {}, []
    for _step in range(len(plan["candidates"]) + 2):
        act = action({"state_dir": state_dir, "plan": plan, "verdicts": v, "base_url": "http://127.0.0.1:9",
                      "answers": answers, "plots": False})
        res = act.run(task_vars={})
        modules.extend(c[1]["module_name"] for c in act._execute_module.call_args_list)
        assert not res.get("failed"), res
        if res["need"] is None:
            return needs, res, act
        needs.append((res["key"], res.get("lkg_update")))
        if res["key"] == stop_at:
            return needs, res, act
        passed = answer.get(res["key"], True)
        answers[res["key"]] = {"t0": res.get("t0"), "passed": passed is True, "failure": None if passed is True else passed,
                               "message": "" if passed is True else passed["message"]}
    raise AssertionError("the loop did not finish: %s" % needs)


def events(state_dir, name="steps"):
    with open(os.path.join(state_dir, name, "state.jsonl")) as f:
        return [json.loads(line) for line in f if line.strip()]


def test_the_playbooks_steps_are_the_loops_rows_report_and_restore(ladder, tmp_path):
    state = str(tmp_path)
    modules = []
    needs, res, _act = play(state, DOC, {"deploy-3": FA3}, modules=modules)
    # the base is what deploy.yml deployed; the rejected candidate is never deployed; then last-known-good back
    assert needs == [("deploy-1", False), ("deploy-3", False), ("restore", None)]
    evs = events(state)
    assert [e["index"] for e in evs if e["event"] == "start"] == [0, 1, 3]  # each candidate began once
    rows = dict((e["index"], e) for e in evs if e["event"] == "row")
    assert dict((i, r["status"]) for i, r in rows.items()) == {0: "ok", 1: "ok", 2: "rejected", 3: "startup_failed"}
    assert rows[3]["class"] == "unsupported_arch" and rows[3]["evidence"]["journal_tail"] == FA3["journal_tail"]
    assert "--cb-num-blocks" in rows[2]["message"]
    assert rows[1]["gpu_health"] == H200_STATE and rows[1]["gpu_degraded"] == []
    assert [lv["concurrency"] for lv in rows[1]["levels"]] == [1, 4]
    # the ladder: two levels of candidates 0 and 1, each run finalized with the health read after it
    assert [(p["run_id"].split("-")[1], p["mode"], p["concurrency"]) for p in ladder.calls] == [
        ("0", "run", 1), ("0", "run", 4), ("0", "finalize", 1), ("1", "run", 1), ("1", "run", 4), ("1", "finalize", 1)]
    assert res["report"]["winner"]["index"] == 1 and res["adopted"] is None and res["restored"]
    assert {"results.md", "results.csv", "results.json", "winner.yml"} <= set(os.listdir(os.path.join(state, "steps")))
    assert modules == ["gpuhost.sglang.gpu_facts"] * 4  # before and after the ladders of 0 and 1, on the host


def test_adoption_is_a_deploy_as_last_known_good_and_then_no_restore(ladder, tmp_path):
    state = str(tmp_path)
    needs, res, _act = play(state, dict(DOC, adopt={"enabled": True, "min_improvement": 0.05}), {"deploy-3": FA3})
    assert needs == [("deploy-1", False), ("deploy-3", False), ("adopt-1", True)]
    assert res["adopted"]["adopted"] is True and res["restored"] is None
    assert [e["index"] for e in events(state) if e["event"] == "adopt"] == [1]


def test_a_winner_that_fails_its_adoption_leaves_last_known_good_restored(ladder, tmp_path):
    state = str(tmp_path)
    needs, res, _act = play(state, dict(DOC, adopt={"enabled": True, "min_improvement": 0.05}),
                            {"deploy-3": FA3, "adopt-1": dict(FA3, message="the canary failed")})
    assert needs == [("deploy-1", False), ("deploy-3", False), ("adopt-1", True), ("restore", None)]
    assert res["adopted"]["adopted"] is False and "winner 1 not adopted: the canary failed" in res["adopted"]["message"]


def test_interrupted_in_a_candidate_resumes_that_candidate_and_nothing_finished(ladder, tmp_path):
    state = str(tmp_path)
    needs, _res, _act = play(state, DOC, {}, stop_at="deploy-3")  # Ctrl-C while candidate 3 deploys
    assert needs == [("deploy-1", False), ("deploy-3", False)]
    again = plan_of(state, DOC)
    assert again["interrupted"] == [3] and sorted(d["index"] for d in again["done"]) == [0, 1, 2]
    needs, res, _act = play(state, DOC, {})
    assert needs == [("deploy-3", False), ("restore", None)]
    rows = dict((e["index"], e) for e in events(state) if e["event"] == "row")
    assert rows[3]["status"] == "ok" and res["report"]["winner"]["index"] == 1


def test_crash_memory_carries_over_to_the_next_campaign_without_a_deploy(ladder, tmp_path):
    """Candidate 3's startup failure (unsupported_arch, FA3) rules out the next campaign's candidate with the same
    attention backend: a row naming the campaign, and the loop never asks the role to deploy it."""
    state = str(tmp_path)
    fa3 = dict(DOC, space={"attention-backend": ["fa3"]})
    needs, _res, _act = play(state, fa3, {"deploy-1": FA3})
    assert needs == [("deploy-1", False), ("restore", None)]
    second = dict(DOC, name="second", space={"attention-backend": ["fa3"], "chunked-prefill-size": [512]})
    needs, _res, _act = play(state, second, {})
    rows = dict((e["index"], e) for e in events(state, "second") if e["event"] == "row")
    assert rows[1]["status"] == "ruled_out" and rows[1]["ruled_out_by_campaign"] == "steps", rows[1]
    assert "unsupported_arch of candidate 1" in rows[1]["message"] and "of campaign steps" in rows[1]["message"]
    assert needs == [("deploy-2", False), ("restore", None)] and rows[2]["status"] == "ok"


def test_a_broken_gpu_reading_is_a_clear_error_not_a_traceback(ladder, tmp_path):
    plan = plan_of(str(tmp_path), DOC)["plan"]
    act = action({"state_dir": str(tmp_path), "plan": plan, "verdicts": verdicts(plan), "base_url": "http://127.0.0.1:9"})
    act._execute_module.return_value = {"failed": True, "msg": "NVML: driver not loaded"}
    res = act.run(task_vars={})
    assert res["failed"] and res["msg"] == "gpu_facts failed on the host: NVML: driver not loaded"


def test_one_loop_the_action_changes_only_the_loops_effects():
    """The playbook's loop class overrides the effects of CampaignLoop, none of its control flow; the playbooks call
    the bookkeeping only to plan, never to begin, record, report or adopt, and run no ladder of their own."""
    effects = {"deploy", "put_back", "gpu_health", "resuming", "started"}
    own = set(k for k in vars(tune_step.PlaybookLoop) if not k.startswith("__"))
    assert own - {"given"} == effects, own
    assert effects <= set(vars(tune_loop.CampaignLoop))
    for control in ("run", "candidate", "adopt", "restore_lkg", "level", "accuracy", "finish"):
        assert getattr(tune_step.PlaybookLoop, control) is getattr(tune_loop.CampaignLoop, control)
    actions = []
    for name in ("tune.yml", os.path.join("tasks", "tune_step.yml")):
        with open(os.path.join(ROOT, "playbooks", name)) as f:
            text = f.read()
        for doc in yaml.safe_load_all(text):
            actions += [t["gpuhost.sglang.tune_campaign"]["action"] for t in walk(doc) if "gpuhost.sglang.tune_campaign" in t]
        assert "gpuhost.sglang.gpu_facts" not in text and "concurrency: \"{{" not in text
    assert sorted(actions) == ["plan", "plan"], actions
    assert not os.path.exists(os.path.join(ROOT, "playbooks", "tasks", "tune_candidate.yml"))


def walk(node):
    if isinstance(node, list):
        for x in node:
            yield from walk(x)
    elif isinstance(node, dict):
        yield node
        for key in ("tasks", "block", "rescue", "always"):
            yield from walk(node.get(key) or [])


def test_the_documented_options_are_the_actions():
    from ansible_collections.gpuhost.sglang.plugins.modules import tune_step as doc  # pylint: disable=import-outside-toplevel
    options = yaml.safe_load(doc.DOCUMENTATION)["options"]
    assert sorted(options) == sorted(tune_step.ARGUMENT_SPEC)
    for name, spec in tune_step.ARGUMENT_SPEC.items():
        assert options[name]["type"] == spec["type"] and options[name].get("default") == spec.get("default"), name
        assert bool(options[name].get("required")) == bool(spec.get("required")), name

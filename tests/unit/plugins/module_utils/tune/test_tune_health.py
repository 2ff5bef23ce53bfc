# -*- coding: utf-8 -*-
# Copyright: gpuhost.sglang contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Tuning campaigns and GPU health: each row carries the health its ladder was measured in, a candidate whose GPUs
were degraded before or during its ladder is gpu_degraded (and runs again on resume), a campaign with such a row
has no winner, a verdict across health states is refused with the reason. Readings come from the fake NVML's
failure states (tests/harness/fake_nvml.py), read through gpu/health.py as gpu_facts reads them."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import json

import pytest

from ansible_collections.gpuhost.sglang.plugins.module_utils.gpu import health
from ansible_collections.gpuhost.sglang.plugins.module_utils.tune import campaign as tc
from ansible_collections.gpuhost.sglang.plugins.module_utils.tune import decide
from ansible_collections.gpuhost.sglang.plugins.module_utils.tune import report
from ansible_collections.gpuhost.sglang.plugins.module_utils.tune.errors import CampaignError
from ansible_collections.gpuhost.sglang.plugins.module_utils.tune.state import CampaignState
from ansible_collections.gpuhost.sglang.plugins.modules import tune_campaign as mod
from ansible_collections.gpuhost.sglang.tests.harness import fake_nvml as fake

DOC = {"name": "h", "space": {"mem-fraction-static": [0.88, 0.95]}, "workload": {"concurrency": [1, 8], "trials": 2},
       "objective": {"concurrency": 8}}
BASE = {"mem-fraction-static": 0.85}


def reading(box):
    return health.read(box, kernel_log=([], None))


OK = reading(fake.h200_box())
THROTTLED = reading(fake.thermal_throttle_box())
NO_NVML = health.read_safely(None)


def level(conc, tput):
    agg = {"output_throughput": {"median": tput, "spread": 0.01, "values": [tput]},
           "ttft_ms.p99": {"median": 50.0, "spread": 0.01, "values": [50.0]},
           "tpot_ms.p50": {"median": 10.0, "spread": 0.01, "values": [10.0]}}
    return {"results": [{"concurrency": conc, "output_throughput": tput, "ttft_ms": {"p99": 50.0, "p50": 25.0},
                         "tpot_ms": {"p50": 10.0}, "itl_ms": {"p99": 20.0}, "e2e_ms": {"p99": 900.0},
                         "trials": {"n": 2, "metrics": agg}}], "failed": False, "failure_class": ""}


def row(plan, i, tput, before=None, after=None):
    """A benched row between two readings (OK when not given; ``after`` defaults to ``before``)."""
    before = OK if before is None else before
    return decide.row_from(plan["candidates"][i], "benched", plan["objective"], levels=[level(1, tput / 4), level(8, tput)],
                           gpu_health=before, gpu_health_after=before if after is None else after)


def test_a_healthy_ladder_records_its_health_beside_the_row():
    plan = tc.load(DOC, BASE)
    r = row(plan, 0, 400)
    assert r["status"] == "ok" and r["gpu_degraded"] == []
    assert r["gpu_health"] == {"state": "ok", "p2p": None, "gpus": [
        {"index": 0, "pcie_max": "gen5 x16", "pcie_width": 16, "persistence_mode": True, "problems": []}]}


def test_gpus_that_degrade_during_the_ladder_void_the_row():
    plan = tc.load(DOC, BASE)
    r = row(plan, 1, 480, after=THROTTLED)
    assert (r["status"], r["class"]) == ("gpu_degraded", "gpu_degraded")
    assert r["gpu_degraded"] == ["during the ladder: gpu0: clock event reasons: sw_thermal_slowdown, hw_thermal_slowdown",
                                 "during the ladder: gpu0: thermal violation 12.5 s during the run"]
    assert "runs again when the campaign resumes" in r["message"]


def test_gpus_degraded_before_the_ladder_void_the_row():
    plan = tc.load(DOC, BASE)
    pending = reading(fake.remap_pending_box())
    r = row(plan, 1, 480, before=pending)
    assert r["status"] == "gpu_degraded" and r["gpu_health"]["state"] == "degraded"
    assert r["gpu_degraded"] == ["before the ladder: gpu0: ecc uncorrected volatile 1",
                                 "before the ladder: gpu0: remapped rows pending (reset needed)"]


def test_a_host_without_nvml_judges_nothing_and_compares_as_before():
    plan = tc.load(DOC, BASE)
    rows = dict((plan["candidates"][i]["id"], row(plan, i, t, before=NO_NVML)) for i, t in ((0, 400), (1, 480)))
    assert [r["status"] for r in rows.values()] == ["ok", "ok"]
    assert all(r["gpu_health"]["state"] == "unknown" and r["gpu_degraded"] == [] for r in rows.values())
    d = decide.decide(plan["candidates"], rows, plan["objective"], plan["adopt"])
    assert d["winner"]["index"] == 1


def test_a_campaign_whose_gpus_degraded_has_no_winner():
    plan = tc.load(DOC, BASE)
    rows = {}
    for i, tput, after in ((0, 400, OK), (1, 480, OK), (2, 300, THROTTLED)):
        rows[plan["candidates"][i]["id"]] = row(plan, i, tput, after=after)
    d = decide.decide(plan["candidates"], rows, plan["objective"], plan["adopt"])
    assert d["winner"] is None and d["gpu_degraded"] == {plan["candidates"][2]["id"]: rows[plan["candidates"][2]["id"]]["gpu_degraded"]}
    assert d["reason"].startswith("no winner: the GPUs were degraded while candidate(s) 2 ran (during the ladder: gpu0: "
                                  "clock event reasons: sw_thermal_slowdown")
    table = report.markdown(plan, rows, d)
    assert any(line.startswith("| 2 | ") and "gpu_degraded" in line for line in table)
    assert table[-1] == "Decision: " + d["reason"]
    assert report.snippet(d["winner"]) == ""


def test_a_verdict_across_health_states_is_refused_with_the_reason():
    plan = tc.load(DOC, BASE)
    other = reading(fake.h200_box())
    other["gpus"][0]["persistence_mode"] = False
    rows = {}
    for i, tput, before in ((0, 400, OK), (1, 480, other), (2, 432, OK)):
        rows[plan["candidates"][i]["id"]] = row(plan, i, tput, before=before)
    d = decide.decide(plan["candidates"], rows, plan["objective"], plan["adopt"])
    j = d["judgements"][plan["candidates"][1]["id"]]
    assert j["verdict"] == "refused" and j["reason"].startswith("verdict refused: GPU health differs: baseline ok, 1 GPU(s)")
    assert d["winner"]["index"] == 2  # the faster candidate 1 was measured in another state: never the winner
    table = report.markdown(plan, rows, d)
    assert any(line.startswith("| 1 | ") and "verdict refused: GPU health differs" in line for line in table)
    assert "GPU health before each ladder:" in table and "- ok, 1 GPU(s) gen5 x16 width x16: candidate(s) 0, 1, 2" in table
    # a candidate measured with NVML unreadable is not compared with a base whose GPUs were read
    rows[plan["candidates"][1]["id"]] = row(plan, 1, 480, before=NO_NVML)
    j = decide.decide(plan["candidates"], rows, plan["objective"], plan["adopt"])["judgements"][plan["candidates"][1]["id"]]
    assert j["verdict"] == "refused" and "this run's GPUs are unknown (python module pynvml" in j["reason"]


def test_a_degraded_row_runs_again_on_resume_and_its_next_row_replaces_it(tmp_path):
    plan = tc.load(DOC, BASE)
    sd = str(tmp_path)
    st = CampaignState(str(tmp_path / "h" / "state.jsonl"))
    c0, c1 = plan["candidates"][:2]
    st.append("row", **row(plan, 0, 400))
    st.append("row", **row(plan, 1, 480, after=THROTTLED))
    assert CampaignState(st.path).begin(c1, plan["crash_rules"]) == {"action": "run", "row": None, "rerun": True}
    assert CampaignState(st.path).begin(c0, plan["crash_rules"])["action"] == "done"
    out = mod.run(_params(action="record", state_dir=sd, plan=plan, index=1, stage="benched",
                          levels=[level(1, 120), level(8, 480)], gpu_health=OK, gpu_health_after=OK), False)
    assert out["changed"] and out["row"]["status"] == "ok"
    rows = CampaignState(st.path).rows()
    assert rows[c1["id"]]["status"] == "ok"
    assert decide.decide(plan["candidates"], rows, plan["objective"], plan["adopt"])["winner"]["index"] == 1
    again = mod.run(_params(action="record", state_dir=sd, plan=plan, index=1, stage="benched", levels=[],
                            gpu_health=OK, gpu_health_after=THROTTLED), False)
    assert again["changed"] is False and again["row"]["status"] == "ok"  # a final row is never replaced
    rep = mod.run(_params(action="report", state_dir=sd, plan=plan), False)
    assert json.load(open(rep["files"]["json"]))["rows"][1]["gpu_health"]["state"] == "ok"


def test_a_reading_that_is_not_gpu_facts_health_names_the_option(tmp_path):
    plan = tc.load(DOC, BASE)
    with pytest.raises(CampaignError) as err:
        mod.run(_params(action="record", state_dir=str(tmp_path), plan=plan, index=0, stage="benched", levels=[],
                        gpu_health={"gpus": []}), False)
    assert err.value.key == "gpu_health" and "state ok, degraded or unknown" in str(err.value)


def _params(**kw):
    p = {"action": None, "campaign": None, "base_options": {}, "profile_options": {}, "state_dir": None, "plan": None,
         "index": None, "stage": None, "failure": None, "levels": None, "parser": None, "note": "", "duration_s": 0.0,
         "plots": False, "gpu_health": None, "gpu_health_after": None}
    p.update(kw)
    return p

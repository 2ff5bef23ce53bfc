# -*- coding: utf-8 -*-
# Copyright: gpuhost.sglang contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Append-only state and resume, rows from what the playbook saw, the decision against measured noise, the reports."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import csv
import json

from ansible_collections.gpuhost.sglang.plugins.module_utils.tune import campaign as tc
from ansible_collections.gpuhost.sglang.plugins.module_utils.tune import decide
from ansible_collections.gpuhost.sglang.plugins.module_utils.tune import report
from ansible_collections.gpuhost.sglang.plugins.module_utils.tune.state import CampaignState, earlier_failures, state_path

DOC = {"name": "t", "space": {"mem-fraction-static": [0.88, 0.95], "max-running-requests": [128]},
       "workload": {"concurrency": [1, 8], "trials": 2}, "objective": {"concurrency": 8}}
BASE = {"mem-fraction-static": 0.85}


def level(conc, tput, spread=0.01, ttft=50.0):
    agg = {"output_throughput": {"median": tput, "spread": spread, "values": [tput]},
           "ttft_ms.p99": {"median": ttft, "spread": 0.01, "values": [ttft]},
           "tpot_ms.p50": {"median": 10.0, "spread": 0.01, "values": [10.0]}}
    return {"results": [{"concurrency": conc, "output_throughput": tput, "ttft_ms": {"p99": ttft, "p50": ttft / 2},
                         "tpot_ms": {"p50": 10.0}, "itl_ms": {"p99": 20.0}, "e2e_ms": {"p99": 900.0},
                         "trials": {"n": 2, "metrics": agg}}], "failed": False, "failure_class": ""}


def test_state_is_append_only_and_resume_reruns_only_the_interrupted(tmp_path):
    plan = tc.load(DOC, BASE)
    path = str(tmp_path / "t" / "state.jsonl")
    st = CampaignState(path)
    c0, c1, c2 = plan["candidates"][:3]
    assert st.begin(c0, plan["crash_rules"])["action"] == "run"
    st.append("row", **decide.row_from(c0, "benched", plan["objective"], levels=[level(1, 100), level(8, 400)]))
    assert st.begin(c1, plan["crash_rules"])["action"] == "run"   # then Ctrl-C: a start without a row
    before = open(path).read()
    st2 = CampaignState(path)
    assert st2.interrupted() == [c1["id"]]
    assert st2.begin(c0, plan["crash_rules"])["action"] == "done"
    again = st2.begin(c1, plan["crash_rules"])
    assert again == {"action": "run", "row": None, "rerun": True}
    assert open(path).read().startswith(before)  # appended, never rewritten
    assert st2.begin(c2, plan["crash_rules"])["rerun"] is False


def test_torn_last_line_is_skipped_and_not_glued(tmp_path):
    path = tmp_path / "state.jsonl"
    st = CampaignState(str(path))
    st.append("plan", candidates=[])
    with open(str(path), "a") as f:
        f.write('{"event": "row", "id": "x"')  # crash mid-write
    st = CampaignState(str(path))
    st.append("start", id="y", index=1, name="y")
    events = CampaignState(str(path)).events
    assert [e["event"] for e in events] == ["plan", "start"]


def test_crash_memory_records_the_row_that_ruled_out(tmp_path):
    plan = tc.load(DOC, BASE)
    st = CampaignState(str(tmp_path / "s.jsonl"))
    c088 = [c for c in plan["candidates"] if c["delta"] == {"mem-fraction-static": 0.88}][0]
    c095 = [c for c in plan["candidates"] if c["delta"] == {"mem-fraction-static": 0.95}][0]
    st.append("row", **decide.row_from(c088, "gate_failed", plan["objective"],
                                       failure={"class": "out_of_memory", "message": "CUDA out of memory", "journal_tail": ["x"]}))
    res = st.begin(c095, plan["crash_rules"])
    assert res["action"] == "ruled_out"
    assert res["row"]["ruled_out_by"] == c088["id"] and res["row"]["status"] == "ruled_out"
    assert "out_of_memory of candidate %d" % c088["index"] in res["row"]["message"]
    assert CampaignState(st.path).rows()[c095["id"]]["status"] == "ruled_out"


def test_crash_memory_carries_over_to_the_next_campaign(tmp_path):
    """A backend that failed to start in one campaign is ruled out of the next one on the same host (state_dir),
    named with the campaign, without starting; a campaign's own failures and its other rows do not count twice."""
    first = tc.load({"name": "first", "space": {"attention-backend": ["fa3", "flashinfer"]},
                     "workload": {"concurrency": [1]}}, BASE)
    fa3 = first["candidates"][1]
    st1 = CampaignState(state_path(str(tmp_path), "first"))
    st1.append("row", **decide.row_from(fa3, "gate_failed", first["objective"], failure={
        "class": "unsupported_arch", "message": "ImportError: Can not import FA3 in sgl_kernel"}))
    st1.append("row", **decide.row_from(first["candidates"][2], "benched", first["objective"], levels=[level(1, 1)]))
    second = tc.load({"name": "second", "space": {"attention-backend": ["fa3"], "max-running-requests": [64]},
                      "workload": {"concurrency": [1]}}, BASE)
    earlier = earlier_failures(str(tmp_path), "second")
    assert [(r["campaign"], r["index"], r["class"]) for r in earlier] == [("first", 1, "unsupported_arch")]
    assert earlier_failures(str(tmp_path), "first") == []
    st2 = CampaignState(state_path(str(tmp_path), "second"))
    res = st2.begin(second["candidates"][1], second["crash_rules"], earlier=earlier)
    assert res["action"] == "ruled_out" and res["row"]["ruled_out_by_campaign"] == "first"
    assert "unsupported_arch of candidate 1 (attention-backend=\"fa3\") of campaign first" in res["row"]["message"]
    assert st2.begin(second["candidates"][2], second["crash_rules"], earlier=earlier)["action"] == "run"
    assert st2.begin(second["candidates"][1], second["crash_rules"], earlier=())["action"] == "done"


def test_time_budget_stops_new_candidates(tmp_path):
    plan = tc.load(dict(DOC, time_budget_s=10), BASE)
    st = CampaignState(str(tmp_path / "s.jsonl"))
    row = decide.row_from(plan["candidates"][0], "benched", plan["objective"], levels=[level(1, 1), level(8, 4)])
    st.append("row", duration_s=11.0, **row)
    assert st.begin(plan["candidates"][1], plan["crash_rules"], plan["time_budget_s"])["action"] == "budget"


def test_rows_classify():
    plan = tc.load(DOC, BASE)
    c = plan["candidates"][1]
    obj = plan["objective"]
    assert decide.row_from(c, "rejected", obj, parser={"errors": [{"text": "--x: invalid int"}]})["message"] == "--x: invalid int"
    assert decide.row_from(c, "gate_failed", obj, failure={"class": "incoherent"})["status"] == "incoherent"
    assert decide.row_from(c, "gate_failed", obj, failure={"class": "timeout"})["status"] == "startup_failed"
    bad = level(8, 1)
    bad.update(failed=True, failure_class="connection_refused", msg="refused")
    row = decide.row_from(c, "benched", obj, levels=[level(1, 1), bad])
    assert (row["status"], row["class"]) == ("bench_failed", "connection_refused")
    slo = dict(obj, slo={"ttft_ms.p99": 40.0})
    assert decide.row_from(c, "benched", slo, levels=[level(1, 1), level(8, 9)])["status"] == "slo_violation"
    good = dict(obj, metric="goodput", concurrency=None, slo={"ttft_ms.p99": 60.0})
    lv = [level(1, 100, ttft=30), level(8, 400, ttft=70)]
    row = decide.row_from(c, "benched", good, levels=lv)
    assert row["status"] == "ok" and decide.objective_value(row["levels"], good)[:3:2] == (100, 1)


def _rows(plan, tputs, spreads=None):
    rows = {}
    for i, t in enumerate(tputs):
        c = plan["candidates"][i]
        rows[c["id"]] = decide.row_from(c, "benched", plan["objective"],
                                        levels=[level(1, t / 4), level(8, t, (spreads or {}).get(i, 0.01))])
    return rows


def test_winner_must_beat_the_noise():
    plan = tc.load(DOC, BASE)
    # candidate 1 +10% but its trials spread 15%: noise; candidate 2 +8% with 1% spread: the winner
    rows = _rows(plan, [400, 440, 432], spreads={1: 0.15})
    d = decide.decide(plan["candidates"], rows, plan["objective"], plan["adopt"])
    assert d["winner"]["index"] == 2
    assert d["judgements"][plan["candidates"][1]["id"]]["verdict"] == "loses"
    assert "beats the base by +8.0%" in d["reason"]


def test_no_winner_when_nothing_beats_the_base_or_the_base_failed():
    plan = tc.load(DOC, BASE)
    rows = _rows(plan, [400, 405, 300])
    d = decide.decide(plan["candidates"], rows, plan["objective"], plan["adopt"])
    assert d["winner"] is None and "no candidate beat the base" in d["reason"]
    rows[plan["candidates"][0]["id"]]["status"] = "incoherent"
    assert decide.decide(plan["candidates"], rows, plan["objective"], plan["adopt"])["base_ok"] is False


def test_a_faster_candidate_that_regresses_latency_is_not_the_winner():
    plan = tc.load(DOC, BASE)
    rows = _rows(plan, [400, 480])
    cid = plan["candidates"][1]["id"]
    for lv in rows[cid]["levels"]:
        lv["agg"]["ttft_ms.p99"]["median"] = 500.0
    d = decide.decide(plan["candidates"], rows, plan["objective"], plan["adopt"])
    assert d["winner"] is None and d["judgements"][cid]["verdict"] == "regresses"


def test_reports(tmp_path):
    plan = tc.load(DOC, BASE)
    rows = _rows(plan, [400, 480])
    c3 = plan["candidates"][3]
    rows[c3["id"]] = decide.row_from(c3, "rejected", plan["objective"], parser={"errors": [{"text": "bad | value"}]})
    d = decide.decide(plan["candidates"], rows, plan["objective"], plan["adopt"])
    table, files, snip = report.write_all(str(tmp_path), plan, rows, d, make_plot=True)
    assert table[5].startswith("| # | candidate | status | c=1 tok/s")
    assert any("**winner**" in line and "| 1 |" in line for line in table)
    assert any("| rejected (bad_arguments) |" in line for line in table)
    with open(files["csv"]) as f:
        recs = list(csv.DictReader(f))
    assert len(recs) == 2 + 2 + 1 and recs[2]["verdict"] == "winner"
    assert json.load(open(files["json"]))["decision"]["winner"] == plan["candidates"][1]["id"]
    assert snip.splitlines()[1] == "sglang_options:" and "  mem-fraction-static: 0.88" in snip
    try:
        import matplotlib  # noqa: F401  pylint: disable=unused-import,import-outside-toplevel
    except ImportError:  # ansible-test's units venv has no matplotlib: the report is written without the plot
        assert "plot" not in files
    else:
        assert "plot" in files and open(files["plot"], "rb").read(4) == b"\x89PNG"


def test_pareto_front():
    pts = [(10, 100, "a"), (20, 90, "b"), (30, 200, "c"), (5, 50, "d")]
    assert [p[2] for p in report.pareto_front(pts)] == ["d", "a", "c"]


def test_plan_line():
    c = {"index": 2, "name": "x=1"}
    assert report.plan_line(c, {"failed": True, "errors": [{"text": "--x: invalid"}]}) == "2 x=1: REJECTED by the parser (--x: invalid)"
    assert report.plan_line(c, {"engine": "sglang", "engine_version": "0.5.23"}) == "2 x=1: accepted by sglang 0.5.23"

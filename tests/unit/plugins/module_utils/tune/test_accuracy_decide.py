# -*- coding: utf-8 -*-
# Copyright: gpuhost.sglang contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The accuracy gate in a campaign: settings, the check each candidate gets, a failing candidate is never the
winner, and the table, CSV and plot show accuracy beside throughput."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import csv

import pytest

from ansible_collections.gpuhost.sglang.plugins.module_utils.tune import campaign as tc
from ansible_collections.gpuhost.sglang.plugins.module_utils.tune import decide
from ansible_collections.gpuhost.sglang.plugins.module_utils.tune import report
from ansible_collections.gpuhost.sglang.plugins.module_utils.tune.errors import CampaignError


from ansible_collections.gpuhost.sglang.tests.unit.plugins.module_utils.tune.test_state_decide import level

DOC = {"name": "acc", "space": {"kv-cache-dtype": ["fp8_e4m3"], "max-running-requests": [128]},
       "workload": {"concurrency": [1, 8], "trials": 2}, "objective": {"concurrency": 8},
       "accuracy": {"enabled": True}}


def _gate(passed, check="score", value=0.8, ref=0.95):
    if check == "score":
        checks = {"score": {"passed": passed, "candidate_score": value, "lkg_score": ref, "p_value": 0.001}}
    else:
        checks = {"greedy": {"passed": passed, "value": value, "reference": ref, "threshold": ref - 0.1}}
    return {"passed": passed, "class": "ok" if passed else ("accuracy_drop" if check == "score" else "greedy_divergence"),
            "message": "%s: exact-match score %.3f vs last-known-good %.3f" % ("passed" if passed else "FAILED", value, ref),
            "checks": checks, "requests": 528, "seconds": 3.0}


def test_each_candidate_gets_its_check_and_the_base_measures_their_union():
    plan = tc.load(DOC, {})
    assert [c["accuracy_checks"] for c in plan["candidates"]] == [[], ["score"], ["greedy"]]
    assert plan["accuracy"]["lkg_checks"] == ["score", "greedy"]
    assert plan["accuracy"]["limit"] == 528 and plan["accuracy"]["alpha"] == 0.05
    off = tc.load(dict(DOC, accuracy=None), {})
    assert off["accuracy"]["enabled"] is False and off["accuracy"]["lkg_checks"] == []
    forced = tc.load(dict(DOC, accuracy={"enabled": True, "checks": ["score"]}), {})
    assert [c["accuracy_checks"] for c in forced["candidates"]] == [[], ["score"], ["score"]]


@pytest.mark.parametrize("acc,key,allowed", [
    ({"enabled": "yes"}, "accuracy.enabled", "true or false"),
    ({"checks": ["speed"]}, "accuracy.checks", "auto (from the options"),
    ({"alpha": 1.5}, "accuracy.alpha", "[0, 1)"),
    ({"greedy_metric": "bleu"}, "accuracy.greedy_metric", "identical, prefix"),
    ({"prompts": 3}, "accuracy.prompts", "unknown key; allowed: enabled, checks"),
])
def test_bad_accuracy_settings_are_named(acc, key, allowed):
    with pytest.raises(CampaignError) as e:
        tc.load(dict(DOC, accuracy=acc), {})
    assert e.value.key == key and allowed in str(e.value)


def _rows(plan, tputs, accs):
    rows = {}
    for cand, tput, acc in zip(plan["candidates"], tputs, accs):
        rows[cand["id"]] = decide.row_from(cand, "benched", plan["objective"],
                                           levels=[level(1, tput / 4.0), level(8, tput)], accuracy=acc)
    return rows


def test_a_faster_candidate_failing_accuracy_is_not_the_winner(tmp_path):
    plan = tc.load(DOC, {})
    lkg = {"changed": True, "checks": ["score", "greedy"],
           "measured": {"score": {"score": 0.95, "n": 528}, "greedy": {}, "requests": 624, "seconds": 4.0}}
    rows = _rows(plan, [400, 600, 480], [lkg, _gate(False), _gate(True, "greedy", 1.0, 1.0)])
    c1, c2 = plan["candidates"][1:]
    assert rows[c1["id"]]["status"] == "inaccurate" and rows[c1["id"]]["class"] == "accuracy_drop"
    assert "vs last-known-good 0.950" in rows[c1["id"]]["message"]
    d = decide.decide(plan["candidates"], rows, plan["objective"], plan["adopt"])
    assert d["winner"]["id"] == c2["id"]  # 600 tok/s lost to 480 tok/s: the fast one changes the answers
    table, files, dummy = report.write_all(str(tmp_path), plan, rows, d, make_plot=True)
    text = "\n".join(table)
    assert "| accuracy | note |" in table[5]
    assert "| lkg score 0.950 |" in text and "| score 0.800/0.950 FAIL |" in text and "| greedy 1.000/1.000 ok |" in text
    assert "Accuracy gate: candidate/last-known-good; score = exact-match on 528 task items" in text
    with open(files["csv"]) as f:
        got = [(r["index"], r["status"], r["accuracy_check"], r["accuracy_value"], r["accuracy_reference"],
                r["accuracy_passed"]) for r in csv.DictReader(f) if r["concurrency"] == "8"]
    assert got == [("0", "ok", "score", "0.95", "", "lkg"), ("1", "inaccurate", "score", "0.8", "0.95", "False"),
                   ("2", "ok", "greedy", "1.0", "1.0", "True")]
    assert "plot" in files or report.plot(plan, rows, str(tmp_path / "p.png")) is None


def test_without_the_gate_rows_and_table_are_as_before():
    plan = tc.load(dict(DOC, accuracy=None), {})
    rows = _rows(plan, [400, 600, 480], [None, None, None])
    assert all(r["status"] == "ok" and r["accuracy"] is None for r in rows.values())
    d = decide.decide(plan["candidates"], rows, plan["objective"], plan["adopt"])
    table = report.markdown(plan, rows, d)
    assert d["winner"]["index"] == 1 and "accuracy" not in "\n".join(table)
    assert table[5].endswith("| c=8 TPOT p50 | note |")  # the table of a campaign without the gate is as before


def test_plot_crosses_out_accuracy_failures(tmp_path, monkeypatch):
    pytest.importorskip("matplotlib")
    plan = tc.load(DOC, {})
    rows = _rows(plan, [400, 600, 480], [None, _gate(False), _gate(True)])
    seen = []
    import matplotlib.axes  # pylint: disable=import-outside-toplevel
    orig = matplotlib.axes.Axes.annotate
    monkeypatch.setattr(matplotlib.axes.Axes, "annotate", lambda self, text, *a, **k: seen.append(text) or orig(
        self, text, *a, **k))
    assert report.plot(plan, rows, str(tmp_path / "p.png"))
    assert "1 acc FAIL" in seen and "2" in seen


def test_glm5_campaign_gates_fp8_kv_and_backends_on_the_score():
    """campaigns/glm5-nvfp4-sm120.yml: every attention pair (FP8 KV or a backend change) gets the exact-match score,
    CUDA graphs, memory and batch caps get greedy equivalence."""
    import os  # pylint: disable=import-outside-toplevel
    import yaml  # pylint: disable=import-outside-toplevel
    path = os.path.join(os.path.dirname(tc.__file__), "..", "..", "..", "campaigns", "glm5-nvfp4-sm120.yml")
    with open(path) as f:
        plan = tc.load(yaml.safe_load(f), {"kv-cache-dtype": "fp8_e4m3", "mem-fraction-static": 0.88})
    assert plan["accuracy"]["enabled"] and plan["accuracy"]["api"] == "completions"
    by_check = {}
    for cand in plan["candidates"][1:]:
        for k in cand["delta"]:
            by_check.setdefault(k, set()).update(cand["accuracy_checks"])
    assert cand["accuracy_checks"]  # every candidate is gated
    for k in ("kv-cache-dtype", "dsa-decode-backend", "dsa-prefill-backend"):
        assert by_check[k] == {"score"}, k
    for cand in plan["candidates"][1:]:
        if set(cand["delta"]) <= {"cuda-graph-backend-decode", "cuda-graph-backend-prefill", "mem-fraction-static",
                                  "cuda-graph-max-bs-decode", "max-running-requests"}:
            assert cand["accuracy_checks"] == ["greedy"], cand["name"]
        else:
            assert cand["accuracy_checks"] == ["score"], cand["name"]
    assert plan["accuracy"]["lkg_checks"] == ["score", "greedy"]

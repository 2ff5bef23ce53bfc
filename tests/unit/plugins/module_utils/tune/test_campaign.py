# -*- coding: utf-8 -*-
# Copyright: gpuhost.sglang contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Campaign validation (one key named per error) and the strategies' expansion."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import copy
import os

import pytest
import yaml

from ansible_collections.gpuhost.sglang.plugins.module_utils.tune import campaign as tc
from ansible_collections.gpuhost.sglang.plugins.module_utils.tune.errors import CampaignError

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..", "..", "..", ".."))
BASE = {"device": "cpu", "continuous-batching": True, "cb-num-blocks": 256}
DOC = {"name": "t", "space": {"a": [1, 2], "b": ["x", "y"], "c": [True]},
       "workload": {"concurrency": [1, 8]}, "objective": {"concurrency": 8}}


def names(plan):
    return [c["name"] for c in plan["candidates"]]


def test_one_at_a_time_base_first_then_each_value():
    plan = tc.load(DOC, {"a": 1})
    # a=1 is the base's own value: not a candidate
    assert names(plan) == ["base", "a=2", 'b="x"', 'b="y"', "c=true"]
    assert plan["candidates"][1]["options"] == {"a": 2}
    assert [c["index"] for c in plan["candidates"]] == [0, 1, 2, 3, 4]


def test_grid_is_the_product_and_max_candidates_caps_it():
    doc = dict(DOC, strategy="grid", max_candidates=3)
    plan = tc.load(doc, {})
    assert len(plan["candidates"]) == 4 and plan["left_out"] == 1  # 2 x 2 x 1 = 4 combinations
    assert plan["candidates"][1]["delta"] == {"a": 1, "b": "x", "c": True}


def test_tiers_like_sglang_auto_benchmark():
    space = dict(("o%d" % i, [0, 1]) for i in range(7))
    doc = dict(DOC, space=space, strategy="tiers", max_candidates=100)
    plan = tc.load(doc, {})
    tiers = [c["tier"] for c in plan["candidates"][1:]]
    # tier 1: the first 6 options x 2 values one at a time; tier 2: the 8 combos of the first 3 (minus duplicates)
    assert tiers[:12] == [1] * 12
    assert 2 in tiers and 3 in tiers and tiers == sorted(tiers)
    assert not any("o6" in c["delta"] for c in plan["candidates"] if c["tier"] in (1, 2))


def test_groups_apply_a_mapping_whole_and_profile_duplicates_are_dropped():
    doc = dict(DOC, space={"pair": [{"d": "x", "p": "x"}, {"d": "y", "p": "z"}], "m": [0.85, 0.92]})
    plan = tc.load(doc, {}, {"d": "x", "p": "x", "m": 0.92})
    # the first pair and m=0.92 equal the profile's values: the same server as the base, not run again
    assert names(plan) == ["base", 'd="y", p="z"', "m=0.85"]


def test_ids_are_by_content():
    a = tc.load(DOC, BASE)["candidates"]
    doc = copy.deepcopy(DOC)
    doc["space"] = {"c": [True], "b": ["y", "x"], "a": [2, 1]}
    b = tc.load(doc, BASE)["candidates"]
    assert set(c["id"] for c in a) == set(c["id"] for c in b)


@pytest.mark.parametrize("mutate,key", [
    (lambda d: d.update(stratgy="grid"), "stratgy"),
    (lambda d: d.update(strategy="random"), "strategy"),
    (lambda d: d.update(name="a b"), "name"),
    (lambda d: d.update(space={}), "space"),
    (lambda d: d["space"].update(a=3), "space.a"),
    (lambda d: d["space"].update(a=[{"x": 1}, 2]), "space.a[0]"),
    (lambda d: d.update(max_candidates=0), "max_candidates"),
    (lambda d: d.update(time_budget_s="1h"), "time_budget_s"),
    (lambda d: d["workload"].update(concurrency=[0]), "workload.concurrency"),
    (lambda d: d["workload"].update(trials=True), "workload.trials"),
    (lambda d: d["workload"].update(api="embeddings"), "workload.api"),
    (lambda d: d["workload"].update(concurency=[1]), "workload.concurency"),
    (lambda d: d["objective"].update(concurrency=16), "objective.concurrency"),
    (lambda d: d["objective"].update(metric="goodput"), "objective.slo"),
    (lambda d: d["objective"].update(slo={"ttft_ms.p95": 1}), "objective.slo.ttft_ms.p95"),
    (lambda d: d.update(adopt={"enabled": "yes"}), "adopt.enabled"),
    (lambda d: d.update(adopt={"gate_metrics": ["tok/s"]}), "adopt.gate_metrics"),
    (lambda d: d.update(crash_rules=[{"class": "out_of_memory"}]), "crash_rules[0]"),
    (lambda d: d.update(crash_rules=[{"class": "oom", "option": "m", "direction": "up"}]), "crash_rules[0].direction"),
    (lambda d: d.update(base={"a": 5}), "base"),
])
def test_bad_campaign_names_the_key(mutate, key):
    doc = copy.deepcopy(DOC)
    mutate(doc)
    with pytest.raises(CampaignError) as err:
        tc.load(doc, {"a": 1})
    assert err.value.key == key
    assert ("campaign key %s=" % key) in str(err.value)


@pytest.mark.parametrize("path", ["campaigns/sandbox-cpu.yml", "campaigns/sandbox-cpu-ci.yml", "campaigns/glm5-nvfp4-sm120.yml"])
def test_shipped_campaigns_load(path):
    with open(os.path.join(ROOT, path)) as f:
        plan = tc.load(yaml.safe_load(f), {})
    assert len(plan["candidates"]) > 3


def load_campaigns(*paths):
    """The plans of the repository's campaign files, in order."""
    plans = []
    for path in paths:
        with open(os.path.join(ROOT, path)) as f:
            plans.append(tc.load(yaml.safe_load(f)))
    return plans


def test_h200_campaigns_share_the_base_and_fa3_fails_last_then_is_remembered():
    """campaigns/h200-tiny-a.yml ends on fa3 (its rollback is the campaign's restore); h200-tiny-b.yml, run after it
    in the same state directory, lists fa3 again for crash memory to rule out, over the same base."""
    plans = load_campaigns("campaigns/h200-tiny-a.yml", "campaigns/h200-tiny-b.yml")
    a, b = plans
    assert a["candidates"][0]["id"] == b["candidates"][0]["id"]
    assert a["candidates"][-1]["delta"] == {"attention-backend": "fa3"} == b["candidates"][1]["delta"]
    assert a["workload"]["concurrency"] == b["workload"]["concurrency"] == [1, 16, 64, 256]


def test_h200_campaign_c_keeps_campaign_a_base_and_decision_rules_and_gates_accuracy():
    """campaigns/h200-tiny-c.yml changes the measurement (5-second trials, stated in its header), not the rules: the
    same base, objective and adopt thresholds as h200-tiny-a.yml; every candidate gated by greedy equivalence."""
    plans = load_campaigns("campaigns/h200-tiny-a.yml", "campaigns/h200-tiny-c.yml")
    a, c = plans
    assert a["candidates"][0]["id"] == c["candidates"][0]["id"]
    assert a["objective"] == c["objective"] and a["adopt"] == c["adopt"]
    assert c["accuracy"]["enabled"] and [x["accuracy_checks"] for x in c["candidates"][1:]] == [["greedy"]] * 3
    assert all(x["delta"]["disable-cuda-graph"] is False for x in c["candidates"][1:])


def test_h200_accuracy_campaign_gates_every_candidate_with_both_checks():
    with open(os.path.join(ROOT, "campaigns/h200-tiny-acc.yml")) as f:
        p = tc.load(yaml.safe_load(f))
    assert p["accuracy"]["lkg_checks"] == ["score", "greedy"] and len(p["candidates"]) == 5
    assert all(x["accuracy_checks"] == ["score", "greedy"] for x in p["candidates"][1:])
    assert [x["delta"].get("model-path") for x in p["candidates"][2:4]] == ["/tmp/sglang/model-noise0.5",
                                                                            "/tmp/sglang/model-noise2"]
    assert p["candidates"][-1]["delta"] == {"kv-cache-dtype": "fp8_e5m2"}  # last: a failed start's rollback is the restore


def test_h200_campaign_d_keeps_the_rules_and_gates_host_side_candidates_by_greedy_equivalence():
    """campaigns/h200-tiny-d.yml: campaign a's base, objective and thresholds; its candidates (stream-interval, the
    radix cache off) change scheduling and streaming, not numerics, so each is gated by greedy equivalence."""
    a, d = load_campaigns("campaigns/h200-tiny-a.yml", "campaigns/h200-tiny-d.yml")
    assert a["candidates"][0]["id"] == d["candidates"][0]["id"]
    assert a["objective"] == d["objective"] and a["adopt"] == d["adopt"]
    assert [x["delta"] for x in d["candidates"][1:]] == [
        {"stream-interval": 8}, {"stream-interval": 32}, {"disable-radix-cache": True}]
    assert [x["accuracy_checks"] for x in d["candidates"][1:]] == [["greedy"]] * 3


def test_h200_gpubound_campaign_gates_fp8_first_then_shapes_prefill_and_graphs():
    """campaigns/h200-gpubound.yml: the GPU-bound launch's base, the FP8 KV cache first (the accuracy gate's case, so
    that a short session measures it), then mixed chunks, a smaller prefill chunk, fewer running requests and CUDA
    graphs off, one at a time, realistic prompts, every candidate gated by both accuracy checks against the base."""
    with open(os.path.join(ROOT, "campaigns/h200-gpubound.yml")) as f:
        g = tc.load(yaml.safe_load(f))
    assert [x["delta"] for x in g["candidates"][1:]] == [
        {"kv-cache-dtype": "fp8_e4m3"}, {"enable-mixed-chunk": True}, {"chunked-prefill-size": 4096},
        {"max-running-requests": 128}, {"cuda-graph-backend-decode": "disabled", "cuda-graph-backend-prefill": "disabled"}]
    assert g["workload"]["concurrency"] == [1, 64, 256] and g["workload"]["input_len"] == 512
    assert g["accuracy"]["lkg_checks"] == ["score", "greedy"]
    assert g["adopt"]["enabled"] is True and g["adopt"]["min_improvement"] == 0.05  # a real winner is adopted
    assert [x["accuracy_checks"] for x in g["candidates"][1:]] == [["score", "greedy"]] * 5

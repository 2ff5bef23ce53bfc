# -*- coding: utf-8 -*-
# Copyright: gpuhost.sglang contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The accuracy gate over real HTTP (bench/client.run_load) against the fake server: it fails a server whose answers
changed (--accuracy), passes one whose answers did not, fails greedy equivalence for one whose outputs drift
(--drift) and passes the same configuration; with the request counts and seconds docs/bench.md states."""
from __future__ import absolute_import, division, print_function

__metaclass__ = type

import pytest

from ansible_collections.gpuhost.sglang.plugins.module_utils.bench import accuracy as A

from fakeserver import fake_server  # pylint: disable=import-error


@pytest.fixture(scope="module")
def lkg():
    with fake_server("ok") as (url, dummy):
        return A.measure_lkg(url, concurrency=16)


def test_lkg_scores_every_item_and_agrees_with_itself(lkg):
    assert lkg["score"]["score"] == 1.0 and lkg["score"]["n"] == 528 and lkg["score"]["requests"] == 528
    assert lkg["score"]["errors"] == {}
    assert lkg["greedy"]["texts"] == lkg["greedy_repeat"]["texts"] and len(lkg["greedy"]["texts"]) == 48
    # what docs/bench.md quotes (a loaded 2-core box takes longer: a loose bound)
    print("lkg: score %d requests %.2f s; greedy 2 x %d requests %.2f + %.2f s" % (
        lkg["score"]["requests"], lkg["score"]["seconds"], lkg["greedy"]["requests"], lkg["greedy"]["seconds"],
        lkg["greedy_repeat"]["seconds"]))
    assert lkg["score"]["seconds"] < 60


@pytest.mark.parametrize("accuracy,passed", [(1.0, True), (0.9, False)])
def test_score_gate_fails_changed_answers_passes_unchanged(lkg, accuracy, passed):
    with fake_server("ok", "--accuracy", str(accuracy)) as (url, dummy):
        g = A.gate(url, lkg, A.checks_for({"kv-cache-dtype": "fp8_e4m3"}), concurrency=16)
    v = g["checks"]["score"]
    print(accuracy, g["message"])
    assert g["passed"] is passed and g["requests"] == 528
    assert v["lkg_score"] == 1.0
    if not passed:
        assert g["class"] == "accuracy_drop" and 0.85 < v["candidate_score"] < 0.95
        assert "vs last-known-good 1.000 (528/528)" in g["message"]


@pytest.mark.parametrize("drift,passed", [(0.0, True), (0.5, False)])
def test_greedy_gate_fails_drifting_outputs(lkg, drift, passed):
    with fake_server("ok", "--drift", str(drift)) as (url, dummy):
        g = A.gate(url, lkg, A.checks_for({"max-running-requests": 64}), concurrency=16)
    print(drift, g["message"])
    assert g["passed"] is passed and g["requests"] == 48
    assert list(g["checks"]) == ["greedy"]
    if not passed:
        assert g["class"] == "greedy_divergence"
        # the drift leaves every answer: the score would pass it
        with fake_server("ok", "--drift", str(drift)) as (url, dummy):
            assert A.gate(url, lkg, ["score"], concurrency=16)["passed"]


def test_a_server_that_fails_is_an_accuracy_error(lkg):
    with fake_server("http_5xx") as (url, dummy):
        g = A.gate(url, lkg, ["score"], concurrency=16)
    assert not g["passed"] and g["class"] == "accuracy_error" and "528 of 528 requests failed" in g["message"]


def test_module_measures_lkg_then_gates_candidates(tmp_path):
    """serving_accuracy as Ansible runs it: measure on the base, then a candidate of each kind."""
    from ansible_collections.gpuhost.sglang.tests import harness  # pylint: disable=import-outside-toplevel
    lkg_file = str(tmp_path / "lkg.json")
    with fake_server("ok") as (url, dummy):
        res = harness.run_module("serving_accuracy", {"action": "measure", "base_url": url, "lkg_file": lkg_file,
                                                      "checks": ["score", "greedy"], "limit": 110}, tmp_path=tmp_path)
    assert res.rc == 0 and res["measured"]["requests"] == 110 + 2 * 48, res
    with fake_server("ok", "--accuracy", "0.8") as (url, dummy):
        bad = harness.run_module("serving_accuracy", {"action": "gate", "base_url": url, "lkg_file": lkg_file,
                                                      "delta": {"kv-cache-dtype": "fp8_e4m3"}}, tmp_path=tmp_path)
        soft = harness.run_module("serving_accuracy", {"action": "gate", "base_url": url, "lkg_file": lkg_file,
                                                       "delta": {"kv-cache-dtype": "fp8_e4m3"}, "fail_on_gate": False},
                                  tmp_path=tmp_path)
        sched = harness.run_module("serving_accuracy", {"action": "gate", "base_url": url, "lkg_file": lkg_file,
                                                        "delta": {"max-running-requests": 8}}, tmp_path=tmp_path)
    assert bad.rc != 0 and bad["class"] == "accuracy_drop" and "vs last-known-good 1.000 (110/110)" in bad["msg"]
    assert soft.rc == 0 and soft["passed"] is False and soft["checks"]["score"]["lkg_score"] == 1.0
    # changed answers change the greedy prompts' outputs too (they are task prompts): a scheduling candidate fails
    assert sched.rc != 0 and sched["class"] == "greedy_divergence" and sched["checks"]["greedy"]["reference"] == 1.0
    with fake_server("ok", "--drift", "0.0") as (url, dummy):
        same = harness.run_module("serving_accuracy", {"action": "gate", "base_url": url, "lkg_file": lkg_file,
                                                       "checks": "auto", "delta": {"max-running-requests": 8}},
                                  tmp_path=tmp_path)
    assert same.rc == 0 and same["passed"] and same["requests"] == 48
    missing = harness.run_module("serving_accuracy", {"action": "gate", "base_url": "http://127.0.0.1:9",
                                                      "lkg_file": str(tmp_path / "none.json"),
                                                      "checks": ["score"]}, tmp_path=tmp_path)
    assert missing.rc != 0 and "measure last-known-good first" in missing["msg"]

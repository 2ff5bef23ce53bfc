# -*- coding: utf-8 -*-
# Copyright: gpuhost.sglang contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""serving_bench against loopback fake servers: every fault of docs/bench.md (Faults) is classified and counted, the
task fails with the class and no traceback, and partial results are on disk; plus ignore_eos fallback,
missing usage, garbage detection, the regression gate and probes_only speed."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import json
import os

import pytest

from fakeserver import fake_server, free_port, run_module  # pylint: disable=import-error

# timing (stage 50, tests/stages/50-timing.sh, runs these alone): the regression caught against an unchanged rerun, the
# slow phase measured again, the wall-time bounds (probes, a stall) and the 1 s stall timeout that a loaded worker
# could trip. The other fault classifications run in the parallel run: their assertions are on classes and counts.
timing = pytest.mark.timing

SMALL = dict(input_len=8, output_len=32, concurrency=4, num_prompts=16, warmup=1, plots=False)


def _run_file(report_dir):
    runs = os.listdir(os.path.join(report_dir, "runs"))
    runs = [r for r in runs if r.endswith(".json")]
    assert len(runs) == 1, runs
    with open(os.path.join(report_dir, "runs", runs[0])) as f:
        return json.load(f)


def assert_failed(res, cls, report_dir=None):
    assert res.get("failed") is True, res.get("msg")
    assert res["failure_class"] == cls, (res["failure_class"], res.get("msg"))
    assert "[%s]" % cls in res["msg"]
    assert "Traceback" not in res["msg"] and "Traceback" not in json.dumps(res)
    if report_dir:
        doc = _run_file(report_dir)
        assert doc["failure_class"] == cls
        assert any(f.startswith(cls + ":") for f in doc["failures"])
        with open(os.path.join(report_dir, "progress.log")) as f:
            assert "FAILED %s" % cls in f.read()


def test_ok_server_passes_and_writes_reports(tmp_path):
    rep = str(tmp_path / "rep")
    with fake_server("ok") as (url, dummy):
        res, dummy = run_module(tmp_path, base_url=url, report_dir=rep, **SMALL)
    assert not res.get("failed"), res.get("msg")
    assert res["coherence"]["passed"] and res["coherence"]["probes_passed"] == 8
    r = res["results"][0]
    assert r["completed"] == 16 and r["coherent"] == 16 and r["errors"] == {}
    assert r["output_tokens"] == 16 * 32  # server usage, ignore_eos accepted
    assert res["ignore_eos_accepted"] is True
    assert r["token_accounting"]["missing_usage"] == 0
    assert res["table"][0].startswith("| Concurrency | Output tok/s | Total tok/s | Peak tok/s (1 s) | TPOT p50 ms | TTFT p50/p99 ms")
    doc = _run_file(rep)
    assert doc["levels"]["4"]["completed"] == 16
    for suffix in (".md", ".junit.xml"):
        assert os.path.isfile(os.path.join(rep, res["run_id"] + suffix))


def test_connection_refused(tmp_path):
    rep = str(tmp_path / "rep")
    res, dummy = run_module(tmp_path, base_url="http://127.0.0.1:%d" % free_port(), report_dir=rep, **SMALL)
    assert_failed(res, "connection_refused", rep)


def test_http_5xx(tmp_path):
    rep = str(tmp_path / "rep")
    with fake_server("http_5xx") as (url, dummy):
        res, dummy = run_module(tmp_path, base_url=url, report_dir=rep, **SMALL)
    assert_failed(res, "http_5xx", rep)
    assert all(v["class"] == "http_5xx" for v in res["coherence"]["probes"])


def test_http_5xx_counted_in_load(tmp_path):
    with fake_server("http_5xx") as (url, dummy):
        args = dict(SMALL)
        args.update(warmup=0, run_probes=False, ignore_eos=False)
        res, dummy = run_module(tmp_path, base_url=url, **args)
    assert_failed(res, "http_5xx")
    assert res["results"][0]["errors"] == {"http_5xx": 16}


@pytest.mark.parametrize("behavior,cls", [("disconnect", "disconnected"), ("malformed", "malformed_sse"),
                                          ("stall", "stalled")])
@timing
def test_mid_stream_faults(tmp_path, behavior, cls):
    rep = str(tmp_path / "rep")
    with fake_server(behavior) as (url, dummy):
        # probes answer in one event, so they pass; the 32-token load streams hit the fault
        args = dict(SMALL)
        args.update(warmup=0, report_dir=rep, stall_timeout=1.0, ignore_eos=False)
        res, dt = run_module(tmp_path, base_url=url, **args)
    assert_failed(res, cls, rep)
    assert res["results"][0]["errors"] == {cls: 16}
    assert _run_file(rep)["levels"]["4"]["errors"] == {cls: 16}  # partial results saved
    if behavior == "stall":
        assert dt < 30


def test_missing_usage_fails_by_default_and_falls_back_when_allowed(tmp_path):
    with fake_server("no_usage") as (url, dummy):
        res, dummy = run_module(tmp_path, base_url=url, **SMALL)
        assert_failed(res, "missing_usage")
        res2, dummy = run_module(tmp_path, base_url=url, require_usage=False, **SMALL)
    assert not res2.get("failed"), res2.get("msg")
    acc = res2["results"][0]["token_accounting"]
    assert acc["missing_usage"] == 16 and acc["fallback"] == "chunk count"
    assert res2["results"][0]["output_tokens"] == 16 * 32  # one token per event: chunk count is exact here


def test_server_dies_mid_run(tmp_path):
    rep = str(tmp_path / "rep")
    # probes (8 + NaN probe) + preflight + the coherence sample (8, without ignore_eos) + the level's warm-up (4: one
    # per slot at c=4) = 22 requests, then 5 load requests, then exit
    with fake_server("die_after", "--die-after", "27", "--itl", "0.005") as (url, dummy):
        args = dict(SMALL)
        args.update(num_prompts=64, report_dir=rep)
        res, dummy = run_module(tmp_path, base_url=url, **args)
    assert res["failed"] and res["failure_class"] in ("connection_refused", "disconnected"), res["msg"]
    errs = res["results"][0]["errors"]
    assert set(errs) <= {"connection_refused", "disconnected"} and sum(errs.values()) >= 40, errs
    assert res["results"][0]["completed"] >= 1
    assert_failed(res, res["failure_class"], rep)


def test_wrong_model_name(tmp_path):
    with fake_server("ok") as (url, dummy):
        res, dummy = run_module(tmp_path, base_url=url, model="no-such-model", **SMALL)
    assert_failed(res, "model_not_found")
    assert "fake-model" in res["msg"]  # lists what is served


def test_ignore_eos_rejected_is_retried_without(tmp_path):
    with fake_server("reject_ignore_eos") as (url, dummy):
        res, dummy = run_module(tmp_path, base_url=url, **SMALL)
    assert not res.get("failed"), res.get("msg")
    assert res["ignore_eos_accepted"] is False
    assert res["results"][0]["ignore_eos"] is False
    assert "422" in res["ignore_eos_rejection"] and "ignore_eos" in res["ignore_eos_rejection"]


@pytest.mark.parametrize("behavior,cls", [("empty", "empty"), ("garbage", "incoherent"), ("repeat", "incoherent"),
                                          ("nan_logprobs", "nan")])
@timing
def test_broken_models_fail_the_probe_gate(tmp_path, behavior, cls):
    with fake_server(behavior) as (url, dummy):
        res, dt = run_module(tmp_path, base_url=url, probes_only=True)
    assert_failed(res, cls)
    assert dt < 5


def test_garbage_load_output_not_counted(tmp_path):
    with fake_server("garbage") as (url, dummy):
        res, dummy = run_module(tmp_path, base_url=url, run_probes=False, **SMALL)
    assert_failed(res, "incoherent")
    r = res["results"][0]
    assert r["completed"] == 16 and r["coherent"] == 0 and r["output_throughput"] == 0.0
    assert r["incoherent_flags"].get("replacement_chars") == 16


@timing
def test_probes_only_is_fast_and_precise(tmp_path):
    with fake_server("ok") as (url, dummy):
        res, dt = run_module(tmp_path, base_url=url, probes_only=True)
    assert not res.get("failed"), res.get("msg")
    assert res["coherence"]["probes_passed"] == 8 and "results" not in res
    assert dt < 2.0, dt
    assert res["coherence"]["nan_probe"]["supported"] is False  # fake server ignores logprobs: reported, not hidden


def test_chat_api(tmp_path):
    with fake_server("ok") as (url, dummy):
        res, dummy = run_module(tmp_path, base_url=url, api="chat", **SMALL)
    assert not res.get("failed"), res.get("msg")
    assert res["coherence"]["api"] == "chat" and res["results"][0]["coherent"] == 16


@timing
def test_regression_caught_and_unchanged_rerun_passes(tmp_path):
    rep = str(tmp_path / "rep")
    base = str(tmp_path / "baselines")
    args = dict(SMALL, report_dir=rep, baseline_dir=base, trials=2, fingerprint={"host": "fake"},
                gate_metrics=["output_throughput", "tpot_ms.p50"], tolerance=0.15)
    with fake_server("ok", "--itl", "0.01") as (url, dummy):
        first, dummy = run_module(tmp_path, base_url=url, **args)
        again, dummy = run_module(tmp_path, base_url=url, **args)
    with fake_server("ok", "--itl", "0.02") as (url, dummy):
        slow, dummy = run_module(tmp_path, base_url=url, **args)
    assert not first.get("failed"), first.get("msg")
    assert first["results"][0]["regression"]["status"] == "recorded"
    assert not again.get("failed"), again.get("msg")
    assert again["results"][0]["regression"]["status"] == "compared"
    assert_failed(slow, "regression")
    assert "(confirmed by 1 more measurement(s): " in slow["msg"], slow["msg"]  # confirm_regressions default 1
    # TPOT is gated too unless the level was client-bound (then only throughput is: see docs/bench.md)
    assert "output_throughput baseline" in slow["msg"] and "threshold" in slow["msg"]
    if not slow["results"][0]["client_bound"]:
        assert "tpot_ms.p50 baseline" in slow["msg"]
    # the baseline was not replaced by the failing run
    key = first["results"][0]["regression"]["key"]
    with open(os.path.join(base, key + ".json")) as f:
        doc = json.load(f)
    assert doc["levels"]["4"]["run_id"] == first["run_id"]
    with fake_server("ok", "--itl", "0.02") as (url, dummy):
        upd, dummy = run_module(tmp_path, base_url=url, update_baseline=True, **args)
    assert not upd.get("failed") and upd["results"][0]["regression"]["status"] == "replaced"
    assert "unconfirmed" not in upd["results"][0]["regression"]  # a replacement is not re-measured
    assert len(os.listdir(os.path.join(base, "archive"))) == 1
    with open(os.path.join(base, "history.jsonl")) as f:
        events = [json.loads(x)["event"] for x in f]
    assert events == ["recorded", "replaced"]


@timing
def test_a_slow_phase_is_measured_again_and_passes_a_lasting_one_fails(tmp_path):
    """confirm_regressions: a level that fails the rule is measured again; a slow phase of the host (here the first
    measurement's 25 requests, warmup and the coherence sample's 8 included, at twice the ITL) passes on the re-measurement and stays on record; with
    confirm_regressions 0 the same phase fails the run."""
    args = dict(SMALL, report_dir=str(tmp_path / "rep"), baseline_dir=str(tmp_path / "baselines"), run_probes=False,
                fingerprint={"host": "fake"}, gate_metrics=["output_throughput", "tpot_ms.p50"], tolerance=0.15)
    with fake_server("ok", "--itl", "0.01") as (url, dummy):
        first, dummy = run_module(tmp_path, base_url=url, **args)
    assert not first.get("failed"), first.get("msg")
    with fake_server("ok", "--itl", "0.01", "--slow-first", "25", "--slow-itl", "0.02") as (url, dummy):
        phase, dummy = run_module(tmp_path, base_url=url, **args)
    assert not phase.get("failed"), phase.get("msg")
    reg = phase["results"][0]["regression"]
    assert reg["status"] == "compared" and reg["passed"]
    assert len(reg["unconfirmed"]) == 1 and not all(c["passed"] for c in reg["unconfirmed"][0]["checks"])
    assert reg["unconfirmed"][0]["output_throughput"] < 0.8 * phase["results"][0]["output_throughput"]
    with open(os.path.join(args["report_dir"], "history.jsonl")) as f:
        hist = [json.loads(x) for x in f]
    assert [h["passed"] for h in hist if h["run_id"] == phase["run_id"]] == [False, True]  # nothing lost
    with fake_server("ok", "--itl", "0.01", "--slow-first", "25", "--slow-itl", "0.02") as (url, dummy):
        strict, dummy = run_module(tmp_path, base_url=url, confirm_regressions=0, **args)
    assert_failed(strict, "regression")
    assert "confirmed" not in strict["msg"] and "output_throughput baseline" in strict["msg"]


def test_probe_apis_gate_each_endpoint_in_one_call(tmp_path):
    """The deploy canary's one call (probe_apis): a model that answers completions but never a chat probe within its
    budget (its thinking cut off) fails on chat alone, the message that endpoint's own; a healthy server passes
    both."""
    with fake_server("ok", "--reasoning", "open", "--no-think-toggle") as (url, dummy):
        res, dummy_dt = run_module(tmp_path, base_url=url, probes_only=True, probe_apis=["completions", "chat"],
                                   probe_think_tokens=0)
    assert res["failed"] and res["failed_apis"] == ["chat"], res.get("msg")
    assert res["apis"]["completions"]["failed"] is False and res["apis"]["chat"]["failure_class"] == "incoherent"
    assert res["msg"] == res["apis"]["chat"]["msg"] and res["msg"].startswith("serving_bench failed [")
    with fake_server("ok") as (url, dummy):
        res, dummy_dt = run_module(tmp_path, base_url=url, probes_only=True, probe_apis=["completions", "chat"])
    assert not res.get("failed") and res["failed_apis"] == [] and sorted(res["apis"]) == ["chat", "completions"]
    assert all(r["coherence"]["passed"] for r in res["apis"].values())

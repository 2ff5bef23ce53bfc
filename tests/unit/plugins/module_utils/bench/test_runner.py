# -*- coding: utf-8 -*-
# Copyright: gpuhost.sglang contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""BenchRun in-process with a fake client: every step, and the one failure path that saves partial results."""
from __future__ import absolute_import, division, print_function

__metaclass__ = type

import os

from ansible_collections.gpuhost.sglang.plugins.module_utils.bench import inputs as bench_inputs
from ansible_collections.gpuhost.sglang.plugins.module_utils.bench import runner
from ansible_collections.gpuhost.sglang.plugins.module_utils.bench import store as bench_store
from ansible_collections.gpuhost.sglang.plugins.modules import serving_bench as sb
from ansible_collections.gpuhost.sglang.tests.harness.fake_bench_client import FakeClient


def params(tmp_path=None, **kw):
    p = {k: v.get("default") for k, v in sb.argument_spec().items()}
    p.update(base_url="http://127.0.0.1:30000", plots=False)
    if tmp_path is not None:
        p.update(report_dir=str(tmp_path / "reports"), baseline_dir=str(tmp_path / "baselines"))
    p.update(kw)
    return p


def run(p, client, check_mode=False):
    return runner.BenchRun(p, client=client, check_mode=check_mode).execute()


def run_doc(p, res):
    return bench_store.read_json(bench_store.run_path(p["report_dir"], res.out["run_id"]))


def test_passing_run_records_then_compares_baseline(tmp_path):
    p = params(tmp_path, concurrency="1,4", run_id="r1")
    res = run(p, FakeClient())
    assert not res.failed, res.msg
    assert [r["concurrency"] for r in res.out["results"]] == [1, 4]
    assert {r["regression"]["status"] for r in res.out["results"]} == {"recorded"}
    assert res.out["coherence"]["passed"] and res.out["coherence"]["probes_passed"] == 8
    assert res.out["ignore_eos_accepted"] is True
    assert res.msg.startswith("serving_bench passed: c=1 ")
    res2 = run(params(tmp_path, concurrency="1,4", run_id="r2"), FakeClient())
    assert not res2.failed, res2.msg
    assert all(r["regression"]["status"] == "compared" for r in res2.out["results"])
    assert res2.out["results"][0]["regression"]["baseline_run_id"] == "r1"
    assert os.path.isfile(os.path.join(p["report_dir"], "r2.md"))


def test_slower_engine_is_a_regression_naming_the_metric(tmp_path):
    assert not run(params(tmp_path, concurrency=2, run_id="base"), FakeClient()).failed
    res = run(params(tmp_path, concurrency=2, run_id="slow"), FakeClient(ttft=0.1, tpot=0.02))
    assert res.failed and res.out["failure_class"] == "regression"
    assert "tpot_ms.p50 baseline" in res.msg and "output_throughput baseline" in res.msg
    doc = run_doc(params(tmp_path), res)
    assert doc["levels"]["2"]["regression"]["passed"] is False


def test_failure_in_second_level_keeps_the_first_and_saves_the_failure(tmp_path):
    p = params(tmp_path, concurrency="1,4", run_id="part", warmup=0, min_requests=8)
    res = run(p, FakeClient(errors_at_call={3: "http_5xx"}))
    assert res.failed and res.out["failure_class"] == "http_5xx"
    assert "c=4: 8/8 requests failed: http_5xx=8" in res.msg
    doc = run_doc(p, res)
    assert sorted(doc["levels"]) == ["1", "4"] and doc["levels"]["1"]["passed"] is True
    assert doc["levels"]["4"]["regression"] == {"status": "not_checked"}
    assert doc["failure_class"] == "http_5xx" and doc["failures"][0].startswith("http_5xx: c=4")
    hist = bench_store.read_jsonl(os.path.join(p["report_dir"], "history.jsonl"))
    assert [(h["concurrency"], h["passed"]) for h in hist] == [(1, True), (4, False)]


def test_exception_inside_a_step_is_internal_error_with_partial_results_saved(tmp_path):
    p = params(tmp_path, concurrency="1,4", run_id="crash", warmup=0)
    res = run(p, FakeClient(raise_at_call=3))  # call 1 is the ignore_eos preflight
    assert res.failed and res.out["failure_class"] == "internal_error"
    assert "RuntimeError: fake client crashed" in res.msg
    assert sorted(run_doc(p, res)["levels"]) == ["1"]


def test_wrong_probe_answers_fail_the_coherence_gate_before_load(tmp_path):
    client = FakeClient(answer="banana")
    res = run(params(tmp_path, concurrency=1, run_id="coh"), client)
    assert res.failed and res.out["failure_class"] == "incoherent"
    assert "coherence probes failed (0/8 passed)" in res.msg
    assert [c[0] for c in client.calls] == ["probe"]


def test_ignore_eos_rejected_warns_and_measures_without_it(tmp_path):
    res = run(params(tmp_path, concurrency=1, run_id="eos"), FakeClient(reject_ignore_eos=True))
    assert not res.failed, res.msg
    assert res.out["ignore_eos_accepted"] is False and "422" in res.out["ignore_eos_rejection"]
    assert any("rejected ignore_eos" in w for w in res.warnings)


def test_unreachable_server_is_classified(tmp_path):
    res = run(params(tmp_path, run_id="down"), FakeClient(models=()))
    assert res.failed and res.out["failure_class"] == "connection_refused"


def test_probes_only_and_check_mode_and_report_mode(tmp_path):
    client = FakeClient()
    res = run(params(tmp_path, probes_only=True, run_id="po"), client)
    assert not res.failed and res.msg.startswith("coherence probes passed (8/8)")
    assert [c[0] for c in client.calls] == ["probe"]
    client = FakeClient()
    res = run(params(tmp_path, run_id="cm"), client, check_mode=True)
    assert res.out["skipped"] and client.calls == []
    res = run(params(tmp_path, mode="report", run_id="po"), FakeClient())
    assert not res.failed and res.out["coherence"]["passed"]
    res = run(params(tmp_path, mode="report", run_id="nope"), FakeClient())
    assert res.failed and "no run file for run_id nope" in res.msg


def test_duplicate_concurrency_levels_are_refused_naming_the_variable(tmp_path):
    # concurrency=8,8 ran 8 twice and failed against itself
    res = run(params(tmp_path, concurrency="8,8"), FakeClient())
    assert res.failed and res.out["failure_class"] == "invalid_input"
    assert "concurrency='8,8' has duplicate levels: 8" in res.msg


def test_concurrency_above_the_file_descriptor_limit_is_refused_up_front(tmp_path, monkeypatch):
    # each stream holds one socket; past RLIMIT_NOFILE the client dies mid-level (EMFILE)
    monkeypatch.setattr(bench_inputs, "open_file_limit", lambda want: (256, 256))
    client = FakeClient()
    res = run(params(tmp_path, concurrency="1,1024"), client)
    assert res.failed and res.out["failure_class"] == "invalid_input"
    assert "concurrency=1024" in res.msg and "file-descriptor limit (RLIMIT_NOFILE) is 256" in res.msg
    assert client.calls == []


def test_concurrency_above_the_ephemeral_port_range_is_refused(tmp_path, monkeypatch):
    monkeypatch.setattr(bench_inputs, "ephemeral_ports", lambda: (60000, 60999))
    res = run(params(tmp_path, concurrency=2048), FakeClient())
    assert res.failed and "net.ipv4.ip_local_port_range 60000-60999 gives 1000 ports" in res.msg


def test_a_level_runs_at_least_min_duration_and_min_requests(tmp_path):
    # a 0.1 s level measures scheduling noise, not the server
    client = FakeClient(ttft=0.01, tpot=0.001)
    res = run(params(tmp_path, concurrency=2, min_duration_s=3.0, min_requests=20, warmup=0), client)
    assert not res.failed, res.msg
    r = res.out["results"][0]
    assert r["duration_s"] >= 3.0 and r["requests"] >= 20
    assert r["sizing"]["calibration_requests"] == 20 and r["sizing"]["min_duration_s"] == 3.0


def test_threshold_comes_from_measured_noise_not_only_the_tolerance(tmp_path):
    # a noisy baseline (trial spread 15%) must widen the threshold beyond the fixed 10% tolerance
    assert not run(params(tmp_path, concurrency=2, run_id="b", trials=3), FakeClient()).failed
    path = bench_store.baseline_path(str(tmp_path / "baselines"), os.listdir(str(tmp_path / "baselines"))[0][:16])
    doc = bench_store.read_json(path)
    for m in doc["levels"]["2"]["metrics"].values():
        m["spread"] = 0.15
    bench_store.atomic_write_json(path, doc)
    res = run(params(tmp_path, concurrency=2, run_id="n", trials=3), FakeClient(tpot=0.0112))
    assert not res.failed, res.msg  # ~11% slower is inside the noise
    chk = {c["metric"]: c for c in res.out["results"][0]["regression"]["checks"]}
    assert chk["output_throughput"]["threshold"] > 0.15


def test_unverified_counts_are_not_gated_as_verified_and_never_replace_a_baseline(tmp_path):
    # a verified-free baseline first (usage within the text), then a server whose usage claims 10x, no /metrics
    assert not run(params(tmp_path, concurrency=2, run_id="base"), FakeClient()).failed
    res = run(params(tmp_path, concurrency=2, run_id="lie"), FakeClient(usage_tokens=640))
    assert not res.failed, res.msg
    lvl = res.out["results"][0]
    assert lvl["counts"] == "unverified" and "--enable-metrics" in lvl["counts_reason"]
    checks = dict((c["metric"], c) for c in lvl["regression"]["checks"])
    assert checks["output_throughput"]["counts"] == "unverified" and "baseline" not in checks["output_throughput"]
    assert checks["tpot_ms.p50"]["skipped"].startswith("not compared: c=2: token counts unverified")
    assert checks["ttft_ms.p50"]["baseline"] and lvl["regression"]["counts"] == "unverified"
    res = run(params(tmp_path, concurrency=2, run_id="lie2", update_baseline=True), FakeClient(usage_tokens=640))
    assert res.failed and res.out["failure_class"] == "unverified_counts", res.msg
    assert "update_baseline=true: c=2: no baseline recorded: c=2: token counts unverified" in res.msg
    base = bench_store.load_baseline(str(tmp_path / "baselines"), lvl["regression"]["key"])
    assert base["levels"]["2"]["run_id"] == "base" and base["levels"]["2"]["counts"] == "unchecked"
    hist = bench_store.read_jsonl(os.path.join(str(tmp_path / "reports"), "history.jsonl"))
    assert [h["counts"] for h in hist] == ["unchecked", "unverified", "unverified"]


def test_every_level_is_warmed_up_at_its_own_concurrency_first(tmp_path):
    # a c=8 level after a c=1 level: its own warm-up, one request per slot sent at c=8, right before it is measured
    client = FakeClient()
    res = run(params(tmp_path, concurrency="1,8", run_id="warm", min_duration_s=0), client)
    assert not res.failed, res.msg
    loads = [c for c in client.calls if c[0] == "load"]
    for lvl in res.out["results"]:
        c = lvl["concurrency"]
        assert lvl["warmup"]["requests"] >= c and lvl["warmup"]["concurrency"] == c, lvl.get("warmup")
        measured = loads.index(("load", lvl["num_prompts"], c))
        assert loads[measured - 1] == ("load", lvl["warmup"]["requests"], c), loads

# -*- coding: utf-8 -*-
# Copyright: gpuhost.sglang contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""serving_bench and GPU health: the health rides with every result, a run whose GPUs degrade never becomes a
baseline, a verdict across health states is refused. Readings come from the fake NVML's failure states."""
from __future__ import absolute_import, division, print_function

__metaclass__ = type

import os

from ansible_collections.gpuhost.sglang.plugins.module_utils.bench import runner
from ansible_collections.gpuhost.sglang.plugins.module_utils.bench import store as bench_store
from ansible_collections.gpuhost.sglang.plugins.module_utils.gpu import health
from ansible_collections.gpuhost.sglang.plugins.modules import serving_bench as sb
from ansible_collections.gpuhost.sglang.tests.harness import fake_nvml as fake
from ansible_collections.gpuhost.sglang.tests.harness.fake_bench_client import FakeClient


def reading(box):
    return health.read(box, kernel_log=([], None))


OK = reading(fake.h200_box())


def params(tmp_path, **kw):
    p = {k: v.get("default") for k, v in sb.argument_spec().items()}
    p.update(base_url="http://127.0.0.1:30000", plots=False, concurrency=2,
             report_dir=str(tmp_path / "reports"), baseline_dir=str(tmp_path / "baselines"))
    p.update(kw)
    return p


def run(p):
    return runner.BenchRun(p, client=FakeClient()).execute()


def baseline(tmp_path, res):
    return bench_store.load_baseline(str(tmp_path / "baselines"), res.out["results"][0]["regression"]["key"])


def finalize(tmp_path, run_id, after):
    return run(params(tmp_path, mode="finalize", run_id=run_id, gpu_health_after=after))


def test_health_rides_with_every_result_and_the_fingerprint(tmp_path):
    res = run(params(tmp_path, concurrency="1,2", run_id="h1", gpu_health=OK))
    assert not res.failed, res.msg
    assert all(r["gpu_health"]["state"] == "ok" for r in res.out["results"])
    assert res.out["results"][0]["gpu_health"]["gpus"][0]["pcie_max"] == "gen5 x16"
    doc = bench_store.read_json(bench_store.run_path(str(tmp_path / "reports"), "h1"))
    assert doc["fingerprint_gpu_health"]["state"] == "ok"
    hist = bench_store.read_jsonl(os.path.join(str(tmp_path / "reports"), "history.jsonl"))
    assert [h["gpu_health"]["state"] for h in hist] == ["ok", "ok"]


def test_baseline_pending_until_finalize_then_recorded_with_its_health(tmp_path):
    res = run(params(tmp_path, run_id="h1", gpu_health=OK))
    assert res.out["results"][0]["regression"]["status"] == "pending"
    assert baseline(tmp_path, res) is None
    fin = finalize(tmp_path, "h1", OK)
    assert not fin.failed, fin.msg
    assert fin.out["baselines"] == {"2": "recorded"} and fin.out["gpu_degraded"] == []
    base = baseline(tmp_path, res)
    assert base["levels"]["2"]["gpu_health"]["state"] == "ok" and base["levels"]["2"]["run_id"] == "h1"


def test_gpus_degrading_during_the_run_never_become_a_baseline(tmp_path):
    res = run(params(tmp_path, run_id="hot", gpu_health=OK))
    assert not res.failed, res.msg
    fin = finalize(tmp_path, "hot", reading(fake.thermal_throttle_box(4.0)))
    assert fin.failed and fin.out["failure_class"] == "gpu_degraded"
    assert "gpu0: thermal violation 4.0 s during the run" in fin.msg
    assert baseline(tmp_path, res) is None
    doc = bench_store.read_json(bench_store.run_path(str(tmp_path / "reports"), "hot"))
    assert doc["levels"]["2"]["regression"]["status"] == "discarded" and doc["gpu_degraded"]
    # the next healthy run records the baseline, not the degraded one
    run(params(tmp_path, run_id="cool", gpu_health=OK))
    assert not finalize(tmp_path, "cool", OK).failed
    assert baseline(tmp_path, res)["levels"]["2"]["run_id"] == "cool"


def test_xid_or_ecc_during_the_run_is_degradation(tmp_path):
    run(params(tmp_path, run_id="x", gpu_health=OK))
    after = health.read(fake.h200_box(), kernel_log=(["NVRM: Xid (PCI:0000:18:00): 79, pid=1, GPU has fallen off the bus."], None))
    fin = finalize(tmp_path, "x", after)
    assert fin.failed and fin.out["gpu_degraded"] == ["gpu0: xid 79", "gpu0: 1 new xid event(s)"]
    run(params(tmp_path, run_id="e", gpu_health=OK))
    fin = finalize(tmp_path, "e", reading(fake.ecc_box(3)))
    assert "gpu0: ecc uncorrected volatile 0 -> 3" in fin.out["gpu_degraded"]


def test_degraded_before_the_run_records_nothing(tmp_path):
    res = run(params(tmp_path, run_id="d", gpu_health=reading(fake.remap_pending_box())))
    reg = res.out["results"][0]["regression"]
    assert not res.failed and reg["status"] == "withheld"
    assert "remapped rows pending" in reg["reason"] and any("no baseline recorded" in w for w in res.warnings)
    assert baseline(tmp_path, res) is None


def test_verdict_across_health_states_is_refused_with_the_reason(tmp_path):
    run(params(tmp_path, run_id="base", gpu_health=OK))
    assert not finalize(tmp_path, "base", OK).failed
    res = run(params(tmp_path, run_id="gen2", gpu_health=reading(fake.h200_box(clock_events=0x20))))
    assert res.failed and res.out["failure_class"] == "gpu_health"
    assert "regression verdict refused: this run's GPUs are degraded" in res.msg
    assert "sw_thermal_slowdown" in res.msg
    # same health: compared as usual
    res = run(params(tmp_path, run_id="again", gpu_health=OK))
    assert not res.failed and res.out["results"][0]["regression"]["status"] == "compared"
    # a baseline measured with health recorded is not compared with a run that has none
    res = run(params(tmp_path, run_id="blind"))
    assert res.failed and "this run has none" in res.msg


def test_healthy_states_that_differ_are_refused(tmp_path):
    run(params(tmp_path, run_id="b", gpu_health=OK))
    finalize(tmp_path, "b", OK)
    other = reading(fake.h200_box())
    other["gpus"][0]["persistence_mode"] = False
    res = run(params(tmp_path, run_id="pm", gpu_health=other))
    assert res.failed and "GPU health differs" in res.msg


def test_finalize_input_errors_name_the_variable(tmp_path):
    res = run(params(tmp_path, mode="finalize", run_id="x"))
    assert res.failed and "gpu_health_after" in res.msg
    res = run(params(tmp_path, run_id="x", gpu_health={"gpus": []}))
    assert res.failed and "gpu_health must be gpu_facts' health result" in res.msg


def test_finalize_after_an_unknown_reading_marks_nothing(tmp_path):
    """A host whose NVML could not be read before the run (a tuning campaign on a CPU host passes gpu_facts' reading
    as it is) has nothing to degrade from: finalize marks nothing and no baseline was pending."""
    unknown = health.read_safely(None)
    res = run(params(tmp_path, run_id="cpu", gpu_health=unknown))
    assert not res.failed and res.out["results"][0]["regression"]["status"] == "withheld"
    fin = finalize(tmp_path, "cpu", health.read_safely(None))
    assert not fin.failed and fin.out["gpu_degraded"] == []
    assert "gpu_degraded" not in bench_store.read_json(bench_store.run_path(str(tmp_path / "reports"), "cpu"))

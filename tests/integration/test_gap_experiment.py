# -*- coding: utf-8 -*-
# Copyright: gpuhost.sglang contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""benchmarks/gpu/sglang/gap.py, the H200 gap experiment, run here against the replayed bytes of a real SGLang 0.5.17
(the fake server's replay mode) with a stand-in for bench_serving (tests/integration/files/fake_bench_serving.py),
so that the device run, which costs device minutes, works the first time: the interleaving, the ground truth read
around every run (counters, the server's processes by session, the server's per-request records) and the outputs."""
from __future__ import absolute_import, division, print_function

__metaclass__ = type

import json
import lzma
import os
import subprocess
import time
from types import SimpleNamespace

from fakeserver import fake_server  # pylint: disable=import-error

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.abspath(os.path.join(HERE, "..", ".."))
CACHE = os.path.join(os.environ.get("GPUHOST_ROOT") or ROOT, ".cache")
ENGINE_PY = os.path.join(CACHE, "engine-venv", "bin", "python")  # transformers, for gap.py's prompts
MODEL = os.path.join(CACHE, "tinymodel", "good")
REC = os.path.join(ROOT, "tests", "fixtures", "sglang-0.5.17", "exchanges.json")


def record(now):
    return {"request_received_ts": now + 1.0, "api_server_dispatch_finish_ts": now + 1.001,
            "request_finished_ts": now + 1.2, "response_sent_to_client_ts": now + 1.201, "completion_tokens": 64,
            "decode_throughput": 63 / 0.18, "request_parameters": "{}", "e2e_latency": 0.2}


def test_server_records_are_read_once_and_timed_from_the_run(tmp_path, monkeypatch):
    monkeypatch.syspath_prepend(os.path.join(ROOT, "benchmarks", "gpu", "sglang"))
    import gap  # pylint: disable=import-error
    log = tmp_path / "sglang-request-metrics-20261203_04.log"
    log.write_text(json.dumps(record(100.0)) + "\n")
    rl = gap.ReqLog(str(tmp_path))
    assert len(rl.new()) == 1 and rl.new() == []
    with open(str(log), "a") as f:
        f.write(json.dumps(record(200.0)) + "\n" + json.dumps(dict(record(200.0), request_received_ts=201.1)) + "\n")
    recs = rl.new()
    assert len(recs) == 2 and "request_parameters" not in recs[0]
    srv, per_req = gap.server_side(recs, 200.0)
    # first token = finished - (tokens - 1) / decode_throughput = 201.2 - 0.18 = 201.02
    assert srv["requests"] == 2 and srv["arrival_spread_s"] == 0.1 and srv["makespan_s"] == 0.2
    assert srv["ttft_p50_ms"] == 20.0 and srv["tpot_p50_ms"] == round(1000 * 0.18 / 63, 3)
    assert srv["out_tok_s"] == 640.0 and per_req[0] == [1.0, 1.001, 1.02, 1.2, 1.201, 64, None, None]


class Utilization(object):
    """nvidia-ml-py's c_nvmlUtilization_t: ``gpu`` and ``memory`` percents."""

    def __init__(self, gpu, memory):
        self.gpu, self.memory = gpu, memory


class SampledNVML(object):
    """The pynvml calls GpuSampler makes, answering a fixed series (then the last value), or refusing; GPM shaped as
    nvidia-ml-py has it (c_nvmlGpmMetricsGet_t: version, numMetrics, sample1, sample2, metrics[].metricId/.value;
    NVML_GPM_METRIC_SM_UTIL 2, NVML_GPM_METRIC_SM_OCCUPANCY 3 in nvml.h), answering ``gpm`` {metric id: value}."""

    NVML_GPM_METRICS_GET_VERSION, NVML_GPM_METRIC_SM_UTIL, NVML_GPM_METRIC_SM_OCCUPANCY = 1, 2, 3

    def __init__(self, series, refuse=None, gpm=None):
        self.series, self.refuse, self.calls, self.gpm = list(series), refuse, 0, gpm
        self.gpm_samples = []

    @staticmethod
    def c_nvmlGpmMetricsGet_t():  # pylint: disable=invalid-name
        return SimpleNamespace(version=0, numMetrics=0, sample1=None, sample2=None,
                               metrics=[SimpleNamespace(metricId=0, value=0.0) for dummy in range(98)])

    def nvmlGpmQueryDeviceSupport(self, handle):
        return SimpleNamespace(isSupportedDevice=int(self.gpm is not None))

    def nvmlGpmSampleAlloc(self):
        return SimpleNamespace(taken=None)

    def nvmlGpmSampleGet(self, handle, sample):
        sample.taken = len(self.gpm_samples)
        self.gpm_samples.append(sample)

    def nvmlGpmMetricsGet(self, get):
        assert get.version == 1 and get.sample1.taken < get.sample2.taken
        for m in get.metrics[:get.numMetrics]:
            m.value = self.gpm[m.metricId]

    def nvmlInit(self):
        if self.refuse:
            raise RuntimeError(self.refuse)

    def nvmlDeviceGetHandleByIndex(self, index):
        return "handle-%d" % index

    def nvmlDeviceGetUtilizationRates(self, handle):
        assert handle == "handle-0"
        self.calls += 1
        return Utilization(*self.series[min(self.calls, len(self.series)) - 1])


def test_the_gpu_sampler_averages_nvml_utilization_over_a_run(monkeypatch):
    monkeypatch.syspath_prepend(os.path.join(ROOT, "benchmarks", "gpu", "sglang"))
    import gap  # pylint: disable=import-error
    nvml = SampledNVML([(90, 40), (100, 60), (95, 50)])
    g = gap.GpuSampler(nvml, period=0.01)
    g.start()
    deadline = time.monotonic() + 5
    while nvml.calls < 3 and time.monotonic() < deadline:
        time.sleep(0.01)
    out = g.stop()
    n = out["samples"]
    assert n >= 3 and out["util_min"] == 90 and out["util_p50"] in (95, 97.5, 100), out
    assert out["util_mean"] == round((90 + 100 + 95 + 95 * (n - 3)) / n, 1) and out["period_s"] == 0.01
    assert "sm_util" not in out and out["gpm_unavailable"] == "RuntimeError: GPM not supported on this GPU"
    g = gap.GpuSampler(SampledNVML([(99, 70)], gpm={2: 63.21, 3: 41.0}), period=0.01)
    g.start()
    time.sleep(0.03)
    out = g.stop()
    assert out["sm_util"] == 63.2 and out["sm_occupancy"] == 41.0 and "gpm_unavailable" not in out, out
    assert gap.GpuSampler(SampledNVML([], refuse="Driver Not Loaded")).stop() == {
        "unavailable": "RuntimeError: Driver Not Loaded"}


def test_gap_experiment_smoke_plan_against_the_replay(tmp_path):
    """The quick plan's shape (gap.PLANS["smoke"]: three levels, ours then the anchor at each) end to end against the
    replay server: the restart, both arms, the server's counters, the client's CPU, the saved server records."""
    assert os.access(ENGINE_PY, os.X_OK) and os.path.isdir(MODEL), "stage 20 fixtures missing (engine venv, tiny model)"
    work, out = tmp_path / "w", tmp_path / "out"
    (work / "reqmetrics").mkdir(parents=True)
    with fake_server("ok", "--replay", REC) as (url, proc):
        (work / "server.pid").write_text(str(proc.pid))  # started in its own session, like device.sh's setsid
        # a per-request record as SGLang 0.5.17's exporter writes it, left by an earlier request: saved, no run's
        (work / "reqmetrics" / "sglang-request-metrics-20261203_04.log").write_text(json.dumps(record(time.time())) + "\n")
        env = dict(os.environ, SGLANG_WORKDIR=str(work), PYTHONPATH=os.path.join(HERE, "files"))
        cmd = [ENGINE_PY, os.path.join(ROOT, "benchmarks", "gpu", "sglang", "gap.py"), "--base-url", url,
               "--out", str(out), "--model-dir", MODEL, "--plan", "smoke", "--anchor-module", "fake_bench_serving",
               "--restart-cmd", "echo restarted"]
        p = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        stdout, dummy = p.communicate(timeout=300)
    assert p.returncode == 0, stdout[-3000:]
    rows = [json.loads(line) for line in (out / "gap-raw.jsonl").read_text().splitlines()]
    runs = [(r["tool"], r["c"]) for r in rows if r["tool"] in ("ours", "anchor") and not r.get("warmup")]
    assert runs == [("ours", 32), ("anchor", 32), ("ours", 16), ("anchor", 16), ("ours", 1), ("anchor", 1)]
    assert rows[0]["tool"] == "restart" and rows[0]["rc"] == 0 and "restarted" in rows[0]["output"]
    for r in rows:
        if r["tool"] in ("ours", "anchor"):
            assert not r.get("error"), r
            assert r["out_tok_s"] > 0 and r["server_counters"]["generation_tokens"] is not None, r
            assert r["client_cpu_s"] > 0 and r["server_cpu_util"], r  # the fake server's process, by session
            if r["tool"] == "ours":  # the replay counts what it served: the server's counter agrees with usage
                assert r["server_counters"]["generation_tokens"] == r["output_tokens"]
                assert len(r["client_per_request"]) == r["num_prompts"]
    assert not [r for r in rows if r.get("server_reqs")]
    summary = (out / "gap-summary.txt").read_text()
    assert "32 | 32 | ours" in summary and "1 | 4 | anchor" in summary
    with lzma.open(str(out / "server-requests.jsonl.xz"), "rt") as f:
        saved = [json.loads(line) for line in f]
    assert len(saved) == 1 and "request_parameters" not in saved[0]
    assert sorted(os.listdir(str(out))) == ["anchor.log", "gap-raw.jsonl", "gap-summary.txt", "server-requests.jsonl.xz"]


def test_gap_explain_plan_interleaves_the_arms_with_the_servers_own_records(tmp_path):
    """The explain plan end to end: c=1 first, every arm at each level (ours, bench_serving on /v1/completions and on
    /generate with our prompts, bench_serving on its own prompts), the cache flushed before every run, the server's
    per-request records attributed to each run by arrival time with the anchor's warmup left out, and the summary
    with the ground-truth lines."""
    assert os.access(ENGINE_PY, os.X_OK) and os.path.isdir(MODEL), "stage 20 fixtures missing (engine venv, tiny model)"
    work, out = tmp_path / "w", tmp_path / "out"
    (work / "reqmetrics").mkdir(parents=True)
    with fake_server("ok", "--replay", REC, "--export-metrics-to-file-dir", str(work / "reqmetrics")) as (url, proc):
        (work / "server.pid").write_text(str(proc.pid))
        env = dict(os.environ, SGLANG_WORKDIR=str(work), PYTHONPATH=os.path.join(HERE, "files"))
        cmd = [ENGINE_PY, os.path.join(ROOT, "benchmarks", "gpu", "sglang", "gap.py"), "--base-url", url,
               "--out", str(out), "--model-dir", MODEL, "--plan", "explain-quick", "--anchor-module",
               "fake_bench_serving"]
        p = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        stdout, dummy = p.communicate(timeout=300)
    assert p.returncode == 0, stdout[-3000:]
    rows = [json.loads(line) for line in (out / "gap-raw.jsonl").read_text().splitlines()]
    runs = [r for r in rows if r["tool"] in ("ours", "anchor") and not r.get("warmup")]
    four = ["ours", "anchor-oai", "anchor-gen", "anchor-ids"]
    assert [(r["arm"], r["c"]) for r in runs] == [(a, 1) for a in four[:3]] + [(a, 16) for a in four * 2]
    for r in runs:
        assert not r.get("error") and r["flushed"][0] == 200, r
        main = r["server_main"]
        assert main["requests"] == r["num_prompts"] and main["warmup_requests"] == r["warmups"], r
        if r["tool"] == "anchor":  # its warmup request, then its second of sleep, before its main requests
            assert r["warmups"] == 1 and main["idle_after_warmup_s"] >= 0.9 and main["whole_rate"] < main["rate"]
        assert len(r["server_per_request"]) == r["num_prompts"] + r["warmups"]
    summary = (out / "gap-summary.txt").read_text()
    assert "16 | 32 | anchor-gen | 2 |" in summary and "server-window tok/s | tool vs server" in summary
    assert "against the server's whole-run window" in summary  # the anchor's warmup and idle, explained
    # the side-by-side table at the end: ours' TTFT split by the server's timestamps, no GPU here (no pynvml in the
    # engine venv: the sampler says why, and every run records it)
    assert "| arrival / delivery / residual ms" in summary and "ours c=16 x 32: TTFT p50" in summary
    assert "anchor-oai c=16 x 32 vs ours: server-window rate" in summary
    sampler = [r for r in rows if r["tool"] == "gpu_sampler"]
    assert len(sampler) == 1 and sampler[0]["ok"] is False and "pynvml" in sampler[0]["info"], sampler
    assert all(r["gpu"] == {"unavailable": sampler[0]["info"]} for r in runs)
    with lzma.open(str(out / "server-requests.jsonl.xz"), "rt") as f:
        assert len(f.read().splitlines()) == sum(r["num_prompts"] + r["warmups"] for r in rows
                                                 if r["tool"] in ("ours", "anchor"))

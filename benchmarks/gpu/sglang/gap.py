#!/usr/bin/env python3
"""The c=256 gap experiment: ours (serving_bench's client) vs SGLang's bench_serving on one live server, with the
server's own ground truth around every run. One device run:

1. restart timing (``--restart-cmd``, e.g. ``bash benchmarks/gpu/sglang/device.sh restart``: stop, start again with
   the JIT cache warm, time to ready);
2. a warm-up run, then per plan entry (concurrency, prompts, repetitions, arms, flush) each arm in turn, repeated:
   interleaved (ours, anchor, ours, anchor). The arms (ARMS): ours on /v1/completions; bench_serving with
   ``--backend sglang-oai`` (/v1/completions) and with ``--backend sglang`` (/generate), both sent our own prompts
   (its ``custom`` dataset: a JSON-lines file of them, output length fixed with ``--sharegpt-output-len``); and
   bench_serving on its own ``random-ids`` prompts (the arm of the 2026-12-03 run: on a 384-token vocabulary those
   repeat, and the server serves most of their tokens from its radix cache). ``flush``: POST /flush_cache before
   every run (sglang 0.5.17 http_server.py), so every run starts from an empty cache;
3. around every run: the server's counters and histograms (/metrics: generation and prompt tokens, requests, TTFT,
   inter-token latency, end-to-end latency, queue time), the CPU time of every server process (its session) and of
   the client (ours: the shard processes; the anchor: its own worker process), the machine's busy cores, and the
   server's per-request timestamps when it runs with ``--export-metrics-to-file --export-metrics-to-file-dir DIR``
   (sglang 0.5.17 python/sglang/srt/observability/request_metrics_exporter.py writes each finished request's
   meta_info as one JSON line to DIR/sglang-request-metrics-YYYYMMDD_HH.log; the fields come from
   python/sglang/srt/observability/req_time_stats.py convert_to_output_meta_info: request_received_ts,
   api_server_dispatch_finish_ts, request_finished_ts, response_sent_to_client_ts, decode_throughput, all
   wall-clock seconds; tokenizer_manager.py adds e2e_latency, prompt_tokens, completion_tokens, cached_tokens),
   attributed to a run by arrival time (gap_explain.attribute), and the radix cache's own counters
   (sglang:evicted_tokens_total, sglang:eviction_duration_seconds, the kv_* token gauges).
The summary computes every tool's rate over the server's window of its main requests as well as its own and prints,
for each difference over 5%, the ground-truth line that explains it, or 'unexplained' (gap_explain.py).
Also around every run: the GPU's busy share (GpuSampler: NVML utilization every 0.1 s from a thread; --no-gpu, or a
machine without pynvml or a GPU, records why instead); the summary ends with the side-by-side table (sidebyside.py:
each tool against the server's window and counters, ours against bench_serving within 2%, the scheduler's CPU share,
the GPU's busy share, ours' TTFT split by the server's timestamps). Plan ``gpubound``: the GPU-bound model
(gpubound_model.py, served as ``--served-name gpubound``), ours against bench_serving on the same prompts and
endpoint at c = 1, 16, 64, 256.

The anchor runs in one long-lived worker process that imports sglang.benchmark.serving once and calls its
cli_main per run (a fresh ``python -m sglang.bench_serving`` cost ~60 s of start-up a run on the H200 machine).

    python3 benchmarks/gpu/sglang/gap.py --base-url http://127.0.0.1:30000 --out DIR [--plan explain|default|...]
        [--reqlog-dir /tmp/sglang/reqmetrics] [--restart-cmd CMD] [--budget-s 540] [--served-name tiny] [--no-gpu]
Writes DIR/gap-raw.jsonl (one line a run, per-request arrays included), DIR/gap-summary.txt (the table) and
DIR/server-requests.jsonl.xz (every per-request record of the server, without the prompts).
"""
import argparse
import glob
import json
import lzma
import multiprocessing
import os
import random
import resource
import shlex
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.request

import gap_explain as gx
import sidebyside

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
sys.path.insert(0, os.path.join(ROOT, "collections"))
from ansible_collections.gpuhost.sglang.plugins.module_utils.bench import client as bench_client  # noqa: E402
from ansible_collections.gpuhost.sglang.plugins.module_utils.bench import metrics as bench_metrics  # noqa: E402
from ansible_collections.gpuhost.sglang.plugins.module_utils.bench import server_metrics as sm  # noqa: E402

STUB = os.path.join(ROOT, "benchmarks", "gpu", "sglang", "stub")
IN_LEN, OUT_LEN = 32, 64
ANCHOR_WARMUPS = 1  # bench_serving's --warmup-requests: the first ones the server receives in an anchor run
# arm: (tool, bench_serving --backend, prompts: "ours" = our prompt list, "random-ids" = bench_serving's own)
ARMS = {"ours": ("ours", None, "ours"), "anchor-oai": ("anchor", "sglang-oai", "ours"),
        "anchor-gen": ("anchor", "sglang", "ours"), "anchor-ids": ("anchor", "sglang-oai", "random-ids")}
PAIR = ("ours", "anchor-ids")
THREE = ("ours", "anchor-oai", "anchor-gen")
LIKE = ("ours", "anchor-oai")  # like for like: the same prompts, both on /v1/completions
# (concurrency, prompts, repetitions, arms, flush before every run). default/quick: the 2026-12-03 run (c=256 with 256
# prompts is the single wave that showed the gap; 2048 prompts keep 256 in flight for ~14 s). explain: c=1 first,
# then c=16 with every arm (640 prompts x 115 tokens fill the 65536-token pool: the second half of a run with unique
# prompts evicts, as every run of 2026-12-03 after the first did), c=64, c=256 last; ~300 s of runs on the H200.
PLANS = {
    "default": [(256, 256, 2, PAIR, False), (256, 2048, 3, PAIR, False), (64, 1024, 2, PAIR, False),
                (16, 512, 2, PAIR, False), (1, 64, 2, PAIR, False)],
    "quick": [(256, 256, 1, PAIR, False), (16, 64, 1, PAIR, False), (1, 8, 1, PAIR, False)],
    # quick's shape (three levels, both arms, no flush) at a size the CPU test box runs in seconds: the plan the
    # harness is tested with against the replay server (tests/integration/test_gap_experiment.py)
    "smoke": [(32, 32, 1, PAIR, False), (16, 16, 1, PAIR, False), (1, 4, 1, PAIR, False)],
    "explain": [(1, 32, 2, THREE, True), (16, 640, 2, THREE + ("anchor-ids",), True), (64, 1024, 2, THREE, True),
                (256, 2048, 1, THREE, True)],
    "explain-quick": [(1, 4, 1, THREE, True), (16, 32, 2, THREE + ("anchor-ids",), True)],
    # the GPU-bound model (gpubound_model.py): ours against bench_serving on the same prompts and endpoint, the
    # contract's levels, the cache flushed before every run, twice each (interleaved: ours, anchor, ours, anchor);
    # at the expected 7-20 ms a step, 5-10 s a run, ~200 s in all on the H200 (unverified until run)
    "gpubound": [(1, 16, 2, LIKE, True), (16, 320, 2, LIKE, True), (64, 512, 2, LIKE, True), (256, 1024, 2, LIKE, True)],
    "gpubound-quick": [(1, 4, 1, LIKE, True), (16, 32, 1, LIKE, True)],
}
CACHE_METRICS = {"evicted_tokens": "sglang:evicted_tokens_total", "eviction_s": "sglang:eviction_duration_seconds_sum",
                 "evictions": "sglang:eviction_duration_seconds_count", "kv_available": "sglang:kv_available_tokens",
                 "kv_evictable": "sglang:kv_evictable_tokens", "kv_used": "sglang:kv_used_tokens"}
HISTOGRAMS = {"ttft": "sglang:time_to_first_token_seconds", "itl": "sglang:inter_token_latency_seconds",
              "e2e": "sglang:e2e_request_latency_seconds", "queue": "sglang:queue_time_seconds"}
SERVED = "tiny"  # --served-name: the server's --served-model-name
GPU_PERIOD_S = 0.1  # the NVML sampler's period
WORKDIR = os.environ.get("SGLANG_WORKDIR", "/tmp/sglang")  # device.sh's work directory (server.pid, reqmetrics/)
MONO_TO_WALL = time.time() - time.monotonic()  # one offset for every process forked from here (same clocks)


def get_metrics(base):
    return urllib.request.urlopen(base + "/metrics", timeout=10).read().decode()


def flush_cache(base):
    """POST /flush_cache (refused by the server while requests run): (HTTP status, seconds) or (error, seconds)."""
    t = time.monotonic()
    try:
        with urllib.request.urlopen(urllib.request.Request(base + "/flush_cache", b"", method="POST"), timeout=30) as r:
            status = r.status
    except urllib.error.HTTPError as e:
        status = e.code
    except OSError as e:
        status = repr(e)
    return status, round(time.monotonic() - t, 3)


def cache_snapshot(text):
    """The radix cache's own figures (CACHE_METRICS), summed over label sets; a metric the server lacks is absent."""
    names = dict((v, k) for k, v in CACHE_METRICS.items())
    out = {}
    for name, _labels, value in sm.parse(text):
        k = names.get(sm.canonical(name))
        if k is not None:
            out[k] = out.get(k, 0.0) + value
    return out


def cache_delta(before, after):
    """Counters as differences over the run, the kv gauges as read before it."""
    out = dict((k, v) for k, v in before.items() if k.startswith("kv_"))
    for k in ("evicted_tokens", "eviction_s", "evictions"):
        if k in after:
            out[k] = round(after[k] - before.get(k, 0.0), 4)
    return out


def hist_snapshot(text):
    """{key: {le: cumulative}} for the HISTOGRAMS, summed over label sets."""
    names = dict((v + "_bucket", k) for k, v in HISTOGRAMS.items())
    out = dict((k, {}) for k in HISTOGRAMS)
    for name, labels, value in sm.parse(text):
        k = names.get(sm.canonical(name))
        if k is None:
            continue
        le = labels.get("le")
        b = float("inf") if le in ("+Inf", "Inf", "inf") else float(le)
        out[k][b] = out[k].get(b, 0.0) + value
    return out


def hist_delta(before, after):
    res = {}
    for k, buckets in after.items():
        d = dict((le, v - before.get(k, {}).get(le, 0.0)) for le, v in buckets.items())
        q = dict((name, sm.histogram_quantile(p, d)) for name, p in (("p50", 0.5), ("p99", 0.99)))
        res[k] = {"count": d.get(float("inf"), 0.0)}
        for name, val in q.items():
            res[k][name + "_ms"] = round(val[0] * 1000, 2) if val else None
    return res


def server_pids():
    """Processes of the server's session (device.sh starts it with setsid and writes the leader's pid)."""
    try:
        with open(os.path.join(WORKDIR, "server.pid")) as f:
            sid = int(f.read().strip())
    except (OSError, ValueError):
        return {}
    out = {}
    for p in glob.glob("/proc/[0-9]*/stat"):
        try:
            with open(p) as f:
                s = f.read()
        except OSError:
            continue
        comm = s[s.index("(") + 1:s.rindex(")")]
        fields = s[s.rindex(")") + 2:].split()
        if int(fields[3]) == sid:  # field 6 of stat: session id
            out[int(p.split("/")[2])] = comm
    return out


def proc_cpu(pids):
    """{pid: (comm, cpu seconds)} from /proc/PID/stat utime + stime."""
    tck = os.sysconf("SC_CLK_TCK")
    out = {}
    for pid, comm in pids.items():
        try:
            with open("/proc/%d/stat" % pid) as f:
                s = f.read()
        except OSError:
            continue
        fields = s[s.rindex(")") + 2:].split()
        out[pid] = (comm, (int(fields[11]) + int(fields[12])) / tck)
    return out


def sys_busy():
    with open("/proc/stat") as f:
        v = [int(x) for x in f.readline().split()[1:]]
    return sum(v), v[3] + v[4]


class ReqLog(object):
    """Reads the server's per-request metrics files from where the last read stopped."""

    def __init__(self, d):
        self.dir, self.pos, self.seen = d, {}, []

    def new(self):
        out = []
        for path in sorted(glob.glob(os.path.join(self.dir or "/nonexistent", "sglang-request-metrics-*.log"))):
            with open(path) as f:
                f.seek(self.pos.get(path, 0))
                data = f.read()
                self.pos[path] = f.tell()
            for line in data.splitlines():
                try:
                    r = json.loads(line)
                except ValueError:
                    continue
                r.pop("request_parameters", None)  # the prompt and sampling parameters: large, and known here
                out.append(r)
        self.seen.extend(out)
        return out

    def save(self, path):
        """Every record read, compressed (``server-requests.jsonl.xz``)."""
        with lzma.open(path, "wt") as f:
            for r in self.seen:
                f.write(json.dumps(r) + "\n")
        return len(self.seen)


def pct(vals, q):
    vals = sorted(v for v in vals if v is not None)
    return vals[min(len(vals) - 1, int(len(vals) * q))] if vals else None


def server_side(recs, t0):
    """Per-request server timestamps of one run, relative to the run's start (wall clock, seconds)."""
    rows = []
    for r in recs:
        rcv, fin = r.get("request_received_ts"), r.get("request_finished_ts")
        if rcv is None or fin is None:
            continue
        ct = r.get("completion_tokens") or 0
        dt = r.get("decode_throughput")
        first = fin - (ct - 1) / dt if dt and ct > 1 else None  # decode_throughput = (tokens - 1) / decode time
        rows.append([round(rcv - t0, 4), round((r.get("api_server_dispatch_finish_ts") or rcv) - t0, 4),
                     round(first - t0, 4) if first else None, round(fin - t0, 4),
                     round((r.get("response_sent_to_client_ts") or fin) - t0, 4), ct, r.get("cached_tokens"),
                     r.get("prompt_tokens")])
    if not rows:
        return None, []
    rcv = [x[0] for x in rows]
    fin = [x[3] for x in rows]
    span = max(fin) - min(rcv)
    toks = sum(x[5] for x in rows)
    ttft = [(x[2] - x[0]) * 1000 for x in rows if x[2] is not None]
    tpot = [1000.0 / r["decode_throughput"] for r in recs if r.get("decode_throughput")]
    return {"requests": len(rows), "arrival_spread_s": round(max(rcv) - min(rcv), 4),
            "first_arrival_s": round(min(rcv), 4), "makespan_s": round(span, 4),
            "out_tok_s": round(toks / span, 1) if span > 0 else None,
            "ttft_p50_ms": round(pct(ttft, 0.5), 2) if ttft else None,
            "ttft_p99_ms": round(pct(ttft, 0.99), 2) if ttft else None,
            "tpot_p50_ms": round(pct(tpot, 0.5), 3) if tpot else None}, rows


def stalls(recs, t0, gap_s=0.1):
    """ITL gaps over ``gap_s`` in our records: how many, and the 50 ms windows (relative to t0) where most began. Gaps
    of many streams in one window: the server paused them all; scattered gaps: the client read late."""
    starts = {}
    n = 0
    for r in recs:
        times = r.get("chunk_times") or []
        for a, b in zip(times, times[1:]):
            if b - a > gap_s:
                n += 1
                w = round(int((a + MONO_TO_WALL - t0) / 0.05) * 0.05, 2)
                starts[w] = starts.get(w, 0) + 1
    top = sorted(starts.items(), key=lambda kv: -kv[1])[:8]
    return {"gaps_over_100ms": n, "top_windows": top}


class GpuSampler(object):
    """The GPU's busy share while a run goes: NVML's utilization of GPU ``index`` (nvidia-ml-py
    nvmlDeviceGetUtilizationRates: ``gpu``, the percent of the last sample period, between 1/6 s and 1 s by the
    product, during which one or more kernels ran; ``memory``, the percent during which device memory was read or
    written; NVML API reference, nvmlDeviceQueries) read every ``period`` seconds from a thread. "A kernel ran" is not
    "the SMs were full": where the GPU has GPM (Hopper and later), the SMs' busy share and occupancy over the whole
    run too (gpm_metrics). ``nvml``: the pynvml module (default: imported here); without it or a GPU every run
    records why instead."""

    def __init__(self, nvml=None, index=0, period=GPU_PERIOD_S):
        self.nvml, self.handle, self.why, self.period = nvml, None, None, period
        self.samples, self.thread, self.halt = [], None, threading.Event()
        self.gpm, self.gpm_why = None, None
        try:
            if self.nvml is None:
                import pynvml as nvml_module
                self.nvml = nvml_module
            self.nvml.nvmlInit()
            self.handle = self.nvml.nvmlDeviceGetHandleByIndex(index)
        except Exception as exc:  # ImportError, NVMLError: the runs go on without GPU figures, saying why
            self.why = "%s: %s" % (type(exc).__name__, exc)
            return
        try:  # GPM (Hopper and later): the SMs' own busy share over the whole run, from two samples
            if not self.nvml.nvmlGpmQueryDeviceSupport(self.handle).isSupportedDevice:
                raise RuntimeError("GPM not supported on this GPU")
            self.gpm = (self.nvml.nvmlGpmSampleAlloc(), self.nvml.nvmlGpmSampleAlloc())
        except Exception as exc:  # an older driver or nvidia-ml-py, or a GPU without GPM: said in every run
            self.gpm_why = "%s: %s" % (type(exc).__name__, exc)

    def gpm_metrics(self):
        """SM utilization and occupancy between the run's two GPM samples (NVML API reference, GPM functions:
        nvmlGpmMetricsGet with NVML_GPM_METRIC_SM_UTIL, "percentage of SMs that were busy", and
        NVML_GPM_METRIC_SM_OCCUPANCY, "percentage of warps that were active vs theoretical maximum")."""
        n = self.nvml
        self.nvml.nvmlGpmSampleGet(self.handle, self.gpm[1])
        get = n.c_nvmlGpmMetricsGet_t()
        get.version = n.NVML_GPM_METRICS_GET_VERSION
        get.numMetrics = 2
        get.sample1, get.sample2 = self.gpm
        get.metrics[0].metricId = n.NVML_GPM_METRIC_SM_UTIL
        get.metrics[1].metricId = n.NVML_GPM_METRIC_SM_OCCUPANCY
        n.nvmlGpmMetricsGet(get)
        return {"sm_util": round(get.metrics[0].value, 1), "sm_occupancy": round(get.metrics[1].value, 1)}

    def _loop(self):
        while not self.halt.is_set():
            try:
                u = self.nvml.nvmlDeviceGetUtilizationRates(self.handle)
                self.samples.append((u.gpu, u.memory))
            except Exception as exc:  # a reading the driver refuses ends the sampling of this run, recorded
                self.why = "%s: %s" % (type(exc).__name__, exc)
                return
            self.halt.wait(self.period)

    def start(self):
        self.samples, self.halt = [], threading.Event()
        if self.gpm is not None:
            self.gpm_why = None
            try:
                self.nvml.nvmlGpmSampleGet(self.handle, self.gpm[0])
            except Exception as exc:  # recorded with the run
                self.gpm_why = "%s: %s" % (type(exc).__name__, exc)
        if self.handle is not None:
            self.thread = threading.Thread(target=self._loop, daemon=True)
            self.thread.start()

    def stop(self):
        """{samples, util_mean, util_p50, util_min, mem_util_mean} over the run, or {unavailable: why}."""
        self.halt.set()
        if self.thread is not None:
            self.thread.join(5)
            self.thread = None
        if not self.samples:
            return {"unavailable": self.why or "no sample"}
        gpu = [g for g, _m in self.samples]
        out = {"samples": len(gpu), "util_mean": round(statistics.mean(gpu), 1), "util_p50": statistics.median(gpu),
               "util_min": min(gpu), "mem_util_mean": round(statistics.mean(m for _g, m in self.samples), 1),
               "period_s": self.period}
        if self.gpm is not None and self.gpm_why is None:
            try:
                out.update(self.gpm_metrics())
            except Exception as exc:  # recorded with the run
                self.gpm_why = "%s: %s" % (type(exc).__name__, exc)
        if self.gpm_why:
            out["gpm_unavailable"] = self.gpm_why
        return out


GPU = None  # the one sampler of this process (main() makes it)


class Around(object):
    """Everything read before and after one run."""

    def __init__(self, base, reqlog, expect=0, flush=False):
        self.base, self.reqlog, self.expect, self.flush = base, reqlog, expect, flush
        self.flushed = None

    def __enter__(self):
        if self.flush:
            self.flushed = flush_cache(self.base)
        self.reqlog.new()  # what earlier runs left, read now (attributed by arrival time, not by this read)
        text = get_metrics(self.base)
        self.snap, self.hist = sm.snapshot(text, SERVED), hist_snapshot(text)
        self.cache = cache_snapshot(text)
        self.pids = server_pids()
        self.scpu, self.busy = proc_cpu(self.pids), sys_busy()
        self.children, self.me = resource.getrusage(resource.RUSAGE_CHILDREN), resource.getrusage(resource.RUSAGE_SELF)
        self.t0, self.m0 = time.time(), time.monotonic()
        if GPU is not None:
            GPU.start()
        return self

    def __exit__(self, *exc):
        self.wall = time.monotonic() - self.m0
        self.gpu = GPU.stop() if GPU is not None else None
        ch, me = resource.getrusage(resource.RUSAGE_CHILDREN), resource.getrusage(resource.RUSAGE_SELF)
        self.client_cpu_s = round(ch.ru_utime + ch.ru_stime - self.children.ru_utime - self.children.ru_stime +
                                  me.ru_utime + me.ru_stime - self.me.ru_utime - self.me.ru_stime, 3)
        busy = sys_busy()
        self.cores_busy = round((busy[0] - self.busy[0] - (busy[1] - self.busy[1])) /
                                max(1, busy[0] - self.busy[0]) * os.cpu_count(), 2)
        after = proc_cpu(self.pids)
        self.server_cpu = sorted(((c, round((s - self.scpu[p][1]) / self.wall, 3)) for p, (c, s) in after.items()
                                 if p in self.scpu), key=lambda x: -x[1])[:6]
        t1 = self.t0 + self.wall
        now = time.monotonic()
        # up to 5 s for the records to trail the responses; but none of this run's after 1.5 s: the exporter is not
        # writing (export off, or only an earlier run's file left), so no wait of 5 s a run for nothing
        deadline, none_by = now + 5.0, now + 1.5
        time.sleep(0.3)  # the exporter writes each record from a thread after the response
        while True:  # until every request has its record (they trail the responses); none ever: no exporter
            self.reqlog.new()
            self.requests = gx.attribute(self.reqlog.seen, self.t0, t1)
            now = time.monotonic()
            if (len(self.requests) >= self.expect or now > deadline or not self.reqlog.seen
                    or (not self.requests and now > none_by)):
                break
            time.sleep(0.2)
        text = get_metrics(self.base)
        self.delta = sm.delta(self.snap, sm.snapshot(text, SERVED))["counters"]
        self.hists = hist_delta(self.hist, hist_snapshot(text))
        self.cache_after = cache_delta(self.cache, cache_snapshot(text))
        return False

    def row(self, duration, warmups=0):
        server, per_req = server_side(self.requests, self.t0)
        gen = self.delta.get("generation_tokens")
        return {"server_counters": self.delta, "server_hist": self.hists, "server_cpu_util": self.server_cpu,
                "cores_busy": self.cores_busy, "server_reqs": server, "server_per_request": per_req,
                "server_main": gx.window(self.requests, warmups), "warmups": warmups, "server_cache": self.cache_after,
                "flushed": self.flushed, "counter_tok_s": round(gen / duration, 1) if gen and duration else None,
                "t0": self.t0, "run_wall_s": round(self.wall, 3), "gpu": self.gpu}


class Prompts(object):
    def __init__(self, model_dir):
        from transformers import AutoTokenizer
        self.tok = AutoTokenizer.from_pretrained(model_dir)
        special = set(self.tok.all_special_ids)
        self.vocab = [i for i in range(self.tok.vocab_size) if i not in special]

    def texts(self, n, seed):
        rng = random.Random(seed)
        return [self.tok.decode([rng.choice(self.vocab) for _ in range(IN_LEN)]) for _ in range(n)]

    def bodies(self, n, seed):
        return [bench_client.build_payload("completions", SERVED, t, OUT_LEN, ignore_eos=True)
                for t in self.texts(n, seed)]

    def dataset(self, n, seed, where):
        """The same prompts as bench_serving's ``custom`` dataset (sglang 0.5.17 python/sglang/benchmark/datasets/
        custom.py: one JSON line a prompt, ``conversations`` [user, assistant]; the assistant turn only sets the
        output length, which --sharegpt-output-len overrides)."""
        path = os.path.join(where, "prompts-%d-%d.jsonl" % (n, seed))
        if not os.path.exists(path):
            with open(path, "w") as f:
                for t in self.texts(n, seed):
                    f.write(json.dumps({"conversations": [{"content": t}, {"content": "x"}]}) + "\n")
        return path


def run_ours(base, prompts, reqlog, conc, n, seed, flush=False):
    bodies = prompts.bodies(n, seed)
    procs = bench_client.auto_processes(conc)
    with Around(base, reqlog, expect=n, flush=flush) as ar:
        recs, stats = bench_client.run_load(base, "completions", bodies, conc, processes=procs, eos_ignored=True)
    res = bench_metrics.compute(recs, conc)
    client, bound, reason = bench_client.client_verdict(stats)
    row = {"tool": "ours", "arm": "ours", "out_tok_s": res["output_throughput"], "output_tokens": res["output_tokens"],
           "duration_s": res["duration_s"], "ttft_p50_ms": res["ttft_ms"]["p50"], "ttft_p99_ms": res["ttft_ms"]["p99"],
           "tpot_p50_ms": res["tpot_ms"]["p50"], "itl_p50_ms": res["itl_ms"]["p50"], "itl_p99_ms": res["itl_ms"]["p99"],
           "errors": res["errors"], "client_bound": bound, "client_bound_reason": reason,
           "client_processes": procs, "client_shard_cpu_util": [s.get("cpu_util") for s in client["shards"]],
           "client_lag_p99_ms": client["max_lag_p99_ms"], "stalls": stalls(recs, ar.t0)}
    row.update(ar.row(res["duration_s"]))
    row["client_cpu_s"] = ar.client_cpu_s
    row["client_per_request"] = [
        [round(r["start"] + MONO_TO_WALL - ar.t0, 4),
         round(r["chunk_times"][0] - r["start"], 4) if r.get("chunk_times") else None,
         round(r["end"] - r["start"], 4), len(r.get("chunk_times") or []),
         round(max([b - a for a, b in zip(r["chunk_times"], r["chunk_times"][1:])] or [0]), 4)]
        for r in recs if r.get("start") is not None and r.get("end") is not None]
    return row


def anchor_argv(base, model_dir, conc, n, seed, outfile, backend="sglang-oai", dataset_path=None):
    """bench_serving's command line (sglang 0.5.17 python/sglang/benchmark/serving.py cli_main): ``dataset_path``, a
    ``custom`` dataset of our prompts; without it its own ``random-ids`` prompts."""
    argv = ["--backend", backend, "--base-url", base, "--model", SERVED, "--tokenizer", model_dir,
            "--num-prompts", str(n), "--max-concurrency", str(conc), "--disable-tqdm",
            "--warmup-requests", str(ANCHOR_WARMUPS), "--output-file", outfile, "--seed", str(seed)]
    if dataset_path:
        return argv + ["--dataset-name", "custom", "--dataset-path", dataset_path, "--sharegpt-output-len", str(OUT_LEN)]
    return argv + ["--dataset-name", "random-ids", "--random-input-len", str(IN_LEN), "--random-output-len",
                   str(OUT_LEN), "--random-range-ratio", "1"]


def anchor_worker(conn, module, log):
    """The anchor's process: imports ``module`` (sglang.benchmark.serving) once, then runs its cli_main per command
    and answers with the CPU time the run used."""
    fd = os.open(log, os.O_WRONLY | os.O_CREAT | os.O_APPEND)
    os.dup2(fd, 1)
    os.dup2(fd, 2)
    sys.path.insert(0, STUB)  # bench_serving imports `datasets` at module level; the stub raises on use
    t = time.monotonic()
    try:
        mod = __import__(module, fromlist=["cli_main"])
        conn.send(("ready", round(time.monotonic() - t, 2)))
    except BaseException as e:  # reported to the parent, which falls back to one process a run
        conn.send(("import_error", repr(e)))
        return
    while True:
        argv = conn.recv()
        if argv is None:
            return
        r0 = resource.getrusage(resource.RUSAGE_SELF)
        sys.argv = ["bench_serving"] + argv
        err = None
        try:
            mod.cli_main()
        except BaseException as e:  # one failed run is recorded, the next still runs
            err = repr(e)[-1000:]
        r1 = resource.getrusage(resource.RUSAGE_SELF)
        sys.stdout.flush()
        conn.send((err, round(r1.ru_utime + r1.ru_stime - r0.ru_utime - r0.ru_stime, 3)))


class Anchor(object):
    def __init__(self, module, out):
        ctx = multiprocessing.get_context("spawn")
        self.conn, child = ctx.Pipe()
        self.proc = ctx.Process(target=anchor_worker, args=(child, module, os.path.join(out, "anchor.log")), daemon=True)
        self.proc.start()
        kind, info = self.conn.recv()
        self.ok, self.info = kind == "ready", info
        self.module = module

    def run(self, argv, timeout=300):
        if self.ok:
            self.conn.send(argv)
            if not self.conn.poll(timeout):
                raise RuntimeError("anchor run took over %d s" % timeout)
            return self.conn.recv()
        r0 = resource.getrusage(resource.RUSAGE_CHILDREN)
        p = subprocess.run([sys.executable, "-m", self.module] + argv, capture_output=True, text=True, timeout=timeout,
                           env=dict(os.environ, PYTHONPATH=STUB + ":" + os.environ.get("PYTHONPATH", "")))
        r1 = resource.getrusage(resource.RUSAGE_CHILDREN)
        return (None if p.returncode == 0 else p.stderr[-1000:]), round(
            r1.ru_utime + r1.ru_stime - r0.ru_utime - r0.ru_stime, 3)

    def close(self):
        if self.ok:
            self.conn.send(None)
        self.proc.join(10)


def run_anchor(base, model_dir, anchor, reqlog, conc, n, seed, out, arm="anchor-ids", dataset_path=None,
               flush=False):
    f = os.path.join(out, "anchor-tmp.jsonl")
    if os.path.exists(f):
        os.remove(f)
    with Around(base, reqlog, expect=n + ANCHOR_WARMUPS, flush=flush) as ar:
        err, cpu = anchor.run(anchor_argv(base, model_dir, conc, n, seed, f, ARMS[arm][1], dataset_path))
    row = {"tool": "anchor", "arm": arm, "client_cpu_s": cpu, "client_processes": 1}
    if err:
        row["error"] = err
    try:
        with open(f) as fh:
            r = json.loads(fh.read().strip().splitlines()[-1])
        row.update(out_tok_s=r.get("output_throughput"), output_tokens=r.get("total_output_tokens"),
                   duration_s=r.get("duration"), ttft_p50_ms=r.get("median_ttft_ms"), ttft_p99_ms=r.get("p99_ttft_ms"),
                   tpot_p50_ms=r.get("median_tpot_ms"), itl_p50_ms=r.get("median_itl_ms"),
                   itl_p99_ms=r.get("p99_itl_ms"), completed=r.get("completed"))
    except (OSError, ValueError, IndexError) as exc:
        row["error"] = (row.get("error") or "") + " output: " + repr(exc)
    row.update(ar.row(row.get("duration_s"), ANCHOR_WARMUPS))
    return row


def restart(cmd):
    t = time.monotonic()
    p = subprocess.run(cmd, shell=True, capture_output=True, text=True, timeout=300)
    return {"tool": "restart", "cmd": cmd, "rc": p.returncode, "wall_s": round(time.monotonic() - t, 2),
            "output": (p.stdout + p.stderr)[-2000:]}


def med(rows, key):
    vals = [r.get(key) for r in rows if isinstance(r.get(key), (int, float))]
    return statistics.median(vals) if vals else None


def fmt(v, nd=0):
    return "-" if v is None else ("%.*f" % (nd, v))


def prompt_per_request(rows):
    """Median prompt tokens a request by the server's counters (both tools send text: the server tokenizes it)."""
    vals = [r["server_counters"]["prompt_tokens"] / r["server_counters"]["requests"] for r in rows
            if (r.get("server_counters") or {}).get("requests") and r["server_counters"].get("prompt_tokens")]
    return statistics.median(vals) if vals else None


def arm_of(row):
    return row.get("arm") or row.get("tool")


def summary(rows):
    """The table: per (c, prompts) and tool the medians over repetitions (n = runs)."""
    lines = ["c | prompts | arm | n | out tok/s | counter tok/s | server makespan tok/s | TTFT p50 (srv hist, srv req) "
             "| TPOT p50 (srv req) | ITL p50 / p99 (srv hist p99) | arrival spread s | client CPU (util) | "
             "top server proc util | prompt tok/req (counter) | gaps>100ms"]
    keys, arms = [], []
    for r in rows:
        k = (r.get("c"), r.get("num_prompts"))
        if r.get("tool") in ("ours", "anchor") and not r.get("warmup"):
            keys += [k] if k not in keys else []
            arms += [arm_of(r)] if arm_of(r) not in arms else []
    for c, n in keys:
        for arm in arms:
            rs = [r for r in rows if arm_of(r) == arm and r.get("c") == c and r.get("num_prompts") == n
                  and r.get("tool") in ("ours", "anchor") and not r.get("warmup")]
            tool = rs[0]["tool"] if rs else None
            if not rs:
                continue
            srv = [r.get("server_reqs") or {} for r in rs]
            hist = [((r.get("server_hist") or {}).get(k) or {}) for r in rs for k in ("ttft",)]
            itl_h = [((r.get("server_hist") or {}).get("itl") or {}) for r in rs]
            cpu = med(rs, "client_cpu_s")
            util = statistics.median([r["client_cpu_s"] / r["duration_s"] for r in rs
                                      if r.get("client_cpu_s") is not None and r.get("duration_s")] or [0])
            top = rs[-1].get("server_cpu_util") or [["-", 0]]
            lines.append(" | ".join([
                str(c), str(n), arm, str(len(rs)), fmt(med(rs, "out_tok_s")), fmt(med(rs, "counter_tok_s")),
                fmt(med(srv, "out_tok_s")),
                "%s (%s, %s)" % (fmt(med(rs, "ttft_p50_ms"), 1), fmt(med(hist, "p50_ms"), 1), fmt(med(srv, "ttft_p50_ms"), 1)),
                "%s (%s)" % (fmt(med(rs, "tpot_p50_ms"), 2), fmt(med(srv, "tpot_p50_ms"), 2)),
                "%s / %s (%s)" % (fmt(med(rs, "itl_p50_ms"), 1), fmt(med(rs, "itl_p99_ms"), 1), fmt(med(itl_h, "p99_ms"), 1)),
                fmt(med(srv, "arrival_spread_s"), 3), "%s s (%.2f)" % (fmt(cpu, 2), util),
                "%s %.2f" % (top[0][0], top[0][1]),
                fmt(prompt_per_request(rs), 1),
                str(med([r.get("stalls") or {} for r in rs], "gaps_over_100ms") if tool == "ours" else "-")]))
    return "\n".join(lines)


def main():
    global SERVED, GPU
    ap = argparse.ArgumentParser()
    ap.add_argument("--base-url", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--model-dir", default=os.path.join(WORKDIR, "model"))
    ap.add_argument("--plan", default="default", choices=sorted(PLANS))
    ap.add_argument("--served-name", default=SERVED, help="the server's --served-model-name")
    ap.add_argument("--no-gpu", action="store_true", help="no NVML sampling (a machine without a GPU)")
    ap.add_argument("--reqlog-dir", default=os.path.join(WORKDIR, "reqmetrics"))
    ap.add_argument("--restart-cmd", default="")
    ap.add_argument("--anchor-module", default="sglang.benchmark.serving")
    ap.add_argument("--budget-s", type=float, default=540.0, help="no run starts that would end after this")
    a = ap.parse_args()
    SERVED = a.served_name
    GPU = None if a.no_gpu else GpuSampler()
    t_start = time.monotonic()
    os.makedirs(a.out, exist_ok=True)
    raw = open(os.path.join(a.out, "gap-raw.jsonl"), "a")
    rows = []

    def emit(row):
        row["at_s"] = round(time.monotonic() - t_start, 1)
        rows.append(row)
        raw.write(json.dumps(row) + "\n")
        raw.flush()
        print("[%6.1f s] %s c=%s n=%s r%s: %s tok/s (counter %s, srv %s) ttft %s tpot %s itl p99 %s (srv %s) "
              "client cpu %s %s" % (
                  row["at_s"], arm_of(row), row.get("c"), row.get("num_prompts"), row.get("round"),
                  fmt(row.get("out_tok_s")), fmt(row.get("counter_tok_s")),
                  fmt((row.get("server_main") or {}).get("rate")), fmt(row.get("ttft_p50_ms"), 1),
                  fmt(row.get("tpot_p50_ms"), 2), fmt(row.get("itl_p99_ms"), 1),
                  fmt(((row.get("server_hist") or {}).get("itl") or {}).get("p99_ms"), 1), row.get("client_cpu_s"),
                  row.get("error") or row.get("output", "")[-300:]), flush=True)

    if a.restart_cmd:
        emit(restart(a.restart_cmd))
    reqlog = ReqLog(a.reqlog_dir)
    prompts = Prompts(a.model_dir)
    anchor = Anchor(a.anchor_module, a.out)
    emit({"tool": "anchor_import", "ok": anchor.ok, "info": anchor.info})
    emit({"tool": "gpu_sampler", "ok": GPU is not None and GPU.handle is not None,
          "info": "no NVML sampling (--no-gpu)" if GPU is None else GPU.why})
    first_flush = PLANS[a.plan][0][4]
    emit(dict(run_ours(a.base_url, prompts, reqlog, 16, 64, 99, first_flush), c=16, num_prompts=64, round=0,
              warmup=True))
    datasets = tempfile.mkdtemp(prefix="gap-prompts-")
    rate = {}  # seconds a run of (c, n, arm) took, to keep within the budget
    for c, n, reps, arms, flush in PLANS[a.plan]:
        for rnd in range(reps):
            for arm in arms:
                tool, _backend, source = ARMS[arm]
                guess = rate.get((c, n, arm), n * OUT_LEN / (400.0 * min(c, 24)) + (5 if tool == "ours" else 8))
                if time.monotonic() - t_start + guess > a.budget_s:
                    emit({"tool": tool, "arm": arm, "c": c, "num_prompts": n, "round": rnd + 1, "skipped": "budget"})
                    continue
                t = time.monotonic()
                try:
                    row = (run_ours(a.base_url, prompts, reqlog, c, n, rnd, flush) if tool == "ours" else
                           run_anchor(a.base_url, a.model_dir, anchor, reqlog, c, n, rnd, a.out, arm,
                                      prompts.dataset(n, rnd, datasets) if source == "ours" else None, flush))
                except Exception as exc:  # recorded; the other runs still count
                    row = {"tool": tool, "arm": arm, "error": repr(exc)[-1000:]}
                rate[(c, n, arm)] = time.monotonic() - t
                emit(dict(row, c=c, num_prompts=n, round=rnd + 1, wall_s=round(time.monotonic() - t, 2)))
    anchor.close()
    shutil.rmtree(datasets, ignore_errors=True)
    reqlog.new()
    emit({"tool": "server_requests", "records": reqlog.save(os.path.join(a.out, "server-requests.jsonl.xz"))})
    if os.path.exists(os.path.join(a.out, "anchor-tmp.jsonl")):
        os.remove(os.path.join(a.out, "anchor-tmp.jsonl"))
    runs = [r for r in rows if r.get("tool") in ("ours", "anchor") and r.get("t0") and not r.get("warmup")]
    table = (summary(rows) + "\n\n" + gx.report([gx.analyse_run(r, reqlog.seen) for r in runs]) + "\n\n" +
             sidebyside.report([sidebyside.analyse(r, reqlog.seen) for r in runs]))
    with open(os.path.join(a.out, "gap-summary.txt"), "w") as f:
        f.write("plan %s; %s; total %.0f s\n" % (a.plan, shlex.join(sys.argv[1:]), time.monotonic() - t_start))
        for r in rows:
            if r.get("tool") in ("restart", "anchor_import", "server_requests", "gpu_sampler"):
                f.write(json.dumps(r) + "\n")
        f.write(table + "\n")
    print(table)
    print("total %.0f s" % (time.monotonic() - t_start))


if __name__ == "__main__":
    main()

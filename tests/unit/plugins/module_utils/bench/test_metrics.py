# -*- coding: utf-8 -*-
# Copyright: gpuhost.sglang contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
from __future__ import absolute_import, division, print_function

__metaclass__ = type

import random

import pytest

from ansible_collections.gpuhost.sglang.plugins.module_utils.bench import metrics as bm


def rec(start, ttft, itl, n, prompt=10, chunks=None, ok=True, coherent=True, error=None):
    chunks = chunks if chunks is not None else n
    times = [start + ttft + i * itl for i in range(chunks)]
    return {"ok": ok, "error": error, "start": start, "end": times[-1] if times else start + ttft,
            "chunk_times": times, "prompt_tokens": prompt, "output_tokens": n, "coherent": coherent}


def test_sglang_definitions_on_known_records():
    # two requests, 0.1 s TTFT, 20 ms/token, 11 tokens each, second starts 0.5 s later
    recs = [rec(0.0, 0.1, 0.02, 11), rec(0.5, 0.1, 0.02, 11)]
    r = bm.compute(recs, concurrency=2)
    assert r["duration_s"] == pytest.approx(0.8)
    assert r["output_throughput"] == pytest.approx(22 / 0.8, rel=1e-3)
    assert r["total_throughput"] == pytest.approx(42 / 0.8, rel=1e-3)
    assert r["tpot_ms"]["mean"] == pytest.approx(20.0, abs=1e-6)   # (latency - ttft) / (n - 1)
    assert r["ttft_ms"]["p50"] == pytest.approx(100.0)
    assert r["itl_ms"]["max"] == pytest.approx(20.0)
    assert r["achieved_concurrency"] == pytest.approx((0.3 + 0.3) / 0.8, rel=1e-3)
    assert r["e2e_ms"]["n"] == 2 and r["completed"] == 2 and r["errors"] == {}


def test_chunk_aware_itl_and_tpot_when_server_batches_tokens():
    # 4 tokens per event: ITL is per chunk (80 ms), TPOT still per token (20 ms)
    r = bm.compute([rec(0.0, 0.1, 0.08, 41, chunks=11)], 1)
    assert r["itl_ms"]["p50"] == pytest.approx(80.0)
    assert r["tpot_ms"]["mean"] == pytest.approx(800.0 / 40, rel=1e-6)
    assert r["tokens_per_chunk"] == pytest.approx(41 / 11.0, rel=1e-3)


def test_peak_is_the_largest_one_second_bucket():
    # 100 tokens in [0,1) from one request, 10 tokens in [1,2) from another
    recs = [rec(0.0, 0.0, 0.009, 100), rec(1.0, 0.05, 0.05, 10)]
    assert bm.compute(recs, 2)["peak_output_throughput"] == pytest.approx(100.0)


def test_errors_and_incoherent_are_excluded_from_throughput():
    recs = [rec(0.0, 0.1, 0.01, 10), rec(0.0, 0.1, 0.01, 10, coherent=False),
            {"ok": False, "error": "http_5xx", "start": 0.0, "end": 0.05, "chunk_times": [], "output_tokens": 0}]
    r = bm.compute(recs, 3)
    assert r["errors"] == {"http_5xx": 1} and r["completed"] == 2 and r["coherent"] == 1 and r["incoherent"] == 1
    assert r["output_tokens"] == 10


def test_percentiles_match_numpy_linear():
    np = pytest.importorskip("numpy")
    rnd = random.Random(3)
    vals = [rnd.random() for dummy in range(1001)]
    d = bm.dist(vals)
    for p in (50, 90, 99):
        assert d["p%d" % p] == pytest.approx(float(np.percentile(vals, p)) * 1000, abs=1e-3)


def test_aggregate_trials_median_and_spread():
    trials = [{"output_throughput": v, "ttft_ms": {"p50": 10.0}} for v in (90.0, 100.0, 110.0)]
    agg = bm.aggregate_trials(trials)
    assert agg["output_throughput"]["median"] == 100.0 and agg["output_throughput"]["spread"] == pytest.approx(0.1)
    assert agg["ttft_ms.p50"]["spread"] == 0.0


def test_peak_is_never_below_the_level_average_when_the_level_is_shorter_than_a_bucket():
    # a 0.4 s level with 40 tokens averages 100 tok/s; a 1-s bucket held only 40 tokens
    recs = [rec(0.0, 0.0, 0.01, 40)]
    r = bm.compute(recs, 1)
    assert r["peak_output_throughput"] >= r["output_throughput"]


def test_peak_ignores_partial_buckets_at_the_edges():
    # 2.5 s of steady 100 tok/s: the last half bucket must not count as a 1-s window
    recs = [rec(0.0, 0.0, 0.01, 250)]
    r = bm.compute(recs, 1)
    assert r["peak_output_throughput"] == pytest.approx(100.0, rel=0.02)


def test_usage_above_the_streamed_bytes_is_counted_and_kept_for_throughput():
    # SGLang 0.5.17 under ignore_eos: 64 tokens counted for 10 streamed bytes (special tokens stream no text); the
    # server's own counter agreed with the usage, so the usage is what throughput uses
    good = rec(0.0, 0.1, 0.01, 10)
    good.update(text_bytes=40, usage=True)
    above = rec(0.0, 0.1, 0.01, 64, chunks=5)
    above.update(text_bytes=10, usage=True)
    r = bm.compute([good, above], 2)
    assert r["usage_above_text"] == 1
    assert r["output_tokens"] == 10 + 64


def test_a_stop_token_counted_in_usage_is_not_above_the_text():
    # the sandbox engine's answer "." with completion_tokens 2: the end-of-sequence token streams no text
    eos = rec(0.0, 0.1, 0.01, 2, chunks=1)
    eos.update(text_bytes=1, usage=True, finish_reason="stop")
    length = dict(eos, finish_reason="length")  # cut by max_tokens
    two_more = dict(eos, output_tokens=3)  # one stop token is all a stop explains
    assert bm.usage_above_text(eos) is False
    assert bm.usage_above_text(length) is True and bm.usage_above_text(two_more) is True
    assert bm.compute([eos], 1)["usage_above_text"] == 0


def test_sampling_noise_sees_a_load_change_during_the_level_and_none_when_steady():
    steady = [rec(0.1 * i, 0.1, 0.01, 20) for i in range(40)]
    drift = [rec(0.1 * i, 0.1, 0.01 * (1 + i / 20.0), 20) for i in range(40)]  # TPOT grows 3x over the level
    quiet = bm.sampling_noise(steady, 4)
    noisy = bm.sampling_noise(drift, 4)
    assert quiet["tpot_ms.p50"] == pytest.approx(0.0, abs=1e-6)
    assert noisy["tpot_ms.p50"] > 0.1 and noisy["ttft_ms.p50"] == pytest.approx(0.0, abs=1e-6)
    assert bm.sampling_noise(steady[:9], 4) == {}  # fewer than 2 requests per block: no estimate


def test_a_slow_first_window_is_flagged_and_a_steady_level_is_not():
    # 40 requests at c=4: the first 8 (the first block) see a 0.5 s TTFT (a ramp), the rest 0.05 s
    ramp = [rec(i * 0.1, 0.5 if i < 8 else 0.05, 0.01, 16) for i in range(40)]
    steady = [rec(i * 0.1, 0.05 + 0.001 * (i % 3), 0.01, 16) for i in range(40)]
    fw = bm.first_window(ramp, 4)
    assert fw["checked"] and fw["outlier"] and fw["requests"] == 8
    assert fw["metrics"]["ttft_ms.p50"] == {"first": 500.0, "rest_median": 50.0, "outlier": True}
    assert not bm.first_window(steady, 4)["outlier"]
    assert bm.first_window(steady[:9], 4) == {"checked": False, "outlier": False, "reason": "fewer than 2 requests a block"}

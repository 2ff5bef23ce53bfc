# -*- coding: utf-8 -*-
# Copyright: gpuhost.sglang contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Serving metrics with sglang bench_serving's definitions (so numbers compare with what users quote).

Per request: TTFT = first text chunk - send; E2E = end - send; ITL = gaps between text chunks
(chunks, not tokens, when a server streams several tokens per event); TPOT = (E2E - TTFT) /
(output_tokens - 1) for output_tokens > 1. Per run: duration = last end - first send; output
throughput = sum(output_tokens) / duration over successful *coherent* requests; total throughput adds
prompt tokens; achieved concurrency = sum(E2E) / duration; peak output throughput = the largest
1-second bucket of chunk timestamps (each chunk weighted by its share of the request's tokens).
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import math
import statistics

PCTS = (50, 90, 99)


def _percentile(sorted_vals, p):
    """Linear interpolation percentile (numpy's default) on a pre-sorted list."""
    if not sorted_vals:
        return None
    k = (len(sorted_vals) - 1) * (p / 100.0)
    f = math.floor(k)
    c = math.ceil(k)
    if f == c:
        return sorted_vals[int(k)]
    return sorted_vals[f] + (sorted_vals[c] - sorted_vals[f]) * (k - f)


def dist(values, scale=1000.0, ndigits=3):
    """mean/p50/p90/p99/max (and n) of ``values`` (seconds) in milliseconds; None entries when empty."""
    vals = sorted(v * scale for v in values if v is not None)
    out = {"n": len(vals)}
    if not vals:
        out.update({"mean": None, "p50": None, "p90": None, "p99": None, "max": None})
        return out
    out["mean"] = round(sum(vals) / len(vals), ndigits)
    for p in PCTS:
        out["p%d" % p] = round(_percentile(vals, p), ndigits)
    out["max"] = round(vals[-1], ndigits)
    return out


def peak_bucket(records, t0, bucket=1.0, t_end=None):
    """Max tokens in any full 1-second bucket (aligned on ``t0``), chunk-aware. Partial buckets at the end of the
    level are not windows of ``bucket`` seconds and are left out; a level shorter than one bucket has no full
    bucket and returns 0 (compute() then reports the average, so the peak is never below it)."""
    buckets = {}
    for r in records:
        times = r.get("chunk_times") or []
        if not times:
            continue
        w = float(usable_tokens(r) or len(times)) / len(times)
        for t in times:
            b = int((t - t0) // bucket)
            buckets[b] = buckets.get(b, 0.0) + w
    if t_end is not None:
        buckets = dict((b, v) for b, v in buckets.items() if t0 + (b + 1) * bucket <= t_end)
    if not buckets:
        return 0.0
    return max(buckets.values()) / bucket


def usage_above_text(r):
    """The server's usage counts more completion tokens than the response streamed bytes of text. Not a fault:
    special tokens (the end-of-sequence token, which ignore_eos keeps generating) are generated and counted but
    stream no text (SGLang detokenizes with skip_special_tokens). Measured on SGLang 0.5.17 (H200, the tiny model,
    ignore_eos, 64 tokens a request): 37-116 responses a level, while the server's own
    ``sglang:generation_tokens_total`` agreed with the summed usage exactly. Whether the count is right is for the
    server's counters to say (server_metrics.reconcile), never for a guess from the text."""
    nbytes = r.get("text_bytes")
    if not r.get("usage") or nbytes is None:
        return False
    return (r.get("output_tokens") or 0) > max(nbytes, 1) + (1 if r.get("finish_reason") == "stop" else 0)


def usable_tokens(r):
    """Output tokens of a record for throughput: the server's usage count when it sent one (never replaced by a
    guess), else the client's fallback count (tokenizer or chunks) that postprocess put in ``output_tokens``."""
    return r.get("output_tokens") or 0


def compute(records, concurrency=None):
    """Aggregate per-request records into one result entry.

    Records: dicts with ``ok``, ``error`` (class or None), ``start``, ``end``, ``chunk_times``,
    ``prompt_tokens``, ``output_tokens``, ``coherent``.
    """
    n = len(records)
    errors = {}
    for r in records:
        if not r.get("ok"):
            cls = r.get("error") or "unknown"
            errors[cls] = errors.get(cls, 0) + 1
    ok = [r for r in records if r.get("ok")]
    good = [r for r in ok if r.get("coherent", True)]
    starts = [r["start"] for r in records if r.get("start") is not None]
    ends = [r["end"] for r in records if r.get("end") is not None]
    duration = (max(ends) - min(starts)) if starts and ends else 0.0
    t0 = min(starts) if starts else 0.0
    ttfts, e2es, tpots, itls = [], [], [], []
    for r in good:
        times = r.get("chunk_times") or []
        e2e = r["end"] - r["start"]
        e2es.append(e2e)
        if times:
            ttft = times[0] - r["start"]
            ttfts.append(ttft)
            itls.extend(b - a for a, b in zip(times, times[1:]))
            ot = usable_tokens(r)
            if ot > 1:
                tpots.append((e2e - ttft) / (ot - 1))
    out_tok = sum(usable_tokens(r) for r in good)
    in_tok = sum(r.get("prompt_tokens") or 0 for r in good)
    chunks = sum(len(r.get("chunk_times") or []) for r in good)
    res = {
        "concurrency": concurrency,
        "requests": n,
        "completed": len(ok),
        "coherent": len(good),
        "incoherent": len(ok) - len(good),
        "errors": errors,
        "duration_s": round(duration, 4),
        "input_tokens": in_tok,
        "output_tokens": out_tok,
        "output_throughput": round(out_tok / duration, 3) if duration > 0 else 0.0,
        "total_throughput": round((in_tok + out_tok) / duration, 3) if duration > 0 else 0.0,
        "request_throughput": round(len(good) / duration, 4) if duration > 0 else 0.0,
        "peak_output_throughput": round(max(peak_bucket(good, t0, t_end=t0 + duration),
                                            out_tok / duration if duration > 0 else 0.0), 3),
        "usage_above_text": len([1 for r in good if usage_above_text(r)]),
        "achieved_concurrency": round(sum(r["end"] - r["start"] for r in ok) / duration, 3) if duration > 0 else 0.0,
        "tokens_per_chunk": round(out_tok / float(chunks), 3) if chunks else None,
        "ttft_ms": dist(ttfts),
        "tpot_ms": dist(tpots),
        "itl_ms": dist(itls),
        "e2e_ms": dist(e2es),
    }
    return res


# metric name -> (path, higher_is_better)
GATE_METRICS = {
    "output_throughput": (("output_throughput",), True),
    "total_throughput": (("total_throughput",), True),
    "peak_output_throughput": (("peak_output_throughput",), True),
    "ttft_ms.p50": (("ttft_ms", "p50"), False),
    "ttft_ms.p99": (("ttft_ms", "p99"), False),
    "tpot_ms.p50": (("tpot_ms", "p50"), False),
    "tpot_ms.mean": (("tpot_ms", "mean"), False),
    "itl_ms.p50": (("itl_ms", "p50"), False),
    "itl_ms.p99": (("itl_ms", "p99"), False),
    "e2e_ms.p50": (("e2e_ms", "p50"), False),
    "e2e_ms.p99": (("e2e_ms", "p99"), False),
}


def get_metric(result, name):
    path = GATE_METRICS[name][0]
    cur = result
    for k in path:
        if not isinstance(cur, dict):
            return None
        cur = cur.get(k)
    return cur


def median(vals):
    vals = sorted(v for v in vals if v is not None)
    if not vals:
        return None
    return _percentile(vals, 50)


NOISE_GROUPS = 5


def blocks(records, concurrency=None, groups=NOISE_GROUPS):
    """The level's requests in send order cut into ``groups`` consecutive blocks, each computed as a level; [] when a
    block would hold fewer than 2 requests."""
    recs = sorted((r for r in records if r.get("start") is not None), key=lambda r: r["start"])
    size = len(recs) // groups
    if size < 2:
        return []
    return [compute(recs[i * size:(i + 1) * size], concurrency) for i in range(groups)]


# A first window this much worse than the median of the others (and worse than each of them) is an outlier.
FIRST_WINDOW_FACTOR = 1.5
FIRST_WINDOW_METRICS = ("ttft_ms.p50", "tpot_ms.p50", "output_throughput")


def first_window(records, concurrency=None, groups=NOISE_GROUPS, factor=FIRST_WINDOW_FACTOR):
    """Did the level measure its own ramp? The first of ``groups`` blocks (send order, as ``sampling_noise`` cuts
    them) against the others: an outlier when a metric of the first block is worse than every other block's and
    worse than their median by more than ``factor`` (TTFT and TPOT higher, throughput lower). Returns
    {"checked", "requests" (of the first block), "outlier", "metrics": {name: {"first", "rest_median", "outlier"}}}."""
    subs = blocks(records, concurrency, groups)
    if not subs:
        return {"checked": False, "outlier": False, "reason": "fewer than 2 requests a block"}
    out = {"checked": True, "requests": subs[0]["requests"], "factor": factor, "outlier": False, "metrics": {}}
    for name in FIRST_WINDOW_METRICS:
        first, rest = get_metric(subs[0], name), [get_metric(b, name) for b in subs[1:]]
        if first is None or any(v is None for v in rest):
            continue
        med = median(rest)
        if GATE_METRICS[name][1]:
            bad = first < min(rest) and first * factor < med
        else:
            bad = first > max(rest) and first > med * factor
        out["metrics"][name] = {"first": first, "rest_median": round(med, 3), "outlier": bad}
        out["outlier"] = out["outlier"] or bad
    return out


def sampling_noise(records, concurrency=None, groups=NOISE_GROUPS):
    """Relative standard error of each gate metric within one trial, from ``groups`` consecutive blocks of the
    level's requests in send order (so a load change on the machine during the level shows, not only sampling
    noise): every metric is computed per block, SE = stdev(block values) / sqrt(groups) / |mean of the blocks|.
    Fewer than 2 requests per block: {} (no estimate)."""
    subs = blocks(records, concurrency, groups)
    if not subs:
        return {}
    out = {}
    for name in GATE_METRICS:
        vals = [get_metric(r, name) for r in subs]
        if any(v is None for v in vals) or not statistics.mean(vals):
            continue
        out[name] = round(statistics.stdev(vals) / math.sqrt(groups) / abs(statistics.mean(vals)), 4)
    return out


def aggregate_trials(trial_results):
    """Median of each gate metric over trials plus its relative noise: the larger of the trials' half-range over
    the median ((max - min) / (2 * median)) and the largest within-trial standard error (``sampling_noise``)."""
    agg = {}
    for name in GATE_METRICS:
        vals = [get_metric(t, name) for t in trial_results]
        vals = [v for v in vals if v is not None]
        if not vals:
            continue
        med = median(vals)
        # half-range relative to the median: the +/- noise of the trials
        spread = ((max(vals) - min(vals)) / (2.0 * abs(med))) if (med and len(vals) > 1) else 0.0
        se = max([(t.get("sampling_noise") or {}).get(name) or 0.0 for t in trial_results] or [0.0])
        agg[name] = {"median": round(med, 4), "spread": round(max(spread, se), 4), "trial_spread": round(spread, 4),
                     "sampling_se": round(se, 4), "values": [round(v, 4) for v in vals]}
    return agg

# -*- coding: utf-8 -*-
# Copyright: gpuhost.sglang contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The benchmark cross-checked by the server: SGLang's own Prometheus metrics read before and after a level.

SGLang with ``--enable-metrics`` serves /metrics without the API key (sglang 0.5.23 srt/utils/auth.py,
public path prefixes) in the Prometheus text format (prometheus_client). The names used here are those of
sglang 0.5.23 srt/observability/metrics_collector.py: counters ``sglang:generation_tokens_total``,
``sglang:prompt_tokens_total``, ``sglang:num_requests_total``, ``sglang:num_aborted_requests_total`` and the
histogram ``sglang:time_to_first_token_seconds`` (labels model_name, engine_type, is_streaming, ...). Older and
newer releases spelled the prefix ``sglang_`` (sglang #12618, PR #36428): both are read, as one name.

Pure functions (the HTTP GET is the caller's): ``parse`` -> ``snapshot`` -> ``delta`` -> ``reconcile``.
The module runs on the bench host, which has no prometheus_client: the text format is parsed here, to the
exposition format's grammar (prometheus docs "Exposition formats", text format 0.0.4), and the unit tests
feed it the output of the real prometheus_client where that is installed.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import math
import re

COUNTERS = {
    "generation_tokens": "sglang:generation_tokens_total",
    "prompt_tokens": "sglang:prompt_tokens_total",
    "requests": "sglang:num_requests_total",
    "aborted": "sglang:num_aborted_requests_total",
}
TTFT = "sglang:time_to_first_token_seconds"
# Default tolerance of the token reconciliation: a relative difference above it is a disagreement.
DEFAULT_TOLERANCE = 0.02

_SAMPLE = re.compile(r'^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{(.*)\})?\s+(\S+)(\s+\S+)?\s*$')
_LABEL = re.compile(r'\s*([a-zA-Z_][a-zA-Z0-9_]*)\s*=\s*"((?:[^"\\]|\\.)*)"\s*,?')


class MetricsError(Exception):
    """The server's metrics cannot be used (unparseable, missing, or reset during the level)."""


def canonical(name):
    """``sglang_x`` and ``sglang:x`` are one metric (the prefix SGLang used changed between releases)."""
    if name.startswith("sglang_"):
        return "sglang:" + name[len("sglang_"):]
    return name


def _unescape(value):
    return value.replace('\\"', '"').replace("\\n", "\n").replace("\\\\", "\\")


def parse(text):
    """Prometheus text format -> list of (canonical name, labels dict, float value). Comments are skipped."""
    samples = []
    for lineno, line in enumerate(text.splitlines(), 1):
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        m = _SAMPLE.match(line)
        if not m:
            raise MetricsError("line %d of the metrics text is not a Prometheus sample: %r" % (lineno, line[:120]))
        labels = {}
        body = m.group(3) or ""
        pos = 0
        while pos < len(body):
            lm = _LABEL.match(body, pos)
            if not lm:
                raise MetricsError("line %d: bad label set {%s}" % (lineno, body[:120]))
            labels[lm.group(1)] = _unescape(lm.group(2))
            pos = lm.end()
        try:
            value = float(m.group(4))
        except ValueError:
            raise MetricsError("line %d: value %r is not a number" % (lineno, m.group(4)))
        samples.append((canonical(m.group(1)), labels, value))
    return samples


def snapshot(text, model=None):
    """The counters and the TTFT histogram, summed over label sets (optionally only ``model_name=model``).

    Returns {"counters": {key: value or None}, "ttft": {"buckets": {le: cumulative}, "sum": s, "count": n} or None}.
    """
    counters = dict((k, None) for k in COUNTERS)
    buckets, tsum, tcount, seen_ttft = {}, 0.0, 0.0, False
    by_name = dict((v, k) for k, v in COUNTERS.items())
    others = set()
    for name, labels, value in parse(text):
        if model is not None and "model_name" in labels and labels["model_name"] != model:
            others.add(labels["model_name"])
            continue
        if name in by_name:
            k = by_name[name]
            counters[k] = (counters[k] or 0.0) + value
        elif name == TTFT + "_bucket":
            le = labels.get("le")
            b = float("inf") if le in ("+Inf", "Inf", "inf") else float(le)
            buckets[b] = buckets.get(b, 0.0) + value
            seen_ttft = True
        elif name == TTFT + "_sum":
            tsum += value
        elif name == TTFT + "_count":
            tcount += value
    if all(v is None for v in counters.values()) and not seen_ttft:
        if others:
            raise MetricsError("the server exports SGLang metrics only for model_name %s, not %r"
                               % (", ".join(sorted(others)), model))
        raise MetricsError("no SGLang metrics in the text (neither sglang: nor sglang_ names): is the server "
                           "started with --enable-metrics?")
    ttft = {"buckets": buckets, "sum": tsum, "count": tcount} if seen_ttft else None
    return {"counters": counters, "ttft": ttft}


def delta(before, after):
    """after - before; a counter that went down means the server restarted during the level (MetricsError)."""
    out = {"counters": {}, "ttft": None}
    for k, a in after["counters"].items():
        b = before["counters"].get(k)
        if a is None or b is None:
            out["counters"][k] = None
            continue
        if a < b:
            raise MetricsError("server counter %s went down (%g -> %g): the server restarted during the level"
                               % (COUNTERS[k], b, a))
        out["counters"][k] = a - b
    if after["ttft"] and before["ttft"]:
        bb = before["ttft"]["buckets"]
        out["ttft"] = {"buckets": dict((le, v - bb.get(le, 0.0)) for le, v in after["ttft"]["buckets"].items()),
                       "sum": after["ttft"]["sum"] - before["ttft"]["sum"],
                       "count": after["ttft"]["count"] - before["ttft"]["count"]}
    return out


def histogram_quantile(q, buckets):
    """Prometheus' histogram_quantile (promql/quantile.go): linear interpolation inside the bucket; the
    quantile in the +Inf bucket is the largest finite bound. Returns (value, (lower bound, upper bound)) or None."""
    bounds = sorted(buckets)
    if not bounds or not math.isinf(bounds[-1]):
        return None
    total = buckets[bounds[-1]]
    if total <= 0:
        return None
    rank = q * total
    lower, prev = 0.0, 0.0
    for b in bounds:
        c = buckets[b]
        if c >= rank:
            if math.isinf(b):
                return (lower, (lower, b))
            if c == prev:
                return (b, (lower, b))
            return (lower + (b - lower) * (rank - prev) / (c - prev), (lower, b))
        lower, prev = b, c
    return None


def client_side(records):
    """What the client saw of one level: generated tokens, finished requests and TTFTs (seconds)."""
    tokens = sum(int(r.get("output_tokens") or 0) for r in records if r.get("ok"))
    ttfts = sorted(r["chunk_times"][0] - r["start"] for r in records
                   if r.get("ok") and r.get("chunk_times") and r.get("start") is not None)
    return {"generation_tokens": tokens, "requests": len([1 for r in records if r.get("ok")]), "ttft_s": ttfts}


# Where SGLang's TTFT histogram timer starts and stops (sglang 0.5.17, the release run on the H200):
# python/sglang/srt/entrypoints/openai/serving_base.py handle_request: ``received_time = monotonic_time()`` once
# FastAPI has accepted, read and validated the request, passed on as ``adapted_request.received_time``;
# python/sglang/srt/managers/tokenizer_manager.py _init_req_state: ``time_stats.set_created_time(obj.received_time)``;
# the first output batch back from the detokenizer: ``state.time_stats.set_first_token_time()`` and
# ``metrics_collector.observe_time_to_first_token(labels, time_stats.get_first_token_latency())`` where
# python/sglang/srt/observability/req_time_stats.py ``get_first_token_latency = first_token_time - created_time``.
# So the server's TTFT is a sub-interval of the client's: the client's adds connecting, the HTTP server's accept,
# read and validation before the handler runs, and the writing of the first SSE event after it. Under a burst
# (c=256 simultaneous arrivals on one HTTP event loop) those wait in line: the client's TTFT may lie far above the
# server's histogram (measured on the H200: client p50 287 ms, server bucket (0, 0.1] s) without any fault.
# Only a client TTFT below what the server measured is impossible.
TTFT_TIMER_SOURCE = ("sglang 0.5.17 serving_base.py received_time -> tokenizer_manager.py first output batch "
                     "(req_time_stats.get_first_token_latency)")


def reconcile(server_delta, client, tolerance=DEFAULT_TOLERANCE, ttft_slack_s=0.05):
    """Compare the server's view of a level with the client's; one verdict dict.

    Tokens: |server - client| / client > ``tolerance`` is a disagreement (a client miscounting its tokens, or a
    server reporting tokens it did not send), named with both counts. Requests: the server must count as many
    finished requests as the client (tolerance applies). TTFT, like with like: the server's timer runs inside the
    client's (TTFT_TIMER_SOURCE), so a client median below the lower bound of the server median's bucket
    (less ``tolerance``) is a disagreement; one above its upper bound (plus ``tolerance`` and ``ttft_slack_s``) is
    time spent outside the server's timer (queueing before the handler, delivery after it), reported with the
    gap as status ``queueing``, not a disagreement.
    """
    checks, flags, notes = [], [], []
    sc = server_delta["counters"]

    def rel_check(name, server, mine, what):
        if server is None:
            checks.append({"metric": name, "status": "missing", "server": None, "client": mine})
            return
        rel = abs(server - mine) / float(max(mine, 1))
        ok = rel <= tolerance
        checks.append({"metric": name, "server": server, "client": mine, "rel_diff": round(rel, 4),
                       "tolerance": tolerance, "status": "ok" if ok else "disagree"})
        if not ok:
            flags.append("%s: the server counted %g, %s %g (%.1f%% apart, tolerance %.1f%%)"
                         % (name, server, what, mine, 100 * rel, 100 * tolerance))

    rel_check("generation_tokens", sc.get("generation_tokens"), client["generation_tokens"],
              "the responses' usage (client fallback where absent) says")
    rel_check("requests", sc.get("requests"), client["requests"], "the client finished")
    ttft = server_delta.get("ttft")
    cl = client["ttft_s"]
    if ttft and cl:
        q = histogram_quantile(0.5, ttft["buckets"])
        cmed = cl[len(cl) // 2] if len(cl) % 2 else (cl[len(cl) // 2 - 1] + cl[len(cl) // 2]) / 2.0
        if q is None:
            checks.append({"metric": "ttft_p50_s", "status": "missing", "client": round(cmed, 6)})
        else:
            value, (lo, hi) = q
            lo_ok = lo * (1 - tolerance)
            hi_ok = (hi * (1 + tolerance) + ttft_slack_s) if not math.isinf(hi) else float("inf")
            p99 = histogram_quantile(0.99, ttft["buckets"])
            status = "ok" if lo_ok <= cmed <= hi_ok else ("disagree" if cmed < lo_ok else "queueing")
            chk = {"metric": "ttft_p50_s", "server": round(value, 6), "server_bucket": [lo, hi],
                   "server_p99": round(p99[0], 6) if p99 else None, "client": round(cmed, 6), "status": status,
                   "server_timer": TTFT_TIMER_SOURCE}
            if status == "disagree":
                flags.append("ttft p50: client %.4f s below the server's bucket (%g, %g] s: the server's timer runs "
                             "inside the client's, so the client cannot see the first token sooner" % (cmed, lo, hi))
            elif status == "queueing":
                chk["gap_s"] = round(cmed - hi, 6)
                notes.append("ttft p50: client %.4f s above the server's bucket (%g, %g] s by at least %.1f ms: time "
                             "outside the server's timer (HTTP accept/read/validation before the handler, delivery "
                             "after the first output), queueing under load; reported, not a disagreement"
                             % (cmed, lo, hi, 1000.0 * (cmed - hi)))
            checks.append(chk)
    elif not ttft:
        checks.append({"metric": "ttft_p50_s", "status": "missing"})
    return {"checks": checks, "agree": not flags, "flags": flags, "notes": notes, "tolerance": tolerance}


def summary_line(verdict):
    """One line for progress.log and the report."""
    parts = []
    for c in verdict["checks"]:
        if c["status"] == "missing":
            parts.append("%s: not exported" % c["metric"])
        else:
            parts.append("%s server %s / client %s %s" % (c["metric"], c["server"], c["client"], c["status"]))
    head = "server metrics agree" if verdict["agree"] else "server metrics DISAGREE (%s)" % "; ".join(
        verdict.get("flags") or [])
    return "%s: %s" % (head, "; ".join(parts))


# Where the engine's metrics are: SGLang serves them on /metrics (--enable-metrics). SMG, the SGLang model gateway in
# front of the workers (a bench through the router), answers /metrics on its main port with 404 and serves its
# workers' metrics on /engine_metrics, aggregated, each series labelled worker_addr (measured with smg 1.13.0:
# tests/fixtures/sglang-0.5.17/smg-1.13.0-engine-metrics.txt; sgl-project/sglang PR #12970 names the endpoint of its
# predecessor, sgl-router, which also rewrote the prefix to sglang_). The first path with SGLang metrics is used.
PATHS = ("/metrics", "/engine_metrics")


def fetch(base_url, timeout=5.0, path="/metrics"):
    """GET <base_url><path> (no API key: SGLang serves /metrics without one) -> text; MetricsError on any failure."""
    from ansible.module_utils.urls import open_url  # the bench module's own HTTP helper (no extra dependency)
    url = base_url.rstrip("/") + path
    try:
        return open_url(url, timeout=timeout, validate_certs=False).read().decode("utf-8", "replace")
    except Exception as exc:  # HTTP errors, refused connections, timeouts: all mean "no server metrics"
        raise MetricsError("GET %s failed: %s" % (url, exc))


def begin(base_url, mode, model=None, get=fetch):
    """Snapshot before a level: (snapshot, None) or (None, reason). mode off -> (None, 'off'). The snapshot's ``path``
    is the first of PATHS that has SGLang metrics; the reason names what each path answered."""
    if mode == "off":
        return None, "off"
    reasons = []
    for path in PATHS:
        try:
            snap = snapshot(get(base_url, path=path), model)
        except MetricsError as exc:
            reasons.append("%s: %s" % (path, exc) if path not in str(exc) else str(exc))
            continue
        snap["path"] = path
        return snap, None
    return None, "; ".join(reasons)


def finish(base_url, before, records, tolerance=DEFAULT_TOLERANCE, model=None, get=fetch):
    """Snapshot after the level, the delta and the verdict (status ok / disagree / unavailable)."""
    path = before.get("path") or PATHS[0]
    try:
        d = delta(before, snapshot(get(base_url, path=path), model))
    except MetricsError as exc:
        return {"status": "unavailable", "reason": str(exc), "agree": None, "path": path}
    verdict = reconcile(d, client_side(records), tolerance)
    verdict["status"] = "ok" if verdict["agree"] else "disagree"
    verdict["path"] = path
    verdict["line"] = summary_line(verdict)
    return verdict

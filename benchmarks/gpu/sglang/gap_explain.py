#!/usr/bin/env python3
"""Why ours and SGLang's bench_serving disagree on one live server: every tool's rate over the server's own window,
and a ground-truth line for every difference over 5%. Used by gap.py for its summary and, standalone, on a finished
run's files:

    python3 benchmarks/gpu/sglang/gap_explain.py RAW.jsonl [--server-requests SERVER.jsonl.xz] [--server-log LOG.xz]

What each tool divides by (SGLang 0.5.17, python/sglang/benchmark/serving.py, benchmark()):
- bench_serving sends ``--warmup-requests`` requests first (the first prompt, output_len=min(output_len, 32)), waits
  for them, optionally flushes the cache, then ``time.sleep(1.0)``; only then ``benchmark_start_time =
  time.perf_counter()``. ``benchmark_duration`` ends after all requests and one GET /server_info. So its window
  excludes the warmup and the second of idle; a server window taken over the whole run includes both.
- ours (plugins/module_utils/bench/metrics.py compute): last response end minus first request start.
The server's window here: first ``request_received_ts`` to last ``request_finished_ts`` of the tool's main requests
(the warmup requests dropped: they are the first ``warmups`` received, because bench_serving gathers them before the
main run starts), from the per-request records of ``--export-metrics-to-file``
(python/sglang/srt/observability/req_time_stats.py convert_to_output_meta_info; request_received_ts and
request_finished_ts are the tokenizer manager's times; response_sent_to_client_ts is set once, at the first chunk
sent: tokenizer_manager.py). ``cached_tokens`` is the prompt's prefix the radix cache already held.
"""
import argparse
import calendar
import json
import lzma
import re
import statistics
import time

TOLERANCE = 0.05  # a difference over this needs a ground-truth line
AGREE = 0.02  # the contract's "within 2%"
ANCHOR_WARMUP_S = 1.0  # bench_serving's time.sleep(1.0) after its warmup


def median(vals):
    vals = [v for v in vals if isinstance(v, (int, float))]
    return statistics.median(vals) if vals else None


def rel(a, b):
    """a / b - 1, or None."""
    return a / b - 1 if isinstance(a, (int, float)) and isinstance(b, (int, float)) and b else None


def records_from_row(row):
    """The server's per-request records of one gap.py row as exporter-shaped dicts: the row's own full records when
    it has them (``server_records``), else rebuilt from ``server_per_request`` ([received, dispatched, first token,
    finished, first chunk sent, completion tokens(, cached tokens, prompt tokens)], seconds after the run's t0)."""
    if row.get("server_records") is not None:
        return row["server_records"]
    t0 = row.get("t0") or 0.0
    out = []
    for x in row.get("server_per_request") or []:
        rcv, _disp, first, fin, sent, ct = x[:6]
        rec = {"request_received_ts": t0 + rcv, "request_finished_ts": t0 + fin,
               "response_sent_to_client_ts": t0 + sent, "completion_tokens": ct}
        if len(x) >= 8:  # gap.py since it added them: cached and prompt tokens
            rec.update(cached_tokens=x[6], prompt_tokens=x[7])
        if first is not None and ct > 1 and fin > first:
            rec["decode_throughput"] = (ct - 1) / (fin - first)
        out.append(rec)
    return out


def attribute(records, t0, t1):
    """The records whose request arrived within [t0, t1] (a run's wall-clock window): by time, not by when the
    exporter's file was read (its writes trail the responses)."""
    return [r for r in records if r.get("request_received_ts") is not None and t0 <= r["request_received_ts"] <= t1]


def window(recs, warmups=0):
    """The server's view of one run: the main requests (the first ``warmups`` received dropped), their window and rate,
    and the warmup's share of a whole-run window."""
    recs = sorted((r for r in recs if r.get("request_received_ts") is not None and r.get("request_finished_ts")),
                  key=lambda r: r["request_received_ts"])
    if len(recs) <= warmups:
        return None
    warm, main = recs[:warmups], recs[warmups:]
    start = min(r["request_received_ts"] for r in main)
    end = max(r["request_finished_ts"] for r in main)
    toks = sum(r.get("completion_tokens") or 0 for r in main)
    all_start = min(r["request_received_ts"] for r in recs)
    prompt = sum(r.get("prompt_tokens") or 0 for r in main)
    cached = [r.get("cached_tokens") for r in main if r.get("cached_tokens") is not None]
    tpot = [1000.0 / r["decode_throughput"] for r in main if r.get("decode_throughput")]
    ttft = [(r["response_sent_to_client_ts"] - r["request_received_ts"]) * 1000 for r in main
            if r.get("response_sent_to_client_ts")]
    out = {"requests": len(main), "tokens": toks, "span_s": round(end - start, 4),
           "rate": round(toks / (end - start), 1) if end > start else None,
           "whole_span_s": round(end - all_start, 4),
           "whole_rate": round((toks + sum(r.get("completion_tokens") or 0 for r in warm)) / (end - all_start), 1)
           if end > all_start else None,
           "warmup_requests": len(warm), "warmup_tokens": sum(r.get("completion_tokens") or 0 for r in warm),
           "idle_after_warmup_s": round(start - max(r["request_finished_ts"] for r in warm), 4) if warm else None,
           "tpot_p50_ms": round(median(tpot), 3) if tpot else None,
           "ttft_p50_ms": round(median(ttft), 2) if ttft else None,
           "cached_share": round(sum(cached) / prompt, 4) if cached and prompt else None}
    return out


def decode_lines(log_text):
    """SGLang's own 'Decode batch' log lines (scheduler, every 40 decode steps by default): [(unix second, running
    requests, gen throughput tok/s)]. Second resolution."""
    pat = re.compile(r"^\[(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d)\] Decode batch, .*?#running-req: (\d+).*?"
                     r"gen throughput \(token/s\): ([0-9.]+)")
    out = []
    for line in log_text.splitlines():
        m = pat.match(line)
        if m:
            t = calendar.timegm(time.strptime(m.group(1), "%Y-%m-%d %H:%M:%S"))
            out.append((t, int(m.group(2)), float(m.group(3))))
    return out


def decode_rate(lines, t0, t1):
    """Median of the scheduler's logged gen throughput over the whole seconds inside [t0, t1] (the first second
    skipped: the ramp)."""
    vals = [g for t, _n, g in lines if int(t0) + 2 <= t <= int(t1) - 1]
    return round(median(vals), 1) if vals else None


def analyse_run(row, records=None, log_lines=None):
    """One gap.py row -> its analysis dict (the tool's rate, the server's window with and without warmups, cache,
    eviction)."""
    t0 = row.get("t0")
    t1 = t0 + (row.get("run_wall_s") or 0) if t0 else None
    recs = attribute(records, t0, t1) if records is not None and t0 else records_from_row(row)
    warmups = row.get("warmups", 1 if str(row.get("tool", "")).startswith("anchor") else 0)
    srv = window(recs, warmups) or {}
    ev = row.get("server_cache") or {}
    res = {"tool": row.get("tool"), "arm": row.get("arm") or row.get("tool"), "c": row.get("c"),
           "n": row.get("num_prompts"), "round": row.get("round"), "tool_rate": row.get("out_tok_s"),
           "tool_duration_s": row.get("duration_s"), "server": srv,
           "tool_vs_server": rel(row.get("out_tok_s"), srv.get("rate")),
           "tool_vs_whole": rel(row.get("out_tok_s"), srv.get("whole_rate")),
           "evicted_tokens": ev.get("evicted_tokens"), "eviction_s": ev.get("eviction_s"),
           "tool_tpot_p50_ms": row.get("tpot_p50_ms"), "tool_ttft_p50_ms": row.get("ttft_p50_ms"),
           "tool_itl_p50_ms": row.get("itl_p50_ms")}
    if log_lines is not None and t0:
        res["log_decode_rate"] = decode_rate(log_lines, t0, t1)
    return res


def level(a):
    return "c=%s x %s" % (a["c"], a["n"])


def explain_tool(a):
    """The ground-truth line for a tool whose own rate is over 5% off the server's rate, or None."""
    d, dw = a["tool_vs_server"], a["tool_vs_whole"]
    if d is None or abs(d) <= TOLERANCE and (dw is None or abs(dw) <= TOLERANCE):
        return None
    srv = a["server"]
    if abs(d) <= TOLERANCE:
        return ("%s %s: %+.1f%% against the server's whole-run window, %+.1f%% against its main requests' window: "
                "the whole window holds %d warmup request(s) and %.2f s idle after them (bench_serving's "
                "benchmark_start_time follows warmup and time.sleep(1.0))" % (
                    a["arm"], level(a), 100 * dw, 100 * d, srv.get("warmup_requests") or 0,
                    srv.get("idle_after_warmup_s") or 0.0))
    lead = (a.get("tool_duration_s") or 0.0) - (srv.get("span_s") or 0.0)
    if srv.get("span_s") and abs(lead) > TOLERANCE * srv["span_s"]:
        late = srv.get("idle_after_warmup_s")
        return ("%s %s: %+.1f%% against the server's main-request window: the tool's clock ran %.3f s longer than "
                "the server's window of its requests (%.3f s)%s" % (
                    a["arm"], level(a), 100 * d, lead, srv["span_s"],
                    "; its first request reached the server %.3f s after the 1 s sleep that follows its warmup" % (
                        late - ANCHOR_WARMUP_S) if late is not None else ""))
    return "%s %s: %+.1f%% against the server's main-request window: unexplained" % (a["arm"], level(a), 100 * d)


def explain_latency(a, min_ms=1.0):
    """Lines for a tool's TTFT or TPOT median over 5% (and over ``min_ms``) off the server's own. The server's TTFT
    runs from request_received_ts to the first chunk handed to the HTTP layer, its TPOT over the decode that follows
    (tokenizer_manager.py): what the client sees beyond them (connection, request parsing before the server's clock,
    delivery) has no record here, so such a line ends 'unexplained'."""
    out = []
    for name, tool_key, srv_key in (("TTFT", "tool_ttft_p50_ms", "ttft_p50_ms"), ("TPOT", "tool_tpot_p50_ms",
                                                                                 "tpot_p50_ms")):
        t, s = a.get(tool_key), a["server"].get(srv_key)
        d = rel(t, s)
        if d is not None and abs(d) > TOLERANCE and abs(t - s) > min_ms:
            out.append("%s %s: %s p50 %.2f ms at the client, %.2f ms by the server's timestamps (%+.1f%%): outside the "
                       "server's timers, unexplained by these records" % (a["arm"], level(a), name, t, s, 100 * d))
    return out


def explain_pair(ref, other):
    """The ground-truth line for two arms of one level whose server-window rates differ by over 5%, or None."""
    a, b = ref["server"], other["server"]
    d = rel(b.get("rate"), a.get("rate"))
    if d is None or abs(d) <= TOLERANCE:
        return None
    head = "%s vs %s %s: server-window rate %s vs %s tok/s (%+.1f%%), server TPOT p50 %s vs %s ms" % (
        other["arm"], ref["arm"], level(ref), fmt(b.get("rate")), fmt(a.get("rate")), 100 * d,
        fmt(b.get("tpot_p50_ms"), 2), fmt(a.get("tpot_p50_ms"), 2))
    why = []
    ca, cb = a.get("cached_share"), b.get("cached_share")
    if ca is not None and cb is not None and abs(cb - ca) >= 0.10:
        why.append("the workloads differ: %.0f%% vs %.0f%% of the prompt tokens were already in the radix cache "
                   "(server per-request cached_tokens)" % (100 * cb, 100 * ca))
    ea, eb = ref.get("evicted_tokens"), other.get("evicted_tokens")
    if ea is not None and eb is not None and abs(eb - ea) > 0.1 * max(ea, eb, 1):
        why.append("radix-cache eviction: %d vs %d tokens evicted, %.3f vs %.3f s evicting "
                   "(sglang:evicted_tokens_total, sglang:eviction_duration_seconds_sum)" % (
                       eb, ea, other.get("eviction_s") or 0.0, ref.get("eviction_s") or 0.0))
    return head + ": " + ("; ".join(why) if why else "unexplained")


def group(analyses):
    """{(c, n): {arm: [analysis, ...]}} in first-seen order."""
    out = {}
    for a in analyses:
        out.setdefault((a["c"], a["n"]), {}).setdefault(a["arm"], []).append(a)
    return out


def merged(runs):
    """The median run of an arm's repetitions, as one analysis (medians of every figure the rules read)."""
    if len(runs) == 1:
        return runs[0]
    m = dict(runs[0])
    for k in ("tool_rate", "tool_duration_s", "tool_vs_server", "tool_vs_whole", "evicted_tokens", "eviction_s"):
        m[k] = median([r.get(k) for r in runs])
    m["server"] = dict((k, median([r["server"].get(k) for r in runs])) for k in runs[0]["server"])
    return m


def report(analyses, reference="ours"):
    """The table (medians over repetitions) and, below it, every explanation line."""
    lines = ["c | prompts | arm | n | tool tok/s | server-window tok/s | tool vs server | whole-window tok/s | "
             "warmup idle s | cached % | evicted tok | TPOT p50 tool (srv) ms | TTFT p50 tool (srv) ms"]
    notes = []
    for (c, n), arms in group(analyses).items():
        for arm, runs in arms.items():
            m = merged(runs)
            s = m["server"]
            lines.append(" | ".join(str(x) for x in (
                c, n, arm, len(runs), fmt(m["tool_rate"]), fmt(s.get("rate")), pct(m["tool_vs_server"]),
                fmt(s.get("whole_rate")), fmt(s.get("idle_after_warmup_s"), 2),
                fmt(100 * s["cached_share"] if s.get("cached_share") is not None else None),
                fmt(m.get("evicted_tokens")),
                "%s (%s)" % (fmt(median([r["tool_tpot_p50_ms"] for r in runs]), 2), fmt(s.get("tpot_p50_ms"), 2)),
                "%s (%s)" % (fmt(median([r["tool_ttft_p50_ms"] for r in runs]), 1), fmt(s.get("ttft_p50_ms"), 1)))))
            line = explain_tool(m)
            if line:
                notes.append(line)
            m["tool_ttft_p50_ms"] = median([r["tool_ttft_p50_ms"] for r in runs])
            m["tool_tpot_p50_ms"] = median([r["tool_tpot_p50_ms"] for r in runs])
            notes.extend(explain_latency(m))
        ref = arms.get(reference)
        if ref:
            for arm, runs in arms.items():
                if arm != reference:
                    line = explain_pair(merged(ref), merged(runs))
                    if line:
                        notes.append(line)
    return "\n".join(lines + [""] + (notes or ["no difference over 5%"]))


def fmt(v, nd=0):
    return "-" if v is None else "%.*f" % (nd, v)


def pct(v):
    return "-" if v is None else "%+.1f%%" % (100 * v)


def load(raw, server_requests=None, server_log=None):
    rows = [json.loads(line) for line in open(raw) if line.strip()]
    records = None
    if server_requests:
        with lzma.open(server_requests, "rt") as f:
            records = [json.loads(line) for line in f if line.strip()]
    log_lines = None
    if server_log:
        opener = lzma.open if server_log.endswith(".xz") else open
        with opener(server_log, "rt") as f:
            log_lines = decode_lines(f.read())
    return [analyse_run(r, records, log_lines) for r in rows
            if str(r.get("tool", "")).startswith(("ours", "anchor")) and r.get("t0") and not r.get("warmup")]


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("raw", help="gap-raw.jsonl of one gap.py run")
    ap.add_argument("--server-requests", help="server-requests.jsonl.xz of the same run (every per-request record)")
    ap.add_argument("--server-log", help="the server's log (.xz or plain): its Decode batch lines")
    ap.add_argument("--runs", action="store_true", help="one line a run as well")
    a = ap.parse_args(argv)
    analyses = load(a.raw, a.server_requests, a.server_log)
    if a.runs:
        for x in analyses:
            s = x["server"]
            print("%s c=%s n=%s r%s: tool %s tok/s over %s s; server %s tok/s over %s s (whole %s over %s s, "
                  "idle after warmup %s s); cached %s; TPOT srv %s ms; scheduler log %s tok/s" % (
                      x["arm"], x["c"], x["n"], x["round"], fmt(x["tool_rate"]), fmt(x["tool_duration_s"], 3),
                      fmt(s.get("rate")), s.get("span_s"), fmt(s.get("whole_rate")), s.get("whole_span_s"),
                      s.get("idle_after_warmup_s"), s.get("cached_share"), s.get("tpot_p50_ms"),
                      fmt(x.get("log_decode_rate"))))
    print(report(analyses))


if __name__ == "__main__":
    main()

#!/usr/bin/env python3
"""The side-by-side table of a gap.py run: ours (serving_bench's client) against SGLang's own bench_serving on one
server, per level and arm, each row with the server's own figures. Used by gap.py for its summary and, standalone, on
a finished run's files (plain or .xz):

    python3 benchmarks/gpu/sglang/sidebyside.py RAW.jsonl[.xz] --server-requests SERVER.jsonl.xz

Per (c, prompts, arm), medians over the repetitions:
- the tool's own rate, the server's rate over the window of the arm's main requests (gap_explain.window: first
  request_received_ts to last request_finished_ts, bench_serving's warmup left out) and the difference; the agreement
  rule is the contract's 2% (gap_explain.AGREE), for each tool against the server and for the two tools' server
  rates against each other;
- the tool's token count against the server's: its per-request records (completion_tokens of the main requests) and
  its counter over the run (/metrics, sglang:generation_tokens_total, less the warmup requests' tokens);
- the scheduler process's CPU share over the run (utime + stime from /proc/PID/stat over the run's wall time; the
  process SGLang names ``sglang::scheduler``, 15 characters in comm). Read it with SGLang's loop in mind: without
  --sleep-on-idle the scheduler polls its sockets without sleeping (sglang 0.5.17
  python/sglang/srt/managers/scheduler_components/idle_sleeper.py: "each GPU would otherwise pin one thread at 100%
  CPU usage"), and CUDA's default synchronisation spins while it waits for the GPU, so a share near 1.0 alone does
  not say the server is bound by the host: the GPU's busy share says whether the GPU was the bottleneck;
- the GPU's busy share (gap.py's NVML sampler: nvmlDeviceGetUtilizationRates().gpu, "percent of time over the past
  sample period during which one or more kernels was executing on the GPU", NVML API reference, averaged over the
  run) and, where the GPU has GPM, the SMs' own busy share over the run (NVML_GPM_METRIC_SM_UTIL: a kernel running
  is not the SMs being full); absent for runs recorded without them;
- TTFT: the client's median against the server's (request_received_ts to response_sent_to_client_ts, the first chunk
  handed to the HTTP layer), and for ours, which records every request's send time, the difference split with the
  server's own timestamps: arrival (client send to request_received_ts: connection, HTTP parsing, the tokenizer
  manager's event loop) and delivery (response_sent_to_client_ts to the client's first chunk). Requests are paired by
  rank (the i-th send with the i-th receipt, the i-th first chunk sent with the i-th first chunk read): exact while
  the server receives and answers in the order sent, an approximation otherwise (the residual column says how much
  the parts miss the client's median by).
"""
import argparse
import json
import lzma
import statistics

import gap_explain as gx

SCHEDULER = "sglang::schedul"  # comm is 15 characters: "sglang::scheduler" truncated
GPU_BOUND = 0.90  # a run whose GPU was busy at least this share of the time is called GPU-bound


def median(vals):
    vals = [v for v in vals if isinstance(v, (int, float))]
    return statistics.median(vals) if vals else None


def scheduler_share(row):
    """The scheduler process's CPU share over the run (gap.py's server_cpu_util: [[comm, share], ...]), or None."""
    for comm, share in row.get("server_cpu_util") or []:
        if comm.startswith(SCHEDULER):
            return share
    return None


def ttft_parts(row):
    """ms medians of ours' TTFT and its parts by the server's timestamps, rank-paired (see the module docstring):
    {client, server, arrival, delivery, residual}; None where the row lacks the per-request arrays."""
    cl, sv = row.get("client_per_request") or [], row.get("server_per_request") or []
    if not cl or not sv or len(cl) != len(sv):
        return None
    # client: [start, ttft, e2e, chunks, max gap]; server: [received, dispatched, first token, finished, first chunk
    # sent, ...], all seconds after the run's t0 on the same wall clock (gap.py)
    sends = sorted(x[0] for x in cl)
    firsts = sorted(x[0] + x[1] for x in cl if x[1] is not None)
    rcv = sorted(x[0] for x in sv)
    sent = sorted(x[4] for x in sv if x[4] is not None)
    if len(firsts) != len(sent):
        return None
    out = {"client": median([x[1] for x in cl]), "server": median([x[4] - x[0] for x in sv]),
           "arrival": median([b - a for a, b in zip(sends, rcv)]),
           "delivery": median([a - b for a, b in zip(firsts, sent)])}
    out = dict((k, round(v * 1000, 2)) for k, v in out.items())
    out["residual"] = round(out["client"] - out["server"] - out["arrival"] - out["delivery"], 2)
    return out


def analyse(row, records=None):
    """One gap.py row -> the figures of the side-by-side (gap_explain.analyse_run plus counters, CPU, GPU, TTFT)."""
    a = gx.analyse_run(row, records)
    counters = row.get("server_counters") or {}
    gen = counters.get("generation_tokens")
    toks = row.get("output_tokens")
    # the anchor's counter delta holds its warmup requests' tokens too: left out (their tokens by the server's records)
    warm = (a["server"] or {}).get("warmup_tokens") or 0
    a.update(scheduler=scheduler_share(row), gpu_busy=(row.get("gpu") or {}).get("util_mean"),
             sm_busy=(row.get("gpu") or {}).get("sm_util"),
             gpu_samples=(row.get("gpu") or {}).get("samples"), counter_tokens=gen - warm if gen is not None else None,
             tool_tokens=toks, server_tokens=(a["server"] or {}).get("tokens"), ttft=ttft_parts(row) if row.get("tool") == "ours" else None,
             client_ttft_p50_ms=row.get("ttft_p50_ms"))
    return a


def load(raw, server_requests=None):
    opener = lzma.open if raw.endswith(".xz") else open
    with opener(raw, "rt") as f:
        rows = [json.loads(line) for line in f if line.strip()]
    records = None
    if server_requests:
        with lzma.open(server_requests, "rt") as f:
            records = [json.loads(line) for line in f if line.strip()]
    return [analyse(r, records) for r in rows
            if str(r.get("tool", "")).startswith(("ours", "anchor")) and r.get("t0") and not r.get("warmup")]


def fmt(v, nd=0):
    return "-" if v is None else "%.*f" % (nd, v)


def pct(v):
    return "-" if v is None else "%+.1f%%" % (100 * v)


def rows_of(analyses):
    """[(c, n, arm, runs, figures)] with the medians over the runs of an arm at a level."""
    out = []
    for (c, n), arms in gx.group(analyses).items():
        for arm, runs in arms.items():
            m = gx.merged(runs)
            ttfts = [r["ttft"] for r in runs if r.get("ttft")]
            out.append((c, n, arm, len(runs), {
                "tool_rate": m["tool_rate"], "server_rate": m["server"].get("rate"), "tool_vs_server": m["tool_vs_server"],
                "scheduler": median([r["scheduler"] for r in runs]), "gpu_busy": median([r["gpu_busy"] for r in runs]),
                "sm_busy": median([r["sm_busy"] for r in runs]),
                "client_ttft": median([r["client_ttft_p50_ms"] for r in runs]),
                "server_ttft": m["server"].get("ttft_p50_ms"),
                "tokens_vs_records": median([gx.rel(r["tool_tokens"], r["server_tokens"]) for r in runs]),
                "tokens_vs_counter": median([gx.rel(r["tool_tokens"], r["counter_tokens"]) for r in runs]),
                "ttft": dict((k, median([t[k] for t in ttfts])) for k in ttfts[0]) if ttfts else None}))
    return out


def report(analyses, reference="ours"):
    """The table and, below it, the verdict lines: each tool against the server, the tools against each other
    (server-window rates), GPU-bound or not, and ours' TTFT split."""
    lines = ["c | prompts | arm | n | tool tok/s | server-window tok/s | tool vs server | tokens vs records (counter) | vs %s "
             "(server) | scheduler CPU | GPU busy (SM busy) | TTFT p50 client (server) ms | arrival / delivery / residual ms"
             % reference]
    notes = []
    table = rows_of(analyses)
    ref = dict(((c, n), f) for c, n, arm, _k, f in table if arm == reference)
    for c, n, arm, k, f in table:
        r = ref.get((c, n))
        vs = gx.rel(f["server_rate"], r["server_rate"]) if r and arm != reference else None
        t = f["ttft"]
        busy = "-" if f["gpu_busy"] is None else "%.0f%%" % f["gpu_busy"]
        if f["sm_busy"] is not None:
            busy += " (%.0f%%)" % f["sm_busy"]
        lines.append(" | ".join(str(x) for x in (
            c, n, arm, k, fmt(f["tool_rate"]), fmt(f["server_rate"]), pct(f["tool_vs_server"]),
            "%s (%s)" % (pct(f["tokens_vs_records"]), pct(f["tokens_vs_counter"])), pct(vs), fmt(f["scheduler"], 2),
            busy,
            "%s (%s)" % (fmt(f["client_ttft"], 1), fmt(f["server_ttft"], 1)),
            "%s / %s / %s" % (fmt(t["arrival"], 1), fmt(t["delivery"], 1), fmt(t["residual"], 1)) if t else "-")))
        level = "%s c=%s x %s" % (arm, c, n)
        d = f["tool_vs_server"]
        if d is not None:
            verdict = "within 2%" if abs(d) <= gx.AGREE else "OUTSIDE 2%"
            notes.append("%s: tool vs server window %s: %s" % (level, pct(d), verdict))
        if vs is not None:
            notes.append("%s vs %s: server-window rate %s vs %s tok/s (%s): %s" % (
                level, reference, fmt(f["server_rate"]), fmt(r["server_rate"]), pct(vs),
                "within 2%" if abs(vs) <= gx.AGREE else "OUTSIDE 2%"))
        if f["gpu_busy"] is not None:
            notes.append("%s: GPU busy %.0f%%%s, scheduler CPU %s: %s" % (
                level, f["gpu_busy"], "" if f["sm_busy"] is None else " (SMs busy %.0f%%)" % f["sm_busy"],
                fmt(f["scheduler"], 2),
                "GPU-bound" if f["gpu_busy"] >= 100 * GPU_BOUND else "not GPU-bound (GPU busy under %.0f%%)"
                % (100 * GPU_BOUND)))
        if t:
            notes.append("%s: TTFT p50 %.2f ms at the client = %.2f server (received to first chunk sent) + %.2f "
                         "arrival (sent to received) + %.2f delivery (first chunk sent to read) %+.2f residual" % (
                             level, t["client"], t["server"], t["arrival"], t["delivery"], t["residual"]))
    return "\n".join(lines + [""] + notes)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("raw", help="gap-raw.jsonl of one gap.py run (.xz or plain)")
    ap.add_argument("--server-requests", help="server-requests.jsonl.xz of the same run")
    a = ap.parse_args(argv)
    print(report(load(a.raw, a.server_requests)))


if __name__ == "__main__":
    main()

#!/usr/bin/env python3
# -*- coding: utf-8 -*-
# Copyright: gpuhost.sglang contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Timing accuracy of serving_bench's client: a loopback server records when it actually sent each event
(time.monotonic(), CLOCK_MONOTONIC, the same clock the client uses) and writes that time into the event's
text; the client's observed TTFT/ITL are compared with the server's truth at concurrency 1, 256 and 1024.

  TTFT error = client first-chunk time - server send time of the first event
  ITL error  = client gap between consecutive events - server gap between their sends
  event error = client receipt time - server send time, every event

Goal: TTFT/ITL error p99 <= --goal-ms (1 ms) at c=1, 256 and 1024 with the verdict clean, and
client_bound set wherever the goal is missed. The verdict's own estimate (event-loop lag p99 beyond the timer
resolution, ``timestamp_error_ms``) is printed beside the measured error. The fake server runs on its own core,
the client on the cores left (``client_processes`` auto: bench_client.auto_processes over those cores, or
--processes to force a count).

Usage: .venv/bin/python benchmarks/timing_accuracy.py [--ttft 0.05] [--itl 0.02] [--tokens 64] [--processes N]
"""

from __future__ import absolute_import, division, print_function

import argparse
import json
import os
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "collections"))
sys.path.insert(0, os.path.join(ROOT, "tests", "integration"))

from ansible_collections.gpuhost.sglang.plugins.module_utils.bench import client as bench_client  # noqa: E402
from ansible_collections.gpuhost.sglang.plugins.module_utils.bench import metrics as bench_metrics  # noqa: E402


def pct(vals, p):
    vals = sorted(vals)
    if not vals:
        return None
    return bench_metrics._percentile(vals, p)  # pylint: disable=protected-access


def measure(url, conc, tokens, n, processes):
    bodies = [bench_client.build_payload("completions", "fake-model", "p%d" % i, tokens) for i in range(n)]
    recs, stats = bench_client.run_load(url, "completions", bodies, conc, processes=processes, keep_text=True,
                                        checks=())
    client, bound, reason = bench_client.client_verdict(stats)
    ttft_err, itl_err, ev_err = [], [], []
    errors = 0
    for r in recs:
        if not r.get("ok"):
            errors += 1
            continue
        sends = [float(x) for x in r["text"].split("|")[:-1]]
        ct = r["chunk_times"]
        if len(sends) != len(ct):
            raise SystemExit("event count mismatch: %d sends vs %d chunks" % (len(sends), len(ct)))
        ttft_err.append(ct[0] - sends[0])
        for i in range(len(ct)):
            ev_err.append(ct[i] - sends[i])
            if i:
                itl_err.append((ct[i] - ct[i - 1]) - (sends[i] - sends[i - 1]))
    ms = 1000.0
    res = {"concurrency": conc, "requests": n, "errors": errors, "processes": len(stats), "client_bound": bound,
           "reason": reason, "max_cpu_util": client["max_cpu_util"], "max_lag_p99_ms": client["max_lag_p99_ms"],
           "timer_resolution_ms": client["timer_resolution_ms"], "est_err_ms": client["timestamp_error_ms"],
           "ready_delay_p99_ms": max(s.get("ready_delay_p99_ms") or 0 for s in stats)}
    for name, vals in (("ttft", ttft_err), ("itl", itl_err), ("event", ev_err)):
        a = [abs(v) for v in vals]
        res[name + "_err_ms"] = {"p50": round(pct(a, 50) * ms, 3), "p99": round(pct(a, 99) * ms, 3),
                                 "max": round(max(a) * ms, 3)}
    return res


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--ttft", type=float, default=0.05)
    ap.add_argument("--itl", type=float, default=0.02)
    ap.add_argument("--tokens", type=int, default=64)
    ap.add_argument("--levels", default="1,256,1024")
    ap.add_argument("--processes", type=int, default=0, help="client processes (0: auto, as serving_bench)")
    ap.add_argument("--goal-ms", type=float, default=1.0)
    a = ap.parse_args()
    from fakeserver import fake_server  # pylint: disable=import-error
    avail = sorted(os.sched_getaffinity(0))
    server_core = avail[0]
    client_cores = set(avail[1:]) or {avail[0]}
    rows = []
    print("server core %d, client cores %s, TTFT %.0f ms, ITL %.0f ms, %d tokens, load %s, %s" % (
        server_core, sorted(client_cores), a.ttft * 1000, a.itl * 1000, a.tokens,
        "/".join("%.2f" % x for x in os.getloadavg()), time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())))
    with fake_server("ok", "--stamp", "--ttft", str(a.ttft), "--itl", str(a.itl)) as (url, proc):
        os.sched_setaffinity(proc.pid, {server_core})
        os.sched_setaffinity(0, client_cores)
        for conc in [int(x) for x in a.levels.split(",")]:
            n = max(conc, 8) if conc > 1 else 16
            procs = a.processes or bench_client.auto_processes(conc)
            rows.append(measure(url, conc, a.tokens, n, procs))
    print()
    print("| c | procs | TTFT err p50/p99/max ms | ITL err p50/p99/max ms | event err p99 ms | client CPU | "
          "lag p99 ms | timer res ms | est. err ms | ready delay p99 ms | client_bound | p99 <= %g ms |" % a.goal_ms)
    print("|---:|---:|---|---|---:|---:|---:|---:|---:|---:|---|---|")
    for r in rows:
        t, i, e = r["ttft_err_ms"], r["itl_err_ms"], r["event_err_ms"]
        ok = max(t["p99"], i["p99"]) <= a.goal_ms
        print("| %d | %d | %.2f / %.2f / %.2f | %.2f / %.2f / %.2f | %.2f | %.0f%% | %.2f | %.2f | %.2f | %.2f | %s | %s |" % (
            r["concurrency"], r["processes"], t["p50"], t["p99"], t["max"], i["p50"], i["p99"], i["max"], e["p99"],
            100 * r["max_cpu_util"], r["max_lag_p99_ms"], r["timer_resolution_ms"], r["est_err_ms"],
            r["ready_delay_p99_ms"], r["client_bound"], "yes" if ok else "no"))
    for r in rows:
        if r["reason"]:
            print("c=%d client_bound: %s" % (r["concurrency"], r["reason"]))
    missed = [r for r in rows if max(r["ttft_err_ms"]["p99"], r["itl_err_ms"]["p99"]) > a.goal_ms]
    silent = [r for r in missed if not r["client_bound"]]
    print()
    print("goal (p99 <= %g ms, verdict clean) met at c=%s; missed at c=%s; missed without the flag (a miss of the "
          "verdict) at c=%s" % (a.goal_ms,
                                ",".join(str(r["concurrency"]) for r in rows if r not in missed and not r["client_bound"])
                                or "-", ",".join(str(r["concurrency"]) for r in missed) or "-",
                                ",".join(str(r["concurrency"]) for r in silent) or "-"))
    print(json.dumps(rows))


if __name__ == "__main__":
    main()

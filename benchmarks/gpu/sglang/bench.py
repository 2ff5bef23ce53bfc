#!/usr/bin/env python3
"""Ours vs SGLang's bench_serving on one live server, interleaved (ours, anchor, ours, anchor) at each level, with
the server's own counters read around every run. Same workload for both: N prompts of 32 tokens (random ids),
64 output tokens, ignore_eos. Ours is serving_bench's client and metrics (module_utils/bench), judged like the
module does (coherence under ignore_eos on the head, usage kept, server_metrics.reconcile).
    python3 benchmarks/gpu/sglang/bench.py --base-url http://127.0.0.1:30000 --out DIR [--levels 1,16,64,256]
Writes DIR/bench-raw.jsonl (one line a run) and prints a table.
"""
import argparse
import json
import os
import random
import subprocess
import sys
import time
import urllib.request

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
sys.path.insert(0, os.path.join(ROOT, "collections"))
from ansible_collections.gpuhost.sglang.plugins.module_utils.bench import client as bench_client  # noqa: E402
from ansible_collections.gpuhost.sglang.plugins.module_utils.bench import metrics as bench_metrics  # noqa: E402
from ansible_collections.gpuhost.sglang.plugins.module_utils.bench import server_metrics as sm  # noqa: E402


def get_metrics(base):
    return urllib.request.urlopen(base + "/metrics", timeout=10).read().decode()


def ours(base, model_dir, conc, n, in_len, out_len, seed):
    from transformers import AutoTokenizer
    tok = AutoTokenizer.from_pretrained(model_dir)
    rng = random.Random(seed)
    vocab = [i for i in range(tok.vocab_size) if i not in set(tok.all_special_ids)]
    prompts = [tok.decode([rng.choice(vocab) for _ in range(in_len)]) for _ in range(n)]
    bodies = [bench_client.build_payload("completions", "tiny", p, out_len, ignore_eos=True) for p in prompts]
    before = sm.snapshot(get_metrics(base), "tiny")
    recs, stats = bench_client.run_load(base, "completions", bodies, conc,
                                        processes=bench_client.auto_processes(conc), eos_ignored=True)
    d = sm.delta(before, sm.snapshot(get_metrics(base), "tiny"))
    res = bench_metrics.compute(recs, conc)
    ver = sm.reconcile(d, sm.client_side(recs))
    client, bound, reason = bench_client.client_verdict(stats)
    return {"tool": "ours", "c": conc, "out_tok_s": res["output_throughput"], "output_tokens": res["output_tokens"],
            "server_tokens": d["counters"]["generation_tokens"], "duration_s": res["duration_s"],
            "ttft_p50_ms": res["ttft_ms"]["p50"], "tpot_p50_ms": res["tpot_ms"]["p50"], "itl_p50_ms": res["itl_ms"]["p50"],
            "itl_p99_ms": res["itl_ms"]["p99"], "errors": res["errors"], "incoherent": res["incoherent"],
            "usage_above_text": res["usage_above_text"], "server_metrics": ver, "client_bound": bound,
            "client_bound_reason": reason,
            "server_tok_s": (d["counters"]["generation_tokens"] or 0) / res["duration_s"] if res["duration_s"] else None}


def anchor(base, model_dir, conc, n, in_len, out_len, seed, out):
    f = os.path.join(out, "anchor-c%d-%d.jsonl" % (conc, int(time.time())))
    before = sm.snapshot(get_metrics(base), "tiny")
    cmd = [sys.executable, "-m", "sglang.bench_serving", "--backend", "sglang-oai", "--base-url", base, "--model",
           "tiny", "--tokenizer", model_dir, "--dataset-name", "random-ids", "--random-input-len", str(in_len),
           "--random-output-len", str(out_len), "--random-range-ratio", "1", "--num-prompts", str(n),
           "--max-concurrency", str(conc), "--disable-tqdm", "--warmup-requests", "1", "--output-file", f,
           "--seed", str(seed)]
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=600,
                       env=dict(os.environ, PYTHONPATH=os.path.join(ROOT, "benchmarks", "gpu", "sglang", "stub") +
                                ":" + os.environ.get("PYTHONPATH", "")))
    d = sm.delta(before, sm.snapshot(get_metrics(base), "tiny"))
    row = {"tool": "anchor", "c": conc, "rc": p.returncode, "stderr_tail": p.stderr[-1500:],
           "server_tokens": d["counters"]["generation_tokens"]}
    try:
        with open(f) as fh:
            r = json.loads(fh.read().strip().splitlines()[-1])
        row.update(out_tok_s=r.get("output_throughput"), output_tokens=r.get("total_output_tokens"),
                   duration_s=r.get("duration"), ttft_p50_ms=r.get("median_ttft_ms"), tpot_p50_ms=r.get("median_tpot_ms"),
                   itl_p50_ms=r.get("median_itl_ms"), itl_p99_ms=r.get("p99_itl_ms"))
        row["server_tok_s"] = (d["counters"]["generation_tokens"] or 0) / row["duration_s"] if row["duration_s"] else None
    except (OSError, ValueError, IndexError) as exc:
        row["error"] = repr(exc)
    return row


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--base-url", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--model-dir", default="/tmp/sglang/model")
    ap.add_argument("--levels", default="1,16,64,256")
    ap.add_argument("--num-prompts", type=int, default=256)
    ap.add_argument("--c1-prompts", type=int, default=128, help="prompts at c=1 (a level of 256 there takes ~1 min)")
    ap.add_argument("--rounds", type=int, default=2)
    a = ap.parse_args()
    raw = open(os.path.join(a.out, "bench-raw.jsonl"), "a")
    for c in [int(x) for x in a.levels.split(",")]:
        n = a.c1_prompts if c == 1 else a.num_prompts
        for rnd in range(a.rounds):
            for fn in ("ours", "anchor"):
                t0 = time.time()
                try:
                    row = (ours(a.base_url, a.model_dir, c, n, 32, 64, rnd) if fn == "ours" else
                           anchor(a.base_url, a.model_dir, c, n, 32, 64, rnd, a.out))
                except Exception as exc:  # record and go on: the other runs still count
                    row = {"tool": fn, "c": c, "error": repr(exc)}
                row.update(round=rnd + 1, num_prompts=n, started=t0, wall_s=round(time.time() - t0, 2))
                raw.write(json.dumps(row) + "\n")
                raw.flush()
                print("c=%d %s r%d: %s tok/s (server %s) ttft %s tpot %s itl p99 %s %s" % (
                    c, fn, rnd + 1, row.get("out_tok_s"), row.get("server_tok_s"), row.get("ttft_p50_ms"),
                    row.get("tpot_p50_ms"), row.get("itl_p99_ms"), row.get("error") or ""), flush=True)


if __name__ == "__main__":
    main()

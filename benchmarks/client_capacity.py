#!/usr/bin/env python3
# -*- coding: utf-8 -*-
# Copyright: gpuhost.sglang contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Client capacity: streamed tokens per client CPU-second against a zero-latency loopback server (one SSE
event per token), serving_bench's client side by side with sglang.bench_serving 0.5.23 in the same run.

Both clients are pinned to the same single core (the fake server to another) and get the same workloads
(c=128 x 1024 tokens, c=1024 x 256 tokens, as in the anchor figures). For ours, CPU = the process's CPU
time over the whole run_load call (load + SSE parsing + token accounting + coherence checks). For the
anchor, CPU = the CPU of bench_serving's benchmark() coroutine, its load phase, measured in its own process
(benchmarks/anchor_inproc.py: no import, tokenizer or dataset cost in it, nothing subtracted). The earlier estimate,
(CPU of the full run) - (median CPU of three 1-request runs), is printed beside it: its +-0.5 s startup noise moved
the anchor's figure by up to 30 % from run to run (2026-12-05).
Also printed: tokens/s in each client's own measurement window.

Usage: benchmarks/anchor_venv.sh && .venv/bin/python benchmarks/client_capacity.py [--quick]
       .venv/bin/python benchmarks/client_capacity.py --profile 1024 256 2048   # where our CPU goes (no anchor)

--profile runs ours alone on the same pinned cores under cProfile with a CPU-time clock (time.process_time: waiting
for the server is not counted) and prints user/system CPU, minor page faults and the top functions by own time; the
profiler's own cost inflates functions called often, so its figures are for where, not how much.
"""

from __future__ import absolute_import, division, print_function

import argparse
import cProfile
import json
import os
import pstats
import resource
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "collections"))
sys.path.insert(0, os.path.join(ROOT, "tests", "integration"))
ANCHOR_PY = os.path.join(ROOT, ".cache", "anchor-venv", "bin", "python")
FAKESERVER = os.path.join(ROOT, "tests", "integration", "fakeserver.py")
OVERHEAD_RUNS = 3


def cores():
    avail = sorted(os.sched_getaffinity(0))
    return (avail[0], avail[1]) if len(avail) > 1 else (avail[0], avail[0])


def ours(base_url, conc, tokens, n, processes, profile=False):
    """Runs in a child pinned to the client core; prints one JSON line (with ``profile``, the profile first)."""
    from ansible_collections.gpuhost.sglang.plugins.module_utils.bench import client as bench_client
    from ansible_collections.gpuhost.sglang.plugins.module_utils.bench import metrics as bench_metrics
    bodies = [bench_client.build_payload("completions", "fake-model", "w%d alpha bravo" % i, tokens, ignore_eos=True)
              for i in range(n)]
    r0 = resource.getrusage(resource.RUSAGE_SELF)
    c0 = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.monotonic()
    prof = cProfile.Profile(time.process_time) if profile else None
    if prof:
        prof.enable()
    recs, stats = bench_client.run_load(base_url, "completions", bodies, conc, processes=processes)
    if prof:
        prof.disable()
    wall = time.monotonic() - t0
    r1 = resource.getrusage(resource.RUSAGE_SELF)
    if prof:
        print("user %.2f s, system %.2f s, minor page faults %d (profiled: inflated)" % (
            r1.ru_utime - r0.ru_utime, r1.ru_stime - r0.ru_stime, r1.ru_minflt - r0.ru_minflt))
        pstats.Stats(prof, stream=sys.stdout).strip_dirs().sort_stats("tottime").print_stats(25)
    c1 = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (r1.ru_utime + r1.ru_stime - r0.ru_utime - r0.ru_stime) + (c1.ru_utime + c1.ru_stime - c0.ru_utime - c0.ru_stime)
    res = bench_metrics.compute(recs, conc)
    client, bound, reason = bench_client.client_verdict(stats)
    print(json.dumps({"tokens": res["output_tokens"], "errors": res["errors"], "coherent": res["coherent"],
                      "cpu_s": cpu, "wall_s": wall, "window_tok_s": res["output_throughput"],
                      "ttft_mean_ms": res["ttft_ms"]["mean"], "client_bound": bound, "reason": reason}))


def make_tokenizer(path):
    """A tiny local byte-level BPE tokenizer for the anchor's random-ids dataset (no hub access)."""
    if os.path.isfile(os.path.join(path, "tokenizer.json")):
        return
    code = r'''
import os, sys
from tokenizers import Tokenizer, models, trainers, pre_tokenizers, decoders
from transformers import PreTrainedTokenizerFast
p = sys.argv[1]
tok = Tokenizer(models.BPE())
tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
tok.decoder = decoders.ByteLevel()
text = ["the quick brown fox jumps over the lazy dog %d alpha bravo charlie delta echo" % i for i in range(200)]
tok.train_from_iterator(text, trainers.BpeTrainer(vocab_size=300, special_tokens=["<eos>"],
                        initial_alphabet=pre_tokenizers.ByteLevel.alphabet()))
PreTrainedTokenizerFast(tokenizer_object=tok, eos_token="<eos>").save_pretrained(p)
'''
    os.makedirs(path, exist_ok=True)
    subprocess.check_call([ANCHOR_PY, "-c", code, path])


def anchor_cmd(base_url, conc, tokens, n, tok_dir, out, cpu_file=None):
    """bench_serving's command line; with ``cpu_file``, run through anchor_inproc.py, which writes the CPU of its load
    phase there."""
    head = [ANCHOR_PY, "-m", "sglang.bench_serving"] if cpu_file is None else [
        ANCHOR_PY, os.path.join(ROOT, "benchmarks", "anchor_inproc.py"), cpu_file]
    return head + ["--backend", "vllm", "--base-url", base_url,
            "--model", "fake-model", "--tokenizer", tok_dir, "--dataset-name", "random-ids",
            "--random-input-len", "16", "--random-output-len", str(tokens), "--random-range-ratio", "1",
            "--num-prompts", str(n), "--max-concurrency", str(conc), "--disable-tqdm", "--warmup-requests", "1",
            "--output-file", out, "--seed", "1"]


def run_pinned(cmd, core, env=None):
    """Run ``cmd`` pinned to ``core``; returns (rc, stdout, stderr, cpu seconds of the process tree)."""
    def pin():
        os.sched_setaffinity(0, {core})
    t0 = resource.getrusage(resource.RUSAGE_CHILDREN)
    p = subprocess.run(cmd, capture_output=True, text=True, preexec_fn=pin, env=env, timeout=900)
    t1 = resource.getrusage(resource.RUSAGE_CHILDREN)
    return p.returncode, p.stdout, p.stderr, (t1.ru_utime + t1.ru_stime) - (t0.ru_utime + t0.ru_stime)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--child", nargs=5, metavar=("URL", "C", "TOKENS", "N", "PROCS"))
    ap.add_argument("--quick", action="store_true", help="smaller workloads")
    ap.add_argument("--no-anchor", action="store_true")
    ap.add_argument("--profile", nargs=3, type=int, metavar=("C", "TOKENS", "N"),
                    help="profile ours alone at this workload (no anchor, no table)")
    ap.add_argument("--child-profile", action="store_true", help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.child:
        url, c, t, n, pr = a.child
        ours(url, int(c), int(t), int(n), int(pr), profile=a.child_profile)
        return
    from fakeserver import fake_server  # pylint: disable=import-error
    server_core, client_core = cores()
    if a.profile:
        with fake_server("ok") as (url, proc):
            os.sched_setaffinity(proc.pid, {server_core})
            rc, so, se, dummy = run_pinned([sys.executable, os.path.abspath(__file__), "--child", url] + [
                str(x) for x in a.profile] + ["1", "--child-profile"], client_core)
        print(so if rc == 0 else se[-3000:])
        return
    workloads = [(128, 1024, 512), (1024, 256, 2048)]
    if a.quick:
        workloads = [(128, 1024, 128), (1024, 256, 1024)]
    have_anchor = os.access(ANCHOR_PY, os.X_OK) and not a.no_anchor
    tmp = tempfile.mkdtemp(prefix="capacity-")
    tok_dir = os.path.join(ROOT, ".cache", "bench-tokenizer")
    if have_anchor:
        make_tokenizer(tok_dir)
    env = dict(os.environ, HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1", TOKENIZERS_PARALLELISM="false")
    rows = []
    print("client core %d, server core %d, %s" % (client_core, server_core, time.strftime("%Y-%m-%dT%H:%M:%SZ",
                                                                                          time.gmtime())))
    with fake_server("ok") as (url, proc):
        os.sched_setaffinity(proc.pid, {server_core})
        overhead = None
        if have_anchor:
            # its startup (imports: ~16 s CPU on a 2-core box) varies by +-0.5 s from run to run and more on the first,
            # cold-cache run, as much as the difference between the two clients' figures: the median of three
            overheads = []
            for dummy in range(OVERHEAD_RUNS):
                rc, so, se, cpu = run_pinned(anchor_cmd(url, 1, 1, 1, tok_dir, os.path.join(tmp, "null.jsonl")),
                                             client_core, env)
                if rc != 0:
                    print("anchor failed:", se[-2000:])
                    have_anchor = False
                    break
                overheads.append(cpu)
            if have_anchor:
                overhead = sorted(overheads)[len(overheads) // 2]
                print("anchor startup CPU s (1-request runs): %s, median %.2f subtracted" % (
                    ", ".join("%.2f" % x for x in overheads), overhead))
        for conc, tokens, n in workloads:
            rc, so, se, _ = run_pinned([sys.executable, os.path.abspath(__file__), "--child", url, str(conc),
                                        str(tokens), str(n), "1"], client_core)
            if rc != 0:
                raise SystemExit("our client failed: %s" % se[-3000:])
            o = json.loads(so.strip().splitlines()[-1])
            row = {"c": conc, "tokens_per_req": tokens, "requests": n, "ours_tokens": o["tokens"],
                   "ours_tok_per_cpu_s": o["tokens"] / o["cpu_s"], "ours_window_tok_s": o["window_tok_s"],
                   "ours_ttft_mean_ms": o["ttft_mean_ms"], "ours_client_bound": o["client_bound"],
                   "ours_errors": o["errors"]}
            if have_anchor:
                out = os.path.join(tmp, "anchor-%d.jsonl" % conc)
                cpu_file = os.path.join(tmp, "anchor-%d-cpu.json" % conc)
                rc, so, se, cpu = run_pinned(anchor_cmd(url, conc, tokens, n, tok_dir, out, cpu_file), client_core,
                                             env)
                if rc != 0:
                    raise SystemExit("anchor failed: %s" % se[-3000:])
                with open(out) as f:
                    ar = json.loads(f.read().strip().splitlines()[-1])
                with open(cpu_file) as f:
                    acpu = json.load(f)["benchmark_cpu_s"]
                atok = ar.get("total_output_tokens") or ar.get("total_output")
                est = cpu - overhead
                row.update({"anchor_tokens": atok, "anchor_tok_per_cpu_s": atok / acpu if acpu > 0 else None,
                            "anchor_window_tok_s": ar.get("output_throughput"),
                            "anchor_ttft_mean_ms": ar.get("mean_ttft_ms"), "anchor_cpu_s": acpu,
                            "anchor_cpu_s_whole_minus_startup": est,
                            "anchor_tok_per_cpu_s_whole_minus_startup": atok / est if est > 0 else None,
                            "anchor_completed": ar.get("completed")})
                row["ratio_tok_per_cpu_s"] = row["ours_tok_per_cpu_s"] / row["anchor_tok_per_cpu_s"]
                row["ratio_window"] = row["ours_window_tok_s"] / row["anchor_window_tok_s"]
            rows.append(row)
    print()
    print("| c | tok/req | ours tok/CPU-s | anchor tok/CPU-s | ratio | anchor (whole - startup) | ratio | "
          "ours window tok/s | anchor window tok/s | ratio | TTFT mean ms ours / anchor (truth < 1 ms) | "
          "ours client_bound |")
    print("|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|---|")
    for r in rows:
        est = r.get("anchor_tok_per_cpu_s_whole_minus_startup")
        print("| %d | %d | %.0f | %s | %s | %s | %s | %.0f | %s | %s | %.1f / %s | %s |" % (
            r["c"], r["tokens_per_req"], r["ours_tok_per_cpu_s"],
            "%.0f" % r["anchor_tok_per_cpu_s"] if r.get("anchor_tok_per_cpu_s") else "-",
            "%.2fx" % r["ratio_tok_per_cpu_s"] if r.get("ratio_tok_per_cpu_s") else "-",
            "%.0f" % est if est else "-", "%.2fx" % (r["ours_tok_per_cpu_s"] / est) if est else "-",
            r["ours_window_tok_s"], "%.0f" % r["anchor_window_tok_s"] if r.get("anchor_window_tok_s") else "-",
            "%.2fx" % r["ratio_window"] if r.get("ratio_window") else "-", r["ours_ttft_mean_ms"] or 0,
            "%.1f" % r["anchor_ttft_mean_ms"] if r.get("anchor_ttft_mean_ms") is not None else "-",
            r["ours_client_bound"]))
    print()
    print(json.dumps(rows))


if __name__ == "__main__":
    main()

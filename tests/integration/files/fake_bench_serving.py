# -*- coding: utf-8 -*-
# Copyright: gpuhost.sglang contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Stand-in for ``sglang.benchmark.serving`` in tests of benchmarks/gpu/sglang/gap.py: ``cli_main`` reads the argv
gap.py passes, sends the requests itself (one plain completion each, concurrently, like bench_serving's
sglang-oai backend; the prompts of a ``custom`` dataset file when given; every backend to /v1/completions, the only
path the replay serves) and appends one JSON line with the fields gap.py reads to ``--output-file`` (sglang 0.5.17
python/sglang/benchmark/serving.py writes duration, completed, total_output_tokens, output_throughput,
median/p99 ttft, median tpot, median/p99 itl, in ms). Not a benchmark: only the interface."""
import argparse
import concurrent.futures
import json
import sys
import time
import urllib.request


def cli_main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--backend", choices=["sglang", "sglang-oai"])
    ap.add_argument("--dataset-name", choices=["custom", "random-ids"])
    for opt in ("--base-url", "--model", "--tokenizer", "--output-file", "--dataset-path"):
        ap.add_argument(opt)
    for opt in ("--random-input-len", "--random-output-len", "--num-prompts", "--max-concurrency", "--seed",
                "--warmup-requests", "--sharegpt-output-len"):
        ap.add_argument(opt, type=int)
    ap.add_argument("--random-range-ratio", type=float)
    ap.add_argument("--disable-tqdm", action="store_true")
    a = ap.parse_args(sys.argv[1:])
    print("benchmark_args=%s" % a)

    prompts = ["Hello %d" % i for i in range(a.num_prompts)]
    out_len = a.random_output_len
    if a.dataset_name == "custom":  # sglang 0.5.17 benchmark/datasets/custom.py: conversations[0] is the prompt
        with open(a.dataset_path) as f:
            prompts = [json.loads(line)["conversations"][0]["content"] for line in f][:a.num_prompts]
        out_len = a.sharegpt_output_len
    assert len(prompts) == a.num_prompts and out_len, (len(prompts), out_len)

    def one(i):
        body = json.dumps({"model": a.model, "prompt": prompts[i], "max_tokens": out_len,
                           "ignore_eos": True, "stream": False}).encode()
        req = urllib.request.Request(a.base_url + "/v1/completions", body, {"Content-Type": "application/json"})
        t = time.monotonic()
        out = json.loads(urllib.request.urlopen(req, timeout=60).read())
        return time.monotonic() - t, out["usage"]["completion_tokens"]

    for dummy in range(a.warmup_requests or 0):  # bench_serving: warmup, then a second of sleep, then its clock starts
        one(0)
    time.sleep(1.0)
    t0 = time.monotonic()
    with concurrent.futures.ThreadPoolExecutor(max(1, min(a.max_concurrency, 32))) as ex:
        res = list(ex.map(one, range(a.num_prompts)))
    dur = time.monotonic() - t0
    toks = sum(r[1] for r in res)
    lat = sorted(r[0] * 1000 for r in res)
    with open(a.output_file, "a") as f:
        f.write(json.dumps({"duration": dur, "completed": len(res), "total_output_tokens": toks,
                            "output_throughput": toks / dur, "median_ttft_ms": lat[len(lat) // 2],
                            "p99_ttft_ms": lat[-1], "median_tpot_ms": None, "median_itl_ms": None,
                            "p99_itl_ms": None}) + "\n")

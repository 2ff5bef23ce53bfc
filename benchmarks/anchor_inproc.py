#!/usr/bin/env python3
# -*- coding: utf-8 -*-
# Copyright: gpuhost.sglang contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""sglang.bench_serving's command line run in this process, with the CPU time of its load phase written out:
benchmarks/client_capacity.py's measurement of the anchor.

bench_serving's ``run_benchmark`` loads the tokenizer, builds the dataset and then runs
``asyncio.run(benchmark(...))`` (sglang 0.5.23 ``python/sglang/benchmark/serving.py``; ``sglang.bench_serving`` is a
deprecated alias of that module). The module's ``benchmark`` is wrapped here: the process's CPU time (every thread:
``resource.getrusage(RUSAGE_SELF)``) from its first to its last step is the anchor's CPU for the streamed tokens,
with no import, tokenizer or dataset cost in it and nothing subtracted. That is what serving_bench's side measures too
(the CPU of its run_load call: load, SSE parsing, token accounting, coherence checks).

Usage: ANCHOR_PYTHON benchmarks/anchor_inproc.py CPU_FILE BENCH_SERVING_ARGS...
"""

from __future__ import absolute_import, division, print_function

import json
import resource
import sys

import sglang.benchmark.serving as serving  # pylint: disable=import-error


def cpu_s():
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


def main():
    out = sys.argv[1]
    original = serving.benchmark

    async def timed(*args, **kwargs):
        start = cpu_s()
        try:
            return await original(*args, **kwargs)
        finally:
            with open(out, "w") as f:
                json.dump({"benchmark_cpu_s": cpu_s() - start}, f)

    serving.benchmark = timed  # run_benchmark looks the name up in the module when it calls it
    sys.argv = ["sglang.bench_serving"] + sys.argv[2:]
    serving.cli_main()


if __name__ == "__main__":
    main()

#!/usr/bin/env python3
# Copyright: gpuhost.sglang contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The link probe's multi-process all-reduce path on CPUs (gloo, two ranks, one process each), with figures:
what the controller can show of that path where no two-GPU machine is at hand.

Usage (repo root, with the CPU torch of the engine venv, tests/fixtures/engine-venv.sh, that stage 35 uses):
  site=$(.cache/engine-venv/bin/python -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
  PYTHONPATH=$site .venv/bin/python benchmarks/gpu/gloo_controller.py
"""

import json
import os
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(ROOT, "collections"))

from ansible_collections.gpuhost.sglang.plugins.module_utils.gpu import link_probe as lp  # noqa: E402


def main():
    print(time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
          "gloo all-reduce, 2 ranks (one process each) on the controller (%d cores)" % len(os.sched_getaffinity(0)))
    t = time.time()
    rows = lp.measure_allreduce([0, 1], [1 << 16, 1 << 20, 16 << 20], iters=5, warmup=1, backend="gloo", timeout=300)
    for r in rows:
        print("  %-8s time %10.1f us  algbw %7.3f  busbw %7.3f GB/s  iters %d" % (
            lp.human_size(r["size_bytes"]), r["time_us"], r["algbw_gbps"], r["busbw_gbps"], r["iters"]))
    print("wall %.1f s" % (time.time() - t))
    print(json.dumps(rows))


if __name__ == "__main__":
    main()

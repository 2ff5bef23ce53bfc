#!/usr/bin/env python3
# Copyright: gpuhost.sglang contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Read the GPU health fields (plugins/module_utils/gpu/health.py) on a real GPU box, as gpu_facts does, and print
nvidia-smi's own view of the same fields beside them (nvidia-smi -q -d PERFORMANCE,ECC,PAGE_RETIREMENT,ROW_REMAPPER
and --query-gpu pcie.link.*, clocks_event_reasons.active) so they can be compared by eye.

Usage: python3 benchmarks/gpu/gpu_health.py --out DIR [--before-after SECONDS]
Writes DIR/gpu_health.json: {"health": <reading>, "state": <health.state()>, "smi": {...}}; with --before-after,
also a second reading after loading GPU 0 with torch matmuls for SECONDS, and health.degradation() between them.
"""

import argparse
import json
import os
import subprocess
import sys
import time

from gpu_utils import load, pynvml_or_none  # benchmarks/gpu/gpu_utils.py (this folder is on sys.path when the script runs)


health = load("health")


def smi(args):
    try:
        return subprocess.run(["nvidia-smi"] + args, capture_output=True, text=True, timeout=60, check=False).stdout
    except (OSError, subprocess.SubprocessError) as exc:
        return "nvidia-smi failed: %s" % exc


def load_gpu(seconds):
    """Keep GPU 0 busy for ``seconds`` (bf16 matmuls) so the second reading is taken after real load."""
    import torch
    a = torch.randn(8192, 8192, device="cuda", dtype=torch.bfloat16)
    t0 = time.time()
    n = 0
    while time.time() - t0 < seconds:
        for dummy in range(20):
            a = (a @ a).clamp_(-1, 1)
        torch.cuda.synchronize()
        n += 20
    return n


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    ap.add_argument("--before-after", type=float, default=0.0)
    args = ap.parse_args()
    os.makedirs(args.out, exist_ok=True)
    pynvml = pynvml_or_none()
    kernel_log = health.read_kernel_log(run=health.run_command)
    rec = {"pynvml": getattr(pynvml, "__file__", None), "kernel_log_readable": kernel_log[0] is not None,
           "kernel_log_why": kernel_log[1]}
    rec["health"] = health.read_safely(pynvml, kernel_log=kernel_log)
    rec["state"] = health.state(rec["health"])
    if args.before_after > 0:
        matmuls = load_gpu(args.before_after)
        after = health.read_safely(pynvml, kernel_log=health.read_kernel_log(run=health.run_command))
        rec["after_load"] = {"seconds": args.before_after, "matmuls": matmuls, "health": after,
                             "degradation": health.degradation(rec["health"], after)}
    rec["smi"] = {
        "query": smi(["--query-gpu=index,name,pcie.link.gen.current,pcie.link.gen.max,pcie.link.width.current,"
                      "pcie.link.width.max,clocks_event_reasons.active,persistence_mode,ecc.errors.uncorrected.volatile.total,"
                      "ecc.errors.uncorrected.aggregate.total,retired_pages.pending,remapped_rows.pending",
                      "--format=csv"]),
        "q": smi(["-q", "-d", "PERFORMANCE,ECC,PAGE_RETIREMENT,ROW_REMAPPER"]),
    }
    with open(os.path.join(args.out, "gpu_health.json"), "w") as fh:
        json.dump(rec, fh, indent=1, sort_keys=True)
    print(json.dumps({k: rec[k] for k in ("pynvml", "kernel_log_readable", "kernel_log_why", "state")}, indent=1))
    for g in rec["health"]["gpus"]:
        print("gpu%d: pcie gen %s/%s x%s/%s clock events %s %s violation %s ecc %s remap %s retired_pending %s pm %s xids %s"
              % (g["index"], g["pcie_gen_current"], g["pcie_gen_max"], g["pcie_width_current"], g["pcie_width_max"],
                 g["clock_event_mask"], g["clock_events"], g["violation_ns"], g["ecc"], g["remapped_rows"],
                 g["retired_pages_pending"], g["persistence_mode"], g["xids"]))
    print("errors:", rec["health"]["errors"])
    if "after_load" in rec:
        a = rec["after_load"]
        for g in a["health"]["gpus"]:
            print("after %.0f s load: gpu%d pcie gen %s clock events %s %s violation %s"
                  % (a["seconds"], g["index"], g["pcie_gen_current"], g["clock_event_mask"], g["clock_events"],
                     g["violation_ns"]))
        print("degradation:", a["degradation"])
    print(rec["smi"]["query"])
    return 0 if rec["health"].get("state") != "unknown" else 1


if __name__ == "__main__":
    sys.exit(main())

#!/usr/bin/env python3
# Copyright: gpuhost.sglang contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Run gpu_facts' and gpu_link_probe's logic as plain Python (no Ansible) and check them against
independent sources on a real GPU box:

  facts    -> nvidia-smi --query-gpu / topo -m / topo -p2p {r,w,n,a} / nvlink -s / -q, field by field
  probe    -> benchmarks/gpu/independent.py (CUDA-event timed copies through cupy's cudaMemcpyPeer, or torch,
              and an all-reduce launched by torch.multiprocessing.spawn, timed with CUDA events), within --tolerance

On one GPU there is no pair to copy between and an all-reduce has one rank: busbw = algbw * 2(n-1)/n is 0 by
definition and NCCL moves no data (measured on the nvidia-h200 machine: ~30-50 us a call at every size from 1 MiB
to 1 GiB, in both implementations). The one-rank code path (process group, CUDA-event timing, the sum check
inside each rank) must run; its time per call is reported beside the independent one, not gated.

Usage: python3 benchmarks/gpu/gpu_check.py --out DIR [--tolerance 0.05] [--quick]
Writes DIR/gpu_check.json and prints a report; exit 1 when a comparison fails.
"""

import argparse
import json
import os
import subprocess
import sys
import time

from gpu_utils import ROOT, load  # benchmarks/gpu/gpu_utils.py (this folder is on sys.path when the script runs)


nvml_facts = load("nvml_facts")
link_probe = load("link_probe")

SMI_FIELDS = [
    ("index", "index", int),
    ("name", "name", str),
    ("uuid", "uuid", str),
    ("compute_cap", "compute_capability", str),
    ("memory.total", "memory_total_mib", int),
    ("pci.bus_id", "pci_bus_id", nvml_facts.normalize_bus_id),
    ("pcie.link.gen.current", "pcie_gen_current", int),
    ("pcie.link.gen.max", "pcie_gen_max", int),
    ("pcie.link.width.current", "pcie_width_current", int),
    ("pcie.link.width.max", "pcie_width_max", int),
    ("persistence_mode", "persistence_mode", lambda v: v.strip() == "Enabled"),
    ("power.limit", "power_limit_w", float),
]


def sh(cmd):
    proc = subprocess.run(cmd, capture_output=True, text=True)
    return proc.returncode, proc.stdout, proc.stderr


def parse_matrix(text, ngpu):
    """Rows 'GPU0  X  NV18 ...' of nvidia-smi topo -m / topo -p2p -> N x N list."""
    rows = []
    for line in text.splitlines():
        parts = line.split()
        if parts and parts[0].startswith("GPU") and parts[0][3:].isdigit() and len(parts) > ngpu:
            rows.append(parts[1:1 + ngpu])
    return rows[:ngpu]


def compare_facts(facts, report):
    checks = []
    n = facts["gpu_count"]
    rc, out, err = sh(["nvidia-smi", "--query-gpu=" + ",".join(f for f, _, _ in SMI_FIELDS) + ",driver_version",
                       "--format=csv,noheader,nounits"])
    report["nvidia_smi_query"] = out
    for line in out.strip().splitlines():
        vals = [v.strip() for v in line.split(",")]
        idx = int(vals[0])
        gpu = facts["gpus"][idx]
        for (field, key, conv), raw in zip(SMI_FIELDS, vals):
            smi = conv(raw)
            ours = gpu.get(key)
            ok = (abs(smi - ours) < 0.01) if isinstance(smi, float) and ours is not None else smi == ours
            checks.append({"what": "gpu%d %s" % (idx, field), "nvidia_smi": smi, "gpu_facts": ours, "ok": ok})
        drv = vals[len(SMI_FIELDS)]
        checks.append({"what": "gpu%d driver_version" % idx, "nvidia_smi": drv, "gpu_facts": facts["driver_version"],
                       "ok": drv == facts["driver_version"]})
    rc, out, err = sh(["nvidia-smi"])
    report["nvidia_smi"] = out
    cuda = None
    for tok in out.split("CUDA Version:")[1:2]:
        cuda = tok.split()[0]
    checks.append({"what": "cuda_version (nvidia-smi header)", "nvidia_smi": cuda, "gpu_facts": facts["cuda_version"],
                   "ok": cuda == facts["cuda_version"]})
    rc, out, err = sh(["nvidia-smi", "topo", "-m"])
    report["topo_m"] = out
    matrix = parse_matrix(out, n)
    checks.append({"what": "topology matrix (topo -m)", "nvidia_smi": matrix, "gpu_facts": facts["topology"],
                   "ok": matrix == facts["topology"]})
    for flag, cap in (("r", "read"), ("w", "write"), ("n", "nvlink"), ("a", "atomics")):
        rc, out, err = sh(["nvidia-smi", "topo", "-p2p", flag])
        report["topo_p2p_" + flag] = out + err
        matrix = parse_matrix(out, n)
        checks.append({"what": "p2p %s matrix (topo -p2p %s)" % (cap, flag), "nvidia_smi": matrix,
                       "gpu_facts": facts["p2p"][cap], "ok": matrix == facts["p2p"][cap]})
    rc, out, err = sh(["nvidia-smi", "nvlink", "-s"])
    report["nvlink_s"] = out + err
    counts, current = {}, None
    if not out.strip() and rc == 0:
        # a GPU without NVLink: nvidia-smi nvlink -s prints nothing at all (seen on the one-GPU nvidia-h200
        # machine, 2026-12-01, benchmarks/gpu/results/2026-12-01-h200x1), i.e. no active link on any GPU
        counts = {idx: 0 for idx in range(n)}
    for line in out.splitlines():
        if line.startswith("GPU "):
            current = int(line.split()[1].rstrip(":"))
            counts[current] = 0
        elif current is not None and "Link" in line and "GB/s" in line:
            counts[current] += 1
    for idx, gpu in enumerate(facts["gpus"]):
        checks.append({"what": "gpu%d active nvlinks (nvlink -s)" % idx, "nvidia_smi": counts.get(idx),
                       "gpu_facts": gpu["nvlink_count"], "ok": counts.get(idx) == gpu["nvlink_count"]})
    rc, out, err = sh(["nvidia-smi", "-q"])
    report["smi_q"] = out
    modes = [line.split(":", 1)[1].strip() for line in out.splitlines() if line.strip().startswith("Virtualization Mode")]
    word = {"None": "none", "Pass-Through": "passthrough", "VGPU": "vgpu", "Host VGPU": "host_vgpu", "Host VSGA": "host_vsga"}
    for idx, gpu in enumerate(facts["gpus"]):
        smi = word.get(modes[idx], modes[idx]) if idx < len(modes) else None
        checks.append({"what": "gpu%d virtualization mode (-q)" % idx, "nvidia_smi": smi,
                       "gpu_facts": gpu["virtualization_mode"], "ok": smi == gpu["virtualization_mode"]})
    return checks


def within(a, b, tol):
    return a is not None and b is not None and b > 0 and abs(a - b) / b <= tol


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    ap.add_argument("--tolerance", type=float, default=0.05)
    ap.add_argument("--sizes", default="1M,16M,128M,1G")
    ap.add_argument("--p2p-mb", type=int, default=1024)
    ap.add_argument("--iters", type=int, default=20)
    ap.add_argument("--gate-min-bytes", type=int, default=128 << 20,
                    help="all-reduce sizes from here up must agree within tolerance (smaller ones are reported)")
    args = ap.parse_args()
    os.makedirs(args.out, exist_ok=True)
    mult = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}
    sizes = [int(s[:-1]) * mult[s[-1]] if s[-1] in mult else int(s) for s in args.sizes.split(",")]
    report = {"started": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), "argv": sys.argv}

    import pynvml
    facts = nvml_facts.collect(pynvml, host=nvml_facts.read_hypervisor("/"))
    report["facts"] = facts
    report["fact_checks"] = compare_facts(facts, report)
    devices = list(range(facts["gpu_count"]))
    expect = link_probe.expectations(facts, devices)
    report["expectations"] = {"pairs": {"%d->%d" % k: v for k, v in expect["pairs"].items()}, "busbw_gbps": expect["busbw_gbps"]}

    t0 = time.time()
    one_rank = len(devices) < 2
    bw_key = "time_us" if one_rank else "busbw_gbps"
    pairs = [] if one_rank else link_probe.measure_p2p(devices, size_bytes=args.p2p_mb << 20, iters=args.iters)
    allreduce = link_probe.measure_allreduce(devices, sizes, iters=args.iters)
    report["probe_seconds"] = round(time.time() - t0, 1)
    verdict = link_probe.evaluate(pairs, allreduce, expect)
    report["probe"] = {"pairs": pairs, "allreduce": allreduce, "verdict": verdict}

    indep_json = os.path.join(args.out, "independent.json")
    cmd = [sys.executable, os.path.join(ROOT, "benchmarks", "gpu", "independent.py"), "--out", indep_json,
           "--sizes", ",".join(str(s) for s in sizes), "--p2p-mb", str(args.p2p_mb), "--iters", str(args.iters)]
    proc = subprocess.run(cmd, capture_output=True, text=True)
    report["independent_stdout"] = proc.stdout + proc.stderr
    indep = json.load(open(indep_json)) if proc.returncode == 0 else {"pairs": [], "allreduce": []}
    report["independent"] = indep

    comps = []
    for meas in pairs:
        other = [x for x in indep["pairs"] if x["src"] == meas["src"] and x["dst"] == meas["dst"]]
        ob = other[0]["bandwidth_gbps"] if other else None
        comps.append({"what": "p2p %d->%d GB/s" % (meas["src"], meas["dst"]), "probe": meas["bandwidth_gbps"],
                      "independent": ob, "method": other[0]["method"] if other else None, "gated": True,
                      "ok": within(meas["bandwidth_gbps"], ob, args.tolerance)})
    for point in allreduce:
        other = [x for x in indep["allreduce"] if x["size_bytes"] == point["size_bytes"]]
        ob = other[0][bw_key] if other else None
        gated = point["size_bytes"] >= args.gate_min_bytes and not one_rank
        ok = within(point[bw_key], ob, args.tolerance)
        what = ("allreduce time/call %s us (1 rank)" if one_rank else "allreduce busbw %s GB/s") % (
            link_probe.human_size(point["size_bytes"]))
        comps.append({"what": what, "probe": point[bw_key], "independent": ob, "gated": gated, "ok": ok})
    report["comparisons"] = comps

    fact_fail = [c for c in report["fact_checks"] if not c["ok"]]
    comp_fail = [c for c in comps if c["gated"] and not c["ok"]]
    report["result"] = {"fact_mismatches": len(fact_fail), "fact_checks": len(report["fact_checks"]),
                        "measurement_mismatches": len(comp_fail), "comparisons": len(comps)}
    with open(os.path.join(args.out, "gpu_check.json"), "w") as fh:
        json.dump(report, fh, indent=1, default=str)

    print("== facts vs nvidia-smi (%d checks, %d mismatches)" % (len(report["fact_checks"]), len(fact_fail)))
    for c in report["fact_checks"]:
        print("  %-4s %-40s smi=%s facts=%s" % ("ok" if c["ok"] else "DIFF", c["what"], c["nvidia_smi"], c["gpu_facts"]))
    print("== probe pair table%s\n%s" % (" (one GPU: no pairs)" if one_rank else "", verdict["table"]))
    print("== all-reduce (probe, %d rank(s))" % len(devices))
    for a in allreduce:
        print("  %-8s time %10.1f us  algbw %7.1f  busbw %7.1f GB/s" % (link_probe.human_size(a["size_bytes"]), a["time_us"],
                                                                     a["algbw_gbps"], a["busbw_gbps"]))
    print("== probe vs independent (tolerance %.0f%%)" % (args.tolerance * 100))
    for c in comps:
        diff = "" if c["independent"] is None else "%+.1f%%" % (100.0 * (c["probe"] - c["independent"]) / c["independent"])
        print("  %-4s %-30s probe %8.1f  independent %8s  %s%s" % ("ok" if c["ok"] else "DIFF", c["what"], c["probe"],
                                                                 c["independent"], diff, "" if c["gated"] else "  (not gated)"))
    print("verdict:", verdict["msg"])
    print("RESULT", json.dumps(report["result"]))
    return 1 if (fact_fail or comp_fail) else 0


if __name__ == "__main__":
    sys.exit(main())

#!/usr/bin/env python3
# Copyright: gpuhost.sglang contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""GPU health beside a real bench result, without Ansible: the health fields read from the GPU through the
collection's own plugins/module_utils/gpu/health.py (pynvml), then serving_bench's own logic (BenchRun, with the
module's defaults from module_utils/bench/inputs.argument_spec) against a live server with ``gpu_health`` passed,
so the run's fingerprint carries the reading; then a reading after the run and serving_bench's ``mode=finalize``,
which records the run's pending baselines when the GPUs did not degrade and discards them when they did.

    python3 benchmarks/gpu/sglang/health_bench.py --base-url http://127.0.0.1:30000 --out DIR
        [--model tiny] [--levels 1,16] [--num-prompts 64] [--input-len 128] [--output-len 64]

Writes DIR/health_bench.json (the two readings, the bench and finalize results, the run file's fingerprint and
health, the baseline file's levels) and DIR/bench/ (serving_bench's run file, history, Markdown and JUnit
reports), DIR/baselines/ (the baseline file, when recorded). Exit 0 when the bench passed, the reading before the
run was read from NVML, the fingerprint carries it and finalize recorded the baselines; 1 otherwise.
"""
import argparse
import copy
import json
import os
import socket
import sys
import time
import urllib.request

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
sys.path.insert(0, os.path.join(ROOT, "collections"))
sys.path.insert(0, os.path.join(ROOT, "benchmarks", "gpu"))
from gpu_utils import pynvml_or_none  # noqa: E402  pylint: disable=wrong-import-position
from ansible_collections.gpuhost.sglang.plugins.module_utils.bench import client as bench_client  # noqa: E402
from ansible_collections.gpuhost.sglang.plugins.module_utils.bench import gpu_health as bench_health  # noqa: E402
from ansible_collections.gpuhost.sglang.plugins.module_utils.bench import server_metrics  # noqa: E402
from ansible_collections.gpuhost.sglang.plugins.module_utils.bench import store as bench_store  # noqa: E402
from ansible_collections.gpuhost.sglang.plugins.module_utils.bench.inputs import argument_spec  # noqa: E402
from ansible_collections.gpuhost.sglang.plugins.module_utils.bench.runner import BenchRun  # noqa: E402
from ansible_collections.gpuhost.sglang.plugins.module_utils.gpu import health  # noqa: E402


class Client(object):
    """serving_bench's client (module_utils/bench/client.py), with the server's /metrics read through urllib: the
    module's own reader (server_metrics.fetch) uses Ansible's open_url, and the GPU machine has no Ansible."""

    def __getattr__(self, name):
        return getattr(bench_client, name)

    @staticmethod
    def fetch_metrics(base_url, timeout=5.0, path="/metrics"):
        url = base_url.rstrip("/") + path
        try:
            with urllib.request.urlopen(url, timeout=timeout) as resp:
                return resp.read().decode("utf-8", "replace")
        except Exception as exc:  # refused, HTTP error, timeout: no server metrics, as the module's reader says
            raise server_metrics.MetricsError("GET %s failed: %s" % (url, exc))


def read_health(nvml):
    """One reading as gpu_facts takes it (kernel log for XIDs, dmesg when /dev/kmsg cannot be opened)."""
    return health.read_safely(nvml, kernel_log=health.read_kernel_log(run=health.run_command))


def bench_params(**given):
    """serving_bench's parameters as AnsibleModule would pass them: every option's default, then ``given``."""
    params = dict((name, copy.deepcopy(spec.get("default"))) for name, spec in argument_spec().items())
    unknown = sorted(set(given) - set(params))
    if unknown:
        raise ValueError("not serving_bench options: %s" % ", ".join(unknown))
    params.update(given)
    return params


def execute(params):
    t0 = time.time()
    res = BenchRun(params, client=Client()).execute()
    return {"failed": res.failed, "msg": res.msg, "warnings": res.warnings, "seconds": round(time.time() - t0, 2),
            "out": res.out}


def gpu_line(g):
    return ("gpu%d: pcie gen %s/%s x%s/%s, clock events %s %s, violation_ns %s, ecc %s, remapped rows %s, "
            "retired pages pending %s, persistence %s, xids %s, problems %s" % (
                g["index"], g["pcie_gen_current"], g["pcie_gen_max"], g["pcie_width_current"], g["pcie_width_max"],
                g["clock_event_mask"], g["clock_events"], g["violation_ns"], g["ecc"], g["remapped_rows"],
                g["retired_pages_pending"], g["persistence_mode"], g["xids"], g["problems"]))


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n", 1)[0])
    ap.add_argument("--base-url", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--model", default="tiny")
    ap.add_argument("--levels", default="1,16")
    ap.add_argument("--num-prompts", type=int, default=64)
    ap.add_argument("--input-len", type=int, default=128)
    ap.add_argument("--output-len", type=int, default=64)
    ap.add_argument("--min-duration-s", type=float, default=5.0)
    a = ap.parse_args()
    os.makedirs(a.out, exist_ok=True)
    pynvml = pynvml_or_none()
    rec = {"pynvml": getattr(pynvml, "__file__", None), "started": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}
    before = read_health(pynvml)
    rec["health_before"] = before
    print("health before the run: state %s %s" % (before["state"], before.get("reason") or ""))
    for g in before["gpus"]:
        print("  " + gpu_line(g))
    print("  errors: %s" % before["errors"])

    run_id = "health-bench-%d" % int(time.time())
    report_dir, baseline_dir = os.path.join(a.out, "bench"), os.path.join(a.out, "baselines")
    common = {"base_url": a.base_url, "report_dir": report_dir, "baseline_dir": baseline_dir, "run_id": run_id}
    fingerprint = {"host": socket.gethostname(), "model": a.model, "engine": "sglang", "gpu_count": before["gpu_count"]}
    # no coherence probes: the tiny model's answers are not what this run is about; the load's own checks stay on
    params = bench_params(model=a.model, concurrency=a.levels, num_prompts=a.num_prompts, input_len=a.input_len,
                          output_len=a.output_len, run_probes=False, nan_probe=False, plots=False,
                          min_duration_s=a.min_duration_s, fingerprint=fingerprint, gpu_health=before, **common)
    rec["bench"] = execute(params)
    print("bench (%.1f s): %s" % (rec["bench"]["seconds"], rec["bench"]["msg"]))
    for line in rec["bench"]["out"].get("table") or []:
        print("  " + line)

    after = read_health(pynvml)
    rec["health_after"] = after
    print("health after the run: state %s; %s" % (after["state"], "; ".join(gpu_line(g) for g in after["gpus"])))
    rec["finalize"] = execute(bench_params(mode="finalize", gpu_health_after=after, **common))
    print("finalize: %s" % rec["finalize"]["msg"])

    doc = bench_store.read_json(bench_store.run_path(report_dir, run_id)) or {}
    rec["run_file"] = {"fingerprint": doc.get("fingerprint"), "fingerprint_gpu_health": doc.get("fingerprint_gpu_health"),
                       "gpu_degraded": doc.get("gpu_degraded"),
                       "levels": dict((k, {"gpu_health": v.get("gpu_health"), "regression": v.get("regression"),
                                           "output_throughput": v.get("output_throughput")})
                                      for k, v in (doc.get("levels") or {}).items())}
    key = doc.get("key")
    base = bench_store.load_baseline(baseline_dir, key) if key else None
    rec["baseline"] = dict((k, {"run_id": v.get("run_id"), "gpu_health": v.get("gpu_health")})
                           for k, v in ((base or {}).get("levels") or {}).items())
    print("run file fingerprint_gpu_health: %s" % json.dumps(rec["run_file"]["fingerprint_gpu_health"]))
    print("baseline levels with their gpu_health: %s" % json.dumps(rec["baseline"]))
    checks = {"health read from NVML": before["state"] in ("ok", "degraded"),
              "bench passed": not rec["bench"]["failed"],
              "fingerprint carries the health": doc.get("fingerprint_gpu_health") == bench_health.state(before),
              "finalize recorded the baselines": not rec["finalize"]["failed"] and bool(rec["baseline"])}
    rec["checks"] = checks
    with open(os.path.join(a.out, "health_bench.json"), "w") as fh:
        json.dump(rec, fh, indent=1, sort_keys=True, default=str)
    for name, ok in checks.items():
        print("%s: %s" % ("ok  " if ok else "FAIL", name))
    return 0 if all(checks.values()) else 1


if __name__ == "__main__":
    sys.exit(main())

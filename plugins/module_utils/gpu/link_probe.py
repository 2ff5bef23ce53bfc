# -*- coding: utf-8 -*-
# Copyright: gpuhost.sglang contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""GPU interconnect probe: expectations from GPU facts, measurement with torch, and the pass/fail decision.

* ``expectations(facts)`` turns ``gpu_facts`` output into an expected P2P copy bandwidth per ordered pair
  (NVLink link count x per-link rate, or PCIe generation x width) and an expected all-reduce bus bandwidth.
* ``measure_p2p`` / ``measure_allreduce`` run in forked child processes (one per GPU for the all-reduce,
  torch.distributed, NCCL) so the caller never initialises CUDA itself and a hung collective is killed
  after ``timeout`` seconds instead of hanging the play.
* ``evaluate`` applies absolute and relative thresholds and renders the slow pairs as a table.

Stdlib only at import time (torch is imported inside the measuring children); no imports from the
collection, so the file can be loaded by path (benchmarks/gpu/gpu_check.py).
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import multiprocessing
import os
import socket
import time

# Usable data rate per lane and direction, GB/s (after line coding): gen1/2 8b/10b, gen3+ 128b/130b,
# gen6 PAM4/FLIT (approximate).
PCIE_LANE_GBPS = {1: 0.25, 2: 0.5, 3: 0.985, 4: 1.969, 5: 3.938, 6: 7.563}
# NVLink data rate per link and direction, GB/s, by GPU architecture (NVLink2/3/4 = 25, NVLink5 = 50).
NVLINK_LINK_GBPS = {"Pascal": 20.0, "Volta": 25.0, "Ampere": 25.0, "Hopper": 25.0, "Blackwell": 50.0}
# Fraction of the raw link rate a large cudaMemcpyPeer reaches on a healthy path.
DEFAULT_EFFICIENCY = {"nvlink": 0.85, "pcie": 0.80}
# Without P2P the copy is staged through host memory (device->host->device).
HOST_STAGED_FACTOR = 0.5
# Ring all-reduce bus bandwidth relative to the slowest neighbour link's expected copy bandwidth.
ALLREDUCE_EFFICIENCY = 0.80

GB = 1e9


def pair_expectation(facts, i, j, efficiency=None):
    """Expected copy bandwidth GPU i -> GPU j from the facts, with the reasoning spelled out."""
    eff = dict(DEFAULT_EFFICIENCY)
    eff.update(efficiency or {})
    gpus = facts["gpus"]
    links = 0
    if facts.get("nvlink_pairs"):
        links = int(facts["nvlink_pairs"][i][j])
    if links:
        arch = gpus[i].get("arch") or "unknown"
        per_link = NVLINK_LINK_GBPS.get(arch)
        if per_link is None:
            return {"path": "nvlink", "links": links, "raw_gbps": None, "expected_gbps": None,
                    "basis": "NV%d, unknown per-link rate for arch %s" % (links, arch)}
        raw = links * per_link
        return {"path": "nvlink", "links": links, "raw_gbps": round(raw, 2), "expected_gbps": round(raw * eff["nvlink"], 2),
                "basis": "NV%d x %.0f GB/s (%s) x %.2f" % (links, per_link, arch, eff["nvlink"])}
    gens = [gpus[k].get("pcie_gen_max") for k in (i, j)]
    widths = [gpus[k].get("pcie_width_max") for k in (i, j)]
    if None in gens or None in widths or min(gens) not in PCIE_LANE_GBPS:
        return {"path": "pcie", "raw_gbps": None, "expected_gbps": None, "basis": "PCIe generation/width unknown"}
    gen, width = min(gens), min(widths)
    raw = PCIE_LANE_GBPS[gen] * width
    expected = raw * eff["pcie"]
    p2p = facts.get("p2p", {})
    p2p_ok = all(p2p.get(cap, [[None]])[i][j] == "OK" for cap in ("read", "write")) if p2p else True
    topo = facts["topology"][i][j] if facts.get("topology") else "?"
    basis = "PCIe gen%d x%d = %.1f GB/s x %.2f, %s" % (gen, width, raw, eff["pcie"], topo)
    path = "pcie"
    if not p2p_ok:
        expected *= HOST_STAGED_FACTOR
        basis += ", P2P not supported: host-staged x %.2f" % HOST_STAGED_FACTOR
        path = "pcie-staged"
    return {"path": path, "gen": gen, "width": width, "raw_gbps": round(raw, 2), "expected_gbps": round(expected, 2), "basis": basis}


def expectations(facts, devices=None, efficiency=None, allreduce_efficiency=ALLREDUCE_EFFICIENCY):
    """Expected bandwidth for every ordered pair of ``devices`` and the expected all-reduce busbw (ring)."""
    devices = list(range(facts["gpu_count"])) if devices is None else list(devices)
    pairs = {}
    for i in devices:
        for j in devices:
            if i != j:
                pairs[(i, j)] = pair_expectation(facts, i, j, efficiency)
    busbw = None
    if len(devices) > 1:
        ring = [pairs[(devices[k], devices[(k + 1) % len(devices)])]["expected_gbps"] for k in range(len(devices))]
        if None not in ring:
            busbw = round(min(ring) * allreduce_efficiency, 2)
    return {"pairs": pairs, "busbw_gbps": busbw, "allreduce_efficiency": allreduce_efficiency}


def bus_bandwidth(size_bytes, seconds, world):
    """nccl-tests all_reduce: algbw = S / t, busbw = algbw * 2 (n - 1) / n. Returns (algbw, busbw) in GB/s."""
    algbw = size_bytes / seconds / GB
    return algbw, algbw * 2.0 * (world - 1) / world


def iters_for_size(size_bytes, iters, reference=64 << 20, cap=500):
    """More iterations for small messages so the timed loop is long against one-off stalls:
    ``iters`` at >= 64 MiB, scaled up by 64 MiB / size below it, at most ``cap`` (never fewer than ``iters``)."""
    if size_bytes >= reference:
        return iters
    return max(iters, min(cap, iters * (reference // max(size_bytes, 1))))


def _threshold_for(expected, absolute, fraction):
    """The bar a figure must clear: the larger of the absolute bar and fraction x expected (each if set)."""
    bars = []
    if absolute is not None:
        bars.append(("absolute", float(absolute)))
    if fraction is not None and expected is not None:
        bars.append(("%.0f%% of expected %.1f" % (fraction * 100, expected), fraction * expected))
    if not bars:
        return None, None
    return max(bars, key=lambda b: b[1])[::-1]


def evaluate(pairs, allreduce, expect, min_p2p_gbps=None, min_p2p_fraction=0.5, min_busbw_gbps=None,
             min_busbw_fraction=0.5, max_latency_us=None, gate_size=None):
    """Decide pass/fail.

    pairs: [{"src", "dst", "bandwidth_gbps", "latency_us"}]; allreduce: [{"size_bytes", "busbw_gbps", ...}];
    expect: output of ``expectations``. The all-reduce gate uses the largest size (or ``gate_size``).
    Returns {"failed", "slow_pairs", "allreduce_gate", "table", "msg"}.
    """
    slow = []
    rows = []
    for meas in pairs:
        key = (meas["src"], meas["dst"])
        exp = expect["pairs"].get(key, {})
        floor, why = _threshold_for(exp.get("expected_gbps"), min_p2p_gbps, min_p2p_fraction)
        reasons = []
        if floor is not None and meas["bandwidth_gbps"] < floor:
            reasons.append("bandwidth %.1f < %.1f GB/s (%s)" % (meas["bandwidth_gbps"], float(floor), why))
        if max_latency_us is not None and meas.get("latency_us") is not None and meas["latency_us"] > max_latency_us:
            reasons.append("latency %.1f > %.1f us" % (meas["latency_us"], max_latency_us))
        row = {"src": meas["src"], "dst": meas["dst"], "path": exp.get("path"), "bandwidth_gbps": meas["bandwidth_gbps"],
               "expected_gbps": exp.get("expected_gbps"), "threshold_gbps": None if floor is None else round(floor, 2),
               "latency_us": meas.get("latency_us"), "ratio": None, "reasons": reasons}
        if exp.get("expected_gbps"):
            row["ratio"] = round(meas["bandwidth_gbps"] / exp["expected_gbps"], 3)
        rows.append(row)
        if reasons:
            slow.append(row)
    gate = None
    if allreduce:
        target = [a for a in allreduce if a["size_bytes"] == gate_size] if gate_size else []
        point = target[0] if target else max(allreduce, key=lambda a: a["size_bytes"])
        floor, why = _threshold_for(expect.get("busbw_gbps"), min_busbw_gbps, min_busbw_fraction)
        gate = {"size_bytes": point["size_bytes"], "busbw_gbps": point["busbw_gbps"], "expected_gbps": expect.get("busbw_gbps"),
                "threshold_gbps": None if floor is None else round(floor, 2),
                "failed": bool(floor is not None and point["busbw_gbps"] < floor), "reason": None}
        if gate["failed"]:
            values = (point["busbw_gbps"], float(floor), human_size(point["size_bytes"]), why)
            gate["reason"] = "all-reduce busbw %.1f < %.1f GB/s at %s (%s)" % values
    failed = bool(slow) or bool(gate and gate["failed"])
    msg_parts = []
    if slow:
        msg_parts.append("%d slow GPU pair(s):\n%s" % (len(slow), format_table(slow)))
    if gate and gate["failed"]:
        msg_parts.append(gate["reason"])
    return {"failed": failed, "slow_pairs": slow, "pairs": rows, "allreduce_gate": gate, "table": format_table(rows),
            "msg": "\n".join(msg_parts) if msg_parts else "all %d pair(s) and the all-reduce meet their thresholds" % len(rows)}


def human_size(size):
    for unit, div in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if size >= div and size % div == 0:
            return "%d%s" % (size // div, unit)
    return "%dB" % size


def format_table(rows):
    """Fixed-width text table of pair rows (used for the failure message and the docs)."""
    head = ("pair", "path", "GB/s", "expected", "threshold", "ratio", "lat us", "why")
    lines = []
    for r in rows:
        lines.append(("%d->%d" % (r["src"], r["dst"]), r.get("path") or "?", "%.1f" % r["bandwidth_gbps"],
                      "-" if r.get("expected_gbps") is None else "%.1f" % r["expected_gbps"],
                      "-" if r.get("threshold_gbps") is None else "%.1f" % r["threshold_gbps"],
                      "-" if r.get("ratio") is None else "%.2f" % r["ratio"],
                      "-" if r.get("latency_us") is None else "%.1f" % r["latency_us"],
                      "; ".join(r.get("reasons") or []) or "ok"))
    widths = [max(len(str(x)) for x in col) for col in zip(head, *lines)] if lines else [len(h) for h in head]
    fmt = "  ".join("%%-%ds" % w for w in widths)
    out = [fmt % head, fmt % tuple("-" * w for w in widths)]
    out.extend(fmt % line for line in lines)
    return "\n".join(out).rstrip()


# ---------------------------------------------------------------- measurement (children only import torch)

def _p2p_child(queue, devices, size_bytes, iters, warmup, latency_iters):
    try:
        import torch
        results = []
        for src in devices:
            for dst in devices:
                if src == dst:
                    continue
                a = torch.empty(size_bytes, dtype=torch.uint8, device="cuda:%d" % src).fill_(1)
                b = torch.empty(size_bytes, dtype=torch.uint8, device="cuda:%d" % dst)
                for dummy in range(warmup):
                    b.copy_(a, non_blocking=True)
                torch.cuda.synchronize(src)
                torch.cuda.synchronize(dst)
                start = time.perf_counter()
                for dummy in range(iters):
                    b.copy_(a, non_blocking=True)
                torch.cuda.synchronize(src)
                torch.cuda.synchronize(dst)
                elapsed = time.perf_counter() - start
                if not bool((b[:16] == 1).all()) or not bool((b[-16:] == 1).all()):
                    raise RuntimeError("copy %d->%d produced wrong data" % (src, dst))
                small_a = torch.ones(1, dtype=torch.int32, device="cuda:%d" % src)
                small_b = torch.zeros(1, dtype=torch.int32, device="cuda:%d" % dst)
                lat = []
                for dummy in range(latency_iters):
                    t0 = time.perf_counter()
                    small_b.copy_(small_a, non_blocking=True)
                    torch.cuda.synchronize(dst)
                    lat.append(time.perf_counter() - t0)
                lat.sort()
                results.append({"src": src, "dst": dst, "size_bytes": size_bytes, "iters": iters,
                                "bandwidth_gbps": round(size_bytes * iters / elapsed / GB, 2),
                                "latency_us": round(lat[len(lat) // 2] * 1e6, 2),
                                "peer_access": bool(torch.cuda.can_device_access_peer(src, dst))})
                del a, b
                torch.cuda.empty_cache()
        queue.put(("ok", results))
    except Exception as exc:  # reported to the parent, which fails with it
        queue.put(("error", "%s: %s" % (type(exc).__name__, exc)))


def _allreduce_child(queue, rank, world, port, devices, sizes, iters, warmup, backend):
    try:
        import torch
        import torch.distributed as dist
        if backend == "nccl":
            torch.cuda.set_device(devices[rank])
            device = torch.device("cuda:%d" % devices[rank])
        else:
            device = torch.device("cpu")
        dist.init_process_group(backend, init_method="tcp://127.0.0.1:%d" % port, rank=rank, world_size=world)

        def sync():
            if backend == "nccl":
                torch.cuda.synchronize(device)

        results = []
        for size in sizes:
            numel = max(1, size // 4)
            n_iters = iters_for_size(numel * 4, iters)
            buf = torch.ones(numel, dtype=torch.float32, device=device)
            for dummy in range(warmup):
                dist.all_reduce(buf)
            sync()
            dist.barrier()
            buf.fill_(1.0)
            sync()
            if backend == "nccl":
                # GPU-side time of the loop (CUDA events on the stream NCCL syncs with), as nccl-tests does;
                # wall-clock time would add the host's launch/synchronize latency to small messages
                ev_start = torch.cuda.Event(enable_timing=True)
                ev_stop = torch.cuda.Event(enable_timing=True)
                ev_start.record()
                for dummy in range(n_iters):
                    dist.all_reduce(buf)
                ev_stop.record()
                ev_stop.synchronize()
                elapsed = ev_start.elapsed_time(ev_stop) / 1e3
            else:
                start = time.perf_counter()
                for dummy in range(n_iters):
                    dist.all_reduce(buf)
                elapsed = time.perf_counter() - start
            # after `iters` sums of `world` ranks starting from 1.0 every element is world ** iters;
            # check a small exact case only (floats overflow for big iters)
            t = torch.tensor([elapsed], dtype=torch.float64, device=device)
            dist.all_reduce(t, op=dist.ReduceOp.MAX)
            check = torch.ones(8, dtype=torch.float32, device=device) * (rank + 1)
            dist.all_reduce(check)
            expected_sum = world * (world + 1) / 2.0
            if not bool((check == expected_sum).all()):
                raise RuntimeError("all-reduce returned a wrong sum")
            seconds = float(t.item()) / n_iters
            algbw, busbw = bus_bandwidth(numel * 4, seconds, world)
            results.append({"size_bytes": numel * 4, "iters": n_iters, "time_us": round(seconds * 1e6, 2),
                            "algbw_gbps": round(algbw, 2), "busbw_gbps": round(busbw, 2)})
            del buf
        dist.destroy_process_group()
        if rank == 0:
            queue.put(("ok", results))
    except Exception as exc:
        queue.put(("error", "rank %d: %s: %s" % (rank, type(exc).__name__, exc)))


def _free_port():
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    sock.close()
    return port


def _run_children(targets, timeout, what):
    """Start forked children, wait for the first 'ok' (or any 'error'), kill everything on timeout."""
    ctx = multiprocessing.get_context("fork")
    queue = ctx.Queue()
    procs = [ctx.Process(target=fn, args=(queue,) + args, daemon=True) for fn, args in targets]
    for proc in procs:
        proc.start()
    deadline = time.monotonic() + timeout
    result = None
    try:
        while result is None:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise TimeoutError("%s did not finish within %d s (a hung P2P/NCCL path looks like this)" % (what, timeout))
            try:
                result = queue.get(timeout=min(remaining, 1.0))
            except Exception:  # queue.Empty
                if all(not p.is_alive() for p in procs) and queue.empty():
                    codes = [p.exitcode for p in procs]
                    raise RuntimeError("%s: worker processes exited (codes %s) without a result" % (what, codes))
        if result[0] == "error":
            raise RuntimeError("%s failed: %s" % (what, result[1]))
        for proc in procs:
            proc.join(max(1.0, deadline - time.monotonic()))
        return result[1]
    finally:
        for proc in procs:
            if proc.is_alive():
                proc.kill()
                proc.join(5)


def measure_p2p(devices, size_bytes=256 << 20, iters=20, warmup=3, latency_iters=200, timeout=600):
    """Copy bandwidth and latency for every ordered pair, measured in one forked child."""
    return _run_children([(_p2p_child, (list(devices), int(size_bytes), int(iters), int(warmup), int(latency_iters)))],
                         timeout, "P2P copy probe")


def measure_allreduce(devices, sizes, iters=20, warmup=5, backend="nccl", timeout=600, world=None):
    """All-reduce timing over ``sizes`` with one process per device (backend 'gloo' runs on CPUs)."""
    devices = list(devices)
    world = world or len(devices)
    port = _free_port()
    os.environ.setdefault("NCCL_NVLS_ENABLE", "0")  # multicast off (inherited by the forked ranks)
    targets = [(_allreduce_child, (rank, world, port, devices, [int(s) for s in sizes], int(iters), int(warmup), backend))
               for rank in range(world)]
    return _run_children(targets, timeout, "all-reduce probe (%s, %d ranks)" % (backend, world))

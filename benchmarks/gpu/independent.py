#!/usr/bin/env python3
# Copyright: gpuhost.sglang contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Independent interconnect measurement, sharing no code with plugins/module_utils/gpu/link_probe.py.

* P2P: cupy's runtime cudaMemcpyPeerAsync on a non-default stream, timed with CUDA events on that stream
  (falls back to torch copies timed with CUDA events when cupy is missing).
* All-reduce: torch.multiprocessing.spawn (not fork), env:// rendezvous, float32, timed with CUDA events
  on the NCCL stream's side (torch.cuda.Event around the loop), max over ranks; busbw = algbw * 2(n-1)/n.

Usage: independent.py --out FILE [--sizes 1048576,...] [--p2p-mb 1024] [--iters 20]
"""

import argparse
import json
import os
import sys


def p2p_cupy(n, size, iters):
    import cupy
    from cupy.cuda import runtime
    out = []
    for src in range(n):
        for dst in range(n):
            if src == dst:
                continue
            with cupy.cuda.Device(src):
                a = cupy.ones(size, dtype=cupy.uint8)
            with cupy.cuda.Device(dst):
                b = cupy.zeros(size, dtype=cupy.uint8)
            with cupy.cuda.Device(src):
                if runtime.deviceCanAccessPeer(src, dst):
                    try:
                        runtime.deviceEnablePeerAccess(dst)
                    except runtime.CUDARuntimeError:
                        pass  # already enabled
                stream = cupy.cuda.Stream(non_blocking=True)
                start, stop = cupy.cuda.Event(), cupy.cuda.Event()
                for _ in range(3):
                    runtime.memcpyPeerAsync(b.data.ptr, dst, a.data.ptr, src, size, stream.ptr)
                stream.synchronize()
                start.record(stream)
                for _ in range(iters):
                    runtime.memcpyPeerAsync(b.data.ptr, dst, a.data.ptr, src, size, stream.ptr)
                stop.record(stream)
                stop.synchronize()
                ms = cupy.cuda.get_elapsed_time(start, stop)
            with cupy.cuda.Device(dst):
                assert int(b[-1]) == 1 and int(b[0]) == 1, "copy produced wrong data"
            out.append({"src": src, "dst": dst, "bandwidth_gbps": round(size * iters / (ms / 1e3) / 1e9, 2),
                        "method": "cupy memcpyPeerAsync + cuda events"})
            del a, b
    return out


def p2p_torch(n, size, iters):
    import torch
    out = []
    for src in range(n):
        for dst in range(n):
            if src == dst:
                continue
            a = torch.ones(size, dtype=torch.uint8, device=src)
            b = torch.zeros(size, dtype=torch.uint8, device=dst)
            with torch.cuda.device(src):
                for _ in range(3):
                    b.copy_(a)
                torch.cuda.synchronize()
                start, stop = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                start.record()
                for _ in range(iters):
                    b.copy_(a)
                stop.record()
                stop.synchronize()
                ms = start.elapsed_time(stop)
            out.append({"src": src, "dst": dst, "bandwidth_gbps": round(size * iters / (ms / 1e3) / 1e9, 2),
                        "method": "torch copy_ + cuda events"})
    return out


def allreduce_rank(rank, world, sizes, iters, path):
    import torch
    import torch.distributed as dist
    torch.cuda.set_device(rank)
    dist.init_process_group("nccl", rank=rank, world_size=world)
    rows = []
    for size in sizes:
        x = torch.full((size // 4,), float(rank), dtype=torch.float32, device="cuda")
        for _ in range(5):
            dist.all_reduce(x)
        torch.cuda.synchronize()
        dist.barrier()
        torch.cuda.synchronize()
        start, stop = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        # small messages: run >= ~64 MiB of traffic per timing (at most 500 iterations) against one-off stalls
        n = iters if size >= (64 << 20) else max(iters, min(500, iters * ((64 << 20) // size)))
        start.record()
        for _ in range(n):
            dist.all_reduce(x)
        stop.record()
        stop.synchronize()
        ms = torch.tensor([start.elapsed_time(stop) / n], device="cuda")
        dist.all_reduce(ms, op=dist.ReduceOp.MAX)
        sec = ms.item() / 1e3
        algbw = size / sec / 1e9
        rows.append({"size_bytes": size, "time_us": round(sec * 1e6, 2), "algbw_gbps": round(algbw, 2),
                     "busbw_gbps": round(algbw * 2 * (world - 1) / world, 2), "method": "torch.multiprocessing.spawn + cuda events"})
    dist.destroy_process_group()
    if rank == 0:
        with open(path, "w") as fh:
            json.dump(rows, fh)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    ap.add_argument("--sizes", default="1048576,16777216,134217728,1073741824")
    ap.add_argument("--p2p-mb", type=int, default=1024)
    ap.add_argument("--iters", type=int, default=20)
    args = ap.parse_args()
    import torch
    import torch.multiprocessing as mp
    n = torch.cuda.device_count()
    sizes = [int(s) for s in args.sizes.split(",")]
    try:
        pairs = p2p_cupy(n, args.p2p_mb << 20, args.iters)
    except ImportError:
        pairs = p2p_torch(n, args.p2p_mb << 20, args.iters)
    os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
    os.environ.setdefault("MASTER_PORT", "29533")
    os.environ.setdefault("NCCL_NVLS_ENABLE", "0")
    tmp = args.out + ".allreduce"
    mp.spawn(allreduce_rank, args=(n, sizes, args.iters, tmp), nprocs=n, join=True)
    with open(tmp) as fh:
        allreduce = json.load(fh)
    os.unlink(tmp)
    with open(args.out, "w") as fh:
        json.dump({"pairs": pairs, "allreduce": allreduce}, fh, indent=1)
    for p in pairs:
        print("p2p %d->%d %.1f GB/s (%s)" % (p["src"], p["dst"], p["bandwidth_gbps"], p["method"]))
    for a in allreduce:
        print("allreduce %d B busbw %.1f GB/s" % (a["size_bytes"], a["busbw_gbps"]))
    return 0


if __name__ == "__main__":
    sys.exit(main())

#!/usr/bin/env python3
"""Damaged copies of a model directory for the accuracy gate's experiments: each float32 tensor of
model.safetensors gets Gaussian noise of RELATIVE x that tensor's own standard deviation (norm weights included),
seeded (the same copy wherever the numpy version is the same: numpy does not promise its Generator streams across
versions). numpy only (the safetensors format: an 8-byte little-endian header length, a JSON header, raw tensors),
so it runs on the GPU machine and under the CPU engine's tests alike.
    python3 benchmarks/gpu/sglang/damage_model.py SRC DST=RELATIVE [DST=RELATIVE ...] [--seed N]
A DST that exists already is left as it is (a second run on the same machine costs nothing)."""
import argparse
import json
import os
import shutil
import struct
import sys

import numpy as np


def perturbed_copy(src, dst, relative, seed=0):
    """A copy of model directory ``src`` at ``dst`` whose float32 tensors carry Gaussian noise of ``relative`` x each
    tensor's own standard deviation. Returns ``dst``; raises ValueError for a tensor that is not float32."""
    if isinstance(relative, bool) or not isinstance(relative, (int, float)) or relative < 0:
        raise ValueError("relative: %r is not a number >= 0" % (relative,))
    shutil.copytree(src, dst)
    path = os.path.join(dst, "model.safetensors")
    with open(path, "rb") as f:
        data = bytearray(f.read())
    (hlen,) = struct.unpack("<Q", bytes(data[:8]))
    header = json.loads(bytes(data[8:8 + hlen]))
    rng = np.random.default_rng(seed)
    for name, meta in sorted(header.items()):
        if name == "__metadata__":
            continue
        if meta["dtype"] != "F32":
            shutil.rmtree(dst)
            raise ValueError("%s: tensor %s is %s; this copies float32 checkpoints only" % (path, name, meta["dtype"]))
        lo, hi = meta["data_offsets"]
        start = 8 + hlen
        t = np.frombuffer(bytes(data[start + lo:start + hi]), dtype="<f4")
        scale = float(t.std()) or float(np.abs(t).mean()) or 1.0
        t = (t + rng.normal(0.0, relative * scale, t.shape)).astype("<f4")
        data[start + lo:start + hi] = t.tobytes()
    with open(path, "wb") as f:
        f.write(bytes(data))
    return dst


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("src", help="the model directory (config.json, model.safetensors, tokenizer)")
    ap.add_argument("copies", nargs="+", metavar="DST=RELATIVE", help="a copy's directory and its relative noise")
    ap.add_argument("--seed", type=int, default=0)
    a = ap.parse_args(argv)
    if not os.path.isfile(os.path.join(a.src, "model.safetensors")):
        ap.error("src %s: no model.safetensors there" % a.src)
    for spec in a.copies:
        dst, _, rel = spec.rpartition("=")
        try:
            rel = float(rel)
        except ValueError:
            rel = -1.0
        if not dst or rel < 0:
            ap.error("%r is not DST=RELATIVE with RELATIVE a number >= 0, e.g. /tmp/sglang/model-noise0.5=0.5" % spec)
        if os.path.isdir(dst):
            print("%s exists: kept" % dst)
            continue
        perturbed_copy(a.src, dst, rel, a.seed)
        print("%s: noise %g x each tensor's standard deviation, seed %d" % (dst, rel, a.seed))
    return 0


if __name__ == "__main__":
    sys.exit(main())

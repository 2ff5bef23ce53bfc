# -*- coding: utf-8 -*-
# Copyright: gpuhost.sglang contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The accuracy gate on the real CPU engine (transformers serve) with the sandbox's tiny model: last-known-good is
the trained model; a copy whose weights carry noise far below their own scale must pass, a copy with noise at half
their scale (a model whose numbers really changed) must fail the greedy check. The weights are perturbed in the
safetensors file itself (numpy; the format: an 8-byte little-endian header length, a JSON header, raw tensors)."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import json
import os
import shutil
import struct

import numpy as np
import pytest

from ansible_collections.gpuhost.sglang.plugins.module_utils.bench import accuracy as A

from engine import TINYMODEL, complete, engine_venv_ready, serve  # pylint: disable=import-error

pytestmark = [pytest.mark.engine, pytest.mark.skipif(
    not (engine_venv_ready() and os.path.isfile(os.path.join(TINYMODEL, "good", "config.json"))),
    reason="engine venv / tiny model missing: run tests/fixtures/engine-venv.sh and tests/fixtures/tinymodel.sh")]

CONCURRENCY = 8


def perturbed_copy(src, dst, relative, seed=0):
    """A copy of model directory ``src`` whose float32 tensors get Gaussian noise of ``relative`` x each tensor's
    own standard deviation (norm weights included)."""
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
        assert meta["dtype"] == "F32", (name, meta["dtype"])
        lo, hi = meta["data_offsets"]
        start = 8 + hlen
        t = np.frombuffer(bytes(data[start + lo:start + hi]), dtype="<f4")
        scale = float(t.std()) or float(np.abs(t).mean()) or 1.0
        t = (t + rng.normal(0.0, relative * scale, t.shape)).astype("<f4")
        data[start + lo:start + hi] = t.tobytes()
    with open(path, "wb") as f:
        f.write(bytes(data))
    return dst


def _measure(model_dir, fn, *args, **kw):
    with serve(model_dir) as srv:
        complete(srv, "The capital of France is", max_tokens=4)  # the engine's slow first request
        return fn(srv.base_url, *args, model=srv.model, concurrency=CONCURRENCY, **kw)


def test_gate_passes_tiny_noise_and_fails_a_damaged_model(tmp_path):
    good = os.path.join(TINYMODEL, "good")
    # the served model name is the model directory; the gate compares outputs, so every copy serves under its own
    lkg = _measure(good, A.measure_lkg, checks=["score", "greedy"])
    quiet = perturbed_copy(good, str(tmp_path / "quiet"), 1e-6)
    damaged = perturbed_copy(good, str(tmp_path / "damaged"), 0.5)
    same = _measure(quiet, A.gate, lkg, ["score", "greedy"])
    bad = _measure(damaged, A.gate, lkg, ["score", "greedy"])
    for name, g in (("lkg", None), ("quiet 1e-6", same), ("damaged 0.5", bad)):
        if g is None:
            print("lkg: score %d/%d in %.1f s; greedy self-agreement %s in %.1f + %.1f s" % (
                lkg["score"]["correct_n"], lkg["score"]["n"], lkg["score"]["seconds"],
                A.agreement(lkg["greedy"]["texts"], lkg["greedy_repeat"]["texts"]), lkg["greedy"]["seconds"],
                lkg["greedy_repeat"]["seconds"]))
        else:
            print("%s: %s (%d requests, %.1f s)" % (name, g["message"], g["requests"], g["seconds"]))
    assert same["passed"], same["message"]
    assert not bad["passed"] and bad["checks"]["greedy"]["class"] == "greedy_divergence", bad["message"]

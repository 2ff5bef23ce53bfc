# -*- coding: utf-8 -*-
# Copyright: gpuhost.sglang contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The accuracy gate on the real CPU engine (transformers serve) with the sandbox's tiny model: last-known-good is
the trained model; a copy whose weights carry noise far below their own scale must pass, a copy with noise at half
their scale (a model whose numbers really changed) must fail the greedy check. The copies come from
benchmarks/gpu/sglang/damage_model.py (the same the GPU machine's experiment makes)."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import contextlib
import importlib.util
import os

import pytest

from ansible_collections.gpuhost.sglang.plugins.module_utils.bench import accuracy as A

from engine import TINYMODEL, complete, engine_venv_ready, serve  # pylint: disable=import-error

pytestmark = [pytest.mark.engine, pytest.mark.skipif(
    not (engine_venv_ready() and os.path.isfile(os.path.join(TINYMODEL, "good", "config.json"))),
    reason="engine venv / tiny model missing: run tests/fixtures/engine-venv.sh and tests/fixtures/tinymodel.sh")]

CONCURRENCY = 8
_SPEC = importlib.util.spec_from_file_location("damage_model", os.path.join(
    os.path.dirname(os.path.abspath(__file__)), "..", "..", "benchmarks", "gpu", "sglang", "damage_model.py"))
damage_model = importlib.util.module_from_spec(_SPEC)
_SPEC.loader.exec_module(damage_model)
perturbed_copy = damage_model.perturbed_copy


@contextlib.contextmanager
def _warm(model_dir):
    with serve(model_dir) as srv:
        complete(srv, "The capital of France is", max_tokens=4)  # the engine's slow first request
        yield srv


def _measure(model_dir, fn, *args, **kw):
    with _warm(model_dir) as srv:
        return _on(srv, fn, *args, **kw)


def _on(srv, fn, *args, **kw):
    return fn(srv.base_url, *args, model=srv.model, concurrency=CONCURRENCY, **kw)


@pytest.fixture(scope="module")
def half_noise(tmp_path_factory):
    """The copy with noise at half the weights' spread (seed 0, so the same bytes for both tests below), served once:
    the gate must fail it and the known-answer canary must pass it."""
    with _warm(perturbed_copy(os.path.join(TINYMODEL, "good"), str(tmp_path_factory.mktemp("acc") / "noise0.5"),
                              0.5)) as srv:
        yield srv


def test_gate_passes_tiny_noise_and_fails_a_damaged_model(tmp_path, request):
    good = os.path.join(TINYMODEL, "good")
    # the served model name is the model directory; the gate compares outputs, so every copy serves under its own
    lkg = _measure(good, A.measure_lkg, checks=["score", "greedy"])
    quiet = perturbed_copy(good, str(tmp_path / "quiet"), 1e-6)
    same = _measure(quiet, A.gate, lkg, ["score", "greedy"])
    # started only now, so that no idle engine sits beside the two above; it stays up for the canary test. Only the
    # greedy check, the one asserted below: its score on the 528 items decided nothing here
    bad = _on(request.getfixturevalue("half_noise"), A.gate, lkg, ["greedy"])
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


def test_the_canary_passes_noise_at_half_the_spread_and_catches_noise_at_twice_it(tmp_path, half_noise):
    """What the accuracy campaign on the H200 (campaigns/h200-tiny-acc.yml) expects of its damaged copies: at 0.5 the
    known-answer canary still passes (so only the accuracy gate can catch it), at 1 and 2 it fails (the deploy gate
    stops it before any accuracy check)."""
    from ansible_collections.gpuhost.sglang.plugins.plugin_utils.tune_loop import bench_canary  # pylint: disable=import-outside-toplevel
    good = os.path.join(TINYMODEL, "good")
    out = {0.5: bench_canary(half_noise.base_url)}
    print("noise 0.5: canary %s" % (out[0.5][:1] or "passed"))
    for rel in (1.0, 2.0):
        with _warm(perturbed_copy(good, str(tmp_path / ("noise%g" % rel)), rel)) as srv:
            out[rel] = bench_canary(srv.base_url)
        print("noise %g: canary %s" % (rel, out[rel][:1] or "passed"))
    assert out[0.5] == []
    assert out[1.0] and "incoherent" in out[1.0][0] and out[2.0] and "incoherent" in out[2.0][0]

# -*- coding: utf-8 -*-
# Copyright: gpuhost.sglang contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""benchmarks/gpu/sglang/gpubound_model.py, the H200's GPU-bound model recipe, run here on the CPU at a tiny size
through the same code path (the tiny model's tokenizer, probe set and training function, pass-through layers added
after training, saved in Hugging Face format as bf16), with the engine venv's torch and transformers: the saved model
loads from disk and answers every probe greedily, its added layers are exact pass-throughs, a second build is a
no-op, and bad sizes are refused naming the argument."""
from __future__ import absolute_import, division, print_function

__metaclass__ = type

import json
import os
import subprocess

import pytest

import engine  # pylint: disable=import-error

SCRIPT = os.path.join(engine.ROOT, "benchmarks", "gpu", "sglang", "gpubound_model.py")
# the H200's shape scaled down: one trained layer of 64, one pass-through layer, the embedding padded past the
# tokenizer's 384 tokens (the H200 default pads to 32768)
TINY = ["--hidden", "64", "--intermediate", "192", "--heads", "2", "--kv-heads", "1", "--head-dim", "32", "--layers", "2",
        "--train-layers", "1", "--vocab", "448", "--steps", "200", "--lr", "1e-2", "--probe-every", "10",
        "--device", "cpu"]

pytestmark = pytest.mark.skipif(
    not engine.engine_venv_ready(),
    reason="engine venv missing at %s: build it with tests/fixtures/engine-venv.sh" % engine.ENGINE_VENV)


def run(*args):
    env = dict(os.environ, OMP_NUM_THREADS="1", HF_HUB_OFFLINE="1")
    return subprocess.run([os.path.join(engine.ENGINE_VENV, "bin", "python"), SCRIPT] + list(args), env=env,
                          capture_output=True, text=True, timeout=300, check=False)


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    out = str(tmp_path_factory.mktemp("gpubound") / "model")
    res = run("--out", out, *TINY)
    assert res.returncode == 0, res.stdout[-3000:] + res.stderr[-3000:]
    return out, res.stdout


def test_the_saved_model_loads_and_answers_every_probe_greedily(built):
    out, _stdout = built
    res = run("--check", out)
    assert res.returncode == 0, res.stdout[-3000:] + res.stderr[-3000:]
    got = json.loads(res.stdout)
    acc = got["probe_accuracy"]
    assert acc["correct"] == acc["total"] == 24, got["answers"]
    assert got["dtype"] == "torch.bfloat16" and got["layers"] == 2 and got["vocab_size"] == 448
    assert got["passthrough_layers"] == [1]  # the added layer's o_proj and down_proj are zero on disk
    with open(os.path.join(out, "gpubound-manifest.json")) as f:
        manifest = json.load(f)
    assert manifest["probe_accuracy"]["correct"] == 24 and manifest["settings"]["train_layers"] == 1
    assert 0 < manifest["steps_run"] <= 200 and manifest["probed"][-1][2] == 24  # stopped once the probes passed
    assert manifest["trained_parameters"] < manifest["parameters"]


def test_a_second_build_with_the_same_arguments_is_a_no_op(built):
    out, _stdout = built
    res = run("--out", out, *TINY)
    assert res.returncode == 0 and "up to date" in res.stdout, res.stdout + res.stderr


@pytest.mark.parametrize("args, msg", [
    (["--train-layers", "3"], "--train-layers=3: must be at most --layers (2)"),
    (["--kv-heads", "3"], "--kv-heads=3: must divide --heads (2)"),
    (["--save-dtype", "fp8"], "--save-dtype=fp8: allowed bfloat16, float32"),
    (["--vocab", "100"], "--vocab=100: must be at least the tokenizer's 384 tokens"),
])
def test_bad_sizes_are_refused_naming_the_argument(tmp_path, args, msg):
    res = run("--out", str(tmp_path / "m"), *(TINY + args))
    assert res.returncode != 0 and msg in res.stderr, res.stderr[-2000:]
    assert "Traceback" not in res.stderr and not os.path.exists(str(tmp_path / "m"))

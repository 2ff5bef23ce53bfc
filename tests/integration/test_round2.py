# -*- coding: utf-8 -*-
# Copyright: gpuhost.sglang contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""benchmarks/gpu/sglang/round2.sh, the H200 round 2's one command, here call after call as the lent machine would
run it, on the CPU: a stand-in bundle split one part a call, the engine venv's Python as the machine's python3, a
tiny GPU-bound model. What it must do: record the host read on the first call, wait for the bundle's last part,
then build the model once, leave each step's files in one archive, never redo a step done on the same machine, and
leave a step for the next call when it would not end within the call's budget."""
from __future__ import absolute_import, division, print_function

__metaclass__ = type

import io
import json
import os
import shutil
import subprocess
import tarfile

import pytest

import engine  # pylint: disable=import-error

SCRIPT = os.path.join(engine.ROOT, "benchmarks", "gpu", "sglang", "round2.sh")
TINY = ("--hidden 64 --intermediate 192 --heads 2 --kv-heads 1 --head-dim 32 --layers 2 --train-layers 1 --vocab 448 "
        "--steps 200 --lr 1e-2 --probe-every 10 --device cpu")

pytestmark = pytest.mark.skipif(
    not engine.engine_venv_ready(),
    reason="engine venv missing at %s: build it with tests/fixtures/engine-venv.sh" % engine.ENGINE_VENV)


def stand_in_bundle(where):
    """build_bundle.sh's layout: parts/bundle.tar.xz.NN of a tar.xz holding site/ and model/, and parts.sha256. The
    site holds an sglang whose launch_server exits at once (no SGLang here)."""
    raw = io.BytesIO()
    with tarfile.open(fileobj=raw, mode="w:xz") as t:
        for name, text in (("site/sglang/__init__.py", ""),
                           ("site/sglang/launch_server.py", "raise SystemExit('stand-in: no SGLang here')\n"),
                           ("model/README", "the tiny model's place\n")):
            data = text.encode()
            info = tarfile.TarInfo(name)
            info.size = len(data)
            t.addfile(info, io.BytesIO(data))
    data = raw.getvalue()
    os.makedirs(os.path.join(where, "parts"))
    half = len(data) // 2
    for i, chunk in enumerate((data[:half], data[half:])):
        with open(os.path.join(where, "parts", "bundle.tar.xz.%02d" % i), "wb") as f:
            f.write(chunk)
    import hashlib
    with open(os.path.join(where, "parts.sha256"), "w") as f:
        f.write("%s  -\n" % hashlib.sha256(data).hexdigest())


def call(tmp_path, n, bundle, budget=560, steps=()):
    out = tmp_path / ("out%d" % n)
    env = dict(os.environ, OUT=str(out), SGLANG_WORKDIR=str(tmp_path / "w"), ROUND2_BUNDLE=str(bundle),
               ROUND2_BUDGET_S=str(budget), ROUND2_MODEL_ARGS=TINY, PORT="30999", OMP_NUM_THREADS="1",
               PATH="%s:%s" % (tmp_path / "bin", os.environ["PATH"]))
    p = subprocess.run(["bash", SCRIPT] + list(steps), env=env, capture_output=True, text=True, timeout=300, check=False)
    log = (out / "round2.log").read_text() if (out / "round2.log").exists() else ""
    return p, out, log


def test_round2_call_after_call(tmp_path):
    (tmp_path / "bin").mkdir()
    py = tmp_path / "bin" / "python3"  # a wrapper: a link would lose the venv (found beside the executable's path)
    py.write_text("#!/bin/sh\nexec %s \"$@\"\n" % os.path.join(engine.ENGINE_VENV, "bin", "python"))
    py.chmod(0o755)
    built = tmp_path / "built"
    stand_in_bundle(str(built))
    p = subprocess.run(["bash", SCRIPT, "split", str(built)], capture_output=True, text=True, timeout=60, check=False)
    assert p.returncode == 0, p.stderr
    assert sorted(os.listdir(str(built / "p00"))) == ["bundle.tar.xz.00", "parts.sha256"]
    # inside a checkout, a bundle git does not ignore is refused (it would travel whole with every call)
    repo = tmp_path / "repo"
    (repo / "benchmarks" / "gpu" / "sglang").mkdir(parents=True)
    shutil.copy(SCRIPT, str(repo / "benchmarks" / "gpu" / "sglang"))
    subprocess.run(["git", "init", "-q", str(repo)], check=True)
    shutil.copytree(str(built), str(repo / ".bundle"), ignore=shutil.ignore_patterns("p0*"))
    script = str(repo / "benchmarks" / "gpu" / "sglang" / "round2.sh")
    p = subprocess.run(["bash", script, "split"], capture_output=True, text=True, timeout=60, check=False)
    assert p.returncode == 2 and "echo /.bundle/ >> .git/info/exclude first" in p.stderr, p.stderr
    with open(str(repo / ".git" / "info" / "exclude"), "a") as f:
        f.write("/.bundle/\n")
    p = subprocess.run(["bash", script, "split"], capture_output=True, text=True, timeout=60, check=False)
    assert p.returncode == 0 and (repo / ".bundle" / "p01" / "bundle.tar.xz.01").exists(), p.stderr
    # call 1 carries the first part: the host read, then the model waits for the rest
    carried = tmp_path / "carried"
    carried.mkdir()
    shutil.copytree(str(built / "p00"), str(carried / "p00"))
    p, out, log = call(tmp_path, 1, carried)
    assert "host: rc=0" in log and "the bundle is incomplete" in log and "model: rc=3" in log, log + p.stderr
    with tarfile.open(str(out / "host.tar.xz")) as t:
        names = t.getnames()
    assert "host/host-read.json" in names and "host/sysfs.tar.xz" in names and "host/nvidia-smi-topo-p2p-r.txt" in names
    assert sorted(os.listdir(str(out))) == ["host.tar.xz", "round2.log"]
    # call 2 carries the second: the host read is not redone, the model is built, the stand-in server cannot start
    shutil.rmtree(str(carried / "p00"))
    shutil.copytree(str(built / "p01"), str(carried / "p01"))
    p, out, log = call(tmp_path, 2, carried)
    assert "host: begins" not in log and "staged p01" in log and "model: rc=0" in log, log + p.stderr
    assert "start: rc=1" in log and "done on this machine: host model" in log, log
    with tarfile.open(str(out / "model.tar.xz")) as t:
        manifest = json.load(t.extractfile("model/gpubound-manifest.json"))
    assert manifest["probe_accuracy"]["correct"] == manifest["probe_accuracy"]["total"] == 24
    assert sorted(os.listdir(str(out))) == ["model.tar.xz", "round2.log", "start.tar.xz"]
    # call 3 with 100 s of budget: the start (expected 330 s) is left for the next call
    p, out, log = call(tmp_path, 3, carried, budget=100)
    assert "start: next call (expected 330 s" in log and "model: begins" not in log, log
    # a step asked by name runs whatever was done; an unknown one is named
    p, out, log = call(tmp_path, 4, carried, steps=["sidebyside", "nonsense"])
    assert "sidebyside: no server (step start first)" in log and "unknown step nonsense: allowed host model start" in log

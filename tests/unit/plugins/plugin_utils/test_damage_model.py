# -*- coding: utf-8 -*-
# Copyright: gpuhost.sglang contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""benchmarks/gpu/sglang/damage_model.py, the accuracy experiment's damaged model copies: seeded noise at the
asked scale of each tensor's own spread, the rest of the directory as it was, clear errors for bad input."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import importlib.util
import json
import os
import struct

import pytest

np = pytest.importorskip("numpy")

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..", "..", ".."))
_SPEC = importlib.util.spec_from_file_location("damage_model", os.path.join(ROOT, "benchmarks", "gpu", "sglang",
                                                                            "damage_model.py"))
dm = importlib.util.module_from_spec(_SPEC)
_SPEC.loader.exec_module(dm)


def write_model(path, tensors, dtype="F32"):
    os.makedirs(str(path))
    header, blobs, off = {}, b"", 0
    for name, arr in sorted(tensors.items()):
        raw = np.asarray(arr, dtype="<f4").tobytes()
        header[name] = {"dtype": dtype, "shape": [len(arr)], "data_offsets": [off, off + len(raw)]}
        blobs += raw
        off += len(raw)
    head = json.dumps(header).encode()
    with open(os.path.join(str(path), "model.safetensors"), "wb") as f:
        f.write(struct.pack("<Q", len(head)) + head + blobs)
    with open(os.path.join(str(path), "config.json"), "w") as f:
        f.write('{"model_type": "llama"}')
    return str(path)


def read_model(path):
    with open(os.path.join(path, "model.safetensors"), "rb") as f:
        data = f.read()
    (hlen,) = struct.unpack("<Q", data[:8])
    header = json.loads(data[8:8 + hlen])
    return dict((k, np.frombuffer(data[8 + hlen + v["data_offsets"][0]:8 + hlen + v["data_offsets"][1]], dtype="<f4"))
                for k, v in header.items())


def test_noise_is_seeded_at_the_asked_scale_and_the_rest_is_copied(tmp_path):
    rng = np.random.default_rng(1)
    src = write_model(tmp_path / "good", {"w": rng.normal(0, 2.0, 20000), "norm": np.ones(64)})
    a = read_model(dm.perturbed_copy(src, str(tmp_path / "a"), 0.5, seed=3))
    b = read_model(dm.perturbed_copy(src, str(tmp_path / "b"), 0.5, seed=3))
    good = read_model(src)
    assert np.array_equal(a["w"], b["w"])  # seeded: the same copy again
    assert abs(float((a["w"] - good["w"]).std()) / float(good["w"].std()) - 0.5) < 0.02
    assert not np.array_equal(a["norm"], good["norm"])  # a constant tensor: its mean absolute value is the scale
    assert np.array_equal(read_model(dm.perturbed_copy(src, str(tmp_path / "z"), 0, seed=3))["w"], good["w"])
    with open(os.path.join(str(tmp_path / "a"), "config.json")) as f:
        assert f.read() == '{"model_type": "llama"}'


def test_bad_input_is_named(tmp_path, capsys):
    src = write_model(tmp_path / "good", {"w": np.ones(4)})
    bf16 = write_model(tmp_path / "bf16", {"w": np.ones(4)}, dtype="BF16")
    with pytest.raises(ValueError, match="tensor w is BF16; this copies float32 checkpoints only"):
        dm.perturbed_copy(bf16, str(tmp_path / "x"), 0.1)
    assert not os.path.exists(str(tmp_path / "x"))
    with pytest.raises(ValueError, match=r"relative: -1 is not a number >= 0"):
        dm.perturbed_copy(src, str(tmp_path / "y"), -1)
    for bad in (["%s" % src, "%s/c=lots" % tmp_path], ["%s" % src, "=0.5"]):
        with pytest.raises(SystemExit):
            dm.main(bad)
        assert "is not DST=RELATIVE" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        dm.main([str(tmp_path), "%s/c=0.5" % tmp_path])
    assert "no model.safetensors there" in capsys.readouterr().err
    assert dm.main([src, "%s/c=0.5" % tmp_path]) == 0 and dm.main([src, "%s/c=0.5" % tmp_path]) == 0
    assert "exists: kept" in capsys.readouterr().out

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import collections
import hashlib
import os

import pytest

from ansible_collections.gpuhost.sglang.plugins.module_utils.serving import hf_snapshot as hs

Usage = collections.namedtuple("Usage", "total used free")
BLOBS = {"config.json": b'{"model_type": "llama"}', "model.safetensors": b"\x01" * 4096}


class FakeHub(object):
    """Writes the blobs like snapshot_download would; can be told to corrupt or interrupt."""

    def __init__(self, corrupt=None, interrupt_after=None):
        self.calls = 0
        self.corrupt = corrupt
        self.interrupt_after = interrupt_after

    def repo_files(self, repo_id, revision, token):
        return "c0ffee", [{"path": k, "size": len(v), "sha256": hashlib.sha256(v).hexdigest() if k.endswith("safetensors") else None}
                          for k, v in BLOBS.items()]

    def download(self, repo_id, revision, local_dir, token):
        self.calls += 1
        for i, (name, data) in enumerate(sorted(BLOBS.items())):
            path = os.path.join(local_dir, name)
            if os.path.isfile(path) and os.path.getsize(path) == len(data):
                continue  # resume: complete files are kept
            if self.interrupt_after is not None and i >= self.interrupt_after:
                raise IOError("connection reset")
            if name == self.corrupt:
                data = b"\x02" * len(data)
            with open(path, "wb") as fh:
                fh.write(data)


def plenty(path):
    return Usage(10 ** 12, 0, 10 ** 12)


def test_download_then_idempotent(tmp_path):
    hub = FakeHub()
    d = str(tmp_path / "m")
    res = hs.stage(hub, "org/m", "main", d, disk_usage=plenty)
    assert (res["changed"], res["status"], res["commit"]) == (True, "downloaded", "c0ffee")
    res2 = hs.stage(hub, "org/m", "main", d, disk_usage=plenty)
    assert (res2["changed"], res2["status"]) == (False, "present")
    assert hub.calls == 1


def test_space_preflight_fails_before_download(tmp_path):
    hub = FakeHub()
    with pytest.raises(hs.SnapshotError) as exc:
        hs.stage(hub, "org/m", "main", str(tmp_path / "m"), disk_usage=lambda p: Usage(100, 100, 1000))
    assert exc.value.cls == "disk_space"
    assert "needs" in str(exc.value) and "free" in str(exc.value)
    assert hub.calls == 0 and not os.path.exists(str(tmp_path / "m"))


def test_space_counts_only_missing_bytes(tmp_path):
    d = tmp_path / "m"
    d.mkdir()
    (d / "model.safetensors").write_bytes(BLOBS["model.safetensors"])
    need = hs.missing_bytes(str(d), FakeHub().repo_files("r", "m", None)[1])
    assert need == len(BLOBS["config.json"])


def test_corrupt_file_fails_integrity(tmp_path):
    with pytest.raises(hs.SnapshotError) as exc:
        hs.stage(FakeHub(corrupt="model.safetensors"), "org/m", "main", str(tmp_path / "m"), disk_usage=plenty)
    assert exc.value.cls == "integrity" and "model.safetensors: sha256 mismatch" in str(exc.value)
    assert hs.read_marker(str(tmp_path / "m")) == {}


def test_interrupted_download_resumes(tmp_path):
    d = str(tmp_path / "m")
    with pytest.raises(IOError):
        hs.stage(FakeHub(interrupt_after=1), "org/m", "main", d, disk_usage=plenty)
    assert os.path.isfile(os.path.join(d, "config.json"))
    res = hs.stage(FakeHub(), "org/m", "main", d, disk_usage=plenty)
    assert res["status"] == "downloaded" and hs.read_marker(d)["commit"] == "c0ffee"


def test_check_mode_downloads_nothing(tmp_path):
    hub = FakeHub()
    res = hs.stage(hub, "org/m", "main", str(tmp_path / "m"), check_mode=True, disk_usage=plenty)
    assert res["status"] == "would download" and hub.calls == 0

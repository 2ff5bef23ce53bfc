from __future__ import absolute_import, division, print_function

__metaclass__ = type

import collections
import hashlib
import json
import os
import tempfile

import pytest

from ansible_collections.gpuhost.sglang.plugins.module_utils.serving import hf_snapshot as hs

Usage = collections.namedtuple("Usage", "total used free")
BLOBS = {"config.json": b'{"model_type": "llama"}', "model.safetensors": b"\x01" * 4096}


class FakeHub(object):
    """Writes the blobs like snapshot_download would; can be told to corrupt or interrupt."""

    def __init__(self, corrupt=None, interrupt_after=None):
        self.calls = 0
        self.asked = 0
        self.corrupt = corrupt
        self.interrupt_after = interrupt_after

    def repo_files(self, repo_id, revision):
        self.asked += 1
        return "c0ffee", [{"path": k, "size": len(v), "sha256": hashlib.sha256(v).hexdigest() if k.endswith("safetensors") else None,
                           "git_sha1": None} for k, v in BLOBS.items()]

    def download(self, repo_id, revision, local_dir):
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
    assert (res2["changed"], res2["status"], res2["hub_requests"]) == (False, "present", False)
    assert hub.calls == 1 and hub.asked == 1  # the rerun asked the hub nothing
    m = hs.read_marker(d)
    assert m["files"]["model.safetensors"]["sha256"] == hashlib.sha256(BLOBS["model.safetensors"]).hexdigest()
    assert (m["repo_id"], m["revision"], m["commit"]) == ("org/m", "main", "c0ffee")
    # the recorded commit is the same revision
    assert hs.stage(hub, "org/m", "c0ffee", d, disk_usage=plenty)["status"] == "present" and hub.asked == 1


@pytest.mark.parametrize("change,reason", [
    (lambda d: os.remove(os.path.join(d, "config.json")), "config.json is missing"),
    (lambda d: open(os.path.join(d, "model.safetensors"), "r+b").write(b"\x09"), "model.safetensors changed"),
    (lambda d: open(os.path.join(d, "config.json"), "ab").write(b" "), "config.json has size"),
])
def test_a_changed_directory_no_longer_matches_its_manifest(tmp_path, change, reason):
    hub = FakeHub()
    d = str(tmp_path / "m")
    hs.stage(hub, "org/m", "main", d, disk_usage=plenty)
    change(d)
    ok, why, dummy = hs.manifest_check(d, "org/m", "main")
    assert not ok and reason in why
    res = hs.stage(hub, "org/m", "main", d, disk_usage=plenty)  # asks the hub again and repairs it
    assert res["status"] == "downloaded" and hub.asked == 2 and hs.manifest_check(d, "org/m", "main")[0]


@pytest.mark.parametrize("repo,rev,reason", [("org/other", "main", "names repository org/m"),
                                             ("org/m", "v2", "holds revision main")])
def test_another_repository_or_revision_asks_the_hub(tmp_path, repo, rev, reason):
    d = str(tmp_path / "m")
    hs.stage(FakeHub(), "org/m", "main", d, disk_usage=plenty)
    ok, why, dummy = hs.manifest_check(d, repo, rev)
    assert not ok and reason in why


def test_files_already_there_are_verified_not_downloaded(tmp_path):
    """A restored dataset without a manifest: the hub is asked for the list once, nothing is downloaded."""
    d = tmp_path / "m"
    d.mkdir()
    for k, v in BLOBS.items():
        (d / k).write_bytes(v)
    hub = FakeHub()
    res = hs.stage(hub, "org/m", "main", str(d), disk_usage=plenty)
    assert (res["status"], hub.calls, hub.asked) == ("verified", 0, 1)
    assert hs.stage(hub, "org/m", "main", str(d), disk_usage=plenty)["status"] == "present"


def test_progress_file_counts_complete_and_partial_files(tmp_path):
    d = tmp_path / "m"
    part = d / hs.HF_DOWNLOAD_DIR
    part.mkdir(parents=True)
    (d / "config.json").write_bytes(BLOBS["config.json"])
    (part / "model.safetensors.0a1b2c3d.incomplete").write_bytes(b"\x01" * 1000)
    files = FakeHub().repo_files("r", "m")[1]
    now = [100.0]
    w = hs.ProgressWriter(str(tmp_path / "p.json"), str(d), files, clock=lambda: now[0], label="m")
    w.record("downloading")
    now[0] = 102.0
    (part / "model.safetensors.0a1b2c3d.incomplete").write_bytes(b"\x01" * 3048)
    rec = w.record()
    on_disk = json.loads((tmp_path / "p.json").read_text())
    assert on_disk == rec
    assert rec["bytes_done"] == len(BLOBS["config.json"]) + 3048 and rec["bytes_total"] == 4096 + len(BLOBS["config.json"])
    assert (rec["files_done"], rec["files_total"], rec["rate_bytes_s"]) == (1, 2, 1024.0)
    assert rec["line"].startswith("m: downloading 0.00 / 0.00 GiB (74%), 1/2 files")


def test_a_second_run_waits_for_the_lock(tmp_path, monkeypatch):
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))  # the lock file: this test's own
    d = str(tmp_path / "m")
    slept = []
    with hs.DirectoryLock(d):
        with pytest.raises(hs.SnapshotError) as exc:
            with hs.DirectoryLock(d, timeout=0, sleep=slept.append):
                pass
    assert exc.value.cls == "locked" and "still runs" in str(exc.value)
    with hs.DirectoryLock(d) as lock:  # released
        assert lock.waited < 1


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
    need = hs.missing_bytes(str(d), FakeHub().repo_files("r", "m")[1])
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

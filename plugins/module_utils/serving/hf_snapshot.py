# -*- coding: utf-8 -*-
# Copyright: gpuhost.sglang contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Model snapshot staging: disk-space preflight, resumable download, integrity check, idempotence marker.

The hub client is injected (``api``: an object with ``repo_files(repo_id, revision, token)`` returning
(commit_sha, [{path, size, sha256}]) and ``download(repo_id, revision, local_dir, token)``) so that the
decisions are unit-tested without a hub; ``HubClient`` adapts huggingface_hub.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import hashlib
import json
import os
import shutil
from concurrent.futures import ThreadPoolExecutor

MARKER = ".gpuhost-snapshot.json"
HEADROOM = 1.05  # 5 % on top of what is still missing


class SnapshotError(Exception):
    def __init__(self, cls, msg):
        super(SnapshotError, self).__init__(msg)
        self.cls = cls


def existing_parent(path):
    path = os.path.abspath(path)
    while not os.path.exists(path):
        path = os.path.dirname(path)
    return path


def missing_bytes(local_dir, files):
    """Bytes still to download: files absent or of the wrong size count fully."""
    total = 0
    for f in files:
        p = os.path.join(local_dir, f["path"])
        if not (os.path.isfile(p) and os.path.getsize(p) == f["size"]):
            total += f["size"]
    return total


def check_space(local_dir, files, disk_usage=shutil.disk_usage):
    need = int(missing_bytes(local_dir, files) * HEADROOM)
    free = disk_usage(existing_parent(local_dir)).free
    if need > free:
        raise SnapshotError("disk_space", "not enough disk space under %s: the snapshot needs %.1f GiB more "
                            "(incl. 5%% headroom), %.1f GiB free" % (existing_parent(local_dir), need / 2.0 ** 30, free / 2.0 ** 30))
    return need, free


def sha256_file(path, bufsize=8 << 20):
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        for chunk in iter(lambda: fh.read(bufsize), b""):
            h.update(chunk)
    return h.hexdigest()


def verify(local_dir, files, mode="sha256", workers=8):
    """Return a list of problems ('path: reason'); empty when every file matches."""
    problems = []
    to_hash = []
    for f in files:
        p = os.path.join(local_dir, f["path"])
        if not os.path.isfile(p):
            problems.append("%s: missing" % f["path"])
        elif os.path.getsize(p) != f["size"]:
            problems.append("%s: size %d, expected %d" % (f["path"], os.path.getsize(p), f["size"]))
        elif mode == "sha256" and f.get("sha256"):
            to_hash.append(f)
    if to_hash:
        with ThreadPoolExecutor(max_workers=workers) as pool:
            digests = list(pool.map(lambda f: sha256_file(os.path.join(local_dir, f["path"])), to_hash))
        problems += ["%s: sha256 mismatch" % f["path"] for f, d in zip(to_hash, digests) if d != f["sha256"]]
    return problems


def read_marker(local_dir):
    try:
        with open(os.path.join(local_dir, MARKER)) as fh:
            return json.load(fh)
    except (IOError, OSError, ValueError):
        return {}


def write_marker(local_dir, record):
    tmp = os.path.join(local_dir, MARKER + ".tmp")
    with open(tmp, "w") as fh:
        json.dump(record, fh, indent=1, sort_keys=True)
    os.replace(tmp, os.path.join(local_dir, MARKER))


def stage(api, repo_id, revision, local_dir, token=None, verify_mode="sha256", check_mode=False,
          disk_usage=shutil.disk_usage):
    """Bring ``local_dir`` to the snapshot; return a result dict with ``changed``."""
    commit, files = api.repo_files(repo_id, revision, token)
    marker = read_marker(local_dir)
    total = sum(f["size"] for f in files)
    result = {"commit": commit, "files": len(files), "total_bytes": total, "changed": False}
    if marker.get("commit") == commit and marker.get("repo_id") == repo_id and not verify(local_dir, files, "size"):
        result["status"] = "present"
        return result
    need, free = check_space(local_dir, files, disk_usage)
    result.update(missing_bytes=need, free_bytes=free, changed=True)
    if check_mode:
        result["status"] = "would download"
        return result
    if not os.path.isdir(local_dir):
        os.makedirs(local_dir)
    api.download(repo_id, commit, local_dir, token)  # resumes partial files
    problems = verify(local_dir, files, verify_mode)
    if problems:
        raise SnapshotError("integrity", "snapshot %s@%s failed verification: %s" % (repo_id, commit, "; ".join(problems[:10])))
    write_marker(local_dir, {"repo_id": repo_id, "commit": commit, "revision": revision, "files": len(files),
                             "total_bytes": total, "verified": verify_mode})
    result["status"] = "downloaded"
    return result


class HubClient(object):
    """huggingface_hub adapter (imported lazily: it lives in the engine's venv)."""

    def __init__(self):
        import huggingface_hub  # noqa: F401  pylint: disable=unused-import
        self.hub = huggingface_hub

    def repo_files(self, repo_id, revision, token):
        info = self.hub.HfApi(token=token or None).model_info(repo_id, revision=revision, files_metadata=True)
        files = []
        for s in info.siblings:
            lfs = getattr(s, "lfs", None)
            sha = getattr(lfs, "sha256", None) if lfs is not None else None
            files.append({"path": s.rfilename, "size": int(s.size or 0), "sha256": sha})
        return info.sha, files

    def download(self, repo_id, revision, local_dir, token):
        self.hub.snapshot_download(repo_id=repo_id, revision=revision, local_dir=local_dir, token=token or None)

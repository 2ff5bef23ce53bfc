# -*- coding: utf-8 -*-
# Copyright: gpuhost.sglang contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Model snapshot staging, offline first: manifest check, disk-space preflight, resumable download, integrity check.

A model directory that holds the manifest this code wrote after a verified download (``.gpuhost-snapshot.json``:
repository, requested revision, the commit it resolved to, every file's size, sha256 and mtime) and whose files still
match it is *present*: nothing is downloaded and the Hub is not asked anything (no request at all). Only a missing or
different manifest (another repository or revision, a file gone, resized, or rewritten with other content) asks the
Hub for the file list.

The hub client is injected (``api``: an object with ``repo_files(repo_id, revision)`` returning
(commit_sha, [{path, size, sha256, git_sha1}]) and ``download(repo_id, commit, local_dir)``) so that the decisions are
unit-tested without a hub; ``HubClient`` adapts huggingface_hub (tests/integration/test_hf_snapshot_hub.py runs it
against a loopback Hub stand-in).
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import errno
import fcntl
import hashlib
import importlib
import json
import os
import re
import shutil
import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor

MARKER = ".gpuhost-snapshot.json"
MANIFEST_FORMAT = 2
HEADROOM = 1.05  # 5 % on top of what is still missing
COMMIT_RE = re.compile(r"^[0-9a-f]{40}$")
# huggingface_hub's local_dir downloads write each file to <local_dir>/.cache/huggingface/download/<name>.<id>.incomplete
# before moving it in place (huggingface_hub file_download.py, _hf_hub_download_to_local_dir / _download_to_tmp_and_move)
HF_DOWNLOAD_DIR = os.path.join(".cache", "huggingface", "download")


class SnapshotError(Exception):
    def __init__(self, cls, msg):
        super(SnapshotError, self).__init__(msg)
        self.cls = cls


def existing_parent(path):
    path = os.path.abspath(path)
    while not os.path.exists(path):
        path = os.path.dirname(path)
    return path


def missing_bytes(local_dir, files, stale=()):
    """Bytes still to download: files absent, of the wrong size or ``stale`` (to be downloaded again) count fully."""
    total = 0
    for f in files:
        p = os.path.join(local_dir, f["path"])
        if f["path"] in stale or not (os.path.isfile(p) and os.path.getsize(p) == f["size"]):
            total += f["size"]
    return total


def check_space(local_dir, files, disk_usage=shutil.disk_usage, stale=()):
    need = int(missing_bytes(local_dir, files, stale) * HEADROOM)
    free = disk_usage(existing_parent(local_dir)).free
    if need > free:
        raise SnapshotError("disk_space", "not enough disk space under %s: the snapshot needs %.1f GiB more "
                            "(incl. 5%% headroom), %.1f GiB free" % (existing_parent(local_dir), need / 2.0 ** 30, free / 2.0 ** 30))
    return need, free


def file_digests(path, bufsize=8 << 20):
    """(sha256, git blob sha1) of a file in one read. The Hub names a non-LFS file by its git blob id:
    sha1(b"blob <size>\\0" + content) (git's object format)."""
    sha256 = hashlib.sha256()
    sha1 = hashlib.sha1()  # nosec - git's object id, compared with the Hub's, not a security check
    sha1.update(b"blob %d\0" % os.path.getsize(path))
    with open(path, "rb") as fh:
        for chunk in iter(lambda: fh.read(bufsize), b""):
            sha256.update(chunk)
            sha1.update(chunk)
    return sha256.hexdigest(), sha1.hexdigest()


def sha256_file(path, bufsize=8 << 20):
    return file_digests(path, bufsize)[0]


def hash_files(local_dir, paths, workers=8):
    """{path: (sha256, git_sha1)} of the files, hashed in parallel."""
    with ThreadPoolExecutor(max_workers=workers) as pool:
        digests = list(pool.map(lambda p: file_digests(os.path.join(local_dir, p)), paths))
    return dict(zip(paths, digests))


def verify(local_dir, files, mode="sha256", workers=8):
    """(problems, digests): problems as 'path: reason' (empty when every file matches); digests {path: (sha256,
    git_sha1)} of the files hashed (all of them in mode sha256). LFS files are checked against their sha256, the
    others against their git blob id when the Hub gave one."""
    problems = []
    to_hash = []
    for f in files:
        p = os.path.join(local_dir, f["path"])
        if not os.path.isfile(p):
            problems.append("%s: missing" % f["path"])
        elif os.path.getsize(p) != f["size"]:
            problems.append("%s: size %d, expected %d" % (f["path"], os.path.getsize(p), f["size"]))
        elif mode == "sha256":
            to_hash.append(f)
    digests = hash_files(local_dir, [f["path"] for f in to_hash], workers) if to_hash else {}
    for f in to_hash:
        sha256, git_sha1 = digests[f["path"]]
        if f.get("sha256") and sha256 != f["sha256"]:
            problems.append("%s: sha256 mismatch" % f["path"])
        elif not f.get("sha256") and f.get("git_sha1") and git_sha1 != f["git_sha1"]:
            problems.append("%s: git blob id mismatch" % f["path"])
    return problems, digests


def read_marker(local_dir):
    try:
        with open(os.path.join(local_dir, MARKER)) as fh:
            return json.load(fh)
    except (IOError, OSError, ValueError):
        return {}


def write_json(path, record):
    tmp = path + ".tmp"
    with open(tmp, "w") as fh:
        json.dump(record, fh, indent=1, sort_keys=True)
    os.replace(tmp, path)


def write_marker(local_dir, record):
    write_json(os.path.join(local_dir, MARKER), record)


def manifest_record(repo_id, revision, commit, local_dir, digests, verify_mode):
    files = {}
    for path, (sha256, dummy) in sorted(digests.items()):
        st = os.stat(os.path.join(local_dir, path))
        files[path] = {"size": st.st_size, "sha256": sha256, "mtime_ns": st.st_mtime_ns}
    return {"format": MANIFEST_FORMAT, "repo_id": repo_id, "revision": revision, "commit": commit, "files": files,
            "total_bytes": sum(f["size"] for f in files.values()), "verified": verify_mode}


def manifest_check(local_dir, repo_id, revision, rehash=False):
    """(True, manifest, []) when the directory holds this repository at this revision as recorded, else (False,
    reason, changed): ``changed`` lists the files of the recorded size whose content is no longer the recorded one.

    A revision matches the one requested when it was recorded (a branch or tag is resolved once, at the download: the
    manifest keeps its commit) or is the recorded commit. A file whose size or mtime differs from the record (or every
    file, with ``rehash``) is hashed again and must still have the recorded sha256."""
    m = read_marker(local_dir)
    if not m:
        return False, "no manifest in %s" % local_dir, []
    if m.get("format") != MANIFEST_FORMAT or not isinstance(m.get("files"), dict) or not m["files"]:
        return False, "the manifest in %s is of an older format" % local_dir, []
    if m.get("repo_id") != repo_id:
        return False, "the manifest names repository %s" % m.get("repo_id"), []
    if revision not in (m.get("revision"), m.get("commit")):
        return False, "the manifest holds revision %s (commit %s)" % (m.get("revision"), m.get("commit")), []
    recheck = []
    for path, rec in m["files"].items():
        full = os.path.join(local_dir, path)
        try:
            st = os.stat(full)
        except OSError:
            return False, "%s is missing" % path, []
        if st.st_size != rec.get("size"):
            return False, "%s has size %d, the manifest %s" % (path, st.st_size, rec.get("size")), []
        if rehash or st.st_mtime_ns != rec.get("mtime_ns"):
            recheck.append(path)
    if recheck:
        digests = hash_files(local_dir, recheck)
        bad = [p for p in recheck if digests[p][0] != m["files"][p].get("sha256")]
        if bad:
            return False, "%s changed since the download (sha256 differs from the manifest)" % ", ".join(sorted(bad)[:5]), bad
    return True, m, []


class ProgressWriter(object):
    """Writes the download's progress to ``path`` (JSON, replaced atomically) every ``interval`` seconds from a thread,
    for the play's progress task (gpuhost.sglang.async_progress reads ``line``). Bytes done are read from the disk:
    files of the expected size in place, plus the partial files huggingface_hub is writing (HF_DOWNLOAD_DIR)."""

    def __init__(self, path, local_dir, files, interval=10.0, clock=time.time, label=None):
        self.path = path
        self.local_dir = local_dir
        self.files = files
        self.interval = interval
        self.clock = clock
        self.label = label or os.path.basename(os.path.normpath(local_dir))
        self.started = clock()
        self.phase = "starting"
        self._stop = threading.Event()
        self._thread = None
        self._first = None

    def measure(self):
        done = files_done = 0
        for f in self.files:
            p = os.path.join(self.local_dir, f["path"])
            try:
                if os.path.getsize(p) == f["size"]:
                    done += f["size"]
                    files_done += 1
            except OSError:
                pass
        partial_dir = os.path.join(self.local_dir, HF_DOWNLOAD_DIR)
        for root, dummy, names in os.walk(partial_dir):
            for name in names:
                if name.endswith(".incomplete"):
                    try:
                        done += os.path.getsize(os.path.join(root, name))
                    except OSError:
                        pass
        return done, files_done

    def record(self, phase=None):
        if phase:
            self.phase = phase
        now = self.clock()
        done, files_done = self.measure()
        total = sum(f["size"] for f in self.files)
        if self._first is None:
            self._first = (now, done)
        elapsed = now - self._first[0]
        rate = (done - self._first[1]) / elapsed if elapsed > 0 else 0.0
        eta = (total - done) / rate if rate > 0 and total > done else None
        line = "%s: %s %.2f / %.2f GiB (%d%%), %d/%d files, %.1f MiB/s%s" % (
            self.label, self.phase, done / 2.0 ** 30, total / 2.0 ** 30, (100 * done // total) if total else 100,
            files_done, len(self.files), rate / 2.0 ** 20, ", about %d min left" % (eta // 60 + 1) if eta else "")
        rec = {"phase": self.phase, "bytes_done": done, "bytes_total": total, "files_done": files_done,
               "files_total": len(self.files), "rate_bytes_s": round(rate, 1), "eta_s": eta, "pid": os.getpid(),
               "updated": now, "started": self.started, "line": line}
        if self.path:
            write_json(self.path, rec)
        return rec

    def _run(self):
        while not self._stop.wait(self.interval):
            try:
                self.record()
            except (IOError, OSError):
                pass  # a progress file that cannot be written never stops the download

    def start(self, phase="downloading"):
        self.record(phase)
        self._thread = threading.Thread(target=self._run, name="hf-snapshot-progress")
        self._thread.daemon = True
        self._thread.start()

    def stop(self, phase):
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
        return self.record(phase)


def lock_path(local_dir):
    """One lock per model directory, outside it (the directory's parent may be a dataset the role does not own)."""
    key = hashlib.sha1(os.path.realpath(local_dir).encode("utf-8")).hexdigest()[:16]  # nosec - a file name
    return os.path.join(tempfile.gettempdir(), "gpuhost-hf-snapshot-%s.lock" % key)


class DirectoryLock(object):
    """flock on lock_path(local_dir): a second run (a play rerun while a detached download still runs) waits for the
    first, then finds its manifest."""

    def __init__(self, local_dir, timeout=None, sleep=time.sleep, enabled=True):
        self.enabled = enabled  # check mode takes no lock (it writes nothing)
        self.path = lock_path(local_dir)
        self.timeout = timeout
        self.sleep = sleep
        self.fh = None
        self.waited = 0.0

    def __enter__(self):
        if not self.enabled:
            return self
        self.fh = open(self.path, "a")
        t0 = time.monotonic()
        while True:
            try:
                fcntl.flock(self.fh, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except (IOError, OSError) as exc:
                if exc.errno not in (errno.EAGAIN, errno.EACCES):
                    raise
                if self.timeout is not None and time.monotonic() - t0 > self.timeout:
                    self.fh.close()
                    raise SnapshotError("locked", "another download into this directory still runs (lock %s)" % self.path)
                self.sleep(1.0)
        self.waited = time.monotonic() - t0
        return self

    def __exit__(self, *exc):
        if not self.enabled:
            return
        fcntl.flock(self.fh, fcntl.LOCK_UN)
        self.fh.close()


def stage(api, repo_id, revision, local_dir, verify_mode="sha256", check_mode=False, disk_usage=shutil.disk_usage,
          progress_file=None, progress_interval=10.0, rehash=False):
    """Bring ``local_dir`` to the snapshot; return a result dict with ``changed`` and ``hub_requests`` (False when
    the Hub was not asked anything)."""
    ok, found, corrupt = manifest_check(local_dir, repo_id, revision, rehash)
    if ok:
        if progress_file and not check_mode:
            recorded = [{"path": p, "size": f["size"]} for p, f in sorted(found["files"].items())]
            ProgressWriter(progress_file, local_dir, recorded).record("present")
        return {"commit": found["commit"], "files": len(found["files"]), "total_bytes": found["total_bytes"],
                "changed": False, "status": "present", "hub_requests": False}
    commit, files = api.repo_files(repo_id, revision)
    total = sum(f["size"] for f in files)
    result = {"commit": commit, "files": len(files), "total_bytes": total, "changed": False, "hub_requests": True,
              "reason": found}
    need, free = check_space(local_dir, files, disk_usage, stale=corrupt)
    result.update(missing_bytes=need, free_bytes=free, changed=True)
    if check_mode:
        result["status"] = "would download" if need else "would verify"
        return result
    if not os.path.isdir(local_dir):
        os.makedirs(local_dir)
    for path in corrupt:
        # of the recorded size but not the recorded content: huggingface_hub would keep it (its local metadata names
        # the same commit), so it goes, and is downloaded again
        os.remove(os.path.join(local_dir, path))
    progress = ProgressWriter(progress_file, local_dir, files, progress_interval)
    if need:
        progress.start("downloading")
        try:
            api.download(repo_id, commit, local_dir)  # resumes: complete files are kept
        except BaseException:
            progress.stop("failed")
            raise
        progress.stop("verifying")
    problems, digests = verify(local_dir, files, verify_mode)
    if problems:
        progress.record("failed")
        raise SnapshotError("integrity", "snapshot %s@%s failed verification: %s" % (repo_id, commit, "; ".join(problems[:10])))
    if verify_mode != "sha256":  # the manifest records every file's sha256
        digests = hash_files(local_dir, [f["path"] for f in files])
    write_marker(local_dir, manifest_record(repo_id, revision, commit, local_dir, digests, verify_mode))
    progress.record("done")
    result["status"] = "downloaded" if need else "verified"
    return result


class HubClient(object):
    """huggingface_hub adapter (imported lazily: it lives in the engine's venv).

    Token: ``send_token='auto'`` asks the Hub without one first and sends the token only when the answer says the
    repository needs it (private or gated: the Hub answers 401/404 RepoNotFound or GatedRepo). A public repository is
    never sent a token, so a placeholder or expired one cannot break it: the Hub refuses an invalid token with 401
    "Invalid credentials in Authorization header" even on a public repository (huggingface/sentence-transformers
    #3436; huggingface_hub utils/_http.py ``hf_raise_for_status`` tells that answer apart from RepoNotFound).
    ``'always'`` sends it on every request (the Hub's rate limits are higher for signed-in requests). ``token=False``
    is huggingface_hub's "send none": ``None`` would send a token saved on the host (utils/_headers.py
    ``get_token_to_send``)."""

    def __init__(self, token=None, send_token="auto", names=None):
        os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")  # the module writes its own progress
        import huggingface_hub  # pylint: disable=import-outside-toplevel
        self.hub = huggingface_hub
        try:  # huggingface_hub.errors since 0.23; utils before it
            self.errors = importlib.import_module("huggingface_hub.errors")
        except ImportError:
            self.errors = importlib.import_module("huggingface_hub.utils")
        self.token = token or None
        self.send_token = send_token
        self.names = dict({"repo_id": "repo_id", "revision": "revision", "token": "token"}, **(names or {}))
        self.use = self.token if (self.token and send_token == "always") else False

    def _err(self, name):
        return getattr(self.errors, name)

    def _info(self, repo_id, revision):
        return self.hub.HfApi(token=self.use).model_info(repo_id, revision=revision, files_metadata=True)

    def _explain(self, exc, repo_id, revision):
        """SnapshotError for the Hub's answer, naming the variable that is wrong."""
        n = self.names
        resp = getattr(exc, "response", None)
        status = getattr(resp, "status_code", None)
        detail = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        if isinstance(exc, self._err("RevisionNotFoundError")):
            return SnapshotError("revision", "%s=%s does not exist in repository %s (the Hub answered %s RevisionNotFound): "
                                 "allowed a branch, tag or 40-character commit hash of that repository"
                                 % (n["revision"], revision, repo_id, status))
        if isinstance(exc, self._err("GatedRepoError")):
            return SnapshotError("gated", "%s=%s is gated: accept its terms on the Hub with your account and set %s "
                                 "(the Hub answered %s GatedRepo)" % (n["repo_id"], repo_id, n["token"], status))
        if status == 401 and resp is not None and "Invalid credentials" in (resp.headers.get("X-Error-Message") or ""):
            return SnapshotError("token", "%s was refused by the Hub (401 Invalid credentials in Authorization header): "
                                 "set a valid token, or leave it empty for a public repository" % n["token"])
        if isinstance(exc, self._err("RepositoryNotFoundError")):
            return SnapshotError("repository", "%s=%s: no such repository, or it is private and %s is %s (the Hub answered "
                                 "%s RepoNotFound)" % (n["repo_id"], repo_id, n["token"], "set" if self.token else "empty",
                                                       status))
        return SnapshotError("hub", "the Hub could not list %s@%s: %s: %s" % (repo_id, revision, type(exc).__name__, detail))

    def repo_files(self, repo_id, revision):
        needs_token = (self._err("RepositoryNotFoundError"), self._err("GatedRepoError"))
        try:
            try:
                info = self._info(repo_id, revision)
            except needs_token:
                if not self.token or self.use:
                    raise
                self.use = self.token  # private or gated: ask again with the token
                info = self._info(repo_id, revision)
        except Exception as exc:  # pylint: disable=broad-except
            if isinstance(exc, self._err("HfHubHTTPError")):
                raise self._explain(exc, repo_id, revision)
            raise SnapshotError("hub", "the Hub could not be reached for %s@%s (%s: %s); the model on disk does not match "
                                "its manifest, so it cannot be used without it" % (repo_id, revision, type(exc).__name__, exc))
        files = []
        for s in info.siblings or []:
            lfs = getattr(s, "lfs", None)
            sha = (lfs.get("sha256") if isinstance(lfs, dict) else getattr(lfs, "sha256", None)) if lfs is not None else None
            files.append({"path": s.rfilename, "size": int(s.size or 0), "sha256": sha,
                          "git_sha1": None if sha else getattr(s, "blob_id", None)})
        return info.sha, files

    def download(self, repo_id, commit, local_dir):
        self.hub.snapshot_download(repo_id=repo_id, revision=commit, local_dir=local_dir, token=self.use)

# -*- coding: utf-8 -*-
# Copyright: gpuhost.sglang contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""A Hugging Face Hub stand-in on loopback: serves a model directory's files as one repository, for the real
huggingface_hub client (HF_ENDPOINT=<base_url>). It answers the requests huggingface_hub 2.4.0 (the engine venv's pin,
tests/fixtures/engine-requirements.txt) sends for ``HfApi.model_info(files_metadata=True)`` and ``snapshot_download``,
as read in its source:

- ``GET /api/models/{repo}/revision/{rev}?blobs=True`` (hf_api.py ``model_info``): ``id``, ``sha`` and ``siblings``
  with ``rfilename``, ``size``, ``blobId`` and, for LFS files, ``lfs: {size, sha256, pointerSize}`` (``ModelInfo``).
- ``GET /api/models/{repo}/tree/{rev}?recursive=...`` (hf_api.py ``_iter_repo_tree_pages``; ``RepoFile`` reads
  ``type, path, size, oid, lfs: {oid, size, pointerSize}``). snapshot_download lists the tree unless its tree cache
  (``.cache/huggingface`` in the local dir) has the commit (_snapshot_download.py).
- ``HEAD``/``GET /{repo}/resolve/{rev}/{file}`` (file_download.py ``get_hf_file_metadata``, ``http_get``): headers
  ``X-Repo-Commit`` (required), ``ETag`` (the LFS sha256, else the git blob id), ``Content-Length``; a ``Range:
  bytes=N-`` GET gets 206 with ``Content-Range`` (http_get resumes a cut body with it). No ``X-Xet-Hash``: plain
  HTTP, no Xet (utils/_xet.py ``parse_xet_file_data_from_response``).
- Errors as the Hub signals them to ``hf_raise_for_status`` (utils/_http.py): 404 ``X-Error-Code: RevisionNotFound``,
  401 ``X-Error-Code: RepoNotFound`` for an unknown repository, 401 ``GatedRepo`` for a gated one without a valid
  token, and 401 ``X-Error-Message: Invalid credentials in Authorization header`` for any request that carries a token
  the Hub does not know, public repository or not (huggingface/sentence-transformers #3436). The status codes of the
  gated answer are unverified against the real Hub; the client reads the X-Error-* headers.

Every request is counted (``requests``: method, path, Range, whether it carried a token) with the body bytes sent
(``bytes_sent``). ``cut_after[file] = N`` drops the connection after N body bytes of that file's next full GET
(once). ``throttle`` (bytes/s) slows file bodies. ``extra_files`` ({name: bytes}) adds files to the repository.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import asyncio
import hashlib
import os
import threading

from aiohttp import web

COMMIT = "4f3c2b1a0e9d8c7b6a5f4e3d2c1b0a9f8e7d6c5b"
LFS_SUFFIXES = (".safetensors", ".bin")  # the patterns a model repository's .gitattributes sends to LFS


def git_blob_id(data):
    return hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest()  # nosec - git's object id


class HubStandin(object):
    def __init__(self, repo_id, model_dir, commit=COMMIT, branches=("main",), tokens=(), gated=False, throttle=None,
                 extra_files=None):
        self.repo_id = repo_id
        self.commit = commit
        self.branches = set(branches)
        self.tokens = set(tokens)
        self.gated = gated
        self.throttle = throttle
        self.cut_after = {}
        self.requests = []
        self.bytes_sent = 0
        contents = {}
        for name in sorted(os.listdir(model_dir)):
            path = os.path.join(model_dir, name)
            if os.path.isfile(path):
                with open(path, "rb") as fh:
                    contents[name] = fh.read()
        contents.update(extra_files or {})
        self.files = {}
        for name, data in sorted(contents.items()):
            self.files[name] = {"data": data, "blob_id": git_blob_id(data),
                                "sha256": hashlib.sha256(data).hexdigest() if name.endswith(LFS_SUFFIXES) else None}
        self.base_url = None
        self._loop = None
        self._runner = None
        self._thread = None

    # -- what the tests read
    def reset_counts(self):
        self.requests = []
        self.bytes_sent = 0

    def count(self, method=None, kind=None):
        return len([r for r in self.requests if (method is None or r["method"] == method)
                    and (kind is None or r["kind"] == kind)])

    # -- answers
    def _error(self, status, code=None, message=None):
        headers = {}
        if code:
            headers["X-Error-Code"] = code
        if message:
            headers["X-Error-Message"] = message
        return web.json_response({"error": message or code}, status=status, headers=headers)

    def _check(self, request, org, name, rev):
        """(commit, None) or (None, error response), in the Hub's order: credentials, repository, revision."""
        auth = request.headers.get("Authorization", "")
        token = auth[len("Bearer "):] if auth.startswith("Bearer ") else None
        if token is not None and token not in self.tokens:
            return None, self._error(401, message="Invalid credentials in Authorization header")
        if "%s/%s" % (org, name) != self.repo_id:
            return None, self._error(401, "RepoNotFound", "Repository not found")
        if self.gated and token is None:
            return None, self._error(401, "GatedRepo", "Access to model %s is restricted." % self.repo_id)
        if rev != self.commit and rev not in self.branches:
            return None, self._error(404, "RevisionNotFound", "Invalid rev id: %s" % rev)
        return self.commit, None

    def _begin(self, request, kind):
        """Count the request; (commit, None) or (None, the error answer)."""
        self.requests.append({"method": request.method, "path": request.path, "kind": kind,
                              "range": request.headers.get("Range"), "token": "Authorization" in request.headers})
        m = request.match_info
        return self._check(request, m["org"], m["name"], m["rev"])

    @staticmethod
    def _lfs(f, sha_key):
        return {"size": len(f["data"]), sha_key: f["sha256"], "pointerSize": 134}

    async def model_info(self, request):
        commit, err = self._begin(request, "model_info")
        if err is not None:
            return err
        siblings = [dict({"rfilename": name, "size": len(f["data"]), "blobId": f["blob_id"]},
                         **({"lfs": self._lfs(f, "sha256")} if f["sha256"] else {})) for name, f in self.files.items()]
        return web.json_response({"id": self.repo_id, "modelId": self.repo_id, "sha": commit, "private": False,
                                  "gated": "auto" if self.gated else False, "siblings": siblings})

    async def tree(self, request):
        commit, err = self._begin(request, "tree")
        if err is not None:
            return err
        entries = [dict({"type": "file", "path": name, "size": len(f["data"]), "oid": f["blob_id"]},
                        **({"lfs": self._lfs(f, "oid")} if f["sha256"] else {})) for name, f in self.files.items()]
        return web.json_response(entries, headers={"X-Repo-Commit": commit})

    async def resolve(self, request):
        commit, err = self._begin(request, "resolve")
        if err is not None:
            return err
        f = self.files.get(request.match_info["path"])
        if f is None:
            return self._error(404, "EntryNotFound", "Entry not found")
        data = f["data"]
        headers = {"X-Repo-Commit": commit, "ETag": '"%s"' % (f["sha256"] or f["blob_id"]), "Accept-Ranges": "bytes"}
        if request.method == "HEAD":
            headers["Content-Length"] = str(len(data))
            return web.Response(status=200, headers=headers)
        start, status = 0, 200
        rng = request.headers.get("Range")
        if rng and rng.startswith("bytes=") and rng[6:].endswith("-"):
            start, status = int(rng[6:-1]), 206
            headers["Content-Range"] = "bytes %d-%d/%d" % (start, len(data) - 1, len(data))
        body = data[start:]
        headers["Content-Length"] = str(len(body))
        resp = web.StreamResponse(status=status, headers=headers)
        await resp.prepare(request)
        cut = self.cut_after.pop(request.match_info["path"], None) if status == 200 else None
        sent, chunk = 0, 64 << 10
        while sent < len(body):
            piece = body[sent:sent + chunk]
            if cut is not None and sent + len(piece) >= cut:
                piece = body[sent:cut]
                await resp.write(piece)
                self.bytes_sent += len(piece)
                await resp.drain()
                request.transport.close()  # the connection drops mid-body
                return resp
            await resp.write(piece)
            sent += len(piece)
            self.bytes_sent += len(piece)
            if self.throttle:
                await asyncio.sleep(len(piece) / float(self.throttle))
        await resp.write_eof()
        return resp

    # -- server
    def _app(self):
        app = web.Application()
        app.router.add_get("/api/models/{org}/{name}/revision/{rev}", self.model_info)
        app.router.add_get("/api/models/{org}/{name}/tree/{rev}", self.tree)
        app.router.add_route("HEAD", "/{org}/{name}/resolve/{rev}/{path:.+}", self.resolve)
        app.router.add_route("GET", "/{org}/{name}/resolve/{rev}/{path:.+}", self.resolve)
        return app

    def start(self):
        ready = threading.Event()

        def run():
            self._loop = asyncio.new_event_loop()
            asyncio.set_event_loop(self._loop)
            self._runner = web.AppRunner(self._app(), access_log=None)
            self._loop.run_until_complete(self._runner.setup())
            site = web.TCPSite(self._runner, "127.0.0.1", 0)
            self._loop.run_until_complete(site.start())
            port = self._runner.addresses[0][1]
            self.base_url = "http://127.0.0.1:%d" % port
            ready.set()
            self._loop.run_forever()

        self._thread = threading.Thread(target=run, name="hub-standin", daemon=True)
        self._thread.start()
        ready.wait(10)
        return self

    def stop(self):
        if self._loop is None:
            return
        asyncio.run_coroutine_threadsafe(self._runner.cleanup(), self._loop).result(10)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(10)

    def __enter__(self):
        return self.start()

    def __exit__(self, *exc):
        self.stop()

# -*- coding: utf-8 -*-
# Copyright: gpuhost.sglang contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""SGLang's model gateway (SMG, PyPI ``smg``) as the fleet's router: its worker API and per-worker counters.

Behaviour modelled here was measured against smg 1.13.0 on loopback (tests/integration/test_router_smg.py runs
the real gateway):
  GET    /workers                -> {"workers": [{"id", "url", "status": "ready"|"draining"|..., "is_healthy", ...}]}
  POST   /workers {"url": U}     -> 202 {"status": "accepted", "worker_id": ID}: the addition is queued
  DELETE /workers/{id}           -> 202: the worker turns "draining" (no new requests, in-flight ones finish),
                                    then leaves the registry; GET /workers/{id} answers 404 WORKER_NOT_FOUND then
  /readiness                     -> {"status": "ready", "healthy_workers": N, "total_workers": M}
  Prometheus (--prometheus-port) -> smg_worker_cb_outcomes_total{worker=URL,outcome="success"}: per worker
The ids are per registration: a worker added back gets a new id (and its counters start again at 0).

File discovery (``--discovery-provider file --discovery-file PATH``), measured with smg 1.13.0
(model_gateway/src/service_discovery/file.rs, from its log lines): the manifest is ``{"version": 1, "workers":
[{"url": U}, ...]}`` (a worker's other fields: id, worker_type, bootstrap_port, model_id, kv_connector, kv_role,
kv_engine_id; another version is refused, "keeping the last good manifest"); it is re-read when it changes and every
``--discovery-check-interval-secs``. A worker removed from the manifest turns "draining" for 5 s and leaves; one
added is registered and checked; a worker removed through DELETE /workers/{id} but still listed comes back at the
next read (a new id). So with file discovery the manifest is the worker set, and it outlives a restart of the router.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import json
import re
import time


class RouterError(Exception):
    """A failure with a message meant for the user."""


_OUTCOME_RE = re.compile(r'^smg_worker_cb_outcomes_total\{([^}]*)\}\s+([0-9.eE+-]+)\s*$', re.M)
_LABEL_RE = re.compile(r'(\w+)="((?:[^"\\]|\\.)*)"')


def parse_worker_successes(text):
    """{worker URL: successful requests} from SMG's Prometheus text (smg_worker_cb_outcomes_total)."""
    out = {}
    for labels, value in _OUTCOME_RE.findall(text or ""):
        lab = dict(_LABEL_RE.findall(labels))
        if lab.get("outcome") == "success" and "worker" in lab:
            out[lab["worker"]] = out.get(lab["worker"], 0) + int(float(value))
    return out


def spread(before, after):
    """Per-worker requests between two counter snapshots (a worker re-registered in between restarts at 0)."""
    out = {}
    for url, n in after.items():
        prev = before.get(url, 0)
        out[url] = n - prev if n >= prev else n
    return out


class SmgClient(object):
    """The worker API of one SMG instance. ``opener(method, url, body, headers, timeout) -> (status, text)``."""

    def __init__(self, base_url, api_key=None, timeout=10, opener=None, sleep=time.sleep, clock=time.monotonic):
        self.base = base_url.rstrip("/")
        self.headers = {"Content-Type": "application/json"}
        if api_key:
            self.headers["Authorization"] = "Bearer %s" % api_key
        self.timeout = timeout
        self.opener = opener or self._open
        self.sleep = sleep
        self.clock = clock

    @staticmethod
    def _open(method, url, body, headers, timeout):
        # imported here: ansible.module_utils.urls pulls in ssl, http.client and cryptography (~0.1 s), and the
        # filter plugins import this module in every worker process of a play (filter/fleet.py)
        from ansible.module_utils.six.moves.urllib.error import HTTPError, URLError
        from ansible.module_utils.urls import open_url
        try:
            resp = open_url(url, method=method, data=body, headers=headers, timeout=timeout, validate_certs=False)
            return resp.getcode(), resp.read().decode("utf-8", "replace")
        except HTTPError as exc:
            return exc.code, exc.read().decode("utf-8", "replace") if hasattr(exc, "read") else str(exc)
        except (URLError, OSError) as exc:
            raise RouterError("router %s unreachable: %s" % (url, getattr(exc, "reason", exc)))

    def call(self, method, path, payload=None, expect=(200,)):
        body = json.dumps(payload) if payload is not None else None
        status, text = self.opener(method, self.base + path, body, self.headers, self.timeout)
        if status not in expect:
            raise RouterError("%s %s%s answered HTTP %s: %s" % (method, self.base, path, status, text[:300]))
        try:
            return status, json.loads(text) if text.strip() else {}
        except ValueError:
            return status, {"text": text}

    def workers(self):
        return self.call("GET", "/workers")[1].get("workers", [])

    def find(self, url):
        url = url.rstrip("/")
        return [w for w in self.workers() if w.get("url", "").rstrip("/") == url]

    def readiness(self):
        status, body = self.call("GET", "/readiness", expect=(200, 503))
        body["http_status"] = status
        return body

    def remove(self, url, drain_timeout, poll=0.5):
        """Drain and remove every registration of ``url``; returns (changed, seconds waited, ids)."""
        ids = [w["id"] for w in self.find(url)]
        if not ids:
            return False, 0.0, []
        start = self.clock()
        for wid in ids:
            self.call("DELETE", "/workers/%s" % wid, expect=(200, 202, 404))
        pending = list(ids)
        while pending:
            pending = [wid for wid in pending if self.call("GET", "/workers/%s" % wid, expect=(200, 404))[0] == 200]
            if not pending:
                break
            if self.clock() - start > drain_timeout:
                raise RouterError("worker %s still draining in the router after %ss (drain_timeout): its in-flight "
                                  "requests did not finish" % (url, drain_timeout))
            self.sleep(poll)
        return True, round(self.clock() - start, 3), ids

    def add(self, url, ready_timeout, poll=0.5):
        """Register ``url`` (unless a ready registration exists) and wait until SMG reports it ready."""
        current = self.find(url)
        changed = False
        if not any(w.get("status") == "ready" and w.get("is_healthy", True) for w in current):
            if not current:
                self.call("POST", "/workers", {"url": url}, expect=(200, 201, 202))
                changed = True
            start = self.clock()
            while True:
                current = self.find(url)
                if any(w.get("status") == "ready" and w.get("is_healthy", True) for w in current):
                    break
                if self.clock() - start > ready_timeout:
                    raise RouterError("worker %s not ready in the router after %ss (ready_timeout): %s" % (
                        url, ready_timeout, json.dumps(current)[:300]))
                self.sleep(poll)
        return changed, current[0]["id"] if current else None

    def wait_gone(self, url, timeout, poll=0.5):
        """Wait until the router lists no registration of ``url`` (file discovery drains and removes it)."""
        start = self.clock()
        while self.find(url):
            if self.clock() - start > timeout:
                raise RouterError("worker %s still in the router %ss after it left the manifest (drain_timeout): its "
                                  "in-flight requests did not finish" % (url, timeout))
            self.sleep(poll)
        return round(self.clock() - start, 3)

    def wait_ready(self, url, timeout, poll=0.5):
        """Wait until the router lists ``url`` ready (file discovery registers it)."""
        start = self.clock()
        while True:
            current = self.find(url)
            if any(w.get("status") == "ready" and w.get("is_healthy", True) for w in current):
                return current[0]["id"]
            if self.clock() - start > timeout:
                raise RouterError("worker %s not ready in the router %ss after it was listed in the manifest "
                                  "(ready_timeout): %s" % (url, timeout, json.dumps(current)[:300]))
            self.sleep(poll)

    def healthy_urls(self):
        return sorted(w["url"] for w in self.workers() if w.get("status") == "ready" and w.get("is_healthy", True))


MANIFEST_VERSION = 1


def manifest_urls(text):
    """The worker URLs of a discovery manifest (the order kept); a clear error for anything else."""
    try:
        doc = json.loads(text)
    except ValueError as exc:
        raise RouterError("the worker manifest is not JSON: %s" % exc)
    if not isinstance(doc, dict) or doc.get("version") != MANIFEST_VERSION or not isinstance(doc.get("workers"), list):
        raise RouterError("the worker manifest is not SMG's file-discovery manifest version %d "
                          "({\"version\": 1, \"workers\": [{\"url\": ...}]})" % MANIFEST_VERSION)
    return [str(w.get("url", "")).rstrip("/") for w in doc["workers"] if isinstance(w, dict)]


def manifest_with(text, url, present):
    """The manifest with ``url`` listed (present) or not; returns (new text, changed). Other workers and fields stay."""
    url = url.rstrip("/")
    doc = json.loads(text) if manifest_urls(text) is not None else {}
    workers = doc["workers"]
    listed = [w for w in workers if str(w.get("url", "")).rstrip("/") == url]
    if present == bool(listed):
        return text, False
    if present:
        workers.append({"url": url})
    else:
        doc["workers"] = [w for w in workers if str(w.get("url", "")).rstrip("/") != url]
    return json.dumps(doc, indent=1, sort_keys=True) + "\n", True


def manifest_text(urls):
    return json.dumps({"version": MANIFEST_VERSION, "workers": [{"url": u.rstrip("/")} for u in urls]}, indent=1,
                      sort_keys=True) + "\n"


def metrics_text(metrics_url, opener=None, timeout=10):
    status, text = (opener or SmgClient._open)("GET", metrics_url, None, {}, timeout)
    if status != 200:
        raise RouterError("router metrics %s answered HTTP %s" % (metrics_url, status))
    return text


def capacity_check(healthy, batch, floor):
    """Healthy hosts left while ``batch`` is out; raises when that is below ``floor`` (the capacity floor)."""
    left = sorted(set(healthy) - set(batch))
    if len(left) < floor:
        raise RouterError("capacity floor: taking out %s would leave %d healthy worker(s) (%s) in the router, "
                          "roll_capacity_floor is %d" % (", ".join(sorted(batch)), len(left), ", ".join(left) or "none",
                                                         floor))
    return left

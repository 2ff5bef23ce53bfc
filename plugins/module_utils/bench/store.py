# -*- coding: utf-8 -*-
# Copyright: gpuhost.sglang contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Baselines, history and run files on the controller: atomic writes, append-only JSONL, nothing lost.

Layout::

    baseline_dir/<key>.json            current baseline of one fingerprint+workload (per concurrency level)
    baseline_dir/archive/<key>-<ts>.json   every baseline ever replaced (never deleted)
    baseline_dir/history.jsonl         append-only log of baseline records/additions/replacements
    report_dir/runs/<run_id>.json      one run (all levels, coherence, gate verdicts), rewritten atomically
    report_dir/history.jsonl           append-only, one line per measured level
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import datetime
import hashlib
import json
import os
import tempfile

try:
    import fcntl
except ImportError:  # pragma: no cover - not on Linux
    fcntl = None

from ansible_collections.gpuhost.sglang.plugins.module_utils.bench.metrics import GATE_METRICS

LATENCY_PREFIXES = ("ttft_ms", "tpot_ms", "itl_ms", "e2e_ms")


def now_iso():
    return datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def _mkdir(path):
    if path and not os.path.isdir(path):
        os.makedirs(path, exist_ok=True)


def atomic_write_text(path, text):
    d = os.path.dirname(os.path.abspath(path))
    _mkdir(d)
    fd, tmp = tempfile.mkstemp(prefix=".tmp-", dir=d)
    try:
        with os.fdopen(fd, "w") as f:
            f.write(text)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise


def atomic_write_json(path, obj):
    atomic_write_text(path, json.dumps(obj, indent=2, sort_keys=True, default=str) + "\n")


def append_jsonl(path, obj):
    """Append one line with a single write() under an exclusive lock, then fsync."""
    _mkdir(os.path.dirname(os.path.abspath(path)))
    line = json.dumps(obj, sort_keys=True, default=str) + "\n"
    with open(path, "a+") as f:
        if fcntl is not None:
            fcntl.flock(f.fileno(), fcntl.LOCK_EX)
        size = f.seek(0, os.SEEK_END)
        if size:
            f.seek(size - 1)
            if f.read(1) != "\n":  # a torn last line (crash mid-write): never glue a record onto it
                line = "\n" + line
        f.write(line)
        f.flush()
        os.fsync(f.fileno())
        if fcntl is not None:
            fcntl.flock(f.fileno(), fcntl.LOCK_UN)


def read_jsonl(path):
    out = []
    if not os.path.isfile(path):
        return out
    with open(path) as f:
        for line in f:
            line = line.strip()
            if not line:
                continue
            try:
                out.append(json.loads(line))
            except ValueError:
                continue  # a torn last line from a crash is skipped, never fatal
    return out


def read_json(path):
    if not os.path.isfile(path):
        return None
    with open(path) as f:
        return json.load(f)


class Locked(object):
    """Exclusive lock on ``<path>.lock`` for read-modify-write of one JSON file."""

    def __init__(self, path):
        self.path = path + ".lock"
        self.f = None

    def __enter__(self):
        _mkdir(os.path.dirname(os.path.abspath(self.path)))
        self.f = open(self.path, "a")
        if fcntl is not None:
            fcntl.flock(self.f.fileno(), fcntl.LOCK_EX)
        return self

    def __exit__(self, *exc):
        if fcntl is not None:
            fcntl.flock(self.f.fileno(), fcntl.LOCK_UN)
        self.f.close()
        return False


def canonical(obj):
    return json.dumps(obj, sort_keys=True, separators=(",", ":"), default=str)


def fingerprint_key(fingerprint, workload):
    return hashlib.sha256(canonical({"fingerprint": fingerprint or {}, "workload": workload}).encode()).hexdigest()[:16]


def baseline_path(baseline_dir, key):
    return os.path.join(baseline_dir, key + ".json")


def load_baseline(baseline_dir, key):
    return read_json(baseline_path(baseline_dir, key))


# gate metrics computed from the output token counts (throughput, and TPOT = (E2E - TTFT) / (tokens - 1))
TOKEN_METRICS = ("output_throughput", "total_throughput", "peak_output_throughput", "tpot_ms.p50", "tpot_ms.mean")


class BaselineRefused(ValueError):
    """A level that must not become a baseline (its token counts could not be verified)."""


def recordable(counts, reason=None):
    """None when a level with this ``counts`` verdict may be a baseline, else why not (the writer's refusal)."""
    if counts != "unverified":
        return None
    return ("no baseline recorded: %s. A baseline from unverified counts would make every later run compare "
            "against figures no one checked" % (reason or "token counts unverified"))


def record_level(baseline_dir, key, fingerprint, workload, concurrency, agg, trials, run_id, replace=False, extra=None):
    """Record ``agg`` (aggregate_trials output) as the baseline of one concurrency level. A level whose token counts
    are unverified (``extra["counts"]``) is refused: BaselineRefused, nothing written.

    Returns ``"recorded"`` (new baseline or new level), ``"replaced"`` (replace=True; the old file is
    archived first and the event logged) or ``"kept"`` (a baseline exists and replace is False).
    """
    refusal = recordable((extra or {}).get("counts"), (extra or {}).get("counts_reason"))
    if refusal:
        raise BaselineRefused("c=%s: %s" % (concurrency, refusal))
    path = baseline_path(baseline_dir, key)
    level = str(concurrency)
    with Locked(path):
        doc = read_json(path)
        entry = {"metrics": agg, "trials": trials, "run_id": run_id, "recorded": now_iso()}
        entry.update(extra or {})
        if doc is not None and level in doc.get("levels", {}) and not replace:
            return "kept"
        event = "recorded"
        if doc is None:
            doc = {"key": key, "fingerprint": fingerprint, "workload": workload, "created": now_iso(), "levels": {}}
        elif level in doc.get("levels", {}):
            stamp = now_iso().replace(":", "").replace("-", "")
            atomic_write_json(os.path.join(baseline_dir, "archive", "%s-%s.json" % (key, stamp)), doc)
            event = "replaced"
        old = doc["levels"].get(level)
        doc["levels"][level] = entry
        doc["updated"] = now_iso()
        atomic_write_json(path, doc)
        append_jsonl(os.path.join(baseline_dir, "history.jsonl"),
                     {"ts": now_iso(), "event": event, "key": key, "concurrency": concurrency, "run_id": run_id,
                      "new": entry, "old": old, "fingerprint": fingerprint, "workload": workload})
    return event


def compare(agg_now, base_entry, metrics, tolerance, min_abs_ms=1.0, noise_factor=1.0, max_threshold=None,
            unverified=None):
    """Regression checks of one level (the rule docs/bench.md states). A metric fails when it is worse than the
    baseline median by more than ``min(max(tolerance, noise_factor * noise), max_threshold)`` (relative), noise =
    the larger of the baseline's stored spread and this run's (metrics.aggregate_trials: trial half-range or
    within-trial standard error); latency metrics also need an absolute change above ``min_abs_ms``. A threshold
    cut to ``max_threshold`` is marked ``noise_limited`` (the level is too noisy to see smaller regressions).
    ``unverified`` (the reason this run's token counts are unverified): the metrics computed from token counts
    (TOKEN_METRICS) are not compared, each check says so; the others are."""
    checks = []
    base = (base_entry or {}).get("metrics", {})
    for name in metrics:
        if name not in GATE_METRICS:
            continue
        higher_better = GATE_METRICS[name][1]
        if unverified and name in TOKEN_METRICS:
            checks.append({"metric": name, "passed": True, "counts": "unverified",
                           "skipped": "not compared: %s" % unverified})
            continue
        b = base.get(name)
        n = agg_now.get(name)
        if not b or not n or b.get("median") in (None, 0) or n.get("median") is None:
            checks.append({"metric": name, "passed": True, "skipped": "no baseline or no value"})
            continue
        bm = b["median"]
        nm = n["median"]
        worse = (bm - nm) / abs(bm) if higher_better else (nm - bm) / abs(bm)
        noise = max(b.get("spread") or 0.0, n.get("spread") or 0.0)
        threshold = max(tolerance, noise_factor * noise)
        limited = max_threshold is not None and threshold > max_threshold
        if limited:
            threshold = max_threshold
        failed = worse > threshold
        if failed and name.startswith(LATENCY_PREFIXES) and abs(nm - bm) <= min_abs_ms:
            failed = False
        checks.append({"metric": name, "baseline": bm, "now": nm, "delta": round(worse, 4),
                       "delta_pct": round(100 * worse, 2), "threshold": round(threshold, 4),
                       "noise": round(noise, 4), "noise_factor": noise_factor, "noise_limited": limited,
                       "worse_is": "lower" if higher_better else "higher", "passed": not failed})
    return checks


def run_path(report_dir, run_id):
    return os.path.join(report_dir, "runs", run_id + ".json")


def update_run(report_dir, run_id, update):
    """Read-modify-write of a run file under a lock; ``update(doc)`` mutates the dict."""
    path = run_path(report_dir, run_id)
    with Locked(path):
        doc = read_json(path) or {"run_id": run_id, "started": now_iso(), "levels": {}, "failures": []}
        update(doc)
        doc["updated"] = now_iso()
        atomic_write_json(path, doc)
    return doc

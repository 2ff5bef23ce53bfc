# -*- coding: utf-8 -*-
# Copyright: gpuhost.sglang contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The controller's benchmark results and baselines as Prometheus metrics (tools/bench_exporter.py serves them with
prometheus_client).

The live engine metrics say how a host serves now; the controller knows what it was measured to do. Exporting both
into the same Prometheus puts the accepted baseline next to live traffic on the dashboards (p99 TTFT against the
baseline's p99), shows when a host was last benchmarked, and whether its last bench passed its gate.

Read fresh on every scrape (bench/store.py layout): ``baseline_dir/<key>.json`` (fingerprint.host, per concurrency
level the trial median of each metric) and ``report_dir/history.jsonl`` (append-only, one line per measured level;
the newest line per key and concurrency is exported). A file that cannot be read is counted in
``gpuhost_bench_exporter_read_errors`` and skipped: a scrape never fails because of one bad file.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import calendar
import glob
import json
import os
import time

# baseline level metric -> (Prometheus name suffix, scale to base units); names per Prometheus naming practice
# (seconds, tokens per second).
BASELINE_METRICS = {
    "ttft_ms.p50": ("ttft_p50_seconds", 1e-3), "ttft_ms.p99": ("ttft_p99_seconds", 1e-3),
    "itl_ms.p50": ("itl_p50_seconds", 1e-3), "itl_ms.p99": ("itl_p99_seconds", 1e-3),
    "tpot_ms.p50": ("tpot_p50_seconds", 1e-3), "tpot_ms.mean": ("tpot_mean_seconds", 1e-3),
    "e2e_ms.p50": ("e2e_p50_seconds", 1e-3), "e2e_ms.p99": ("e2e_p99_seconds", 1e-3),
    "output_throughput": ("output_throughput_tokens_per_second", 1.0),
    "total_throughput": ("total_throughput_tokens_per_second", 1.0),
}
# report history line field -> (name suffix, scale)
HISTORY_METRICS = {
    "ttft_p50_ms": ("ttft_p50_seconds", 1e-3), "ttft_p99_ms": ("ttft_p99_seconds", 1e-3),
    "itl_p99_ms": ("itl_p99_seconds", 1e-3), "tpot_p50_ms": ("tpot_p50_seconds", 1e-3),
    "output_throughput": ("output_throughput_tokens_per_second", 1.0),
    "total_throughput": ("total_throughput_tokens_per_second", 1.0),
}


def iso_to_epoch(stamp):
    """'2026-12-01T11:21:08.322759Z' -> epoch seconds (float); None when absent or unparsable."""
    if not stamp:
        return None
    try:
        base, dummy, frac = stamp.rstrip("Z").partition(".")
        secs = calendar.timegm(time.strptime(base, "%Y-%m-%dT%H:%M:%S"))
        return secs + (float("0." + frac) if frac else 0.0)
    except ValueError:
        return None


class Family(object):
    """One metric family: name, help, type and its samples (labels dict, value)."""

    def __init__(self, name, doc, kind="gauge"):
        self.name, self.doc, self.kind, self.samples = name, doc, kind, []

    def add(self, labels, value):
        self.samples.append((dict(labels), float(value)))


def collect(baseline_dir, report_dir):
    """The metric families of the controller's baselines and bench history, as Family objects."""
    fams = {}
    errors = [0]

    def fam(suffix, doc, kind="gauge"):
        if suffix not in fams:
            fams[suffix] = Family("gpuhost_" + suffix, doc, kind)
        return fams[suffix]

    hosts = {}
    for path in sorted(glob.glob(os.path.join(baseline_dir or "", "*.json"))):
        try:
            with open(path) as f:
                doc = json.load(f)
            fp = doc.get("fingerprint") or {}
            key = doc.get("key") or os.path.basename(path)[:-5]
            host = fp.get("host") or "unknown"
        except (OSError, ValueError, AttributeError):
            errors[0] += 1
            continue
        hosts[key] = host
        ident = {"host": host, "key": key}
        fam("baseline_info", "A stored baseline on the controller (value 1); its fingerprint as labels.").add(
            dict(ident, engine=str(fp.get("engine") or ""), engine_version=str(fp.get("engine_version") or ""),
                 gpu_model=str(fp.get("gpu_model") or ""), gpu_count=str(fp.get("gpu_count") or 0),
                 model=str(fp.get("model") or "")), 1)
        updated = iso_to_epoch(doc.get("updated") or doc.get("created"))
        if updated is not None:
            fam("baseline_updated_timestamp_seconds", "When the baseline was last recorded or replaced.").add(
                ident, updated)
        for conc, level in sorted((doc.get("levels") or {}).items(), key=lambda kv: int(kv[0])):
            for metric, (suffix, scale) in sorted(BASELINE_METRICS.items()):
                m = ((level or {}).get("metrics") or {}).get(metric) or {}
                if m.get("median") is not None:
                    fam("baseline_" + suffix, "Baseline trial median of %s per concurrency level." % metric).add(
                        dict(ident, concurrency=str(conc)), float(m["median"]) * scale)

    latest = {}
    counts = {}
    history = os.path.join(report_dir or "", "history.jsonl")
    if report_dir and os.path.exists(history):
        try:
            with open(history) as f:
                lines = f.readlines()
        except OSError:
            errors[0] += 1
            lines = []
        for line in lines:
            try:
                rec = json.loads(line)
                key, conc = rec["key"], int(rec["concurrency"])
            except (ValueError, KeyError, TypeError):
                errors[0] += 1
                continue
            run = str(rec.get("run_id") or "")
            host = hosts.get(key) or (run.split("-", 1)[1] if "-" in run else "unknown")
            result = "passed" if rec.get("passed") else "failed"
            counts[(host, key, result)] = counts.get((host, key, result), 0) + 1
            latest[(host, key, conc)] = rec
    for (host, key, result), n in sorted(counts.items()):
        fam("bench_levels_total", "Benchmark levels measured (report history lines) by gate result.", "counter").add(
            {"host": host, "key": key, "result": result}, n)
    last_run = {}
    for (host, key, conc), rec in sorted(latest.items()):
        labels = {"host": host, "key": key, "concurrency": str(conc)}
        for field, (suffix, scale) in sorted(HISTORY_METRICS.items()):
            if rec.get(field) is not None:
                fam("bench_" + suffix, "Newest bench level's %s." % field).add(labels, float(rec[field]) * scale)
        fam("bench_passed", "Whether the newest bench level passed its gate (1) or not (0).").add(
            labels, 1 if rec.get("passed") else 0)
        ts = iso_to_epoch(rec.get("ts"))
        if ts is not None:
            last_run[(host, key)] = max(ts, last_run.get((host, key), 0))
    for (host, key), ts in sorted(last_run.items()):
        fam("bench_last_timestamp_seconds", "When the newest bench level of this host and workload was measured.").add(
            {"host": host, "key": key}, ts)
    fam("bench_exporter_read_errors", "Baseline or history entries that could not be read in this scrape.").add(
        {}, errors[0])
    return [fams[k] for k in sorted(fams)]

# -*- coding: utf-8 -*-
# Copyright: gpuhost.sglang contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Latency alert thresholds per serving host, from the benchmark baselines stored on the controller.

A baseline file (bench/store.py: baseline_dir/<key>.json) carries ``fingerprint.host`` and per concurrency level
the trial medians of ``ttft_ms.p99`` and ``itl_ms.p99``. The alert threshold of a host is ``factor`` x the largest
p99 over its baseline levels (the heaviest accepted load: live traffic above the benchmarked range is what the
alert is for) and, when a host has several baselines (several workloads or fingerprints), the most recently
updated one. Hosts without a baseline get no latency alert (reported, not guessed).
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import glob
import json
import os


class ThresholdError(Exception):
    pass


def _p99(doc, metric):
    vals = []
    for level in (doc.get("levels") or {}).values():
        m = ((level or {}).get("metrics") or {}).get(metric) or {}
        if m.get("median") is not None:
            vals.append(float(m["median"]))
    return max(vals) if vals else None


def from_docs(docs, factor=1.5):
    """{host: {ttft_p99_s, itl_p99_s, baseline_key, factor}} from baseline documents (newest per host wins)."""
    if not isinstance(factor, (int, float)) or factor < 1.0:
        raise ThresholdError("monitoring_latency_factor is %r: allowed values are numbers >= 1.0" % (factor,))
    best = {}
    for doc in docs:
        host = ((doc or {}).get("fingerprint") or {}).get("host")
        if not host:
            continue
        stamp = doc.get("updated") or doc.get("created") or ""
        if host in best and best[host][0] >= stamp:
            continue
        ttft, itl = _p99(doc, "ttft_ms.p99"), _p99(doc, "itl_ms.p99")
        entry = {"baseline_key": doc.get("key"), "factor": factor,
                 "ttft_p99_s": round(ttft * factor / 1000.0, 6) if ttft is not None else None,
                 "itl_p99_s": round(itl * factor / 1000.0, 6) if itl is not None else None}
        best[host] = (stamp, entry)
    return dict((h, e) for h, (dummy, e) in best.items())


def from_dir(baseline_dir, factor=1.5):
    """Read every current baseline (not the archive) of ``baseline_dir``; a missing directory means no baselines."""
    docs = []
    for path in sorted(glob.glob(os.path.join(baseline_dir, "*.json"))):
        try:
            with open(path) as f:
                docs.append(json.load(f))
        except ValueError as exc:
            raise ThresholdError("baseline %s is not valid JSON: %s" % (path, exc))
    return from_docs(docs, factor)

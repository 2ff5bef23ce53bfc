# -*- coding: utf-8 -*-
# Copyright: gpuhost.sglang contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""tools/bench_exporter.py: the controller's baselines and bench history as Prometheus metrics, checked by the real
promtool (`promtool check metrics`), a bad file counted instead of failing the scrape."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import json
import os
import subprocess
import sys
import time
import urllib.request

from ansible_collections.gpuhost.sglang.plugins.module_utils.bench import exporter
from ansible_collections.gpuhost.sglang.tests import harness

from fakeserver import free_port  # pylint: disable=import-error
from test_monitoring_rules import PROMTOOL, promtool  # pylint: disable=import-error

TOOL = os.path.join(harness.ROOT, "tools", "bench_exporter.py")
BASELINE = {"key": "k1", "created": "2026-11-30T00:00:00Z", "updated": "2026-12-01T11:21:08.5Z",
            "fingerprint": {"host": "gpu1", "engine": "sglang", "engine_version": "0.5.23", "gpu_model": "RTX PRO 6000",
                            "gpu_count": 8, "model": "/models/GLM-5-NVFP4"},
            "levels": {"1": {"metrics": {"ttft_ms.p99": {"median": 80.0}, "itl_ms.p99": {"median": 10.0},
                                         "output_throughput": {"median": 95.5}}},
                       "16": {"metrics": {"ttft_ms.p99": {"median": 200.0}, "itl_ms.p99": {"median": 20.0}}}}}
# report_dir/history.jsonl lines as serving_bench writes them (fields of reports/history.jsonl)
HISTORY = [
    {"key": "k1", "concurrency": 16, "run_id": "20261130T000000Z-gpu1", "passed": False, "ttft_p99_ms": 900.0,
     "ts": "2026-11-30T00:00:00Z"},
    {"key": "k1", "concurrency": 16, "run_id": "20261201T112058Z-gpu1", "passed": True, "ttft_p99_ms": 210.0,
     "itl_p99_ms": 21.0, "output_throughput": 1234.5, "ts": "2026-12-01T11:21:08.322759Z"},
    {"key": "k9", "concurrency": 1, "run_id": "20261201T000000Z-cpu-box", "passed": True, "ttft_p99_ms": 5.0,
     "ts": "2026-12-01T00:00:00Z"},
]


def write(tmp_path):
    base = tmp_path / "baselines"
    base.mkdir()
    (base / "k1.json").write_text(json.dumps(BASELINE))
    (base / "broken.json").write_text("{not json")
    (tmp_path / "history.jsonl").write_text("\n".join(json.dumps(h) for h in HISTORY) + "\n{truncated\n")
    return str(base), str(tmp_path)


def samples(text):
    out = {}
    for line in text.splitlines():
        if line and not line.startswith("#"):
            name, value = line.rsplit(" ", 1)
            out[name] = float(value)
    return out


def test_collect_baselines_and_newest_history_per_level(tmp_path):
    fams = dict((f.name, f) for f in exporter.collect(*write(tmp_path)))
    s = dict((f.name + json.dumps(sorted(l.items())), v) for f in fams.values() for l, v in f.samples)
    assert s['gpuhost_baseline_ttft_p99_seconds[["concurrency", "16"], ["host", "gpu1"], ["key", "k1"]]'] == 0.2
    assert s['gpuhost_baseline_updated_timestamp_seconds[["host", "gpu1"], ["key", "k1"]]'] == 1796124068.5
    # the newest line per key and level wins; the host comes from the baseline, else from the run id
    assert s['gpuhost_bench_ttft_p99_seconds[["concurrency", "16"], ["host", "gpu1"], ["key", "k1"]]'] == 0.21
    assert s['gpuhost_bench_passed[["concurrency", "1"], ["host", "cpu-box"], ["key", "k9"]]'] == 1
    assert s['gpuhost_bench_levels_total[["host", "gpu1"], ["key", "k1"], ["result", "failed"]]'] == 1
    assert s["gpuhost_bench_exporter_read_errors[]"] == 2          # the broken baseline and the truncated line
    assert exporter.collect(str(tmp_path / "none"), str(tmp_path / "none"))[0].samples == [({}, 0.0)]


def test_exporter_serves_what_promtool_accepts(tmp_path):
    base, reports = write(tmp_path)
    port = free_port()
    proc = subprocess.Popen([sys.executable, TOOL, "--port", str(port), "--baseline-dir", base, "--report-dir", reports],
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        text = None
        for dummy in range(100):
            try:
                with urllib.request.urlopen("http://127.0.0.1:%d/metrics" % port, timeout=5) as resp:
                    ctype, text = resp.headers["Content-Type"], resp.read().decode()
                break
            except OSError:
                time.sleep(0.1)
        assert text, proc.stdout.read() if proc.poll() is not None else "no answer"
    finally:
        proc.terminate()
        proc.wait(10)
    assert ctype.startswith("text/plain; version=0.0.4")
    s = samples(text)
    assert s['gpuhost_bench_output_throughput_tokens_per_second{concurrency="16",host="gpu1",key="k1"}'] == 1234.5
    assert s['gpuhost_bench_levels_total{host="gpu1",key="k1",result="passed"}'] == 1.0
    assert 'model="/models/GLM-5-NVFP4"' in text and "# TYPE gpuhost_bench_levels_total counter" in text
    assert os.access(PROMTOOL, os.X_OK)
    cp = subprocess.run([PROMTOOL, "check", "metrics"], input=text, capture_output=True, text=True, timeout=60,
                        check=False)
    assert cp.returncode == 0, cp.stdout + cp.stderr
    assert promtool("--version").returncode == 0


def test_missing_directory_is_named(tmp_path):
    cp = subprocess.run([sys.executable, TOOL, "--baseline-dir", str(tmp_path / "nope")], capture_output=True,
                        text=True, timeout=60, check=False)
    assert cp.returncode == 2 and "--baseline-dir is '%s': allowed values are existing directories" % (
        tmp_path / "nope") in cp.stderr

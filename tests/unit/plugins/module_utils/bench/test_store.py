# -*- coding: utf-8 -*-
# Copyright: gpuhost.sglang contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
from __future__ import absolute_import, division, print_function

__metaclass__ = type

import json
import os
import xml.etree.ElementTree as ET

import pytest

from ansible_collections.gpuhost.sglang.plugins.module_utils.bench import report as bench_report
from ansible_collections.gpuhost.sglang.plugins.module_utils.bench import store as bench_store


def agg(tput, tpot, spread=0.0):
    return {"output_throughput": {"median": tput, "spread": spread}, "tpot_ms.p50": {"median": tpot, "spread": spread},
            "ttft_ms.p50": {"median": 50.0, "spread": spread}}


def test_key_depends_on_fingerprint_and_workload_only():
    k = bench_store.fingerprint_key({"gpu": "H200", "count": 8}, {"input_len": 1})
    assert k == bench_store.fingerprint_key({"count": 8, "gpu": "H200"}, {"input_len": 1})
    assert k != bench_store.fingerprint_key({"gpu": "H200", "count": 4}, {"input_len": 1})
    assert k != bench_store.fingerprint_key({"gpu": "H200", "count": 8}, {"input_len": 2})


def test_record_keep_replace_archive_and_history(tmp_path):
    d = str(tmp_path)
    assert bench_store.record_level(d, "k", {"h": 1}, {"w": 1}, 16, agg(100, 10), 1, "run1") == "recorded"
    assert bench_store.record_level(d, "k", {"h": 1}, {"w": 1}, 16, agg(50, 20), 1, "run2") == "kept"
    assert bench_store.load_baseline(d, "k")["levels"]["16"]["run_id"] == "run1"
    assert bench_store.record_level(d, "k", {"h": 1}, {"w": 1}, 64, agg(300, 12), 1, "run2") == "recorded"
    assert bench_store.record_level(d, "k", {"h": 1}, {"w": 1}, 16, agg(90, 11), 1, "run3", replace=True) == "replaced"
    doc = bench_store.load_baseline(d, "k")
    assert doc["levels"]["16"]["run_id"] == "run3" and doc["levels"]["64"]["run_id"] == "run2"
    archived = os.listdir(os.path.join(d, "archive"))
    assert len(archived) == 1
    with open(os.path.join(d, "archive", archived[0])) as f:
        assert json.load(f)["levels"]["16"]["run_id"] == "run1"
    events = [(e["event"], e["concurrency"]) for e in bench_store.read_jsonl(os.path.join(d, "history.jsonl"))]
    assert events == [("recorded", 16), ("recorded", 64), ("replaced", 16)]
    assert not [f for f in os.listdir(d) if f.startswith(".tmp-")]


def test_compare_threshold_is_max_of_tolerance_and_noise():
    base = {"metrics": agg(100.0, 10.0)}
    checks = {c["metric"]: c for c in bench_store.compare(agg(85.0, 10.5), base, ["output_throughput", "tpot_ms.p50"],
                                                          0.1)}
    assert not checks["output_throughput"]["passed"]          # 15% worse > 10%
    assert checks["output_throughput"]["delta_pct"] == pytest.approx(15.0)
    assert checks["tpot_ms.p50"]["passed"]                      # 5% worse
    noisy = {c["metric"]: c for c in bench_store.compare(agg(85.0, 10.0, spread=0.2), base, ["output_throughput"], 0.1)}
    assert noisy["output_throughput"]["passed"] and noisy["output_throughput"]["threshold"] == pytest.approx(0.2)
    better = bench_store.compare(agg(200.0, 5.0), base, ["output_throughput", "tpot_ms.p50"], 0.1)
    assert all(c["passed"] for c in better)


def test_latency_floor_ignores_sub_millisecond_noise():
    base = {"metrics": {"tpot_ms.p50": {"median": 1.0, "spread": 0.0}}}
    now = {"tpot_ms.p50": {"median": 1.5, "spread": 0.0}}
    assert bench_store.compare(now, base, ["tpot_ms.p50"], 0.1, min_abs_ms=1.0)[0]["passed"]
    assert not bench_store.compare(now, base, ["tpot_ms.p50"], 0.1, min_abs_ms=0.1)[0]["passed"]


def test_append_jsonl_skips_a_torn_last_line(tmp_path):
    p = str(tmp_path / "h.jsonl")
    bench_store.append_jsonl(p, {"a": 1})
    with open(p, "a") as f:
        f.write('{"a": 2')  # a crash mid-write
    bench_store.append_jsonl(p, {"a": 3})
    assert [x["a"] for x in bench_store.read_jsonl(p)] == [1, 3]  # the torn line is skipped, nothing else lost


def level(c, tput, client_bound=False, coherent=8, errors=None):
    return {"concurrency": c, "output_throughput": tput, "total_throughput": 2 * tput, "peak_output_throughput": 3 * tput,
            "tpot_ms": {"mean": 30.0, "p50": 20.5}, "ttft_ms": {"p50": 100.0, "p99": 250.0}, "itl_ms": {"p99": 40.0},
            "completed": 8, "coherent": coherent, "requests": 8, "errors": errors or {}, "client_bound": client_bound,
            "regression": {"checks": [{"metric": "output_throughput", "baseline": 100.0, "now": tput,
                                       "delta_pct": 10.0, "threshold": 0.1, "passed": tput >= 90}]}}


def test_markdown_table_and_junit(tmp_path):
    probes = [{"name": "capital", "passed": True},
              {"name": "gold", "passed": False, "class": "incoherent", "expect": "Au", "answer": "Ag"}]
    run = {"run_id": "r1", "fingerprint": {"gpu": "H200"},
           "levels": {"256": level(256, 1520.55, True), "1": level(1, 9.17, coherent=5)},
           "coherence": {"passed": True, "probes_passed": 8, "probes_total": 8, "class": "ok", "probes": probes}}
    lines = bench_report.table_lines(list(run["levels"].values()))
    assert lines[0] == bench_report.HEADER[0]
    assert lines[2] == "| 1 | 9.17 | 18.34 | 28 | 20.50 | 100.0/250.0 | 40.0 | 0 | NO (5/8) |"
    assert lines[3] == "| 256 | 1,521 | 3,041 | 4,562 | 20.50 | 100.0/250.0* | 40.0 | 0 | yes (8/8) |"
    md = bench_report.markdown(run)
    assert "client-bound" in md and "REGRESSION" in md
    root = ET.fromstring(bench_report.junit(run))
    fails = [tc.get("name") for tc in root.iter("testcase") if tc.find("failure") is not None]
    assert "probe gold" in fails and "output_throughput" in fails and "coherent output" not in fails
    assert root.get("failures") == str(len(fails))
    files, warns = bench_report.write_reports(str(tmp_path), run, make_plots=True)
    assert os.path.isfile(str(tmp_path / "r1.md")) and os.path.isfile(str(tmp_path / "latest.md"))
    if not warns:
        assert str(tmp_path / "r1-throughput.png") in files
        with open(str(tmp_path / "r1-throughput.png"), "rb") as f:
            assert f.read(8) == b"\x89PNG\r\n\x1a\n"


def test_table_names_each_statistic_and_shows_what_the_gate_compares():
    # the table showed TPOT mean while the gate and progress log use p50
    lv = level(4, 100.0, True)
    lv["tpot_ms"] = {"mean": 30.0, "p50": 20.0, "p99": 90.0}
    lines = bench_report.table_lines([lv])
    assert "TPOT p50 ms" in lines[0] and "TPOT ms |" not in lines[0]
    assert "| 20.00 |" in lines[2] and "30.00" not in lines[2]


def test_table_row_with_trials_shows_the_medians_the_gate_compared():
    lv = level(4, 100.0, True)
    lv["trials"] = {"n": 3, "metrics": {"output_throughput": {"median": 95.0, "spread": 0.05},
                                        "tpot_ms.p50": {"median": 22.0, "spread": 0.05},
                                        "ttft_ms.p50": {"median": 111.0, "spread": 0.05}}}
    row = bench_report.table_lines([lv])[2]
    assert "95.00" in row and "22.00" in row and "111.0" in row and "100.00" not in row


def test_failed_requests_are_not_shown_as_incoherent_output():
    lv = level(2, 50.0, True)
    lv.update(requests=8, completed=6, coherent=6, incoherent=0, errors={"http_5xx": 2})
    row = bench_report.table_lines([lv])[2]
    assert "6/6" in row and "http_5xx=2" in row and "NO (6/8)" not in row


def test_the_baseline_writer_refuses_unverified_counts(tmp_path):
    agg = {"output_throughput": {"median": 100.0, "spread": 0.0}}
    with pytest.raises(bench_store.BaselineRefused) as e:
        bench_store.record_level(str(tmp_path), "k", {}, {}, 4, agg, 1, "r", extra={
            "counts": "unverified", "counts_reason": "c=4: token counts unverified: ... (SGLang: --enable-metrics)"})
    assert str(e.value).startswith("c=4: no baseline recorded: c=4: token counts unverified")
    assert os.listdir(str(tmp_path)) == []
    assert bench_store.record_level(str(tmp_path), "k", {}, {}, 4, agg, 1, "r", extra={"counts": "verified"}) == "recorded"

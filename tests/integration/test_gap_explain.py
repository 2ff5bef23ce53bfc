# -*- coding: utf-8 -*-
# Copyright: gpuhost.sglang contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""benchmarks/gpu/sglang/gap_explain.py on a synthetic run: the server's window of a tool's main requests (the
anchor's warmup and the second of idle after it left out), records attributed to runs by their arrival time, and a
ground-truth line, or 'unexplained', for every difference over 5%."""
from __future__ import absolute_import, division, print_function

__metaclass__ = type

import json
import lzma
import os

import pytest

ROOT = os.path.abspath(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))


@pytest.fixture
def gx(monkeypatch):
    monkeypatch.syspath_prepend(os.path.join(ROOT, "benchmarks", "gpu", "sglang"))
    import gap_explain  # pylint: disable=import-error
    return gap_explain


def rec(rcv, fin, ct=64, cached=0, prompt=50):
    return {"request_received_ts": rcv, "request_finished_ts": fin, "response_sent_to_client_ts": rcv + 0.02,
            "completion_tokens": ct, "decode_throughput": (ct - 1) / (fin - rcv - 0.02), "cached_tokens": cached,
            "prompt_tokens": prompt}


def anchor_run(t0, cached=45):
    """bench_serving's shape: one warmup request of 32 tokens, a second of sleep, then 4 requests over 2 s."""
    recs = [rec(t0 + 0.1, t0 + 0.2, ct=32)]
    recs += [rec(t0 + 1.2 + 0.1 * i, t0 + 3.2, cached=cached) for i in range(4)]
    return recs


def test_the_anchor_window_leaves_out_its_warmup_and_idle(gx):
    w = gx.window(anchor_run(1000.0), warmups=1)
    assert w["requests"] == 4 and w["tokens"] == 256 and w["span_s"] == 2.0 and w["rate"] == 128.0
    assert w["whole_span_s"] == 3.1 and w["whole_rate"] == round(288 / 3.1, 1)
    assert w["idle_after_warmup_s"] == 1.0 and w["cached_share"] == 0.9 and w["ttft_p50_ms"] == 20.0


def test_records_are_attributed_by_arrival_time_not_read_order(gx):
    recs = anchor_run(1000.0) + [rec(1004.0, 1005.0)]  # a late record of the next run, read with this one
    assert len(gx.attribute(recs, 1000.0, 1003.5)) == 5


def test_rows_without_full_records_are_rebuilt_from_the_compact_arrays(gx):
    row = {"t0": 500.0, "server_per_request": [[0.1, 0.1005, 0.12, 0.2, 0.121, 64]]}
    r = gx.records_from_row(row)[0]
    assert r["request_received_ts"] == 500.1 and r["request_finished_ts"] == 500.2 and r["completion_tokens"] == 64
    assert abs(1000.0 / r["decode_throughput"] - 80.0 / 63) < 1e-6


def write_run(tmp_path, rows, records):
    raw = tmp_path / "gap-raw.jsonl"
    raw.write_text("".join(json.dumps(r) + "\n" for r in rows))
    srv = tmp_path / "server-requests.jsonl.xz"
    with lzma.open(str(srv), "wt") as f:
        for r in records:
            f.write(json.dumps(r) + "\n")
    return str(raw), str(srv)


def test_every_difference_over_five_percent_gets_a_line(gx, tmp_path):
    ours = [rec(2000.0 + 0.1 * i, 2002.5) for i in range(4)]  # 256 tokens over 2.5 s, nothing cached
    rows = [{"tool": "anchor", "c": 4, "num_prompts": 4, "round": 1, "t0": 1000.0, "run_wall_s": 3.5,
             "out_tok_s": 256 / 2.01, "duration_s": 2.01, "tpot_p50_ms": 2.0, "ttft_p50_ms": 25.0},
            {"tool": "ours", "c": 4, "num_prompts": 4, "round": 1, "t0": 2000.0, "run_wall_s": 3.0,
             "out_tok_s": 256 / 2.4, "duration_s": 2.4, "tpot_p50_ms": 2.5, "ttft_p50_ms": 21.0}]
    raw, srv = write_run(tmp_path, rows, anchor_run(1000.0) + ours)
    text = gx.report(gx.load(raw, srv))
    assert "4 | 4 | anchor | 1 | 127 | 128 | -0.5% | 93 | 1.00 | 90 |" in text
    assert ("anchor c=4 x 4: +37.1% against the server's whole-run window, -0.5% against its main requests' window: "
            "the whole window holds 1 warmup request(s) and 1.00 s idle after them") in text
    assert ("anchor vs ours c=4 x 4: server-window rate 128 vs 102 tok/s (+25.0%)" in text and
            "90% vs 0% of the prompt tokens were already in the radix cache" in text)
    assert ("ours c=4 x 4: TPOT p50 2.50 ms at the client, 36.98 ms by the server's timestamps (-93.2%): outside the "
            "server's timers, unexplained by these records") in text
    assert "TTFT p50 21.00" not in text  # 21 vs 20 ms: over 5% but within 1 ms
    # the same rates with the same prompts (no cache difference) and no eviction counters: nothing explains it
    raw, srv = write_run(tmp_path, rows, anchor_run(1000.0, cached=0) + ours)
    text = gx.report(gx.load(raw, srv))
    assert text.splitlines()[-1].endswith("(+25.0%), server TPOT p50 29.05 vs 36.98 ms: unexplained")


def test_a_tool_clock_longer_than_the_server_window_is_named(gx):
    a = gx.analyse_run({"tool": "anchor", "c": 256, "num_prompts": 4, "t0": 1000.0, "run_wall_s": 4.0,
                        "out_tok_s": 256 / 2.5, "duration_s": 2.5}, anchor_run(1000.0))
    line = gx.explain_tool(a)
    assert "-20.0% against the server's main-request window: the tool's clock ran 0.500 s longer" in line
    assert "first request reached the server 0.000 s after the 1 s sleep" in line


def test_the_scheduler_log_lines_are_read(gx):
    log = ("[2026-12-03 06:00:48] Decode batch, #running-req: 16, #token: 953, token usage: 0.01, cuda graph: False, "
           "gen throughput (token/s): 4363.09, #queue-req: 0\n[2026-12-03 06:00:48] Prefill batch, #new-seq: 1\n")
    assert gx.decode_lines(log) == [(1796277648, 16, 4363.09)]

# -*- coding: utf-8 -*-
# Copyright: gpuhost.sglang contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""benchmarks/gpu/sglang/sidebyside.py, the side-by-side analysis of the H200's next round, on the files the last
round recorded on the H200 (benchmarks/results/2026-12-03-h200-sglang0517-explain-*, read from their .xz here): its
figures must be the ones that run's summary printed, and the TTFT split by the server's own timestamps must add up
to the client's median. The new figures (GPU busy share, the GPU-bound verdict) on a row shaped as gap.py writes it."""
from __future__ import absolute_import, division, print_function

__metaclass__ = type

import os

import pytest

ROOT = os.path.abspath(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))
REC = os.path.join(ROOT, "benchmarks", "results", "2026-12-03-h200-sglang0517-explain-")


@pytest.fixture(scope="module")
def sbs():
    import sys
    sys.path.insert(0, os.path.join(ROOT, "benchmarks", "gpu", "sglang"))
    try:
        import sidebyside  # pylint: disable=import-error
    finally:
        sys.path.pop(0)
    return sidebyside


@pytest.fixture(scope="module")
def recorded(sbs):
    analyses = sbs.load(REC + "gap-raw.jsonl.xz", REC + "server-requests.jsonl.xz")
    return analyses, sbs.report(analyses)


def summary_tables():
    """The recorded summary's two tables: {(c, arm): cells} of each."""
    with open(REC + "gap-summary.txt") as f:
        blocks = [b for b in f.read().split("\n\n") if " | " in b]
    first = [line for line in blocks[0].splitlines() if line.count(" | ") > 10]
    second = blocks[1].splitlines()
    return cells(first), cells(second)


def cells(lines):
    """{(c, arm): the row's cells} of a table's lines (the header first)."""
    return dict(((int(x[0]), x[2]), x) for x in (line.split(" | ") for line in lines[1:]))


def table(text):
    return cells(text.split("\n\n")[0].splitlines())


def test_the_figures_are_the_recorded_summarys(recorded):
    _analyses, text = recorded
    first, second = summary_tables()
    ours = table(text)
    assert sorted(ours) == sorted(second) and len(ours) == 13
    for key, cells in second.items():
        got = ours[key]
        # tool tok/s, server-window tok/s, tool vs server; the TTFT p50s, tool (server)
        assert got[4:7] == cells[4:7], (key, got, cells)
        assert got[11] == cells[12], (key, got, cells)
        # the scheduler's CPU share: the summary printed the last run's, this the median over the runs
        sched = float(first[key][12].split()[-1])
        assert first[key][12].startswith("sglang::schedul") and abs(float(got[9]) - sched) <= 0.02, (key, got[9], sched)
        assert got[10] == "-"  # no GPU sampler in that run


def test_the_verdicts_on_the_recorded_run(recorded):
    _analyses, text = recorded
    assert "anchor-oai c=256 x 2048 vs ours: server-window rate 9654 vs 9486 tok/s (+1.8%): within 2%" in text
    assert "anchor-oai c=16 x 640 vs ours: server-window rate 3176 vs 4471 tok/s (-29.0%): OUTSIDE 2%" in text
    assert text.count("tool vs server window") == 13 and "tool vs server window" in text
    assert [line for line in text.splitlines() if "tool vs server window" in line and "OUTSIDE" in line] == []


def test_ours_ttft_is_split_by_the_servers_timestamps(recorded):
    """Client TTFT = server (received to first chunk sent) + arrival + delivery, within 10% at every level: the
    2-187 ms the last round left unexplained is mostly arrival, before the server's clock starts."""
    analyses, _text = recorded
    parts = [a["ttft"] for a in analyses if a["arm"] == "ours"]
    assert len(parts) == 7
    for t in parts:
        assert abs(t["residual"]) <= 0.1 * t["client"], t
        assert t["arrival"] > 0 and t["delivery"] > 0, t
    by_c = dict((a["c"], a["ttft"]) for a in analyses if a["arm"] == "ours" and a["round"] == 1)
    assert by_c[1]["arrival"] < 2 and by_c[16]["arrival"] > 5 and by_c[256]["arrival"] > 20  # grows with load


def test_gpu_busy_share_and_scheduler_are_read_from_the_row(sbs):
    recs = [[0.01 * i, 0.01 * i, 0.02 + 0.01 * i, 1.0, 0.021 + 0.01 * i, 64, 0, 50] for i in range(4)]
    clients = [[0.01 * i - 0.001, 0.023, 1.0, 64, 0.01] for i in range(4)]
    row = {"tool": "ours", "arm": "ours", "c": 4, "num_prompts": 4, "round": 1, "t0": 100.0, "run_wall_s": 1.1,
           "out_tok_s": 256 / 1.0, "duration_s": 1.0, "ttft_p50_ms": 23.0, "output_tokens": 256,
           "server_counters": {"generation_tokens": 256.0}, "server_per_request": recs, "client_per_request": clients,
           "server_cpu_util": [["python3", 1.3], ["sglang::schedul", 0.41]],
           "gpu": {"samples": 10, "util_mean": 97.0, "sm_util": 71.4}}
    a = sbs.analyse(row)
    assert a["scheduler"] == 0.41 and a["gpu_busy"] == 97.0
    assert a["ttft"] == {"client": 23.0, "server": 21.0, "arrival": 1.0, "delivery": 1.0, "residual": 0.0}
    text = sbs.report([a])
    assert "ours c=4 x 4: GPU busy 97% (SMs busy 71%), scheduler CPU 0.41: GPU-bound" in text
    assert "| 0.41 | 97% (71%) |" in text
    a["gpu_busy"], a["sm_busy"] = 60.0, None
    assert "GPU busy 60%, scheduler CPU 0.41: not GPU-bound (GPU busy under 90%)" in sbs.report([a])

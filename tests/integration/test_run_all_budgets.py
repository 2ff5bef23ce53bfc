# Copyright: (c) 2026, gpuhost.sglang contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""tests/run-all.sh's budgets (tests/stages/budgets): run on a copy of the script beside fake stages, it prints a
warning for a stage over its budget, for a stage without one and for a bad budget line, states the total against
the goal and the limit, warns past either, and keeps the stages' result as its exit status (a warning, not a
failure)."""
from __future__ import annotations

import os
import re
import shutil
import subprocess

from ansible_collections.gpuhost.sglang.tests import harness

RUN_ALL = os.path.join(harness.ROOT, "tests", "run-all.sh")
REAL_BUDGETS = os.path.join(harness.ROOT, "tests", "stages", "budgets")


def make_tree(tmp_path, stages, budgets):
    """A checkout-shaped tree: tests/run-all.sh (the real one) and tests/stages/{NAME.sh, budgets}."""
    (tmp_path / "tests" / "stages").mkdir(parents=True)
    shutil.copy(RUN_ALL, tmp_path / "tests" / "run-all.sh")
    for name, body in stages.items():
        (tmp_path / "tests" / "stages" / (name + ".sh")).write_text("#!/usr/bin/env bash\n" + body + "\n")
    (tmp_path / "tests" / "stages" / "budgets").write_text(budgets)
    return tmp_path


def run_all(tree, *args, **env):
    environ = dict(os.environ, **{"GPUHOST_OVERLAP": "", **env})
    environ.pop("GPUHOST_BUDGETS", None)
    proc = subprocess.run(["bash", str(tree / "tests" / "run-all.sh"), *args], env=environ, capture_output=True,
                          text=True, timeout=60, check=False)
    return proc.returncode, proc.stdout + proc.stderr


def test_stage_over_budget_and_run_over_goal_warn_without_failing(tmp_path):
    tree = make_tree(tmp_path, {"10-slow": "sleep 1.2", "20-fast": "true", "30-unbudgeted": "true"},
                     "# stage seconds\ngoal 0\nlimit 3600\n10-slow 0\n20-fast 60\n")
    rc, out = run_all(tree)
    assert rc == 0, out
    assert re.search(r"(?m)^10-slow +ok +[1-9]\d*s  budget +0s  cpu busy +\d+%$", out), out
    assert re.search(r"(?m)^WARNING: stage 10-slow took [1-9]\d*s, over its budget of 0s \(tests/stages/budgets\)$", out), out
    assert "WARNING: stage 20-fast" not in out, out
    assert "WARNING: stage 30-unbudgeted has no budget in tests/stages/budgets" in out, out
    total = re.search(r"(?m)^total: (\d+)s \(\d+:\d\d\) against the goal of 0s \(0:00\) and the limit of 3600s \(60:00\)$", out)
    assert total and int(total.group(1)) >= 1, out
    assert re.search(r"(?m)^WARNING: the run took \d+s, over the goal of 0s$", out), out
    assert "over the limit" not in out, out


def test_run_within_budgets_prints_no_warning_and_a_failed_stage_still_fails(tmp_path):
    tree = make_tree(tmp_path, {"10-a": "true", "20-b": "exit 3"}, "goal 600\nlimit 900\n10-a 60\n20-b 60\n")
    rc, out = run_all(tree)
    assert rc == 1, out
    assert "WARNING" not in out, out
    # two instant stages can still cross a second boundary: the total is 0 or 1 s
    assert re.search(r"(?m)^total: [01]s \(0:0[01]\) against the goal of 600s \(10:00\) and the limit of 900s \(15:00\)$", out), out
    assert "failed stages: 20-b" in out, out


def test_a_stage_that_keeps_every_cpu_busy_shows_it(tmp_path):
    """The summary's cpu busy column is the machine's busy share during the stage: a stage spinning one loop per
    CPU for 1.5 s shows at least 80 % whatever else runs (the share counts every process on the machine)."""
    spin = 'for i in $(seq "$(getconf _NPROCESSORS_ONLN)"); do timeout 1.5 sh -c "while :; do :; done" & done; wait; exit 0'
    tree = make_tree(tmp_path, {"10-spin": spin}, "goal 600\nlimit 900\n10-spin 60\n")
    rc, out = run_all(tree)
    assert rc == 0, out
    busy = re.search(r"(?m)^10-spin +ok +\d+s  budget +60s  cpu busy +(\d+)%$", out)
    assert busy and 80 <= int(busy.group(1)) <= 100, out
    assert re.search(r"(?m)^cpu busy over the whole run: \d+% of \d+ CPUs$", out), out
    assert re.search(r"(?m)^\(cpu busy: the share of the machine's \d+ CPUs in use during the stage", out), out


def test_over_the_limit_and_a_bad_budget_line(tmp_path):
    tree = make_tree(tmp_path, {"10-slow": "sleep 1.2"}, "goal 0\nlimit 0\n10-slow ten\n")
    rc, out = run_all(tree)
    assert rc == 0, out
    assert "WARNING: tests/stages/budgets: budget of 10-slow is 'ten': allowed values are whole seconds (0 or more)" in out
    assert "WARNING: stage 10-slow has no budget in tests/stages/budgets" in out, out
    assert re.search(r"(?m)^WARNING: the run took [1-9]\d*s, over the limit of 0s: a CI run this long lands nothing$", out), out
    assert "over the goal" not in out, out  # the limit's warning replaces the goal's


def test_the_collection_budgets_cover_every_stage():
    """Every stage script has a budget, and the budgets of the stages that run in order fit the goal."""
    budgets = {}
    with open(REAL_BUDGETS, encoding="utf-8") as fh:
        for line in fh:
            fields = line.split("#", 1)[0].split()
            if fields:
                assert len(fields) == 2 and fields[1].isdigit(), "bad budget line: %r" % line
                budgets[fields[0]] = int(fields[1])
    stages = sorted(f[:-3] for f in os.listdir(os.path.dirname(REAL_BUDGETS)) if f.endswith(".sh"))
    assert sorted(k for k in budgets if k not in ("goal", "limit")) == stages
    assert (budgets["goal"], budgets["limit"]) == (20 * 60, 90 * 60)  # CI's 20 minutes, its 90-minute hard limit
    # stages that run beside another one (tests/run-all.sh's GPUHOST_OVERLAP default) add no wall time
    with open(RUN_ALL, encoding="utf-8") as fh:
        overlap = re.search(r"overlap=\$\{GPUHOST_OVERLAP-([^}]*)\}", fh.read()).group(1).split()
    beside = dict(pair.split(":")[::-1] for pair in overlap)  # the stage run beside -> "A" or "A..C" it runs beside
    wall = {k: budgets[k] for k in stages if k not in beside}
    for bg, fg in beside.items():
        first, last = fg.split("..") if ".." in fg else (fg, fg)
        span = [k for k in stages if first <= k <= last and k != bg]
        assert span, (bg, fg)
        wall[span[-1]] = max(sum(wall.pop(k) for k in span), budgets[bg])
    assert sum(wall.values()) <= budgets["goal"], wall


OVERLAP_STAGES = {
    # 10-a and 15-b each wait up to TRIES x 0.1 s (5 s) for a mark that only 20-c, run beside them, makes: they pass
    # only when 20-c runs at the same time as both; 20-c passes only when it sees 15-b start.
    "10-a": "for i in $(seq ${TRIES:-50}); do [ -e c-started ] && exit 0; sleep 0.1; done; exit 1",
    "15-b": "touch b-started; for i in $(seq ${TRIES:-50}); do [ -e c-started ] && exit 0; sleep 0.1; done; exit 1",
    "20-c": "touch c-started; echo c-log; for i in $(seq ${TRIES:-50}); do [ -e b-started ] && exit 0; sleep 0.1; done; exit 4",
    "30-d": "[ -e c-started ] && [ -e b-started ]",
}


def test_a_stage_runs_beside_a_range_of_stages(tmp_path):
    """GPUHOST_OVERLAP="A..C:B": B starts with A, runs beside every stage up to C, its log comes after C's."""
    tree = make_tree(tmp_path, OVERLAP_STAGES, "goal 600\nlimit 900\n10-a 60\n15-b 60\n20-c 60\n30-d 60\n")
    rc, out = run_all(tree, GPUHOST_OVERLAP="10-a..15-b:20-c")
    assert rc == 0, out
    banners = re.findall(r"(?m)^=+ stage (.*?) =+$", out)
    assert banners == ["10-a", "15-b", "20-c (ran beside 10-a, 15-b)", "30-d"], out
    assert out.index("c-log") > out.index("stage 20-c (ran beside"), out
    assert re.search(r"(?m)^20-c +ok +\d+s  budget +60s  cpu busy +(\d+%|-) \(beside 10-a, 15-b\)$", out), out
    assert "stages: 4 passed, 0 failed" in out, out


def test_a_range_shrinks_to_the_selected_stages_and_empty_overlap_runs_in_order(tmp_path):
    tree = make_tree(tmp_path, OVERLAP_STAGES, "goal 600\nlimit 900\n10-a 60\n15-b 60\n20-c 60\n30-d 60\n")

    def run(*args, overlap="10-a..15-b:20-c", tries="5"):  # the runs that fail wait 0.5 s per stage
        for mark in ("b-started", "c-started"):
            (tree / mark).unlink(missing_ok=True)
        return run_all(tree, *args, GPUHOST_OVERLAP=overlap, TRIES=tries)

    rc, out = run("1[05]*")  # 20-c not selected: nothing runs beside 10-a and 15-b
    assert rc == 1 and "failed stages: 10-a 15-b" in out and "ran beside" not in out, out
    rc, out = run("[!1]*")  # no stage of the range selected: 20-c runs in order and never sees 15-b start
    assert rc == 1 and "failed stages: 20-c 30-d" in out and "ran beside" not in out, out
    rc, out = run("[!0]*", overlap="15-b..15-b:20-c 40-x:30-d", tries="50")  # a one-stage range; a pair of a missing stage
    assert rc == 1 and "failed stages: 10-a" in out and "stage 20-c (ran beside 15-b)" in out, out
    rc, out = run(overlap="")  # in order: 10-a and 15-b find no mark of 20-c
    assert rc == 1 and "failed stages: 10-a 15-b" in out and "ran beside" not in out, out

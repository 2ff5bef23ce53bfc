# -*- coding: utf-8 -*-
# Copyright: gpuhost.sglang contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""playbooks/bench.yml end to end with ansible-playbook (the module travels through AnsiballZ, the client
forks its shards inside it) against loopback fake servers: -e concurrency as an int, a comma list and a
YAML list; one task per level; the table printed at the end; a failing server fails the play with the
class, after the table and reports were written."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import json
import os
import subprocess
import sys

import pytest

from ansible_collections.gpuhost.sglang.tests import harness
from fakeserver import ROOT, fake_server  # pylint: disable=import-error

# Each test starts its own fake server on a free port and writes under its own tmp_path: stage 30's workers may run
# them side by side (tests/conftest.py)
XDIST_SCOPE = "test"


def run_playbook(tmp_path, url, *extra, lengths=True):
    port = url.rsplit(":", 1)[1]
    inv = tmp_path / "hosts.yml"
    inv.write_text(
        "all:\n  children:\n    sglang_servers:\n      hosts:\n        fakehost:\n"
        "          ansible_connection: local\n          ansible_host: 127.0.0.1\n"
        "          ansible_python_interpreter: %s\n          sglang_port: %s\n" % (sys.executable, port))
    rep = tmp_path / "reports"
    env = harness.ansible_env(PATH=os.path.dirname(sys.executable) + os.pathsep + os.environ.get("PATH", ""))
    cmd = ["ansible-playbook", "-i", str(inv), os.path.join(ROOT, "playbooks", "bench.yml"),
           "-e", "bench_report_dir=%s" % rep, "-e", "bench_min_duration_s=0", "-e", "bench_min_requests=1"]
    cmd += ["-e", "input_len=8", "-e", "output_len=16"] if lengths else []
    cmd += list(extra)
    cp = subprocess.run(cmd, capture_output=True, text=True, env=env, cwd=ROOT, timeout=600, check=False)
    return cp, rep


def assert_levels_and_reports(cp, rep, levels):
    """One loop item and one table row per level, one run file with those levels, the reports written; and no
    accuracy request without -e bench_accuracy=true (a first run with it would record the reference and say so)."""
    out = cp.stdout
    assert cp.returncode == 0, out[-3000:] + cp.stderr[-2000:]
    for lv in levels:
        assert "(item=%d)" % lv in out  # one loop item per level: progress in the play output
    assert "| Concurrency | Output tok/s | Total tok/s | Peak tok/s (1 s) | TPOT p50 ms | TTFT p50/p99 ms | ITL p99 ms " \
        "| Errors | Coherent |" in out
    for lv in levels:
        assert "| %d | " % lv in out
    # under the table, the legend of every mark a row can carry, whether this run's rows carry it or not
    table_at = out.index("| Concurrency | Output tok/s")
    for mark, words in (("*", "client-bound"), ("~", "first-window outlier"), ("?", "token counts unverified")):
        legend = "`%s` %s" % (mark, words)
        assert legend in out and out.index(legend) > table_at, (legend, out[table_at:table_at + 3000])
    runs = os.listdir(rep / "runs")
    runs = [r for r in runs if r.endswith(".json")]
    assert len(runs) == 1
    doc = json.loads((rep / "runs" / runs[0]).read_text())
    assert sorted(int(k) for k in doc["levels"]) == levels
    assert doc["coherence"]["passed"] is True
    assert doc["fingerprint"]["host"] == "fakehost" and int(doc["fingerprint"]["gpu_count"]) == 0
    assert os.path.isfile(rep / "latest.md") and os.path.isfile(rep / "progress.log")
    assert os.listdir(rep / "baselines")
    assert "measured score" not in out and "accuracy gate" not in out
    return doc


# concurrency as an int: test_bench_playbook_chat_probes_ask_a_reasoning_model_to_skip_thinking (-e concurrency=2)
@pytest.mark.parametrize("conc,levels", [("1,4", [1, 4]), ('{"concurrency": [2, 1]}', [1, 2])])
def test_bench_playbook_levels_and_table(tmp_path, conc, levels):
    with fake_server("ok") as (url, dummy):
        cp, rep = run_playbook(tmp_path, url, "-e", conc if conc.startswith("{") else "concurrency=" + conc)
    assert_levels_and_reports(cp, rep, levels)


def test_bench_playbook_failure_prints_table_and_class(tmp_path):
    with fake_server("disconnect") as (url, dummy):
        cp, rep = run_playbook(tmp_path, url, "-e", "concurrency=1,2", "-e", "bench_warmup=0",
                               "-e", "bench_ignore_eos=false")
    out = cp.stdout
    assert cp.returncode != 0
    assert "serving_bench failed [disconnected]" in out
    assert "Traceback" not in out
    assert "| Concurrency | Output tok/s" in out  # table printed by the always: section
    assert "disconnected=8 | NO (0/0)" in out  # failed requests are errors, not incoherent output
    assert os.path.isfile(rep / "latest.md")


def test_bench_playbook_chat_probes_ask_a_reasoning_model_to_skip_thinking(tmp_path):
    """bench_api=chat against a GLM-5-like server (the template opens <think>, --reasoning-parser glm45): the
    probes carry the engine's probe_chat_fields (roles/sglang/vars/main.yml) and pass at the first attempt; the
    concurrency given as an int is one level."""
    with fake_server("ok", "--reasoning", "open", "--reasoning-parser") as (url, dummy):
        cp, rep = run_playbook(tmp_path, url, "-e", "concurrency=2", "-e", "bench_api=chat")
    coh = assert_levels_and_reports(cp, rep, [2])["coherence"]
    assert coh["passed"] and coh["chat_fields"] == {"chat_template_kwargs": {"enable_thinking": False}}
    assert coh["retried"] == 0 and all(v["answer"].strip() == v["expect"] + "." for v in coh["probes"])


def test_bench_playbook_rejects_bad_concurrency(tmp_path):
    with fake_server("ok") as (url, dummy):
        cp, dummy = run_playbook(tmp_path, url, "-e", "concurrency=abc")
    assert cp.returncode != 0
    assert "concurrency=abc is invalid: allowed an int >= 1" in cp.stdout


@pytest.mark.parametrize("var,value", [("output_len", "0"), ("input_len", "-1"), ("concurrency", "8,8")])
def test_bench_playbook_validation_names_the_wrong_variable(tmp_path, var, value):
    # output_len=0 was reported as "concurrency=16 must be an int >= 1 ..."
    cp, dummy = run_playbook(tmp_path, "http://127.0.0.1:9", "-e", "%s=%s" % (var, value))
    assert cp.returncode != 0
    msg = [ln for ln in cp.stdout.splitlines() if "is invalid" in ln or "must be" in ln]
    assert any(("%s=%s" % (var, value)) in ln for ln in msg), cp.stdout[-2000:]
    others = {"output_len", "input_len", "concurrency"} - {var}
    assert not any(("%s=" % o) in ln for ln in msg for o in others), cp.stdout[-2000:]


def test_bench_playbook_accuracy_gate_records_then_fails_changed_answers(tmp_path):
    """-e bench_accuracy=true: the first run records the reference, a run against a server whose answers changed
    fails with both scores."""
    args = ("-e", "concurrency=2", "-e", "bench_accuracy=true", "-e", "bench_baseline_dir=%s" % (tmp_path / "b"))
    with fake_server("ok") as (url, dummy):
        first, rep = run_playbook(tmp_path, url, *args)
    assert first.returncode == 0, first.stdout[-3000:]
    assert "measured score on last-known-good: 528 requests" in first.stdout
    assert os.path.isfile(tmp_path / "b" / "accuracy-fakehost.json")
    with fake_server("ok", "--accuracy", "0.9") as (url, dummy):
        second, rep = run_playbook(tmp_path, url, *args)
    assert second.returncode != 0
    assert "accuracy gate FAILED" in second.stdout and "vs last-known-good 1.000 (528/528)" in second.stdout
    assert "| Concurrency | Output tok/s" in second.stdout  # the table is still printed
    # without the option no accuracy request is sent: assert_levels_and_reports, in every run of the tests above


def test_bench_preset_sets_the_recorded_workload_and_an_extra_var_still_wins(tmp_path):
    """-e bench_preset=baseline-c64-256x256 (playbooks/vars/bench_presets.yml, seed 000's baseline: 256-token prompts,
    256 tokens out, 64 concurrent) reaches the module; -e concurrency=2 replaces its level (one cheap level here, the
    lengths are the preset's)."""
    with fake_server("ok") as (url, dummy):
        cp, rep = run_playbook(tmp_path, url, "-e", "bench_preset=baseline-c64-256x256", "-e", "concurrency=2",
                               lengths=False)
    doc = assert_levels_and_reports(cp, rep, [2])
    assert (doc["workload"]["input_len"], doc["workload"]["output_len"]) == (256, 256), doc["workload"]


def test_an_unknown_bench_preset_fails_first_naming_it_and_the_allowed_values(tmp_path):
    cp, rep = run_playbook(tmp_path, "http://127.0.0.1:9", "-e", "bench_preset=baseline-c64")
    assert cp.returncode != 0
    assert ("bench_preset=baseline-c64 is not known: allowed baseline-c64-256x256, baseline-ladder-128x128 "
            "(playbooks/vars/bench_presets.yml)") in " ".join(cp.stdout.split()), cp.stdout[-2000:]
    assert not os.path.exists(str(rep))  # nothing ran

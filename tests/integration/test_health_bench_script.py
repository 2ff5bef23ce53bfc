# -*- coding: utf-8 -*-
# Copyright: gpuhost.sglang contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""benchmarks/gpu/sglang/health_bench.py, the GPU machine's health-beside-a-bench run, as it will run there: a
plain Python without Ansible (an ``ansible`` package that refuses to import shadows the real one) and pynvml
answering (tests/harness/pynvml_standin: the H200's own recorded NVML answers, or a GPU that throttles during
the run), against the fake server."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import json
import os
import subprocess
import sys

from fakeserver import fake_server  # pylint: disable=import-error

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SCRIPT = os.path.join(ROOT, "benchmarks", "gpu", "sglang", "health_bench.py")
STANDIN = os.path.join(ROOT, "tests", "harness", "pynvml_standin")


def run_script(tmp_path, mode):
    shadow = tmp_path / "no-ansible" / "ansible"
    shadow.mkdir(parents=True)
    (shadow / "__init__.py").write_text('raise ImportError("no Ansible on the GPU machine")\n')
    out = tmp_path / "out"
    env = dict(os.environ, GPUHOST_NVML_STANDIN=mode,
               PYTHONPATH=os.pathsep.join([str(tmp_path / "no-ansible"), STANDIN]))
    with fake_server("ok", "--model", "tiny", "--metrics") as (url, dummy):
        proc = subprocess.run([sys.executable, SCRIPT, "--base-url", url, "--out", str(out), "--levels", "1,4",
                               "--num-prompts", "16", "--min-duration-s", "0"],
                              capture_output=True, text=True, timeout=300, env=env, check=False)
    with open(str(out / "health_bench.json")) as fh:
        return proc, json.load(fh)


def test_the_real_gpus_reading_is_in_the_fingerprint_and_the_baselines(tmp_path):
    proc, rec = run_script(tmp_path, "h200-recorded")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert rec["pynvml"].startswith(STANDIN)
    gpu = rec["health_before"]["gpus"][0]
    assert (gpu["pcie_gen_current"], gpu["pcie_width_current"], gpu["clock_event_mask"]) == (5, 16, "0x1")
    state = {"state": "ok", "p2p": None, "gpus": [{"index": 0, "pcie_max": "gen5 x16", "pcie_width": 16,
                                                   "persistence_mode": True, "problems": []}]}
    assert rec["run_file"]["fingerprint_gpu_health"] == state
    assert [lvl["gpu_health"] for lvl in rec["run_file"]["levels"].values()] == [state, state]
    # after load the recorded GPU sat at its power cap: recorded, not a degradation
    assert rec["health_after"]["gpus"][0]["clock_events"] == ["sw_power_cap"]
    assert rec["finalize"]["out"]["gpu_degraded"] == [] and sorted(rec["baseline"]) == ["1", "4"]
    assert all(b["gpu_health"] == state for b in rec["baseline"].values())
    assert "ok  : fingerprint carries the health" in proc.stdout


def test_gpus_that_throttle_during_the_run_leave_no_baseline(tmp_path):
    proc, rec = run_script(tmp_path, "h200-throttles")
    assert proc.returncode == 1
    assert not rec["bench"]["failed"] and rec["finalize"]["failed"]
    assert rec["finalize"]["out"]["gpu_degraded"] == [
        "gpu0: clock event reasons: sw_thermal_slowdown, hw_thermal_slowdown",
        "gpu0: thermal violation 12.5 s during the run"]
    assert rec["run_file"]["gpu_degraded"] == rec["finalize"]["out"]["gpu_degraded"]
    assert rec["baseline"] == {}
    assert set(lvl["regression"]["status"] for lvl in rec["run_file"]["levels"].values()) == {"discarded"}
    assert "FAIL: finalize recorded the baselines" in proc.stdout

# -*- coding: utf-8 -*-
# Copyright: gpuhost.sglang contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The regression gate with its defaults against a real engine on the sandbox host (stage 50): an unchanged rerun
records a baseline, and the engine slowed ~2x for real then fails naming the metric.

The slowdown: the engine process is stopped and continued on a 50% duty cycle (SIGSTOP 20 ms / SIGCONT 20 ms) from
a loop on the host; CPUQuota= is ignored on the test hosts' hybrid cgroups (docs/testing.md,
"Resource limits"). The loop always continues the engine when it ends (SIGTERM or its deadline).

Runs only with GPUHOST_BENCH_SLOWDOWN_SANDBOX=1 (stage 50, after `make sandbox`); GPUHOST_SLOWDOWN_HOST picks
another deployed test host (default the sandbox, 10.231.200.2)."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import os
import subprocess
import time

import pytest

from fakeserver import run_module  # pylint: disable=import-error

pytestmark = pytest.mark.skipif(os.environ.get("GPUHOST_BENCH_SLOWDOWN_SANDBOX") != "1",
                                reason="needs the deployed sandbox host (stage 50: GPUHOST_BENCH_SLOWDOWN_SANDBOX=1)")

HOST = os.environ.get("GPUHOST_SLOWDOWN_HOST", "10.231.200.2")
KEY = "/var/cache/gpuhost-testhosts/id_ed25519"
SSH = ["ssh", "-i", KEY, "-o", "StrictHostKeyChecking=no", "-o", "UserKnownHostsFile=/dev/null", "-o", "LogLevel=ERROR",
       "-o", "ConnectTimeout=5", "root@" + HOST]

DUTY = r'''
import os, signal, subprocess, sys, time
unit = "sglang.service"
pid = int(subprocess.check_output(["systemctl", "show", "-p", "MainPID", "--value", unit]).decode().strip())
pids = [pid] + [int(x) for x in subprocess.run(["pgrep", "-P", str(pid)], capture_output=True, text=True).stdout.split()]
state = {"run": True}
def stop(*a):
    state["run"] = False
signal.signal(signal.SIGTERM, stop)
open("/run/gpuhost-bench-slowdown.pid", "w").write(str(os.getpid()))
print("duty cycle on", pids, flush=True)
deadline = time.monotonic() + float(sys.argv[1])
stop_s, run_s = float(sys.argv[2]) / 1000.0, float(sys.argv[3]) / 1000.0
stops = 0
try:
    while state["run"] and time.monotonic() < deadline:
        for p in pids:
            os.kill(p, signal.SIGSTOP)
        time.sleep(stop_s)
        for p in pids:
            os.kill(p, signal.SIGCONT)
        stops += 1
        time.sleep(run_s)
finally:
    print("stopped", stops, "times", flush=True)
    for p in pids:
        os.kill(p, signal.SIGCONT)
    os.unlink("/run/gpuhost-bench-slowdown.pid")
'''


class Slowdown(object):
    """2x slower engine while the block runs (the loop lives on the host; at most ``limit_s``)."""

    def __init__(self, stop_ms, run_ms, limit_s=120):
        self.stop_ms = stop_ms
        self.run_ms = run_ms
        self.limit_s = limit_s
        self.proc = None

    def __enter__(self):
        # the script goes over stdin: ssh joins its arguments into one remote shell line
        self.proc = subprocess.Popen(SSH + ["python3", "-", str(self.limit_s), str(self.stop_ms), str(self.run_ms)],
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        self.proc.stdin.write(DUTY)
        self.proc.stdin.close()
        line = self.proc.stdout.readline()
        assert line.startswith("duty cycle on"), line
        return self

    def __exit__(self, *exc):
        subprocess.run(SSH + ["kill $(cat /run/gpuhost-bench-slowdown.pid)"], check=False, timeout=30)
        self.proc.wait(timeout=30)
        return False


def test_defaults_fail_a_2x_slower_engine_naming_the_metric(tmp_path):
    # a small workload at bench.yml's default concurrency; the sandbox's load checks (the tiny model loops on random
    # prompts: inventories/sandbox/group_vars/sglang_servers.yml bench_load_checks)
    args = dict(base_url="http://%s:30000" % HOST, concurrency=16, input_len=16, output_len=16, run_probes=False,
                load_checks=["empty", "replacement_chars", "control_chars", "script_soup"],
                plots=False, baseline_dir=str(tmp_path / "base"), report_dir=str(tmp_path / "rep"),
                fingerprint={"host": HOST, "test": "slowdown"},
                # the module defaults, not the fixtures' sizing (fakeserver.run_module turns them off)
                min_duration_s=5.0, min_requests=32)
    first, dummy = run_module(tmp_path, **args)
    assert not first.get("failed"), first.get("msg")
    assert first["results"][0]["regression"]["status"] == "recorded"
    # (unchanged reruns passing: the 10-run series in the closing note; not repeated here for CI time)
    t0 = time.monotonic()
    # One slowed run of six on 2026-12-04 failed as `stalled`, not `regression`: 1 of its 474 requests got no data for
    # 60.6 s (stall_timeout 60 s), while the unslowed runs before and after were whole. The engine (transformers serve,
    # continuous batching) left one stream unanswered under the stop cycle; the cause is unverified. A stall is a
    # failure the gate names right, but not the one this test proves, so such a run is measured once more and kept in
    # the message; the second must fail as a regression.
    stalls = []
    for dummy_attempt in range(2):
        # long periods: CFS gives a short-stopped task its time back (measured: 20/20 ms did nothing under load). A 250/250
        # cycle cost only 29-54 % of the throughput (continuous batching catches up in each running half), and one
        # fresh-clone run's noisy baseline widened the throughput threshold to its 40 % cap: 568 against 800 tok/s
        # passed. 400/200 runs the engine a third of the time: 67-75 % lost in 2 runs on 2026-12-05, past that cap.
        with Slowdown(400, 200):
            slow, dummy = run_module(tmp_path, **args)
        if slow.get("failure_class") != "stalled":
            break
        stalls.append(slow["msg"])
    assert slow.get("failed") and slow["failure_class"] == "regression", (slow.get("msg"), stalls)
    # which metrics a 250/250 ms stop cycle pushes past their thresholds depends on where the stops land (a request
    # of 16 tokens can decode inside one running window: TTFT and throughput always suffer, TPOT not always; one
    # fresh-clone run flagged throughput -53% and TTFT p50 +43% with TPOT within its threshold): every metric that
    # failed is named in the message with its baseline, and at least one failed
    failed = [c for c in slow["results"][0]["regression"]["checks"] if not c["passed"]]
    assert failed, slow["msg"]
    for check in failed:
        assert check["delta"] > check["threshold"], check
        assert "%s baseline" % check["metric"] in slow["msg"], (check["metric"], slow["msg"])
    again = "".join(" | measured again after: %s" % m for m in stalls)
    print("baseline: %s | slowed (%.0f s): %s%s" % (first["msg"], time.monotonic() - t0, slow["msg"], again))

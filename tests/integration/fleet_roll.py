#!/usr/bin/env python3
# -*- coding: utf-8 -*-
# Copyright: gpuhost.sglang contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""A rolling deploy of a changed configuration while serving_bench drives load through the
router, and the same roll with a configuration that fails its gate on the canary.

    python tests/integration/fleet_roll.py INVENTORY ROUTER_URL MODEL [--fail-canary]

INVENTORY has sglang_servers (>= 2 hosts, deployed once) and sglang_routers (one SMG host). The load is
gpuhost.sglang.serving_bench (chat API: SMG's openai backend answers 501 on /v1/completions) run again and again
from the controller until the roll has ended; every request it sent and every failure is counted. Prints one JSON
line: requests sent/completed/failed (by class), each host's time out of the router, the roll's wall time and rc.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import json
import os
import random
import re
import subprocess
import sys
import tempfile
import threading
import time

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from fakeserver import run_module  # noqa: E402  (runs plugins/modules/serving_bench.py as Ansible does)

CHANGED = {"device": "cpu", "continuous-batching": True, "cb-num-blocks": 224, "cb-max-batch-tokens": 2048}
ORIGINAL = {"device": "cpu", "continuous-batching": True, "cb-num-blocks": 256, "cb-max-batch-tokens": 2048}


def load(router_url, model, stop, totals, tmp):
    while not stop.is_set():
        # new prompts each run: under the cache_aware policy a prompt seen before goes back to the same worker
        res, _dt = run_module(tmp, base_url=router_url, model=model, api="chat", concurrency=4, num_prompts=40,
                              seed=random.randrange(1 << 30),
                              input_len=16, output_len=16, run_probes=False, warmup=0, ignore_eos=False,
                              load_checks=[], max_error_rate=1.0, max_incoherent_rate=1.0)
        for lvl in res.get("results", []):
            totals["sent"] += lvl.get("num_prompts", 40)
            totals["completed"] += lvl.get("completed", 0)
            for cls, n in (lvl.get("errors") or {}).items():
                totals["failed"][cls] = totals["failed"].get(cls, 0) + n
        if not res.get("results"):
            totals["runs_without_results"].append(res.get("msg", "")[:300])
        totals["runs"] += 1


def roll(inventory, extra, env=None):
    cmd = [os.path.join(os.path.dirname(sys.executable), "ansible-playbook"), "-i", inventory,
           os.path.join(ROOT, "playbooks", "deploy.yml"), "-e", json.dumps(extra)]
    env = env or dict(os.environ, ANSIBLE_CONFIG=os.path.join(ROOT, "ansible.cfg"), ANSIBLE_NOCOLOR="1")
    t0 = time.monotonic()
    proc = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=1800, check=False)
    return proc.returncode, proc.stdout + proc.stderr, time.monotonic() - t0


def summary(rc, out, wall, totals):
    """The roll's figures: requests sent/completed/failed (by class), each host's time out of the router, the batch
    where it halted, the recap."""
    flat = " ".join(out.split())
    outs = dict((h, float(s)) for h, s in re.findall(r"ok: \[(\w+)\] => msg: [^\]]*? out of the router ([0-9.]+) s", flat))
    halted = sorted(set(re.findall(r"Roll halted at (\S+)", flat)))
    recap = dict(re.findall(r"^(\S+)\s+: (ok=.*)$", out, re.M))
    return {"rc": rc, "roll_wall_s": round(wall, 1), "requests_sent": totals["sent"],
            "requests_completed": totals["completed"], "requests_failed": totals["failed"],
            "bench_runs": totals["runs"], "runs_without_results": totals["runs_without_results"][:3],
            "out_of_router_s": outs, "halted_at": halted, "recap": recap}


def main():
    inventory, router_url, model = sys.argv[1:4]
    fail_canary = "--fail-canary" in sys.argv
    extra = {"sglang_options": CHANGED, "roll_serial": 1, "roll_capacity_floor": 1}
    if fail_canary:
        nan = os.path.join(ROOT, ".cache", "tinymodel", "nan")
        extra.update({"sglang_options": ORIGINAL, "sglang_model_controller_dir": nan,
                      "sglang_model_path": "/var/lib/sglang/models/nan"})
    totals = {"sent": 0, "completed": 0, "failed": {}, "runs": 0, "runs_without_results": []}
    stop = threading.Event()
    tmp = tempfile.mkdtemp(prefix="fleet-roll-")
    t = threading.Thread(target=load, args=(router_url, model, stop, totals, tmp))
    t.start()
    time.sleep(3)
    rc, out, wall = roll(inventory, extra)
    time.sleep(3)
    stop.set()
    t.join()
    with open(os.path.join(tmp, "roll.log"), "w") as f:
        f.write(out)
    report = summary(rc, out, wall, totals)
    report["log"] = os.path.join(tmp, "roll.log")
    print(json.dumps(report))


if __name__ == "__main__":
    main()

# -*- coding: utf-8 -*-
# Copyright: gpuhost.sglang contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The real SGLang model gateway (smg 1.13.0, tests/fixtures/router-wheelhouse.sh) keeping its worker set in its
file-discovery manifest (router_worker_discovery=file): gpuhost.sglang.smg_worker with ``manifest`` drains a worker by
taking it out of the manifest, and a router restarted meanwhile comes back without it."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import json
import os
import signal
import subprocess
import sys
import time
import urllib.request

import pytest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from fakeserver import fake_server, free_port  # noqa: E402

from ansible_collections.gpuhost.sglang.plugins.module_utils.serving import router, server_args  # noqa: E402
from ansible_collections.gpuhost.sglang.plugins.plugin_utils import fleet  # noqa: E402
from ansible_collections.gpuhost.sglang.tests import harness  # noqa: E402

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
VENV, SMG = harness.ROUTER_VENV, harness.SMG

if harness.NO_SMG:
    pytestmark = pytest.mark.skip(reason=harness.NO_SMG)


def module(name, **args):
    return harness.run_module(name, args, timeout=300)


def launch(argv):
    return subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)


def healthy(base, n, proc, timeout=60):
    deadline = time.monotonic() + timeout
    while True:
        try:
            if json.load(urllib.request.urlopen(base + "/readiness", timeout=2)).get("healthy_workers") == n:
                return
        except OSError:
            pass
        assert time.monotonic() < deadline and proc.poll() is None, "smg did not reach %d healthy workers" % n
        time.sleep(0.3)


def test_a_drained_worker_stays_out_across_a_router_restart_with_the_manifest(tmp_path):
    """router_worker_discovery=file: smg_worker edits SMG's file-discovery manifest; a router restarted while a worker
    is drained (a driver change in progress, a router host rebooted) comes back without it, and with it once it was
    added back. Without the manifest the restarted router would take every worker of its command line back."""
    manifest = str(tmp_path / "workers.json")
    with fake_server("ok") as (w1, _p1), fake_server("ok") as (w2, _p2):
        with open(manifest, "w") as fh:
            fh.write(router.manifest_text([w1, w2]))
        port, mport = free_port(), free_port()
        opts = fleet.router_options({"listen": "127.0.0.1", "port": port, "prometheus_port": mport, "backend": "sglang",
                                     "policy": "round_robin", "worker_urls": [w1, w2], "discovery_file": manifest,
                                     "health_check": {"health-check-interval-secs": 1},
                                     "options": {"discovery-check-interval-secs": 1}})
        argv = [SMG, "launch"] + server_args.server_argv(opts)
        base, metrics = "http://127.0.0.1:%d" % port, "http://127.0.0.1:%d/metrics" % mport
        proc = launch(argv)
        try:
            healthy(base, 2, proc)
            out = module("smg_worker", router_url=base, url=w1, state="absent", drain_timeout=30, manifest=manifest)
            assert out.get("changed") and out["healthy"] == [w2], out
            assert router.manifest_urls(open(manifest).read()) == [w2]
            os.killpg(proc.pid, signal.SIGTERM)
            proc.wait(10)
            proc = launch(argv)   # the router restarts while w1 is out
            healthy(base, 1, proc)
            time.sleep(3)         # three more reads of the manifest: w1 stays out
            assert [w["url"] for w in module("smg_worker", router_url=base, state="query")["workers"]] == [w2]
            back = module("smg_worker", router_url=base, metrics_url=metrics, url=w1, state="present", manifest=manifest,
                          probe_model="fake-model")
            assert back.get("changed") and sorted(back["healthy"]) == sorted([w1, w2]) and back["probe_requests"] >= 1, back
            os.killpg(proc.pid, signal.SIGTERM)
            proc.wait(10)
            proc = launch(argv)   # and a restart keeps it
            healthy(base, 2, proc)
        finally:
            os.killpg(proc.pid, signal.SIGTERM)
            proc.wait(10)

# -*- coding: utf-8 -*-
# Copyright: gpuhost.sglang contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The real SGLang model gateway (smg 1.13.0, PyPI smg, installed by tests/fixtures/router-wheelhouse.sh) on
loopback in front of two fake OpenAI-compatible workers (tests/integration/fakeserver.py, paced streams):

- the router role's options (plugins/plugin_utils/fleet.py) pass smg's own parser; a bad policy is
  rejected with the valid choices listed;
- with ``--backend sglang`` (SMG's HTTP router) the two OpenAI-compatible workers share the load; measured here with
  smg 1.13.0, ``--backend openai`` sent every request of a model to one worker whatever the policy (it routes to
  providers), so the router role's default is sglang, also in front of transformers serve or vLLM;
- gpuhost.sglang.smg_worker state=absent drains a worker while streams run through it: every stream ends with
  [DONE], the router forgets the worker, no new request reaches it; state=present adds it back and proves, by the
  router's per-worker success counter, that a request through the router reaches it; the capacity floor refuses a
  batch that would leave too few workers.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import concurrent.futures
import contextlib
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
REPLAY = os.path.join(ROOT, "tests", "fixtures", "sglang-0.5.17", "exchanges.json")
VENV, SMG = harness.ROUTER_VENV, harness.SMG

if harness.NO_SMG:
    pytestmark = pytest.mark.skip(reason=harness.NO_SMG)


def module(name, **args):
    return harness.run_module(name, args, timeout=300)


def options(urls, port, mport, **extra):
    return fleet.router_options({"listen": "127.0.0.1", "port": port, "prometheus_port": mport, "backend": "sglang",
                                 "policy": "round_robin", "worker_urls": urls,
                                 "health_check": {"health-check-interval-secs": 1}, "options": extra})


def test_router_options_pass_smgs_parser_and_a_bad_policy_is_named():
    ok = module("server_args", python=os.path.join(VENV, "bin", "python"), engine="smg", expected_version="1.13.0",
                options=options(["http://10.0.0.1:30000", "http://10.0.0.2:30000"], 30000, 29000))
    assert ok.get("validated") and ok["errors"] == [] and not ok.get("failed"), ok
    assert ok["argv"][ok["argv"].index("--worker-urls") + 1:][:2] == ["http://10.0.0.1:30000", "http://10.0.0.2:30000"]
    bad = module("server_args", python=os.path.join(VENV, "bin", "python"), engine="smg",
                 options=options(["http://10.0.0.1:30000"], 30000, 29000, policy="round_robbin"))
    assert bad.get("failed") and "round_robbin" in bad["msg"] and "round_robin" in bad["msg"], bad


@contextlib.contextmanager
def smg(urls):
    """The real smg in front of ``urls``, ready with every worker healthy; yields (base URL, metrics URL)."""
    port, mport = free_port(), free_port()
    argv = [SMG, "launch"] + server_args.server_argv(options(urls, port, mport))
    proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    base = "http://127.0.0.1:%d" % port
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                ready = json.load(urllib.request.urlopen(base + "/readiness", timeout=2))
                if ready.get("healthy_workers") == len(urls):
                    break
            except OSError:
                pass
            assert time.monotonic() < deadline and proc.poll() is None, "smg did not become ready"
            time.sleep(0.3)
        yield base, "http://127.0.0.1:%d/metrics" % mport
    finally:
        os.killpg(proc.pid, signal.SIGTERM)
        proc.wait(10)


@pytest.fixture(scope="module")
def gateway():
    with fake_server("ok", "--itl", "0.02") as (w1, _p1), fake_server("ok", "--itl", "0.02") as (w2, _p2):
        with smg([w1, w2]) as (base, metrics):
            yield {"base": base, "metrics": metrics, "w1": w1, "w2": w2}


def stream(base, tokens=100):
    body = json.dumps({"model": "fake-model", "messages": [{"role": "user", "content": "hi"}], "max_tokens": tokens,
                       "stream": True}).encode()
    req = urllib.request.Request(base + "/v1/chat/completions", body, {"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=60) as resp:
        text = resp.read().decode()
    return resp.status, text.rstrip().endswith("data: [DONE]")


def test_drain_keeps_inflight_streams_then_add_back_reaches_the_worker(gateway):
    g = gateway
    with concurrent.futures.ThreadPoolExecutor(6) as pool:
        streams = [pool.submit(stream, g["base"]) for dummy in range(6)]
        time.sleep(0.5)  # all six are streaming (100 tokens x 20 ms)
        t0 = time.monotonic()
        out = module("smg_worker", router_url=g["base"], url=g["w1"], state="absent", drain_timeout=30)
        drained = time.monotonic() - t0
        results = [f.result() for f in streams]
    assert out.get("changed") and not out.get("failed"), out
    assert results == [(200, True)] * 6, results  # every in-flight stream finished
    assert g["w1"] not in [w["url"] for w in out["workers"]] and out["healthy"] == [g["w2"]]
    assert drained >= 1.0, "the removal returned before the in-flight streams could finish (%.2fs)" % drained
    before = router.parse_worker_successes(urllib.request.urlopen(g["metrics"]).read().decode())
    for dummy in range(4):
        assert stream(g["base"], 2) == (200, True)
    after = router.parse_worker_successes(urllib.request.urlopen(g["metrics"]).read().decode())
    assert router.spread(before, after).get(g["w1"], 0) == 0  # nothing reaches a removed worker

    floor = module("smg_worker", router_url=g["base"], state="query", batch=[g["w2"]], capacity_floor=1)
    assert floor.get("failed") and "roll_capacity_floor is 1" in floor["msg"], floor

    back = module("smg_worker", router_url=g["base"], metrics_url=g["metrics"], url=g["w1"], state="present",
                  probe_model="fake-model")
    assert back.get("changed") and not back.get("failed"), back
    assert 1 <= back["probe_requests"] <= 16 and sorted(back["healthy"]) == sorted([g["w1"], g["w2"]])
    again = module("smg_worker", router_url=g["base"], metrics_url=g["metrics"], url=g["w1"], state="present",
                   probe=False)
    assert again.get("changed") is False


def test_serving_bench_through_smg_verifies_counts_with_the_workers_engine_metrics(tmp_path):
    # SMG answers /metrics on its main port with 404 and serves its workers' SGLang metrics, aggregated and labelled
    # worker_addr, on /engine_metrics (measured: smg 1.13.0 here; tests/fixtures/sglang-0.5.17/README.md)
    with fake_server("ok", "--replay", REPLAY) as (w1, _p1):
        with smg([w1]) as (base, dummy):
            res = harness.run_module("serving_bench", dict(
                base_url=base, model="tiny", input_len=8, output_len=64, concurrency=2, num_prompts=4, warmup=0,
                run_probes=False, plots=False, min_duration_s=0, min_requests=1), tmp_path=tmp_path)
    assert not res.get("failed"), res.get("msg")
    lvl = res["results"][0]
    assert lvl["server_metrics"]["status"] == "ok", lvl["server_metrics"]
    assert lvl["server_metrics"]["path"] == "/engine_metrics"
    gen = [c for c in lvl["server_metrics"]["checks"] if c["metric"] == "generation_tokens"][0]
    assert gen["server"] == gen["client"] == 4 * 64 and lvl["counts"] == "verified"

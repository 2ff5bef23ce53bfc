# -*- coding: utf-8 -*-
# Copyright: gpuhost.sglang contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Queue-bound levels: the server's limits from SGLang's /get_server_info, and the bench refusing levels above them."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import json
import os

import pytest
import yaml

from ansible_collections.gpuhost.sglang.plugins.module_utils.bench import runner
from ansible_collections.gpuhost.sglang.plugins.module_utils.bench import server_limits
from ansible_collections.gpuhost.sglang.plugins.module_utils.bench import store as bench_store
from ansible_collections.gpuhost.sglang.plugins.modules import serving_bench as sb
from ansible_collections.gpuhost.sglang.tests.harness.fake_bench_client import FakeClient

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), *([os.pardir] * 5)))


def sglang_info(per_dp=(64,), configured=64, kv=500000, dp_size=1):
    """The shape of SGLang's /get_server_info: server args + scheduler init info + one internal state per DP rank
    (http_server.py server_info; scheduler.py get_init_info / get_internal_state), trimmed to what matters."""
    return {"model_path": "/models/m", "max_running_requests": configured, "dp_size": dp_size,
            "chunked_prefill_size": 8192, "max_total_num_tokens": kv, "max_req_input_len": 131071,
            "internal_states": [{"last_gen_throughput": 0.0, "memory_usage": {"weight": 1.0, "kvcache": 2.0},
                                 "effective_max_running_requests_per_dp": v} for v in per_dp],
            "version": "0.5.23"}


def params(tmp_path, **kw):
    p = {k: v.get("default") for k, v in sb.argument_spec().items()}
    p.update(base_url="http://127.0.0.1:30000", plots=False, report_dir=str(tmp_path / "r"),
             baseline_dir=str(tmp_path / "b"), run_probes=False, warmup=0, min_duration_s=0.0)
    p.update(kw)
    return p


def test_limits_from_server_info():
    lim = server_limits.limits_from_server_info(sglang_info(per_dp=(48,), configured=None))
    assert lim["max_running_requests"] == 48 and lim["max_total_num_tokens"] == 500000
    assert lim["from"] == "internal_states[*].effective_max_running_requests_per_dp"
    # two DP ranks: the cap is per rank
    assert server_limits.limits_from_server_info(sglang_info(per_dp=(32, 32), dp_size=2))["max_running_requests"] == 64
    # an older server without internal_states: the configured argument
    info = sglang_info()
    del info["internal_states"]
    assert server_limits.limits_from_server_info(info)["max_running_requests"] == 64
    info["max_running_requests"] = None
    assert server_limits.limits_from_server_info(info)["max_running_requests"] is None
    with pytest.raises(ValueError):
        server_limits.limits_from_server_info([1])


def test_fetch_falls_back_to_server_info_and_reports_404():
    seen = []

    def get_json(url, key, t):
        seen.append(url)
        return (404, "") if url.endswith("/get_server_info") else (200, json.dumps(sglang_info()))
    lim, why = server_limits.fetch(get_json, "http://h:30000/v1/")
    assert why is None and lim["max_running_requests"] == 64
    assert seen == ["http://h:30000/get_server_info", "http://h:30000/server_info"]
    lim, why = server_limits.fetch(lambda u, k, t: (404, ""), "http://h:30000")
    assert lim is None and why == "GET /get_server_info: HTTP 404; GET /server_info: HTTP 404"


def test_queue_bound_levels():
    lim = server_limits.limits_from_server_info(sglang_info(kv=100000))
    assert sorted(server_limits.queue_bound([1, 10, 64, 256, 1024], lim)) == [256, 1024]
    # KV cache: 64 x (1024 + 1024) tokens > 100000
    assert list(server_limits.queue_bound([64], lim, 1024, 1024)) == [64]
    assert server_limits.queue_bound([1, 10], {"max_running_requests": None, "max_total_num_tokens": None}) == {}


def test_bench_refuses_levels_above_max_running_requests(tmp_path):
    client = FakeClient(server_info=sglang_info(per_dp=(64,)))
    res = runner.BenchRun(params(tmp_path, concurrency="1,10,256"), client=client).execute()
    assert res.failed and res.out["failure_class"] == "queue_bound"
    assert "concurrency levels 256 are queue-bound" in res.msg and "max_running_requests 64" in res.msg
    assert "allow_queue_bound=true" in res.msg
    assert [c for c in client.calls if c[0] == "load"] == []   # refused before any load
    assert res.out["server_limits"]["max_running_requests"] == 64


def test_bench_measures_queue_bound_levels_when_allowed(tmp_path):
    client = FakeClient(server_info=sglang_info(per_dp=(4,)))
    res = runner.BenchRun(params(tmp_path, concurrency="2,8", num_prompts=8, allow_queue_bound=True),
                          client=client).execute()
    assert not res.failed, res.msg
    assert any("queue-bound levels measured on request" in w and "c=8" in w for w in res.warnings)
    doc = bench_store.read_json(bench_store.run_path(str(tmp_path / "r"), res.out["run_id"]))
    levels = dict((int(k), v) for k, v in doc["levels"].items())
    assert "above max_running_requests 4" in levels[8]["queue_bound"] and levels[2]["queue_bound"] is None


def test_bench_without_server_info_warns_and_measures(tmp_path):
    client = FakeClient()
    res = runner.BenchRun(params(tmp_path, concurrency=2, num_prompts=8), client=client).execute()
    assert not res.failed, res.msg
    assert any("server limits unknown (GET /get_server_info: HTTP 404" in w for w in res.warnings)


def test_production_inventory_serves_the_bench_levels():
    with open(os.path.join(ROOT, "inventories/production/group_vars/sglang_servers.yml")) as f:
        inv = yaml.safe_load(f)
    mrr = int(inv["sglang_options"]["max-running-requests"])
    levels = [1, 10, 256, 1024]
    assert server_limits.queue_bound(levels, {"max_running_requests": mrr}) == {}, \
        "production max-running-requests %d makes levels %s queue-bound" % (mrr, levels)

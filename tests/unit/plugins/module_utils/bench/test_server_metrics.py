# -*- coding: utf-8 -*-
# Copyright: gpuhost.sglang contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""server_metrics: parse the real prometheus_client text of SGLang's names, delta, reconcile, disagreement flagged."""
from __future__ import absolute_import, division, print_function

import os

import pytest

from ansible_collections.gpuhost.sglang.plugins.module_utils.bench import server_metrics as sm

FIXTURE = os.path.join(os.path.dirname(__file__), "..", "..", "..", "..", "fixtures", "metrics", "sglang-0.5.23.prom")


def real_text():
    with open(FIXTURE) as f:
        return f.read()


def test_parse_real_prometheus_client_text():
    snap = sm.snapshot(real_text())
    assert snap["counters"] == {"generation_tokens": 4096.0, "prompt_tokens": 2048.0, "requests": 64.0,
                                "aborted": 0.0}
    assert snap["ttft"]["count"] == 64.0
    assert snap["ttft"]["buckets"][float("inf")] == 64.0
    assert snap["ttft"]["buckets"][0.1] == 6.0


def test_underscore_prefix_is_the_same_metric():
    text = real_text().replace("sglang:", "sglang_")
    assert sm.snapshot(text) == sm.snapshot(real_text())


def test_model_filter():
    assert sm.snapshot(real_text(), model="tiny")["counters"]["generation_tokens"] == 4096.0
    with pytest.raises(sm.MetricsError, match="only for model_name tiny, not 'other'"):
        sm.snapshot(real_text(), model="other")


def test_no_sglang_metrics_is_a_clear_error():
    with pytest.raises(sm.MetricsError, match="--enable-metrics"):
        sm.snapshot("# HELP x y\nprocess_cpu_seconds_total 1.5\n")


def test_garbage_names_the_line():
    with pytest.raises(sm.MetricsError, match="line 2"):
        sm.parse("a 1\n{oops} 2\n")


def test_label_values_with_escapes():
    (name, labels, value), = sm.parse('sglang:num_requests_total{model_name="a\\"b,c"} 3\n')
    assert (name, labels, value) == ("sglang:num_requests_total", {"model_name": 'a"b,c'}, 3.0)


def test_counter_reset_means_restart():
    snap = sm.snapshot(real_text())
    after = sm.snapshot(real_text().replace("} 4096.0", "} 10.0"))
    with pytest.raises(sm.MetricsError, match="restarted"):
        sm.delta(snap, after)


def test_histogram_quantile_like_prometheus():
    # promql: histogram_quantile(0.5, ...) with 10 in (0,1], 10 in (1,2] -> rank 10 -> 1.0; 0.75 -> 1.5
    b = {1.0: 10.0, 2.0: 20.0, float("inf"): 20.0}
    assert sm.histogram_quantile(0.5, b)[0] == pytest.approx(1.0)
    assert sm.histogram_quantile(0.75, b) == (pytest.approx(1.5), (1.0, 2.0))
    assert sm.histogram_quantile(0.5, {1.0: 0.0, float("inf"): 0.0}) is None


def _records(n, tokens, ttft):
    return [{"ok": True, "output_tokens": tokens, "start": 100.0, "chunk_times": [100.0 + ttft, 100.5]}
            for dummy in range(n)]


def _server_text(gen, reqs, ttft_counts):
    lines = ['sglang:generation_tokens_total{model_name="tiny"} %s' % gen,
             'sglang:num_requests_total{model_name="tiny"} %s' % reqs]
    cum = 0
    for le, c in ttft_counts:
        cum += c
        lines.append('sglang:time_to_first_token_seconds_bucket{le="%s",model_name="tiny"} %s' % (le, cum))
    lines.append('sglang:time_to_first_token_seconds_count{model_name="tiny"} %s' % cum)
    lines.append('sglang:time_to_first_token_seconds_sum{model_name="tiny"} 1.0')
    return "\n".join(lines) + "\n"


def _cross_check(server_after, records, tol=0.02):
    texts = iter([_server_text(1000, 10, [("0.1", 0), ("0.2", 0), ("+Inf", 0)]), server_after])
    before, why = sm.begin("http://x", "auto", get=lambda url, path: next(texts))
    assert why is None
    return sm.finish("http://x", before, records, tol, get=lambda url, path: next(texts))


def test_agreement():
    v = _cross_check(_server_text(1000 + 640, 20, [("0.1", 0), ("0.2", 10), ("+Inf", 0)]), _records(10, 64, 0.15))
    assert v["status"] == "ok", v
    assert [c["status"] for c in v["checks"]] == ["ok", "ok", "ok"]
    assert v["line"].startswith("server metrics agree")


def test_client_miscounting_tokens_is_flagged():
    # the client counts 64 tokens per request, the server generated 80 per request
    v = _cross_check(_server_text(1000 + 800, 20, [("0.1", 0), ("0.2", 10), ("+Inf", 0)]), _records(10, 64, 0.15))
    assert v["status"] == "disagree"
    assert "generation_tokens: the server counted 800, the responses' usage" in v["flags"][0]
    assert "says 640" in v["flags"][0]
    assert "DISAGREE" in v["line"]


def test_ttft_above_the_server_bucket_is_reported_as_queueing():
    # the client saw 1.5 s TTFT; the server's timer (handler to first output) put every first token in (0.1, 0.2]:
    # the rest was spent outside that timer
    v = _cross_check(_server_text(1000 + 640, 20, [("0.1", 0), ("0.2", 10), ("+Inf", 0)]), _records(10, 64, 1.5))
    assert v["status"] == "ok"
    assert [c["status"] for c in v["checks"] if c["metric"] == "ttft_p50_s"] == ["queueing"]
    assert v["notes"] and v["notes"][0].startswith("ttft p50")


def test_ttft_below_the_server_bucket_is_flagged():
    # the client saw 20 ms; the server's own timer, which runs inside the client's, saw more than 100 ms
    v = _cross_check(_server_text(1000 + 640, 20, [("0.1", 0), ("0.2", 10), ("+Inf", 0)]), _records(10, 64, 0.02))
    assert v["status"] == "disagree"
    assert any(f.startswith("ttft p50") for f in v["flags"])


def test_server_unreachable_is_not_a_crash():
    def boom(url, path):
        raise sm.MetricsError("GET %s%s failed: refused" % (url, path))
    assert sm.begin("http://x", "auto", get=boom) == (
        None, "GET http://x/metrics failed: refused; GET http://x/engine_metrics failed: refused")
    assert sm.begin("http://x", "off", get=boom) == (None, "off")


def test_server_restart_during_level_is_unavailable_not_agree():
    texts = iter([_server_text(1000, 10, [("+Inf", 0)]), _server_text(5, 1, [("+Inf", 1)])])
    before, dummy = sm.begin("http://x", "auto", get=lambda url, path: next(texts))
    v = sm.finish("http://x", before, _records(1, 5, 0.1), get=lambda url, path: next(texts))
    assert v["status"] == "unavailable" and "restarted" in v["reason"]


REAL = os.path.join(os.path.dirname(FIXTURE), "..", "sglang-0.5.17")


def _read(name):
    with open(os.path.join(REAL, name)) as f:
        return f.read()


def test_recorded_scrape_reads_the_same_in_both_spellings():
    # the real SGLang 0.5.17 /metrics, and the same text with every name spelled sglang_ (derived, underscore_metrics.py)
    import importlib.util
    spec = importlib.util.spec_from_file_location("underscore_metrics", os.path.join(REAL, "underscore_metrics.py"))
    derive = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(derive)
    colon, underscored = _read("metrics-after-bench.txt"), _read("metrics-after-bench-underscore.txt")
    assert derive.underscore(colon) == underscored, "the derived fixture is stale: run underscore_metrics.py"
    assert "sglang:" not in underscored and "sglang_generation_tokens_total" in underscored
    a, b = sm.snapshot(colon, "tiny"), sm.snapshot(underscored, "tiny")
    assert a == b and a["counters"]["generation_tokens"] > 0 and a["ttft"]["count"] > 0


def test_smg_engine_metrics_read_as_the_workers_own():
    # smg 1.13.0's /engine_metrics in front of the replayed SGLang 0.5.17 (recorded): colon names, worker_addr added
    import json
    with open(os.path.join(REAL, "exchanges.json")) as f:
        worker = "".join(t for dummy, t in json.load(f)["metrics-after"]["reads"])
    smg = _read("smg-1.13.0-engine-metrics.txt")
    assert 'worker_addr="http://127.0.0.1:' in smg
    assert sm.snapshot(smg, "tiny") == sm.snapshot(worker, "tiny")

# -*- coding: utf-8 -*-
# Copyright: gpuhost.sglang contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""serving_bench cross-checked by the server's own metrics: against the loopback fake server
exporting SGLang's metric names, the reconciliation agrees; a server over-reporting its tokens is flagged, and
with server_metrics=require the run fails with class server_metrics."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import os

from fakeserver import fake_server, run_module  # pylint: disable=import-error

SMALL = dict(input_len=8, output_len=32, concurrency=4, num_prompts=16, warmup=1, plots=False, run_probes=False)


def _line(report_dir):
    with open(os.path.join(report_dir, "progress.log")) as f:
        return [ln for ln in f.read().splitlines() if "server metrics" in ln]


def test_reconciliation_agrees(tmp_path):
    with fake_server("ok", "--metrics", "--metrics-prefix", "sglang_") as (url, dummy):
        res, dummy = run_module(tmp_path, base_url=url, report_dir=str(tmp_path / "r"), **SMALL)
    assert not res.get("failed"), res.get("msg")
    sm = res["results"][0]["server_metrics"]
    assert sm["status"] == "ok", sm
    gen = [c for c in sm["checks"] if c["metric"] == "generation_tokens"][0]
    assert gen["server"] == gen["client"] == 16 * 32
    lines = _line(str(tmp_path / "r"))
    print(lines[-1])
    assert "server metrics agree" in lines[-1]


def test_lying_server_is_flagged_and_require_fails(tmp_path):
    with fake_server("ok", "--metrics", "--metrics-skew", "1.25") as (url, dummy):
        res, dummy = run_module(tmp_path, base_url=url, report_dir=str(tmp_path / "a"), **SMALL)
        assert not res.get("failed"), res.get("msg")
        sm = res["results"][0]["server_metrics"]
        assert sm["status"] == "disagree"
        assert ("generation_tokens: the server counted 640, the responses' usage (client fallback where absent) says 512 "
                "(25.0% apart, tolerance 2.0%)") in sm["flags"][0]
        print(_line(str(tmp_path / "a"))[-1])
        res, dummy = run_module(tmp_path, base_url=url, server_metrics="require", **SMALL)
    assert res.get("failed") and res["failure_class"] == "server_metrics", res.get("msg")
    assert "DISAGREE" in res["msg"]


def test_no_metrics_endpoint_is_reported_not_fatal(tmp_path):
    with fake_server("ok") as (url, dummy):
        res, dummy = run_module(tmp_path, base_url=url, **SMALL)
        assert not res.get("failed"), res.get("msg")
        sm = res["results"][0]["server_metrics"]
        assert sm["status"] == "unavailable" and "/metrics failed" in sm["reason"], sm
        res, dummy = run_module(tmp_path, base_url=url, server_metrics="require", **SMALL)
    assert res["failure_class"] == "server_metrics", res.get("msg")

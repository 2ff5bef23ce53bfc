# -*- coding: utf-8 -*-
# Copyright: gpuhost.sglang contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Module wiring: argument checks, expectation from facts, and the failure table, with the measuring
functions replaced by synthetic figures (the real measurement ran on the H200 pair: docs/gpu-stack.md)."""
from __future__ import absolute_import, division, print_function

__metaclass__ = type

import pytest

from ansible_collections.gpuhost.sglang.plugins.module_utils.gpu import link_probe
from ansible_collections.gpuhost.sglang.plugins.module_utils.gpu import nvml_facts
from ansible_collections.gpuhost.sglang.plugins.modules import gpu_link_probe
from ansible_collections.gpuhost.sglang.tests import harness
from ansible_collections.gpuhost.sglang.tests.harness import fake_nvml as fake


@pytest.fixture
def rtx_facts():
    return nvml_facts.collect(fake.rtx_pro_6000_box(virt=1), host={"hypervisor_flag": True})


def run(monkeypatch, capsys, args, p2p_gbps=None, busbw=None):
    monkeypatch.setattr(gpu_link_probe, "HAS_TORCH", True)
    calls = {}

    def fake_p2p(devices, size_bytes, iters, latency_iters, timeout):
        calls["p2p"] = (list(devices), size_bytes)
        return [{"src": i, "dst": j, "bandwidth_gbps": p2p_gbps(i, j), "latency_us": 11.0}
                for i in devices for j in devices if i != j]

    def fake_ar(devices, sizes, iters, timeout):
        calls["allreduce"] = (list(devices), list(sizes))
        return [{"size_bytes": s, "time_us": 1.0, "algbw_gbps": busbw, "busbw_gbps": busbw} for s in sizes]

    monkeypatch.setattr(link_probe, "measure_p2p", fake_p2p)
    monkeypatch.setattr(link_probe, "measure_allreduce", fake_ar)
    out = harness.call_module(capsys, gpu_link_probe, args)
    return out.rc, out, calls


def test_vfio_throttled_box_fails_and_lists_pairs(monkeypatch, capsys, rtx_facts):
    code, out, calls = run(monkeypatch, capsys, {"facts": rtx_facts, "devices": [0, 1, 2, 3]},
                           p2p_gbps=lambda i, j: 3.0, busbw=2.5)
    assert code == 1 and out["failed_thresholds"] is True
    assert calls["p2p"] == ([0, 1, 2, 3], 256 << 20)
    assert len(out["slow_pairs"]) == 12
    assert "12 slow GPU pair(s)" in out["msg"] and "0->1" in out["msg"] and "3.0" in out["msg"]
    assert "all-reduce busbw 2.5" in out["msg"]
    assert out["expectations"]["pairs"]["0->1"]["expected_gbps"] == pytest.approx(50.41, abs=0.01)


def test_healthy_box_passes(monkeypatch, capsys, rtx_facts):
    code, out, calls = run(monkeypatch, capsys, {"facts": rtx_facts, "devices": [0, 1, 2, 3], "allreduce_sizes": [1 << 20, 1 << 30]},
                           p2p_gbps=lambda i, j: 49.0, busbw=30.0)
    assert code == 0 and out["failed_thresholds"] is False and out["slow_pairs"] == []
    assert calls["allreduce"] == ([0, 1, 2, 3], [1 << 20, 1 << 30])
    assert out["allreduce_gate"]["size_bytes"] == 1 << 30


def test_report_only(monkeypatch, capsys, rtx_facts):
    args = {"facts": rtx_facts, "devices": [0, 1], "fail_on_slow": False, "measure": ["p2p"]}
    code, out, dummy = run(monkeypatch, capsys, args, p2p_gbps=lambda i, j: 3.0, busbw=None)
    assert code == 0 and out["failed_thresholds"] is True and len(out["slow_pairs"]) == 2 and out["allreduce"] == []


@pytest.mark.parametrize("args,msg", [
    ({"min_p2p_fraction": 1.5}, "min_p2p_fraction must be a fraction in (0, 1] or null"),
    ({"min_busbw_fraction": 0}, "min_busbw_fraction must be a fraction in (0, 1] or null"),
    ({"devices": [0]}, "devices must be at least two distinct GPU indices in 0..7"),
    ({"devices": [0, 8]}, "devices must be at least two distinct GPU indices in 0..7"),
    ({"devices": [1, 1]}, "devices must be at least two distinct GPU indices"),
    ({"p2p_iters": 0}, "p2p_iters must be >= 1"),
    ({"allreduce_sizes": [2]}, "allreduce_sizes must be byte counts >= 4"),
    ({"measure": ["bogus"]}, "value of measure must be one or more of: p2p, allreduce"),
])
def test_bad_input(monkeypatch, capsys, rtx_facts, args, msg):
    code, out, calls = run(monkeypatch, capsys, dict(args, facts=rtx_facts), p2p_gbps=lambda i, j: 1.0, busbw=1.0)
    assert code == 1 and msg in out["msg"]
    assert calls == {}  # nothing was measured


def test_missing_torch(monkeypatch, capsys, rtx_facts):
    monkeypatch.setattr(gpu_link_probe, "HAS_TORCH", False)
    monkeypatch.setattr(gpu_link_probe, "TORCH_IMPORT_ERROR", "ImportError: torch")
    out = harness.call_module(capsys, gpu_link_probe, {"facts": rtx_facts})
    assert out["failed"] and "torch" in out["msg"]

# -*- coding: utf-8 -*-
# Copyright: gpuhost.sglang contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
from __future__ import absolute_import, division, print_function

__metaclass__ = type

import os

import pytest

from ansible_collections.gpuhost.sglang.plugins.module_utils.gpu import link_probe as lp
from ansible_collections.gpuhost.sglang.plugins.module_utils.gpu import nvml_facts as nf
from ansible_collections.gpuhost.sglang.tests.harness import fake_nvml as fake


@pytest.fixture(scope="module")
def rtx():
    return nf.collect(fake.rtx_pro_6000_box(), host={})


@pytest.fixture(scope="module")
def h100():
    return nf.collect(fake.h100_sxm_box(), host={})


def pairs_of(n, bw, lat=12.0, override=None):
    out = []
    for i in range(n):
        for j in range(n):
            if i != j:
                out.append({"src": i, "dst": j, "bandwidth_gbps": (override or {}).get((i, j), bw), "latency_us": lat})
    return out


def test_pcie_gen5_x16_expectation(rtx):
    e = lp.pair_expectation(rtx, 0, 1)
    assert e["path"] == "pcie" and (e["gen"], e["width"]) == (5, 16)
    assert e["raw_gbps"] == pytest.approx(63.01, abs=0.01)
    assert e["expected_gbps"] == pytest.approx(50.41, abs=0.01)
    assert "PHB" in e["basis"]


def test_cross_socket_pair_without_p2p_is_host_staged(rtx):
    e = lp.pair_expectation(rtx, 0, 4)
    assert e["path"] == "pcie-staged"
    assert e["expected_gbps"] == pytest.approx(25.2, abs=0.01)
    assert "P2P not supported" in e["basis"] and "SYS" in e["basis"]


def test_nvswitch_expectation_and_busbw(h100):
    ex = lp.expectations(h100)
    e = ex["pairs"][(3, 6)]
    assert e["path"] == "nvlink" and e["links"] == 18
    assert e["raw_gbps"] == 450.0 and e["expected_gbps"] == 382.5
    assert ex["busbw_gbps"] == pytest.approx(306.0)
    assert len(ex["pairs"]) == 56


def test_ring_busbw_uses_slowest_neighbour(rtx):
    ex = lp.expectations(rtx)
    # ring 0-1-...-7-0 crosses the sockets (3->4, 7->0): host-staged 25.2 x 0.8
    assert ex["busbw_gbps"] == pytest.approx(20.16)
    ex4 = lp.expectations(rtx, devices=[0, 1, 2, 3])
    assert ex4["busbw_gbps"] == pytest.approx(40.33, abs=0.01)


@pytest.mark.parametrize("size,secs,n,alg,bus", [
    (1 << 30, 1.0, 8, 1.0737, 1.8790), (1 << 30, 0.0032738, 2, 327.98, 327.98), (4 << 20, 0.001, 4, 4.194, 6.291),
])
def test_bus_bandwidth_is_the_nccl_tests_formula(size, secs, n, alg, bus):
    a, b = lp.bus_bandwidth(size, secs, n)
    assert a == pytest.approx(alg, rel=1e-3) and b == pytest.approx(bus, rel=1e-3)


def test_vfio_throttled_pcie_path_fails_with_a_table(rtx):
    """The operators' case: P2P inside a socket looks fine to NVML, but the VFIO/IOMMU path gives ~3 GB/s."""
    devices = [0, 1, 2, 3]
    ex = lp.expectations(rtx, devices)
    pairs = pairs_of(4, 3.1)
    allreduce = [{"size_bytes": 1 << 30, "busbw_gbps": 2.4}]
    v = lp.evaluate(pairs, allreduce, ex)
    assert v["failed"] is True
    assert len(v["slow_pairs"]) == 12
    assert v["allreduce_gate"]["failed"] is True
    assert "12 slow GPU pair(s)" in v["msg"]
    assert "all-reduce busbw 2.4 < 20.2 GB/s at 1GiB" in v["msg"]
    line = [x for x in v["msg"].splitlines() if x.startswith("0->1 ")][0]
    assert "3.1" in line and "50.4" in line and "25.2" in line and "50% of expected 50.4" in line


def test_healthy_pcie_passes(rtx):
    ex = lp.expectations(rtx, [0, 1, 2, 3])
    v = lp.evaluate(pairs_of(4, 48.0), [{"size_bytes": 1 << 30, "busbw_gbps": 31.0}], ex)
    assert v["failed"] is False and v["slow_pairs"] == []
    assert v["msg"].startswith("all 12 pair(s)")
    assert all(r["ratio"] == pytest.approx(0.952, abs=0.001) for r in v["pairs"])


def test_only_the_slow_pair_is_listed(h100):
    ex = lp.expectations(h100, [0, 1, 2])
    v = lp.evaluate(pairs_of(3, 390.0, override={(2, 0): 120.0}), [], ex)
    assert v["failed"] is True
    assert [(r["src"], r["dst"]) for r in v["slow_pairs"]] == [(2, 0)]
    assert "2->0" in v["msg"] and "1->2" not in v["msg"]


def test_absolute_floor_wins_when_higher(h100):
    ex = lp.expectations(h100, [0, 1])
    v = lp.evaluate(pairs_of(2, 300.0), [], ex, min_p2p_gbps=350.0, min_p2p_fraction=0.5)
    assert v["failed"] and v["slow_pairs"][0]["threshold_gbps"] == 350.0
    assert "(absolute)" in v["slow_pairs"][0]["reasons"][0]


def test_no_thresholds_never_fails(h100):
    ex = lp.expectations(h100, [0, 1])
    v = lp.evaluate(pairs_of(2, 1.0), [{"size_bytes": 1 << 20, "busbw_gbps": 0.1}], ex,
                    min_p2p_fraction=None, min_busbw_fraction=None)
    assert v["failed"] is False and v["allreduce_gate"]["threshold_gbps"] is None


def test_latency_ceiling(h100):
    ex = lp.expectations(h100, [0, 1])
    v = lp.evaluate(pairs_of(2, 390.0, lat=80.0), [], ex, max_latency_us=30.0)
    assert v["failed"] and "latency 80.0 > 30.0 us" in v["slow_pairs"][0]["reasons"]


def test_unknown_pcie_link_has_no_relative_bar():
    facts = {"gpu_count": 2, "gpus": [{"pcie_gen_max": None, "pcie_width_max": None}] * 2, "topology": [["X", "PHB"], ["PHB", "X"]],
             "p2p": {}, "nvlink_pairs": [[0, 0], [0, 0]]}
    ex = lp.expectations(facts)
    assert ex["pairs"][(0, 1)]["expected_gbps"] is None and ex["busbw_gbps"] is None
    v = lp.evaluate(pairs_of(2, 1.0), [], ex)
    assert v["failed"] is False
    v = lp.evaluate(pairs_of(2, 1.0), [], ex, min_p2p_gbps=10)
    assert v["failed"] is True


def test_gate_size_selects_the_point(h100):
    ex = lp.expectations(h100, [0, 1])
    ar = [{"size_bytes": 1 << 20, "busbw_gbps": 15.0}, {"size_bytes": 1 << 30, "busbw_gbps": 330.0}]
    assert lp.evaluate([], ar, ex)["allreduce_gate"]["failed"] is False
    assert lp.evaluate([], ar, ex, gate_size=1 << 20)["allreduce_gate"]["failed"] is True


def test_human_size():
    assert [lp.human_size(s) for s in (1 << 30, 16 << 20, 3 << 10, 100)] == ["1GiB", "16MiB", "3KiB", "100B"]


def test_hung_collective_is_killed_and_reported():
    def hang(queue):
        import time
        time.sleep(60)
    with pytest.raises(TimeoutError, match="did not finish within 1 s"):
        lp._run_children([(hang, ())], 1, "probe")


def test_worker_error_is_reported():
    def boom(queue):
        queue.put(("error", "rank 1: RuntimeError: NCCL error"))
    with pytest.raises(RuntimeError, match="probe failed: rank 1: RuntimeError: NCCL error"):
        lp._run_children([(boom, ())], 10, "probe")


def test_dead_worker_without_result_is_reported():
    def die(queue):
        os._exit(3)
    with pytest.raises(RuntimeError, match=r"worker processes exited \(codes \[3\]\)"):
        lp._run_children([(die, ())], 10, "probe")


def test_allreduce_plumbing_on_cpu_with_gloo():
    """One process per rank, rendezvous, timing and busbw on CPUs (runs where torch is installed)."""
    pytest.importorskip("torch")
    rows = lp.measure_allreduce([0, 1], [1 << 16, 1 << 20], iters=3, warmup=1, backend="gloo", timeout=120)
    assert [r["size_bytes"] for r in rows] == [1 << 16, 1 << 20]
    for r in rows:
        assert r["time_us"] > 0 and r["busbw_gbps"] == pytest.approx(r["algbw_gbps"])  # n=2: factor 1


@pytest.mark.parametrize("size,iters,expected", [
    (1 << 30, 20, 20), (64 << 20, 20, 20), (16 << 20, 20, 80), (1 << 20, 20, 500), (4, 20, 500), (1 << 20, 1000, 1000),
])
def test_iters_for_size(size, iters, expected):
    assert lp.iters_for_size(size, iters) == expected

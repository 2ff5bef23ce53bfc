# -*- coding: utf-8 -*-
# Copyright: gpuhost.sglang contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""gpu_facts on the boxes of tests/fixtures/gpu-boxes (README.md there: recorded or assembled, and from what): the
sysfs tree as ``sysfs_root``, NVML replayed from the box's nvml.json (harness.fake_nvml.CallReplayNVML, strict: a
call the file does not hold fails the test) or no pynvml at all, the nvidia-smi header from nvidia-smi.txt."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import json
import os
import shutil

import pytest

from ansible_collections.gpuhost.sglang.plugins.module_utils.gpu import link_probe
from ansible_collections.gpuhost.sglang.plugins.module_utils.gpu import nccl as gpu_nccl
from ansible_collections.gpuhost.sglang.plugins.modules import gpu_facts
from ansible_collections.gpuhost.sglang.tests import harness
from ansible_collections.gpuhost.sglang.tests.harness import fake_nvml

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..", "..", ".."))
BOXES = os.path.join(ROOT, "tests", "fixtures", "gpu-boxes")
H200_RECORDING = os.path.join(ROOT, "benchmarks", "gpu", "results", "2026-11-30-h200x2", "gpu_check.json")


def box_path(box, *parts):
    return os.path.join(BOXES, box, *parts)


def smi(box):
    with open(box_path(box, "nvidia-smi.txt")) as fh:
        text = fh.read()
    return lambda: (0, text, "")


def read(box, nvml=True, probe=None, overrides=None, root=None):
    replay = fake_nvml.CallReplayNVML.from_file(box_path(box, "nvml.json")) if nvml else None
    extra = {"link_probe": probe} if probe is not None else {}
    return gpu_facts.gather(replay, root or box_path(box, "root"), smi=smi(box), nccl_overrides=overrides, **extra)


def as_dict(settings):
    return dict((s["name"], s["value"]) for s in settings)


def topo_m(box):
    """The GPU x GPU matrix of `nvidia-smi topo -m` text."""
    rows = []
    with open(box_path(box, "topo-m.txt")) as fh:
        for line in fh:
            cells = line.rstrip("\n").split("\t")
            if cells[0].startswith("GPU"):
                rows.append([c.strip() for c in cells[1:]])
    n = len(rows)
    return [row[:n] for row in rows]


def measured(facts, gbps_by_level, busbw=None):
    """A gpu_link_probe verdict (link_probe.evaluate, the module's own decision) for bandwidths measured per
    topology level (GB/s), with the module's default fractions."""
    expect = link_probe.expectations(facts)
    pairs = [{"src": i, "dst": j, "bandwidth_gbps": gbps_by_level[facts["topology"][i][j]], "latency_us": 10.0}
             for (i, j) in sorted(expect["pairs"])]
    allreduce = [{"size_bytes": 1 << 30, "busbw_gbps": busbw if busbw is not None else min(gbps_by_level.values())}]
    return link_probe.evaluate(pairs, allreduce, expect)


def test_h200_replay_gives_the_recorded_facts_back():
    with open(H200_RECORDING) as fh:
        recorded = json.load(fh)["facts"]
    facts = read("h200-2x-vm")
    for key in ("gpu_count", "gpus", "topology", "p2p", "nvlink_pairs", "virtualization", "driver_version", "cuda_version",
                "nvml_version", "nvlink", "nvswitch", "arch", "summary"):
        assert facts[key] == recorded[key], key


RECORDED = {"h100-1x-vm": "2026-12-05-h100x1", "h200-1x-vm": "2026-12-05-h200x1-hostread"}


@pytest.mark.parametrize("nvml", [True, False])
@pytest.mark.parametrize("box", sorted(RECORDED))
def test_a_recorded_box_replays_to_the_modules_own_answer_on_the_machine(box, nvml):
    """A lent machine replayed from what benchmarks/gpu/host_read.py recorded there (sysfs, NVML call by call,
    nvidia-smi) reads as gpu_facts read the machine itself, run by its system python3 (benchmarks/gpu/day_one_facts.sh)
    with its pynvml and with pynvml hidden (the day-one case). NVML's health readings are not part of the host read.
    The H100's two runs came from two lent machines of the same kind (README.md there): its GPU UUID differs."""
    results = os.path.join(ROOT, "benchmarks", "gpu", "results", RECORDED[box])
    with open(os.path.join(results, "day-one-facts-%s.json" % ("nvml" if nvml else "no-nvml"))) as fh:
        real = json.load(fh)
    facts = read(box, nvml=nvml)
    assert real["gpu_arch_resolution"]["source"] == ("nvml" if nvml else "pci")
    for key in sorted(set(real) - {"invocation", "ansible_facts", "changed", "health", "gpus"}):
        assert facts[key] == real[key], key
    same_machine = box != "h100-1x-vm"
    assert [g if same_machine else dict(g, uuid=None) for g in facts["gpus"]] == \
        [g if same_machine else dict(g, uuid=None) for g in real["gpus"]]


@pytest.mark.parametrize("box", ["sm120-8x-2socket", "sm120-8x-vfio-guest", "h200-2x-vm", "h100-1x-vm", "h200-1x-vm"])
def test_nvml_topology_is_the_topo_m_text(box):
    facts = read(box)
    assert [[c.strip() for c in row] for row in facts["topology"]] == topo_m(box)
    assert facts["errors"] == []


@pytest.mark.parametrize("box, cc, sm, count, numa", [
    ("sm120-8x-2socket", "12.0", "sm_120", 8, [0, 0, 0, 0, 1, 1, 1, 1]),
    ("h200-2x-vm", "9.0", "sm_90", 2, [0, 0]),
    ("h100-1x-vm", "9.0", "sm_90", 1, [-1]),  # recorded: the guest's GPU has no NUMA node
    ("h200-1x-vm", "9.0", "sm_90", 1, [-1]),
])
def test_no_pynvml_the_pci_bus_names_the_architecture(monkeypatch, capsys, box, cc, sm, count, numa):
    """F1: the system Python of a fresh box has no nvidia-ml-py; the architecture still comes from sysfs."""
    monkeypatch.setattr(gpu_facts, "HAS_PYNVML", False)
    monkeypatch.setattr(gpu_facts, "pynvml", None)
    out = harness.call_module(capsys, gpu_facts, {"sysfs_root": box_path(box, "root"), "require_arch": True, "health": False})
    assert out.rc == 0, out.get("msg")
    assert out["gpu_count"] == 0 and "pynvml" in out["reason"]
    assert out["pci_compute_capability"] == cc and len(out["pci_gpus"]) == count
    assert [g["numa_node"] for g in out["pci_gpus"]] == numa
    assert [g["driver"] for g in out["pci_gpus"]] == ["nvidia"] * count
    res = out["gpu_arch_resolution"]
    assert (res["compute_capability"], res["sm"], res["source"], res["error"]) == (cc, sm, "pci", None)
    assert "10de:" in res["evidence"] and "pynvml" in res["evidence"]


def test_nvml_wins_over_pci_and_the_override_over_both():
    from ansible_collections.gpuhost.sglang.plugins.module_utils.gpu import gpu_arch
    facts = read("sm120-8x-2socket")
    assert gpu_arch.resolve(facts)["source"] == "nvml"
    assert "8 GPU(s) (NVIDIA RTX PRO 6000 Blackwell Server Edition)" in gpu_arch.resolve(facts)["evidence"]
    assert gpu_arch.resolve(facts, "sm_100")["compute_capability"] == "10.0"
    assert gpu_arch.resolve(facts, "")["compute_capability"] is None


def test_unknown_nvidia_device_stops_naming_the_override(monkeypatch, capsys, tmp_path):
    """F1: NVIDIA GPUs on the PCI bus and no architecture derivable -> an error naming sglang_gpu_arch, not 'none'."""
    root = tmp_path / "root"
    shutil.copytree(box_path("sm120-8x-2socket", "root"), str(root), symlinks=True)
    for dev in (root / "sys" / "bus" / "pci" / "devices").iterdir():
        (dev / "device").write_text("0x3fff\n")  # an ID the table does not know
    monkeypatch.setattr(gpu_facts, "HAS_PYNVML", False)
    monkeypatch.setattr(gpu_facts, "pynvml", None)
    out = harness.call_module(capsys, gpu_facts, {"sysfs_root": str(root), "health": False})
    assert out.rc == 0 and "sglang_gpu_arch" in out["gpu_arch_resolution"]["error"]
    out = harness.call_module(capsys, gpu_facts, {"sysfs_root": str(root), "health": False, "require_arch": True})
    assert out.rc == 1
    assert "8 NVIDIA GPU(s) (10de:3fff)" in out["msg"] and "Set sglang_gpu_arch" in out["msg"]
    out = harness.call_module(capsys, gpu_facts, {"sysfs_root": str(root), "health": False, "require_arch": True,
                                                  "gpu_arch": "12.0"})
    assert out.rc == 0 and out["gpu_arch_resolution"]["source"] == "override"


def test_bad_override_names_the_allowed_values():
    from ansible_collections.gpuhost.sglang.plugins.module_utils.gpu import gpu_arch
    with pytest.raises(gpu_arch.GpuArchUnknown, match="sglang_gpu_arch='blackwell' is not an architecture; allowed: auto"):
        gpu_arch.resolve(read("sm120-8x-2socket"), "blackwell")


def test_vfio_guest_is_not_widened_on_nvml_alone():
    """F6: NVML says P2P OK inside a VFIO guest; without a measured, passing probe NCCL keeps its default."""
    facts = read("sm120-8x-vfio-guest")
    assert facts["virtualization"] == "passthrough"
    assert as_dict(facts["nccl"]) == {"NCCL_IB_DISABLE": "1"}, facts["nccl"]
    assert "without a measured, passing gpu_link_probe" in facts["nccl_p2p"]["evidence"]
    assert "src/graph/paths.cc" in facts["nccl_p2p"]["evidence"]


def test_vfio_guest_widened_on_a_passing_probe_disabled_on_a_crippled_one():
    facts = read("sm120-8x-vfio-guest")
    good = measured(facts, {"PHB": 48.0})
    assert not good["failed"]
    facts = read("sm120-8x-vfio-guest", probe=good)
    assert as_dict(facts["nccl"])["NCCL_P2P_LEVEL"] == "PHB"
    assert facts["nccl_p2p"]["source"] == "gpu_link_probe" and "PHB: 56 pair(s) pass, lowest 48.0 GB/s" in facts["nccl_p2p"]["evidence"]
    crippled = measured(facts, {"PHB": 4.0})
    facts = read("sm120-8x-vfio-guest", probe=crippled)
    assert as_dict(facts["nccl"]) == {"NCCL_IB_DISABLE": "1", "NCCL_P2P_DISABLE": "1"}
    assert "below threshold" in facts["nccl_p2p"]["evidence"]


def test_two_socket_box_level_is_the_one_the_probe_measured_best():
    """F6: bare metal / LXC, NVML OK up to SYS; the probe finds cross-socket P2P slow -> NODE, with its evidence."""
    facts = read("sm120-8x-2socket")
    assert as_dict(facts["nccl"])["NCCL_P2P_LEVEL"] == "SYS"  # NVML alone on bare metal
    probe = measured(facts, {"PHB": 50.0, "NODE": 45.0, "SYS": 9.0}, busbw=30.0)
    facts = read("sm120-8x-2socket", probe=probe)
    p2p = [s for s in facts["nccl"] if s["name"] == "NCCL_P2P_LEVEL"][0]
    assert p2p["value"] == "NODE"
    assert "SYS: 32 of 32 pair(s) below threshold" in p2p["reason"] and "NODE: 16 pair(s) pass" in p2p["reason"]
    # the inventory still wins
    facts = read("sm120-8x-2socket", probe=probe, overrides={"NCCL_P2P_LEVEL": "PHB"})
    assert as_dict(facts["nccl"])["NCCL_P2P_LEVEL"] == "PHB"


def test_the_pair_copies_decide_a_slow_all_reduce_is_noted():
    """The all-reduce ran under the NCCL settings of the time (in a guest: no P2P); the peer copies measure P2P."""
    facts = read("sm120-8x-vfio-guest")
    probe = measured(facts, {"PHB": 48.0}, busbw=1.0)
    assert probe["allreduce_gate"]["failed"]
    decision = gpu_nccl.p2p_decision(facts, probe)
    assert decision["setting"]["value"] == "PHB" and "all-reduce below its gate" in decision["evidence"]

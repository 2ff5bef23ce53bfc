# -*- coding: utf-8 -*-
# Copyright: gpuhost.sglang contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
from __future__ import absolute_import, division, print_function

__metaclass__ = type

import os

import pytest

from ansible_collections.gpuhost.sglang.plugins.modules import gpu_facts
from ansible_collections.gpuhost.sglang.tests import harness
from ansible_collections.gpuhost.sglang.tests.harness import fake_nvml as fake


def run(monkeypatch, capsys, args, nvml="missing"):
    if nvml == "missing":
        monkeypatch.setattr(gpu_facts, "HAS_PYNVML", False)
        monkeypatch.setattr(gpu_facts, "pynvml", None)
    else:
        monkeypatch.setattr(gpu_facts, "HAS_PYNVML", True)
        monkeypatch.setattr(gpu_facts, "pynvml", nvml)
    out = harness.call_module(capsys, gpu_facts, args)
    return out.rc, out


def test_no_nvml_library_is_zero_gpus_not_a_failure(monkeypatch, capsys, tmp_path):
    code, out = run(monkeypatch, capsys, {"sysfs_root": str(tmp_path)})
    assert code == 0 and not out.get("failed")
    assert out["gpu_count"] == 0 and "pynvml" in out["reason"]
    assert out["ansible_facts"]["gpuhost_gpu"]["gpu_count"] == 0
    assert out["nccl"] == [{"name": "NCCL_IB_DISABLE", "value": "1",
                            "reason": "no InfiniBand/RoCE device under /sys/class/infiniband: skip the IB transport probe"}]


def test_require_gpus_fails_without_nvml(monkeypatch, capsys, tmp_path):
    code, out = run(monkeypatch, capsys, {"require_gpus": True, "sysfs_root": str(tmp_path)})
    assert code == 1 and out["failed"]
    assert "nvidia-ml-py" in out["msg"] and "require_gpus" in out["msg"]


def test_driver_not_loaded_gives_reason(monkeypatch, capsys, tmp_path):
    code, out = run(monkeypatch, capsys, {"sysfs_root": str(tmp_path)}, nvml=fake.FakeNVML([], None, None, init_error=9))
    assert code == 0 and out["gpu_count"] == 0
    assert out["reason"] == "NVML could not be initialised: Driver Not Loaded"
    code, out = run(monkeypatch, capsys, {"sysfs_root": str(tmp_path), "require_gpus": True},
                    nvml=fake.FakeNVML([], None, None, init_error=9))
    assert code == 1 and "found 0 (NVML could not be initialised: Driver Not Loaded)" in out["msg"]


def test_eight_rtx_gpus(monkeypatch, capsys, tmp_path):
    code, out = run(monkeypatch, capsys, {"require_gpus": True, "min_gpus": 8, "sysfs_root": str(tmp_path)},
                    nvml=fake.rtx_pro_6000_box())
    assert code == 0 and out["gpu_count"] == 8 and out["arch"] == "Blackwell"
    assert out["topology"][1][5] == "SYS"
    assert {"name": "NCCL_P2P_LEVEL", "value": "PHB"} == {k: v for k, v in out["nccl"][1].items() if k != "reason"}


def test_min_gpus_not_met(monkeypatch, capsys, tmp_path):
    code, out = run(monkeypatch, capsys, {"require_gpus": True, "min_gpus": 16, "sysfs_root": str(tmp_path)},
                    nvml=fake.rtx_pro_6000_box())
    assert code == 1 and "expected at least 16 GPU(s), found 8" in out["msg"]


@pytest.mark.parametrize("args,msg", [
    ({"min_gpus": 0}, "min_gpus must be >= 1"),
    ({"pci_arch_table": [{"start": "0x20", "end": "0x10", "arch": "x"}]}, "pci_arch_table[0]: start 0x0020 > end 0x0010"),
    ({"facts": {"gpus": []}}, "facts must be a gpu_facts result with an integer gpu_count"),
    ({"nccl_overrides": {"nccl_debug": "WARN"}}, "nccl override names must be upper-case NCCL variables"),
])
def test_bad_input_is_a_clear_error(monkeypatch, capsys, tmp_path, args, msg):
    args = dict(args, sysfs_root=str(tmp_path))
    code, out = run(monkeypatch, capsys, args)
    assert code == 1 and msg in out["msg"] and "Traceback" not in out["msg"]


def test_given_facts_from_a_registered_result(monkeypatch, capsys, tmp_path):
    """A registered gpu_facts result (with changed/invocation) can be fed back for planning."""
    from ansible_collections.gpuhost.sglang.plugins.module_utils.gpu import nvml_facts
    facts = nvml_facts.collect(fake.h100_sxm_box(), host={})
    registered = dict(facts, changed=False, invocation={"module_args": {}}, failed=False)
    code, out = run(monkeypatch, capsys, {"facts": registered, "sysfs_root": str(tmp_path)})
    assert code == 0 and out["gpu_count"] == 8
    assert [s["name"] for s in out["nccl"]] == ["NCCL_IB_DISABLE", "NCCL_P2P_LEVEL"]
    assert out["nccl"][1]["value"] == "NVL"


# The first lines of a real `nvidia-smi` on driver 580.105.08 (the header layout of NVIDIA's nvidia-smi since R525).
SMI_580 = """Sat Nov 29 19:40:41 2025
+-----------------------------------------------------------------------------------------+
| NVIDIA-SMI 580.105.08             Driver Version: 580.105.08     CUDA Version: 13.0     |
+-----------------------------------------+------------------------+----------------------+
"""


def fake_smi(tmp_path, text, rc=0):
    bindir = tmp_path / "smibin"
    bindir.mkdir()
    smi = bindir / "nvidia-smi"
    smi.write_text("#!/bin/sh\ncat <<'EOF'\n%sEOF\nexit %d\n" % (text, rc))
    smi.chmod(0o755)
    return str(bindir)


def test_without_pynvml_the_driver_and_its_cuda_version_come_from_nvidia_smi(monkeypatch, capsys, tmp_path):
    """The serving host often has no nvidia-ml-py for the system Python; nvidia-smi (installed with the driver or,
    in a container, by nvidia_driver's container mode) still says which CUDA the driver supports."""
    monkeypatch.setenv("PATH", fake_smi(tmp_path, SMI_580) + ":" + os.environ["PATH"])
    code, out = run(monkeypatch, capsys, {"sysfs_root": str(tmp_path)})
    assert code == 0 and out["gpu_count"] == 0
    assert out["driver_version"] == "580.105.08" and out["cuda_version"] == "13.0"
    assert out["driver_source"] == "nvidia-smi"


def test_nvidia_smi_failing_leaves_the_driver_unknown(monkeypatch, capsys, tmp_path):
    text = "NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver."
    monkeypatch.setenv("PATH", fake_smi(tmp_path, text, rc=9) + ":" + os.environ["PATH"])
    code, out = run(monkeypatch, capsys, {"sysfs_root": str(tmp_path)})
    assert code == 0 and out["driver_version"] is None and out["cuda_version"] is None
    assert out["driver_source"] is None


def test_nvml_is_the_source_when_it_answers(monkeypatch, capsys, tmp_path):
    nvml = fake.rtx_pro_6000_box()
    nvml.driver, nvml.cuda = "580.105.08", 13000
    code, out = run(monkeypatch, capsys, {"sysfs_root": str(tmp_path)}, nvml=nvml)
    assert out["driver_version"] == "580.105.08" and out["cuda_version"] == "13.0" and out["driver_source"] == "nvml"


def test_health_reported_per_gpu_with_kernel_log_xid(monkeypatch, capsys, tmp_path):
    kmsg = tmp_path / "kmsg"
    kmsg.write_text(fake.KMSG_XID_79 + "\n")
    code, out = run(monkeypatch, capsys, {"sysfs_root": str(tmp_path), "kernel_log": str(kmsg)},
                    nvml=fake.rtx_pro_6000_box())
    assert code == 0 and out["health"]["state"] == "degraded"
    assert out["health"]["problems"] == ["gpu1: xid 79"] and out["health"]["xid_source"] == "kernel_log"
    assert out["ansible_facts"]["gpuhost_gpu"]["health"]["gpus"][1]["xids"] == [79]


def test_health_thermal_throttle_and_link_probe_p2p(monkeypatch, capsys, tmp_path):
    kmsg = tmp_path / "kmsg"
    kmsg.write_text("")
    code, out = run(monkeypatch, capsys, {"sysfs_root": str(tmp_path), "kernel_log": str(kmsg)},
                    nvml=fake.thermal_throttle_box())
    assert out["health"]["gpus"][0]["clock_events"] == ["sw_thermal_slowdown", "hw_thermal_slowdown"]
    probe = {"pairs": [{"src": 0, "dst": 1}], "slow_pairs": [], "failed_thresholds": False}
    code, out = run(monkeypatch, capsys, {"sysfs_root": str(tmp_path), "kernel_log": str(kmsg), "link_probe": probe},
                    nvml=fake.nvlink_bridge_pair())
    assert code == 0 and out["health"]["p2p"]["state"] == "ok" and out["health"]["state"] == "ok"


def test_health_off_and_without_pynvml(monkeypatch, capsys, tmp_path):
    code, out = run(monkeypatch, capsys, {"sysfs_root": str(tmp_path), "health": False}, nvml=fake.h200_box())
    assert "health" not in out
    code, out = run(monkeypatch, capsys, {"sysfs_root": str(tmp_path), "kernel_log": str(tmp_path / "none")})
    assert code == 0 and out["health"]["state"] == "unknown" and "pynvml" in out["health"]["reason"]

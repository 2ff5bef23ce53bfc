# -*- coding: utf-8 -*-
# Copyright: gpuhost.sglang contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
from __future__ import absolute_import, division, print_function

__metaclass__ = type

import pytest

from ansible_collections.gpuhost.sglang.plugins.module_utils.gpu import nvml_facts as nf
from ansible_collections.gpuhost.sglang.tests.harness import fake_nvml as fake


@pytest.mark.parametrize("cc,arch,sm", [
    ((12, 0), "Blackwell", "sm_120"), ((10, 0), "Blackwell", "sm_100"), ((9, 0), "Hopper", "sm_90"),
    ((8, 9), "Ada Lovelace", "sm_89"), ((8, 0), "Ampere", "sm_80"), ((7, 5), "Turing", "sm_75"),
    ((12, 7), "Blackwell", "sm_127"), ((3, 5), "unknown", "sm_35"),
])
def test_arch_from_cc(cc, arch, sm):
    assert nf.arch_from_cc(*cc) == (arch, sm)


@pytest.mark.parametrize("raw,text", [(12080, "12.8"), (13000, "13.0"), (12040, "12.4"), (11080, "11.8")])
def test_cuda_version_text(raw, text):
    assert nf.cuda_version_text(raw) == text


@pytest.mark.parametrize("raw,norm", [(b"00000000:2A:00.0", "0000:2a:00.0"), ("0000:2a:00.0", "0000:2a:00.0"),
                                      ("00000001:c1:00.0", "0001:c1:00.0")])
def test_normalize_bus_id(raw, norm):
    assert nf.normalize_bus_id(raw) == norm


def test_rtx_pro_6000_pcie_box():
    nvml = fake.rtx_pro_6000_box()
    facts = nf.collect(nvml, host={"hypervisor_flag": False})
    assert nvml.shutdown_called
    assert facts["gpu_count"] == 8 and facts["reason"] is None
    g = facts["gpus"][5]
    assert g["name"] == "NVIDIA RTX PRO 6000 Blackwell Server Edition"
    assert (g["arch"], g["sm"], g["compute_capability"]) == ("Blackwell", "sm_120", "12.0")
    assert g["memory_total_mib"] == 97887
    assert (g["pcie_gen_current"], g["pcie_gen_max"], g["pcie_width_current"], g["pcie_width_max"]) == (5, 5, 16, 16)
    assert g["pci_bus_id"] == "0000:ab:00.0"
    assert g["power_limit_w"] == 600.0 and g["persistence_mode"] is True
    assert g["nvlink_count"] == 0 and g["nvlinks"] == []
    assert facts["nvlink"] is False and facts["nvswitch"] is False
    assert facts["driver_version"] == "570.124.06" and facts["cuda_version"] == "12.8"
    assert facts["arch"] == "Blackwell"
    topo = facts["topology"]
    assert topo[0][0] == "X" and topo[0][3] == "PHB" and topo[0][4] == "SYS" and topo[7][6] == "PHB"
    assert facts["p2p"]["read"][0][1] == "OK" and facts["p2p"]["read"][0][4] == "TNS"
    assert facts["p2p"]["write"][6][2] == "TNS" and facts["p2p"]["nvlink"][0][1] == "NS"
    assert facts["p2p"]["read"][3][3] == "X"
    assert facts["summary"] == {"p2p_all_ok": False, "worst_topology": "SYS", "nvlink_all_pairs": False}
    assert facts["virtualization"] == "bare_metal"
    assert facts["errors"] == []


def test_rtx_box_in_a_vfio_vm_is_passthrough():
    facts = nf.collect(fake.rtx_pro_6000_box(virt=1), host={"hypervisor_flag": True})
    assert facts["virtualization"] == "passthrough"
    assert all(g["virtualization_mode"] == "passthrough" for g in facts["gpus"])


def test_hypervisor_flag_alone_means_passthrough_gpus():
    facts = nf.collect(fake.rtx_pro_6000_box(virt=0), host={"hypervisor_flag": True})
    assert facts["virtualization"] == "passthrough"


@pytest.mark.parametrize("remote_type_api", [True, False])
def test_h100_nvswitch_box(remote_type_api):
    facts = nf.collect(fake.h100_sxm_box(remote_type_api=remote_type_api), host={})
    assert facts["gpu_count"] == 8
    assert facts["arch"] == "Hopper" and facts["gpus"][0]["sm"] == "sm_90"
    assert all(g["nvlink_count"] == 18 and g["nvswitch_links"] == 18 for g in facts["gpus"])
    assert facts["nvswitch"] is True and facts["nvlink"] is True
    assert all(facts["topology"][i][j] == "NV18" for i in range(8) for j in range(8) if i != j)
    assert facts["nvlink_pairs"][2][7] == 18
    assert facts["summary"]["nvlink_all_pairs"] is True and facts["summary"]["p2p_all_ok"] is True
    assert facts["summary"]["worst_topology"] == "NV"
    assert facts["cuda_version"] == "12.4"


def test_direct_nvlink_bridge_pair_and_unsupported_power():
    facts = nf.collect(fake.nvlink_bridge_pair(), host={})
    assert facts["topology"] == [["X", "NV4"], ["NV4", "X"]]
    assert facts["nvswitch"] is False and facts["nvlink"] is True
    assert facts["gpus"][0]["power_limit_w"] is None
    assert any("power limit" in e and "Not Supported" in e for e in facts["errors"])
    assert facts["p2p"]["atomics"][0][1] == "NS" and facts["p2p"]["nvlink"][0][1] == "OK"


def test_init_failure_propagates_for_the_caller():
    with pytest.raises(fake.FakeNVMLError):
        nf.collect(fake.FakeNVML([], None, None, init_error=9))


def test_zero_gpus():
    facts = nf.collect(fake.FakeNVML([], None, None), host={})
    assert facts["gpu_count"] == 0 and facts["reason"] == "NVML reports no GPU"
    assert facts["driver_version"] == "570.124.06"


def test_read_hypervisor(tmp_path):
    (tmp_path / "proc").mkdir()
    (tmp_path / "proc" / "cpuinfo").write_text("processor: 0\nflags\t\t: fpu vme sse hypervisor lahf_lm\n")
    dmi = tmp_path / "sys" / "class" / "dmi" / "id"
    dmi.mkdir(parents=True)
    (dmi / "product_name").write_text("Standard PC (Q35 + ICH9, 2009)\n")
    (dmi / "sys_vendor").write_text("QEMU\n")
    expected = {"hypervisor_flag": True, "dmi_product": "Standard PC (Q35 + ICH9, 2009)", "dmi_vendor": "QEMU"}
    assert nf.read_hypervisor(str(tmp_path)) == expected
    (tmp_path / "proc" / "cpuinfo").write_text("flags\t\t: fpu vme sse\n")
    assert nf.read_hypervisor(str(tmp_path))["hypervisor_flag"] is False
    assert nf.read_hypervisor(str(tmp_path / "nothing")) == {"hypervisor_flag": False, "dmi_product": None, "dmi_vendor": None}


@pytest.mark.parametrize("text,parsed", [
    ("| NVIDIA-SMI 580.105.08             Driver Version: 580.105.08     CUDA Version: 13.0     |",
     ("580.105.08", "13.0")),
    ("| NVIDIA-SMI 575.51.03             Driver Version: 575.51.03   CUDA Version: 12.9     |", ("575.51.03", "12.9")),
    # read on the lent H200 machine, 2026-12-01 (docs/gpu-stack.md)
    ("| NVIDIA-SMI 580.159.04             Driver Version: 580.159.04     CUDA Version: 13.0     |",
     ("580.159.04", "13.0")),
    # the stand-in nvidia-smi of tests/fixtures/nvidia-apt-repo.sh
    ("NVIDIA-SMI 570.124.06 (stand-in)   Driver Version: 570.124.06   CUDA Version: 12.8", ("570.124.06", "12.8")),
    ("NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver.", None),
    ("", None),
])
def test_parse_nvidia_smi_banner(text, parsed):
    assert nf.parse_nvidia_smi_banner(text) == parsed


def test_driver_cuda_version_is_kept_when_nvml_reports_no_gpu():
    nvml = fake.FakeNVML([], None, None, driver="580.105.08", cuda=13000)
    facts = nf.collect(nvml)
    assert facts["gpu_count"] == 0 and facts["driver_version"] == "580.105.08" and facts["cuda_version"] == "13.0"

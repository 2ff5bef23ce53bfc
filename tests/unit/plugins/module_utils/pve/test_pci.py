from __future__ import (absolute_import, division, print_function)

__metaclass__ = type

import os

import pytest

from ansible_collections.gpuhost.sglang.plugins.module_utils.pve import pci as p

FIX = os.path.join(os.path.dirname(__file__), "fixtures")


def _read(name):
    with open(os.path.join(FIX, name)) as f:
        return f.read()


@pytest.mark.parametrize("raw,canon", [
    ("01:00.0", "0000:01:00.0"),
    ("0000:41:00.0", "0000:41:00.0"),
    ("0000:C1:1F.7", "0000:c1:1f.7"),
    (" 0001:0a:00.1 ", "0001:0a:00.1"),
])
def test_normalize_bdf_ok(raw, canon):
    assert p.normalize_bdf(raw) == canon


@pytest.mark.parametrize("bad", ["", "01:00", "01:00.8", "01:20.0", "0000:01:00.0.0", "gpu0", "10de:2bb5", 1, None])
def test_normalize_bdf_rejects(bad):
    with pytest.raises(p.PciError) as e:
        p.normalize_bdf(bad)
    assert "0000:01:00.0" in str(e.value)


def test_parse_lspci_acs_and_drivers():
    devs = {d["address"]: d for d in p.parse_lspci(_read("lspci-amd-2gpu.txt"))}
    assert set(devs) == {"0000:00:00.0", "0000:00:01.1", "0000:00:03.1", "0000:01:00.0", "0000:01:00.1", "0000:41:00.0"}
    br = devs["0000:00:01.1"]
    assert br["is_bridge"] and br["acs_redirecting"]
    assert br["acs_ctl"] == {"SrcValid": True, "TransBlk": False, "ReqRedir": True, "CmpltRedir": True,
                             "UpstreamFwd": True, "EgressCtrl": False, "DirectTrans": False}
    assert br["acs_cap"]["DirectTrans"] is True
    assert devs["0000:00:03.1"]["is_bridge"] and not devs["0000:00:03.1"]["acs_redirecting"]
    assert devs["0000:00:00.0"]["acs_ctl"] is None and not devs["0000:00:00.0"]["is_bridge"]
    assert devs["0000:01:00.0"]["vendor"] == "10de" and devs["0000:01:00.0"]["device"] == "2bb5"
    assert devs["0000:01:00.0"]["driver"] == "nvidia"
    assert devs["0000:41:00.0"]["driver"] == "vfio-pci"


def test_cpu_flags_and_iommu_evidence():
    intel = p.cpu_virt_flags("vendor_id\t: GenuineIntel\nflags\t\t: fpu vmx sse2\nvendor_id\t: GenuineIntel\n")
    assert intel == {"vendor": "intel", "vmx": True, "svm": False}
    amd = p.cpu_virt_flags("vendor_id : AuthenticAMD\nflags : fpu svm\n")
    assert p.iommu_evidence(amd, ["DSDT", "IVRS"])["capable"] is True
    assert p.iommu_evidence(intel, ["DMAR", "FACP"])["vendor"] == "intel"
    no_flags = p.cpu_virt_flags("vendor_id : GenuineIntel\nflags : fpu sse2\n")
    ev = p.iommu_evidence(no_flags, ["DMAR"])
    assert ev["capable"] is False and "vmx/svm" in ev["reason"]
    ev = p.iommu_evidence(intel, ["FACP"])
    assert ev["capable"] is False and "DMAR or IVRS" in ev["reason"]
    assert p.iommu_evidence(intel, ["IVRS"])["capable"] is False


def test_iommu_args():
    assert p.iommu_kernel_args("intel") == ["intel_iommu=on", "iommu=pt"]
    assert p.iommu_kernel_args("amd", passthrough=False) == ["amd_iommu=on"]
    with pytest.raises(p.PciError, match="intel, amd"):
        p.iommu_kernel_args(None)


@pytest.mark.parametrize("cmdline,mode", [
    ("BOOT_IMAGE=/vmlinuz root=/dev/sda1 quiet", "default"),
    ("root=ZFS=rpool/ROOT/pve-1 boot=zfs intel_iommu=on", "translated"),
    ("root=ZFS=rpool/ROOT/pve-1 boot=zfs intel_iommu=on iommu=pt", "passthrough"),
    ("quiet amd_iommu=off", "off"),
])
def test_iommu_mode(cmdline, mode):
    assert p.iommu_mode_from_cmdline(cmdline) == mode


def test_p2p_report_warnings():
    devs = p.parse_lspci(_read("lspci-amd-2gpu.txt"))
    rep = p.p2p_report("lxc", "translated", devs)
    assert rep["gpus"] == ["0000:01:00.0", "0000:41:00.0"]
    assert rep["redirecting_bridges"] == 1
    assert any("0000:00:01.1" in w for w in rep["warnings"])
    assert any("translated" in w for w in rep["warnings"])
    assert any("vfio" in w for w in p.p2p_report("vfio", "passthrough", devs)["warnings"])
    # ACS off and passthrough IOMMU: nothing throttles.
    clean = [dict(d, acs_redirecting=False) for d in devs]
    assert p.p2p_report("baremetal", "passthrough", clean)["warnings"] == []


HOST_ADDRS = ["0000:00:01.1", "0000:01:00.0", "0000:01:00.1", "0000:41:00.0"]
GPUS = ["0000:01:00.0", "0000:41:00.0"]
IOMMU_OK = {"capable": True, "vendor": "amd", "reason": "ok"}
IOMMU_NO = {"capable": False, "vendor": "intel", "reason": "no vmx/svm flag in /proc/cpuinfo"}


def _pf(mode="vfio", vfio=("41:00.0",), lxc=("01:00.0",), iommu=None, **kw):
    iommu = IOMMU_OK if iommu is None else iommu
    return p.preflight_problems(mode, list(vfio), list(lxc), HOST_ADDRS, iommu, GPUS, **kw)


def test_preflight_ok_split_and_normalized():
    problems, norm = _pf()
    assert problems == []
    assert norm == {"vfio_gpus": ["0000:41:00.0"], "lxc_gpus": ["0000:01:00.0"]}


@pytest.mark.parametrize("kw,needle", [
    (dict(mode="kvm"), "proxmox_host_mode: 'kvm' is not a valid mode (allowed: baremetal, lxc, vfio, none)"),
    (dict(vfio=("0000:99:00.0",)), "proxmox_host_vfio_gpus: 0000:99:00.0 is not a PCI address on this host"),
    (dict(vfio=("gpu0",)), "proxmox_host_vfio_gpus: 'gpu0' is not a PCI address"),
    (dict(vfio=("41:00.0",), lxc=("0000:41:00.0",)), "0000:41:00.0 is claimed by two modes"),
    (dict(iommu=IOMMU_NO), "proxmox_host_mode: vfio needs an IOMMU but this host has none: no vmx/svm"),
    (dict(vfio=()), "proxmox_host_vfio_gpus must list at least one PCI address"),
    (dict(mode="lxc", lxc=()), "proxmox_host_vfio_gpus is only used with proxmox_host_mode: vfio (got lxc)"),
    (dict(acs_disable=True), "proxmox_host_acs_disable: true is not allowed with proxmox_host_mode: vfio"),
    (dict(ctid=100, guests={"qemu": [100], "lxc": [101]}), "proxmox_lxc_gpu_ctid: 100 is a QEMU VM on this cluster"),
    (dict(ctid="abc"), "proxmox_lxc_gpu_ctid: abc is not a valid container id (allowed: 100..999999999)"),
    (dict(vfio=("41:00.0", "0000:41:00.0"), lxc=()), "proxmox_host_vfio_gpus lists 0000:41:00.0 more than once"),
])
def test_preflight_problems(kw, needle):
    problems, dummy = _pf(**kw)
    assert any(needle in x for x in problems), problems


def test_preflight_container_ok():
    problems, dummy = _pf(mode="lxc", vfio=(), lxc=GPUS, ctid="101", guests={"qemu": [100], "lxc": [101]})
    assert problems == []

from __future__ import (absolute_import, division, print_function)

__metaclass__ = type

import os

import pytest

from ansible_collections.gpuhost.sglang.plugins.module_utils.pve import boot as b

FIX = os.path.join(os.path.dirname(__file__), "fixtures")


def _read(name):
    with open(os.path.join(FIX, name)) as f:
        return f.read()


def test_detect_systemd_boot():
    d = b.detect_bootloader(0, _read("pbt-uefi.txt"), True)
    assert d["bootloader"] == "systemd-boot" and d["proxmox_boot_tool"] is True


def test_detect_pbt_grub():
    d = b.detect_bootloader(0, _read("pbt-grub.txt"), True)
    assert d == dict(d, bootloader="grub", proxmox_boot_tool=True)


@pytest.mark.parametrize("rc,out,exists,why", [
    (None, "", False, "not installed"),
    (2, "E: /etc/kernel/proxmox-boot-uuids does not exist.", False, "absent"),
    (0, "System currently booted with uefi\n", True, "no configured ESP"),
])
def test_detect_plain_grub(rc, out, exists, why):
    d = b.detect_bootloader(rc, out, exists)
    assert d["bootloader"] == "grub" and d["proxmox_boot_tool"] is False and why in d["evidence"]


def test_grub_dropin_roundtrip():
    text = b.render_grub_dropin(["intel_iommu=on", "iommu=pt"], "Ansible managed")
    assert 'GRUB_CMDLINE_LINUX_DEFAULT="${GRUB_CMDLINE_LINUX_DEFAULT} intel_iommu=on iommu=pt"' in text
    assert b.parse_grub_dropin(text) == ["intel_iommu=on", "iommu=pt"]
    assert b.parse_grub_dropin("GRUB_TIMEOUT=5\n") == []


@pytest.mark.parametrize("bad", [["intel_iommu=on iommu=pt"], ['quiet"'], ["$(reboot)"], "iommu=pt", [3]])
def test_bad_args(bad):
    with pytest.raises(b.BootError):
        b.validate_args(bad)


def test_merge_cmdline_replace_and_append():
    cur = "root=ZFS=rpool/ROOT/pve-1 boot=zfs iommu=off quiet"
    assert b.merge_cmdline(cur, ["intel_iommu=on", "iommu=pt"]) == "root=ZFS=rpool/ROOT/pve-1 boot=zfs iommu=pt quiet intel_iommu=on"
    assert b.merge_cmdline(cur, [], remove=["quiet"]) == "root=ZFS=rpool/ROOT/pve-1 boot=zfs iommu=off"


def test_plan_cmdline_add_then_revert_keeps_operator_args():
    cur = "root=ZFS=rpool/ROOT/pve-1 boot=zfs iommu=pt"
    line, added = b.plan_cmdline_change(cur, ["intel_iommu=on", "iommu=pt"], [])
    assert line == "root=ZFS=rpool/ROOT/pve-1 boot=zfs iommu=pt intel_iommu=on"
    assert added == ["intel_iommu=on"]  # iommu=pt was the operator's
    # second run: idempotent
    line2, added2 = b.plan_cmdline_change(line, ["intel_iommu=on", "iommu=pt"], added)
    assert (line2, added2) == (line, added)
    # revert removes only ours
    line3, added3 = b.plan_cmdline_change(line2, [], added2)
    assert line3 == cur and added3 == []


def test_plan_cmdline_switch_vendor():
    line, added = b.plan_cmdline_change("root=/dev/sda1 intel_iommu=on iommu=pt", ["amd_iommu=on", "iommu=pt"],
                                        ["intel_iommu=on", "iommu=pt"])
    assert line == "root=/dev/sda1 iommu=pt amd_iommu=on"
    assert added == ["amd_iommu=on", "iommu=pt"]


@pytest.mark.parametrize("mode,iommu,passthrough,extra,want", [
    # iommu=pt in every mode but none (GLM-5-NVFP4 model card), extra arguments too; IOMMU on only for vfio
    ("lxc", ["intel_iommu=on", "iommu=pt"], True, ["pcie_aspm=off"], ["iommu=pt", "pcie_aspm=off"]),
    ("baremetal", [], True, [], ["iommu=pt"]),
    ("baremetal", ["amd_iommu=on", "iommu=pt"], False, ["pci=noaer"], ["pci=noaer"]),
    ("vfio", ["intel_iommu=on", "iommu=pt"], True, ["pcie_aspm=off", "iommu=pt"], ["intel_iommu=on", "iommu=pt", "pcie_aspm=off"]),
    ("vfio", ["amd_iommu=on", "iommu=pt"], False, [], ["amd_iommu=on"]),
    ("none", ["intel_iommu=on", "iommu=pt"], True, ["pcie_aspm=off"], []),
])
def test_kernel_args_for_mode(mode, iommu, passthrough, extra, want):
    assert b.kernel_args_for_mode(mode, iommu, passthrough, extra) == want


@pytest.mark.parametrize("mode,iommu,extra,msg", [
    ("lxc", [], ["iommu=off"], "xs: 'iommu=off' conflicts with 'iommu=pt' (pt: true); allowed: drop it from xs or set pt: false"),
    ("vfio", ["intel_iommu=on", "iommu=pt"], ["intel_iommu=off"], "xs: 'intel_iommu=off' conflicts with 'intel_iommu=on' (mode vfio)"),
    ("lxc", [], ["a b"], "xs: 'a b' is not a single kernel argument"),
    ("lxc", [], "iommu=pt", "xs: must be a list"),
    ("kvm", [], [], "mode 'kvm' is not one of baremetal, lxc, vfio, none"),
])
def test_kernel_args_for_mode_bad_input(mode, iommu, extra, msg):
    with pytest.raises(b.BootError) as e:
        b.kernel_args_for_mode(mode, iommu, True, extra, extra_var="xs", passthrough_var="pt")
    assert msg in str(e.value)

from __future__ import (absolute_import, division, print_function)

__metaclass__ = type

import json

import pytest

from ansible_collections.gpuhost.sglang.plugins.modules import pve_kernel_cmdline as mod
from ansible_collections.gpuhost.sglang.tests import harness


def run(tmp_path, capsys, check=False, **args):
    base = dict(grub_dropin=str(tmp_path / "grub.d" / "gpuhost-sglang.cfg"), cmdline_file=str(tmp_path / "cmdline"),
                state_file=str(tmp_path / "state" / "k.json"))
    base.update(args)
    out = harness.call_module(capsys, mod, base, check_mode=check)
    return out.rc == 0, out


def test_grub_add_idempotent_revert(tmp_path, capsys):
    ok, r = run(tmp_path, capsys, args=["intel_iommu=on", "iommu=pt"], bootloader="grub")
    assert ok and r["changed"] and r["refresh_commands"] == [["update-grub"]]
    text = (tmp_path / "grub.d" / "gpuhost-sglang.cfg").read_text()
    assert '"${GRUB_CMDLINE_LINUX_DEFAULT} intel_iommu=on iommu=pt"' in text
    ok, r = run(tmp_path, capsys, args=["intel_iommu=on", "iommu=pt"], bootloader="grub")
    assert ok and not r["changed"] and r["refresh_commands"] == []
    ok, r = run(tmp_path, capsys, state="absent", bootloader="grub")
    assert r["changed"] and not (tmp_path / "grub.d" / "gpuhost-sglang.cfg").exists()
    assert r["absent_args"] == ["intel_iommu=on", "iommu=pt"]


def test_systemd_boot_keeps_operator_args(tmp_path, capsys):
    (tmp_path / "cmdline").write_text("root=ZFS=rpool/ROOT/pve-1 boot=zfs iommu=pt\n")
    ok, r = run(tmp_path, capsys, args=["amd_iommu=on", "iommu=pt"], bootloader="systemd-boot", proxmox_boot_tool=True)
    assert ok and r["changed"] and r["refresh_commands"] == [["proxmox-boot-tool", "refresh"]]
    assert (tmp_path / "cmdline").read_text() == "root=ZFS=rpool/ROOT/pve-1 boot=zfs iommu=pt amd_iommu=on\n"
    assert json.loads((tmp_path / "state" / "k.json").read_text())["systemd-boot"] == ["amd_iommu=on"]
    ok, r = run(tmp_path, capsys, args=["amd_iommu=on", "iommu=pt"], bootloader="systemd-boot", proxmox_boot_tool=True)
    assert not r["changed"]
    ok, r = run(tmp_path, capsys, state="absent", bootloader="systemd-boot", proxmox_boot_tool=True)
    assert r["changed"] and (tmp_path / "cmdline").read_text() == "root=ZFS=rpool/ROOT/pve-1 boot=zfs iommu=pt\n"


def test_check_mode_writes_nothing(tmp_path, capsys):
    (tmp_path / "cmdline").write_text("root=/dev/sda1\n")
    ok, r = run(tmp_path, capsys, check=True, args=["intel_iommu=on"], bootloader="systemd-boot")
    assert r["changed"] and (tmp_path / "cmdline").read_text() == "root=/dev/sda1\n"
    assert not (tmp_path / "state").exists()


def test_switching_bootloader_moves_args(tmp_path, capsys):
    (tmp_path / "cmdline").write_text("root=/dev/sda1\n")
    run(tmp_path, capsys, args=["intel_iommu=on"], bootloader="grub")
    ok, r = run(tmp_path, capsys, args=["intel_iommu=on"], bootloader="systemd-boot", proxmox_boot_tool=True)
    assert r["changed"] and not (tmp_path / "grub.d" / "gpuhost-sglang.cfg").exists()
    assert (tmp_path / "cmdline").read_text() == "root=/dev/sda1 intel_iommu=on\n"


@pytest.mark.parametrize("args,boot,needle", [
    (["intel_iommu=on iommu=pt"], "grub", "args:"),
    (["intel_iommu=on"], "systemd-boot", "does not exist"),
])
def test_bad_input_fails_cleanly(tmp_path, capsys, args, boot, needle):
    ok, r = run(tmp_path, capsys, args=args, bootloader=boot)
    assert not ok and needle in r["msg"]
    assert not (tmp_path / "grub.d").exists()


def test_mode_lxc_on_systemd_boot_then_none(tmp_path, capsys):
    (tmp_path / "cmdline").write_text("root=ZFS=rpool/ROOT/pve-1 boot=zfs\n")
    ok, r = run(tmp_path, capsys, mode="lxc", iommu_args=["amd_iommu=on", "iommu=pt"], extra_args=["pcie_aspm=off"],
                bootloader="systemd-boot", proxmox_boot_tool=True)
    assert ok and r["expected_args"] == ["iommu=pt", "pcie_aspm=off"]
    assert (tmp_path / "cmdline").read_text() == "root=ZFS=rpool/ROOT/pve-1 boot=zfs iommu=pt pcie_aspm=off\n"
    ok, r = run(tmp_path, capsys, mode="none", bootloader="systemd-boot", proxmox_boot_tool=True)
    assert ok and r["absent_args"] == ["iommu=pt", "pcie_aspm=off"]
    assert (tmp_path / "cmdline").read_text() == "root=ZFS=rpool/ROOT/pve-1 boot=zfs\n"


def test_mode_vfio_to_lxc_keeps_only_iommu_pt(tmp_path, capsys):
    run(tmp_path, capsys, mode="vfio", iommu_args=["intel_iommu=on", "iommu=pt"], bootloader="grub")
    ok, r = run(tmp_path, capsys, mode="lxc", iommu_args=["intel_iommu=on", "iommu=pt"], bootloader="grub")
    assert ok and r["changed"] and r["absent_args"] == ["intel_iommu=on"] and r["expected_args"] == ["iommu=pt"]
    assert '"${GRUB_CMDLINE_LINUX_DEFAULT} iommu=pt"' in (tmp_path / "grub.d" / "gpuhost-sglang.cfg").read_text()


def test_mode_bad_extra_arg_names_the_variable_and_writes_nothing(tmp_path, capsys):
    ok, r = run(tmp_path, capsys, mode="baremetal", extra_args=["iommu=off"], extra_args_var="proxmox_host_extra_kernel_args",
                passthrough_var="proxmox_host_iommu_passthrough", bootloader="grub")
    assert not ok and r["msg"].startswith("proxmox_host_extra_kernel_args: 'iommu=off' conflicts with 'iommu=pt'")
    assert not (tmp_path / "grub.d").exists() and not (tmp_path / "state").exists()


def test_mode_and_args_together_refused(tmp_path, capsys):
    ok, r = run(tmp_path, capsys, mode="lxc", args=["iommu=pt"], bootloader="grub")
    assert not ok and "either mode" in r["msg"]

# -*- coding: utf-8 -*-
# Copyright: gpuhost.sglang contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Final state of pve-vsdb (scenario proxmox_modes, case vfio_sdboot): vfio on systemd-boot, then switched to lxc with a container."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "proxmox_common"))
import standin_log as sl  # noqa: E402

# molecule verifies the four hosts of the scenario; these tests are this case's host's alone
testinfra_hosts = ["pve-vsdb"]


def test_kernel_cmdline_file_keeps_only_iommu_pt_in_lxc(host):
    # vfio -> lxc: amd_iommu=on (vfio only) is removed again, iommu=pt stays (every mode; GLM-5-NVFP4 model card)
    assert host.file("/etc/kernel/cmdline").content_string == "root=ZFS=rpool/ROOT/pve-1 boot=zfs iommu=pt\n"
    assert not host.file("/etc/default/grub.d/gpuhost-sglang.cfg").exists


def test_booted_with_iommu_pt_only(host):
    args = sl.cmdline(host)
    assert "root=ZFS=rpool/ROOT/pve-1" in args
    assert "amd_iommu=on" not in args and "iommu=pt" in args, args


def test_systemd_boot_path_used_not_grub(host):
    refreshes = [c for c in sl.calls(host, "proxmox-boot-tool") if c[1] == "refresh"]
    assert len(refreshes) >= 2
    assert sl.calls(host, "update-grub") == []


def test_reboots(host):
    assert len(sl.calls(host, "gpuhost-standin-reboot")) == 3  # vfio on; vfio -> lxc; the container check


def test_container_options_merged_over_the_role_defaults(host):
    conf = host.file("/etc/pve/lxc/101.conf")
    assert conf.contains("^memory: 4096$") and conf.contains("^cores: 2$")  # from proxmox_lxc_gpu_options
    assert conf.contains("^onboot: 1$") and conf.contains("^ostype: debian$")  # kept from the role defaults


def test_container_started_by_the_host_reboot(host):
    text = host.file("/root/after-reboot.txt").content_string
    assert text.startswith("status: running"), text
    assert "Starting CT 101\n" in text and "failed" not in text, text


def test_gpus_back_on_nvidia_and_vfio_gone(host):
    assert sl.driver(host, "0000:01:00.0") == "nvidia" and sl.driver(host, "0000:41:00.0") == "nvidia"
    assert not host.file("/etc/systemd/system/gpuhost-vfio-bind.service").exists
    assert not host.file("/etc/modules-load.d/gpuhost-vfio.conf").exists


def test_lxc_host_side(host):
    rule = host.file("/etc/udev/rules.d/70-gpuhost-nvidia.rules").content_string
    # nvidia-modprobe creates one node per -c minor (nvidia-modprobe.c); -u turns the minors into UVM nodes
    assert 'KERNEL=="nvidia", RUN+="/usr/local/sbin/nvidia-modprobe -c 0 -c 1 -c 255 ' in rule, rule
    assert 'KERNEL=="nvidia_uvm", RUN+="/usr/local/sbin/nvidia-modprobe -u -c 0"' in rule, rule
    unit = host.file("/etc/systemd/system/gpuhost-nvidia-nodes.service").content_string
    assert "Before=pve-guests.service" in unit.splitlines(), unit
    assert "ExecStart=/usr/local/sbin/nvidia-modprobe -u -c 0" in unit.splitlines(), unit
    assert host.file("/etc/modules-load.d/gpuhost-nvidia.conf").contains("^nvidia_uvm$")
    # character device 508:0: the dynamic major the nvidia-modprobe stand-in read from the fake /proc/devices
    assert host.check_output("stat -c '%F %t:%T' /dev/nvidia-uvm") == "character special file 1fc:0"


def test_container_has_every_gpu_node(host):
    conf = host.file("/etc/pve/lxc/101.conf").content_string
    devs = sorted(line.split(": ", 1)[1] for line in conf.splitlines() if line.startswith("dev"))
    assert devs == sorted(["/dev/nvidia0,gid=44", "/dev/nvidia1,gid=44", "/dev/nvidiactl,gid=44", "/dev/nvidia-uvm,gid=44",
                           "/dev/nvidia-uvm-tools,gid=44", "/dev/nvidia-caps/nvidia-cap1,gid=44",
                           "/dev/nvidia-caps/nvidia-cap2,gid=44"])
    assert "508" not in conf  # the major is never written
    assert host.file("/etc/pve/lxc/101.conf").contains("^memory: 4096$")

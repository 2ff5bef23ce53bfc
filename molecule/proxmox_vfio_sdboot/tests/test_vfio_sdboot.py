# -*- coding: utf-8 -*-
# Copyright: gpuhost.sglang contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Final state of proxmox_vfio_sdboot: vfio on systemd-boot, then switched to lxc with a container."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "proxmox_common"))
import standin_log as sl  # noqa: E402


def test_kernel_cmdline_file_restored_exactly(host):
    assert host.file("/etc/kernel/cmdline").content_string == "root=ZFS=rpool/ROOT/pve-1 boot=zfs\n"
    assert not host.file("/etc/default/grub.d/gpuhost-sglang.cfg").exists


def test_booted_without_iommu_args(host):
    args = sl.cmdline(host)
    assert "root=ZFS=rpool/ROOT/pve-1" in args
    assert "amd_iommu=on" not in args and "iommu=pt" not in args


def test_systemd_boot_path_used_not_grub(host):
    refreshes = [c for c in sl.calls(host, "proxmox-boot-tool") if c[1] == "refresh"]
    assert len(refreshes) >= 2
    assert sl.calls(host, "update-grub") == []


def test_reboots(host):
    assert len(sl.calls(host, "gpuhost-standin-reboot")) == 2  # vfio on; vfio -> lxc


def test_gpus_back_on_nvidia_and_vfio_gone(host):
    assert sl.driver(host, "0000:01:00.0") == "nvidia" and sl.driver(host, "0000:41:00.0") == "nvidia"
    assert not host.file("/etc/systemd/system/gpuhost-vfio-bind.service").exists
    assert not host.file("/etc/modules-load.d/gpuhost-vfio.conf").exists


def test_lxc_host_side(host):
    rule = host.file("/etc/udev/rules.d/70-gpuhost-nvidia.rules").content_string
    assert 'KERNEL=="nvidia_uvm", RUN+="/usr/local/sbin/nvidia-modprobe -c0 -u"' in rule
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

# -*- coding: utf-8 -*-
# Copyright: gpuhost.sglang contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""State after playbooks/rebuild.yml ran twice on a fresh fake PVE host (vfio split + container 210)."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "proxmox_common"))
import standin_log as sl  # noqa: E402


def test_host_mode_applied_and_booted(host):
    assert host.file("/etc/kernel/cmdline").content_string.split()[-2:] == ["intel_iommu=on", "iommu=pt"]
    assert {"intel_iommu=on", "iommu=pt"} <= set(sl.cmdline(host))
    assert sl.driver(host, "0000:01:00.0") == "vfio-pci" and sl.driver(host, "0000:41:00.0") == "nvidia"


def test_one_reboot_one_create(host):
    assert len(sl.calls(host, "gpuhost-standin-reboot")) == 1
    assert len([c for c in sl.calls(host, "pct") if c[1].startswith("create 210 ")]) == 1


def test_container_has_only_the_lxc_gpu(host):
    conf = host.file("/etc/pve/lxc/210.conf").content_string
    paths = sorted(line.split(": ", 1)[1].split(",")[0] for line in conf.splitlines() if line.startswith("dev"))
    assert "/dev/nvidia1" in paths and "/dev/nvidia0" not in paths and "/dev/nvidia-uvm" in paths
    assert host.check_output("pct status 210") == "status: running"

# -*- coding: utf-8 -*-
# Copyright: gpuhost.sglang contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Final state of pve-bm (scenario proxmox_modes, case baremetal): baremetal + ACS oneshot, then mode none."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "proxmox_common"))
import standin_log as sl  # noqa: E402

# molecule verifies the four hosts of the scenario; these tests are this case's host's alone
testinfra_hosts = ["pve-bm"]


def test_acs_cleared_on_both_bridges_with_acs(host):
    writes = sorted(set(c[1] for c in sl.calls(host, "setpci")))
    assert writes == ["-s 0000:00:01.1 ECAP_ACS+0x6.w=0000", "-s 0000:00:03.1 ECAP_ACS+0x6.w=0000"]


def test_none_removed_everything(host):
    for path in ("/etc/systemd/system/gpuhost-acs-disable.service", "/usr/local/sbin/gpuhost-acs-disable",
                 "/etc/udev/rules.d/70-gpuhost-nvidia.rules", "/etc/modules-load.d/gpuhost-nvidia.conf",
                 "/etc/modprobe.d/gpuhost-blacklist-nouveau.conf", "/etc/default/grub.d/gpuhost-sglang.cfg",
                 "/etc/systemd/system/gpuhost-nvidia-nodes.service"):
        assert not host.file(path).exists, path
    assert not host.service("gpuhost-acs-disable").is_enabled


def test_kernel_args_in_baremetal_mode(host):
    # plain GRUB (drop-in + update-grub): iommu=pt and the extra argument were booted in baremetal mode
    args = host.file("/root/cmdline-baremetal.txt").content_string.split()
    assert "iommu=pt" in args and "pcie_aspm=off" in args, args
    assert "intel_iommu=on" not in args


def test_none_removed_the_kernel_args(host):
    args = sl.cmdline(host)
    assert "intel_iommu=on" not in args and "iommu=pt" not in args and "pcie_aspm=off" not in args, args
    assert "quiet" in args  # the operator's own GRUB_CMDLINE_LINUX_DEFAULT stays


def test_reboots_for_blacklist_on_and_off(host):
    # nouveau blacklist added (converge) and removed (none): each rebuilds the initramfs and reboots once
    assert len(sl.calls(host, "gpuhost-standin-reboot")) == 2
    assert len(sl.calls(host, "update-initramfs")) == 2


def test_bad_inputs(host):
    res = sl.bad_inputs(host)
    assert len(res) == 6 and all(r["failed"] and r["unchanged"] for r in res.values()), res

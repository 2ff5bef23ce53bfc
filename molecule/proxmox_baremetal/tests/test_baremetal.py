# -*- coding: utf-8 -*-
# Copyright: gpuhost.sglang contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Final state of proxmox_baremetal: baremetal + ACS oneshot, then mode none."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "proxmox_common"))
import standin_log as sl  # noqa: E402


def test_acs_cleared_on_both_bridges_with_acs(host):
    writes = sorted(set(c[1] for c in sl.calls(host, "setpci")))
    assert writes == ["-s 0000:00:01.1 ECAP_ACS+0x6.w=0000", "-s 0000:00:03.1 ECAP_ACS+0x6.w=0000"]


def test_none_removed_everything(host):
    for path in ("/etc/systemd/system/gpuhost-acs-disable.service", "/usr/local/sbin/gpuhost-acs-disable",
                 "/etc/udev/rules.d/70-gpuhost-nvidia.rules", "/etc/modules-load.d/gpuhost-nvidia.conf",
                 "/etc/modprobe.d/gpuhost-blacklist-nouveau.conf", "/etc/default/grub.d/gpuhost-sglang.cfg"):
        assert not host.file(path).exists, path
    assert not host.service("gpuhost-acs-disable").is_enabled


def test_no_kernel_args_ever_written(host):
    assert "intel_iommu=on" not in sl.cmdline(host)


def test_reboots_for_blacklist_on_and_off(host):
    # nouveau blacklist added (converge) and removed (none): each rebuilds the initramfs and reboots once
    assert len(sl.calls(host, "gpuhost-standin-reboot")) == 2
    assert len(sl.calls(host, "update-initramfs")) == 2


def test_bad_inputs(host):
    res = sl.bad_inputs(host)
    assert len(res) == 3 and all(r["failed"] and r["unchanged"] for r in res.values()), res

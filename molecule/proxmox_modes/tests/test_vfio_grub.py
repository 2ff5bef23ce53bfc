# -*- coding: utf-8 -*-
# Copyright: gpuhost.sglang contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Final state of pve-vgrub (scenario proxmox_modes, case vfio_grub): vfio was applied (GRUB), then reverted by mode none."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "proxmox_common"))
import standin_log as sl  # noqa: E402

# molecule verifies the four hosts of the scenario; these tests are this case's host's alone
testinfra_hosts = ["pve-vgrub"]


def test_reverted_files_are_gone(host):
    for path in ("/etc/default/grub.d/gpuhost-sglang.cfg", "/etc/modules-load.d/gpuhost-vfio.conf",
                 "/etc/modprobe.d/gpuhost-vfio.conf", "/usr/local/sbin/gpuhost-vfio-bind",
                 "/etc/systemd/system/gpuhost-vfio-bind.service", "/etc/modprobe.d/gpuhost-blacklist-nouveau.conf",
                 "/etc/udev/rules.d/70-gpuhost-nvidia.rules", "/etc/systemd/system/gpuhost-nvidia-nodes.service"):
        assert not host.file(path).exists, path
    assert host.file("/etc/default/grub").contains('GRUB_CMDLINE_LINUX_DEFAULT="quiet"')


def test_booted_cmdline_reverted(host):
    args = sl.cmdline(host)
    assert "quiet" in args
    assert "intel_iommu=on" not in args and "iommu=pt" not in args


def test_gpus_back_on_nvidia(host):
    assert sl.driver(host, "0000:41:00.0") == "nvidia"
    assert sl.driver(host, "0000:01:00.0") == "nvidia"


def test_grub_path_used_not_systemd_boot(host):
    names = [c[0] for c in sl.calls(host)]
    assert names.count("update-grub") >= 2  # vfio on, vfio off
    assert ("proxmox-boot-tool", "refresh") not in sl.calls(host)
    assert not host.file("/etc/kernel/cmdline").exists


def test_two_reboots_none_in_idempotence_or_bad_inputs(host):
    # converge (vfio) and the switch to none; idempotence and the five bad inputs never rebooted
    assert len(sl.calls(host, "gpuhost-standin-reboot")) == 2


def test_update_grub_ran_before_each_reboot(host):
    seq = [c[0] for c in sl.calls(host) if c[0] in ("update-grub", "update-initramfs", "gpuhost-standin-reboot")]
    for i, name in enumerate(seq):
        if name == "gpuhost-standin-reboot":
            assert "update-grub" in seq[:i] and "update-initramfs" in seq[:i]


def test_bad_inputs_all_failed_and_changed_nothing(host):
    res = sl.bad_inputs(host)
    assert set(res) == {"unknown PCI address", "malformed PCI address", "two modes claiming one GPU", "invalid mode",
                        "LXC id that is a VM"}
    for r in res.values():
        assert r["failed"] and r["unchanged"], r
    assert "allowed" in res["unknown PCI address"]["msg"]
    assert "baremetal, lxc, vfio, none" in res["invalid mode"]["msg"]

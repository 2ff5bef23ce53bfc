# -*- coding: utf-8 -*-
# Copyright: gpuhost.sglang contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""State after the host layer ran twice, host driver on, on fresh fake PVE hosts:
pve-rb = playbooks/rebuild.yml (vfio split + container 210), pve-hd = playbooks/host.yml (lxc, container 210)."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "proxmox_common"))
import standin_log as sl  # noqa: E402

DRIVER = "580.105.08"


def name(host):
    return host.backend.get_hostname()


def test_host_mode_applied_and_booted(host):
    if name(host) == "pve-rb":
        assert host.file("/etc/kernel/cmdline").content_string.split()[-2:] == ["intel_iommu=on", "iommu=pt"]
        assert {"intel_iommu=on", "iommu=pt"} <= set(sl.cmdline(host))
        assert sl.driver(host, "0000:01:00.0") == "vfio-pci" and sl.driver(host, "0000:41:00.0") == "nvidia"
    else:
        assert sl.driver(host, "0000:01:00.0") == "nvidia" and sl.driver(host, "0000:41:00.0") == "nvidia"


def reboot_log(host):
    """(owner, [reasons]) per reboot the roles made, oldest first (/var/lib/gpuhost-sglang/reboot-log)."""
    out = []
    for line in host.file("/var/lib/gpuhost-sglang/reboot-log").content_string.splitlines():
        _stamp, rest = line.split(" ", 1)
        owner, reasons = rest.split(": ", 1)
        out.append((owner, reasons.split("; ")))
    return out


def test_second_run_did_not_reboot(host):
    runs = [int(x) for x in host.file("/root/reboots-per-run").content_string.split()]
    assert len(runs) == 2, runs  # converge + idempotence
    # the driver reboot (nvidia_driver), then the host-mode one (proxmox_host: IOMMU/vfio on pve-rb, iommu=pt on pve-hd)
    assert runs[0] == 2, runs
    assert runs[1] == runs[0], "the second run rebooted: %s" % runs
    assert len(sl.calls(host, "gpuhost-standin-reboot")) == runs[0]
    assert [owner for owner, _reasons in reboot_log(host)] == ["nvidia_driver", "proxmox_host"]


def test_one_initramfs_per_boot_change(host):
    # nouveau blacklist (written once, by host_common) and, on pve-rb, the vfio module files: never on the second run
    assert len(sl.calls(host, "update-initramfs")) == (2 if name(host) == "pve-rb" else 1)


def test_nouveau_blacklist_has_one_owner(host):
    text = host.file("/etc/modprobe.d/gpuhost-blacklist-nouveau.conf").content_string
    assert text.startswith("# Managed by gpuhost.sglang (host_common, for nvidia_driver and proxmox_host)")
    assert "blacklist nouveau" in text.splitlines()


def test_host_driver_installed_locked_and_loaded(host):
    assert host.package("nvidia-kernel-open-dkms").version == DRIVER + "-1"
    assert host.package("nvidia-driver-pinning-580").is_installed
    assert not host.package("nvidia-driver").is_installed
    release = host.check_output("uname -r")
    assert host.file("/lib/modules/%s/updates/dkms/nvidia.ko" % release).exists
    # the simulated kernel loaded what DKMS built, and the role read the open banner after the reboot
    banner = host.file(sl.SYSROOT + "/proc/driver/nvidia/version").content_string
    assert "Open Kernel Module for x86_64  %s " % DRIVER in banner
    assert not host.file("/var/lib/gpuhost-sglang/reboot-required").exists


def test_driver_reboot_reasons(host):
    (owner, reasons), _host_mode = reboot_log(host)
    assert owner == "nvidia_driver"
    assert "kernel module packages changed" in reasons and "nouveau blacklist changed" in reasons
    if name(host) == "pve-hd":
        # an older 570.133.20 open module was loaded: the loaded-vs-installed check read its open-module banner
        assert "loaded module 570.133.20 != installed %s" % DRIVER in reasons
    else:
        assert not any(r.startswith("loaded module") for r in reasons), reasons  # fresh node: nothing loaded


def test_one_state_directory(host):
    assert not host.file("/var/lib/gpuhost").exists
    assert host.file("/var/lib/gpuhost-sglang/p2p-report.json").exists


def test_one_create(host):
    assert len([c for c in sl.calls(host, "pct") if c[1].startswith("create 210 ")]) == 1


def test_container_has_the_lxc_gpus(host):
    conf = host.file("/etc/pve/lxc/210.conf").content_string
    paths = sorted(line.split(": ", 1)[1].split(",")[0] for line in conf.splitlines() if line.startswith("dev"))
    assert "/dev/nvidia1" in paths and "/dev/nvidia-uvm" in paths
    assert ("/dev/nvidia0" in paths) == (name(host) == "pve-hd")
    assert host.check_output("pct status 210") == "status: running"

# -*- coding: utf-8 -*-
# Copyright: gpuhost.sglang contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Final state of pve-lxc (scenario proxmox_modes, case lxc): container 101 with GPU 0000:41:00.0 (minor 1) and the shared nodes."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "proxmox_common"))
import standin_log as sl  # noqa: E402

# molecule verifies the four hosts of the scenario; these tests are this case's host's alone
testinfra_hosts = ["pve-lxc"]

CT = "/var/lib/gpuhost-standin/ct/101/rootfs"


def _devs(host):
    conf = host.file("/etc/pve/lxc/101.conf").content_string
    return {k: v.strip() for k, v in (line.split(":", 1) for line in conf.splitlines() if line.startswith("dev"))}


def test_dev_entries_only_the_chosen_gpu(host):
    paths = sorted(v.split(",")[0] for v in _devs(host).values())
    assert paths == sorted(["/dev/nvidia1", "/dev/nvidiactl", "/dev/nvidia-uvm", "/dev/nvidia-uvm-tools",
                            "/dev/nvidia-caps/nvidia-cap1", "/dev/nvidia-caps/nvidia-cap2"])
    assert all(v.endswith(",gid=44") for v in _devs(host).values())


def test_container_created_once_with_pct(host):
    creates = sl.calls(host, "pct")
    assert len([c for c in creates if c[1].startswith("create 101 ")]) == 1
    assert host.file("/etc/pve/lxc/101.conf").contains("^hostname: sglang$")


def test_container_nodes_have_the_host_numbers(host):
    # what PVE's start does with devN (pve-container create_passthrough_device_node): the node inside carries
    # the host node's type and major:minor, mode 0660 (no mode= given), uid 0 and the entry's gid
    for path, want in (("/dev/nvidia1", "c 195:1"), ("/dev/nvidiactl", "c 195:255"), ("/dev/nvidia-uvm", "c 508:0"),
                       ("/dev/nvidia-caps/nvidia-cap1", "c 237:1")):
        out = host.check_output("stat -c '%%F %%t %%T %%a %%u %%g' %s%s", CT, path).split()
        assert out[0] == "character" and "c %d:%d" % (int(out[-5], 16), int(out[-4], 16)) == want, (path, out)
        assert out[-3:] == ["660", "0", "44"], (path, out)
    assert not host.file(CT + "/dev/nvidia0").exists  # GPU 0000:01:00.0 was not given


def _last_boot(host):
    return host.file("/root/after-reboot.txt").content_string


def test_container_started_by_the_host_reboot(host):
    # pve-guests started it at boot: every devN node existed before the guests (not started by hand later)
    text = _last_boot(host)
    assert text.startswith("status: running"), text
    assert "Starting CT 101\n" in text and "failed" not in text, text


def test_boot_nodes_come_from_a_unit_ordered_before_the_guests(host):
    unit = host.file("/etc/systemd/system/gpuhost-nvidia-nodes.service")
    assert unit.exists and unit.contains("^Before=pve-guests.service")
    assert host.service("gpuhost-nvidia-nodes").is_enabled


def test_kernel_args_in_lxc_mode(host):
    # iommu=pt (GLM-5-NVFP4 model card: NCCL P2P hangs) and the extra argument, through the GRUB drop-in
    # synced by proxmox-boot-tool (pbt-grub), in the booted command line
    args = sl.cmdline(host)
    assert "iommu=pt" in args and "pcie_aspm=off" in args, args
    assert "intel_iommu=on" not in args  # only vfio mode turns the IOMMU on
    assert host.file("/etc/default/grub.d/gpuhost-sglang.cfg").contains("iommu=pt pcie_aspm=off")


def test_standin_pct_behaves_like_pve_container(host):
    f = dict(line.split("=", 1) for line in host.file("/root/standin-fidelity.txt").content_string.splitlines())
    # refusal (src/PVE/LXC/Tools.pm get_device_mode_and_rdev), exit -1 of the pct CLI, container left stopped
    assert f["start_missing_rc"] == "255 stderr=Device /dev/nvidia1 does not exist", f
    assert f["after_refusal"] == "status: stopped", f
    assert f["set_missing_rc"].endswith("stderr=Device /dev/nvidia-missing0 does not exist"), f
    assert not f["set_missing_rc"].startswith("0 "), f
    # mode=/uid=/gid= of the entry; default 0660 root:root (src/PVE/LXC.pm create_passthrough_device_node)
    assert f["node_explicit"] == "640 1000 44 c3:0", f
    assert f["node_default"] == "660 0 0 1:3", f
    assert f["final"] == "status: running", f


def test_container_running_after_host_reboot(host):
    assert host.check_output("pct status 101") == "status: running"
    assert len(sl.calls(host, "gpuhost-standin-reboot")) == 2  # nouveau blacklist at converge; driver upgrade


def test_pbt_grub_refresh(host):
    assert ("proxmox-boot-tool", "refresh") in sl.calls(host)
    assert sl.calls(host, "update-grub") == []  # proxmox-boot-tool refresh runs it for its ESPs


def test_lockstep_messages(host):
    m1 = host.file("/root/lockstep-mismatch-1.txt").content_string
    assert "Failed to initialize NVML: Driver/library version mismatch" in m1 and "550.54.14" in m1
    m2 = host.file("/root/lockstep-mismatch-2.txt").content_string
    assert "575.57.08" in m2 and "reboot" in m2


def test_bad_inputs(host):
    res = sl.bad_inputs(host)
    assert len(res) == 3 and all(r["failed"] and r["unchanged"] for r in res.values()), res

# -*- coding: utf-8 -*-
# Copyright: gpuhost.sglang contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Final state of proxmox_lxc: container 101 with GPU 0000:41:00.0 (minor 1) and the shared nodes."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "proxmox_common"))
import standin_log as sl  # noqa: E402

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
    # what PVE's start does with devN: the node inside carries the host node's type and major:minor
    for path, want in (("/dev/nvidia1", "c 195:1"), ("/dev/nvidiactl", "c 195:255"), ("/dev/nvidia-uvm", "c 508:0"),
                       ("/dev/nvidia-caps/nvidia-cap1", "c 237:1")):
        out = host.check_output("stat -c '%%F %%t %%T %%g' %s%s", CT, path).split()
        assert out[0] == "character" and "c %d:%d" % (int(out[-3], 16), int(out[-2], 16)) == want, (path, out)
        assert out[-1] == "44"
    assert not host.file(CT + "/dev/nvidia0").exists  # GPU 0000:01:00.0 was not given


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

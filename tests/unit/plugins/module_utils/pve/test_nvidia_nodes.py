# -*- coding: utf-8 -*-
# Copyright: gpuhost.sglang contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The boot-time NVIDIA node plan: one nvidia-modprobe -c per GPU minor (nvidia-modprobe.c), nvidiactl = 255,
UVM through -u -c 0, the boot-time MIG capabilities through -f (MIG user guide, mig-minors)."""

from __future__ import (absolute_import, division, print_function)

__metaclass__ = type

import pytest

from ansible_collections.gpuhost.sglang.plugins.module_utils.pve import nvidia_nodes as n

# first lines of a real /proc/driver/nvidia-caps/mig-minors (MIG user guide, "Device Nodes and Capabilities")
MIG_MINORS = "config 1\nmonitor 2\ngpu0/gi0/access 3\ngpu0/gi0/ci0/access 4\ngpu0/gi0/ci1/access 5\n"
MP = "/usr/bin/nvidia-modprobe"
CFG = "/proc/driver/nvidia/capabilities/mig/config"
MON = "/proc/driver/nvidia/capabilities/mig/monitor"


def test_every_gpu_minor_gets_its_own_c():
    # the defect: `nvidia-modprobe -c0` creates only /dev/nvidia0 while devN lists nvidia0..7
    plan = n.plan_boot_commands(list(range(8)), [], MIG_MINORS, [CFG, MON], MP)
    nv = plan["commands"][0]
    assert nv["module"] == "nvidia"
    assert nv["argv"] == [MP] + sum((["-c", str(i)] for i in range(8)), []) + ["-c", "255", "-f", CFG, "-f", MON]
    assert plan["commands"][1] == {"module": "nvidia_uvm", "argv": [MP, "-u", "-c", "0"], "udev_run": MP + " -u -c 0"}
    assert nv["udev_run"] == " ".join(nv["argv"])
    assert plan["nodes"] == ["/dev/nvidia%d" % i for i in range(8)] + [
        "/dev/nvidiactl", "/dev/nvidia-caps/nvidia-cap1", "/dev/nvidia-caps/nvidia-cap2",
        "/dev/nvidia-uvm", "/dev/nvidia-uvm-tools"]
    assert plan["skipped"] == []


def test_nodes_present_now_are_kept_even_without_proc_entry():
    # a GPU node the containers were given (e.g. a GPU since moved to vfio-pci) is still created at boot
    plan = n.plan_boot_commands([1], ["/dev/nvidia0", "/dev/nvidiactl", "/dev/nvidia-uvm"], "", [], MP)
    assert plan["commands"][0]["argv"] == [MP, "-c", "0", "-c", "1", "-c", "255"]


def test_instance_capabilities_cannot_be_made_at_boot():
    plan = n.plan_boot_commands([0], ["/dev/nvidia-caps/nvidia-cap1", "/dev/nvidia-caps/nvidia-cap4",
                                      "/dev/nvidia-caps/nvidia-cap99"], MIG_MINORS, [], MP)
    assert plan["commands"][0]["argv"][-2:] == ["-f", CFG]
    assert [s["path"] for s in plan["skipped"]] == ["/dev/nvidia-caps/nvidia-cap4", "/dev/nvidia-caps/nvidia-cap99"]
    assert "gpu0/gi0/ci0/access" in plan["skipped"][0]["reason"]


@pytest.mark.parametrize("name,path", [
    ("config", CFG),
    ("gpu0/gi0/access", "/proc/driver/nvidia/capabilities/gpu0/mig/gi0/access"),
    ("gpu3/gi2/ci1/access", "/proc/driver/nvidia/capabilities/gpu3/mig/gi2/ci1/access"),
])
def test_cap_proc_path(name, path):
    assert n.cap_proc_path(name) == path


@pytest.mark.parametrize("minors,modprobe,msg", [
    ([255], MP, "GPU minor 255 is not 0..254"),
    (["0"], MP, "GPU minor '0' is not 0..254"),
    ([0], "nvidia-modprobe", "must be absolute"),
    ([0], "/opt/my tools/nvidia-modprobe", "must be absolute, without spaces"),
])
def test_bad_input(minors, modprobe, msg):
    with pytest.raises(n.NodesError, match=msg):
        n.plan_boot_commands(minors, [], "", [], modprobe)


def test_udev_run_refuses_spaces():
    assert n.udev_run([MP, "-u", "-c", "0"]) == MP + " -u -c 0"
    with pytest.raises(n.NodesError, match="spaces or quotes"):
        n.udev_run([MP, "a b"])

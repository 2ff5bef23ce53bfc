# -*- coding: utf-8 -*-
# Copyright: gpuhost.sglang contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Which NVIDIA device nodes a Proxmox VE host must create at boot, and the nvidia-modprobe calls that do it.

The NVIDIA kernel module creates no /dev node itself; user space does, with nvidia-modprobe (the MIG user guide,
"Device Nodes and Capabilities": the nodes "cannot be automatically created/deleted by the NVIDIA driver ... (due
to GPL compliance issues)"). After a reboot /dev is a fresh devtmpfs, and Proxmox VE refuses to start a container
whose ``devN:`` path does not exist (pve-container src/PVE/LXC/Tools.pm get_device_mode_and_rdev: "Device PATH
does not exist"). So every node a container may name must be created before pve-guests starts the guests.

nvidia-modprobe semantics (github.com/NVIDIA/nvidia-modprobe, nvidia-modprobe.c main(), option-table.h):
  ``-c N`` creates ONE node per occurrence: /dev/nvidiaN, minor 255 = /dev/nvidiactl (nvidia-modprobe-utils.h
  NV_CTL_DEVICE_NUM); with ``-u`` the same minors name the UVM nodes instead (minor m -> /dev/nvidia-uvm,
  m + 1 -> /dev/nvidia-uvm-tools), so ``-u -c 0`` creates both; ``-f /proc/driver/nvidia/capabilities/...``
  creates /dev/nvidia-caps/nvidia-capN from the file's DeviceFileMinor.
Capability minors and their /proc files: /proc/driver/nvidia-caps/mig-minors ("config 1", "monitor 2",
"gpu0/gi0/access 3", ...; MIG user guide); the file of "NAME" is /proc/driver/nvidia/capabilities/mig/NAME for
config/monitor and gpuN/mig/REST for the others (nvidia-container-toolkit internal/nvcaps ProcPath). Only
config and monitor exist at boot: the per-instance files appear when MIG instances are created.
"""

from __future__ import (absolute_import, division, print_function)

__metaclass__ = type

import re

NVIDIACTL_MINOR = 255
CAPS_PROC_ROOT = "/proc/driver/nvidia/capabilities"
BOOT_CAPS = ("config", "monitor")
_GPU_NODE_RE = re.compile(r"^/dev/nvidia(\d+)$")
_CAP_NODE_RE = re.compile(r"^/dev/nvidia-caps/nvidia-cap(\d+)$")
_SAFE_RE = re.compile(r"^[A-Za-z0-9_./:=+-]+$")


class NodesError(ValueError):
    """Bad input; the message names the value."""


def parse_mig_minors(text):
    """Parse /proc/driver/nvidia-caps/mig-minors ("NAME MINOR" per line) into {minor: name}."""
    out = {}
    for line in (text or "").splitlines():
        parts = line.split()
        if len(parts) == 2 and parts[1].isdigit():
            out[int(parts[1])] = parts[0]
    return out


def cap_proc_path(name):
    """The /proc capability file of a mig-minors NAME (config, monitor, gpuN/giM/access, gpuN/giM/ciK/access)."""
    if name in BOOT_CAPS:
        return "%s/mig/%s" % (CAPS_PROC_ROOT, name)
    gpu, sep, rest = name.partition("/")
    if not sep or not re.match(r"^gpu\d+$", gpu):
        raise NodesError("%r is not a MIG capability name (allowed: config, monitor, gpuN/giM[/ciK]/access)" % (name,))
    return "%s/%s/mig/%s" % (CAPS_PROC_ROOT, gpu, rest)


def plan_boot_commands(gpu_minors, node_paths, mig_minors_text, cap_files, modprobe):
    """The nvidia-modprobe calls that recreate the host's NVIDIA nodes at boot.

    ``gpu_minors``: Device Minor of every GPU in /proc/driver/nvidia/gpus/*/information; ``node_paths``: the
    NVIDIA node paths present under /dev now (what ``devN:`` entries are made from); ``mig_minors_text``:
    /proc/driver/nvidia-caps/mig-minors (or ""); ``cap_files``: the /proc capability files that exist now;
    ``modprobe``: the nvidia-modprobe path.
    Returns dict(commands=[{module, argv, udev_run}], nodes=[paths created], skipped=[{path, reason}]).
    """
    if not isinstance(modprobe, str) or not modprobe.startswith("/") or not _SAFE_RE.match(modprobe):
        raise NodesError("nvidia-modprobe path %r must be absolute, without spaces or quotes" % (modprobe,))
    minors = set()
    for m in gpu_minors:
        if m is None:
            continue
        if not isinstance(m, int) or not 0 <= m < NVIDIACTL_MINOR:
            raise NodesError("GPU minor %r is not 0..254" % (m,))
        minors.add(m)
    caps_wanted, skipped = set(), []
    names = parse_mig_minors(mig_minors_text)
    for path in node_paths:
        g = _GPU_NODE_RE.match(path)
        if g:
            if int(g.group(1)) < NVIDIACTL_MINOR:
                minors.add(int(g.group(1)))
            continue
        c = _CAP_NODE_RE.match(path)
        if c:
            name = names.get(int(c.group(1)))
            if name in BOOT_CAPS:
                caps_wanted.add(name)
            else:
                skipped.append({"path": path, "reason": (
                    "MIG instance capability %s: its /proc file exists only while the MIG instance does, nvidia-modprobe "
                    "cannot create it at boot" % name) if name else "minor not in /proc/driver/nvidia-caps/mig-minors"})
    for name in BOOT_CAPS:
        if cap_proc_path(name) in cap_files:
            caps_wanted.add(name)
    nvidia = [modprobe]
    nodes = []
    for m in sorted(minors):
        nvidia += ["-c", str(m)]
        nodes.append("/dev/nvidia%d" % m)
    nvidia += ["-c", str(NVIDIACTL_MINOR)]
    nodes.append("/dev/nvidiactl")
    cap_minor = {n: m for m, n in names.items()}
    for name in BOOT_CAPS:
        if name in caps_wanted:
            nvidia += ["-f", cap_proc_path(name)]
            if name in cap_minor:
                nodes.append("/dev/nvidia-caps/nvidia-cap%d" % cap_minor[name])
    uvm = [modprobe, "-u", "-c", "0"]
    nodes += ["/dev/nvidia-uvm", "/dev/nvidia-uvm-tools"]
    return {"commands": [{"module": "nvidia", "argv": nvidia, "udev_run": udev_run(nvidia)},
                         {"module": "nvidia_uvm", "argv": uvm, "udev_run": udev_run(uvm)}],
            "nodes": nodes, "skipped": sorted(skipped, key=lambda s: s["path"])}


def udev_run(argv):
    """A RUN+= value for a udev rule (udev splits on spaces; every argument is plain, checked here)."""
    for a in argv:
        if not _SAFE_RE.match(a):
            raise NodesError("argument %r cannot go into a udev RUN+= value (spaces or quotes)" % (a,))
    return " ".join(argv)

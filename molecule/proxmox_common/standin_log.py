# -*- coding: utf-8 -*-
# Copyright: gpuhost.sglang contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Helpers shared by the proxmox_* testinfra tests: the stand-ins' call log and the fake sysroot."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import json

SYSROOT = "/var/lib/gpuhost-standin/sysroot"
LOG = "/var/log/gpuhost-standins.log"


def calls(host, tool=None):
    """Recorded stand-in calls as (tool, args) tuples, in order."""
    out = []
    for line in host.file(LOG).content_string.splitlines():
        parts = line.split(" ", 2)
        if len(parts) < 2:
            continue
        name, args = parts[1], parts[2] if len(parts) > 2 else ""
        if tool is None or name == tool:
            out.append((name, args))
    return out


def cmdline(host):
    return host.file(SYSROOT + "/proc/cmdline").content_string.split()


def driver(host, bdf):
    link = host.file("%s/sys/bus/pci/devices/%s/driver" % (SYSROOT, bdf))
    return link.linked_to.rsplit("/", 1)[-1] if link.exists else None


def bad_inputs(host):
    return {c["name"]: c for c in json.loads(host.file("/root/bad-inputs.json").content_string)}

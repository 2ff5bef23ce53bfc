# -*- coding: utf-8 -*-
# Copyright: gpuhost.sglang contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Device classes for DeviceAllow=char-NAME: checked against the names the drivers register (/proc/devices).

systemd matches NAME against the names in /proc/devices with fnmatch() when the unit's cgroup is realised
(systemd src/core/bpf-devices.c bpf_devices_allow_list_major), so a name that no driver registers allows
nothing and nothing says so. The registry (roles/sglang/vars/device_classes.yml) records each name with its
source; this module checks the configured classes against it and, where the host has one, /proc/devices.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import fnmatch
import re


class DeviceClassError(ValueError):
    pass


_CLASS_RE = re.compile(r"^(char|block)-(\S+)$")


def parse_proc_devices(text):
    """/proc/devices text -> {"char": {name: major}, "block": {name: major}}; empty sections for no text."""
    out = {"char": {}, "block": {}}
    section = None
    for line in (text or "").splitlines():
        line = line.strip()
        if not line:
            continue
        if line.lower().startswith("character devices"):
            section = "char"
            continue
        if line.lower().startswith("block devices"):
            section = "block"
            continue
        parts = line.split(None, 1)
        if section is None or len(parts) != 2 or not parts[0].isdigit():
            raise DeviceClassError("unexpected line in /proc/devices: %r" % line)
        out[section][parts[1]] = int(parts[0])
    return out


def check_device_classes(classes, registry, proc_devices_text="", var_name="sglang_device_classes"):
    """Check each char-NAME / block-NAME against the registry and /proc/devices.

    Returns {"matched": {cls: [names]}, "later": [cls], "problems": [text]}. A class is fine when it matches a
    name /proc/devices lists, or (absent from /proc/devices: module not loaded yet) when it names a current
    registry entry. A class naming a registry entry that no current driver registers is a problem; so is one
    the registry does not know that matches nothing in the host's /proc/devices.
    """
    if not isinstance(classes, list):
        raise DeviceClassError("%s: %r is not a list" % (var_name, classes))
    known = {}
    for entry in registry or []:
        if not isinstance(entry, dict) or "name" not in entry:
            raise DeviceClassError("device class registry entry %r has no name" % (entry,))
        known[entry["name"]] = entry
    proc = parse_proc_devices(proc_devices_text)
    have_proc = bool(proc["char"] or proc["block"])
    current = sorted(n for n, e in known.items() if e.get("current", True))
    res = {"matched": {}, "later": [], "problems": []}
    for cls in classes:
        m = _CLASS_RE.match(str(cls))
        if not m:
            res["problems"].append("%s: %r is not a device class (char-NAME or block-NAME, NAME as /proc/devices "
                                   "lists it)." % (var_name, cls))
            continue
        kind, pattern = m.groups()
        stale = [n for n, e in known.items() if not e.get("current", True) and fnmatch.fnmatchcase(n, pattern)]
        if stale and not any(fnmatch.fnmatchcase(n, pattern) for n in current):
            res["problems"].append(
                "%s: %s names %s, which no supported driver registers (%s); the classes drivers register "
                "now: %s." % (var_name, cls, ", ".join(sorted(stale)),
                              "; ".join(known[n].get("source", "unverified").strip() for n in sorted(stale)),
                              ", ".join("char-" + n for n in current)))
            continue
        names = sorted(n for n in proc[kind] if fnmatch.fnmatchcase(n, pattern))
        if names:
            res["matched"][cls] = names
            continue
        if any(fnmatch.fnmatchcase(n, pattern) for n in current):
            res["later"].append(cls)   # a name the driver registers once its module is loaded
            continue
        if have_proc:
            res["problems"].append(
                "%s: %s matches no %s device /proc/devices lists (%s), so DeviceAllow= would allow nothing; "
                "use the names the driver registers (known: %s)." % (
                    var_name, cls, "character" if kind == "char" else "block",
                    ", ".join(sorted(proc[kind])) or "none", ", ".join("char-" + n for n in current)))
        else:
            res["later"].append(cls)   # no /proc/devices to check against, and the registry does not know it
    return res

# -*- coding: utf-8 -*-
# Copyright: gpuhost.sglang contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Every host file has one owner role; one initramfs flow, one reboot flow, one state directory.

Two roles writing one file with different content made every host.yml run rewrite it twice, rebuild the
initramfs and reboot (found on a real Proxmox box, unverified here). This reads every role's tasks and
handlers, resolves the destination of each file-writing task against the role's vars/defaults, and fails
when a path (or the initramfs rebuild, or the reboot) belongs to more than one role.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import glob
import os
import re

import yaml

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..", ".."))
WRITERS = {"ansible.builtin.copy": "dest", "ansible.builtin.template": "dest", "ansible.builtin.file": "path",
           "ansible.builtin.lineinfile": "path", "ansible.builtin.blockinfile": "path"}
REF = re.compile(r"^\{\{\s*([A-Za-z_][A-Za-z0-9_]*)((?:\.[A-Za-z_][A-Za-z0-9_]*)*)\s*(\|\s*dirname\s*)?\}\}$")


def _load(path):
    with open(path) as f:
        return yaml.safe_load(f) or []


def _role_vars(role):
    out = {}
    for sub in ("defaults", "vars"):
        p = os.path.join(ROOT, "roles", role, sub, "main.yml")
        if os.path.exists(p):
            out.update(_load(p))
    return out


def _resolve(value, rvars):
    if not isinstance(value, str):
        return None
    m = REF.match(value.strip())
    if not m:
        return value if value.startswith("/") and "{{" not in value else None
    cur = rvars.get(m.group(1))
    for key in [k for k in m.group(2).split(".") if k]:
        cur = cur.get(key) if isinstance(cur, dict) else None
    if isinstance(cur, str) and m.group(3):
        cur = os.path.dirname(cur)
    return cur if isinstance(cur, str) and cur.startswith("/") else None


def _tasks(items):
    for t in items or []:
        if not isinstance(t, dict):
            continue
        yield t
        for key in ("block", "rescue", "always"):
            yield from _tasks(t.get(key))


def _scan():
    """{role: {"paths": set, "initramfs": bool, "reboot": bool}} from the role's task and handler files."""
    roles = {}
    for role_dir in sorted(glob.glob(os.path.join(ROOT, "roles", "*"))):
        role = os.path.basename(role_dir)
        rvars = _role_vars(role)
        info = roles.setdefault(role, {"paths": set(), "initramfs": False, "reboot": False})
        for path in glob.glob(os.path.join(role_dir, "tasks", "*.yml")) + glob.glob(os.path.join(role_dir, "handlers", "*.yml")):
            for t in _tasks(_load(path)):
                for mod, key in WRITERS.items():
                    args = t.get(mod)
                    if isinstance(args, dict):
                        values = [args.get(key)]
                        if isinstance(t.get("loop"), list):
                            values += t["loop"]
                        for v in values:
                            p = _resolve(v, rvars)
                            if p and (mod != "ansible.builtin.file" or args.get("state") != "directory"):
                                info["paths"].add(p)
                text = yaml.safe_dump(t, default_flow_style=True)
                if "update-initramfs" in text and "block" not in t:
                    info["initramfs"] = True
                if "ansible.builtin.reboot" in t:
                    info["reboot"] = True
    return roles


def test_each_host_file_has_one_owner_role():
    owners = {}
    for role, info in _scan().items():
        for p in info["paths"]:
            owners.setdefault(p, set()).add(role)
    shared = {p: sorted(r) for p, r in owners.items() if len(r) > 1}
    assert not shared, "host files written by more than one role: %s" % shared


def test_one_initramfs_flow_and_one_reboot_flow():
    roles = _scan()
    assert [r for r, i in roles.items() if i["initramfs"]] == ["host_common"]
    assert [r for r, i in roles.items() if i["reboot"]] == ["host_common"]


def test_one_state_directory():
    dirs = set()
    for info in _scan().values():
        dirs |= {os.path.dirname(p) for p in info["paths"] if p.startswith("/var/lib/")}
    assert dirs == {"/var/lib/gpuhost-sglang"}, dirs

# -*- coding: utf-8 -*-
# Copyright: gpuhost.sglang contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Proxmox VE LXC GPU sharing: container config parsing, ``devN:`` entries, driver lockstep.

PVE >= 8.1 passes device nodes into a container with ``devN: /dev/PATH[,gid=G][,uid=U][,mode=M]``;
PVE reads the node's type and major:minor at container start, so the dynamic nvidia-uvm major is
never written anywhere. This module computes which entries a container needs from the host's
/dev/nvidia* nodes, merges them with the entries an operator added, and renders the raw LXC keys
PVE generates from them (used to boot a plain LXC container in tests).
"""

from __future__ import (absolute_import, division, print_function)

__metaclass__ = type

import glob
import os
import re
import stat

from ansible_collections.gpuhost.sglang.plugins.module_utils.gpu import nvidia_banner

MAX_DEV_INDEX = 256
NVIDIA_MAJOR = 195
_GPU_NODE_RE = re.compile(r"^/dev/nvidia(\d+)$")
_SHARED_ORDER = ("/dev/nvidiactl", "/dev/nvidia-modeset", "/dev/nvidia-uvm", "/dev/nvidia-uvm-tools")
MISMATCH_TEXT = "Driver/library version mismatch"


class LxcError(ValueError):
    """Bad container id, config or device input; the message names the value."""


def validate_ctid(value):
    """Return the container id as int; PVE guest ids are 100..999999999."""
    try:
        ctid = int(str(value).strip())
    except (TypeError, ValueError):
        raise LxcError("container id %r is not an integer (allowed: 100..999999999)" % (value,))
    if not 100 <= ctid <= 999999999:
        raise LxcError("container id %r is out of range (allowed: 100..999999999)" % (value,))
    return ctid


def parse_pve_config(text):
    """Parse a PVE guest config (``pct config`` output or /etc/pve/lxc/ID.conf).

    Only the current config is returned (snapshot sections ``[name]`` are skipped); comment lines
    (the description) are ignored. Returns an ordered dict key -> value.
    """
    cfg = {}
    for line in (text or "").splitlines():
        s = line.strip()
        if not s or s.startswith("#"):
            continue
        if s.startswith("["):
            break
        key, sep, value = s.partition(":")
        if not sep:
            continue
        cfg[key.strip()] = value.strip()
    return cfg


def parse_dev_value(value):
    """Parse a ``devN`` value: ``/dev/x,gid=44,mode=0660`` -> {'path': '/dev/x', 'gid': '44', 'mode': '0660'}."""
    parts = [p.strip() for p in value.split(",") if p.strip()]
    out = {}
    for i, p in enumerate(parts):
        if "=" in p:
            k, v = p.split("=", 1)
            out[k.strip()] = v.strip()
        elif i == 0:
            out["path"] = p
    if "path" not in out:
        raise LxcError("dev entry %r has no path" % (value,))
    return out


def render_dev_value(path, gid=None, uid=None, mode=None):
    """Render a ``devN`` value in PVE's canonical order: path, gid, mode, uid."""
    if not isinstance(path, str) or not path.startswith("/dev/") or "," in path or "=" in path:
        raise LxcError("device path %r must be an absolute /dev/ path without ',' or '='" % (path,))
    out = [path]
    if gid is not None:
        out.append("gid=%d" % int(gid))
    if mode is not None:
        if not re.match(r"^0?[0-7]{3}$", str(mode)):
            raise LxcError("device mode %r is not an octal mode like 0666" % (mode,))
        out.append("mode=%s" % str(mode).zfill(4))
    if uid is not None:
        out.append("uid=%d" % int(uid))
    return ",".join(out)


def discover_nodes(dev_root="/dev"):
    """Stat the host's /dev/nvidia* and /dev/nvidia-caps/* entries.

    Returns dicts with ``path`` (as seen under /dev), ``type`` ('c', 'b', 'd' or 'f'), ``major``, ``minor``.
    """
    nodes = []
    candidates = glob.glob(os.path.join(dev_root, "nvidia*")) + glob.glob(os.path.join(dev_root, "nvidia-caps", "*"))
    for path in sorted(set(candidates)):
        try:
            st = os.stat(path)
        except OSError:
            continue
        if stat.S_ISCHR(st.st_mode):
            kind = "c"
        elif stat.S_ISBLK(st.st_mode):
            kind = "b"
        else:
            kind = "d" if stat.S_ISDIR(st.st_mode) else "f"
        dev = kind in ("c", "b")
        nodes.append({"path": "/dev/" + os.path.relpath(path, dev_root), "type": kind,
                      "major": os.major(st.st_rdev) if dev else 0, "minor": os.minor(st.st_rdev) if dev else 0})
    return nodes


def _node_sort_key(path):
    m = _GPU_NODE_RE.match(path)
    if m:
        return (0, int(m.group(1)), path)
    if path in _SHARED_ORDER:
        return (1, _SHARED_ORDER.index(path), path)
    return (2, 0, path)


def is_nvidia_node(path):
    """True for the device paths this collection manages (/dev/nvidia*, /dev/nvidia-caps/*)."""
    return path.startswith("/dev/nvidia")


def select_nodes(nodes, gpu_minors=None):
    """Choose the host nodes a container gets.

    ``nodes``: dicts with ``path``, ``type`` ('c'), ``major``, ``minor`` discovered on the host.
    ``gpu_minors``: the /dev/nvidiaN minors of the GPUs the container should get (None = all).
    Shared nodes (nvidiactl, nvidia-uvm*, nvidia-modeset, nvidia-caps/*) are always included.
    Raises LxcError when a wanted GPU minor has no node, or when nvidiactl is missing.
    """
    by_path = {}
    for n in nodes:
        if n.get("type") != "c" or not is_nvidia_node(n.get("path", "")):
            continue
        by_path[n["path"]] = n
    if "/dev/nvidiactl" not in by_path:
        raise LxcError("/dev/nvidiactl not found on the host: is the NVIDIA driver loaded? (nvidia-smi on the host)")
    chosen = []
    present_minors = set()
    for path, n in by_path.items():
        m = _GPU_NODE_RE.match(path)
        if m:
            present_minors.add(int(m.group(1)))
            if gpu_minors is not None and int(m.group(1)) not in gpu_minors:
                continue
        chosen.append(n)
    if gpu_minors is not None:
        missing = sorted(set(gpu_minors) - present_minors)
        if missing:
            raise LxcError("GPU minor(s) %s have no /dev/nvidiaN node on the host (present: %s)"
                           % (missing, sorted(present_minors)))
    return sorted(chosen, key=lambda n: _node_sort_key(n["path"]))


def plan_dev_entries(config, nodes, gid=None, mode=None, uid=None):
    """Plan the ``devN`` changes that make a container carry exactly ``nodes``.

    ``config``: parse_pve_config() of the container. Entries for non-NVIDIA paths are left alone;
    NVIDIA entries keep their index when the path is still wanted (value updated if gid/mode
    changed), unwanted ones are deleted, new ones take the lowest free index.
    Returns dict(set={devN: value}, delete=[devN], entries={devN: value} (final NVIDIA entries)).
    """
    existing = {}
    used = set()
    for key, value in config.items():
        m = re.match(r"^dev(\d+)$", key)
        if not m:
            continue
        idx = int(m.group(1))
        used.add(idx)
        existing[idx] = parse_dev_value(value)
    wanted = {n["path"]: render_dev_value(n["path"], gid=gid, mode=mode, uid=uid) for n in nodes}
    to_set, to_delete, final = {}, [], {}
    placed = set()
    for idx in sorted(existing):
        path = existing[idx]["path"]
        if not is_nvidia_node(path):
            continue
        key = "dev%d" % idx
        if path in wanted and path not in placed:
            placed.add(path)
            final[key] = wanted[path]
            if config[key] != wanted[path]:
                to_set[key] = wanted[path]
        else:
            to_delete.append(key)
            used.discard(idx)
    free = (i for i in range(MAX_DEV_INDEX) if i not in used)
    for n in nodes:
        if n["path"] in placed:
            continue
        try:
            idx = next(free)
        except StopIteration:
            raise LxcError("no free devN index left (PVE allows dev0..dev%d)" % (MAX_DEV_INDEX - 1))
        used.add(idx)
        key = "dev%d" % idx
        to_set[key] = final[key] = wanted[n["path"]]
        placed.add(n["path"])
    return {"set": to_set, "delete": to_delete, "entries": final}


def pct_set_argv(ctid, plan):
    """The ``pct set`` command line applying a plan (None when there is nothing to do)."""
    if not plan["set"] and not plan["delete"]:
        return None
    argv = ["pct", "set", str(validate_ctid(ctid))]
    for key in sorted(plan["set"], key=lambda k: int(k[3:])):
        argv += ["--" + key, plan["set"][key]]
    if plan["delete"]:
        argv += ["--delete", ",".join(plan["delete"])]
    return argv


def pct_create_argv(ctid, volid, hostname, defaults=None, options=None):
    """The ``pct create`` command line of a new container from template ``volid``: ``options`` merged over
    ``defaults`` (a key set to None leaves that default out), each as ``--key value`` in the merged order (pct(1):
    ``pct create <vmid> <ostemplate> [OPTIONS]``)."""
    validate_ctid(ctid)
    merged = dict(defaults or {})
    merged.update(options or {})
    argv = ["pct", "create", str(ctid), volid, "--hostname", hostname]
    for key, value in merged.items():
        if value is not None:
            argv += ["--" + str(key), str(value)]
    return argv


def render_lxc_raw(entries, nodes, cgroup_v1=False, host_dev_root="/dev"):
    """Render the raw LXC keys PVE derives from ``devN`` entries (device allow + node in the container).

    ``entries``: {devN: value}; ``nodes``: host node dicts (path, type, major, minor). PVE creates the
    node inside the container from its type/major/minor; a plain LXC container gets the same effect
    from a bind mount plus the cgroup device allow rule. ``cgroup_v1`` adds the legacy key too.
    ``host_dev_root`` is where the bind sources live (tests keep their nodes outside /dev).
    """
    by_path = {n["path"]: n for n in nodes}
    lines = []
    for key in sorted(entries, key=lambda k: int(k[3:])):
        path = parse_dev_value(entries[key])["path"]
        n = by_path.get(path)
        if n is None:
            raise LxcError("%s: %s is not a node on the host" % (key, path))
        rule = "%s %d:%d rwm" % (n["type"], int(n["major"]), int(n["minor"]))
        lines.append("lxc.cgroup2.devices.allow = %s" % rule)
        if cgroup_v1:
            lines.append("lxc.cgroup.devices.allow = %s" % rule)
        source = os.path.join(host_dev_root, path[len("/dev/"):])
        lines.append("lxc.mount.entry = %s %s none bind,optional,create=file" % (source, path.lstrip("/")))
    return "\n".join(lines) + ("\n" if lines else "")


def parse_nvidia_version(text):
    """Return the kernel module version from /proc/driver/nvidia/version (None when not found).

    One parser for every caller: module_utils/gpu/nvidia_banner.py (open and proprietary banners).
    """
    return nvidia_banner.module_version(text)


def parse_gpu_information(text):
    """Parse /proc/driver/nvidia/gpus/BDF/information; returns {'minor': int|None, 'model': str|None}."""
    out = {"minor": None, "model": None}
    for line in (text or "").splitlines():
        k, _sep, v = line.partition(":")
        if k.strip() == "Device Minor":
            out["minor"] = int(v.strip())
        elif k.strip() == "Model":
            out["model"] = v.strip()
    return out


def container_lib_version(text):
    """Version of the container's NVIDIA userspace from ``ls`` of libnvidia-ml.so.* / dpkg output."""
    m = re.search(r"libnvidia-ml\.so\.(\d+\.\d+(?:\.\d+)?)", text or "")
    if m:
        return m.group(1)
    m = re.search(r"^(?:ii\s+)?\S*nvidia\S*\s+(?:\d+:)?(\d+\.\d+(?:\.\d+)?)", text or "", re.M)
    return m.group(1) if m else None


def lockstep_status(host_version, container_version, smi_rc=None, smi_output=""):
    """Compare the host kernel module and the container userspace.

    Returns dict(ok, state, message, fix). ``state``: 'ok', 'mismatch', 'no_host_driver',
    'no_container_libs'. An NVML mismatch seen in nvidia-smi output is a mismatch even when the
    versions look equal (stale libraries in a second path).
    """
    if not host_version:
        return {"ok": False, "state": "no_host_driver", "message": "no NVIDIA kernel module loaded on the host "
                "(/proc/driver/nvidia/version missing)", "fix": "install the host driver and reboot the host first"}
    if smi_output and MISMATCH_TEXT in smi_output:
        return {"ok": False, "state": "mismatch",
                "message": "Failed to initialize NVML: Driver/library version mismatch (host kernel module %s, container libraries %s)"
                % (host_version, container_version or "unknown"),
                "fix": "install the container userspace pinned to %s (nvidia_driver_mode: container, nvidia_driver_version: %s) "
                       "or, if the host driver was just upgraded, reboot the host first" % (host_version, host_version)}
    if not container_version:
        return {"ok": False, "state": "no_container_libs",
                "message": "no NVIDIA userspace libraries (libnvidia-ml.so.*) found in the container",
                "fix": "install the container userspace pinned to %s" % host_version}
    if container_version != host_version:
        return {"ok": False, "state": "mismatch",
                "message": "host kernel module %s but container libraries %s: NVML will fail with 'Driver/library version mismatch'"
                % (host_version, container_version),
                "fix": "upgrade in order: host driver, reboot, then container libraries pinned to %s" % host_version}
    return {"ok": True, "state": "ok", "message": "host and container both at %s" % host_version, "fix": ""}

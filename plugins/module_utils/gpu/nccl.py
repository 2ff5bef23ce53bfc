# -*- coding: utf-8 -*-
# Copyright: gpuhost.sglang contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""NCCL host settings derived from GPU facts, each with the reason it is set.

Input: the dict gpu_facts returns (``topology``, ``p2p``, ``virtualization``, ``summary``...) and the list of
InfiniBand/RoCE devices. Output: ordered list of {"name", "value", "reason"}. Sources for the choices:
docs/gpu-stack.md (NCCL section) and the public sources it cites. Stdlib only.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import os

LEVELS = ["PIX", "PXB", "PHB", "NODE", "SYS"]  # NCCL_P2P_LEVEL values, nearest first
NAME_OK = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_")


def ib_devices(sysfs_root="/"):
    try:
        return sorted(os.listdir(os.path.join(sysfs_root, "sys", "class", "infiniband")))
    except OSError:
        return []


def _pairs(facts):
    n = int(facts.get("gpu_count") or 0)
    return [(i, j) for i in range(n) for j in range(n) if i != j]


def _p2p_ok(facts, i, j):
    p2p = facts.get("p2p") or {}
    return all((p2p.get(cap) or [[None]])[i][j] == "OK" for cap in ("read", "write"))


def settings(facts, ib=None, overrides=None):
    """Return [{"name", "value", "reason"}] for /etc/nccl.conf and the serving unit's environment."""
    out = []
    ib = list(ib or [])
    count = int(facts.get("gpu_count") or 0)
    virt = facts.get("virtualization")
    if not ib:
        out.append({"name": "NCCL_IB_DISABLE", "value": "1",
                    "reason": "no InfiniBand/RoCE device under /sys/class/infiniband: skip the IB transport probe"})
    pairs = _pairs(facts)
    if count >= 2:
        topo = facts.get("topology") or []
        nvlink_all = all(str(topo[i][j]).startswith("NV") for i, j in pairs)
        bad = [(i, j) for i, j in pairs if not _p2p_ok(facts, i, j)]
        if nvlink_all and not bad:
            out.append({"name": "NCCL_P2P_LEVEL", "value": "NVL",
                        "reason": "every GPU pair is NVLink-connected (%s) and NVML reports P2P OK: keep P2P on NVLink"
                        % topo[0][1]})
        elif bad and virt in ("passthrough", "vgpu", "vm"):
            out.append({"name": "NCCL_P2P_DISABLE", "value": "1",
                        "reason": "virtualized (%s) and NVML reports P2P not supported for %d pair(s) (e.g. %d->%d): P2P through "
                        "the IOMMU/ACS path hangs or crawls; use SHM" % (virt, len(bad), bad[0][0], bad[0][1])})
        elif bad:
            # the widest level at which every pair at or below it is P2P OK
            ok_level = None
            for level in LEVELS:
                at = [(i, j) for i, j in pairs if topo[i][j] == level]
                if any(not _p2p_ok(facts, i, j) for i, j in at):
                    break
                if at:
                    ok_level = level
            if ok_level:
                out.append({"name": "NCCL_P2P_LEVEL", "value": ok_level,
                            "reason": "NVML reports P2P OK up to %s but not for %d pair(s) beyond it (e.g. %d->%d is %s)"
                            % (ok_level, len(bad), bad[0][0], bad[0][1], topo[bad[0][0]][bad[0][1]])})
            else:
                out.append({"name": "NCCL_P2P_DISABLE", "value": "1",
                            "reason": "NVML reports P2P not supported for %d pair(s) (e.g. %d->%d)" % (len(bad), bad[0][0], bad[0][1])})
        else:
            worst = max((topo[i][j] for i, j in pairs if topo[i][j] in LEVELS), key=LEVELS.index, default=None)
            if worst:
                out.append({"name": "NCCL_P2P_LEVEL", "value": worst,
                            "reason": "NVML reports P2P read/write OK for every pair; allow P2P up to the widest path (%s)%s"
                            % (worst, "; virtualized: confirm with gpu_link_probe, IOMMU can throttle it" if virt not in (None, "bare_metal") else "")})
    for name in sorted(overrides or {}):
        if not name or set(name) - NAME_OK:
            raise ValueError("nccl override names must be upper-case NCCL variables, got %r" % name)
        value = str((overrides or {})[name])
        out = [s for s in out if s["name"] != name]
        out.append({"name": name, "value": value, "reason": "set explicitly (nccl_overrides)"})
    return out

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


VIRTUALIZED = ("passthrough", "vgpu", "vm")
# NCCL's own default without NCCL_P2P_LEVEL: src/graph/paths.cc ncclTopoCheckP2p, "By default don't use P2P across
# CPU Host Bridges and further apart" (p2pLevel = PATH_PXB; AMD CPUs with at most 2 GPUs get PATH_SYS), and P2P is
# dropped for a pair whose NVML read/write status is not OK (the checkNvml block of the same function).
NCCL_DEFAULT = "NCCL's default (P2P only up to PXB, src/graph/paths.cc ncclTopoCheckP2p)"


def _probe_levels(facts, probe):
    """From a gpu_link_probe result: (widest passing level or None, evidence). Pairs are grouped by their topology
    level (facts' topology matrix); a level counts when every measured pair at it and at every nearer level met
    its threshold. An unmeasured level ends the walk (not measured is not proven)."""
    topo = facts.get("topology") or []
    rows = [r for r in (probe or {}).get("pairs") or [] if r.get("bandwidth_gbps") is not None]
    by_level = {}
    for row in rows:
        try:
            level = topo[int(row["src"])][int(row["dst"])]
        except (IndexError, KeyError, TypeError, ValueError):
            continue
        by_level.setdefault(level, []).append(row)
    best = None
    notes = []
    for level in LEVELS:
        at = by_level.get(level)
        if not at:
            continue
        slow = [r for r in at if r.get("reasons")]
        low = min(r["bandwidth_gbps"] for r in at)
        if slow:
            notes.append("%s: %d of %d pair(s) below threshold (e.g. %s->%s %.1f GB/s: %s)"
                         % (level, len(slow), len(at), slow[0]["src"], slow[0]["dst"], slow[0]["bandwidth_gbps"],
                            "; ".join(slow[0]["reasons"])))
            break
        notes.append("%s: %d pair(s) pass, lowest %.1f GB/s" % (level, len(at), low))
        best = level
    # the all-reduce ran under the NCCL settings in force when it was measured (in a guest: NCCL's default, no P2P),
    # so it says nothing about P2P: noted, the pair copies (CUDA peer copies) decide
    gate = (probe or {}).get("allreduce_gate") or {}
    if gate.get("failed"):
        notes.append("all-reduce below its gate under the NCCL settings it ran with (%s)" % gate.get("reason"))
    return best, "gpu_link_probe measured " + ("; ".join(notes) or "no pair")


def p2p_decision(facts, probe=None):
    """The P2P setting NCCL gets and why: {"name", "value", "reason"} or None (NCCL keeps its default) plus the
    evidence, as {"setting", "evidence", "source"}. Bare metal (and LXC containers, which see the host's PCIe) trust
    NVML's P2P status, capped by a probe when one was measured; a virtualized host (VFIO, vGPU) is widened only on a
    measured, passing probe: NVML answers for the virtual topology, which is what crippled P2P in VFIO guests."""
    count = int(facts.get("gpu_count") or 0)
    if count < 2:
        return {"setting": None, "source": "none", "evidence": "%d GPU(s) read: no P2P between GPUs" % count}
    virt = facts.get("virtualization")
    virtualized = virt in VIRTUALIZED
    pairs = _pairs(facts)
    topo = facts.get("topology") or []
    nvlink_all = all(str(topo[i][j]).startswith("NV") for i, j in pairs)
    bad = [(i, j) for i, j in pairs if not _p2p_ok(facts, i, j)]
    if nvlink_all and not bad:
        return {"source": "nvml", "evidence": "every pair NVLink %s, NVML P2P OK" % topo[0][1],
                "setting": {"name": "NCCL_P2P_LEVEL", "value": "NVL",
                            "reason": "every GPU pair is NVLink-connected (%s) and NVML reports P2P OK: keep P2P on NVLink"
                            % topo[0][1]}}
    if bad and virtualized:
        return {"source": "nvml", "evidence": "virtualized, NVML P2P not OK",
                "setting": {"name": "NCCL_P2P_DISABLE", "value": "1",
                            "reason": "virtualized (%s) and NVML reports P2P not supported for %d pair(s) (e.g. %d->%d): P2P "
                            "through the IOMMU/ACS path hangs or crawls; use SHM" % (virt, len(bad), bad[0][0], bad[0][1])}}
    # the widest level NVML allows: every pair at or below it P2P OK
    nvml_level = None
    for level in LEVELS:
        at = [(i, j) for i, j in pairs if topo[i][j] == level]
        if any(not _p2p_ok(facts, i, j) for i, j in at):
            break
        if at:
            nvml_level = level
    if bad:
        nvml_why = ("NVML reports P2P OK up to %s but not for %d pair(s) beyond it (e.g. %d->%d is %s)"
                    % (nvml_level, len(bad), bad[0][0], bad[0][1], topo[bad[0][0]][bad[0][1]]))
    else:
        nvml_why = "NVML reports P2P read/write OK for every pair; the widest path is %s" % nvml_level
    if probe:
        measured, evidence = _probe_levels(facts, probe)
        if measured and nvml_level:
            level = LEVELS[min(LEVELS.index(measured), LEVELS.index(nvml_level))]
            return {"source": "gpu_link_probe", "evidence": evidence,
                    "setting": {"name": "NCCL_P2P_LEVEL", "value": level,
                                "reason": "%s; %s: allow P2P up to %s" % (nvml_why, evidence, level)}}
        if virtualized or not nvml_level:
            return {"source": "gpu_link_probe", "evidence": evidence,
                    "setting": {"name": "NCCL_P2P_DISABLE", "value": "1",
                                "reason": "%s (%s): no level passed; use SHM" % (evidence, virt)}}
    if virtualized:
        return {"setting": None, "source": "nccl default",
                "evidence": "virtualized (%s): %s, but P2P is not widened without a measured, passing gpu_link_probe "
                "result (nccl_link_probe); %s applies" % (virt, nvml_why, NCCL_DEFAULT)}
    if nvml_level is None:
        return {"source": "nvml", "evidence": nvml_why,
                "setting": {"name": "NCCL_P2P_DISABLE", "value": "1",
                            "reason": "NVML reports P2P not supported for %d pair(s) (e.g. %d->%d)" % (len(bad), bad[0][0], bad[0][1])}}
    return {"source": "nvml", "evidence": nvml_why,
            "setting": {"name": "NCCL_P2P_LEVEL", "value": nvml_level,
                        "reason": "%s: allow P2P up to %s (overrides %s)" % (nvml_why, nvml_level, NCCL_DEFAULT)}}


def settings(facts, ib=None, overrides=None, probe=None):
    """Return [{"name", "value", "reason"}] for /etc/nccl.conf and the serving unit's environment. ``probe``: a
    gpu_link_probe result (its pairs and all-reduce gate), the only ground for widening P2P on a virtualized host."""
    out = []
    ib = list(ib or [])
    if not ib:
        out.append({"name": "NCCL_IB_DISABLE", "value": "1",
                    "reason": "no InfiniBand/RoCE device under /sys/class/infiniband: skip the IB transport probe"})
    setting = p2p_decision(facts, probe)["setting"]
    if setting:
        out.append(setting)
    for name in sorted(overrides or {}):
        if not name or set(name) - NAME_OK:
            raise ValueError("nccl override names must be upper-case NCCL variables, got %r" % name)
        value = str((overrides or {})[name])
        out = [s for s in out if s["name"] != name]
        out.append({"name": name, "value": value, "reason": "set explicitly (nccl_overrides)"})
    return out

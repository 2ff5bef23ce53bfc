# -*- coding: utf-8 -*-
# Copyright: gpuhost.sglang contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Bootloader detection and kernel command line editing for Proxmox VE / Debian hosts.

GRUB: the arguments go into a drop-in under /etc/default/grub.d/ (then ``update-grub``).
systemd-boot (PVE on ZFS, UEFI): they go into the single line of /etc/kernel/cmdline (then
``proxmox-boot-tool refresh``). Hosts whose ESPs are managed by proxmox-boot-tool in GRUB mode
(ZFS, legacy BIOS) keep the GRUB drop-in but also need ``proxmox-boot-tool refresh``.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import re
import shlex

BOOTLOADERS = ("grub", "systemd-boot")
_ARG_RE = re.compile(r"^[A-Za-z0-9_.\-]+(=[A-Za-z0-9_.,:/+\-]*)?$")
_PBT_LINE_RE = re.compile(r"is configured with:\s*(?P<kind>uefi|grub)\b", re.IGNORECASE)


class BootError(ValueError):
    """Bad kernel argument or unknown bootloader; the message names it."""


def detect_bootloader(pbt_rc, pbt_output, uuids_file_exists):
    """Decide which bootloader reads the kernel command line.

    ``pbt_rc``/``pbt_output``: exit code and output of ``proxmox-boot-tool status`` (rc None when the
    tool is absent); ``uuids_file_exists``: whether /etc/kernel/proxmox-boot-uuids exists.
    Returns dict(bootloader='grub'|'systemd-boot', proxmox_boot_tool=bool, evidence=str).
    """
    kinds = [m.group("kind").lower() for m in _PBT_LINE_RE.finditer(pbt_output or "")]
    if pbt_rc == 0 and uuids_file_exists and kinds:
        if "uefi" in kinds:
            return {"bootloader": "systemd-boot", "proxmox_boot_tool": True,
                    "evidence": "proxmox-boot-tool status: ESP(s) configured with uefi (systemd-boot reads /etc/kernel/cmdline)"}
        return {"bootloader": "grub", "proxmox_boot_tool": True,
                "evidence": "proxmox-boot-tool status: ESP(s) configured with grub (GRUB config, synced by proxmox-boot-tool)"}
    if pbt_rc is None:
        why = "proxmox-boot-tool not installed"
    elif not uuids_file_exists:
        why = "/etc/kernel/proxmox-boot-uuids absent"
    else:
        why = "proxmox-boot-tool status lists no configured ESP"
    return {"bootloader": "grub", "proxmox_boot_tool": False, "evidence": why + ": plain GRUB (update-grub)"}


def validate_args(args):
    """Raise BootError unless every element is a single plain kernel argument."""
    if not isinstance(args, (list, tuple)):
        raise BootError("kernel arguments must be a list, got %r" % (args,))
    for a in args:
        if not isinstance(a, str) or not _ARG_RE.match(a):
            raise BootError("%r is not a single kernel argument (letters, digits, _.- then optional =value, no spaces or quotes)" % (a,))
    return list(args)


MODES = ("baremetal", "lxc", "vfio", "none")
# iommu=pt in every mode but none: the GLM-5-NVFP4 model card (lukealonso/GLM-5-NVFP4, "How to Run") advises it
# against NCCL hangs with P2P on 8x RTX PRO 6000 boxes. The same card's "amd_iommu=pt" is not an amd_iommu= option
# (Linux drivers/iommu/amd/init.c parse_amd_iommu_options logs "Unknown option"); the generic x86 iommu=pt
# selects the identity (passthrough) DMA domain on Intel and AMD alike.
PASSTHROUGH_ARG = "iommu=pt"


def kernel_args_for_mode(mode, iommu_args, passthrough, extra, extra_var="extra_args",
                         passthrough_var="iommu_passthrough"):
    """The kernel arguments a host mode needs, then the operator's extra ones (validated, deduplicated).

    ``iommu_args``: the vendor's IOMMU arguments (e.g. ["intel_iommu=on", "iommu=pt"]), used in vfio mode only;
    ``passthrough``: add iommu=pt (every mode but none; in vfio mode keep it in ``iommu_args``);
    ``extra``: more arguments, every mode but none. Mode none wants nothing (everything we added goes).
    Raises BootError naming ``extra_var`` for a malformed extra argument or one that contradicts ours.
    """
    if mode not in MODES:
        raise BootError("mode %r is not one of %s" % (mode, ", ".join(MODES)))
    if mode == "none":
        return []
    if not isinstance(extra, (list, tuple)):
        raise BootError("%s: must be a list of kernel arguments, got %r" % (extra_var, extra))
    for a in extra:
        if not isinstance(a, str) or not _ARG_RE.match(a):
            raise BootError("%s: %r is not a single kernel argument (letters, digits, _.- then optional =value, "
                            "no spaces or quotes)" % (extra_var, a))
    ours = list(validate_args(list(iommu_args))) if mode == "vfio" else []
    if mode != "vfio" and passthrough:
        ours.append(PASSTHROUGH_ARG)
    if not passthrough:
        ours = [a for a in ours if a != PASSTHROUGH_ARG]
    why = {a: ("%s: true" % passthrough_var if a == PASSTHROUGH_ARG else "mode %s" % mode) for a in ours}
    out = list(ours)
    for a in extra:
        clash = [o for o in ours if _key(o) == _key(a) and o != a]
        if clash:
            raise BootError("%s: %r conflicts with %r (%s); allowed: drop it from %s%s" % (
                extra_var, a, clash[0], why[clash[0]], extra_var,
                " or set %s: false" % passthrough_var if clash[0] == PASSTHROUGH_ARG else ""))
        if a not in out:
            out.append(a)
    return out


def render_grub_dropin(args, marker):
    """Render a /etc/default/grub.d/*.cfg drop-in that appends ``args`` to GRUB_CMDLINE_LINUX_DEFAULT."""
    validate_args(args)
    return ("# %s\n# Kernel arguments for GPU hosting. Remove this file (or set proxmox_host_mode: none) to revert.\n"
            'GRUB_CMDLINE_LINUX_DEFAULT="${GRUB_CMDLINE_LINUX_DEFAULT} %s"\n') % (marker, " ".join(args))


def parse_grub_dropin(text):
    """Return the argument list a drop-in rendered by render_grub_dropin() adds (empty list otherwise)."""
    m = re.search(r'^GRUB_CMDLINE_LINUX_DEFAULT="\$\{GRUB_CMDLINE_LINUX_DEFAULT\}\s*(?P<args>[^"]*)"\s*$', text or "", re.M)
    return m.group("args").split() if m else []


def _key(arg):
    return arg.split("=", 1)[0]


def merge_cmdline(current, add, remove=()):
    """Edit a one-line kernel command line (/etc/kernel/cmdline).

    Arguments in ``remove`` are dropped (exact match). Each argument in ``add`` replaces an existing
    argument with the same key (``iommu=pt`` replaces ``iommu=off``) or is appended. Order of the
    untouched arguments is kept. Returns the new line (no trailing newline).
    """
    validate_args(list(add))
    words = shlex.split(current.strip()) if current and current.strip() else []
    words = [w for w in words if w not in set(remove)]
    for a in add:
        if a in words:
            continue
        keys = [_key(w) for w in words]
        if "=" in a and _key(a) in keys:
            words[keys.index(_key(a))] = a
        else:
            words.append(a)
    return " ".join(words)


def plan_cmdline_change(current, wanted, previously_added):
    """Plan /etc/kernel/cmdline for state present/absent while remembering what we added.

    ``wanted``: the arguments that must be present (empty list = revert); ``previously_added``: what
    an earlier run added (kept in a state file so a revert never removes the operator's own
    arguments). Returns (new_line, now_added).
    """
    validate_args(list(wanted))
    current_words = current.split()
    # Drop what we added earlier and no longer want.
    stale = [a for a in previously_added if a not in wanted]
    line = merge_cmdline(current, [], remove=stale)
    words_before = line.split()
    line = merge_cmdline(line, wanted)
    added = [a for a in wanted if a not in words_before or a in previously_added]
    # An argument the operator already had (before any run of ours) is not ours to remove later.
    added = [a for a in added if a in previously_added or a not in current_words]
    return line, added

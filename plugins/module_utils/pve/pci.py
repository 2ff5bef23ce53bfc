# -*- coding: utf-8 -*-
# Copyright: gpuhost.sglang contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""PCI-level logic for Proxmox / bare-metal GPU hosts.

PCI address (BDF) validation, ``lspci -D -vvv`` parsing (ACS control per bridge), IOMMU evidence
(CPU flags + ACPI DMAR/IVRS tables), the IOMMU kernel arguments per CPU vendor, and the P2P
readiness report. Pure functions: callers pass file contents / command output in.
"""

from __future__ import (absolute_import, division, print_function)

__metaclass__ = type

import re

HOST_MODES = ("baremetal", "lxc", "vfio", "none")

_BDF_RE = re.compile(r"^(?:(?P<domain>[0-9a-fA-F]{4}):)?(?P<bus>[0-9a-fA-F]{2}):(?P<dev>[0-1][0-9a-fA-F])\.(?P<fn>[0-7])$")
_DEVICE_LINE_RE = re.compile(r"^(?P<bdf>(?:[0-9a-fA-F]{4}:)?[0-9a-fA-F]{2}:[0-9a-fA-F]{2}\.[0-7])\s+(?P<desc>.*)$")
_ACS_FLAGS = ("SrcValid", "TransBlk", "ReqRedir", "CmpltRedir", "UpstreamFwd", "EgressCtrl", "DirectTrans")
# The ACS controls that force peer-to-peer TLPs up to the root complex.
_ACS_REDIRECTING = ("SrcValid", "ReqRedir", "CmpltRedir")
NVIDIA_VENDOR = "10de"


class PciError(ValueError):
    """Invalid PCI input; the message names the offending value."""


def normalize_bdf(value):
    """Return the canonical ``dddd:bb:dd.f`` form (lower case, domain 0000 when omitted).

    Raises PciError on anything that is not a PCI address; device numbers above 0x1f are rejected.
    """
    if not isinstance(value, str):
        raise PciError("PCI address %r is not a string (expected e.g. 0000:01:00.0)" % (value,))
    m = _BDF_RE.match(value.strip())
    if not m or int(m.group("dev"), 16) > 0x1F:
        raise PciError("%r is not a PCI address (expected DOMAIN:BUS:DEVICE.FUNCTION, e.g. 0000:01:00.0)" % (value,))
    domain = (m.group("domain") or "0000").lower()
    return "%s:%s:%s.%s" % (domain, m.group("bus").lower(), m.group("dev").lower(), m.group("fn"))


def parse_lspci(text):
    """Parse ``lspci -D -nn -vvv`` output into a list of device dicts.

    Each dict: ``address``, ``description``, ``vendor`` / ``device`` (hex ids when ``-nn`` was used),
    ``is_bridge``, ``acs_cap`` / ``acs_ctl`` (flag -> bool, or None when the device has no ACS
    capability), ``acs_redirecting`` (True when any of SrcValid/ReqRedir/CmpltRedir is on),
    ``driver`` (``Kernel driver in use``).
    """
    devices = []
    cur = None
    for raw in text.splitlines():
        if not raw.strip():
            continue
        if not raw[0].isspace():
            m = _DEVICE_LINE_RE.match(raw.strip())
            if not m:
                cur = None
                continue
            desc = m.group("desc")
            ids = re.findall(r"\[([0-9a-fA-F]{4}):([0-9a-fA-F]{4})\]", desc)
            cur = {
                "address": normalize_bdf(m.group("bdf")),
                "description": desc,
                "vendor": ids[-1][0].lower() if ids else None,
                "device": ids[-1][1].lower() if ids else None,
                "is_bridge": bool(re.search(r"PCI bridge|Root Port|Downstream Port|Upstream Port|\[0604\]", desc)),
                "acs_cap": None,
                "acs_ctl": None,
                "acs_redirecting": False,
                "driver": None,
            }
            devices.append(cur)
            continue
        if cur is None:
            continue
        line = raw.strip()
        for key, field in (("ACSCap:", "acs_cap"), ("ACSCtl:", "acs_ctl")):
            if line.startswith(key):
                flags = {}
                for tok in line[len(key):].split():
                    name, sign = tok[:-1], tok[-1:]
                    if name in _ACS_FLAGS and sign in "+-":
                        flags[name] = sign == "+"
                cur[field] = flags
                if field == "acs_ctl":
                    cur["acs_redirecting"] = any(flags.get(f) for f in _ACS_REDIRECTING)
        if line.startswith("Kernel driver in use:"):
            cur["driver"] = line.split(":", 1)[1].strip()
    return devices


def cpu_virt_flags(cpuinfo_text):
    """Return the CPU virtualization facts from /proc/cpuinfo: vendor ('intel'/'amd'/None), vmx, svm."""
    flags = set()
    vendor = None
    for line in cpuinfo_text.splitlines():
        key, _sep, val = line.partition(":")
        key = key.strip()
        if key == "flags" and not flags:
            flags = set(val.split())
        elif key == "vendor_id" and vendor is None:
            v = val.strip()
            vendor = "intel" if v == "GenuineIntel" else "amd" if v in ("AuthenticAMD", "HygonGenuine") else None
    return {"vendor": vendor, "vmx": "vmx" in flags, "svm": "svm" in flags}


def iommu_evidence(cpu, acpi_tables, iommu_groups=0):
    """Decide whether VFIO can work on this host.

    ``cpu`` is the cpu_virt_flags() dict, ``acpi_tables`` the names under /sys/firmware/acpi/tables,
    ``iommu_groups`` the number of entries in /sys/kernel/iommu_groups. Returns a dict with
    ``capable`` (bool), ``vendor`` and ``reason`` (a human sentence).
    """
    tables = set(acpi_tables or ())
    if cpu.get("vmx") and "DMAR" in tables:
        return {"capable": True, "vendor": "intel", "reason": "Intel VT-x (vmx) with an ACPI DMAR table (VT-d)"}
    if cpu.get("svm") and "IVRS" in tables:
        return {"capable": True, "vendor": "amd", "reason": "AMD-V (svm) with an ACPI IVRS table (AMD-Vi)"}
    missing = []
    if not (cpu.get("vmx") or cpu.get("svm")):
        missing.append("no vmx/svm flag in /proc/cpuinfo")
    if not tables & {"DMAR", "IVRS"}:
        missing.append("no DMAR or IVRS table under /sys/firmware/acpi/tables (IOMMU off in firmware?)")
    elif cpu.get("vmx") and "DMAR" not in tables:
        missing.append("Intel CPU but only an IVRS table")
    elif cpu.get("svm") and "IVRS" not in tables:
        missing.append("AMD CPU but only a DMAR table")
    return {"capable": False, "vendor": cpu.get("vendor"), "reason": "; ".join(missing),
            "iommu_groups": iommu_groups}


def iommu_kernel_args(vendor, passthrough=True):
    """IOMMU kernel arguments for a CPU vendor ('intel' or 'amd')."""
    if vendor == "intel":
        args = ["intel_iommu=on"]
    elif vendor == "amd":
        # amd_iommu is on by default when IVRS exists; the explicit flag documents intent.
        args = ["amd_iommu=on"]
    else:
        raise PciError("cannot choose IOMMU kernel arguments for CPU vendor %r (allowed: intel, amd)" % (vendor,))
    if passthrough:
        args.append("iommu=pt")
    return args


def iommu_mode_from_cmdline(cmdline):
    """Classify the running IOMMU mode from /proc/cmdline: 'off', 'passthrough', 'translated' or 'default'."""
    args = cmdline.split()
    if any(a in ("intel_iommu=off", "amd_iommu=off", "iommu=off") for a in args):
        return "off"
    if "iommu=pt" in args or "iommu.passthrough=1" in args:
        return "passthrough"
    if any(a in ("intel_iommu=on", "amd_iommu=on", "amd_iommu=force_isolation") for a in args):
        return "translated"
    return "default"


def p2p_report(mode, iommu_mode, devices, virtualization="none"):
    """Build the P2P readiness report.

    ``mode`` is the proxmox_host_mode, ``iommu_mode`` from iommu_mode_from_cmdline(), ``devices``
    from parse_lspci(), ``virtualization`` from systemd-detect-virt. Returns a dict with
    ``bridges`` (address, description, acs_ctl, redirecting), ``redirecting_bridges`` (count),
    ``gpus`` and ``warnings`` (sentences, empty when nothing throttles GPU-to-GPU traffic).
    """
    bridges = [
        {"address": d["address"], "description": d["description"], "acs_ctl": d["acs_ctl"],
         "redirecting": d["acs_redirecting"]}
        for d in devices if d["is_bridge"] and d["acs_ctl"] is not None
    ]
    gpus = [d["address"] for d in devices if d["vendor"] == NVIDIA_VENDOR and re.search(r"\[03(00|02)\]", d["description"])]
    redirecting = [b for b in bridges if b["redirecting"]]
    warnings = []
    if mode == "vfio":
        warnings.append("proxmox_host_mode=vfio: GPUs passed to a VM reach each other through the IOMMU and the "
                        "guest's emulated topology; NCCL P2P is usually disabled or slow there. Prefer lxc for multi-GPU serving.")
    if iommu_mode == "translated" and mode != "vfio":
        warnings.append("IOMMU is in translated mode (no iommu=pt): every DMA is remapped, which throttles GPU P2P; "
                        "add iommu=pt or turn the IOMMU off for baremetal/lxc.")
    if redirecting and len(gpus) > 1:
        warnings.append("%d PCIe bridge(s) redirect peer-to-peer traffic to the root complex (ACSCtl SrcValid+/ReqRedir+/"
                        "CmpltRedir+): %s. Set proxmox_host_acs_disable=true (baremetal/lxc only) or disable ACS in firmware."
                        % (len(redirecting), ", ".join(b["address"] for b in redirecting)))
    if virtualization not in ("none", "", None) and virtualization not in ("lxc",):
        warnings.append("this host itself runs under %s virtualization: GPU P2P depends on the hypervisor's topology." % virtualization)
    return {"mode": mode, "iommu_mode": iommu_mode, "virtualization": virtualization or "none",
            "bridges": bridges, "redirecting_bridges": len(redirecting), "gpus": gpus, "warnings": warnings}


def _norm_list(var, values, problems):
    out = []
    if values is None:
        return out
    if not isinstance(values, (list, tuple)):
        problems.append("%s must be a list of PCI addresses like 0000:01:00.0, got %r" % (var, values))
        return out
    for v in values:
        try:
            out.append(normalize_bdf(v))
        except PciError as e:
            problems.append("%s: %s" % (var, e))
    return out


def preflight_problems(mode, vfio_gpus, lxc_gpus, pci_addresses, iommu, nvidia_gpus=(), acs_disable=False,
                       ctid=None, guests=None, vars_prefix="proxmox_host", lxc_var=None):
    """Check a host-mode request against the host, before anything changes.

    Returns (problems, normalized) where problems is a list of sentences, each naming the variable and
    the allowed values, and normalized is dict(vfio_gpus=[...], lxc_gpus=[...]) in canonical form.
    ``pci_addresses``: addresses present on the host; ``nvidia_gpus``: addresses of NVIDIA display
    controllers; ``iommu``: iommu_evidence(); ``guests``: {'qemu': [ids], 'lxc': [ids]}.
    """
    problems = []
    vvar, lvar, mvar = vars_prefix + "_vfio_gpus", lxc_var or vars_prefix + "_lxc_gpus", vars_prefix + "_mode"
    if mode not in HOST_MODES:
        problems.append("%s: %r is not a valid mode (allowed: %s)" % (mvar, mode, ", ".join(HOST_MODES)))
    vfio = _norm_list(vvar, vfio_gpus, problems)
    lxc = _norm_list(lvar, lxc_gpus, problems)
    present = set(pci_addresses or ())
    gpu_hint = ", ".join(sorted(nvidia_gpus)) or "none found"
    for var, lst in ((vvar, vfio), (lvar, lxc)):
        for a in lst:
            if a not in present:
                problems.append("%s: %s is not a PCI address on this host (allowed: NVIDIA GPUs present: %s)" % (var, a, gpu_hint))
        dups = sorted(set(a for a in lst if lst.count(a) > 1))
        if dups:
            problems.append("%s lists %s more than once" % (var, ", ".join(dups)))
    for a in sorted(set(vfio) & set(lxc)):
        problems.append("%s is claimed by two modes: %s (vfio, passed to a VM) and %s (lxc, kept on the host driver for "
                        "a container); each GPU must be in exactly one list" % (a, vvar, lvar))
    if mode == "vfio":
        if not vfio:
            problems.append("%s must list at least one PCI address when %s is vfio (allowed: the NVIDIA GPUs present: %s)"
                            % (vvar, mvar, gpu_hint))
        if not iommu.get("capable"):
            problems.append("%s: vfio needs an IOMMU but this host has none: %s (allowed modes on this host: baremetal, lxc, none)"
                            % (mvar, iommu.get("reason")))
        if acs_disable:
            problems.append("%s_acs_disable: true is not allowed with %s: vfio (IOMMU groups rely on ACS isolation; allowed: false)"
                            % (vars_prefix, mvar))
    elif vfio and mode in HOST_MODES:
        problems.append("%s is only used with %s: vfio (got %s); set it to [] or switch the mode" % (vvar, mvar, mode))
    if ctid is not None:
        guests = guests or {}
        try:
            cid = int(str(ctid).strip())
            if not 100 <= cid <= 999999999:
                raise ValueError
        except (TypeError, ValueError):
            cid = None
            problems.append("proxmox_lxc_gpu_ctid: %s is not a valid container id (allowed: 100..999999999)" % (ctid,))
        if cid is not None and cid in guests.get("qemu", []):
            problems.append("proxmox_lxc_gpu_ctid: %d is a QEMU VM on this cluster, not a container (allowed: a free id "
                            "or an existing container: %s)" % (cid, ", ".join(str(i) for i in guests.get("lxc", [])) or "none"))
    return problems, {"vfio_gpus": vfio, "lxc_gpus": lxc}

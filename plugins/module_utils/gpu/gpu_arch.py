# -*- coding: utf-8 -*-
# Copyright: gpuhost.sglang contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The GPU architecture a serving host's profile, toolchain proof and NCCL plan are for, with its evidence.

Order: the inventory's override (``sglang_gpu_arch`` other than ``auto``), then NVML (``gpus[].compute_capability``
of a gpu_facts result), then the PCI floor (``pci_gpus[].compute_capability``: vendor 10de, display class, the
device-ID table in pci_arch.py; no driver and no pynvml needed). A host whose PCI bus shows no NVIDIA GPU has none
("none", evidence says so). A host whose PCI bus shows NVIDIA GPUs but whose architecture neither NVML nor the
device-ID table gives raises :class:`GpuArchUnknown`, naming the devices and the override: never a silent "none".
Stdlib only; no imports from the collection.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import re

AUTO = "auto"
NO_GPU = ("", "none", "cpu")
_CC_RE = re.compile(r"^(\d+)\.(\d)$")
_SM_RE = re.compile(r"^sm_?(\d+)(\d)a?$")


class GpuArchUnknown(ValueError):
    """NVIDIA GPUs are on the PCI bus but their architecture cannot be derived."""


def _cc_from_text(text):
    """'12.0', 12.0, 'sm_120', 'sm120a' -> '12.0'; None when it is none of these."""
    text = str(text).strip().lower()
    match = _CC_RE.match(text)
    if match:
        return "%d.%s" % (int(match.group(1)), match.group(2))
    match = _SM_RE.match(text)
    if match:
        return "%d.%s" % (int(match.group(1)), match.group(2))
    return None


def sm_of(cc):
    """'12.0' -> 'sm_120'."""
    major, minor = cc.split(".")
    return "sm_%d%s" % (int(major), minor)


def _one(values, what):
    distinct = sorted(set(values))
    if len(distinct) > 1:
        raise GpuArchUnknown("%s report different compute capabilities (%s): one serving unit needs one architecture; set "
                             "sglang_gpu_arch to the one the profile is for (e.g. %s)" % (what, ", ".join(distinct), distinct[0]))
    return distinct[0] if distinct else None


def resolve(facts, override=AUTO):
    """Return {compute_capability, sm, source, evidence}: source is override, nvml, pci or none.

    ``facts``: a gpu_facts result (its ``gpus`` and ``pci_gpus``); ``override``: the inventory's ``sglang_gpu_arch``
    ("auto" to detect, "" / "none" for no GPU profile, or "12.0" / "sm_120"). Raises GpuArchUnknown."""
    facts = facts or {}
    text = "" if override is None else str(override).strip()
    if text.lower() != AUTO:
        if text.lower() in NO_GPU:
            return {"compute_capability": None, "sm": None, "source": "override",
                    "evidence": "sglang_gpu_arch=%r: no GPU profile, set by hand" % text}
        cc = _cc_from_text(text)
        if cc is None:
            raise GpuArchUnknown("sglang_gpu_arch=%r is not an architecture; allowed: auto, \"\" (no profile), a compute "
                                 "capability such as \"12.0\" or an sm value such as sm_120" % text)
        return {"compute_capability": cc, "sm": sm_of(cc), "source": "override",
                "evidence": "sglang_gpu_arch=%r set by hand" % text}
    gpus = [g for g in facts.get("gpus") or [] if g.get("compute_capability")]
    cc = _one([str(g["compute_capability"]) for g in gpus], "NVML's GPUs")
    if cc:
        names = sorted(set(str(g.get("name")) for g in gpus))
        return {"compute_capability": cc, "sm": sm_of(cc), "source": "nvml",
                "evidence": "NVML: %d GPU(s) (%s) of compute capability %s" % (len(gpus), ", ".join(names), cc)}
    pci = facts.get("pci_gpus") or []
    if not pci:
        why = facts.get("reason") or "NVML read no GPU"
        return {"compute_capability": None, "sm": None, "source": "none",
                "evidence": "no NVIDIA display/3D function on the PCI bus (vendor 10de) and %s: no GPU" % why}
    known = [g for g in pci if g.get("compute_capability")]
    ids = ", ".join(sorted(set("10de:%s" % g.get("device_id") for g in pci)))
    if len(known) < len(pci):
        unknown = ", ".join(sorted(set("10de:%s" % g.get("device_id") for g in pci if not g.get("compute_capability"))))
        raise GpuArchUnknown(
            "the PCI bus shows %d NVIDIA GPU(s) (%s) but no architecture can be derived: NVML read none (%s) and the "
            "device-ID table (plugins/module_utils/gpu/pci_arch.py) does not know %s. Set sglang_gpu_arch to the GPUs' "
            "compute capability (e.g. \"12.0\" for RTX PRO 6000 Blackwell, \"9.0\" for H100/H200), or install "
            "nvidia-ml-py where the facts are read" % (len(pci), ids, facts.get("reason") or "no reason given", unknown))
    cc = _one([str(g["compute_capability"]) for g in known], "the PCI device IDs")
    return {"compute_capability": cc, "sm": sm_of(cc), "source": "pci",
            "evidence": "PCI: %d NVIDIA GPU(s) %s -> compute capability %s (device-ID table; NVML: %s)"
            % (len(pci), ids, cc, facts.get("reason") or "read no GPU")}

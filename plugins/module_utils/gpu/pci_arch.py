# -*- coding: utf-8 -*-
# Copyright: gpuhost.sglang contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""NVIDIA GPUs from PCI IDs (sysfs), for hosts where the driver is not installed yet.

The device-ID -> architecture table is data, and there is one: PCI_GPU_TABLE below (the roles pass none; a caller may
pass its own ``table``: a list of ``{"start": "0x2b80", "end": "0x2bff", "arch": "Blackwell"}``).
Stdlib only; no imports from the collection.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import os

NVIDIA_VENDOR = 0x10DE
# PCI class 0x0300xx VGA, 0x0302xx 3D controller (datacenter GPUs), 0x0380xx display other
GPU_CLASSES = (0x0300, 0x0302, 0x0380)
# NVSwitch chips enumerate as PCI class 0x0680 (bridge, other) with vendor 10de
NVSWITCH_CLASS = 0x0680

# Built-in device-ID ranges (vendor 10de) per chip -> architecture and CUDA compute capability, used when the caller
# passes no table and for the compute capability of every scanned GPU. Sources: the PCI ID database (pci.ids, NVIDIA
# section: chip names per device ID, e.g. "2bb5 GB202GL [RTX PRO 6000 Blackwell Server Edition]", "2335 GH100
# [H200 SXM 141GB]"); NVIDIA's "CUDA GPU Compute Capability" table (developer.nvidia.com/cuda-gpus: RTX PRO 6000
# Blackwell and GeForce RTX 50 12.0, B200 10.0, B300 10.3, H100/H200 9.0, L40S/L4 8.9, A10/A6000 8.6, A100 8.0).
# The only device-ID table of the collection (gpu_facts uses it when no pci_arch_table is passed; the nvidia_driver
# role passes none: tests/unit/plugins/module_utils/gpu/test_pci_arch.py holds the roles to that).
# Unverified: that every device of 0x2b00-0x2fff is SM120 (GB10/DGX Spark is 12.1; its device ID was not found) and
# the B300 range; where wrong, sglang_gpu_arch overrides.
PCI_GPU_TABLE = (
    {"start": "0x1db0", "end": "0x1dbf", "arch": "Volta", "chip": "GV100", "compute_capability": "7.0"},
    {"start": "0x1e00", "end": "0x1fff", "arch": "Turing", "chip": "TU102..TU117", "compute_capability": "7.5"},
    {"start": "0x2180", "end": "0x21ff", "arch": "Turing", "chip": "TU116/TU117", "compute_capability": "7.5"},
    {"start": "0x20b0", "end": "0x20ff", "arch": "Ampere", "chip": "GA100", "compute_capability": "8.0"},
    {"start": "0x2200", "end": "0x22ff", "arch": "Ampere", "chip": "GA102", "compute_capability": "8.6"},
    {"start": "0x2300", "end": "0x23ff", "arch": "Hopper", "chip": "GH100", "compute_capability": "9.0"},
    {"start": "0x2400", "end": "0x25ff", "arch": "Ampere", "chip": "GA103..GA107", "compute_capability": "8.6"},
    {"start": "0x2680", "end": "0x28ff", "arch": "Ada Lovelace", "chip": "AD102..AD107", "compute_capability": "8.9"},
    {"start": "0x2900", "end": "0x29ff", "arch": "Blackwell", "chip": "GB100/GB102", "compute_capability": "10.0"},
    {"start": "0x2b00", "end": "0x2fff", "arch": "Blackwell", "chip": "GB202..GB207", "compute_capability": "12.0"},
    {"start": "0x3100", "end": "0x31ff", "arch": "Blackwell", "chip": "GB110", "compute_capability": "10.3"},
)


def _hex(value):
    if isinstance(value, int):
        return value
    return int(str(value).strip(), 16)


def validate_table(table):
    """Return a list of (start, end, arch) or raise ValueError naming the bad entry."""
    out = []
    for n, entry in enumerate(table or []):
        try:
            start, end, arch = _hex(entry["start"]), _hex(entry["end"]), str(entry["arch"])
        except (KeyError, TypeError, ValueError):
            raise ValueError("pci_arch_table[%d] must have hex 'start', 'end' and 'arch', got %r" % (n, entry))
        if start > end:
            raise ValueError("pci_arch_table[%d]: start 0x%04x > end 0x%04x" % (n, start, end))
        out.append((start, end, arch))
    return out


def arch_for_device(device_id, table):
    device_id = _hex(device_id)
    for start, end, arch in table:
        if start <= device_id <= end:
            return arch
    return "unknown"


def cc_for_device(device_id):
    """Compute capability ('12.0') of an NVIDIA device ID from PCI_GPU_TABLE, or None."""
    device_id = _hex(device_id)
    for entry in PCI_GPU_TABLE:
        if _hex(entry["start"]) <= device_id <= _hex(entry["end"]):
            return entry["compute_capability"]
    return None


def _read(path, name):
    try:
        with open(os.path.join(path, name)) as fh:
            return fh.read().strip()
    except OSError:
        return None


def scan(sysfs_root, table, kind="gpu"):
    """NVIDIA display/3D PCI functions (kind='gpu') or NVSwitches (kind='nvswitch') under
    <sysfs_root>/sys/bus/pci/devices, with their architecture."""
    classes = GPU_CLASSES if kind == "gpu" else (NVSWITCH_CLASS,)
    table = validate_table(table or list(PCI_GPU_TABLE))
    base = os.path.join(sysfs_root, "sys", "bus", "pci", "devices")
    found = []
    try:
        entries = sorted(os.listdir(base))
    except OSError:
        return found
    for bdf in entries:
        path = os.path.join(base, bdf)
        try:
            with open(os.path.join(path, "vendor")) as fh:
                vendor = _hex(fh.read())
            with open(os.path.join(path, "device")) as fh:
                device = _hex(fh.read())
            with open(os.path.join(path, "class")) as fh:
                pci_class = _hex(fh.read()) >> 8
        except (OSError, ValueError):
            continue
        if vendor != NVIDIA_VENDOR or pci_class not in classes:
            continue
        driver = None
        if os.path.islink(os.path.join(path, "driver")):
            driver = os.path.basename(os.readlink(os.path.join(path, "driver")))
        numa = _read(path, "numa_node")
        found.append({"bus_id": bdf.lower(), "vendor_id": "10de", "device_id": "%04x" % device,
                      "arch": arch_for_device(device, table), "compute_capability": cc_for_device(device),
                      "numa_node": int(numa) if numa not in (None, "") and numa.lstrip("-").isdigit() else None,
                      "driver": driver})
    return found


def parse_lspci_nn(text, table):
    """Same result from `lspci -Dnn` text (for hosts where sysfs is not readable)."""
    table = validate_table(table)
    found = []
    for line in text.splitlines():
        if "[10de:" not in line.lower():
            continue
        if not any(tag in line for tag in ("[0300]", "[0302]", "[0380]")):
            continue
        bdf = line.split()[0].lower()
        if bdf.count(":") == 1:
            bdf = "0000:" + bdf
        device = line.lower().split("[10de:", 1)[1][:4]
        found.append({"bus_id": bdf, "vendor_id": "10de", "device_id": device, "arch": arch_for_device(device, table),
                      "driver": None})
    return found

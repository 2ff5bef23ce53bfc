# -*- coding: utf-8 -*-
# Copyright: gpuhost.sglang contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""GPU facts from NVML (pynvml / nvidia-ml-py), as plain data.

Everything here takes the ``pynvml`` module as a parameter (``nvml``) so unit tests can pass a
fake and the same code runs without Ansible (``benchmarks/gpu/gpu_check.py``). Only the stdlib is
imported at module level; this file has no imports from the collection so it can be loaded by path.

NVML constants are written out below on purpose: nvidia-ml-py ships
``NVML_P2P_CAPS_INDEX_READ = 0,`` (a tuple, trailing comma), so the library's own constant is unusable.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import os
import re

# nvmlDeviceGetTopologyCommonAncestor -> nvidia-smi topo -m legend
TOPOLOGY_LEVELS = {
    0: "X",      # NVML_TOPOLOGY_INTERNAL: same board (multi-GPU board)
    10: "PIX",   # NVML_TOPOLOGY_SINGLE: one PCIe bridge
    20: "PXB",   # NVML_TOPOLOGY_MULTIPLE: several PCIe bridges, no host bridge
    30: "PHB",   # NVML_TOPOLOGY_HOSTBRIDGE: through a PCIe host bridge
    40: "NODE",  # NVML_TOPOLOGY_NODE: host bridges within one NUMA node
    50: "SYS",   # NVML_TOPOLOGY_SYSTEM: across NUMA nodes (SMP interconnect)
}
# order used to decide "how far apart" two GPUs are (lower = closer)
TOPOLOGY_RANK = {"X": 0, "NV": 1, "PIX": 2, "PXB": 3, "PHB": 4, "NODE": 5, "SYS": 6}

P2P_CAPS = {"read": 0, "write": 1, "nvlink": 2, "atomics": 3}
# nvmlGpuP2PStatus_t -> nvidia-smi topo -p2p legend
P2P_STATUS = {0: "OK", 1: "CNS", 2: "GNS", 3: "TNS", 4: "DR", 5: "NS", 6: "U"}

VIRT_MODES = {0: "none", 1: "passthrough", 2: "vgpu", 3: "host_vgpu", 4: "host_vsga"}

NVLINK_DEVICE_TYPE_GPU = 0
NVLINK_DEVICE_TYPE_SWITCH = 2
NVLINK_MAX_LINKS = 36

NVML_ERROR_NOT_SUPPORTED = 3

# compute capability major.minor -> (architecture, family name)
ARCH_BY_CC = {
    (6, 0): "Pascal", (6, 1): "Pascal", (6, 2): "Pascal",
    (7, 0): "Volta", (7, 2): "Volta",
    (7, 5): "Turing",
    (8, 0): "Ampere", (8, 6): "Ampere", (8, 7): "Ampere",
    (8, 9): "Ada Lovelace",
    (9, 0): "Hopper",
    (10, 0): "Blackwell", (10, 1): "Blackwell", (10, 3): "Blackwell",
    (11, 0): "Blackwell",
    (12, 0): "Blackwell", (12, 1): "Blackwell",
}
ARCH_BY_MAJOR = {6: "Pascal", 7: "Volta", 8: "Ampere", 9: "Hopper", 10: "Blackwell", 11: "Blackwell", 12: "Blackwell"}


def arch_from_cc(major, minor):
    """Return (arch_name, sm) for a compute capability, e.g. (12, 0) -> ("Blackwell", "sm_120")."""
    major = int(major)
    minor = int(minor)
    name = ARCH_BY_CC.get((major, minor)) or ARCH_BY_MAJOR.get(major, "unknown")
    return name, "sm_%d%d" % (major, minor)


def _text(value):
    if isinstance(value, bytes):
        return value.decode("utf-8", "replace")
    return str(value)


def normalize_bus_id(bus_id):
    """NVML and nvidia-smi both print 00000000:18:00.0; lspci prints 0000:18:00.0. Compare on the
    last 12 characters, lower case (domain:bus:device.function with a 4-digit domain)."""
    text = _text(bus_id).strip().lower()
    if text.count(":") == 2:
        domain, rest = text.split(":", 1)
        text = "%04x:%s" % (int(domain, 16), rest)
    return text


# The header line of plain `nvidia-smi`, e.g.
# "| NVIDIA-SMI 580.105.08             Driver Version: 580.105.08     CUDA Version: 13.0     |"
_SMI_BANNER_RE = re.compile(r"Driver Version:\s*([0-9]+(?:\.[0-9]+)+)\s+CUDA Version:\s*([0-9]+\.[0-9]+)")


def parse_nvidia_smi_banner(text):
    """(driver_version, cuda_version) from plain `nvidia-smi` output, or None (e.g. "NVIDIA-SMI has failed ...")."""
    match = _SMI_BANNER_RE.search(text or "")
    return (match.group(1), match.group(2)) if match else None


def cuda_version_text(value):
    """nvmlSystemGetCudaDriverVersion returns e.g. 12080 -> '12.8'."""
    value = int(value)
    return "%d.%d" % (value // 1000, (value % 1000) // 10)


def _call(errors, where, func, *args):
    """Call an NVML getter; a NotSupported/other NVML error becomes None plus a note in ``errors``."""
    try:
        return func(*args)
    except Exception as exc:  # NVMLError subclasses; fake errors in tests
        errors.append("%s: %s" % (where, exc))
        return None


def _nvlinks(nvml, handle, errors, index):
    """Active NVLink links of one GPU, each with the remote bus id and remote device type."""
    links = []
    max_links = getattr(nvml, "NVML_NVLINK_MAX_LINKS", NVLINK_MAX_LINKS)
    for link in range(max_links):
        try:
            state = nvml.nvmlDeviceGetNvLinkState(handle, link)
        except Exception:  # NotSupported / InvalidArgument past the last link: stop quietly
            break
        if not state:
            continue
        entry = {"link": link, "remote_bus_id": None, "remote_type": "unknown", "version": None}
        pci = _call(errors, "gpu%d nvlink%d remote pci" % (index, link), nvml.nvmlDeviceGetNvLinkRemotePciInfo, handle, link)
        if pci is not None:
            entry["remote_bus_id"] = normalize_bus_id(pci.busId)
        if hasattr(nvml, "nvmlDeviceGetNvLinkRemoteDeviceType"):
            try:
                rtype = nvml.nvmlDeviceGetNvLinkRemoteDeviceType(handle, link)
                entry["remote_type"] = {NVLINK_DEVICE_TYPE_GPU: "gpu", NVLINK_DEVICE_TYPE_SWITCH: "switch"}.get(rtype, "unknown")
            except Exception:
                pass
        if hasattr(nvml, "nvmlDeviceGetNvLinkVersion"):
            try:
                entry["version"] = int(nvml.nvmlDeviceGetNvLinkVersion(handle, link))
            except Exception:
                pass
        links.append(entry)
    return links


def _gpu(nvml, index, errors):
    handle = nvml.nvmlDeviceGetHandleByIndex(index)
    gpu = {"index": index}
    gpu["name"] = _text(nvml.nvmlDeviceGetName(handle))
    gpu["uuid"] = _text(nvml.nvmlDeviceGetUUID(handle))
    cc = _call(errors, "gpu%d compute capability" % index, nvml.nvmlDeviceGetCudaComputeCapability, handle)
    if cc is not None:
        gpu["compute_capability"] = "%d.%d" % (cc[0], cc[1])
        gpu["arch"], gpu["sm"] = arch_from_cc(cc[0], cc[1])
    else:
        gpu["compute_capability"], gpu["arch"], gpu["sm"] = None, "unknown", None
    mem = _call(errors, "gpu%d memory" % index, nvml.nvmlDeviceGetMemoryInfo, handle)
    gpu["memory_total_bytes"] = int(mem.total) if mem is not None else None
    gpu["memory_total_mib"] = int(mem.total) // (1024 * 1024) if mem is not None else None
    pci = _call(errors, "gpu%d pci" % index, nvml.nvmlDeviceGetPciInfo, handle)
    gpu["pci_bus_id"] = normalize_bus_id(pci.busId) if pci is not None else None
    gpu["pci_device_id"] = ("%08x" % int(pci.pciDeviceId)) if pci is not None and hasattr(pci, "pciDeviceId") else None
    for key, func in (("pcie_gen_current", "nvmlDeviceGetCurrPcieLinkGeneration"),
                      ("pcie_gen_max", "nvmlDeviceGetMaxPcieLinkGeneration"),
                      ("pcie_width_current", "nvmlDeviceGetCurrPcieLinkWidth"),
                      ("pcie_width_max", "nvmlDeviceGetMaxPcieLinkWidth")):
        value = _call(errors, "gpu%d %s" % (index, key), getattr(nvml, func), handle)
        gpu[key] = int(value) if value is not None else None
    pm = _call(errors, "gpu%d persistence" % index, nvml.nvmlDeviceGetPersistenceMode, handle)
    gpu["persistence_mode"] = None if pm is None else bool(pm)
    limit = _call(errors, "gpu%d power limit" % index, nvml.nvmlDeviceGetPowerManagementLimit, handle)
    gpu["power_limit_w"] = None if limit is None else round(int(limit) / 1000.0, 2)
    vmode = _call(errors, "gpu%d virtualization" % index, nvml.nvmlDeviceGetVirtualizationMode, handle)
    gpu["virtualization_mode"] = VIRT_MODES.get(vmode, "unknown") if vmode is not None else None
    gpu["nvlinks"] = _nvlinks(nvml, handle, errors, index)
    gpu["nvlink_count"] = len(gpu["nvlinks"])
    return handle, gpu


def _pair_nvlinks(gpu_a, gpu_b):
    """NVLink links between two GPUs: direct links (remote bus id = the other GPU) plus, where both
    reach NVSwitches, the smaller of their switch link counts (what nvidia-smi topo -m shows as NV#)."""
    direct = sum(1 for link in gpu_a["nvlinks"] if link["remote_bus_id"] == gpu_b["pci_bus_id"])
    sw_a = sum(1 for link in gpu_a["nvlinks"] if link["remote_type"] == "switch")
    sw_b = sum(1 for link in gpu_b["nvlinks"] if link["remote_type"] == "switch")
    return direct + (min(sw_a, sw_b) if sw_a and sw_b else 0)


def _mark_switch_links(gpus):
    """Links whose remote bus id is none of the GPUs and whose type NVML did not report are
    switch links (older drivers lack nvmlDeviceGetNvLinkRemoteDeviceType)."""
    gpu_ids = set(g["pci_bus_id"] for g in gpus)
    for gpu in gpus:
        for link in gpu["nvlinks"]:
            if link["remote_type"] == "unknown" and link["remote_bus_id"] and link["remote_bus_id"] not in gpu_ids:
                link["remote_type"] = "switch"
            elif link["remote_type"] == "unknown" and link["remote_bus_id"] in gpu_ids:
                link["remote_type"] = "gpu"


def read_hypervisor(root="/"):
    """Host-side virtualization hints: the cpuinfo 'hypervisor' flag and the DMI product/vendor."""
    info = {"hypervisor_flag": False, "dmi_product": None, "dmi_vendor": None}
    try:
        with open(os.path.join(root, "proc/cpuinfo")) as fh:
            for line in fh:
                if line.startswith("flags") and " hypervisor" in line:
                    info["hypervisor_flag"] = True
                    break
    except OSError:
        pass
    for key, name in (("dmi_product", "product_name"), ("dmi_vendor", "sys_vendor")):
        try:
            with open(os.path.join(root, "sys/class/dmi/id", name)) as fh:
                info[key] = fh.read().strip() or None
        except OSError:
            pass
    return info


def classify_virtualization(gpus, host):
    """One word for the whole box: 'bare_metal', 'passthrough' (VM with GPUs by VFIO), 'vgpu', 'vm'."""
    modes = set(g.get("virtualization_mode") for g in gpus)
    if "vgpu" in modes:
        return "vgpu"
    if "passthrough" in modes:
        return "passthrough"
    if host.get("hypervisor_flag"):
        return "passthrough" if gpus else "vm"
    return "bare_metal"


def empty_facts(reason):
    return {"gpu_count": 0, "reason": reason, "gpus": [], "driver_version": None, "cuda_version": None,
            "driver_source": None,
            "nvml_version": None, "p2p": {}, "topology": [], "nvswitch": False, "nvlink": False,
            "virtualization": None, "arch": None, "archs": [], "errors": []}


def collect(nvml, host=None):
    """Return the facts dict. Raises whatever nvmlInit raises (the caller turns it into a reason)."""
    errors = []
    nvml.nvmlInit()
    try:
        count = int(nvml.nvmlDeviceGetCount())
        if count == 0:
            facts = empty_facts("NVML reports no GPU")
            facts["driver_version"] = _text(nvml.nvmlSystemGetDriverVersion())
            cuda = _call(facts["errors"], "cuda driver version", nvml.nvmlSystemGetCudaDriverVersion)
            facts["cuda_version"] = cuda_version_text(cuda) if cuda is not None else None
            facts["driver_source"] = "nvml"
            return facts
        handles = []
        gpus = []
        for index in range(count):
            handle, gpu = _gpu(nvml, index, errors)
            handles.append(handle)
            gpus.append(gpu)
        _mark_switch_links(gpus)
        for gpu in gpus:
            gpu["nvswitch_links"] = sum(1 for link in gpu["nvlinks"] if link["remote_type"] == "switch")
        p2p = {cap: [] for cap in P2P_CAPS}
        topology = []
        nvlink_pairs = []
        for i in range(count):
            row_topo = []
            row_nv = []
            for cap in P2P_CAPS:
                p2p[cap].append([])
            for j in range(count):
                if i == j:
                    row_topo.append("X")
                    row_nv.append(0)
                    for cap in P2P_CAPS:
                        p2p[cap][i].append("X")
                    continue
                links = _pair_nvlinks(gpus[i], gpus[j])
                row_nv.append(links)
                if links:
                    row_topo.append("NV%d" % links)
                else:
                    level = _call(errors, "topology %d-%d" % (i, j), nvml.nvmlDeviceGetTopologyCommonAncestor, handles[i], handles[j])
                    row_topo.append(TOPOLOGY_LEVELS.get(level, "UNKNOWN") if level is not None else "UNKNOWN")
                for cap, cap_index in P2P_CAPS.items():
                    status = _call(errors, "p2p %s %d-%d" % (cap, i, j), nvml.nvmlDeviceGetP2PStatus, handles[i], handles[j], cap_index)
                    p2p[cap][i].append(P2P_STATUS.get(status, "U") if status is not None else "U")
            topology.append(row_topo)
            nvlink_pairs.append(row_nv)
        host = host if host is not None else {}
        archs = sorted(set(g["arch"] for g in gpus))
        facts = {
            "gpu_count": count,
            "reason": None,
            "driver_version": _text(nvml.nvmlSystemGetDriverVersion()),
            "cuda_version": None,
            "driver_source": "nvml",
            "nvml_version": None,
            "gpus": gpus,
            "p2p": p2p,
            "topology": topology,
            "nvlink_pairs": nvlink_pairs,
            "nvlink": any(g["nvlink_count"] for g in gpus),
            "nvswitch": any(g["nvswitch_links"] for g in gpus),
            "host": host,
            "virtualization": classify_virtualization(gpus, host),
            "archs": archs,
            "arch": archs[0] if len(archs) == 1 else ("mixed" if archs else None),
            "errors": errors,
        }
        cuda = _call(errors, "cuda driver version", nvml.nvmlSystemGetCudaDriverVersion)
        facts["cuda_version"] = cuda_version_text(cuda) if cuda is not None else None
        if hasattr(nvml, "nvmlSystemGetNVMLVersion"):
            facts["nvml_version"] = _call(errors, "nvml version", lambda: _text(nvml.nvmlSystemGetNVMLVersion()))
        facts["summary"] = summarize(facts)
        return facts
    finally:
        try:
            nvml.nvmlShutdown()
        except Exception:
            pass


def summarize(facts):
    """Derived booleans the nccl role and the link probe use."""
    count = facts["gpu_count"]
    p2p_ok_all = True
    worst = "X"
    for i in range(count):
        for j in range(count):
            if i == j:
                continue
            if facts["p2p"]["read"][i][j] != "OK" or facts["p2p"]["write"][i][j] != "OK":
                p2p_ok_all = False
            level = facts["topology"][i][j]
            level = "NV" if level.startswith("NV") else level
            if TOPOLOGY_RANK.get(level, 7) > TOPOLOGY_RANK.get(worst, 7) or level not in TOPOLOGY_RANK:
                worst = level
    return {
        "p2p_all_ok": p2p_ok_all if count > 1 else None,
        "worst_topology": worst if count > 1 else None,
        "nvlink_all_pairs": (all(facts["nvlink_pairs"][i][j] > 0 for i in range(count) for j in range(count) if i != j)
                             if count > 1 else False),
    }

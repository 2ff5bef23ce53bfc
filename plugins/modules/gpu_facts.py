#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: gpuhost.sglang contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import (absolute_import, division, print_function)
__metaclass__ = type

DOCUMENTATION = r"""
---
module: gpu_facts
short_description: NVIDIA GPU facts from NVML (per GPU, P2P matrix, topology, virtualization)
version_added: "0.1.0"
description:
  - Reads NVML through C(pynvml) (the C(nvidia-ml-py) package) and returns per-GPU facts (name, UUID, compute
    capability and architecture name, memory, PCIe generation and width current and max, NVLink links,
    persistence mode, power limit, virtualization mode), the driver and CUDA versions, the NVML P2P status
    matrices (read, write, nvlink, atomics), the topology matrix (C(nvidia-smi topo -m) legend) and the
    virtualization of the box.
  - With no C(pynvml), no driver or no GPU it returns RV(gpu_count=0) and a C(reason), and fails only when
    O(require_gpus=true).
  - Where NVML cannot be read through C(pynvml), the header of plain C(nvidia-smi) (when it is installed and
    answers) still gives RV(driver_version) and RV(cuda_version), with RV(driver_source=nvidia-smi); the serving
    role checks the engine's CUDA against them.
  - The facts are also set as the C(gpuhost_gpu) host fact.
author:
  - gpuhost.sglang contributors (@gpuhost)
requirements:
  - nvidia-ml-py (pynvml) on the target, only where GPUs are expected
options:
  require_gpus:
    description:
      - Fail when no GPU can be read (no C(pynvml), no driver, or zero GPUs).
    type: bool
    default: false
  min_gpus:
    description:
      - With O(require_gpus=true), fail when fewer GPUs than this are found.
    type: int
    default: 1
  pci_arch_table:
    description:
      - PCI device-ID ranges to architecture names, used to name the architecture of NVIDIA GPUs found on
        the PCI bus without a driver (C(pci_gpus)). Each entry has hex C(start), C(end) and C(arch).
      - Empty (the default, and what the roles pass) uses the collection's own table of NVIDIA device IDs with their
        sources (C(plugins/module_utils/gpu/pci_arch.py)); a non-empty list replaces it.
    type: list
    elements: dict
    default: []
  facts:
    description:
      - Use these facts (a previous result of this module) instead of reading NVML, e.g. to plan the NCCL settings of
        a box from recorded facts. PCI scanning still reads O(sysfs_root).
    type: dict
  nccl_overrides:
    description:
      - NCCL variables to set regardless of the derived ones (name -> value); they appear in C(nccl) with reason
        "set explicitly".
    type: dict
    default: {}
  health:
    description:
      - "Also read the GPU health (RV(health)): PCIe link now and max, clock event reasons, thermal and power
        violation time, XID errors, ECC counts, retired pages and remapped rows pending, persistence mode."
    type: bool
    default: true
  kernel_log:
    description:
      - "Where XID errors are read (C(/dev/kmsg), readable by root; C(dmesg) is tried when it cannot be opened).
        When neither can be read, NVML's XID event set is used, which only sees events from the read on."
    type: path
    default: /dev/kmsg
  link_probe:
    description:
      - A registered C(gpuhost.sglang.gpu_link_probe) result; its P2P state (ok or the slow pairs) becomes part of
        RV(health) on multi-GPU hosts.
      - It also decides the NCCL P2P level (RV(nccl_p2p)) - on a virtualized host (VFIO, vGPU) P2P is widened only to
        the widest topology level whose measured pairs all passed, never on NVML's word alone; on bare metal and in
        LXC it caps the level NVML allows.
    type: dict
  sysfs_root:
    description:
      - Root under which C(sys/bus/pci/devices) and C(proc/cpuinfo) are read (tests point it at a fake tree).
    type: path
    default: /
  gpu_arch:
    description:
      - The architecture override (the serving role's C(sglang_gpu_arch)) for RV(gpu_arch_resolution) - C(auto) to
        detect (NVML, then the PCI device-ID floor), C("") for no GPU profile, or a compute capability (C("12.0")) or
        sm value (C(sm_120)).
    type: str
    default: auto
  require_arch:
    description:
      - Fail (before anything else reads the facts) when the PCI bus shows NVIDIA GPUs and no architecture can be
        derived, naming the devices and the override C(sglang_gpu_arch).
    type: bool
    default: false
notes:
  - Supports check mode; it changes nothing.
extends_documentation_fragment:
  - ansible.builtin.action_common_attributes
  - gpuhost.sglang.attributes.check_mode_full
"""

EXAMPLES = r"""
- name: Read GPU facts (no failure on a box without GPUs)
  gpuhost.sglang.gpu_facts:

- name: Require eight GPUs
  gpuhost.sglang.gpu_facts:
    require_gpus: true
    min_gpus: 8

- name: Show the topology matrix
  ansible.builtin.debug:
    var: gpuhost_gpu.topology
"""

RETURN = r"""
gpu_count:
  description: Number of GPUs NVML reports; 0 when NVML or a GPU is missing.
  returned: always
  type: int
  sample: 8
reason:
  description: Why RV(gpu_count) is 0 (missing library, driver not loaded, ...); null when GPUs were read.
  returned: always
  type: str
  sample: python module pynvml (nvidia-ml-py) is not installed
driver_version:
  description: NVIDIA driver version.
  returned: always
  type: str
  sample: 570.124.06
cuda_version:
  description: Highest CUDA version the driver supports (NVML nvmlSystemGetCudaDriverVersion, as the C(nvidia-smi)
    header prints it); null when neither NVML nor C(nvidia-smi) answers.
  returned: always
  type: str
  sample: "13.0"
driver_source:
  description: Where RV(driver_version) and RV(cuda_version) came from - C(nvml), C(nvidia-smi) (its header, when
    C(pynvml) is missing or NVML cannot be initialised through it) or null.
  returned: always
  type: str
  sample: nvml
nvml_version:
  description: NVML library version.
  returned: always
  type: str
gpus:
  description: One entry per GPU.
  returned: always
  type: list
  elements: dict
  sample:
    - index: 0
      name: NVIDIA RTX PRO 6000 Blackwell Server Edition
      uuid: GPU-0000
      compute_capability: "12.0"
      arch: Blackwell
      sm: sm_120
      memory_total_mib: 97887
      pci_bus_id: "0000:18:00.0"
      pcie_gen_current: 5
      pcie_gen_max: 5
      pcie_width_current: 16
      pcie_width_max: 16
      persistence_mode: true
      power_limit_w: 600.0
      virtualization_mode: none
      nvlink_count: 0
      nvswitch_links: 0
      nvlinks: []
p2p:
  description: NVML P2P status per capability (read, write, nvlink, atomics), an N x N matrix in the
    C(nvidia-smi topo -p2p) legend (OK, CNS, GNS, TNS, DR, NS, U; X on the diagonal).
  returned: always
  type: dict
topology:
  description: N x N matrix in the C(nvidia-smi topo -m) legend (X, NV#, PIX, PXB, PHB, NODE, SYS).
  returned: always
  type: list
  elements: list
nvlink_pairs:
  description: N x N matrix of NVLink link counts between GPUs.
  returned: when GPUs were read
  type: list
  elements: list
nvlink:
  description: Whether any GPU has an active NVLink.
  returned: always
  type: bool
nvswitch:
  description: Whether any NVLink ends at an NVSwitch (fabric manager needed).
  returned: always
  type: bool
virtualization:
  description: C(bare_metal), C(passthrough), C(vgpu) or C(vm); null without GPUs.
  returned: always
  type: str
arch:
  description: Architecture name of the GPUs (C(mixed) when they differ).
  returned: always
  type: str
  sample: Blackwell
archs:
  description: Distinct architecture names.
  returned: always
  type: list
  elements: str
summary:
  description: Derived flags (p2p_all_ok, worst_topology, nvlink_all_pairs).
  returned: when GPUs were read
  type: dict
pci_gpus:
  description: NVIDIA display/3D functions on the PCI bus (read from sysfs, no driver needed) with the architecture
    from O(pci_arch_table) and the bound kernel driver (nvidia, nouveau, vfio-pci or null).
  returned: always
  type: list
  elements: dict
  sample:
    - bus_id: "0000:18:00.0"
      vendor_id: 10de
      device_id: 2bb5
      arch: Blackwell
      driver: null
pci_nvswitch_count:
  description: NVSwitch chips on the PCI bus (vendor 10de, class 0680), visible without a driver.
  returned: always
  type: int
pci_arch:
  description: Architecture of the PCI GPUs (C(mixed) when they differ, null when there are none).
  returned: always
  type: str
nccl:
  description: NCCL settings derived from the facts (and InfiniBand presence), each with the reason; the nccl role
    renders them into /etc/nccl.conf and the serving unit's environment file.
  returned: always
  type: list
  elements: dict
  sample:
    - name: NCCL_IB_DISABLE
      value: "1"
      reason: "no InfiniBand/RoCE device under /sys/class/infiniband: skip the IB transport probe"
pci_compute_capability:
  description: Compute capability of the PCI GPUs from the built-in device-ID table (plugins/module_utils/gpu/pci_arch.py
    C(PCI_GPU_TABLE)), C(mixed) when they differ, null when unknown or none; needs no driver and no pynvml.
  returned: always
  type: str
  sample: "12.0"
gpu_arch_resolution:
  description: The architecture the serving profile, the toolchain proof and NCCL are for
    (plugins/module_utils/gpu/gpu_arch.py) - C(compute_capability), C(sm), C(source) (override, nvml, pci or none),
    C(evidence), and C(error) when it cannot be derived.
  returned: always
  type: dict
  sample: {compute_capability: "12.0", sm: sm_120, source: pci, evidence: "PCI: 8 NVIDIA GPU(s) 10de:2bb5 -> compute capability 12.0"}
nccl_p2p:
  description: The P2P decision behind RV(nccl) with its evidence (C(setting), C(source) nvml, gpu_link_probe, nccl default
    or none, C(evidence)); a virtualized host is widened only on a passing O(link_probe).
  returned: always
  type: dict
ib_devices:
  description: InfiniBand/RoCE devices (names under /sys/class/infiniband).
  returned: always
  type: list
  elements: str
host:
  description: Host-side virtualization hints (hypervisor cpu flag, DMI product and vendor).
  returned: when GPUs were read
  type: dict
health:
  description:
    - GPU health (plugins/module_utils/gpu/health.py; docs/monitoring.md lists every field with its NVML call).
      C(state) is C(ok), C(degraded) (C(problems) says why) or C(unknown) (C(reason)); per GPU C(pcie_gen_current),
      C(pcie_gen_max), C(pcie_width_current), C(pcie_width_max), C(clock_event_mask), C(clock_events),
      C(violation_ns) (power, thermal), C(ecc), C(retired_pages_pending), C(remapped_rows), C(persistence_mode),
      C(xids), C(problems); C(xid_source) (kernel_log or nvml_events); C(p2p) from O(link_probe).
  returned: when O(health=true)
  type: dict
  sample:
    state: ok
    problems: []
    xid_source: kernel_log
    gpus:
      - index: 0
        pcie_gen_current: 5
        pcie_gen_max: 5
        pcie_width_current: 16
        pcie_width_max: 16
        clock_event_mask: "0x1"
        clock_events: [gpu_idle]
        persistence_mode: true
        xids: []
        problems: []
errors:
  description: NVML getters that failed (NotSupported and the like); the field is null in the result.
  returned: always
  type: list
  elements: str
"""

import traceback

from ansible.module_utils.basic import AnsibleModule, missing_required_lib

from ansible_collections.gpuhost.sglang.plugins.module_utils.gpu import nccl as gpu_nccl
from ansible_collections.gpuhost.sglang.plugins.module_utils.gpu import pci_arch as gpu_pci_arch
from ansible_collections.gpuhost.sglang.plugins.module_utils.gpu import nvml_facts
from ansible_collections.gpuhost.sglang.plugins.module_utils.gpu import health as gpu_health
from ansible_collections.gpuhost.sglang.plugins.module_utils.gpu import gpu_arch as gpu_arch_mod

try:
    import pynvml
    HAS_PYNVML = True
    PYNVML_IMPORT_ERROR = None
except ImportError:
    pynvml = None
    HAS_PYNVML = False
    PYNVML_IMPORT_ERROR = traceback.format_exc()


RESULT_KEYS = ("changed", "failed", "msg", "invocation", "ansible_facts", "skipped", "warnings", "deprecations")


def gather(nvml, sysfs_root="/", pci_table=None, given=None, nccl_overrides=None, smi=None, health=None, link_probe=None,
           gpu_arch="auto"):
    """Facts dict; a missing library or driver yields gpu_count 0 with the reason. PCI GPUs are always listed.
    ``smi()`` -> (rc, stdout, stderr) of plain `nvidia-smi`: where NVML cannot be read through pynvml, its header
    still gives the driver version and the CUDA version the driver supports. ``health``: None (not read) or
    dict(kernel_log=(lines, why), link_probe=...) for gpu_health.read."""
    if given:
        # a registered result also carries changed/failed/invocation/ansible_facts: keep only the facts
        facts = dict((k, v) for k, v in given.items() if k not in RESULT_KEYS and not k.startswith("_ansible"))
    elif nvml is None:
        facts = nvml_facts.empty_facts("python module pynvml (nvidia-ml-py) is not installed")
    else:
        try:
            facts = nvml_facts.collect(nvml, host=nvml_facts.read_hypervisor(sysfs_root))
        except Exception as exc:  # NVMLError_LibraryNotFound, NVMLError_DriverNotLoaded, ...
            facts = nvml_facts.empty_facts("NVML could not be initialised: %s" % exc)
    if not given and facts["driver_version"] is None and smi is not None:
        rc, out, err = smi()
        banner = nvml_facts.parse_nvidia_smi_banner(out) if rc == 0 else None
        if banner:
            facts["driver_version"], facts["cuda_version"] = banner
            facts["driver_source"] = "nvidia-smi"
    if health is not None and not given:
        facts["health"] = gpu_health.read_safely(nvml, **health)
    facts["pci_gpus"] = gpu_pci_arch.scan(sysfs_root, pci_table or [])
    facts["pci_nvswitch_count"] = len(gpu_pci_arch.scan(sysfs_root, [], kind="nvswitch"))
    archs = sorted(set(g["arch"] for g in facts["pci_gpus"]))
    facts["pci_arch"] = archs[0] if len(archs) == 1 else ("mixed" if archs else None)
    ccs = sorted(set(g["compute_capability"] or "unknown" for g in facts["pci_gpus"]))
    facts["pci_compute_capability"] = (ccs[0] if ccs[0] != "unknown" else None) if len(ccs) == 1 else ("mixed" if ccs else None)
    try:
        facts["gpu_arch_resolution"] = gpu_arch_mod.resolve(facts, gpu_arch)
        facts["gpu_arch_resolution"]["error"] = None
    except gpu_arch_mod.GpuArchUnknown as exc:
        facts["gpu_arch_resolution"] = {"compute_capability": None, "sm": None, "source": None, "evidence": None,
                                        "error": str(exc)}
    facts["ib_devices"] = gpu_nccl.ib_devices(sysfs_root)
    facts["nccl_p2p"] = gpu_nccl.p2p_decision(facts, link_probe)
    facts["nccl"] = gpu_nccl.settings(facts, facts["ib_devices"], nccl_overrides, probe=link_probe)
    return facts


def main():
    module = AnsibleModule(
        argument_spec=dict(
            require_gpus=dict(type="bool", default=False),
            min_gpus=dict(type="int", default=1),
            pci_arch_table=dict(type="list", elements="dict", default=[]),
            sysfs_root=dict(type="path", default="/"),
            facts=dict(type="dict"),
            nccl_overrides=dict(type="dict", default={}),
            health=dict(type="bool", default=True),
            kernel_log=dict(type="path", default="/dev/kmsg"),
            link_probe=dict(type="dict"),
            gpu_arch=dict(type="str", default="auto"),
            require_arch=dict(type="bool", default=False),
        ),
        supports_check_mode=True,
    )
    if module.params["min_gpus"] < 1:
        module.fail_json(msg="min_gpus must be >= 1, got %d" % module.params["min_gpus"])
    try:
        gpu_pci_arch.validate_table(module.params["pci_arch_table"])
    except ValueError as exc:
        module.fail_json(msg=str(exc))
    if module.params["facts"] and not isinstance(module.params["facts"].get("gpu_count"), int):
        module.fail_json(msg="facts must be a gpu_facts result with an integer gpu_count")
    smi_path = module.get_bin_path("nvidia-smi")
    smi = (lambda: module.run_command([smi_path])) if smi_path else None
    health = None
    if module.params["health"] and not module.params["facts"]:
        health = {"kernel_log": gpu_health.read_kernel_log(module.params["kernel_log"], run=module.run_command),
                  "link_probe": module.params["link_probe"]}
    try:
        facts = gather(pynvml if HAS_PYNVML else None, module.params["sysfs_root"], module.params["pci_arch_table"],
                       module.params["facts"], module.params["nccl_overrides"], smi=smi, health=health,
                       link_probe=module.params["link_probe"], gpu_arch=module.params["gpu_arch"])
    except ValueError as exc:
        module.fail_json(msg=str(exc))
    if module.params["require_arch"] and facts["gpu_arch_resolution"]["error"]:
        module.fail_json(msg=facts["gpu_arch_resolution"]["error"], **facts)
    if module.params["require_gpus"]:
        if not HAS_PYNVML and not module.params["facts"]:
            module.fail_json(msg=missing_required_lib("nvidia-ml-py") + " (require_gpus is true)",
                             exception=PYNVML_IMPORT_ERROR, **facts)
        if facts["gpu_count"] < module.params["min_gpus"]:
            module.fail_json(msg="require_gpus: expected at least %d GPU(s), found %d (%s)"
                             % (module.params["min_gpus"], facts["gpu_count"], facts["reason"] or "fewer GPUs than min_gpus"),
                             **facts)
    module.exit_json(changed=False, ansible_facts={"gpuhost_gpu": facts}, **facts)


if __name__ == "__main__":
    main()

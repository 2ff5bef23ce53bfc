#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: gpuhost.sglang contributors
# Apache License 2.0 (see LICENSE)

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
  - With no C(pynvml), no driver or no GPU it returns O(gpu_count=0) and a C(reason), and fails only when
    O(require_gpus=true).
  - The facts are also set as the C(gpuhost_gpu) host fact.
author:
  - gpuhost.sglang contributors
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
notes:
  - Supports check mode; it changes nothing.
attributes:
  check_mode:
    support: full
  diff_mode:
    support: none
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
  description: Why O(gpu_count) is 0 (missing library, driver not loaded, ...); null when GPUs were read.
  returned: always
  type: str
  sample: python module pynvml (nvidia-ml-py) is not installed
driver_version:
  description: NVIDIA driver version.
  returned: always
  type: str
  sample: 570.124.06
cuda_version:
  description: Highest CUDA version the driver supports (as the C(nvidia-smi) header prints it).
  returned: always
  type: str
  sample: "12.8"
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
host:
  description: Host-side virtualization hints (hypervisor cpu flag, DMI product and vendor).
  returned: when GPUs were read
  type: dict
errors:
  description: NVML getters that failed (NotSupported and the like); the field is null in the result.
  returned: always
  type: list
  elements: str
"""

import traceback

from ansible.module_utils.basic import AnsibleModule, missing_required_lib

from ansible_collections.gpuhost.sglang.plugins.module_utils import nvml_facts

try:
    import pynvml
    HAS_PYNVML = True
    PYNVML_IMPORT_ERROR = None
except ImportError:
    pynvml = None
    HAS_PYNVML = False
    PYNVML_IMPORT_ERROR = traceback.format_exc()


def gather(nvml):
    """Facts dict; a missing library or driver yields gpu_count 0 with the reason."""
    if nvml is None:
        return nvml_facts.empty_facts("python module pynvml (nvidia-ml-py) is not installed")
    try:
        return nvml_facts.collect(nvml, host=nvml_facts.read_hypervisor("/"))
    except Exception as exc:  # NVMLError_LibraryNotFound, NVMLError_DriverNotLoaded, ...
        return nvml_facts.empty_facts("NVML could not be initialised: %s" % exc)


def main():
    module = AnsibleModule(
        argument_spec=dict(
            require_gpus=dict(type="bool", default=False),
            min_gpus=dict(type="int", default=1),
        ),
        supports_check_mode=True,
    )
    if module.params["min_gpus"] < 1:
        module.fail_json(msg="min_gpus must be >= 1, got %d" % module.params["min_gpus"])
    facts = gather(pynvml if HAS_PYNVML else None)
    if module.params["require_gpus"]:
        if not HAS_PYNVML:
            module.fail_json(msg=missing_required_lib("nvidia-ml-py") + " (require_gpus is true)",
                             exception=PYNVML_IMPORT_ERROR, **facts)
        if facts["gpu_count"] < module.params["min_gpus"]:
            module.fail_json(msg="require_gpus: expected at least %d GPU(s), found %d (%s)"
                             % (module.params["min_gpus"], facts["gpu_count"], facts["reason"] or "fewer GPUs than min_gpus"),
                             **facts)
    module.exit_json(changed=False, ansible_facts={"gpuhost_gpu": facts}, **facts)


if __name__ == "__main__":
    main()

#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: gpuhost.sglang contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import (absolute_import, division, print_function)
__metaclass__ = type

DOCUMENTATION = r"""
---
module: gpu_link_probe
short_description: Measure GPU P2P copy bandwidth/latency and NCCL all-reduce bus bandwidth, fail on slow links
version_added: "0.1.0"
description:
  - Measures the copy bandwidth and latency of every ordered GPU pair (torch C(copy_) between devices, which
    is C(cudaMemcpyPeer) when peer access is possible) and the all-reduce bus bandwidth over a size sweep
    with C(torch.distributed) and NCCL, one process per GPU (nccl-tests formula busbw = algbw * 2(n-1)/n).
  - Compares each figure with a threshold, absolute or relative to an expectation derived from the GPU facts
    (NVLink links x per-link rate of the architecture, or PCIe generation x width, halved where NVML says P2P
    is not supported). A pair that misses its threshold fails the task, and the message lists the slow pairs
    as a table. This is what catches a GPU path throttled by a virtualized (VFIO/IOMMU) PCIe route.
  - A hung P2P or NCCL path is killed after O(timeout) seconds and reported as a failure.
author:
  - gpuhost.sglang contributors (@gpuhost)
requirements:
  - torch with CUDA (and NCCL) on the target
  - nvidia-ml-py (pynvml) on the target when O(facts) is not given
options:
  facts:
    description:
      - Output of M(gpuhost.sglang.gpu_facts) (for example C(gpuhost_gpu)). Read with NVML when omitted.
    type: dict
  devices:
    description:
      - GPU indices to probe; all GPUs when omitted. At least two.
    type: list
    elements: int
  measure:
    description:
      - Which measurements to run.
    type: list
    elements: str
    choices: [p2p, allreduce]
    default: [p2p, allreduce]
  p2p_size_mb:
    description: Size of one P2P copy in MiB.
    type: int
    default: 256
  p2p_iters:
    description: Timed copies per pair.
    type: int
    default: 20
  latency_iters:
    description: Timed 4-byte copies per pair (median reported; includes launch and synchronize).
    type: int
    default: 200
  allreduce_sizes:
    description: All-reduce message sizes in bytes (float32 elements).
    type: list
    elements: int
    default: [1048576, 16777216, 134217728, 1073741824]
  allreduce_iters:
    description: Timed all-reduces per size.
    type: int
    default: 20
  min_p2p_gbps:
    description: Absolute floor for every pair's copy bandwidth, GB/s.
    type: float
  min_p2p_fraction:
    description: Floor for every pair as a fraction of its expected bandwidth (0 < x <= 1). Null disables.
    type: float
    default: 0.5
  min_busbw_gbps:
    description: Absolute floor for the all-reduce bus bandwidth at the largest size, GB/s.
    type: float
  min_busbw_fraction:
    description: Floor for the all-reduce bus bandwidth as a fraction of the expected value. Null disables.
    type: float
    default: 0.5
  max_latency_us:
    description: Ceiling for the per-pair small-copy latency, microseconds.
    type: float
  fail_on_slow:
    description: Fail the task when a threshold is missed (otherwise only report C(slow_pairs)).
    type: bool
    default: true
  timeout:
    description: Seconds after which a measurement is killed and reported as hung.
    type: int
    default: 600
notes:
  - Supports check mode; the probe only reads, so it runs in check mode too.
extends_documentation_fragment:
  - ansible.builtin.action_common_attributes
  - gpuhost.sglang.attributes.check_mode_full
"""

EXAMPLES = r"""
- name: Read facts
  gpuhost.sglang.gpu_facts:
    require_gpus: true

- name: Probe links relative to what the facts promise
  gpuhost.sglang.gpu_link_probe:
    facts: "{{ gpuhost_gpu }}"
    min_p2p_fraction: 0.6

- name: Absolute bars only, e.g. a PCIe box where 25 GB/s all-reduce is the measured baseline
  gpuhost.sglang.gpu_link_probe:
    facts: "{{ gpuhost_gpu }}"
    min_p2p_fraction: null
    min_busbw_fraction: null
    min_p2p_gbps: 20
    min_busbw_gbps: 20
"""

RETURN = r"""
pairs:
  description: One row per ordered pair with the measured and expected bandwidth, threshold and ratio.
  returned: when p2p is measured
  type: list
  elements: dict
  sample:
    - src: 0
      dst: 1
      path: nvlink
      bandwidth_gbps: 391.2
      expected_gbps: 382.5
      threshold_gbps: 191.25
      ratio: 1.02
      latency_us: 14.1
      reasons: []
slow_pairs:
  description: The rows of RV(pairs) that missed a threshold.
  returned: always
  type: list
  elements: dict
allreduce:
  description: All-reduce figures per size (size_bytes, time_us, algbw_gbps, busbw_gbps).
  returned: when allreduce is measured
  type: list
  elements: dict
allreduce_gate:
  description: The all-reduce point that was gated (largest size) with its threshold.
  returned: when allreduce is measured
  type: dict
expectations:
  description: Expected bandwidth per pair ("i->j") with the basis of the estimate, and the expected busbw.
  returned: always
  type: dict
table:
  description: The pair table as text.
  returned: always
  type: str
failed_thresholds:
  description: Whether any threshold was missed.
  returned: always
  type: bool
"""

import importlib.util

from ansible.module_utils.basic import AnsibleModule, missing_required_lib

from ansible_collections.gpuhost.sglang.plugins.module_utils.gpu import link_probe
from ansible_collections.gpuhost.sglang.plugins.module_utils.gpu import nvml_facts

# torch is imported only in the forked measuring processes (the module process never initialises CUDA)
HAS_TORCH = importlib.util.find_spec("torch") is not None
TORCH_IMPORT_ERROR = None if HAS_TORCH else "ImportError: No module named 'torch'"

try:
    import pynvml
    HAS_PYNVML = True
except ImportError:
    pynvml = None
    HAS_PYNVML = False


def check_fraction(module, name):
    value = module.params[name]
    if value is not None and not 0 < value <= 1:
        module.fail_json(msg="%s must be a fraction in (0, 1] or null, got %s" % (name, value))


def main():
    module = AnsibleModule(
        argument_spec=dict(
            facts=dict(type="dict"),
            devices=dict(type="list", elements="int"),
            measure=dict(type="list", elements="str", choices=["p2p", "allreduce"], default=["p2p", "allreduce"]),
            p2p_size_mb=dict(type="int", default=256),
            p2p_iters=dict(type="int", default=20),
            latency_iters=dict(type="int", default=200),
            allreduce_sizes=dict(type="list", elements="int", default=[1 << 20, 16 << 20, 128 << 20, 1 << 30]),
            allreduce_iters=dict(type="int", default=20),
            min_p2p_gbps=dict(type="float"),
            min_p2p_fraction=dict(type="float", default=0.5),
            min_busbw_gbps=dict(type="float"),
            min_busbw_fraction=dict(type="float", default=0.5),
            max_latency_us=dict(type="float"),
            fail_on_slow=dict(type="bool", default=True),
            timeout=dict(type="int", default=600),
        ),
        supports_check_mode=True,
    )
    p = module.params
    for name in ("min_p2p_fraction", "min_busbw_fraction"):
        check_fraction(module, name)
    for name in ("p2p_size_mb", "p2p_iters", "latency_iters", "allreduce_iters", "timeout"):
        if p[name] < 1:
            module.fail_json(msg="%s must be >= 1, got %d" % (name, p[name]))
    if any(size < 4 for size in p["allreduce_sizes"]):
        module.fail_json(msg="allreduce_sizes must be byte counts >= 4, got %s" % p["allreduce_sizes"])
    if not HAS_TORCH:
        module.fail_json(msg=missing_required_lib("torch"), exception=TORCH_IMPORT_ERROR)

    facts = p["facts"]
    if not facts:
        if not HAS_PYNVML:
            module.fail_json(msg="facts is not given and " + missing_required_lib("nvidia-ml-py"))
        try:
            facts = nvml_facts.collect(pynvml, host=nvml_facts.read_hypervisor("/"))
        except Exception as exc:
            module.fail_json(msg="facts is not given and NVML could not be read: %s" % exc)
    count = int(facts.get("gpu_count") or 0)
    devices = p["devices"] if p["devices"] is not None else list(range(count))
    bad = [d for d in devices if d < 0 or d >= count]
    if bad or len(devices) < 2 or len(set(devices)) != len(devices):
        module.fail_json(msg="devices must be at least two distinct GPU indices in 0..%d, got %s (gpu_count %d)"
                         % (max(count - 1, 0), devices, count))

    expect = link_probe.expectations(facts, devices)
    result = dict(changed=False, expectations={
        "pairs": dict(("%d->%d" % k, v) for k, v in expect["pairs"].items()),
        "busbw_gbps": expect["busbw_gbps"]})
    pairs, allreduce = [], []
    try:
        if "p2p" in p["measure"]:
            pairs = link_probe.measure_p2p(devices, size_bytes=p["p2p_size_mb"] << 20, iters=p["p2p_iters"],
                                           latency_iters=p["latency_iters"], timeout=p["timeout"])
        if "allreduce" in p["measure"]:
            allreduce = link_probe.measure_allreduce(devices, p["allreduce_sizes"], iters=p["allreduce_iters"],
                                                     timeout=p["timeout"])
    except Exception as exc:
        module.fail_json(msg="GPU link probe could not measure: %s" % exc, **result)
    verdict = link_probe.evaluate(pairs, allreduce, expect, min_p2p_gbps=p["min_p2p_gbps"],
                                  min_p2p_fraction=p["min_p2p_fraction"], min_busbw_gbps=p["min_busbw_gbps"],
                                  min_busbw_fraction=p["min_busbw_fraction"], max_latency_us=p["max_latency_us"])
    result.update(pairs=verdict["pairs"], slow_pairs=verdict["slow_pairs"], allreduce=allreduce,
                  allreduce_gate=verdict["allreduce_gate"], table=verdict["table"], failed_thresholds=verdict["failed"])
    if verdict["failed"] and p["fail_on_slow"]:
        module.fail_json(msg=verdict["msg"], **result)
    result["msg"] = verdict["msg"]
    module.exit_json(**result)


if __name__ == "__main__":
    main()

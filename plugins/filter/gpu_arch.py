# -*- coding: utf-8 -*-
# Copyright: gpuhost.sglang contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""gpu_arch_resolution: (gpu_facts result, sglang_gpu_arch) -> {compute_capability, sm, source, evidence, error}
(plugins/module_utils/gpu/gpu_arch.py); ``error`` names the devices and the override when NVIDIA GPUs are on the
PCI bus and no architecture can be derived, for the serving role's assert before anything restarts."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

from ansible_collections.gpuhost.sglang.plugins.plugin_utils.lazy_import import LazyModule

gpu_arch = LazyModule("ansible_collections.gpuhost.sglang.plugins.module_utils.gpu.gpu_arch")


def gpu_arch_resolution(facts, override="auto"):
    if not isinstance(facts, dict) or "pci_gpus" not in facts:
        # no gpu_facts result (a role run without the play's read): nothing was read, which is not "no GPU"
        return {"compute_capability": None, "sm": None, "source": "unread", "error": None,
                "evidence": "no gpu_facts result was given (the role reads it after the engine install)"}
    try:
        out = gpu_arch.resolve(facts, override)
    except gpu_arch.GpuArchUnknown as exc:
        return {"compute_capability": None, "sm": None, "source": None, "evidence": None, "error": str(exc)}
    out["error"] = None
    return out


class FilterModule(object):
    def filters(self):
        return {"gpu_arch_resolution": gpu_arch_resolution}

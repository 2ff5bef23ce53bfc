#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: gpuhost.sglang contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import (absolute_import, division, print_function)
__metaclass__ = type

DOCUMENTATION = r"""
---
module: serving_toolchain
short_description: Plan and prove the JIT toolchain and the CUDA driver an inference engine needs where it runs
version_added: "0.2.0"
description:
  - Reads the engine venv (its interpreter's include directory, the installed torch and the CUDA it was built for,
    from C(torch/version.py) or the torch METADATA, without importing torch) and plans what the serving environment
    needs from the engine's JIT data - a C compiler and the Python headers (Triton builds a C helper at run time),
    and either the CUDA compiler of torch's CUDA version under C(CUDA_HOME) (FlashInfer, DeepGEMM) or FlashInfer's
    precompiled cubins.
  - With O(stage=check) it proves the plan on the target, as the server would meet it - builds a trivial C extension
    with the compiler Triton would pick on the unit's PATH and imports it with the venv's interpreter, checks the
    CUDA major of C(nvcc --version) against torch's, and checks the NVIDIA driver against the CUDA torch was built
    for (minor-version floor and PTX JIT driver, from O(driver_rules)). Every failing piece is named with the
    variable that fixes it.
author:
  - gpuhost.sglang contributors (@gpuhost)
options:
  python:
    description: The engine venv's interpreter (for example C(/opt/sglang/venv/bin/python)).
    type: path
    required: true
  stage:
    description:
      - C(plan) probes the venv and returns the plan; C(check) also proves it and fails when a piece is missing.
      - C(auto) is C(check) when the plan installs no package and C(plan) otherwise (RV(checked) says which), so that a
        host that needs nothing is planned and proven in one call.
    type: str
    choices: [plan, check, auto]
    default: check
  jit:
    description: The engine's JIT data (C(c_extension), C(cuda_kernels)), from C(sglang_engines) in the role's vars.
    type: dict
    required: true
  c_mode:
    description: C(auto) follows O(jit); C(required) checks the C toolchain for any engine; C(none) skips it.
    type: str
    choices: [auto, required, none]
    default: auto
  cuda_mode:
    description:
      - C(auto) is C(nvcc) when the engine JIT-compiles CUDA kernels and torch has CUDA, else C(none).
      - C(flashinfer-cubin) uses FlashInfer's precompiled kernels instead of a CUDA compiler.
    type: str
    default: auto
  c_packages:
    description: Debian packages of the C toolchain (placeholders C({python_version}) and the CUDA ones allowed).
    type: list
    elements: str
    default: []
  cuda_packages:
    description: Debian packages of the CUDA compiler, with C({cuda_major}), C({cuda_minor}), C({cuda_version}).
    type: list
    elements: str
    default: []
  cubin_packages:
    description: Python packages of FlashInfer's precompiled kernels, with C({flashinfer_version}).
    type: list
    elements: str
    default: []
  cuda_home:
    description: C(CUDA_HOME) of the server, with C({cuda_version}) (for example C(/usr/local/cuda-{cuda_version})).
    type: str
    default: ""
  environment:
    description: The environment the unit gives the server (C(PATH), C(CC), C(CXX)); the compilers are searched there.
    type: dict
    default: {}
  driver_version:
    description: NVIDIA driver version (gpu_facts C(driver_version)); null when unknown.
    type: str
  driver_cuda_version:
    description: CUDA version the driver supports (gpu_facts C(cuda_version)); null when unknown.
    type: str
  driver_source:
    description: Where the driver facts came from (gpu_facts C(driver_source)), for the messages.
    type: str
  driver_check:
    description: Check the driver against torch's CUDA.
    type: bool
    default: true
  driver_rules:
    description: The table of C(roles/sglang/vars/cuda_compat.yml) (C(major_floor), C(minor_driver)).
    type: dict
    default: {}
  gpu_archs:
    description:
      - The GPUs' architectures (gpu_facts C(gpus[].sm), e.g. C(sm_120)). With the nvcc compiler, a small CUDA kernel
        (libcu++ and C(cuda_fp8.h) includes, as FlashInfer's kernels have) is compiled for each architecture's
        target (C(sm_90a), C(sm_120a)), linked with C(-lcuda) and the CUDA runtime, and run in O(environment) on
        each GPU of that architecture; its output is in C(kernels) of RV(plan). Empty (no GPU seen) skips the kernel.
    type: list
    elements: str
    default: []
notes:
  - Supports check mode; the checks only build in a temporary directory that is removed.
extends_documentation_fragment:
  - ansible.builtin.action_common_attributes
  - gpuhost.sglang.attributes.check_mode_full
"""

EXAMPLES = r"""
- name: Plan the JIT toolchain of the SGLang venv
  gpuhost.sglang.serving_toolchain:
    python: /opt/sglang/venv/bin/python
    stage: plan
    jit: {c_extension: true, cuda_kernels: true}
    c_packages: [gcc, g++, python3-dev]
    cuda_packages: ["cuda-nvcc-{cuda_major}-{cuda_minor}", "cuda-cudart-dev-{cuda_major}-{cuda_minor}"]
    cuda_home: /usr/local/cuda-{cuda_version}
  register: plan

- name: Prove it before any restart
  gpuhost.sglang.serving_toolchain:
    python: /opt/sglang/venv/bin/python
    jit: {c_extension: true, cuda_kernels: true}
    cuda_home: "{{ plan.cuda_home }}"
    environment: {PATH: "/opt/sglang/venv/bin:{{ plan.cuda_home }}/bin:/usr/bin:/bin"}
    driver_version: "{{ gpuhost_gpu.driver_version }}"
    driver_cuda_version: "{{ gpuhost_gpu.cuda_version }}"
    driver_rules: "{{ sglang_cuda_driver_rules }}"
"""

RETURN = r"""
torch:
  description: The venv's torch (C(version), C(cuda), C(cuda_source)).
  returned: always
  type: dict
  sample: {version: "2.14.1", cuda: "13.0", cuda_source: torch/version.py}
plan:
  description: What the serving environment needs (C(c_extension), C(cuda_compiler), C(apt_packages),
    C(pip_packages), C(cuda_home), C(cuda_version)); after the check, C(kernels) (per target C(ok) and C(output)).
  returned: always
  type: dict
cuda_home:
  description: C(CUDA_HOME) for the unit; empty when no CUDA compiler is planned.
  returned: always
  type: str
  sample: /usr/local/cuda-13.0
checked:
  description: Whether this call also proved the plan (O(stage=check), or O(stage=auto) with nothing to install).
  returned: always
  type: bool
findings:
  description: One entry per checked piece (C(piece), C(ok), C(detail), C(fix)); empty with O(stage=plan).
  returned: always
  type: list
  elements: dict
targets:
  description: The CUDA targets of O(gpu_archs) (arch-specific where NVIDIA has one); the kernel is built for each
    when the plan has the nvcc compiler.
  returned: always
  type: list
  elements: str
  sample: [sm_120a]
probe:
  description: What the venv's interpreter reported (include dir, extension suffix, distribution versions).
  returned: always
  type: dict
"""

import os
import shutil
import tempfile

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.gpuhost.sglang.plugins.module_utils.gpu import cuda_compat
from ansible_collections.gpuhost.sglang.plugins.module_utils.serving import toolchain


def main():
    module = AnsibleModule(
        argument_spec=dict(
            python=dict(type="path", required=True),
            stage=dict(type="str", choices=["plan", "check", "auto"], default="check"),
            jit=dict(type="dict", required=True),
            c_mode=dict(type="str", choices=list(toolchain.C_MODES), default="auto"),
            cuda_mode=dict(type="str", default="auto"),
            c_packages=dict(type="list", elements="str", default=[]),
            cuda_packages=dict(type="list", elements="str", default=[]),
            cubin_packages=dict(type="list", elements="str", default=[]),
            cuda_home=dict(type="str", default=""),
            environment=dict(type="dict", default={}),
            driver_version=dict(type="str"),
            driver_cuda_version=dict(type="str"),
            driver_source=dict(type="str"),
            driver_check=dict(type="bool", default=True),
            driver_rules=dict(type="dict", default={}),
            gpu_archs=dict(type="list", elements="str", default=[]),
        ),
        supports_check_mode=True,
    )
    p = module.params
    if p["cuda_mode"] not in toolchain.CUDA_MODES:
        module.fail_json(msg="cuda_mode=%r: allowed values are %s (role variable sglang_toolchain_cuda)"
                         % (p["cuda_mode"], ", ".join(toolchain.CUDA_MODES)))
    if not os.path.exists(p["python"]):
        module.fail_json(msg="the engine venv's interpreter %s does not exist (was the engine installed?)" % p["python"])
    rc, out, err = module.run_command([p["python"], "-c", toolchain.VENV_PROBE])
    if rc != 0:
        module.fail_json(msg="%s could not run the venv probe (rc %d): %s" % (p["python"], rc, (err or out).strip()[-500:]))
    try:
        probe = toolchain.parse_probe(out)
        plan = toolchain.plan(p["jit"], probe, {
            "c_mode": p["c_mode"], "cuda_mode": p["cuda_mode"], "c_packages": p["c_packages"],
            "cuda_packages": p["cuda_packages"], "cubin_packages": p["cubin_packages"], "cuda_home": p["cuda_home"]})
        if p["driver_check"]:
            cuda_compat.validate_rules(p["driver_rules"])
        targets = [t[0] for t in toolchain.cuda_targets(p["gpu_archs"])]
    except ValueError as exc:
        module.fail_json(msg=str(exc))
    torch = {"version": probe["dists"].get("torch"), "cuda": plan["cuda_version"], "cuda_source": plan["cuda_source"]}
    result = dict(changed=False, torch=torch, plan=plan, cuda_home=plan["cuda_home"], probe=probe, findings=[],
                  checked=False, targets=targets)
    # auto: the check in the same call when the plan installs nothing (a no-op deploy: one round trip, one probe)
    if p["stage"] == "plan" or (p["stage"] == "auto" and (plan["apt_packages"] or plan["pip_packages"])):
        module.exit_json(**result)
    result["checked"] = True

    environ = dict((str(k), str(v)) for k, v in p["environment"].items())
    environ.setdefault("PATH", os.environ.get("PATH", "/usr/bin:/bin"))

    def run(argv, env=None, cwd=None):
        return module.run_command(argv, environ_update=env or {}, cwd=cwd)

    findings = []
    workdir = tempfile.mkdtemp(prefix="gpuhost-jit-")
    try:
        if plan["c_extension"]:
            findings += toolchain.check_c(plan, probe, environ, workdir, run)
        findings += toolchain.check_cuda(plan, probe, run, workdir, p["gpu_archs"], environ)
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
    if p["driver_check"]:
        source = " (from %s)" % p["driver_source"] if p["driver_source"] else ""
        cudas = [("torch %s" % (torch["version"] or "?"), plan["cuda_version"])]
        if plan.get("nvcc_cuda") and plan["nvcc_cuda"] != plan["cuda_version"]:
            cudas.append(("nvcc of CUDA_HOME=%s" % plan["cuda_home"], plan["nvcc_cuda"]))
        for what, cuda in cudas:
            res = cuda_compat.check(cuda, p["driver_version"], p["driver_cuda_version"], p["driver_rules"],
                                    jit=bool(p["jit"].get("cuda_kernels") or p["jit"].get("c_extension")), what=what)
            fix = ("a driver branch that meets it on the GPU host (nvidia_driver role: nvidia_driver_branch / "
                   "nvidia_driver_arch_policy; on Proxmox the host and the container move together), or an engine "
                   "built for an older CUDA (sglang_version / sglang_pip_packages); sglang_cuda_driver_check: false "
                   "skips this check")
            if res["status"] == "unknown-cuda":
                fix = "add the row to roles/sglang/vars/cuda_compat.yml"
            findings.append(toolchain._finding("CUDA driver", res["ok"], res["msg"] + source, fix))
    result["findings"] = findings
    failed = [f for f in findings if not f["ok"]]
    if failed:
        lines = ["- %s: %s. Fix: %s" % (f["piece"], f["detail"], f["fix"]) for f in failed]
        module.fail_json(msg="JIT toolchain / CUDA driver preflight failed, nothing was restarted:\n" + "\n".join(lines),
                         **result)
    module.exit_json(**result)


if __name__ == "__main__":
    main()

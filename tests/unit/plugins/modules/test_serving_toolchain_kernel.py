# -*- coding: utf-8 -*-
# Copyright: gpuhost.sglang contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The CUDA side of the JIT proof compiles, links and runs a kernel for each GPU's architecture in the unit's
environment (not only `nvcc --version` and a header stat), against a CUDA 13.0 nvcc stand-in that fails as the real
toolchain does (tests/harness/toolchain_fake.py)."""
from __future__ import absolute_import, division, print_function

__metaclass__ = type

import os
import shutil
import sys

import pytest
import yaml

from ansible_collections.gpuhost.sglang.plugins.module_utils.serving import toolchain
from ansible_collections.gpuhost.sglang.plugins.modules import serving_toolchain
from ansible_collections.gpuhost.sglang.tests import harness
from ansible_collections.gpuhost.sglang.tests.harness import ROOT
from ansible_collections.gpuhost.sglang.tests.harness.toolchain_fake import SETTINGS, cuda_home, exe, fake_torch

with open(os.path.join(ROOT, "roles", "sglang", "vars", "cuda_compat.yml")) as fh:
    RULES = yaml.safe_load(fh)["sglang_cuda_driver_rules"]


@pytest.fixture
def box(tmp_path):
    site = fake_torch(tmp_path / "site", requires=['cuda-toolkit[cudart]==13.0.3; platform_system == "Linux"'])
    py = exe(tmp_path / "venv" / "bin" / "python", "#!/bin/sh\nPYTHONPATH=%s exec %s \"$@\"\n" % (site, sys.executable))
    return {"python": py, "cuda": cuda_home(tmp_path / "cuda-13.0"), "path": "/usr/bin:/bin"}


def args_for(box, **over):
    args = {"python": box["python"], "stage": "check", "jit": {"c_extension": False, "cuda_kernels": True},
            "c_mode": "none", "cuda_mode": "nvcc", "c_packages": SETTINGS["c_packages"],
            "cuda_packages": SETTINGS["cuda_packages"], "cuda_home": str(box["cuda"]),
            "environment": {"PATH": box["path"], "FAKE_GPU_CC": "9.0"}, "gpu_archs": ["sm_90"],
            "driver_version": "580.105.08", "driver_cuda_version": "13.0", "driver_rules": RULES}
    args.update(over)
    return args


def run(capsys, args):
    out = harness.call_module(capsys, serving_toolchain, args)
    return out.rc, out


def kernels(out):
    return dict((f["piece"], f) for f in out["findings"] if f["piece"].startswith("CUDA kernel"))


def test_targets_are_the_arch_specific_ones():
    assert toolchain.cuda_targets(["sm_120", "sm_120", "sm_90", "sm_80"]) == [
        ("sm_120a", 12, 0), ("sm_80", 8, 0), ("sm_90a", 9, 0)]
    with pytest.raises(ValueError):
        toolchain.cuda_targets(["Blackwell"])


@pytest.mark.skipif(not shutil.which("sed"), reason="the stand-in nvcc is a shell script using sed")
def test_kernel_compiled_linked_and_run_for_the_gpu(capsys, box):
    code, out = run(capsys, args_for(box))
    assert code == 0, out.get("msg")
    k = kernels(out)["CUDA kernel sm_90a"]
    assert k["ok"] and "compiled, linked (-lcuda) and ran for sm_90a" in k["detail"] and "fp8 round trip" in k["detail"]
    assert out["plan"]["kernels"][0]["target"] == "sm_90a"


def test_missing_libcuda_stub_fails_naming_the_packages(capsys, box):
    os.remove(str(box["cuda"] / "lib64" / "stubs" / "libcuda.so"))
    code, out = run(capsys, args_for(box))
    assert code == 1
    assert "cannot find -lcuda" in out["msg"] and "cuda-nvcc-13-0" in out["msg"] and "nothing was restarted" in out["msg"]


def test_missing_fp8_header_fails(capsys, box):
    os.remove(str(box["cuda"] / "include" / "cuda_fp8.h"))
    code, out = run(capsys, args_for(box))
    assert code == 1 and "fatal error: cuda_fp8.h: No such file or directory" in out["msg"]


def test_blackwell_and_no_gpu(capsys, box):
    code, out = run(capsys, args_for(box, gpu_archs=["sm_120"], environment={"PATH": box["path"], "FAKE_GPU_CC": "12.0"}))
    assert code == 0 and kernels(out)["CUDA kernel sm_120a"]["ok"], out.get("msg")
    assert out["targets"] == ["sm_120a"]
    # no GPU in the unit's environment: the kernel cannot run, and the proof says so
    code, out = run(capsys, args_for(box, environment={"PATH": box["path"]}))
    assert code == 1 and "did not run on a cc 9.0 GPU" in out["msg"] and "cuInit failed" in out["msg"]


def test_nvcc_without_the_architecture(capsys, box):
    code, out = run(capsys, args_for(box, gpu_archs=["sm_70"], environment={"PATH": box["path"], "FAKE_GPU_CC": "7.0"}))
    assert code == 1 and "Unsupported gpu architecture 'compute_70'" in out["msg"]


def test_no_gpu_seen_skips_the_kernel(capsys, box):
    code, out = run(capsys, args_for(box, gpu_archs=[]))
    assert code == 0 and kernels(out) == {}
    code, out = run(capsys, args_for(box, gpu_archs=["Blackwell"]))
    assert code == 1 and "'Blackwell' is not an sm_XY value" in out["msg"]

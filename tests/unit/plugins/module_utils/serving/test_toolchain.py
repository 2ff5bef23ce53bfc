# -*- coding: utf-8 -*-
# Copyright: gpuhost.sglang contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The JIT toolchain preflight's pieces: the venv probe (torch's CUDA without importing torch), the nvcc banner,
the C compiler search and the C-extension build Triton does, and the install plan from engine data."""
from __future__ import absolute_import, division, print_function

__metaclass__ = type

import os
import shutil
import subprocess
import sys
import sysconfig

import pytest

from ansible_collections.gpuhost.sglang.plugins.module_utils.serving import toolchain as tc

from ansible_collections.gpuhost.sglang.tests.harness.toolchain_fake import CPU_JIT, NVCC_12_8, NVCC_13_0, SETTINGS, SGLANG_JIT, exe, fake_torch

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..", "..", "..", ".."))
ENGINE_VENV_PY = os.path.join(ROOT, ".cache", "engine-venv", "bin", "python")


def probe_with(site):
    env = dict(os.environ, PYTHONPATH=str(site))
    out = subprocess.run([sys.executable, "-c", tc.VENV_PROBE], env=env, capture_output=True, text=True, check=True)
    return tc.parse_probe(out.stdout)


def test_probe_reads_torch_cuda_from_version_py_without_importing_torch(tmp_path):
    probe = probe_with(fake_torch(tmp_path / "site"))
    assert probe["dists"]["torch"] == "2.14.1"
    assert tc.torch_cuda(probe) == ("13.0", "torch/version.py")
    assert probe["python_version"] == "%d.%d" % sys.version_info[:2]
    assert probe["include"] == sysconfig.get_paths()["include"]


def test_probe_falls_back_to_the_cuda_toolkit_requirement_in_metadata(tmp_path):
    site = fake_torch(tmp_path / "site", version_py=False, requires=[
        "filelock", 'cuda-toolkit[cublas,cudart,cufft,curand,cusolver,cusparse,nvrtc]==13.0.3; platform_system == "Linux"'])
    assert tc.torch_cuda(probe_with(site)) == ("13.0", "torch METADATA cuda-toolkit==13.0.3")


def test_probe_falls_back_to_the_cuda_runtime_requirement_of_cu12_wheels(tmp_path):
    site = fake_torch(tmp_path / "site", version="2.9.0", version_py=False,
                      requires=['nvidia-cuda-runtime-cu12==12.8.90; platform_system == "Linux"'])
    assert tc.torch_cuda(probe_with(site)) == ("12.8", "torch METADATA nvidia-cuda-runtime-cu12==12.8.90")


def test_cpu_torch_has_no_cuda(tmp_path):
    probe = probe_with(fake_torch(tmp_path / "site", version="2.13.0+cpu", cuda="None"))
    assert tc.torch_cuda(probe) == (None, "torch 2.13.0+cpu was built without CUDA")


def test_no_torch_at_all(tmp_path):
    (tmp_path / "empty").mkdir()
    probe = probe_with(tmp_path / "empty")
    assert tc.torch_cuda(probe) == (None, "torch is not installed in the venv")


@pytest.mark.skipif(not os.path.exists(ENGINE_VENV_PY), reason="no .cache/engine-venv (tests/fixtures/engine-venv.sh)")
def test_the_real_cpu_engine_venv():
    out = subprocess.run([ENGINE_VENV_PY, "-c", tc.VENV_PROBE], capture_output=True, text=True, check=True)
    probe = tc.parse_probe(out.stdout)
    assert probe["dists"]["torch"] == "2.13.0+cpu"
    assert tc.torch_cuda(probe)[0] is None


@pytest.mark.parametrize("banner,version", [(NVCC_13_0, "13.0"), (NVCC_12_8, "12.8"),
                                            ("nvcc: command not found", None), ("", None)])
def test_parse_nvcc_version(banner, version):
    assert tc.parse_nvcc_version(banner) == version


def test_find_c_compiler_follows_tritons_order(tmp_path):
    """$CC, then gcc, then clang on PATH (triton python/triton/runtime/build.py)."""
    gcc = exe(tmp_path / "a" / "gcc")
    clang = exe(tmp_path / "b" / "clang")
    both = "%s:%s" % (tmp_path / "b", tmp_path / "a")
    assert tc.find_c_compiler({"CC": "/opt/cc", "PATH": both}) == "/opt/cc"
    assert tc.find_c_compiler({"PATH": both}) == gcc
    assert tc.find_c_compiler({"PATH": str(tmp_path / "b")}) == clang
    (tmp_path / "empty").mkdir()
    assert tc.find_c_compiler({"PATH": str(tmp_path / "empty")}) is None


def local_run(argv, env=None, cwd=None):
    res = subprocess.run(argv, env=env, cwd=cwd, capture_output=True, text=True, check=False)
    return res.returncode, res.stdout, res.stderr


HAVE_CC = shutil.which("gcc") and os.path.exists(os.path.join(sysconfig.get_paths()["include"], "Python.h"))


@pytest.mark.skipif(not HAVE_CC, reason="the controller has no gcc or Python headers")
def test_build_c_extension_really_builds_and_imports(tmp_path):
    probe = {"python": sys.executable, "include": sysconfig.get_paths()["include"],
             "ext_suffix": sysconfig.get_config_var("EXT_SUFFIX"), "python_version": "3.x"}
    ok, detail = tc.build_c_extension(shutil.which("gcc"), probe, str(tmp_path), local_run)
    assert ok, detail
    assert "imported" in detail


@pytest.mark.skipif(not shutil.which("gcc"), reason="the controller has no gcc")
def test_build_c_extension_without_headers_fails_with_the_compilers_words(tmp_path):
    probe = {"python": sys.executable, "include": str(tmp_path / "no-include"),
             "ext_suffix": sysconfig.get_config_var("EXT_SUFFIX"), "python_version": "3.x"}
    ok, detail = tc.build_c_extension(shutil.which("gcc"), probe, str(tmp_path), local_run)
    assert not ok and "Python.h" in detail


def test_plan_for_sglang_with_cuda_13_torch():
    probe = {"dists": {"torch": "2.14.1"}, "torch_cuda": "13.0", "torch_cuda_source": "torch/version.py"}
    plan = tc.plan(SGLANG_JIT, probe, SETTINGS)
    assert plan["c_extension"] and plan["cuda_compiler"] == "nvcc"
    assert plan["apt_packages"] == ["gcc", "g++", "python3-dev", "cuda-nvcc-13-0", "cuda-cudart-dev-13-0"]
    assert plan["pip_packages"] == [] and plan["cuda_home"] == "/usr/local/cuda-13.0"
    assert plan["cuda_version"] == "13.0"


def test_plan_for_the_cpu_engine_needs_nothing():
    probe = {"dists": {"torch": "2.13.0+cpu"}, "torch_cuda": None}
    plan = tc.plan(CPU_JIT, probe, SETTINGS)
    assert not plan["c_extension"] and plan["cuda_compiler"] == "none"
    assert plan["apt_packages"] == [] and plan["pip_packages"] == [] and plan["cuda_home"] == ""


def test_plan_forcing_the_c_toolchain_on_the_cpu_engine():
    plan = tc.plan(CPU_JIT, {"dists": {}, "torch_cuda": None}, dict(SETTINGS, c_mode="required"))
    assert plan["c_extension"] and plan["apt_packages"] == ["gcc", "g++", "python3-dev"]


def test_plan_with_flashinfer_cubins_instead_of_nvcc():
    probe = {"dists": {"torch": "2.14.1", "flashinfer-python": "0.6.13"}, "torch_cuda": "13.0"}
    plan = tc.plan(SGLANG_JIT, probe, dict(SETTINGS, cuda_mode="flashinfer-cubin"))
    assert plan["cuda_compiler"] == "flashinfer-cubin"
    assert plan["apt_packages"] == ["gcc", "g++", "python3-dev"]
    assert plan["pip_packages"] == ["flashinfer-cubin==0.6.13"]
    assert plan["cuda_home"] == ""


def test_plan_refuses_nvcc_for_a_torch_without_cuda():
    with pytest.raises(ValueError, match="sglang_toolchain_cuda=nvcc.*2.13.0\\+cpu.*without CUDA"):
        tc.plan(SGLANG_JIT, {"dists": {"torch": "2.13.0+cpu"}, "torch_cuda": None}, dict(SETTINGS, cuda_mode="nvcc"))


def test_plan_refuses_cubins_without_flashinfer():
    with pytest.raises(ValueError, match="flashinfer-python is not installed"):
        tc.plan(SGLANG_JIT, {"dists": {"torch": "2.14.1"}, "torch_cuda": "13.0"}, dict(SETTINGS, cuda_mode="flashinfer-cubin"))


def test_plan_rejects_an_unknown_placeholder():
    with pytest.raises(ValueError, match="sglang_toolchain_cuda_packages.*{cuda_patch}"):
        tc.plan(SGLANG_JIT, {"dists": {}, "torch_cuda": "13.0"}, dict(SETTINGS, cuda_packages=["cuda-nvcc-{cuda_patch}"]))


REAL_NVCC = "/usr/local/cuda-13.0/bin/nvcc"


@pytest.mark.skipif(not os.path.exists(REAL_NVCC), reason="no CUDA 13.0 toolkit on this machine")
def test_the_stand_in_banner_is_what_the_real_nvcc_prints():
    rc, out, err = local_run([REAL_NVCC, "--version"])
    assert rc == 0 and tc.parse_nvcc_version(out) == "13.0"
    assert out == NVCC_13_0


def test_the_metadata_of_the_real_torch_2_11_cu130_wheel():
    """Requires-Dist lines of torch 2.11.0+cu130 as read on the lent H200 machine (docs/gpu-stack.md)."""
    probe = {"torch_version_py": False, "dists": {"torch": "2.11.0"}, "torch_requires": [
        'cuda-toolkit[cublas,cudart,cufft,cufile,cupti,curand,cusolver,cusparse,nvjitlink,nvrtc,nvtx]==13.0.2; '
        'platform_system == "Linux"',
        'cuda-bindings<14,>=13.0.3; platform_system == "Linux"']}
    assert tc.torch_cuda(probe) == ("13.0", "torch METADATA cuda-toolkit==13.0.2")

# -*- coding: utf-8 -*-
# Copyright: gpuhost.sglang contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""serving_toolchain end to end on this machine: a venv interpreter whose torch says CUDA 13.0, a CUDA_HOME whose
nvcc prints NVIDIA's real banner, the controller's real gcc building the C extension, and driver versions as
gpu_facts reports them."""
from __future__ import absolute_import, division, print_function

__metaclass__ = type

import os
import shutil
import sys
import sysconfig

import pytest
import yaml

from ansible_collections.gpuhost.sglang.plugins.modules import serving_toolchain
from ansible_collections.gpuhost.sglang.tests import harness
from ansible_collections.gpuhost.sglang.tests.harness import ROOT
from ansible_collections.gpuhost.sglang.tests.harness.toolchain_fake import NVCC_12_8, NVCC_13_0, SETTINGS, exe, fake_torch

with open(os.path.join(ROOT, "roles", "sglang", "vars", "cuda_compat.yml")) as fh:
    RULES = yaml.safe_load(fh)["sglang_cuda_driver_rules"]

HAVE_CC = (shutil.which("gcc") and shutil.which("c++")
           and os.path.exists(os.path.join(sysconfig.get_paths()["include"], "Python.h")))
needs_cc = pytest.mark.skipif(not HAVE_CC, reason="the controller has no gcc/c++ or Python headers")


@pytest.fixture
def box(tmp_path):
    """venv python (real interpreter + fake torch 2.14.1 cu130), CUDA 13.0 home, a PATH with gcc and c++."""
    site = fake_torch(tmp_path / "site", requires=['cuda-toolkit[cudart]==13.0.3; platform_system == "Linux"'])
    py = exe(tmp_path / "venv" / "bin" / "python",
             "#!/bin/sh\nPYTHONPATH=%s exec %s \"$@\"\n" % (site, sys.executable))
    cuda = tmp_path / "cuda-13.0"
    exe(cuda / "bin" / "nvcc", "#!/bin/sh\ncat <<'EOF'\n%sEOF\n" % NVCC_13_0)
    (cuda / "include").mkdir()
    (cuda / "include" / "cuda_runtime.h").write_text("/* stand-in */\n")
    bindir = tmp_path / "bin"
    bindir.mkdir()
    for tool in ("gcc", "c++"):
        if shutil.which(tool):
            os.symlink(shutil.which(tool), str(bindir / tool))
    return {"python": py, "cuda": cuda, "path": str(bindir), "tmp": tmp_path}


def args_for(box, **over):
    args = {
        "python": box["python"], "stage": "check",
        "jit": {"c_extension": True, "cuda_kernels": True},
        "c_mode": SETTINGS["c_mode"], "cuda_mode": SETTINGS["cuda_mode"],
        "c_packages": SETTINGS["c_packages"], "cuda_packages": SETTINGS["cuda_packages"],
        "cubin_packages": SETTINGS["cubin_packages"], "cuda_home": str(box["cuda"]),
        "environment": {"PATH": box["path"]},
        "driver_version": "580.105.08", "driver_cuda_version": "13.0", "driver_source": "nvidia-smi",
        "driver_rules": RULES,
    }
    args.update(over)
    return args


def run(capsys, args):
    out = harness.call_module(capsys, serving_toolchain, args)
    return out.rc, out


@needs_cc
def test_a_complete_toolchain_and_a_580_driver_pass(capsys, box):
    code, out = run(capsys, args_for(box))
    assert code == 0 and not out.get("failed"), out.get("msg")
    assert out["torch"] == {"version": "2.14.1", "cuda": "13.0", "cuda_source": "torch/version.py"}
    pieces = {f["piece"]: f for f in out["findings"]}
    assert all(f["ok"] for f in out["findings"]), out["findings"]
    assert "imported" in pieces["C extension"]["detail"]
    assert pieces["CUDA compiler"]["detail"].startswith("%s/bin/nvcc: CUDA 13.0" % box["cuda"])
    assert out["cuda_home"] == str(box["cuda"])


@needs_cc
def test_a_570_driver_fails_naming_both_versions_and_the_fix(capsys, box):
    code, out = run(capsys, args_for(box, driver_version="570.195.03", driver_cuda_version="12.8"))
    assert code == 1 and out["failed"]
    for part in ("570.195.03", "CUDA 12.8", "torch 2.14.1", "CUDA 13.0", "580.65.06", "nothing was restarted"):
        assert part in out["msg"], part


def test_missing_compiler_headers_and_nvcc_are_all_named_with_their_variables(capsys, box, tmp_path):
    (tmp_path / "emptybin").mkdir()
    code, out = run(capsys, args_for(box, cuda_home=str(tmp_path / "no-cuda"), environment={"PATH": str(tmp_path / "emptybin")}))
    assert code == 1
    msg = out["msg"]
    assert "C compiler" in msg and "sglang_toolchain_c_packages" in msg and "gcc" in msg
    assert "nvcc" in msg and "sglang_toolchain_cuda_packages" in msg and "cuda-nvcc-13-0" in msg
    assert "CUDA_HOME" in msg and "sglang_cuda_home" in msg


def test_missing_python_headers_are_named(capsys, box, monkeypatch):
    real = serving_toolchain.toolchain.parse_probe

    def no_headers(text):
        probe = real(text)
        probe["include"] = str(box["tmp"] / "include" / "python3.11")
        return probe
    monkeypatch.setattr(serving_toolchain.toolchain, "parse_probe", no_headers)
    code, out = run(capsys, args_for(box))
    assert code == 1
    assert "Python.h" in out["msg"] and "python3-dev" in out["msg"] and "sglang_toolchain_c_packages" in out["msg"]


@needs_cc
def test_nvcc_of_another_cuda_major_fails(capsys, box):
    exe(box["cuda"] / "bin" / "nvcc", "#!/bin/sh\ncat <<'EOF'\n%sEOF\n" % NVCC_12_8)
    code, out = run(capsys, args_for(box))
    assert code == 1
    assert "CUDA 12.8" in out["msg"] and "torch 2.14.1" in out["msg"] and "13.0" in out["msg"]
    assert "sglang_toolchain_cuda_packages" in out["msg"]


def test_cpu_engine_needs_no_toolchain_and_no_driver(capsys, box, tmp_path):
    site = fake_torch(tmp_path / "cpusite", version="2.13.0+cpu", cuda="None")
    py = exe(tmp_path / "cpuvenv" / "bin" / "python", "#!/bin/sh\nPYTHONPATH=%s exec %s \"$@\"\n" % (site, sys.executable))
    (tmp_path / "emptybin").mkdir()
    code, out = run(capsys, args_for(box, python=py, jit={"c_extension": False, "cuda_kernels": False},
                                     environment={"PATH": str(tmp_path / "emptybin")},
                                     driver_version=None, driver_cuda_version=None, driver_source=None))
    assert code == 0 and not out.get("failed"), out.get("msg")
    assert [f["piece"] for f in out["findings"]] == ["CUDA driver"]
    assert "no CUDA" in out["findings"][0]["detail"]
    assert out["plan"]["apt_packages"] == [] and out["cuda_home"] == ""


def test_plan_stage_checks_nothing(capsys, box):
    code, out = run(capsys, args_for(box, stage="plan", cuda_home="/usr/local/cuda-{cuda_version}",
                                     driver_version="470.1.1"))
    assert code == 0 and out["findings"] == []
    assert out["plan"]["apt_packages"][-2:] == ["cuda-nvcc-13-0", "cuda-cudart-dev-13-0"]
    assert out["cuda_home"] == "/usr/local/cuda-13.0"


def test_auto_stage_plans_only_when_packages_are_to_install_and_proves_in_the_same_call_otherwise(capsys, box, tmp_path):
    # packages to install: the plan only (the role installs them, then calls the check)
    code, out = run(capsys, args_for(box, stage="auto", cuda_home="/usr/local/cuda-{cuda_version}", driver_version="470.1.1"))
    assert code == 0 and out["checked"] is False and out["findings"] == [] and out["plan"]["apt_packages"]
    # nothing to install (the CPU engine): planned and proven in one call, the findings of a check
    site = fake_torch(tmp_path / "cpusite", version="2.13.0+cpu", cuda="None")
    py = exe(tmp_path / "cpuvenv" / "bin" / "python", "#!/bin/sh\nPYTHONPATH=%s exec %s \"$@\"\n" % (site, sys.executable))
    code, out = run(capsys, args_for(box, stage="auto", python=py, jit={"c_extension": False, "cuda_kernels": False},
                                     driver_version=None, driver_cuda_version=None, driver_source=None))
    assert code == 0 and out["checked"] is True and [f["piece"] for f in out["findings"]] == ["CUDA driver"]


def test_a_missing_venv_is_a_clear_error(capsys, box, tmp_path):
    code, out = run(capsys, args_for(box, python=str(tmp_path / "nope" / "bin" / "python")))
    assert code == 1 and "nope/bin/python" in out["msg"] and "Traceback" not in out["msg"]


def test_bad_mode_is_a_clear_error(capsys, box):
    code, out = run(capsys, args_for(box, cuda_mode="clang"))
    assert code == 1 and "cuda_mode" in out["msg"] and "nvcc" in out["msg"]

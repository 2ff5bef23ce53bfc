# -*- coding: utf-8 -*-
# Copyright: gpuhost.sglang contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Stand-ins for the JIT toolchain tests: NVIDIA's real nvcc banners, a site-packages with torch's files laid out as
the PyPI wheels lay them out, and the role's default toolchain settings."""
from __future__ import absolute_import, division, print_function

__metaclass__ = type

# Real `nvcc --version` output (CUDA 13.0.88 from NVIDIA's Debian 12 repo; CUDA 12.8.93 as quoted in
# flashinfer-ai/flashinfer #1919).
NVCC_13_0 = """nvcc: NVIDIA (R) Cuda compiler driver
Copyright (c) 2005-2025 NVIDIA Corporation
Built on Wed_Aug_20_01:58:59_PM_PDT_2025
Cuda compilation tools, release 13.0, V13.0.88
Build cuda_13.0.r13.0/compiler.36424714_0
"""
NVCC_12_8 = """nvcc: NVIDIA (R) Cuda compiler driver
Copyright (c) 2005-2025 NVIDIA Corporation
Built on Fri_Feb_21_20:23:50_PST_2025
Cuda compilation tools, release 12.8, V12.8.93
Build cuda_12.8.r12.8/compiler.35583870_0
"""

SGLANG_JIT = {"c_extension": True, "cuda_kernels": True}
CPU_JIT = {"c_extension": False, "cuda_kernels": False}
SETTINGS = {
    "c_mode": "auto", "cuda_mode": "auto",
    "c_packages": ["gcc", "g++", "python3-dev"],
    "cuda_packages": ["cuda-nvcc-{cuda_major}-{cuda_minor}", "cuda-cudart-dev-{cuda_major}-{cuda_minor}"],
    "cubin_packages": ["flashinfer-cubin=={flashinfer_version}"],
    "cuda_home": "/usr/local/cuda-{cuda_version}",
}


def fake_torch(site, version="2.14.1", cuda="'13.0'", requires=None, version_py=True):
    """A site-packages with torch's files as the PyPI wheel lays them out (torch/version.py, dist-info METADATA)."""
    pkg = site / "torch"
    pkg.mkdir(parents=True)
    # importing this package must never happen: the probe reads version.py without importing torch
    (pkg / "__init__.py").write_text("raise RuntimeError('the probe imported torch')\n")
    if version_py:
        (pkg / "version.py").write_text(
            "from typing import Optional\n\n__all__ = ['__version__', 'debug', 'cuda', 'git_version', 'hip', 'xpu']\n"
            "__version__ = '%s'\ndebug = False\ncuda: Optional[str] = %s\ngit_version = 'abc'\n"
            "hip: Optional[str] = None\nxpu: Optional[str] = None\n" % (version, cuda))
    info = site / ("torch-%s.dist-info" % version)
    info.mkdir()
    meta = "Metadata-Version: 2.4\nName: torch\nVersion: %s\n" % version
    for req in requires or []:
        meta += "Requires-Dist: %s\n" % req
    (info / "METADATA").write_text(meta)
    return site


def exe(path, text="#!/bin/sh\nexit 0\n"):
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    path.chmod(0o755)
    return str(path)

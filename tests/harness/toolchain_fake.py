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


# A CUDA 13.0 nvcc that fails as the real one does (messages as nvcc, the preprocessor and ld print them; exit codes
# unverified beyond non-zero): an architecture it does not know ("nvcc fatal   : Unsupported gpu architecture
# 'compute_XX'"), a header missing under $CUDA_HOME/include ("fatal error: cuda_fp8.h: No such file or directory"),
# no libcuda.so in any -L directory (ld's "cannot find -lcuda"). Otherwise it writes the executable: a script standing
# in for the GPU, which is FAKE_GPU_CC ("9.0"; unset = no GPU) in the unit's environment; code built for another
# architecture fails with the CUDA runtime's text for cudaErrorNoKernelImageForDevice.
NVCC_KNOWN = ("sm_75 sm_80 sm_86 sm_87 sm_88 sm_89 sm_90 sm_90a sm_100 sm_100a sm_103 sm_103a sm_110 sm_110a sm_120 "
              "sm_120a sm_121 sm_121a")
_BINARY = r'''[ -n "$FAKE_GPU_CC" ] || { echo "cuInit failed: no usable NVIDIA driver or device" >&2; exit 2; }
[ "$FAKE_GPU_CC" = "$1.$2" ] || { echo "gpuhost-cuda-probe: driver API 13000, 0 device(s) of cc $1.$2"; exit 5; }
dev=$(echo "$FAKE_GPU_CC" | tr -d .)
case "$built" in "sm_$dev"|"sm_${dev}a") ;; *) echo "device 0: no kernel image is available for execution on the device" >&2; exit 3 ;; esac
echo "device 0 (Fake GPU, cc $1.$2): kernel ran, fp8 round trip right"
echo "gpuhost-cuda-probe: driver API 13000, 1 device(s) of cc $1.$2"
'''
NVCC_13_0_COMPILER = r'''#!/bin/sh
home=$(cd "$(dirname "$0")/.." && pwd)
if [ "$1" = --version ]; then printf '%s' "$BANNER"; exit 0; fi
code=; out=; src=; libdirs=; wantcuda=
while [ $# -gt 0 ]; do
  case "$1" in
    -gencode) code=${2##*code=}; shift 2 ;;
    -o) out=$2; shift 2 ;;
    -L*) libdirs="$libdirs ${1#-L}"; shift ;;
    -lcuda) wantcuda=1; shift ;;
    *.cu) src=$1; shift ;;
    *) shift ;;
  esac
done
case " $KNOWN " in *" $code "*) ;; *) echo "nvcc fatal   : Unsupported gpu architecture 'compute_${code#sm_}'" >&2; exit 1 ;; esac
for h in $(sed -n 's/^#include <\(.*\)>/\1/p' "$src"); do
  case "$h" in cstdio|cstdlib) continue ;; esac
  [ -e "$home/include/$h" ] || { echo "$(basename "$src"):1:10: fatal error: $h: No such file or directory" >&2; exit 1; }
done
if [ -n "$wantcuda" ]; then
  found=; for d in $libdirs; do [ -e "$d/libcuda.so" ] && found=1; done
  [ -n "$found" ] || { printf '/usr/bin/ld: cannot find -lcuda: No such file or directory\ncollect2: error: ld returned 1 exit status\n' >&2; exit 255; }
fi
{ echo '#!/bin/sh'; echo "built=$code"; printf '%s' "$BINARY"; } >"$out"
chmod 755 "$out"
'''


def cuda_home(path, headers=("cuda.h", "cuda_runtime.h", "cuda_fp8.h", "cuda/std/cstdint"), stub=True):
    """A CUDA_HOME with the compiler stand-in, the headers and the libcuda link stub (lib64/stubs/libcuda.so)."""
    script = NVCC_13_0_COMPILER.replace(
        "home=", "BANNER='%s'\nKNOWN='%s'\nBINARY='%s'\nhome=" % (NVCC_13_0, NVCC_KNOWN, _BINARY.replace("'", "'\\''")), 1)
    exe(path / "bin" / "nvcc", script)
    for h in headers:
        (path / "include" / h).parent.mkdir(parents=True, exist_ok=True)
        (path / "include" / h).write_text("/* stand-in */\n")
    (path / "lib64" / "stubs").mkdir(parents=True, exist_ok=True)
    if stub:
        (path / "lib64" / "stubs" / "libcuda.so").write_text("/* stand-in */\n")
    return path

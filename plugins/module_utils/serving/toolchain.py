# -*- coding: utf-8 -*-
# Copyright: gpuhost.sglang contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The JIT toolchain an engine needs where it runs, as a plan from engine data, and the preflight that proves it.

What SGLang compiles at run time:

- Triton builds a small C helper per kernel launcher with the system C compiler and the interpreter's Python.h:
  ``$CC``, else ``gcc``, else ``clang`` on PATH, include dir ``sysconfig.get_paths(scheme)["include"]``
  (triton ``python/triton/runtime/build.py`` ``_build``; "Failed to find C compiler"); sglang #1117, sglang PR
  #18644 (python3-dev "for Triton JIT compilation").
- FlashInfer's JIT runs ``$CUDA_HOME/bin/nvcc`` and ``$CXX`` or ``c++`` through ninja, with
  ``-isystem $CUDA_HOME/include`` (flashinfer ``flashinfer/jit/cpp_ext.py``: ``get_cuda_path`` resolves
  CUDA_HOME, CUDA_PATH, ``which nvcc``, /usr/local/cuda, else "Could not find nvcc"; ``get_cuda_version`` parses
  ``release X.Y,`` from ``nvcc --version``). PyPI torch ships no nvcc (flashinfer #1781), so either the CUDA
  compiler of torch's CUDA major comes from NVIDIA's CUDA repository, or FlashInfer's precompiled kernels
  (``flashinfer-cubin``, same version as flashinfer-python) replace most of that JIT.

:data:`VENV_PROBE` (``probes/venv_probe.py``) runs in the engine's venv interpreter and reports its include dir and torch's CUDA without
importing torch (``torch/version.py`` holds ``cuda: Optional[str] = '13.0'``; the dist-info METADATA of CUDA wheels
pins ``cuda-toolkit[...]==13.0.3`` or ``nvidia-cuda-runtime-cu12==12.8.90``). Stdlib only: this runs on targets.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import json
import os
import re
import string

from ansible_collections.gpuhost.sglang.plugins.module_utils.serving import probes
from ansible_collections.gpuhost.sglang.plugins.module_utils.serving.probes import venv_probe

# Runs inside the venv's interpreter (python -c): probes/venv_probe.py. Imported so that the module packer ships
# the file; its source is handed to ``python -c``.
VENV_PROBE = probes.source(venv_probe.__name__.rpartition(".")[2])

_NVCC_RE = re.compile(r"release (\d+)\.(\d+),")
# cuda-toolkit[...]==13.0.3 (torch >= 2.9 cu13 wheels); nvidia-cuda-runtime-cu12==12.8.90 / nvidia-cuda-runtime==13.0.96
_REQ_RE = re.compile(r"^\s*(cuda-toolkit|nvidia-cuda-runtime(?:-cu\d+)?)\s*(?:\[[^\]]*\])?\s*==\s*((\d+)\.(\d+)[0-9.]*)")

PLACEHOLDERS = ("cuda_version", "cuda_major", "cuda_minor", "flashinfer_version", "python_version")
C_MODES = ("auto", "required", "none")
CUDA_MODES = ("auto", "nvcc", "flashinfer-cubin", "none")

# Python source of the trivial extension: a module "gpuhost_jit_probe" with answer() -> 42.
C_SOURCE = r'''#define PY_SSIZE_T_CLEAN
#include <Python.h>
static PyObject *answer(PyObject *self, PyObject *args) { return PyLong_FromLong(42); }
static PyMethodDef methods[] = {{"answer", answer, METH_NOARGS, "42"}, {NULL, NULL, 0, NULL}};
static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "gpuhost_jit_probe", NULL, -1, methods};
PyMODINIT_FUNC PyInit_gpuhost_jit_probe(void) { return PyModule_Create(&module); }
'''

# CUDA side of the proof: what FlashInfer's JIT does for each GPU's architecture, in miniature. It includes what its
# kernels include (libcu++ <cuda/std/...> from CCCL, <cuda_fp8.h>), is compiled by $CUDA_HOME/bin/nvcc for the GPU's
# arch-specific target (sm_90a, sm_120a: flashinfer/jit/core.py builds with -gencode=arch=compute_XXa,code=sm_XXa),
# linked against the driver API (-lcuda, through $CUDA_HOME/lib64/stubs as FlashInfer's cpp_ext links) and the CUDA
# runtime, then run in the unit's environment on every GPU of that architecture: an fp8 round trip the host checks.
# argv: <major> <minor>; exit 0 when it ran on at least one such GPU and every result was right.
CUDA_SOURCE = r'''#include <cstdio>
#include <cstdlib>
#include <cuda.h>
#include <cuda_runtime.h>
#include <cuda_fp8.h>
#include <cuda/std/cstdint>

__global__ void gpuhost_probe(const float *in, float *out, cuda::std::uint32_t n) {
    cuda::std::uint32_t i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) out[i] = float(__nv_fp8_e4m3(in[i])) * 2.0f;
}

int main(int argc, char **argv) {
    int want_major = argc > 2 ? atoi(argv[1]) : -1, want_minor = argc > 2 ? atoi(argv[2]) : -1;
    int drv = 0, count = 0, ran = 0;
    if (cuInit(0) != CUDA_SUCCESS || cuDriverGetVersion(&drv) != CUDA_SUCCESS) {
        fprintf(stderr, "cuInit failed: no usable NVIDIA driver or device\n");
        return 2;
    }
    cudaError_t e = cudaGetDeviceCount(&count);
    if (e != cudaSuccess) { fprintf(stderr, "cudaGetDeviceCount: %s\n", cudaGetErrorString(e)); return 2; }
    for (int d = 0; d < count; ++d) {
        cudaDeviceProp p;
        if (cudaGetDeviceProperties(&p, d) != cudaSuccess || p.major != want_major || p.minor != want_minor) continue;
        const unsigned n = 256;
        float h[n], r[n], *din = 0, *dout = 0;
        for (unsigned i = 0; i < n; ++i) h[i] = 1.5f;
        cudaSetDevice(d);
        e = cudaMalloc(&din, n * sizeof(float));
        if (e == cudaSuccess) e = cudaMalloc(&dout, n * sizeof(float));
        if (e == cudaSuccess) e = cudaMemcpy(din, h, n * sizeof(float), cudaMemcpyHostToDevice);
        if (e == cudaSuccess) { gpuhost_probe<<<1, n>>>(din, dout, n); e = cudaGetLastError(); }
        if (e == cudaSuccess) e = cudaDeviceSynchronize();
        if (e == cudaSuccess) e = cudaMemcpy(r, dout, n * sizeof(float), cudaMemcpyDeviceToHost);
        if (e != cudaSuccess) { fprintf(stderr, "device %d: %s\n", d, cudaGetErrorString(e)); return 3; }
        for (unsigned i = 0; i < n; ++i)
            if (r[i] != 3.0f) { fprintf(stderr, "device %d: wrong result %f\n", d, r[i]); return 4; }
        cudaFree(din);
        cudaFree(dout);
        printf("device %d (%s, cc %d.%d): kernel ran, fp8 round trip right\n", d, p.name, p.major, p.minor);
        ++ran;
    }
    printf("gpuhost-cuda-probe: driver API %d, %d device(s) of cc %d.%d\n", drv, ran, want_major, want_minor);
    return ran > 0 ? 0 : 5;
}
'''
# Compute capabilities with an arch-specific target (the "a" suffix; CUDA programming guide, "Feature Availability":
# sm_90a, sm_100a, sm_103a, sm_110a, sm_120a, sm_121a); the others get the plain target.
ARCH_SPECIFIC = ("90", "100", "103", "110", "120", "121")
_SM_RE = re.compile(r"^sm_(\d+)(\d)a?$")


def cuda_targets(sms):
    """gpu_facts' sm values (sm_120, sm_90) -> sorted unique [(target, major, minor)] e.g. ("sm_120a", 12, 0)."""
    out = {}
    for sm in sms or []:
        match = _SM_RE.match(str(sm))
        if not match:
            raise ValueError("GPU architecture %r is not an sm_XY value (gpu_facts gpus[].sm)" % (sm,))
        digits = match.group(1) + match.group(2)
        target = "sm_%s%s" % (digits, "a" if digits in ARCH_SPECIFIC else "")
        out[target] = (target, int(match.group(1)), int(match.group(2)))
    return [out[k] for k in sorted(out)]


def build_cuda_kernel(nvcc, home, target, workdir, run, environ=None):
    """Compile, link and run CUDA_SOURCE for one target in the unit's environment. Returns (ok, detail, output)."""
    name, major, minor = target
    src = os.path.join(workdir, "gpuhost_cuda_probe.cu")
    exe = os.path.join(workdir, "gpuhost_cuda_probe_" + name)
    with open(src, "w") as fh:
        fh.write(CUDA_SOURCE)
    compute = "compute_" + name[3:]
    argv = [nvcc, "-std=c++17", "-O2", "-gencode", "arch=%s,code=%s" % (compute, name), "-o", exe, src,
            "-L" + os.path.join(home, "lib64", "stubs"), "-L" + os.path.join(home, "lib64"), "-lcuda"]
    rc, out, err = run(argv, env=environ)
    if rc != 0:
        lines = [line for line in (err or out or "").splitlines() if line.strip()]
        return False, "%s -gencode arch=%s,code=%s ... -lcuda failed (rc %d): %s" % (
            nvcc, compute, name, rc, " | ".join(lines[:4]) or "no output"), (err or out)
    rc, out, err = run([exe, str(major), str(minor)], env=environ)
    text = ((out or "") + (err or "")).strip()
    if rc != 0:
        lines = [line for line in text.splitlines() if line.strip()]
        return False, "built %s for %s but it did not run on a cc %d.%d GPU (rc %d): %s" % (
            os.path.basename(exe), name, major, minor, rc, " | ".join(lines[-3:]) or "no output"), text
    return True, "compiled, linked (-lcuda) and ran for %s: %s" % (name, " | ".join(text.splitlines())), text


def parse_probe(text):
    """The JSON line VENV_PROBE printed (the last line: a sitecustomize may print before it)."""
    lines = [line for line in (text or "").splitlines() if line.strip()]
    if not lines:
        raise ValueError("the venv probe printed nothing")
    probe = json.loads(lines[-1])
    probe.setdefault("dists", {})
    cuda, source = torch_cuda(probe)
    probe["torch_cuda_resolved"] = cuda
    probe["torch_cuda_source"] = source
    return probe


def torch_cuda(probe):
    """(CUDA 'X.Y' or None, where it came from) for the torch in the probed venv."""
    if "torch_version_py" not in probe:  # not a VENV_PROBE result: a plan() input given as data
        return probe.get("torch_cuda"), probe.get("torch_cuda_source", "given")
    version = probe.get("dists", {}).get("torch")
    if not version and not probe["torch_version_py"]:
        return None, "torch is not installed in the venv"
    if probe["torch_version_py"]:
        cuda = probe.get("torch_cuda")
        if cuda:
            return str(cuda), "torch/version.py"
        return None, "torch %s was built without CUDA" % (version or probe.get("torch___version__", "?"))
    for req in probe.get("torch_requires") or []:
        match = _REQ_RE.match(req.split(";")[0])
        if match:
            return "%s.%s" % (match.group(3), match.group(4)), "torch METADATA %s==%s" % (match.group(1), match.group(2))
    return None, "torch %s was built without CUDA" % version


def parse_nvcc_version(text):
    """'X.Y' from ``nvcc --version`` ('Cuda compilation tools, release 13.0, V13.0.88'), else None."""
    match = _NVCC_RE.search(text or "")
    return "%s.%s" % match.groups() if match else None


def which(name, path):
    for directory in (path or "").split(os.pathsep):
        candidate = os.path.join(directory, name)
        if directory and os.path.isfile(candidate) and os.access(candidate, os.X_OK):
            return candidate
    return None


def find_c_compiler(environ):
    """The compiler Triton would use with this environment: $CC, else gcc, else clang on PATH."""
    if environ.get("CC"):
        return environ["CC"]
    return which("gcc", environ.get("PATH")) or which("clang", environ.get("PATH"))


def build_c_extension(cc, probe, workdir, run):
    """Compile the trivial extension as Triton compiles its helper, then import it with the venv's interpreter.
    ``run(argv, env=None, cwd=None) -> (rc, stdout, stderr)``. Returns (ok, detail)."""
    src = os.path.join(workdir, "gpuhost_jit_probe.c")
    so = os.path.join(workdir, "gpuhost_jit_probe" + (probe.get("ext_suffix") or ".so"))
    with open(src, "w") as fh:
        fh.write(C_SOURCE)
    argv = [cc, src, "-O3", "-shared", "-fPIC", "-o", so, "-I" + workdir, "-I" + probe["include"]]
    rc, out, err = run(argv)
    if rc != 0:
        lines = [line for line in (err or out or "").splitlines() if line.strip()]
        return False, "%s failed (rc %d): %s" % (" ".join(argv[:2]) + " ...", rc, " | ".join(lines[:3]) or "no output")
    code = "import sys; sys.path.insert(0, %r); import gpuhost_jit_probe as m; print(m.answer())" % workdir
    rc, out, err = run([probe["python"], "-c", code])
    if rc != 0 or out.strip() != "42":
        lines = [line for line in (err or out or "").splitlines() if line.strip()]
        return False, "built %s but the venv's interpreter could not import it: %s" % (so, " | ".join(lines[-2:]))
    return True, "built with %s against %s/Python.h and imported by %s" % (cc, probe["include"], probe["python"])


def _fill(templates, values, variable):
    out = []
    for template in templates:
        names = [field[1] for field in string.Formatter().parse(template) if field[1]]
        unknown = [name for name in names if name not in PLACEHOLDERS]
        if unknown:
            raise ValueError("%s: %r uses {%s}; allowed placeholders: %s"
                             % (variable, template, unknown[0], ", ".join("{%s}" % p for p in PLACEHOLDERS)))
        if any(values.get(name) is None for name in names):
            raise ValueError("%s: %r needs %s, which the venv does not provide"
                             % (variable, template, ", ".join(n for n in names if values.get(n) is None)))
        out.append(template.format(**values))
    return out


def plan(jit, probe, settings):
    """What to install and check, from engine data (``jit``: c_extension, cuda_kernels), the probe and settings
    (c_mode, cuda_mode, c_packages, cuda_packages, cubin_packages, cuda_home). Raises ValueError on bad input."""
    c_mode, cuda_mode = settings.get("c_mode", "auto"), settings.get("cuda_mode", "auto")
    if c_mode not in C_MODES:
        raise ValueError("sglang_toolchain_c=%r: allowed values are %s" % (c_mode, ", ".join(C_MODES)))
    if cuda_mode not in CUDA_MODES:
        raise ValueError("sglang_toolchain_cuda=%r: allowed values are %s" % (cuda_mode, ", ".join(CUDA_MODES)))
    cuda, source = torch_cuda(probe) if "torch_cuda_resolved" not in probe else (
        probe["torch_cuda_resolved"], probe["torch_cuda_source"])
    dists = probe.get("dists", {})
    torch_label = "torch %s" % dists.get("torch", "(not installed)")
    if cuda_mode == "auto":
        cuda_mode = "nvcc" if (jit.get("cuda_kernels") and cuda) else "none"
    if cuda_mode in ("nvcc", "flashinfer-cubin") and not cuda:
        raise ValueError("sglang_toolchain_cuda=%s but %s is without CUDA (%s): use sglang_toolchain_cuda=none"
                         % (cuda_mode, torch_label, source))
    if cuda_mode == "flashinfer-cubin" and not dists.get("flashinfer-python"):
        raise ValueError("sglang_toolchain_cuda=flashinfer-cubin but flashinfer-python is not installed in the venv: "
                         "use sglang_toolchain_cuda=nvcc")
    c_ext = c_mode == "required" or (c_mode == "auto" and bool(jit.get("c_extension")))
    values = {"python_version": probe.get("python_version"), "flashinfer_version": dists.get("flashinfer-python"),
              "cuda_version": cuda, "cuda_major": cuda.split(".")[0] if cuda else None,
              "cuda_minor": cuda.split(".")[1] if cuda else None}
    c_pkgs = _fill(settings.get("c_packages") or [], values, "sglang_toolchain_c_packages") if c_ext else []
    cuda_pkgs = []
    pip = []
    cuda_home = ""
    if cuda_mode == "nvcc":
        cuda_pkgs = _fill(settings.get("cuda_packages") or [], values, "sglang_toolchain_cuda_packages")
        cuda_home = _fill([settings.get("cuda_home") or ""], values, "sglang_cuda_home")[0]
    elif cuda_mode == "flashinfer-cubin":
        pip = _fill(settings.get("cubin_packages") or [], values, "sglang_toolchain_cubin_packages")
    return {"c_extension": c_ext, "cuda_compiler": cuda_mode, "apt_packages": c_pkgs + cuda_pkgs,
            "c_packages": c_pkgs, "cuda_packages": cuda_pkgs, "pip_packages": pip,
            "cuda_home": cuda_home, "cuda_version": cuda, "cuda_source": source, "torch": dists.get("torch")}


def _finding(piece, ok, detail, fix=""):
    return {"piece": piece, "ok": bool(ok), "detail": detail, "fix": "" if ok else fix}


def check_c(plan_, probe, environ, workdir, run):
    """Findings for the C compiler, the Python headers and the built extension (plus c++ when nvcc JITs)."""
    findings = []
    cc = find_c_compiler(environ)
    pyver = probe.get("python_version", "3")
    fix_pkgs = ("install it with sglang_toolchain_c_packages (now: %s) and sglang_toolchain_install: true"
                % (", ".join(plan_.get("c_packages") or []) or "empty"))
    findings.append(_finding("C compiler", cc, "%s (Triton's choice: $CC, else gcc, else clang on the unit's PATH)" % cc
                             if cc else "none on the unit's PATH %s and no $CC (Triton: 'Failed to find C compiler')"
                             % environ.get("PATH", ""), fix_pkgs))
    header = os.path.join(probe["include"], "Python.h")
    has_header = os.path.exists(header)
    findings.append(_finding(
        "Python headers", has_header,
        "%s (python%s)" % (header, pyver) if has_header
        else "%s is missing: the venv's interpreter python%s has no development headers" % (header, pyver),
        "sglang_toolchain_c_packages must include python3-dev (python%s-dev) with sglang_toolchain_install: true"
        % pyver))
    if plan_.get("cuda_compiler") == "nvcc":
        cxx = environ.get("CXX") or which("c++", environ.get("PATH"))
        findings.append(_finding("C++ compiler", cxx, "%s (FlashInfer's JIT: $CXX, else c++)" % cxx if cxx
                                 else "no $CXX and no c++ on the unit's PATH (FlashInfer's JIT links with it)",
                                 "add g++ to sglang_toolchain_c_packages"))
    if cc and has_header:
        ok, detail = build_c_extension(cc, probe, workdir, run)
        findings.append(_finding("C extension", ok, detail,
                                 "the compiler and headers exist but do not build an extension for python%s: "
                                 "check sglang_toolchain_c_packages matches the venv's interpreter" % pyver))
    return findings


def check_cuda(plan_, probe, run, workdir=None, gpu_archs=None, environ=None):
    """Findings for nvcc under CUDA_HOME (mode nvcc) or the cubin package (mode flashinfer-cubin). With mode nvcc,
    ``gpu_archs`` (gpu_facts' sm per GPU) and a ``workdir``: a small kernel compiled, linked and run per
    architecture in the unit's environment ``environ``."""
    findings = []
    torch_label = "torch %s" % probe.get("dists", {}).get("torch", "?")
    cuda = plan_.get("cuda_version")
    if plan_["cuda_compiler"] == "nvcc":
        home = plan_["cuda_home"]
        nvcc = os.path.join(home, "bin", "nvcc")
        fix = ("install it with sglang_toolchain_cuda_packages (now: %s, from NVIDIA's CUDA repository) and "
               "sglang_toolchain_install: true, or point sglang_cuda_home (CUDA_HOME=%s) at a CUDA %s toolkit"
               % (", ".join(plan_.get("cuda_packages") or []) or "empty", home, cuda))
        if not os.path.exists(nvcc):
            findings.append(_finding("CUDA compiler", False, "%s is missing (CUDA_HOME=%s; FlashInfer: 'Could not find "
                                     "nvcc')" % (nvcc, home), fix))
            return findings
        rc, out, err = run([nvcc, "--version"])
        found = parse_nvcc_version(out) if rc == 0 else None
        if found is None:
            findings.append(_finding("CUDA compiler", False, "%s --version gave no 'release X.Y,' (rc %d): %s"
                                     % (nvcc, rc, (err or out).strip()[:200]), fix))
            return findings
        same_major = found.split(".")[0] == cuda.split(".")[0]
        findings.append(_finding("CUDA compiler", same_major,
                                 "%s: CUDA %s for %s built for CUDA %s" % (nvcc, found, torch_label, cuda),
                                 "the CUDA majors differ: " + fix))
        header = os.path.join(home, "include", "cuda_runtime.h")
        findings.append(_finding("CUDA headers", os.path.exists(header), header if os.path.exists(header)
                                 else "%s is missing (FlashInfer compiles with -isystem $CUDA_HOME/include)" % header,
                                 "sglang_toolchain_cuda_packages must include cuda-cudart-dev-%s"
                                 % cuda.replace(".", "-")))
        plan_["nvcc_cuda"] = found
        targets = cuda_targets(gpu_archs)
        if same_major and os.path.exists(header) and workdir and targets:
            plan_["kernels"] = []
            for target in targets:
                ok, detail, output = build_cuda_kernel(nvcc, home, target, workdir, run, environ)
                plan_["kernels"].append({"target": target[0], "ok": ok, "output": output})
                findings.append(_finding("CUDA kernel %s" % target[0], ok, detail,
                                         "the CUDA %s toolkit under CUDA_HOME=%s must compile and link for the GPU "
                                         "(nvcc of CUDA %s or later knows %s; the headers, libcudart_static and the "
                                         "libcuda stub come with sglang_toolchain_cuda_packages, now: %s), and the "
                                         "driver must run it" % (cuda, home, cuda, target[0],
                                                                 ", ".join(plan_.get("cuda_packages") or []) or "empty")))
    elif plan_["cuda_compiler"] == "flashinfer-cubin":
        dists = probe.get("dists", {})
        want, have = dists.get("flashinfer-python"), dists.get("flashinfer-cubin")
        findings.append(_finding("FlashInfer cubins", have == want,
                                 "flashinfer-cubin %s for flashinfer-python %s" % (have, want),
                                 "flashinfer-cubin must be the same version as flashinfer-python: "
                                 "sglang_toolchain_cubin_packages"))
    return findings

#!/usr/bin/env python3
# -*- coding: utf-8 -*-
# Copyright: gpuhost.sglang contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The serving role's JIT toolchain and CUDA driver preflight, checked against a real CUDA box.

Runs the same module_utils code the serving_toolchain module runs (no Ansible needed) and compares every reading
with an independent one:
- torch's CUDA from VENV_PROBE (version.py read with ast, no import) vs ``import torch; torch.version.cuda``, and
  the METADATA fallback on the real wheel's requirements;
- the driver and its CUDA from the nvidia-smi header vs NVML (pynvml);
- the CUDA driver rule's verdict for that torch on that driver, and for a CUDA the driver cannot JIT;
- ``nvcc --version`` parsed, its major vs torch's;
- the C extension built with the system cc against the venv's Python.h and imported;
- Triton really compiling its launcher helper with a C compiler: a fresh cache with cc on PATH works, one with
  no compiler on PATH fails with Triton's own error (the stand-ins' failure mode).

    python3 benchmarks/gpu/toolchain_check.py [--python VENV_PYTHON] [--out DIR]
Exit 0 when every comparison agrees.
"""

from __future__ import absolute_import, division, print_function

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", "collections"))

from ansible_collections.gpuhost.sglang.plugins.module_utils.gpu import nvml_facts  # noqa: E402
from ansible_collections.gpuhost.sglang.plugins.module_utils.gpu import cuda_compat  # noqa: E402
from ansible_collections.gpuhost.sglang.plugins.module_utils.serving import toolchain  # noqa: E402

RULES_YAML = os.path.join(HERE, "..", "..", "roles", "sglang", "vars", "cuda_compat.yml")

TRITON_KERNEL = r'''
import os, sys, torch, triton, triton.language as tl
@triton.jit
def add(x, y, out, n, BLOCK: tl.constexpr):
    i = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    m = i < n
    tl.store(out + i, tl.load(x + i, mask=m) + tl.load(y + i, mask=m), mask=m)
x = torch.ones(1000, device="cuda"); y = torch.ones(1000, device="cuda"); o = torch.empty_like(x)
add[(4,)](x, y, o, 1000, BLOCK=256)
torch.cuda.synchronize()
print("triton-ok", float(o.sum()))
'''


def run(argv, env=None, cwd=None):
    try:
        res = subprocess.run(argv, env=dict(os.environ, **(env or {})), cwd=cwd, capture_output=True, text=True, check=False)
    except OSError as exc:
        return 127, "", str(exc)
    return res.returncode, res.stdout, res.stderr


def load_rules():
    # tiny YAML subset: this file is flat "key: value" maps two levels deep (no PyYAML needed on the box)
    try:
        import yaml
        with open(RULES_YAML) as fh:
            return yaml.safe_load(fh)["sglang_cuda_driver_rules"]
    except ImportError:
        rules, current = {}, None
        with open(RULES_YAML) as fh:
            for line in fh:
                if line.startswith("  ") and not line.startswith("    ") and line.strip().endswith(":"):
                    current = rules.setdefault(line.strip()[:-1], {})
                elif line.startswith("    ") and current is not None and ":" in line:
                    key, value = line.split(":", 1)
                    current[key.strip().strip('"')] = value.split("#")[0].strip().strip('"')
        return rules


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--python", default=sys.executable)
    ap.add_argument("--out", default="")
    args = ap.parse_args()
    report, ok = {}, True

    def agree(name, cond, detail):
        nonlocal ok
        ok = ok and bool(cond)
        report[name] = {"ok": bool(cond), "detail": detail}
        print("%-34s %s  %s" % (name, "OK  " if cond else "FAIL", detail))

    rc, out, err = run([args.python, "-c", toolchain.VENV_PROBE])
    probe = toolchain.parse_probe(out)
    rc2, imported, err2 = run([args.python, "-c", "import torch; print(torch.__version__, torch.version.cuda)"])
    torch_version, torch_cuda_import = (imported.split() + ["?", "?"])[:2]
    torch_cuda_import = None if torch_cuda_import == "None" else torch_cuda_import
    agree("torch CUDA (probe vs import)", probe["torch_cuda_resolved"] == torch_cuda_import,
          "probe %s (%s) / import %s %s" % (probe["torch_cuda_resolved"], probe["torch_cuda_source"], torch_version,
                                            torch_cuda_import))
    meta_only = dict(probe, torch_version_py=False)
    meta_cuda = toolchain.torch_cuda(meta_only)
    agree("torch CUDA from METADATA alone", meta_cuda[0] in (None, torch_cuda_import),
          "%s (requires: %s)" % (meta_cuda, [r for r in probe.get("torch_requires", []) if "cuda" in r][:3]))

    rc, smi_out, _ = run(["nvidia-smi"])
    banner = nvml_facts.parse_nvidia_smi_banner(smi_out)
    header = [line for line in smi_out.splitlines() if "Driver Version" in line]
    try:
        import pynvml
        nvml = nvml_facts.collect(pynvml)
        nvml_pair = (nvml["driver_version"], nvml["cuda_version"])
    except Exception as exc:  # no pynvml on the box
        nvml_pair = ("no NVML: %s" % exc, None)
    agree("driver (nvidia-smi header vs NVML)", banner is not None and tuple(banner) == tuple(nvml_pair),
          "header %r -> %s / NVML %s" % (header[0].strip() if header else "", banner, nvml_pair))

    rules = load_rules()
    driver, driver_cuda = banner or (None, None)
    verdict = cuda_compat.check(probe["torch_cuda_resolved"], driver, driver_cuda, rules, what="torch " + torch_version)
    agree("driver rule for this torch", verdict["ok"], verdict["msg"])
    newer = "%d.%d" % (int(driver_cuda.split(".")[0]), int(driver_cuda.split(".")[1]) + 2) if driver_cuda else "13.2"
    refused = cuda_compat.check(newer, driver, driver_cuda, rules, what="a CUDA %s engine" % newer)
    agree("driver rule refuses a newer minor", not refused["ok"], refused["msg"])

    cuda_home = os.environ.get("CUDA_HOME") or (os.path.dirname(os.path.dirname(os.path.realpath(shutil.which("nvcc"))))
                                                if shutil.which("nvcc") else "/usr/local/cuda")
    rc, nvcc_out, nvcc_err = run([os.path.join(cuda_home, "bin", "nvcc"), "--version"])
    nvcc_cuda = toolchain.parse_nvcc_version(nvcc_out)
    agree("nvcc major vs torch", nvcc_cuda and nvcc_cuda.split(".")[0] == (probe["torch_cuda_resolved"] or "x").split(".")[0],
          "%s/bin/nvcc: %s | %s" % (cuda_home, nvcc_cuda, nvcc_out.strip().splitlines()[-2:] if nvcc_out else nvcc_err))

    cc = toolchain.find_c_compiler(dict(os.environ))
    work = tempfile.mkdtemp()
    built = toolchain.build_c_extension(cc, probe, work, run) if cc else (False, "no C compiler on PATH")
    agree("C extension (Triton's way)", built[0], built[1])

    cache = tempfile.mkdtemp()
    rc, t_out, t_err = run([args.python, "-c", TRITON_KERNEL], env={"TRITON_CACHE_DIR": cache})
    agree("Triton JIT with a compiler", rc == 0 and "triton-ok 2000.0" in t_out, (t_out or t_err).strip()[-300:])
    empty = tempfile.mkdtemp()
    env = {"TRITON_CACHE_DIR": tempfile.mkdtemp(), "PATH": empty}
    env_unset = dict((k, v) for k, v in os.environ.items() if k not in ("CC", "CXX"))
    res = subprocess.run([args.python, "-c", TRITON_KERNEL], env=dict(env_unset, **env), capture_output=True, text=True, check=False)
    tail = [line for line in (res.stderr or res.stdout).splitlines() if line.strip()][-1:] or [""]
    agree("Triton JIT without a compiler fails", res.returncode != 0 and "C compiler" in tail[0],
          "rc %d: %s" % (res.returncode, tail[0][:300]))

    report["probe"] = probe
    if args.out:
        with open(os.path.join(args.out, "toolchain_check.json"), "w") as fh:
            json.dump(report, fh, indent=1, default=str)
    print("toolchain_check:", "all agree" if ok else "DISAGREEMENT")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())

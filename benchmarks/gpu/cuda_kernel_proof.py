#!/usr/bin/env python3
# Copyright: gpuhost.sglang contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The toolchain proof's CUDA kernel on a real GPU machine, outside Ansible: the same code the serving_toolchain
module runs (plugins/module_utils/serving/toolchain.py build_cuda_kernel), for each GPU architecture nvidia-smi lists.

    python3 benchmarks/gpu/cuda_kernel_proof.py [CUDA_HOME]     # default /usr/local/cuda

Prints nvcc --version, the GPUs, and per architecture the compile/link/run verdict and the kernel's output;
exit 0 when every architecture passed."""
from __future__ import print_function

import importlib.util
import os
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
SPEC = importlib.util.spec_from_file_location(
    "toolchain", os.path.join(HERE, "..", "..", "plugins", "module_utils", "serving", "toolchain.py"))
toolchain = importlib.util.module_from_spec(SPEC)
SPEC.loader.exec_module(toolchain)


def run(argv, env=None, cwd=None):
    e = dict(os.environ)
    e.update(env or {})
    p = subprocess.run(argv, env=e, cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, universal_newlines=True,
                       check=False)
    return p.returncode, p.stdout, p.stderr


def main():
    home = sys.argv[1] if len(sys.argv) > 1 else "/usr/local/cuda"
    nvcc = os.path.join(home, "bin", "nvcc")
    rc, out, err = run([nvcc, "--version"])
    print("$ %s --version\n%s" % (nvcc, out.strip() or err.strip()))
    rc, out, err = run(["nvidia-smi", "--query-gpu=index,name,compute_cap,driver_version", "--format=csv,noheader"])
    print("$ nvidia-smi --query-gpu=index,name,compute_cap,driver_version --format=csv,noheader\n%s" % out.strip())
    sms = ["sm_" + line.split(",")[2].strip().replace(".", "") for line in out.splitlines() if line.strip()]
    targets = toolchain.cuda_targets(sms)
    print("targets: %s" % ", ".join(t[0] for t in targets))
    failed = 0
    work = tempfile.mkdtemp(prefix="gpuhost-cuda-proof-")
    env = {"PATH": "%s/bin:/usr/bin:/bin" % home}
    for target in targets:
        ok, detail, output = toolchain.build_cuda_kernel(nvcc, home, target, work, run, env)
        print("%s: %s\n  %s" % (target[0], "PASS" if ok else "FAIL", detail))
        failed += not ok
    # the failure the proof exists to catch: code built for another architecture does not run on this GPU
    for target in targets:
        other = "sm_120a" if target[0] != "sm_120a" else "sm_90a"
        ok, detail, output = toolchain.build_cuda_kernel(nvcc, home, (other, target[1], target[2]), work, run, env)
        print("control: %s code on the cc %d.%d GPU (must fail): %s\n  %s" % (
            other, target[1], target[2], "PASS" if ok else "FAIL", detail))
        failed += ok
    return 1 if failed or not targets else 0


if __name__ == "__main__":
    sys.exit(main())

# -*- coding: utf-8 -*-
# Copyright: gpuhost.sglang contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""What a CUDA driver does to an engine, for the CPU engine of the test hosts (sglang_launch_module).

The serving unit's launcher (roles/sglang/files/gpuhost-launch.py) runs this module with the engine's argv. It reads
the driver library an engine loads, /usr/lib/x86_64-linux-gnu/libcuda.so.1 (installed by the stand-in libcuda1 of
tests/fixtures/driver-change-apt-repo.sh; the real libcuda1 ships the same link), and does what its ``behaviour``
says before it runs the engine (GPUHOST_STANDIN_ENGINE_MODULE, default transformers serve) in this process:

  fine     nothing
  slow2x   the engine process is stopped and continued on a 50% duty cycle (SIGSTOP 20 ms / SIGCONT 20 ms) from a
           child process, the slowdown of tests/integration/test_serving_bench_slowdown.py (CPUQuota= is ignored on
           the test hosts' hybrid cgroups, docs/testing.md)
  garbage  every matrix product (torch.nn.functional.linear, which transformers' Linear layers call) gets noise of
           ten times its own scale: wrong numbers from a kernel, as garbage tokens from a driver are reported
           (sgl-project/sglang#24321)

No library or a library without a behaviour: nothing (a host without the stand-in driver)."""

import os
import re
import runpy
import signal
import sys
import time

LIBCUDA = "/usr/lib/x86_64-linux-gnu/libcuda.so.1"


def behaviour(path=LIBCUDA):
    try:
        with open(path) as fh:
            m = re.search(r"behaviour=(\w+)", fh.read())
    except (IOError, OSError):
        return "fine"
    return m.group(1) if m else "fine"


def duty_cycle(pid, stop_s=0.02, run_s=0.02):
    """In a child: stop and continue ``pid`` until it is gone."""
    child = os.fork()
    if child:
        return child
    try:
        while os.getppid() == pid:
            os.kill(pid, signal.SIGSTOP)
            time.sleep(stop_s)
            os.kill(pid, signal.SIGCONT)
            time.sleep(run_s)
    except OSError:
        pass
    finally:
        try:
            os.kill(pid, signal.SIGCONT)
        except OSError:
            pass
    os._exit(0)


def garble():
    import torch
    import torch.nn.functional as F
    linear = F.linear

    def noisy(x, weight, bias=None):
        y = linear(x, weight, bias)
        return y + torch.randn_like(y) * (10.0 * (y.detach().abs().mean() + 1e-3))
    F.linear = noisy


def main():
    how = behaviour()
    if how == "slow2x":
        duty_cycle(os.getpid())
    elif how == "garbage":
        garble()
    print("gpuhost_cuda_standin: driver behaviour %s" % how, file=sys.stderr, flush=True)
    module = os.environ.get("GPUHOST_STANDIN_ENGINE_MODULE", "transformers.cli.transformers")
    runpy.run_module(module, run_name="__main__", alter_sys=True)


if __name__ == "__main__":
    main()

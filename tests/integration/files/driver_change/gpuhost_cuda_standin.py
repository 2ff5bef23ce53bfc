# -*- coding: utf-8 -*-
# Copyright: gpuhost.sglang contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""What a CUDA driver does to an engine, for the CPU engine of the test hosts (sglang_launch_module).

The serving unit's launcher (roles/sglang/files/gpuhost-launch.py) runs this module with the engine's argv. It reads
the driver library an engine loads, /usr/lib/x86_64-linux-gnu/libcuda.so.1 (installed by the stand-in libcuda1 of
tests/fixtures/driver-change-apt-repo.sh; the real libcuda1 ships the same link), and does what its ``behaviour``
says before it runs the engine (GPUHOST_STANDIN_ENGINE_MODULE, default transformers serve) in this process:

  fine     nothing
  slow2x   every streamed answer takes twice as long: before each chunk the response waits as long again as the chunk
           took to come (the stand-in acts where the bench measures: the model's own steps are not what bounds the
           CPU engine's throughput under continuous batching: sleeping after each forward pass, measured here, did
           not lower it; nor did a SIGSTOP/SIGCONT duty cycle of the process while other tests loaded the 2-core
           machine, as tests/integration/test_serving_bench_slowdown.py does alone in stage 50)
  garbage  every matrix product (torch.nn.functional.linear, which transformers' Linear layers call) gets noise of
           ten times its own scale: wrong numbers from a kernel, as garbage tokens from a driver are reported
           (sgl-project/sglang#24321)

No library or a library without a behaviour: nothing (a host without the stand-in driver)."""

import os
import re
import runpy
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


def slow_down():
    """Every streamed response (starlette's StreamingResponse, which transformers serve answers SSE with) waits, before
    each chunk, as long again as that chunk took to come: twice the time to the first token and between tokens."""
    import asyncio

    from starlette.responses import StreamingResponse

    stream = StreamingResponse.stream_response

    async def doubled(self, send):
        body = self.body_iterator

        async def slower():
            last = time.perf_counter()
            async for chunk in body:
                await asyncio.sleep(time.perf_counter() - last)
                yield chunk
                last = time.perf_counter()
        self.body_iterator = slower()
        return await stream(self, send)
    StreamingResponse.stream_response = doubled


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
        slow_down()
    elif how == "garbage":
        garble()
    print("gpuhost_cuda_standin: driver behaviour %s" % how, file=sys.stderr, flush=True)
    module = os.environ.get("GPUHOST_STANDIN_ENGINE_MODULE", "transformers.cli.transformers")
    runpy.run_module(module, run_name="__main__", alter_sys=True)


if __name__ == "__main__":
    main()

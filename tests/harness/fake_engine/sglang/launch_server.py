# -*- coding: utf-8 -*-
# Copyright: gpuhost.sglang contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Stand-in for ``python -m sglang.launch_server``: parses its argv with the stand-in ServerArgs (the parser the
server_args probe checked), then does what the real 0.5.17 did on the H200 for these flags, from its recordings
(tests/fixtures/sglang-0.5.17/):
  --attention-backend fa3          prints startup-fail-fa3.log (the trimmed kernel package has no FA3) and hangs,
                                   as the real process did (it did not exit within 80 s)
  --mem-fraction-static < 0.001    prints startup-fail-memfrac.log and hangs likewise
  --kv-cache-dtype fp8_e5m2        serves, with answers that change (fakeserver ``garbage``): a numerics flag
  --kv-cache-dtype fp8_e4m3        serves fluently, the probes right, but 20% of the accuracy task items wrong and
                                   half the greedy outputs changed after the answer (fakeserver --accuracy 0.8
                                   --drift 0.5): a numerics change only the accuracy gate sees (the factors are this
                                   stand-in's, unverified)
  otherwise                        prints the first lines of startup-good.log and becomes tests/integration/
                                   fakeserver.py on --port: the probes' known answers, /metrics, each token
                                   paced by FAKE_ENGINE_ITL seconds (default 0.004), half that with CUDA graphs on
                                   (the launch overhead graphs remove; the factor is this stand-in's, unverified),
                                   the first after FAKE_ENGINE_TTFT (default 0.02: a prefill, so that TTFT is not
                                   all jitter)
"""

import os
import sys
import time

from sglang.srt.server_args import parse

TESTS = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..", ".."))
RECORDED = os.path.join(TESTS, "fixtures", "sglang-0.5.17")
FAKESERVER = os.path.join(TESTS, "integration", "fakeserver.py")


def replay_failure(name):
    with open(os.path.join(RECORDED, "startup-fail-%s.log" % name)) as f:
        sys.stdout.write(f.read())
    sys.stdout.flush()
    while True:
        time.sleep(60)


def main(argv=None):
    a = parse(sys.argv[1:] if argv is None else argv)
    if a.attention_backend == "fa3":
        replay_failure("fa3")
    if a.mem_fraction_static is not None and a.mem_fraction_static < 0.001:
        replay_failure("memfrac")
    with open(os.path.join(RECORDED, "startup-good.log")) as f:
        sys.stdout.write("".join(f.readlines()[:8]))
    sys.stdout.flush()
    itl = float(os.environ.get("FAKE_ENGINE_ITL", "0.004")) / (1 if a.disable_cuda_graph else 2)
    behavior = "garbage" if a.kv_cache_dtype == "fp8_e5m2" else "ok"
    numerics = ["--accuracy", "0.8", "--drift", "0.5"] if a.kv_cache_dtype == "fp8_e4m3" else []
    os.execv(sys.executable, [sys.executable, FAKESERVER, "--behavior", behavior, "--port", str(a.port), "--model",
                              a.served_model_name or a.model_path, "--itl", str(itl), "--ttft", os.environ.get("FAKE_ENGINE_TTFT", "0.02"),
                              "--metrics"] + numerics)


if __name__ == "__main__":
    main()

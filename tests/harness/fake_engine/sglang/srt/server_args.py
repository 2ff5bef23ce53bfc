# -*- coding: utf-8 -*-
# Copyright: gpuhost.sglang contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Stand-in ServerArgs: the options the tune loop's tests use, with the types and choices of SGLang 0.5.17's
(the real parser's values are in the recorded start, tests/fixtures/sglang-0.5.17/startup-good.log's
``server_args=ServerArgs(...)`` line; the choices are a subset of sglang/srt/server_args.py's)."""

import argparse

ATTENTION_BACKENDS = ["triton", "flashinfer", "fa3", "torch_native"]


class ServerArgs(object):
    @staticmethod
    def add_cli_args(parser):
        parser.add_argument("--model-path", "--model", type=str, required=True)
        parser.add_argument("--served-model-name", type=str)
        parser.add_argument("--host", type=str, default="127.0.0.1")
        parser.add_argument("--port", type=int, default=30000)
        parser.add_argument("--attention-backend", choices=ATTENTION_BACKENDS)
        parser.add_argument("--sampling-backend", choices=["flashinfer", "pytorch"])
        parser.add_argument("--grammar-backend", choices=["xgrammar", "outlines", "llguidance", "none"])
        parser.add_argument("--dtype", choices=["auto", "half", "float16", "bfloat16", "float", "float32"])
        parser.add_argument("--kv-cache-dtype", choices=["auto", "fp8_e5m2", "fp8_e4m3", "bf16"])
        parser.add_argument("--disable-cuda-graph", action="store_true")
        parser.add_argument("--mem-fraction-static", type=float)
        parser.add_argument("--max-total-tokens", type=int)
        parser.add_argument("--max-running-requests", type=int)
        parser.add_argument("--chunked-prefill-size", type=int)
        parser.add_argument("--schedule-conservativeness", type=float, default=1.0)
        parser.add_argument("--enable-metrics", action="store_true")


def parse(argv):
    p = argparse.ArgumentParser(prog="sglang.launch_server", allow_abbrev=False)
    ServerArgs.add_cli_args(p)
    return p.parse_args(argv)

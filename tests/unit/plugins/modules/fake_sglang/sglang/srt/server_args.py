# Stand-in ServerArgs with the same argparse shapes the real 0.5.23 parser uses (see package docstring).
import argparse
import logging
import sys

logger = logging.getLogger(__name__)
print("noise on stdout at import time must not break the probe protocol")
sys.stderr.write("noise on stderr\n")


class DeprecatedStoreTrueAction(argparse.Action):
    def __init__(self, option_strings, dest, nargs=0, const=True, default=False, **kwargs):
        super().__init__(option_strings, dest, nargs=nargs, const=const, default=default, **kwargs)

    def __call__(self, parser, namespace, values, option_string=None):
        logger.warning("\033[1;33m'%s' is deprecated and will be removed in a future release.\033[0m", option_string)
        setattr(namespace, self.dest, True)


class ServerArgs:
    @staticmethod
    def add_cli_args(parser):
        parser.add_argument("--model-path", "--model", type=str, required=True)
        parser.add_argument("--tp-size", "--tensor-parallel-size", type=int, default=1)
        parser.add_argument("--mem-fraction-static", type=float)
        parser.add_argument("--max-running-requests", type=int)
        parser.add_argument("--dsa-decode-backend", choices=["flashmla_sparse", "fa3", "trtllm", "flashinfer_sparse_mla"])
        parser.add_argument("--cuda-graph-max-bs-decode", type=int)
        parser.add_argument("--cuda-graph-max-bs-prefill", type=int)
        parser.add_argument("--cuda-graph-bs-decode", type=int, nargs="+")
        parser.add_argument("--disable-shared-experts-fusion", action="store_true")
        parser.add_argument("--enable-dsa-fused-indexer", action=argparse.BooleanOptionalAction)
        parser.add_argument("--disable-cuda-graph", action=DeprecatedStoreTrueAction, help="Deprecated. Use x.")
        parser.add_argument("--json-model-override-args", type=str)

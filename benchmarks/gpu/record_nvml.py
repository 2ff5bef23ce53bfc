#!/usr/bin/env python3
# -*- coding: utf-8 -*-
# Copyright: gpuhost.sglang contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Record the NVML calls gpu_facts makes on this box, and their answers, as the JSON the tests replay
(harness.fake_nvml.CallReplayNVML, tests/fixtures/gpu-boxes/<box>/nvml.json).

    python3 benchmarks/gpu/record_nvml.py --out nvml.json      # with the interpreter that has nvidia-ml-py

Every ``nvml*`` call nvml_facts.collect makes goes through a proxy to the real pynvml; the proxy writes the call
(device handles as their index) and the value, a ctypes structure as a dict of its fields, or the NVMLError text.
"""

from __future__ import absolute_import, division, print_function

import argparse
import ctypes
import json
import sys

from gpu_utils import load  # benchmarks/gpu/gpu_utils.py (this folder is on sys.path when the script runs)

nvml_facts = load("nvml_facts")


def plain(value):
    if isinstance(value, bytes):
        return value.decode("utf-8", "replace")
    if isinstance(value, ctypes.Structure):
        return dict((name, plain(getattr(value, name))) for name, _ in value._fields_)
    if isinstance(value, (list, tuple)):
        return [plain(v) for v in value]
    return value


class Recorder(object):
    def __init__(self, nvml):
        self._nvml = nvml
        self._handles = []
        self.calls = {}

    def _arg(self, arg):
        for index, handle in enumerate(self._handles):
            if arg is handle:
                return index
        return arg

    def __getattr__(self, name):
        real = getattr(self._nvml, name)
        if not name.startswith("nvml") or not callable(real):
            return real

        def call(*args):
            key = "%s(%s)" % (name, ",".join(str(self._arg(a)) for a in args))
            try:
                value = real(*args)
            except self._nvml.NVMLError as exc:
                self.calls[key] = {"error": str(exc)}
                raise
            if name == "nvmlDeviceGetHandleByIndex":
                self._handles.append(value)
                return value
            self.calls[key] = plain(value)
            return value
        return call


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", required=True)
    args = parser.parse_args()
    import pynvml  # nvidia-ml-py
    rec = Recorder(pynvml)
    facts = nvml_facts.collect(rec, host=nvml_facts.read_hypervisor("/"))
    with open(args.out, "w") as fh:
        json.dump({"source": "recorded by benchmarks/gpu/record_nvml.py", "calls": rec.calls}, fh, indent=1, sort_keys=True)
    print("recorded %d call(s) of %d GPU(s) to %s" % (len(rec.calls), facts["gpu_count"], args.out))
    return 0


if __name__ == "__main__":
    sys.exit(main())

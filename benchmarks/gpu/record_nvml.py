#!/usr/bin/env python3
# -*- coding: utf-8 -*-
# Copyright: gpuhost.sglang contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Record the NVML calls gpu_facts makes on this box, and their answers, as the JSON the tests replay
(harness.fake_nvml.CallReplayNVML, tests/fixtures/gpu-boxes/<box>/nvml.json).

    python3 benchmarks/gpu/record_nvml.py --out nvml.json      # with the interpreter that has nvidia-ml-py

Every ``nvml*`` call nvml_facts.collect makes goes through a proxy to the real pynvml; the proxy writes the call
(device handles as their index) and the value, a ctypes structure as a dict of its fields, or the NVMLError text;
with the constants read (``attrs``) and the functions the installed nvidia-ml-py lacks (``absent``). The one
recorder of NVML answers: benchmarks/gpu/host_read.py records through it too.
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
    if hasattr(value, "__dict__") and not callable(value):  # a namespace (the harness's fake NVML answers so)
        return dict((k, plain(v)) for k, v in sorted(vars(value).items()) if not k.startswith("_"))
    return value


class Recorder(object):
    def __init__(self, nvml):
        self._nvml = nvml
        self._handles = []
        self.calls, self.attrs, self.absent = {}, {}, []

    def _arg(self, arg):
        """A device handle as the index it was looked up by (each lookup returns a new handle object)."""
        for handle, index in self._handles:
            if arg is handle:
                return index
        return arg

    def recording(self, source="recorded by benchmarks/gpu/record_nvml.py"):
        """The nvml.json harness.fake_nvml.CallReplayNVML answers from."""
        return {"source": source, "calls": self.calls, "attrs": self.attrs, "absent": sorted(self.absent)}

    def __getattr__(self, name):
        try:
            real = getattr(self._nvml, name)
        except AttributeError:  # an older nvidia-ml-py: the replay lacks it too
            if name not in self.absent:
                self.absent.append(name)
            raise
        if not name.startswith("nvml") or not callable(real):
            if not name.startswith("_") and isinstance(real, (bool, int, float, str)):
                self.attrs[name] = real
            return real

        def call(*args):
            # A call keeps its first answer: the replay gives one answer a call, and a later one (the same call made
            # again outside the reading under record) must not replace what the code recorded was answered.
            key = "%s(%s)" % (name, ",".join(str(self._arg(a)) for a in args))
            try:
                value = real(*args)
            except Exception as exc:  # NVMLError and its subclasses (any module's): recorded, raised as the caller expects
                self.calls.setdefault(key, {"error": str(exc)})
                raise
            if name == "nvmlDeviceGetHandleByIndex":  # a handle is recorded as its index, which the replay answers
                self._handles.append((value, args[0]))
                self.calls.setdefault(key, args[0])
                return value
            self.calls.setdefault(key, plain(value))
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
        json.dump(rec.recording(), fh, indent=1, sort_keys=True)
    print("recorded %d call(s) of %d GPU(s) to %s" % (len(rec.calls), facts["gpu_count"], args.out))
    return 0


if __name__ == "__main__":
    sys.exit(main())

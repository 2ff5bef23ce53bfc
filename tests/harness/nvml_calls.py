# -*- coding: utf-8 -*-
# Copyright: gpuhost.sglang contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""A ``pynvml`` answering from a recording of a real machine's NVML calls (benchmarks/gpu/host_read.py writes it:
nvml-calls.json, each call's function, arguments, answer or error, the constants read and the functions the
machine's nvidia-ml-py lacked). A call the recording never saw raises, naming it: a test cannot pass on an answer
nobody recorded."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import json
from types import SimpleNamespace


class RecordedNVMLError(Exception):
    """An NVMLError as recorded: ``value`` is NVML's return code, str() its text."""

    def __init__(self, value, text):
        Exception.__init__(self, text)
        self.value = value


def _decode(value):
    if isinstance(value, dict) and "_type" in value:
        return SimpleNamespace(**dict((k, _decode(v)) for k, v in value.items() if k != "_type"))
    if isinstance(value, list):
        return [_decode(v) for v in value]
    return value


class CallLogNVML(object):
    """Answers each (function, arguments) with its recorded answers in order (the last one again after that)."""

    def __init__(self, log):
        self._answers = {}
        for entry in log["calls"]:
            self._answers.setdefault((entry["fn"], json.dumps(entry["args"])), []).append(entry)
        self._attrs, self._absent = dict(log.get("attrs") or {}), set(log.get("absent") or [])

    def __getattr__(self, name):
        if name.startswith("_") or name in self._absent:
            raise AttributeError(name)
        if name in self._attrs:
            return self._attrs[name]
        if not name.startswith("nvml"):
            raise AttributeError(name)

        def call(*args):
            key = (name, json.dumps(list(args)))
            entries = self._answers.get(key)
            if not entries:
                raise AssertionError("NVML call not in the recording: %s%s" % key)
            entry = entries.pop(0) if len(entries) > 1 else entries[0]
            if "error" in entry:
                raise RecordedNVMLError(entry["error"]["value"], entry["error"]["text"])
            return _decode(entry["result"])
        return call

# -*- coding: utf-8 -*-
# Copyright: gpuhost.sglang contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""A stand-in ``pynvml`` module for scripts run in a subprocess on a machine without a GPU (put this folder first
on PYTHONPATH). Every nvmlInit starts a new reading; GPUHOST_NVML_STANDIN picks what the readings are:

h200-recorded    the nvidia-h200 machine's own NVML answers (tests/unit/plugins/module_utils/gpu/fixtures/
                 h200_nvml_health_raw.json): at idle for the first reading, after load for every later one
h200-throttles   a healthy H200 for the first reading (harness.fake_nvml.h200_box), thermal throttle from the
                 second (harness.fake_nvml.thermal_throttle_box): GPUs that degrade during a run
replay           every reading answers from the nvml.json GPUHOST_NVML_REPLAY names (a box of tests/fixtures/gpu-boxes,
                 harness.fake_nvml.CallReplayNVML, strict: a call the file does not hold raises UnrecordedCall,
                 naming it); the mode when GPUHOST_NVML_REPLAY is set
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import importlib.util
import json
import os

_HERE = os.path.dirname(os.path.abspath(__file__))
_ROOT = os.path.dirname(os.path.dirname(os.path.dirname(_HERE)))
# by path: the harness package imports Ansible, which the machine this stands in for does not have
_SPEC = importlib.util.spec_from_file_location("gpuhost_fake_nvml", os.path.join(os.path.dirname(_HERE), "fake_nvml.py"))
fake_nvml = importlib.util.module_from_spec(_SPEC)
_SPEC.loader.exec_module(fake_nvml)

NVMLError = fake_nvml.FakeNVMLError


def _recorded(which):
    path = os.path.join(_ROOT, "tests", "unit", "plugins", "module_utils", "gpu", "fixtures", "h200_nvml_health_raw.json")
    with open(path) as fh:
        return fake_nvml.ReplayNVML(json.load(fh)[which])


def _replay():
    return fake_nvml.CallReplayNVML.from_file(os.environ["GPUHOST_NVML_REPLAY"])


_MODES = {
    "h200-recorded": (lambda: _recorded("before"), lambda: _recorded("after_load")),
    "h200-throttles": (fake_nvml.h200_box, fake_nvml.thermal_throttle_box),
    "replay": (_replay, _replay),
}
_MODE = os.environ.get("GPUHOST_NVML_STANDIN", "replay" if os.environ.get("GPUHOST_NVML_REPLAY") else "h200-recorded")
if _MODE not in _MODES:
    raise ImportError("GPUHOST_NVML_STANDIN=%r: allowed %s" % (_MODE, ", ".join(sorted(_MODES))))
_state = {"reads": 0, "box": None}


def nvmlInit():
    first, later = _MODES[_MODE]
    _state["box"] = first() if _state["reads"] == 0 else later()
    _state["reads"] += 1
    _state["box"].nvmlInit()


def __getattr__(name):
    if _state["box"] is None:
        raise NVMLError(1)  # Uninitialized, as pynvml answers before nvmlInit
    return getattr(_state["box"], name)

# -*- coding: utf-8 -*-
# Copyright: gpuhost.sglang contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""DeviceAllow=char-NAME classes against the names the NVIDIA driver registers (/proc/devices)."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import os

import pytest
import yaml

from ansible_collections.gpuhost.sglang.plugins.module_utils.serving.device_classes import (
    DeviceClassError, check_device_classes, parse_proc_devices)

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), *([os.pardir] * 5)))
with open(os.path.join(ROOT, "roles/sglang/vars/device_classes.yml")) as f:
    REGISTRY = yaml.safe_load(f)["sglang_device_class_registry"]
with open(os.path.join(ROOT, "roles/sglang/defaults/main.yml")) as f:
    DEFAULT_CLASSES = yaml.safe_load(f)["sglang_device_classes"]

# /proc/devices of a machine with driver 580.159.04 (open modules), character section as read there; the other
# lines are a stock Debian kernel's.
PROC_580 = """Character devices:
  1 mem
  4 /dev/vc/0
  4 tty
  5 /dev/tty
 10 misc
195 nvidia
195 nvidiactl
226 drm
238 nvidia-uvm
239 nvidia-nvswitch
240 nvidia-nvlink
241 nvidia-caps
242 nvidia-caps-imex-channels

Block devices:
  8 sd
259 blkext
"""


def test_parse_proc_devices():
    p = parse_proc_devices(PROC_580)
    assert p["char"]["nvidia"] == 195 and p["char"]["nvidiactl"] == 195 and p["char"]["nvidia-uvm"] == 238
    assert p["block"]["sd"] == 8
    assert parse_proc_devices("") == {"char": {}, "block": {}}
    with pytest.raises(DeviceClassError):
        parse_proc_devices("Character devices:\nnot a line\n")


def test_defaults_match_what_driver_580_registers():
    res = check_device_classes(DEFAULT_CLASSES, REGISTRY, PROC_580)
    assert res["problems"] == []
    assert res["matched"]["char-nvidia"] == ["nvidia"] and res["matched"]["char-nvidiactl"] == ["nvidiactl"]
    assert res["matched"]["char-nvidia-uvm"] == ["nvidia-uvm"]
    assert res["later"] == ["char-infiniband_verbs"]   # ib_uverbs not loaded on that machine


def test_frontend_name_is_refused_with_the_fix():
    res = check_device_classes(["char-nvidia-frontend", "char-nvidia-uvm"], REGISTRY, PROC_580)
    assert len(res["problems"]) == 1
    msg = res["problems"][0]
    assert "sglang_device_classes: char-nvidia-frontend" in msg
    assert "char-nvidia," in msg and "char-nvidiactl" in msg
    # without /proc/devices (host lacks it) the registry still knows the name is gone
    assert check_device_classes(["char-nvidia-frontend"], REGISTRY, "")["problems"]


def test_unknown_name_checked_against_proc_devices():
    res = check_device_classes(["char-nvidia-ctl", "char-drm", "block-sd"], REGISTRY, PROC_580)
    assert res["matched"] == {"char-drm": ["drm"], "block-sd": ["sd"]}
    assert len(res["problems"]) == 1 and "char-nvidia-ctl matches no character device" in res["problems"][0]
    assert "nvidiactl" in res["problems"][0]
    # no /proc/devices to read: an unknown name cannot be judged and passes
    assert check_device_classes(["char-nvidia-ctl"], REGISTRY, "")["problems"] == []


def test_known_names_absent_before_the_driver_loads_are_fine():
    proc = "Character devices:\n  1 mem\n\nBlock devices:\n  8 sd\n"
    res = check_device_classes(DEFAULT_CLASSES, REGISTRY, proc)
    assert res["problems"] == [] and sorted(res["later"]) == sorted(DEFAULT_CLASSES)


def test_globs_match_like_systemd():
    res = check_device_classes(["char-nvidia*"], REGISTRY, PROC_580)
    assert res["matched"]["char-nvidia*"] == ["nvidia", "nvidia-caps", "nvidia-caps-imex-channels", "nvidia-nvlink",
                                              "nvidia-nvswitch", "nvidia-uvm", "nvidiactl"]
    assert check_device_classes(["nvidia"], REGISTRY, PROC_580)["problems"][0].startswith(
        "sglang_device_classes: 'nvidia' is not a device class")

# -*- coding: utf-8 -*-
# Copyright: gpuhost.sglang contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
from __future__ import absolute_import, division, print_function

__metaclass__ = type

import os

import pytest
import yaml

from ansible_collections.gpuhost.sglang.plugins.plugin_utils.inputs import range_error

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), *[".."] * 4))
with open(os.path.join(ROOT, "roles", "sglang", "vars", "ranges.yml")) as fh:
    RANGES = yaml.safe_load(fh)["sglang_input_rules"]
with open(os.path.join(ROOT, "roles", "sglang", "defaults", "main.yml")) as fh:
    DEFAULTS = yaml.safe_load(fh)


def test_defaults_are_in_range():
    assert range_error(DEFAULTS, RANGES) == ""


@pytest.mark.parametrize("name,value,msg", [
    ("sglang_ready_timeout", -5, "sglang_ready_timeout=-5 is out of range: allowed an integer, 10 to 86400."),
    ("sglang_restart_sec", -1, "sglang_restart_sec=-1 is out of range: allowed an integer, 0 to 3600."),
    ("sglang_start_limit_burst", 0, "sglang_start_limit_burst=0 is out of range: allowed an integer, 1 to 1000."),
    ("sglang_port", 70000, "sglang_port=70000 is out of range: allowed an integer, 1 to 65535."),
    ("sglang_gate_think_tokens", -1,
     "sglang_gate_think_tokens=-1 is out of range: allowed an integer, 0 to 131072 (0 = no thinking retry)."),
    ("sglang_gate_timeout", "soon", "sglang_gate_timeout='soon' is not an integer: allowed an integer, 1 to 86400."),
    ("sglang_restart_sec", True, "sglang_restart_sec=True is not an integer: allowed an integer, 0 to 3600."),
])
def test_one_bad_input_one_message(name, value, msg):
    assert range_error(dict(DEFAULTS, **{name: value}), RANGES) == msg


def test_only_the_first_violation_is_reported():
    msg = range_error(dict(DEFAULTS, sglang_ready_timeout=-5, sglang_restart_sec=-1), RANGES)
    assert msg.startswith("sglang_ready_timeout=-5") and "sglang_restart_sec" not in msg


def test_float_rule_and_open_bounds():
    rules = [{"name": "frac", "type": "float", "min": 0.0, "max": 1.0}, {"name": "n", "min": 2}]
    assert range_error({"frac": "0.5", "n": 2}, rules) == ""
    assert range_error({"frac": 1.5, "n": 2}, rules) == "frac=1.5 is out of range: allowed a number, 0.0 to 1.0."
    assert range_error({"frac": 0.5, "n": 1}, rules) == "n=1 is out of range: allowed an integer, >= 2."
    assert range_error({"frac": 0.5, "n": 2.5}, rules) == "n=2.5 is not an integer: allowed an integer, >= 2."

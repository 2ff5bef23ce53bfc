# -*- coding: utf-8 -*-
# Copyright: gpuhost.sglang contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The engine-CUDA vs host-driver rule, on the real table of roles/sglang/vars/cuda_compat.yml and real version
pairs (drivers as nvidia-smi prints them, CUDA versions as torch.version.cuda holds them)."""
from __future__ import absolute_import, division, print_function

__metaclass__ = type

import os

import pytest
import yaml

from ansible_collections.gpuhost.sglang.plugins.module_utils.gpu import cuda_compat as cc

ROOT = os.path.join(os.path.dirname(__file__), "..", "..", "..", "..", "..")
with open(os.path.join(ROOT, "roles", "sglang", "vars", "cuda_compat.yml")) as fh:
    RULES = yaml.safe_load(fh)["sglang_cuda_driver_rules"]


@pytest.mark.parametrize("text,parsed", [
    ("580.105.08", (580, 105, 8)), ("570.26", (570, 26)), (" 575.51.03\n", (575, 51, 3)),
])
def test_parse_driver(text, parsed):
    assert cc.parse_driver(text) == parsed


@pytest.mark.parametrize("text,parsed", [("13.0", (13, 0)), ("12.8", (12, 8)), (13000, (13, 0)), (12080, (12, 8)),
                                         ("12", (12, 0))])
def test_parse_cuda(text, parsed):
    assert cc.parse_cuda(text) == parsed


@pytest.mark.parametrize("bad", ["", "abc", "580.x", None])
def test_parse_driver_rejects_garbage(bad):
    assert cc.parse_driver(bad) is None


def test_cu130_torch_on_a_570_driver_fails_naming_both():
    res = cc.check("13.0", "570.195.03", "12.8", RULES, what="torch 2.14.1")
    assert not res["ok"] and res["status"] == "too-old"
    assert res["required_driver"] == "580.65.06"
    for part in ("570.195.03", "CUDA 12.8", "torch 2.14.1", "CUDA 13.0", "580.65.06"):
        assert part in res["msg"], part


def test_cu130_torch_on_580_105_passes():
    res = cc.check("13.0", "580.105.08", "13.0", RULES, what="torch 2.14.1")
    assert res["ok"] and res["status"] == "ok" and res["required_driver"] == "580.65.06"


def test_exact_floor_passes_and_one_below_fails():
    assert cc.check("13.0", "580.65.06", None, RULES)["ok"]
    assert not cc.check("13.0", "580.65.05", None, RULES)["ok"]


def test_cpu_torch_is_no_cuda_and_passes_without_a_driver():
    res = cc.check(None, None, None, RULES, what="torch 2.13.0+cpu")
    assert res["ok"] and res["status"] == "no-cuda"
    assert "torch 2.13.0+cpu" in res["msg"] and "no CUDA" in res["msg"]


def test_minor_compat_passes_but_jit_of_newer_minor_fails():
    """12.9 PTX on a 570 driver: the 12.x floor (525.60.13) is met, the 12.9 JIT driver (575.51.03) is not."""
    res = cc.check("12.9", "570.124.06", "12.8", RULES)
    assert not res["ok"]
    assert "525.60.13" in res["msg"] and "575.51.03" in res["msg"] and "JIT" in res["msg"]
    no_jit = cc.check("12.9", "570.124.06", "12.8", RULES, jit=False)
    assert no_jit["ok"] and no_jit["required_driver"] == "525.60.13"


def test_cu128_on_570_26_passes():
    assert cc.check("12.8", "570.26", "12.8", RULES)["ok"]


def test_driver_cuda_version_alone_decides_when_the_driver_version_is_unknown():
    assert cc.check("13.0", None, "13.0", RULES)["ok"]
    res = cc.check("13.0", None, "12.8", RULES)
    assert not res["ok"] and "CUDA 12.8" in res["msg"]


def test_a_driver_reporting_an_older_cuda_fails_even_with_a_new_version_number():
    """nvidia-smi's CUDA Version is the driver's own word: it must cover the engine's CUDA."""
    assert not cc.check("13.0", "580.105.08", "12.9", RULES)["ok"]


def test_no_driver_at_all_for_a_cuda_engine_is_unknown_not_ok():
    res = cc.check("13.0", None, None, RULES, what="torch 2.14.1")
    assert not res["ok"] and res["status"] == "unknown-driver"
    assert "torch 2.14.1" in res["msg"] and "CUDA 13.0" in res["msg"]


def test_a_cuda_release_missing_from_the_table_is_a_clear_error():
    res = cc.check("13.9", "600.1.2", "13.9", RULES)
    assert not res["ok"] and res["status"] == "unknown-cuda"
    assert "13.9" in res["msg"] and "cuda_compat.yml" in res["msg"]
    res = cc.check("14.0", "600.1.2", "14.0", RULES)
    assert not res["ok"] and "14" in res["msg"]


def test_malformed_rules_raise_naming_the_key():
    with pytest.raises(ValueError, match="major_floor"):
        cc.validate_rules({"minor_driver": {}})
    with pytest.raises(ValueError, match="minor_driver.*12.8.*'x'"):
        cc.validate_rules({"major_floor": {"12": "525.60.13"}, "minor_driver": {"12.8": "x"}})


def test_the_shipped_table_is_valid_and_monotonic():
    cc.validate_rules(RULES)
    rows = sorted(RULES["minor_driver"].items(), key=lambda kv: cc.parse_cuda(kv[0]))
    drivers = [cc.parse_driver(row[1]) for row in rows]
    assert drivers == sorted(drivers)
    for major, floor in RULES["major_floor"].items():
        assert RULES["minor_driver"]["%s.0" % major] == floor

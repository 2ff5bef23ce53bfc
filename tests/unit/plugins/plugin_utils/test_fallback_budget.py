from __future__ import absolute_import, division, print_function

__metaclass__ = type

import os

import pytest
import yaml

from ansible_collections.gpuhost.sglang.plugins.plugin_utils.fallback_budget import BudgetError, fallback_budget
from ansible_collections.gpuhost.sglang.plugins.plugin_utils.profiles import candidate_chain, select_profile

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..", "..", ".."))


def _yaml(*parts):
    with open(os.path.join(ROOT, *parts)) as f:
        return yaml.safe_load(f)


THREE = [{}, {"a": 1}, {"b": 2}]


def test_first_deploy_worst_case_is_candidates_times_the_ready_timeout():
    b = fallback_budget(THREE, 3600, 14400, {})
    assert (b["candidates"], b["loads"], b["restore"], b["worst_case_seconds"]) == (3, 3, False, 10800)
    assert b["error"] == "" and b["expected_seconds"] is None
    assert "no last-known-good to restore: a first deploy stops the failing unit" in b["line"]
    assert "3 loads x sglang_ready_timeout=3600 s = 10800 s" in b["line"] and "no measured load time yet" in b["line"]


def test_a_record_adds_the_restore_and_its_measured_load_time():
    b = fallback_budget(THREE, 3600, 14400, {"load_seconds": 1250, "argv": ["x"]})
    assert (b["loads"], b["worst_case_seconds"], b["load_seconds"], b["expected_seconds"]) == (4, 14400, 1250, 5000)
    assert "+ restoring last-known-good" in b["line"] and "measured load time (1250 s): 5000 s" in b["line"]
    assert b["error"] == ""   # exactly at the cap fits


def test_over_the_cap_fails_naming_the_variable_its_value_and_what_is_allowed():
    b = fallback_budget(THREE + [{"c": 3}], 3600, 14400, {"load_seconds": 1250})
    assert b["worst_case_seconds"] == 18000
    assert b["error"].startswith("sglang_fallback_budget_seconds=14400 is below the fallback chain's worst case of 18000 s")
    assert "allowed 0 (no cap) or at least 18000" in b["error"] and "sglang_fallbacks: false" in b["error"]


def test_no_cap_and_no_chain():
    assert fallback_budget(THREE * 10, 3600, 0, {})["error"] == ""
    one = fallback_budget(THREE, 3600, 3600, {}, chain=False)   # sglang_fallbacks: false or a multi-node replica
    assert (one["candidates"], one["worst_case_seconds"], one["error"]) == (1, 3600, "")


@pytest.mark.parametrize("args,msg", [
    (([], 10, 0), "candidates must be a non-empty list"),
    ((THREE, "x", 0), "sglang_ready_timeout='x' is not an integer"),
    ((THREE, 10, -1), "sglang_fallback_budget_seconds=-1 is out of range: allowed an integer, at least 0"),
])
def test_bad_arguments(args, msg):
    with pytest.raises(BudgetError, match=msg.replace("(", r"\(").replace(")", r"\)")):
        fallback_budget(*args)


def test_production_chain_fits_the_default_cap():
    """The production inventory's chain on SM120 with its pinned engine fits the role's default cap with a restore.

    With the profile's former trtllm fallback it was four candidates plus the restore: 18000 s over 14400 s.
    """
    inv = _yaml("inventories", "production", "group_vars", "sglang_servers.yml")
    data = _yaml("roles", "sglang", "vars", "profiles.yml")["sglang_profiles"]
    default = _yaml("roles", "sglang", "defaults", "main.yml")["sglang_fallback_budget_seconds"]
    sel = select_profile("12.0", inv["sglang_model_family"], inv["sglang_version"], data)
    chain = candidate_chain(sel["fallbacks"], inv["sglang_fallback_chain"], inv["sglang_options"])
    b = fallback_budget(chain, inv["sglang_ready_timeout"], inv.get("sglang_fallback_budget_seconds", default),
                        {"load_seconds": 1200})
    assert b["error"] == "", b["error"]
    assert b["loads"] == 3 and b["worst_case_seconds"] == 10800 < default

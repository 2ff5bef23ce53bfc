# -*- coding: utf-8 -*-
# Copyright: gpuhost.sglang contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""What a listen address exposes: SGLang lets /health*, /ready* and /metrics* through without the API key."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import os

import pytest
import yaml

from ansible_collections.gpuhost.sglang.plugins.plugin_utils.exposure import ExposureError, exposure

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..", "..", ".."))
with open(os.path.join(ROOT, "roles", "sglang", "vars", "main.yml")) as _f:
    ENGINES = yaml.safe_load(_f)["sglang_engines"]
SGLANG_PUBLIC = ENGINES["sglang"]["public_path_prefixes"]


@pytest.mark.parametrize("address", ["127.0.0.1", "127.0.1.1", "::1", "localhost", "LOCALHOST"])
def test_loopback_exposes_nothing(address):
    out = exposure(address, 30000, SGLANG_PUBLIC, api_key_set=True)
    assert out == {"beyond_localhost": False, "open_paths": [], "warning": ""}


@pytest.mark.parametrize("address", ["0.0.0.0", "::", "192.0.2.50", "glm5-ct.example.internal"])
def test_beyond_localhost_with_a_key_names_the_paths_that_bypass_it(address):
    out = exposure(address, 30000, SGLANG_PUBLIC, api_key_set=True)
    assert out["beyond_localhost"] is True
    assert out["open_paths"] == ["/health*", "/metrics*", "/ready*"]
    w = out["warning"]
    assert address in w and ":30000" in w
    assert "/health_generate" in w and "runs a generation" in w and "without the API key" in w
    assert "docs/serving.md" in w


def test_beyond_localhost_without_a_key_everything_is_open():
    out = exposure("0.0.0.0", 30000, SGLANG_PUBLIC, api_key_set=False)
    assert out["open_paths"] == ["/*"]
    assert "no sglang_api_key" in out["warning"] and "every endpoint" in out["warning"]


def test_an_engine_without_api_key_support_is_open_on_every_path():
    out = exposure("0.0.0.0", 8000, ENGINES["transformers"].get("public_path_prefixes", ["/"]), api_key_set=False,
                   api_key_supported=False)
    assert out["open_paths"] == ["/*"] and "has no API key" in out["warning"]


def test_the_sglang_data_matches_sglang_0_5_23_auth_source():
    """roles/sglang/vars/main.yml carries the prefixes decide_request_auth() lets through (sglang/srt/utils/auth.py)."""
    assert sorted(SGLANG_PUBLIC) == ["/health", "/metrics", "/ready"]


@pytest.mark.parametrize("args,needle", [
    (("", 30000, ["/health"], True), "sglang_listen_address must be a non-empty string"),
    ((None, 30000, ["/health"], True), "sglang_listen_address must be a non-empty string"),
    (("0.0.0.0", 30000, "/health", True), "public_path_prefixes must be a list of paths starting with /"),
    (("0.0.0.0", 30000, ["health"], True), "public_path_prefixes must be a list of paths starting with /"),
])
def test_bad_input_is_a_clear_error(args, needle):
    with pytest.raises(ExposureError) as exc:
        exposure(*args)
    assert needle in str(exc.value)

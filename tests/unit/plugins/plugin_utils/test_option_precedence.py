# -*- coding: utf-8 -*-
# Copyright: gpuhost.sglang contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The one precedence of server options (plugins/plugin_utils/profiles.py merge_options): defaults < profile <
sglang_options < candidate < managed, names normalized, and no other place in the collection merging them on its own."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import os
import re

import pytest
import yaml

from ansible_collections.gpuhost.sglang.plugins.filter.server import sglang_managed_options, sglang_option_sets
from ansible_collections.gpuhost.sglang.plugins.filter.tune import tune_merge
from ansible_collections.gpuhost.sglang.plugins.plugin_utils.profiles import (
    OPTION_LAYERS, ProfileError, merge_options, option_sets)

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..", "..", ".."))


@pytest.mark.parametrize("low,high", [(a, b) for i, a in enumerate(OPTION_LAYERS) for b in OPTION_LAYERS[i + 1:]])
def test_each_layer_wins_over_every_lower_one(low, high):
    layers = dict((name, {"x": "from-" + name}) for name in (low, high))
    keyword = {"defaults": "defaults", "profile": "profile", "sglang_options": "host", "candidate": "candidate",
               "managed": "managed"}
    assert merge_options(**dict((keyword[name], layers.get(name)) for name in OPTION_LAYERS)) == {"x": "from-" + high}


def test_the_layers_add_up_and_a_spelling_in_a_higher_layer_replaces_a_lower_one():
    merged = merge_options({"tp-size": 8, "mem-fraction-static": 0.8}, {"--tp_size": 4}, {"cuda-graph-max-bs": 0},
                           {"port": 30000})
    assert merged == {"tp-size": 4, "mem-fraction-static": 0.8, "cuda-graph-max-bs": 0, "port": 30000}


def test_two_spellings_within_one_layer_name_the_layer():
    with pytest.raises(ProfileError, match=r"sglang_options: option 'tp-size' is given twice \(as 'tp-size' and 'tp_size'\)"):
        merge_options({}, {"tp-size": 4, "tp_size": 8})


@pytest.mark.parametrize("args,message", [
    (([], None), r"profile options must be a mapping \{option: value\}, got list"),
    (({}, "tp-size=4"), r"sglang_options options must be a mapping \{option: value\}, got str"),
    (({}, {"-bad": 1}), r"invalid option name '-bad'"),
])
def test_bad_input_is_named(args, message):
    with pytest.raises(ProfileError, match=message):
        merge_options(*args)


def test_option_sets_merge_each_candidate_in_order():
    sets = option_sets([{}, {"cuda-graph-max-bs": 0}, {"port": 1}], {"a": 1}, {"a": 2}, {"port": 30000})
    assert sets == [{"a": 2, "port": 30000}, {"a": 2, "cuda-graph-max-bs": 0, "port": 30000}, {"a": 2, "port": 30000}]
    with pytest.raises(Exception, match="candidates must be a list of option mappings, got dict"):
        sglang_option_sets({"a": 1})


def test_tune_merge_is_the_same_precedence():
    assert tune_merge({"a": 2, "tp_size": 4}, {"a": 1, "tp-size": 8, "b": 1}, {"port": 1}) == \
        merge_options({"a": 1, "tp-size": 8, "b": 1}, {"a": 2, "tp_size": 4}, None, {"port": 1})


def test_no_task_merges_server_options_on_its_own():
    """The precedence lives in merge_options only: no task file combines sglang_options with other layers."""
    found = []
    for top in ("roles", "playbooks", os.path.join("tests", "integration", "files")):
        for dirpath, _dirs, files in os.walk(os.path.join(ROOT, top)):
            for name in files:
                if name.endswith((".yml", ".yaml", ".j2")):
                    path = os.path.join(dirpath, name)
                    with open(path) as fh:
                        text = fh.read()
                    if re.search(r"combine\([^)]*sglang_(managed_)?options|sglang_profile_options\s*\|\s*combine", text):
                        found.append(os.path.relpath(path, ROOT))
    assert found == []


def engines():
    """The serving role's engine data (roles/sglang/vars/main.yml sglang_engines)."""
    with open(os.path.join(ROOT, "roles", "sglang", "vars", "main.yml")) as fh:
        return yaml.safe_load(fh)["sglang_engines"]


def test_the_managed_layer_from_the_engines_data():
    sglang, transformers = engines()["sglang"], engines()["transformers"]
    got = sglang_managed_options(sglang, "0.0.0.0", "30000", "/srv/models/m", "m")
    assert list(got.items()) == [("host", "0.0.0.0"), ("port", 30000), ("model-path", "/srv/models/m"),
                                 ("served-model-name", "m")]
    assert sglang_managed_options(sglang, "::", 30001, "/m") == {"host": "::", "port": 30001, "model-path": "/m"}
    # transformers serve takes the model as a positional argument and names it by its path
    assert sglang_managed_options(transformers, "127.0.0.1", 8000, "/m", "m") == {"host": "127.0.0.1", "port": 8000}


def test_a_replicas_own_options_come_first_and_the_roles_win():
    replica = {"nnodes": 2, "node-rank": 1, "dist-init-addr": "10.0.0.1:5000", "port": 1}
    got = sglang_managed_options(engines()["sglang"], "10.0.0.2", 30000, "/m", "", replica)
    assert list(got.items()) == [("nnodes", 2), ("node-rank", 1), ("dist-init-addr", "10.0.0.1:5000"), ("port", 30000),
                                 ("host", "10.0.0.2"), ("model-path", "/m")]
    assert replica["port"] == 1   # the replica's entry is not changed


def test_a_port_that_is_no_number_is_a_filter_error():
    from ansible.errors import AnsibleFilterError
    with pytest.raises(AnsibleFilterError, match="sglang_managed_options: invalid literal"):
        sglang_managed_options(engines()["sglang"], "::", "http", "/m")

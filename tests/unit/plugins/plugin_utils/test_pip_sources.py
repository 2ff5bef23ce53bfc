# -*- coding: utf-8 -*-
# Copyright: gpuhost.sglang contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""pip's package sources as options (plugins/plugin_utils/pip_sources.py): the serving and router roles' venvs."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

from ansible_collections.gpuhost.sglang.plugins.filter.serving import FilterModule

ARGS = FilterModule().filters()["pip_source_args"]


def test_pips_defaults_are_no_options():
    assert ARGS(False) == [] and ARGS(False, "", "", "") == []


def test_each_source_in_pips_order():
    assert ARGS(True, "/opt/wheelhouse") == ["--no-index", "--find-links", "/opt/wheelhouse"]
    assert ARGS(False, "", "https://index.example/simple", "https://extra.example/simple") == [
        "--index-url", "https://index.example/simple", "--extra-index-url", "https://extra.example/simple"]
    assert ARGS(True, "/w", "https://i.example/simple", "https://x.example/simple") == [
        "--no-index", "--find-links", "/w", "--index-url", "https://i.example/simple", "--extra-index-url",
        "https://x.example/simple"]


def test_no_index_as_ansible_reads_a_boolean():
    assert ARGS("yes", "/w") == ["--no-index", "--find-links", "/w"]
    assert ARGS("false", "/w") == ["--find-links", "/w"]

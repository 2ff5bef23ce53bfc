# -*- coding: utf-8 -*-
# Copyright: gpuhost.sglang contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The serving deploy's candidates built in one place (plugins/plugin_utils/candidates.py): the option layers
through one merge, every option set through the server_args module in one call (run as Ansible runs it, against the
stand-in sglang parser of tests/unit/plugins/modules/fake_sglang), each unit's ExecStart the very argv the parser
checked (one renderer), and the parser skipped only for the configuration alone when it is already proven."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import os
import sys

import pytest

from ansible_collections.gpuhost.sglang.plugins.module_utils.serving.server_args import systemd_exec
from ansible_collections.gpuhost.sglang.plugins.plugin_utils import candidates as c
from ansible_collections.gpuhost.sglang.tests import harness

FAKE_SGLANG = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "modules", "fake_sglang")
PREFIX = ["/opt/sglang/venv/bin/python", "/opt/sglang/bin/gpuhost-launch.py", "-m", "sglang.launch_server"]
NEG = {"negatable": [{"since": "9.9", "until": "10.0", "options": ["enable-dsa-fused-indexer"], "evidence": "the stand-in"}]}


@pytest.fixture
def fake_python(tmp_path):
    exe = tmp_path / "python"
    exe.write_text("#!/bin/sh\nPYTHONPATH=%s exec %s \"$@\"\n" % (FAKE_SGLANG, sys.executable))
    exe.chmod(0o755)
    return str(exe)


def build(**over):
    b = {"profile": {"options": {"tp-size": 8, "mem-fraction-static": 0.9},
                     "fallbacks": [{"name": "small", "options": {"cuda-graph-max-bs-decode": 16}, "evidence": "e"}],
                     "lessons": [{"class": "cuda_graph_capture", "name": "graphs off", "options": {"cuda-graph-max-bs-prefill": 0},
                                  "evidence": "e"}]},
         "defaults": {"disable-shared-experts-fusion": True}, "options": {"tp_size": 2, "enable-dsa-fused-indexer": False},
         "fallback_chain": [{"mem-fraction-static": 0.8}], "managed": {"model-path": "/m"}, "prefix": PREFIX,
         "flags": NEG, "engine_version": "9.9.1", "python": "/nonexistent", "unit_template": "sglang.service.j2"}
    b.update(over)
    return c.check_build(b)


def unit(exec_start):
    return "[Service]\nExecStart=%s\n" % exec_start


def test_layers_merge_once_in_their_precedence_and_every_candidate_renders_once():
    entries = c.plan(build())
    # the configuration, the host's chain, the profile's fallback; positions 1 and 2 also as they run after a crash
    assert [(e["position"], e["learned"]) for e in entries] == [
        (0, []), (1, []), (1, ["cuda_graph_capture"]), (2, []), (2, ["cuda_graph_capture"])]
    first = entries[0]["merged"]
    # defaults < profile < sglang_options (tp_size is tp-size) < candidate < managed
    assert first == {"disable-shared-experts-fusion": True, "tp-size": 2, "mem-fraction-static": 0.9,
                     "enable-dsa-fused-indexer": False, "model-path": "/m"}
    assert entries[2]["merged"]["mem-fraction-static"] == 0.8 and entries[2]["merged"]["cuda-graph-max-bs-prefill"] == 0
    assert entries[0]["argv"] == PREFIX + [
        "--disable-shared-experts-fusion", "--no-enable-dsa-fused-indexer", "--mem-fraction-static", "0.9", "--model-path",
        "/m", "--tp-size", "2"]
    assert [e["options"] for e in entries][:2] == [{}, {"mem-fraction-static": 0.8}]


def test_fallbacks_off_and_a_replica_build_the_configuration_alone():
    assert len(c.plan(build(fallbacks=False))) == 1
    assert len(c.plan(build(), one=True)) == 1


def test_the_argv_in_each_unit_is_the_argv_the_parser_checked(fake_python):
    """One renderer: one server_args call checks every set, and answers the very argv each unit's ExecStart runs."""
    b = build(python=fake_python)
    entries = c.plan(b)
    res = harness.run_module("server_args", c.parser_args(b, entries), timeout=120)
    assert not res.get("failed"), res
    assert c.check_parsed(b, entries, res) == []
    cands = c.finish(b, entries, unit)
    assert len(res["results"]) == len(cands) == 5
    for cand, checked in zip(cands, res["results"]):
        assert cand["argv"] == PREFIX + checked["argv"]
        assert cand["unit_content"] == unit(systemd_exec(PREFIX + checked["argv"]))
        assert "merged" not in cand and "--no-enable-dsa-fused-indexer" in checked["argv"]


def test_flag_data_that_misses_a_negation_the_parser_has_is_refused(fake_python):
    """false would leave the option out (the engine's default on) while the parser has --no-x: an error, not a guess."""
    b = build(python=fake_python, flags={}, fallbacks=False)
    entries = c.plan(b)
    assert "--no-enable-dsa-fused-indexer" not in entries[0]["argv"]
    res = harness.run_module("server_args", c.parser_args(b, entries), timeout=120)
    with pytest.raises(c.BuildError, match=r"--enable-dsa-fused-indexer: false leaves it out of the command line, but "
                                           r"this parser has --no-enable-dsa-fused-indexer"):
        c.check_parsed(b, entries, res)


def test_an_answer_for_another_argv_is_refused():
    b = build(fallbacks=False)
    entries = c.plan(b)
    res = {"results": [{"argv": ["--tp-size", "2"]}]}
    with pytest.raises(c.BuildError, match=r"candidate 0: the parser checked \['--tp-size', '2'\], the unit would run"):
        c.check_parsed(b, entries, res)
    with pytest.raises(c.BuildError, match="answered 0 of 1 option sets"):
        c.check_parsed(b, entries, {"results": []})


def test_only_the_configuration_alone_skips_the_parser_when_already_proven():
    b = build(fallbacks=False)
    argv = c.plan(b)[0]["argv"]
    assert c.needs_parser(b, c.plan(b))
    same = build(fallbacks=False, lkg={"argv": argv, "engine_version": "9.9.1"})
    assert not c.needs_parser(same, c.plan(same))
    other_version = build(fallbacks=False, lkg={"argv": argv, "engine_version": "9.9.0"})
    assert c.needs_parser(other_version, c.plan(other_version))
    accepted = build(fallbacks=False, validated_argvs=[argv[len(PREFIX):]])
    assert not c.needs_parser(accepted, c.plan(accepted))
    chain = build(lkg={"argv": argv, "engine_version": "9.9.1"})
    assert c.needs_parser(chain, c.plan(chain))


def test_renamed_options_are_named_before_any_parser():
    b = build(options={"nsa-decode-backend": "trtllm"}, engine_version="0.5.23",
              flags={"renames": [{"old": "nsa-decode-backend", "new": "dsa-decode-backend", "since": "0.5.23", "evidence": "e"}]})
    with pytest.raises(c.BuildError, match="sglang_options: --nsa-decode-backend was renamed: use --dsa-decode-backend"):
        c.plan(b)


@pytest.mark.parametrize("over,message", [
    ({"prefix": None}, r"build\.prefix is required"),
    ({"options": ["tp-size"]}, r"build\.options must be a dict, got list"),
    ({"colour": 1}, r"unknown key\(s\) colour"),
    ({"fallback_chain": [["x"]]}, r"sglang_fallback_chain\[0\] must be a mapping"),
    ({"fallback_lessons": {"oom": {"x": 1}}}, r"sglang_fallback_lessons: class 'oom': allowed"),
])
def test_bad_input_names_the_key(over, message):
    with pytest.raises(c.BuildError, match=message):
        c.plan(build(**over))

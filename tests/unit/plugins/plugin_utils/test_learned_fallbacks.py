# -*- coding: utf-8 -*-
# Copyright: gpuhost.sglang contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Fallbacks that learn: a later candidate runs with its own change plus what each earlier failure's class taught
(profiles.py learned_chain builds every such option set, deploy.py DeployTransaction picks the one for the classes
it has seen). Checked over every order of the failure classes the chain reacts to, on a fake box whose server fails
by its options, the way the reference box failed: CUDA graphs on crash in capture, a backend gives NaN."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import itertools
import json
import os

import pytest
import yaml

from ansible_collections.gpuhost.sglang.plugins.plugin_utils import profiles
from ansible_collections.gpuhost.sglang.plugins.plugin_utils.deploy import (
    DeployFailed, DeployTransaction, group_candidates)
from ansible_collections.gpuhost.sglang.tests.harness.fake_deploy_host import FakeHost, unit_text

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..", "..", ".."))
with open(os.path.join(ROOT, "roles", "sglang", "vars", "profiles.yml")) as fh:
    DATA = yaml.safe_load(fh)["sglang_profiles"]

# one lesson per class the chain reacts to; each sets its own option (what the box's failure of that class needs)
LESSONS = [
    {"class": "cuda_graph_capture", "name": "no-cuda-graph", "options": {"cuda-graph-backend-decode": "disabled"},
     "evidence": "t"},
    {"class": "nan", "name": "triton-prefill", "options": {"dsa-prefill-backend": "triton_sparse_mla"}, "evidence": "t"},
    {"class": "unsupported_arch", "name": "triton-attention", "options": {"attention-backend": "triton"}, "evidence": "t"},
]
CLASSES = [lesson["class"] for lesson in LESSONS]


def box(order):
    """A box that fails a server with the first class of ``order`` whose lesson its options lack (graphs on: a
    capture crash; the flashinfer prefill: NaN; ...), and serves one that has them all."""
    def behave(options):
        for cls in order:
            need = [lesson for lesson in LESSONS if lesson["class"] == cls][0]["options"]
            if any(options.get(k) != v for k, v in need.items()):
                return "fail_start", cls
        return "ok", None
    return behave


def build(chain, behave, lessons=None, host_options=None, host_lessons=None):
    """The role's part: every option set of the learned chain, rendered (argv, unit) as deploy.yml does."""
    lessons = LESSONS if lessons is None else lessons
    flat = []
    for entry in profiles.learned_chain(chain, lessons, host_options, host_lessons):
        options = profiles.merge_options(None, host_options, entry["options"])
        argv = ["serve"] + ["--%s=%s" % kv for kv in sorted(options.items())]
        state, cls = behave(options)
        flat.append(dict(entry, options=options, argv=argv,
                         unit_content=unit_text(json.dumps(options, sort_keys=True), state, cls=cls)))
    return group_candidates(flat)


def deploy(cands):
    host = FakeHost()
    host.serve(unit_text("old", "ok"))
    s = {"unit": host.unit, "unit_dir": host.unit_dir, "env_file": host.env_file, "lkg_dir": host.lkg_dir,
         "health_url": "http://127.0.0.1:30000/health", "base_url": "http://127.0.0.1:30000", "candidates": cands,
         "ready_timeout": 300, "probes": True, "lkg_update": True, "host": "h1",
         "meta": {"engine": "sglang", "engine_version": "0.5.23"}, "timeout_start_sec_min": 300}
    try:
        return DeployTransaction(host, s).run(), host
    except DeployFailed as exc:
        return exc.result, host


def orders():
    """Every order of every non-empty set of the classes the chain reacts to."""
    for n in range(1, len(CLASSES) + 1):
        yield from itertools.permutations(CLASSES, n)


@pytest.mark.parametrize("order", list(orders()), ids="-".join)
def test_every_order_of_failure_classes_learns_each_lesson(order):
    # the chain's own changes: one marker option per candidate, so that each candidate's own change is visible
    chain = [{}] + [{"own-change": i} for i in range(1, len(order) + 1)]
    res, _host = deploy(build(chain, box(order)))
    rows = res["attempts"]
    assert res["passed_candidate"] == len(order), rows
    for i, row in enumerate(rows):
        taught = order[:i]
        # what every earlier failure taught, kept, and nothing else
        for lesson in LESSONS:
            for k, v in lesson["options"].items():
                assert (row["options"].get(k) == v) == (lesson["class"] in taught), (i, order, row)
        # and the candidate's own change
        assert row["options"].get("own-change") == (i or None), (i, row)
        if i < len(order):
            assert (row["outcome"], row["class"]) == ("failed", order[i]), rows
    assert rows[-1]["outcome"] == "passed"
    assert rows[-1]["lessons"] == [lesson["name"] for lesson in LESSONS if lesson["class"] in order], rows[-1]


@pytest.mark.parametrize("order", list(itertools.permutations(CLASSES, 2)), ids="-".join)
def test_a_class_that_teaches_nothing_keeps_what_was_learned(order):
    """startup_failure has no lesson: the candidate after it runs with what the classes before it taught."""
    chain = [{}, {"own-change": 1}, {"own-change": 2}, {"own-change": 3}]
    rigged = box(order)

    def behave(options):
        state, cls = rigged(options)
        if state == "ok" and options.get("own-change") == 2:
            return "fail_start", "startup_failure"
        return state, cls
    res, _host = deploy(build(chain, behave))
    rows = res["attempts"]
    assert [(r["outcome"], r.get("class")) for r in rows] == [
        ("failed", order[0]), ("failed", order[1]), ("failed", "startup_failure"), ("passed", None)], rows
    assert rows[3]["lessons"] == [lesson["name"] for lesson in LESSONS if lesson["class"] in order]


def test_a_candidate_that_learned_into_a_failed_command_line_is_skipped():
    """With what it learned, candidate 2 is candidate 1's command line, which failed: not loaded again."""
    chain = [{}, {"own-change": 1}, {"own-change": 1, "dsa-prefill-backend": "triton_sparse_mla"}]

    def behave(options):
        if options.get("dsa-prefill-backend") != "triton_sparse_mla":
            return "fail_start", "nan"
        return "fail_start", "startup_failure"
    res, host = deploy(build(chain, behave))
    rows = res["attempts"]
    assert [(r["outcome"], r.get("class")) for r in rows] == [
        ("failed", "nan"), ("failed", "startup_failure"), ("skipped", "same_as_failed")], rows
    assert rows[1]["options"] == rows[2]["options"] == {"own-change": 1, "dsa-prefill-backend": "triton_sparse_mla"}
    assert len([o for o, _d in host.log if o == "restart"]) == 2   # two candidates; the rollback restores
    assert "Rolled back" in res["msg"]


def test_sm120_graph_crash_then_nan_runs_graphs_off_with_triton_prefill():
    """The review's gap on the target box: "graphs off + triton prefill" is what the chain tries once graphs crashed
    and the next candidate gave NaN, and the first candidate already has graphs off (the operators' known-good launch)."""
    sel = profiles.select_profile("12.0", "glm-dsa", "0.5.23", DATA)
    assert sel["options"]["cuda-graph-backend-decode"] == "disabled" == sel["options"]["cuda-graph-backend-prefill"]
    # a host that turned graphs on in its own chain: its candidate crashes in capture, the next learns from it
    chain = profiles.candidate_chain(sel["fallbacks"], [{"cuda-graph-backend-decode": "full"}], {})
    assert chain == [{}, {"cuda-graph-backend-decode": "full"}, {"dsa-prefill-backend": "triton_sparse_mla"}]

    def behave(options):
        if options["cuda-graph-backend-decode"] != "disabled":
            return "fail_start", "cuda_graph_capture"
        if options["dsa-prefill-backend"] == "flashinfer_sparse_mla":
            return "fail_start", "nan"
        return "ok", None
    flat = []
    for entry in profiles.learned_chain(chain, sel["lessons"], {}, {}):
        options = profiles.merge_options(sel["options"], {}, entry["options"])
        state, cls = behave(options)
        flat.append(dict(entry, options=options, argv=["serve", json.dumps(options, sort_keys=True)],
                         unit_content=unit_text(json.dumps(options, sort_keys=True), state, cls=cls)))
    res, _host = deploy(group_candidates(flat))
    rows = res["attempts"]
    assert [(r["outcome"], r.get("class")) for r in rows] == [("failed", "nan"), ("failed", "cuda_graph_capture"),
                                                              ("passed", None)], rows
    assert rows[2]["options"]["cuda-graph-backend-decode"] == "disabled"
    assert rows[2]["options"]["dsa-prefill-backend"] == "triton_sparse_mla"


def test_profile_lessons_leave_what_the_host_pinned_and_host_lessons_may_change_it():
    lessons = [LESSONS[0]]
    pinned = {"cuda-graph-backend-decode": "full"}
    flat = profiles.learned_chain([{}, {"x": 1}], lessons, pinned, {})
    assert [e["options"] for e in flat] == [{}, {"x": 1}]   # the profile's lesson would change a pinned option
    flat = profiles.learned_chain([{}, {"x": 1}], lessons, pinned, {"cuda_graph_capture": {"cuda_graph_backend_decode": "disabled"}})
    assert flat[2] == {"position": 1, "learned": ["cuda_graph_capture"], "lessons": ["sglang_fallback_lessons.cuda_graph_capture"],
                       "options": {"x": 1, "cuda-graph-backend-decode": "disabled"}}


@pytest.mark.parametrize("host_lessons,needle", [
    ({"graphs": {"x": 1}}, "sglang_fallback_lessons: class 'graphs': allowed "),
    (["x"], "sglang_fallback_lessons must be a mapping"),
    ({"nan": ["x"]}, "sglang_fallback_lessons.nan must be a mapping"),
])
def test_bad_host_lessons_name_the_variable(host_lessons, needle):
    with pytest.raises(profiles.ProfileError) as exc:
        profiles.learned_chain([{}], [], {}, host_lessons)
    assert needle in str(exc.value)


def test_the_classes_a_lesson_may_name_are_the_readiness_and_canary_classes():
    from ansible_collections.gpuhost.sglang.plugins.module_utils.serving.ready import DEFAULT_SIGNATURES
    assert set(profiles.LEARNED_CLASSES) == set(sig["class"] for sig in DEFAULT_SIGNATURES) | {"incoherent"}
    assert list(profiles.LEARNED_CLASSES) == sorted(profiles.LEARNED_CLASSES)


def test_grouping_refuses_entries_out_of_order():
    with pytest.raises(ValueError, match="comes before position 1"):
        group_candidates([{"position": 0, "learned": [], "argv": []}, {"position": 1, "learned": ["nan"], "argv": []}])
    assert group_candidates([{"argv": ["a"]}, {"argv": ["b"]}]) == [{"argv": ["a"]}, {"argv": ["b"]}]

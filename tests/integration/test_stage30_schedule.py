# Copyright: (c) 2026, gpuhost.sglang contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Stage 30's xdist scheduler (tests/conftest.py): the test-host files grouped by the tag they use (one group per
tag, the caller's tag for a file that reads it), a file that says XDIST_SCOPE = "test" split per test, the units
handed out longest first by tests/stages/pytest-seconds, and every name in that file still a file or a group."""
from __future__ import annotations

import os
import sys
import types

import pytest

from ansible_collections.gpuhost.sglang.tests import harness

sys.path.insert(0, os.path.join(harness.ROOT, "tests"))
import conftest  # noqa: E402  pylint: disable=import-error,wrong-import-position

INTEGRATION = "tests/integration/"


def group(path, monkeypatch, tag=None):
    if tag is None:
        monkeypatch.delenv("GPUHOST_TESTHOST_TAG", raising=False)
    else:
        monkeypatch.setenv("GPUHOST_TESTHOST_TAG", tag)
    monkeypatch.setattr(conftest, "_groups", {})
    return conftest.file_group(harness.ROOT, INTEGRATION + path)


def test_testhost_files_are_grouped_by_their_tag(monkeypatch):
    assert group("test_testhosts.py", monkeypatch) == ("testhosts:it", False)
    assert group("test_serving_unit_sandbox.py", monkeypatch) == ("testhosts:iu", False)
    # the two files of tag im share it: one group, one after the other
    assert group("test_replica_restart_hosts.py", monkeypatch) == ("testhosts:im", False)
    assert group("test_multinode_replica.py", monkeypatch) == ("testhosts:im", False)
    # a file that reads GPUHOST_TESTHOST_TAG runs in the group of the caller's tag
    assert group("test_multinode_replica.py", monkeypatch, tag="kb") == ("testhosts:kb", False)
    assert group("test_tune_sandbox.py", monkeypatch, tag="kb") == ("testhosts:kb", False)
    assert group("test_replica_restart_hosts.py", monkeypatch, tag="kb") == ("testhosts:im", False)


def test_a_file_without_module_state_is_split_per_test(monkeypatch):
    assert group("test_serving_bench_playbook.py", monkeypatch) == (INTEGRATION + "test_serving_bench_playbook.py", True)
    assert group("test_fleet_roll.py", monkeypatch) == (INTEGRATION + "test_fleet_roll.py", False)


def test_every_figure_names_a_file_or_a_group(monkeypatch):
    monkeypatch.delenv("GPUHOST_TESTHOST_TAG", raising=False)
    monkeypatch.setattr(conftest, "_groups", {})
    seconds = conftest.scope_seconds()
    assert len(seconds) >= 10
    groups = set()
    for base in ("tests/unit", "tests/integration"):
        for root, _dirs, files in os.walk(os.path.join(harness.ROOT, base)):
            for name in files:
                if name.startswith("test_") and name.endswith(".py"):
                    rel = os.path.relpath(os.path.join(root, name), harness.ROOT)
                    groups.add(conftest.file_group(harness.ROOT, rel)[0])
    assert not set(seconds) - groups, "tests/stages/pytest-seconds names what is no file or group"


class FakeNode:
    shutting_down = False

    def __init__(self, name):
        self.name, self.sent = name, []
        self.gateway = types.SimpleNamespace(id=name)

    def send_runtest_some(self, indexes):
        self.sent.append(indexes)

    def shutdown(self):
        self.shutting_down = True


def test_units_go_out_longest_first(tmp_path, monkeypatch):
    """The real xdist scheduler with two fake workers: the long one-test file (xdist alone would send the files
    with the most tests first) and the heaviest group go out first, the split file's tests after the listed ones."""
    pytest.importorskip("xdist")
    secs = tmp_path / "seconds"
    secs.write_text("# comment\ntests/integration/test_accuracy_engine.py 413\ntesthosts:iu 508\n"
                    "tests/integration/test_serving_bench_playbook.py 40\n")
    monkeypatch.setattr(conftest, "SECONDS", str(secs))
    monkeypatch.setattr(conftest, "_groups", {})
    collection = ["tests/unit/test_many.py::test_%d" % i for i in range(5)] + [
        "tests/integration/test_accuracy_engine.py::test_gate",
        "tests/integration/test_serving_bench_playbook.py::test_a",
        "tests/integration/test_serving_bench_playbook.py::test_b",
        "tests/integration/test_serving_unit_sandbox.py::test_x",
        "tests/integration/test_serving_unit_sandbox.py::test_y",
        "tests/integration/test_testhosts.py::test_z"]
    config = types.SimpleNamespace(rootpath=harness.ROOT, option=types.SimpleNamespace(loadscopereorder=True),
                                   getoption=lambda name: "loadgroup", getvalue=lambda name: ["2*popen"])
    sched = conftest.pytest_xdist_make_scheduler(config, None)
    nodes = [FakeNode("gw0"), FakeNode("gw1")]
    for node in nodes:
        sched.add_node(node)
    for node in nodes:
        sched.add_node_collection(node, collection)
    sched.schedule()
    first = [collection[i] for i in nodes[0].sent[0]]
    second = [collection[i] for i in nodes[1].sent[0]]
    assert first == ["tests/integration/test_serving_unit_sandbox.py::test_x",
                     "tests/integration/test_serving_unit_sandbox.py::test_y"]
    assert second == ["tests/integration/test_accuracy_engine.py::test_gate"]
    # then (a worker with two or fewer tests left gets more) the split file's tests, one unit each
    queued = [collection[i] for node in nodes for batch in node.sent[1:] for i in batch]
    assert queued[:1] == ["tests/integration/test_serving_bench_playbook.py::test_a"]

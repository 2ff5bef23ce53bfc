# -*- coding: utf-8 -*-
# Copyright: gpuhost.sglang contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The deploy transaction's host interface (plugins/plugin_utils/deploy_host.py) against what the transaction calls
and against its three implementations; the replica phase list in one place."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import inspect
import os
import re

import pytest
import yaml

from ansible_collections.gpuhost.sglang.plugins.action.serving_deploy import ModuleHost
from ansible_collections.gpuhost.sglang.plugins.plugin_utils import deploy
from ansible_collections.gpuhost.sglang.plugins.plugin_utils.deploy_host import DeployHost, ReplicaHost
from ansible_collections.gpuhost.sglang.plugins.plugin_utils.tune_loop import LauncherHost
from ansible_collections.gpuhost.sglang.tests.harness.fake_deploy_host import FakeHost

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..", "..", ".."))
IMPLEMENTATIONS = [(ModuleHost, ReplicaHost), (FakeHost, ReplicaHost), (LauncherHost, DeployHost)]


def called_operations():
    """Every operation deploy.py calls on its host (self.h.X in the classes, host.X in prove_lkg)."""
    with open(deploy.__file__) as fh:
        text = fh.read()
    return set(re.findall(r"\bself\.h\.(\w+)\(", text)) | set(re.findall(r"\bhost\.(\w+)\(", text))


def test_the_interface_is_what_the_transaction_calls():
    assert called_operations() == set(ReplicaHost.__abstractmethods__)
    # a single host's deploy needs no replica operation
    assert set(ReplicaHost.__abstractmethods__) - set(DeployHost.__abstractmethods__) == {
        "sleep", "reload", "unit_state", "rank_state", "wait_port"}


@pytest.mark.parametrize("impl,base", IMPLEMENTATIONS, ids=lambda x: x.__name__)
def test_each_host_implements_every_operation_with_the_same_signature(impl, base):
    assert issubclass(impl, base)
    assert not impl.__abstractmethods__, "%s leaves %s abstract" % (impl.__name__, sorted(impl.__abstractmethods__))
    for name in sorted(base.__abstractmethods__):
        want = inspect.signature(getattr(base, name))
        got = inspect.signature(getattr(impl, name))
        assert list(got.parameters.items()) == list(want.parameters.items()), "%s.%s%s, the interface says %s%s" % (
            impl.__name__, name, got, name, want)


def test_a_host_missing_an_operation_cannot_be_made():
    class Partial(DeployHost):
        def inspect(self):
            return {}
    with pytest.raises(TypeError, match="abstract"):
        Partial()  # pylint: disable=abstract-class-instantiated


def test_the_replica_phases_are_written_once():
    """deploy.py REPLICA_PHASES is the list; the role and the interrupt test's play loop over the filter that
    returns it, so no second copy can drift."""
    from ansible_collections.gpuhost.sglang.plugins.filter.server import FilterModule
    assert FilterModule().filters()["sglang_replica_phases"]("g") == list(deploy.REPLICA_PHASES)
    for path in ("roles/sglang/tasks/deploy.yml", "tests/integration/files/interrupt/replica.yml"):
        with open(os.path.join(ROOT, path)) as fh:
            tasks = yaml.safe_load(fh)
        if isinstance(tasks[0], dict) and "tasks" in tasks[0]:
            tasks = tasks[0]["tasks"]
        loops = [t["loop"] for t in tasks if (t.get("loop_control") or {}).get("loop_var") == "__sglang_phase"]
        assert len(loops) == 1 and "gpuhost.sglang.sglang_replica_phases" in loops[0], (path, loops)

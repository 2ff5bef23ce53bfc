# -*- coding: utf-8 -*-
# Copyright: gpuhost.sglang contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""playbooks/tune.yml's "host untouched" check, evaluated as Ansible evaluates the assert: a served file missing
before or after the campaign fails it (a renamed record file must not pass because both sides read "absent")."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import json
import os
import subprocess
import sys

import pytest
import yaml

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..", ".."))


def verify_task():
    with open(os.path.join(ROOT, "playbooks", "tune.yml")) as fh:
        plays = yaml.safe_load(fh)
    tasks = [leaf for play in plays for task in play.get("tasks", [])
             for leaf in (task.get("block", []) + task.get("rescue", []) + task.get("always", []) or [task])]
    found = [t for t in tasks if "byte-identical" in t.get("name", "")]
    assert len(found) == 1, [t.get("name") for t in tasks]
    return found[0]["ansible.builtin.assert"]


def inspected(checksums):
    """serving_unit inspect's answer: files by path, None for a missing one."""
    return {"files": dict(("/etc/sglang/f%d" % i, c) for i, c in enumerate(checksums))}


CASES = {"same": (["a", "b", "c"], ["a", "b", "c"]), "changed": (["a", "b", "c"], ["a", "x", "c"]),
         "missing-on-both-sides": (["a", None], ["a", None]), "missing-after": (["a", "b"], ["a", None]),
         "missing-before": (["a", None], ["a", "b"])}


def evaluate(collections_path, cases):
    """The worker's side (a process of its own: the collection loader is set up once per process): the assert's
    ``that`` under Ansible's templar, for each case of checksums before and after."""
    from ansible.parsing.dataloader import DataLoader
    from ansible.plugins.loader import init_plugin_loader
    from ansible.template import Templar, trust_as_template
    init_plugin_loader([collections_path])
    that = verify_task()["that"]
    out = {}
    for name, (before, after) in cases.items():
        t = Templar(loader=DataLoader(), variables={"tune_before": inspected(before), "tune_after": inspected(after)})
        out[name] = t.evaluate_conditional(trust_as_template(that))
    return out


@pytest.fixture(scope="module")
def verdicts():
    cmd = [sys.executable, os.path.abspath(__file__), os.path.join(ROOT, "collections")]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=120, check=False)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


def test_identical_files_pass(verdicts):
    assert verdicts["same"] is True


def test_the_files_are_the_ones_serving_unit_owns():
    """tune.yml names no record path of its own: unit_host.owned_files is the one list."""
    with open(os.path.join(ROOT, "playbooks", "tune.yml")) as fh:
        text = fh.read()
    assert "10-start-timeout.conf" not in text and "meta.json" not in text


def test_a_changed_file_fails(verdicts):
    assert verdicts["changed"] is False


@pytest.mark.parametrize("case", ["missing-on-both-sides", "missing-after", "missing-before"])
def test_a_missing_file_fails(verdicts, case):
    assert verdicts[case] is False


if __name__ == "__main__":
    print(json.dumps(evaluate(sys.argv[1], CASES)))

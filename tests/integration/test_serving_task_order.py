# -*- coding: utf-8 -*-
# Copyright: gpuhost.sglang contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The serving role does everything that can fail on the host's state before its deploy tasks restart anything.

A failure there (a full disk during the model copy, a venv that a reinstall did not repair) fails the play before
the first restart, so files and server stay as they were: the on-host proof of "a failed play before the deploy
changes nothing" is stage 31's test_serving_role.py::test_bad_input_rejected_before_any_change; this test keeps the
order that makes it hold for the model copy and the venv repair too (in seconds, no host)."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import os

import yaml

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
TASKS = os.path.join(ROOT, "roles", "sglang", "tasks")


def load(name):
    with open(os.path.join(TASKS, name)) as fh:
        return yaml.safe_load(fh)


def test_model_copy_and_venv_repair_come_before_the_deploy_tasks():
    imports = [t["ansible.builtin.import_tasks"] for t in load("main.yml") if "ansible.builtin.import_tasks" in t]
    assert imports.index("install.yml") < imports.index("deploy.yml"), imports
    assert imports.index("model.yml") < imports.index("deploy.yml"), imports
    copy = [t for t in load("model.yml") if "ansible.builtin.copy" in t]
    assert copy and not any(t.get("ignore_errors") or "failed_when" in t for t in copy), "a failed copy must fail the play"


def test_a_venv_the_reinstall_did_not_repair_fails_the_play_before_the_deploy():
    names = [t.get("name", "") for t in load("install.yml")]
    check = names.index("Install | the engine venv is whole (installed files, the server's modules)")
    repair = names.index("Install | reinstall the distributions whose modules are missing")
    recheck = names.index("Install | the repaired venv is whole")
    verdict = names.index("Install | assert the engine venv is whole")
    assert check < repair < recheck < verdict, names
    assert "Nothing was restarted" in load("install.yml")[verdict]["ansible.builtin.assert"]["fail_msg"]

# -*- coding: utf-8 -*-
# Copyright: gpuhost.sglang contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The nvidia_driver role reads the loaded module's version, and decides whether to reboot, with the expressions in
tasks/reboot.yml.

The expression is taken from the role file itself and rendered by ansible-playbook (the real templar and the
collection's filters) against the real banners of tests/unit/plugins/module_utils/gpu/fixtures.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import base64
import io
import json
import os
import subprocess
import sys

import yaml

from ansible_collections.gpuhost.sglang.tests import harness

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..", ".."))
FIX = os.path.join(ROOT, "tests", "unit", "plugins", "module_utils", "gpu", "fixtures")
CASES = {
    "open-565.57.01-ubuntu2404.txt": "565.57.01",
    "open-525.60.11-arch.txt": "525.60.11",
    "open-555.58-gentoo.txt": "555.58",
    "proprietary-384.98-ubuntu.txt": "384.98",
    "": "",  # no module loaded: /proc/driver/nvidia/version missing (slurp failed, no content)
}


INSTALLED = "565.57.01"


def _decide_task():
    with open(os.path.join(ROOT, "roles", "nvidia_driver", "tasks", "reboot.yml")) as f:
        tasks = yaml.safe_load(f)
    for task in tasks:
        if task.get("name") == "Decide whether a reboot is needed":
            return task
    raise AssertionError("no task 'Decide whether a reboot is needed' in roles/nvidia_driver/tasks/reboot.yml")


def _strip(expr):
    """The Jinja expression inside one "{{ ... }}" (to embed it in a larger one)."""
    expr = expr.strip()
    assert expr.startswith("{{") and expr.endswith("}}"), expr
    return "(" + expr[2:-2].strip() + ")"


def test_loaded_version_and_reboot_reasons_from_real_banners(tmp_path):
    task = _decide_task()
    expr, reasons = task["vars"]["loaded"], task["ansible.builtin.set_fact"]["__nvidia_driver_reboot_reasons"]
    tasks = []
    for name in CASES:
        content = ""
        if name:
            with io.open(os.path.join(FIX, name), "rb") as f:
                content = base64.b64encode(f.read()).decode()
        reg = {"content": content} if content else {"failed": True, "msg": "file not found"}
        for changed in (False, True):
            case = "%s/%s" % (name or "missing", changed)
            task_vars = {"__nvidia_driver_proc_version": reg, "case": case, "loaded": expr,
                         "__nvidia_driver_installed_version": INSTALLED, "__nvidia_driver_kernel_changed": changed}
            got = "{{ got | default({}) | combine({case: [%s, %s]}) }}" % (_strip(expr), _strip(reasons))
            tasks.append({"name": case, "vars": task_vars, "ansible.builtin.set_fact": {"got": got}})
    save = {"content": "{{ got | to_json }}", "dest": str(tmp_path / "got.json"), "mode": "0644"}
    tasks.append({"name": "save", "ansible.builtin.copy": save})
    play = [{"hosts": "localhost", "gather_facts": False, "tasks": tasks}]
    (tmp_path / "play.yml").write_text(yaml.safe_dump(play))
    env = harness.ansible_env()
    out = subprocess.run([os.path.join(os.path.dirname(sys.executable), "ansible-playbook"), "-i", "localhost,", "-c", "local",
                          "-e", "ansible_python_interpreter=" + sys.executable, str(tmp_path / "play.yml")],
                         env=env, cwd=ROOT, capture_output=True, text=True, check=False)
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    got = json.loads((tmp_path / "got.json").read_text())
    want = {}
    for name, version in CASES.items():
        mismatch = ["loaded module %s != installed %s" % (version, INSTALLED)] if version not in ("", INSTALLED) else []
        want["%s/False" % (name or "missing")] = [version, mismatch]
        want["%s/True" % (name or "missing")] = [version, ["kernel module packages changed"] + mismatch]
    assert got == want

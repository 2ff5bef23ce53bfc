# Copyright: (c) 2026, gpuhost.sglang contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Role tags: the lint (tests/lint/role_tags.py; the lint stage runs it on the roles) passes on a copy of two roles
and fails on an untagged task or an include without ``apply``; ``--tags <role>_<phase>`` selects what it names
(ansible-playbook --list-tasks)."""
from __future__ import annotations

import os
import shutil
import subprocess
import sys

import pytest
import yaml

from ansible_collections.gpuhost.sglang.tests import harness

LINT = os.path.join(harness.ROOT, "tests", "lint", "role_tags.py")


def run_lint(*extra):
    return subprocess.run([sys.executable, LINT, *extra], capture_output=True, text=True, check=False)


@pytest.fixture(name="roles")
def roles_fixture(tmp_path):
    for role in ("nccl", "proxmox_lxc_gpu"):
        shutil.copytree(os.path.join(harness.ROOT, "roles", role, "tasks"), tmp_path / "roles" / role / "tasks")
    return tmp_path / "roles"


def test_lint_fails_on_an_untagged_task(roles):
    assert run_lint("--roles", str(roles)).returncode == 0
    harness.edit_yaml(roles / "nccl" / "tasks" / "main.yml",
                      lambda tasks: tasks.append({"name": "Deliberately untagged", "ansible.builtin.debug": {"msg": "x"}}))
    proc = run_lint("--roles", str(roles))
    assert proc.returncode == 1
    assert "roles/nccl/tasks/main.yml: task 'Deliberately untagged': has [], needs nccl and nccl_<phase>" in proc.stdout


def test_lint_fails_on_an_include_without_apply(roles):
    """The include's own tags select the include only: every task of lockstep.yml would be skipped by --tags."""
    def drop_apply(tasks):
        for task in tasks:
            if isinstance(task.get("ansible.builtin.include_tasks"), dict):
                task["ansible.builtin.include_tasks"] = task["ansible.builtin.include_tasks"]["file"]
    harness.edit_yaml(roles / "proxmox_lxc_gpu" / "tasks" / "main.yml", drop_apply)
    proc = run_lint("--roles", str(roles))
    assert proc.returncode == 1
    assert "roles/proxmox_lxc_gpu/tasks/lockstep.yml: task" in proc.stdout
    assert "needs proxmox_lxc_gpu and proxmox_lxc_gpu_<phase>" in proc.stdout


def list_tasks(tmp_path, role, tags):
    play = tmp_path / "play.yml"
    play.write_text(yaml.safe_dump([{"hosts": "localhost", "gather_facts": False, "roles": ["gpuhost.sglang." + role]}]))
    proc = subprocess.run([os.path.join(os.path.dirname(sys.executable), "ansible-playbook"), "-i", "localhost,",
                           "--list-tasks", "--tags", tags, str(play)], env=harness.ansible_env(), cwd=harness.ROOT,
                          capture_output=True, text=True, timeout=120, check=False)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return [line.strip() for line in proc.stdout.splitlines()
            if line.strip().startswith("gpuhost.sglang.%s : " % role) and "Validating arguments" not in line]


def test_tags_select_the_phase(tmp_path):
    with open(os.path.join(harness.ROOT, "roles", "nvidia_driver", "tasks", "verify.yml"), encoding="utf-8") as f:
        verify = [t["name"] for t in yaml.safe_load(f)]
    listed = list_tasks(tmp_path, "nvidia_driver", "nvidia_driver_verify")
    names = [line.split(" : ", 1)[1].split("\tTAGS:")[0].strip() for line in listed]
    assert names == verify, listed


def test_tags_run_the_tasks_inside_an_include(tmp_path):
    """A real run of proxmox_lxc_gpu on localhost with --tags proxmox_lxc_gpu_verify: the lockstep include is dynamic
    (--list-tasks cannot show what is in it); its tasks run (skipped by lockstep=skip, so nothing is touched), the
    other phases do not."""
    play = tmp_path / "play.yml"
    play.write_text(yaml.safe_dump([{"hosts": "localhost", "gather_facts": False,
                                     "roles": ["gpuhost.sglang.proxmox_lxc_gpu"]}]))
    proc = subprocess.run([os.path.join(os.path.dirname(sys.executable), "ansible-playbook"), "-i", "localhost,",
                           "-c", "local", "-e", "ansible_python_interpreter=" + sys.executable,
                           "-e", "proxmox_lxc_gpu_ctid=101", "-e", "proxmox_lxc_gpu_lockstep=skip",
                           "--tags", "proxmox_lxc_gpu_verify", str(play)], env=harness.ansible_env(), cwd=harness.ROOT,
                          capture_output=True, text=True, timeout=120, check=False)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-2000:]
    with open(os.path.join(harness.ROOT, "roles", "proxmox_lxc_gpu", "tasks", "lockstep.yml"), encoding="utf-8") as f:
        for task in yaml.safe_load(f):
            assert "TASK [gpuhost.sglang.proxmox_lxc_gpu : %s]" % task["name"] in proc.stdout, proc.stdout
    assert "Read the host and check the request" not in proc.stdout and "Start the container" not in proc.stdout

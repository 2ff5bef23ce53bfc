# Copyright: (c) 2026, gpuhost.sglang contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Jinja length lint (tests/lint/jinja_length.py; the lint stage runs it): passes on the tree, fails on any
expression over the limit (none is excepted), in roles/ and playbooks/, under a bare condition too."""
from __future__ import annotations

import os
import subprocess
import sys

from ansible_collections.gpuhost.sglang.tests import harness

LINT = os.path.join(harness.ROOT, "tests", "lint", "jinja_length.py")


def run_lint(*extra):
    return subprocess.run([sys.executable, LINT, *extra], capture_output=True, text=True, check=False)


def tree(tmp_path, tasks, play="---\n- hosts: all\n  tasks: []\n"):
    (tmp_path / "roles" / "r" / "tasks").mkdir(parents=True)
    (tmp_path / "playbooks").mkdir()
    (tmp_path / "roles" / "r" / "tasks" / "main.yml").write_text(tasks)
    (tmp_path / "playbooks" / "p.yml").write_text(play)
    return ["--root", str(tmp_path)]


LONG = " + ".join("var_%03d" % i for i in range(30))   # 297 characters, 303 in its braces


def test_the_tree_passes():
    proc = run_lint()
    assert proc.returncode == 0, proc.stdout


def test_a_long_expression_fails(tmp_path):
    args = tree(tmp_path, "---\n- name: t\n  ansible.builtin.debug:\n    msg: \"{{ %s }}\"\n" % LONG)
    proc = run_lint(*args)
    assert proc.returncode == 1
    assert "roles/r/tasks/main.yml: 1 Jinja expression(s) over 250 characters (line 4: 303)" in proc.stdout


def test_a_long_bare_condition_fails_and_a_short_one_passes(tmp_path):
    args = tree(tmp_path, "---\n- name: t\n  ansible.builtin.debug:\n    msg: x\n  when: %s | int > 0\n" % LONG)
    assert "line 5: 307" in run_lint(*args).stdout
    (tmp_path / "roles" / "r" / "tasks" / "main.yml").write_text("---\n- name: t\n  ansible.builtin.debug:\n    msg: x\n  when: a > 0\n")
    assert run_lint(*args).returncode == 0


def test_a_long_expression_in_a_playbook_fails_and_250_characters_pass(tmp_path):
    ok = "v" * 244   # 250 characters in its braces: the limit itself passes
    args = tree(tmp_path, "---\n- name: t\n  ansible.builtin.debug:\n    msg: \"{{ %s }}\"\n" % ok,
                play="---\n- hosts: all\n  vars:\n    x: \"{{ %s }}\"\n" % LONG)
    proc = run_lint(*args)
    assert proc.returncode == 1, proc.stdout
    assert proc.stdout.splitlines()[0] == ("playbooks/p.yml: 1 Jinja expression(s) over 250 characters (line 4: 303): "
                                           "move the logic into a tested filter")
    assert "roles/r/tasks/main.yml" not in proc.stdout

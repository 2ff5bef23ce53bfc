# Copyright: (c) 2026, gpuhost.sglang contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The role-interface lint (tests/lint/role_specs.py) fails on each kind of drift. That the collection's own roles
are clean is the lint stage's run of it (tests/stages/10-lint.sh), not repeated here."""
from __future__ import annotations

import os
import shutil
import subprocess
import sys

import pytest

from ansible_collections.gpuhost.sglang.tests import harness

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
LINT = os.path.join(ROOT, "tests", "lint", "role_specs.py")

pytestmark = pytest.mark.skipif(shutil.which("aar-doc") is None, reason="aar-doc (requirements/dev.txt) not on PATH")


def run_lint(roles_dir, *extra):
    return subprocess.run([sys.executable, LINT, "--roles", roles_dir, *extra], capture_output=True, text=True,
                          check=False)


@pytest.fixture(name="tree")
def tree_fixture(tmp_path):
    """A collection-shaped copy (galaxy.yml + roles/nccl) the lint may be pointed at and broken in."""
    shutil.copy(os.path.join(ROOT, "galaxy.yml"), tmp_path)
    shutil.copytree(os.path.join(ROOT, "roles", "nccl"), tmp_path / "roles" / "nccl")
    return tmp_path / "roles"


def test_committed_copy_is_clean(tree):
    proc = run_lint(str(tree))
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_stale_readme_fails_then_passes_after_make_role_docs(tree):
    spec = tree / "nccl" / "meta" / "argument_specs.yml"
    harness.edit_yaml(spec, lambda d: d["argument_specs"]["main"]["options"]["nccl_conf_path"].update(
        description="A description changed without regenerating the README."))
    proc = run_lint(str(tree))
    assert proc.returncode == 1
    assert "roles/nccl/README.md is stale" in proc.stdout and "make role-docs" in proc.stdout
    fixed = run_lint(str(tree), "--fix-docs")
    assert fixed.returncode == 0, fixed.stdout
    assert "A description changed without regenerating the README." in (tree / "nccl" / "README.md").read_text()
    assert run_lint(str(tree)).returncode == 0


def test_missing_readme_fails(tree):
    os.remove(tree / "nccl" / "README.md")
    proc = run_lint(str(tree))
    assert proc.returncode == 1 and "roles/nccl/README.md is missing" in proc.stdout


def test_default_in_defaults_but_not_in_spec_fails(tree):
    with open(tree / "nccl" / "defaults" / "main.yml", "a", encoding="utf-8") as f:
        f.write("nccl_undocumented: 1\n")
    proc = run_lint(str(tree))
    assert proc.returncode == 1
    assert "defaults/main.yml sets nccl_undocumented, which meta/argument_specs.yml (main) does not document" in proc.stdout


def test_spec_default_without_role_default_fails(tree):
    harness.edit_yaml(tree / "nccl" / "meta" / "argument_specs.yml", lambda d: d["argument_specs"]["main"]["options"].update(
        nccl_ghost={"type": "bool", "default": True, "description": "Only documented."}))
    proc = run_lint(str(tree), "--fix-docs")
    assert proc.returncode == 1
    assert "gives nccl_ghost default True, but defaults/main.yml does not set it" in proc.stdout


def test_default_value_disagreement_fails(tree):
    harness.edit_yaml(tree / "nccl" / "defaults" / "main.yml", lambda d: d.update(nccl_conf_path="/etc/other.conf"))
    proc = run_lint(str(tree))
    assert proc.returncode == 1
    assert "nccl_conf_path defaults to '/etc/other.conf' in defaults/main.yml but '/etc/nccl.conf'" in proc.stdout


def test_templated_default_is_compared_rendered(tree):
    """'{{ a }}/x' in defaults matches the spec's rendered '/a/x'; a wrong rendered value is still caught."""
    def add(d, rendered):
        d["argument_specs"]["main"]["options"].update(
            nccl_dir_a={"type": "path", "default": "/a", "description": "a"},
            nccl_dir_b={"type": "path", "default": rendered, "description": "b"})
    with open(tree / "nccl" / "defaults" / "main.yml", "a", encoding="utf-8") as f:
        f.write("nccl_dir_a: /a\nnccl_dir_b: \"{{ nccl_dir_a }}/x\"\n")
    spec = tree / "nccl" / "meta" / "argument_specs.yml"
    harness.edit_yaml(spec, lambda d: add(d, "/a/x"))
    assert run_lint(str(tree), "--fix-docs").returncode == 0
    harness.edit_yaml(spec, lambda d: add(d, "/b/x"))
    proc = run_lint(str(tree), "--fix-docs")
    assert proc.returncode == 1 and "nccl_dir_b defaults to" in proc.stdout


def test_bad_roles_dir_is_a_usage_error(tmp_path):
    proc = run_lint(str(tmp_path / "nope"))
    assert proc.returncode == 2 and "--roles" in proc.stderr and "Traceback" not in proc.stderr

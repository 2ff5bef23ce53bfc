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
import yaml

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


def plant_task(tree, task, where="main.yml"):
    """Append one task to a task file of the nccl copy."""
    harness.edit_yaml(tree / "nccl" / "tasks" / where, lambda tasks: tasks.append(task))


PUBLIC_UNDOCUMENTED = "a public name (nccl_*) that meta/argument_specs.yml does not document"


@pytest.mark.parametrize("task, how", [
    ({"name": "Planted", "ansible.builtin.set_fact": {"nccl_scratch": 1}}, "set_fact"),
    ({"name": "Planted", "ansible.builtin.command": "true", "register": "nccl_scratch", "changed_when": False}, "register"),
    ({"name": "Planted", "block": [{"name": "Inner", "ansible.builtin.debug": {"msg": "x"},
                                    "vars": {"nccl_scratch": 1}}]}, "vars"),
    ({"name": "Planted", "ansible.builtin.debug": {"msg": "x"}, "loop": [1],
      "loop_control": {"loop_var": "nccl_scratch"}}, "loop_var"),
    ({"name": "Planted", "ansible.builtin.debug": {"msg": "x"}, "loop": [1],
      "loop_control": {"index_var": "nccl_scratch"}}, "index_var"),
])
def test_public_looking_internal_name_fails_and_private_one_passes(tree, task, how):
    plant_task(tree, task)
    proc = run_lint(str(tree))
    assert proc.returncode == 1, proc.stdout
    assert f"nccl: tasks/main.yml sets nccl_scratch ({how}): {PUBLIC_UNDOCUMENTED}" in proc.stdout
    assert "rename it __nccl_scratch" in proc.stdout
    harness.edit_yaml(tree / "nccl" / "tasks" / "main.yml", lambda tasks: tasks.pop())
    private = yaml.safe_load(yaml.safe_dump(task).replace("nccl_scratch", "__nccl_scratch"))
    plant_task(tree, private)
    assert run_lint(str(tree)).returncode == 0


def test_handler_is_checked_too(tree):
    os.makedirs(tree / "nccl" / "handlers", exist_ok=True)
    with open(tree / "nccl" / "handlers" / "main.yml", "w", encoding="utf-8") as f:
        f.write("---\n- name: Planted\n  ansible.builtin.command: 'true'\n  register: nccl_handler_out\n  changed_when: false\n")
    proc = run_lint(str(tree))
    assert proc.returncode == 1 and "nccl: handlers/main.yml sets nccl_handler_out (register)" in proc.stdout


def test_other_roles_interface_passed_in_vars_is_not_this_roles(tree):
    """vars naming another role's options (include_role of host_common from nvidia_driver) are that role's interface."""
    plant_task(tree, {"name": "Planted", "ansible.builtin.debug": {"msg": "x"}, "vars": {"host_common_owner": "nccl"}})
    assert run_lint(str(tree)).returncode == 0


def test_documented_option_may_be_set(tree):
    """nccl_env_file is an option; the role re-exports it as a host fact with set_fact: documented, so clean."""
    tasks = yaml.safe_load((tree / "nccl" / "tasks" / "main.yml").read_text())
    assert any("nccl_env_file" in (t.get("ansible.builtin.set_fact") or {}) for t in tasks)
    assert run_lint(str(tree)).returncode == 0


def test_export_needs_its_exports_paragraph(tree):
    """nccl_settings is an output: clean while an "Exports" paragraph names it, a finding once that paragraph is gone."""
    def drop(d):
        main = d["argument_specs"]["main"]
        main["description"] = [p for p in main["description"] if not p.startswith("Exports")]
    harness.edit_yaml(tree / "nccl" / "meta" / "argument_specs.yml", drop)
    proc = run_lint(str(tree), "--fix-docs")
    assert proc.returncode == 1
    assert f"nccl: tasks/main.yml sets nccl_settings (set_fact): {PUBLIC_UNDOCUMENTED}" in proc.stdout


def test_export_of_a_name_never_set_fails(tree):
    harness.edit_yaml(tree / "nccl" / "meta" / "argument_specs.yml", lambda d: d["argument_specs"]["main"].update(
        description=d["argument_specs"]["main"]["description"] + ["Exports nccl_ghost_output too."]))
    proc = run_lint(str(tree), "--fix-docs")
    assert proc.returncode == 1
    assert "nccl: meta/argument_specs.yml exports nccl_ghost_output, but no task or handler of the role sets it" in proc.stdout


@pytest.mark.parametrize("where", ["defaults", "spec"])
def test_private_name_documented_fails(tree, where):
    if where == "defaults":
        with open(tree / "nccl" / "defaults" / "main.yml", "a", encoding="utf-8") as f:
            f.write("__nccl_hidden: 1\n")
    harness.edit_yaml(tree / "nccl" / "meta" / "argument_specs.yml", lambda d: d["argument_specs"]["main"]["options"].update(
        __nccl_hidden={"type": "int", "default": 1, "description": "Private."}))
    if where == "spec":
        with open(tree / "nccl" / "defaults" / "main.yml", "a", encoding="utf-8") as f:
            f.write("__nccl_hidden: 1\n")
    proc = run_lint(str(tree), "--fix-docs")
    assert proc.returncode == 1
    assert "nccl: __nccl_hidden is private (leading _) but documented" in proc.stdout


def test_allowance_needs_a_reason_and_goes_stale(tree, tmp_path):
    plant_task(tree, {"name": "Planted", "ansible.builtin.set_fact": {"nccl_scratch": 1}})
    allow = tmp_path / "allow.yml"
    allow.write_text("nccl:\n  nccl_scratch: kept public until a parallel change lands\n")
    assert run_lint(str(tree), "--allow", str(allow)).returncode == 0
    allow.write_text("nccl:\n  nccl_scratch: ''\n")
    proc = run_lint(str(tree), "--allow", str(allow))
    assert proc.returncode == 2 and "nccl.nccl_scratch has no reason" in proc.stderr and "Traceback" not in proc.stderr
    harness.edit_yaml(tree / "nccl" / "tasks" / "main.yml", lambda tasks: tasks.pop())
    allow.write_text("nccl:\n  nccl_scratch: kept public until a parallel change lands\n")
    proc = run_lint(str(tree), "--allow", str(allow))
    assert proc.returncode == 1
    assert "allows nccl_scratch, which the role no longer sets: remove the entry" in proc.stdout

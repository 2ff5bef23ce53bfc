# Copyright: (c) 2026, gpuhost.sglang contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The public-references lint (tests/lint/public_refs.py, run by the lint stage) flags each kind of private
reference planted in a tree and passes on the collection's own tracked files."""
from __future__ import annotations

import importlib.util
import os
import subprocess
import types

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
LINT = os.path.join(ROOT, "tests", "lint", "public_refs.py")
_spec = importlib.util.spec_from_file_location("public_refs", LINT)
public_refs = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(public_refs)


@pytest.fixture(name="run_lint")
def run_lint_fixture(capsys):
    """The lint in this process (seconds for the whole file): its exit code, stdout and stderr."""
    def run(*args):
        capsys.readouterr()
        rc = public_refs.main(list(args))
        out, err = capsys.readouterr()
        return types.SimpleNamespace(returncode=rc, stdout=out, stderr=err)
    return run


@pytest.fixture(name="plant")
def plant_fixture(tmp_path, run_lint):
    def plant(name, text, allow=""):
        return _plant(run_lint, tmp_path, name, text, allow)
    return plant


def _plant(run_lint, tmp_path, name, text, allow):
    (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
    (tmp_path / name).write_text(text)
    (tmp_path / "allow.yml").write_text(allow or "[]\n")
    return run_lint("--root", str(tmp_path), "--allow", str(tmp_path / "allow.yml"))


def test_the_collections_tracked_files_are_clean(run_lint):
    proc = run_lint()
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert ", 0 findings" in proc.stdout


# The machine paths the lint must flag, put together here so that this file names none itself
WORK, SHARED, ROOT_HOME, HOME = "/" + "work/", "../" + "shared/", "/" + "root/", "/" + "home/"


@pytest.mark.parametrize("line, rule", [
    ("# recipe: %sshared/notes/cpu-engine.md" % WORK, "machine-path"),
    ("# see %sresearch/anchors.md section 2" % SHARED, "machine-path"),
    ("path = %s.cache/x" % ROOT_HOME, "machine-path"),
    ("open('%salice/notes.md')" % HOME, "machine-path"),
    ("# checked before anything changes (issue 12 item 2)", "tracker-ref"),
    ("# Issue 11 (H200 machine): 256 streams", "tracker-ref"),
    ("evidence: \"seeds 003: the working server\"", "tracker-ref"),
    ("# listed as a safety flag by the research note", "tracker-ref"),
    ("# \"0.5.23 source\" = the installed wheel (.cache/sglang-venv), read, not run", "cache-source"),
    ("# /metrics captured by hand from .cache/router-venv", "cache-source"),
])
def test_a_planted_private_reference_fails_naming_file_line_and_rule(plant, line, rule):
    proc = plant("plugins/module_utils/x.py", "ok = 1\n" + line + "\n")
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert "plugins/module_utils/x.py:2: %s:" % rule in proc.stdout, proc.stdout


@pytest.mark.parametrize("line", [
    "# sglang issue #29562 / PR #29580: trtllm refused on SM120",
    "# sglang #26087, https://github.com/sgl-project/sglang/pull/16331",
    "dir=${1:-$GPUHOST_ROOT/.cache/wheelhouse}     # default location of the fixture",
    "overlay upper%smerged; OUT_DIR%susr/bin/promtool; $OUT%susr/bin" % (WORK, ROOT_HOME, ROOT_HOME),
    "seed: 1234  # one random seed per run",
    "# source: sgl-project/sglang python/sglang/srt/server_args.py at v0.5.23",
])
def test_public_citations_and_fixture_locations_pass(plant, line):
    proc = plant("docs/x.md", line + "\n")
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_an_allowance_is_limited_to_its_path_rule_and_match(tmp_path, plant):
    allow = ("- path: molecule/*\n  rule: machine-path\n  match: '%safter'\n"
             "  reason: a file on the test host\n" % ROOT_HOME)
    (tmp_path / "molecule").mkdir()
    (tmp_path / "molecule" / "other.yml").write_text("dest: %sother.txt\n" % ROOT_HOME)
    proc = plant("molecule/side_effect.yml", "dest: %safter-reboot.txt\n" % ROOT_HOME, allow)
    assert proc.returncode == 1, proc.stdout
    assert "molecule/other.yml:1: machine-path" in proc.stdout
    assert "side_effect.yml" not in proc.stdout


def test_an_allowance_without_a_reason_is_a_usage_error(plant):
    proc = plant("a.md", "fine\n", "- path: a.md\n  rule: machine-path\n")
    assert proc.returncode == 2
    assert "reason missing" in proc.stderr


def test_the_lint_stage_runs_it_as_a_script(tmp_path):
    """What tests/stages/10-lint.sh runs: the file as a program, exit 1 on a planted machine path."""
    (tmp_path / "a.md").write_text("see %sshared/notes/x.md\n" % WORK)
    (tmp_path / "allow.yml").write_text("[]\n")
    proc = subprocess.run(["python3", LINT, "--root", str(tmp_path), "--allow", str(tmp_path / "allow.yml")],
                          capture_output=True, text=True, check=False)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert "a.md:1: machine-path: %s" % WORK in proc.stdout

# Copyright: (c) 2026, gpuhost.sglang contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""tests/fixtures/venv-cache.sh (ansible-test's venv in stage 15): a venv is reused only when the hash of its
inputs matches the one it was built from and it passes its check; a changed input, a tampered key or a broken
venv builds it again. Venvs without pip (no pip arguments) keep it to seconds."""
from __future__ import annotations

import os
import subprocess

from ansible_collections.gpuhost.sglang.tests import harness

SCRIPT = os.path.join(harness.ROOT, "tests", "fixtures", "venv-cache.sh")


def cache(*args):
    proc = subprocess.run(["bash", SCRIPT, *map(str, args)], capture_output=True, text=True, timeout=120,
                          check=False)
    return proc.returncode, proc.stdout + proc.stderr


def test_reused_only_with_the_same_inputs_and_a_passing_check(tmp_path):
    venv = tmp_path / "v"
    rc, out = cache(venv, "import json")
    assert rc == 0 and "venv-cache: building" in out, out
    key = (venv / ".gpuhost-key").read_text()
    rc, out = cache(venv, "import json")
    assert rc == 0 and "venv-cache: up to date" in out, out
    # another input (the check is one): built again, under another key
    rc, out = cache(venv, "import json, os")
    assert rc == 0 and "venv-cache: building" in out, out
    assert (venv / ".gpuhost-key").read_text() != key
    # a key that is not the inputs' hash is not trusted
    (venv / ".gpuhost-key").write_text("0" * 64 + "\n")
    rc, out = cache(venv, "import json, os")
    assert rc == 0 and "venv-cache: building" in out, out
    # a venv that fails its check is not trusted either, whatever its key says
    (venv / "bin" / "python").unlink()
    rc, out = cache(venv, "import json, os")
    assert rc == 0 and "venv-cache: building" in out, out


def test_a_new_venv_that_fails_its_check_is_not_keyed(tmp_path):
    venv = tmp_path / "v"
    rc, out = cache(venv, "import gpuhost_no_such_module")
    assert rc == 1 and "fails its check: import gpuhost_no_such_module" in out, out
    assert not (venv / ".gpuhost-key").exists()


def test_bad_input_is_named(tmp_path):
    rc, out = cache(tmp_path / "v", "import json", "-r", "requirements.txt")
    assert rc == 2 and "pip argument '-r' names a file whose contents the key would miss" in out, out
    rc, out = cache(tmp_path / "v")
    assert rc == 2 and "usage: venv-cache.sh DIR CHECK [PIP_ARG...]" in out, out

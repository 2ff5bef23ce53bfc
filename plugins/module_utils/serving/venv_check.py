# -*- coding: utf-8 -*-
# Copyright: gpuhost.sglang contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Is the engine's venv whole, and which distributions must be reinstalled?

A venv with a package's files gone but its metadata left (an interrupted upgrade, a hand-deleted directory, a full
disk during an install) passes `pip install` (pip sees the dist-info and does nothing) and `pip check`, and the server
fails only when it starts: "ModuleNotFoundError: No module named 'uvicorn'" in the journal, and the last-known-good,
in the same venv, would fail the same way. So before any restart the role compares every installed distribution's
RECORD (the files pip installed, PEP 376/627) with the disk, finds the engine's top-level modules, and reinstalls the
distributions with files missing. No module is imported (importing torch costs seconds).
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import json
import subprocess

from ansible_collections.gpuhost.sglang.plugins.module_utils.serving import probes
from ansible_collections.gpuhost.sglang.plugins.module_utils.serving.probes import venv_check_probe

# Runs inside the venv's interpreter: probes/venv_check_probe.py. Imported so that the module packer ships the
# file; its source is handed to ``python -c``.
PROBE = probes.source(venv_check_probe.__name__.rpartition(".")[2])


def check(python, modules, run=subprocess.run, timeout=600):
    """Check the venv of ``python``; return dict(ok, dists=[{dist, version, missing_files, example}], modules,
    versions={normalised name: version}, error)."""
    try:
        res = run([python, "-c", PROBE] + list(modules), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                  universal_newlines=True, timeout=timeout, check=False)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return {"ok": False, "dists": [], "modules": [], "error": "%s: %s" % (python, exc)}
    try:
        found = json.loads(res.stdout.strip().splitlines()[-1])
    except (ValueError, IndexError):
        tail = (res.stderr or res.stdout).strip().splitlines()
        return {"ok": False, "dists": [], "modules": [],
                "error": "%s did not run the venv check: %s" % (python, tail[-1] if tail else "rc=%d" % res.returncode)}
    return {"ok": not (found["dists"] or found["modules"]), "dists": found["dists"], "modules": found["modules"],
            "versions": found.get("versions", {}), "error": ""}


def reinstall_specs(result):
    """pip requirement specs (name==version) of the distributions with files missing."""
    return ["%s==%s" % (d["dist"], d["version"]) for d in result.get("dists", [])]


def summary(result):
    """One line naming what is broken, for the failure message ("" when the venv is whole)."""
    if result.get("error"):
        return result["error"]
    parts = ["%s %s: %d installed files missing (e.g. %s)" % (d["dist"], d["version"], d["missing_files"], d["example"])
             for d in result.get("dists", [])]
    parts += ["module %s not found" % m for m in result.get("modules", [])]
    return "; ".join(parts)

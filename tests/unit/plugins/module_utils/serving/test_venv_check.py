# -*- coding: utf-8 -*-
# Copyright: gpuhost.sglang contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""venv_check against a real site directory with pip's metadata layout (dist-info + RECORD)."""
from __future__ import absolute_import, division, print_function

__metaclass__ = type

import os
import subprocess
import sys

from ansible_collections.gpuhost.sglang.plugins.module_utils.serving import venv_check as vc


def make_dist(site, name, version, files):
    info = site / ("%s-%s.dist-info" % (name, version))
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: %s\nVersion: %s\n" % (name, version))
    record = []
    for rel in files:
        path = site / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text("x = 1\n")
        record.append("%s,," % rel)
    record += ["%s/METADATA,," % info.name, "%s/RECORD,," % info.name, "%s/__pycache__/x.cpython-311.pyc,," % name,
               "../../../bin/%s,," % name]
    (info / "RECORD").write_text("\n".join(record) + "\n")


def run_in(site):
    """Only the stdlib and ``site`` on the path (-S: no site-packages of the test's own interpreter)."""
    def run(cmd, **kw):
        check = kw.pop("check", False)
        return subprocess.run([cmd[0], "-S"] + cmd[1:], env=dict(os.environ, PYTHONPATH=str(site)), check=check, **kw)
    return run


def test_whole_venv(tmp_path):
    make_dist(tmp_path, "uvicorn", "0.38.0", ["uvicorn/__init__.py", "uvicorn/main.py"])
    make_dist(tmp_path, "Flash_Attn.Kernels", "2.8.3", ["flash_attn_kernels/__init__.py"])
    res = vc.check(sys.executable, ["uvicorn"], run=run_in(tmp_path))
    # the same run reads every distribution's version, by its PEP 503 name (the role's engine version)
    assert res == {"ok": True, "dists": [], "modules": [], "error": "",
                   "versions": {"uvicorn": "0.38.0", "flash-attn-kernels": "2.8.3"}}
    assert vc.summary(res) == ""


def test_deleted_package_directory_is_found_with_its_distribution(tmp_path):
    make_dist(tmp_path, "uvicorn", "0.38.0", ["uvicorn/__init__.py", "uvicorn/main.py"])
    make_dist(tmp_path, "fastapi", "0.120.0", ["fastapi/__init__.py"])
    for rel in ("uvicorn/__init__.py", "uvicorn/main.py"):
        os.remove(str(tmp_path / rel))
    os.rmdir(str(tmp_path / "uvicorn"))
    res = vc.check(sys.executable, ["uvicorn", "fastapi"], run=run_in(tmp_path))
    assert not res["ok"]
    assert res["dists"] == [{"dist": "uvicorn", "version": "0.38.0", "missing_files": 2, "example": "uvicorn/__init__.py"}]
    assert res["modules"] == ["uvicorn"]
    assert vc.reinstall_specs(res) == ["uvicorn==0.38.0"]
    assert vc.summary(res) == ("uvicorn 0.38.0: 2 installed files missing (e.g. uvicorn/__init__.py); "
                               "module uvicorn not found")


def test_interpreter_that_cannot_run(tmp_path):
    res = vc.check(str(tmp_path / "no-python"), ["x"])
    assert not res["ok"] and "no-python" in res["error"]


def test_a_record_path_with_a_comma_is_read_whole(tmp_path):
    """RECORD is CSV (PEP 376): a path with a comma is quoted, and the probe reads it with csv as
    importlib.metadata does."""
    make_dist(tmp_path, "odd", "2.0", ["odd/a,b.py"])
    (tmp_path / "odd-2.0.dist-info" / "RECORD").write_text('"odd/a,b.py",,\n"odd/c,d.py",,\nodd-2.0.dist-info/RECORD,,\n')
    res = vc.check(sys.executable, [], run=run_in(tmp_path))
    assert res["dists"] == [{"dist": "odd", "version": "2.0", "missing_files": 1, "example": "odd/c,d.py"}]

# -*- coding: utf-8 -*-
# Copyright: gpuhost.sglang contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The deep liveness check's units (roles/sglang/templates/liveness.{service,timer}.j2) rendered with the role's
defaults: `systemd-analyze verify` accepts them, `systemd-analyze security --offline` scores the service as
hardened as the server's unit, the defaults' probes are the collection's own."""
from __future__ import absolute_import, division, print_function

__metaclass__ = type

import os
import re
import shutil
import subprocess
import sys

import jinja2
import pytest
import yaml

from ansible_collections.gpuhost.sglang.plugins.filter.server import systemd_exec
from ansible_collections.gpuhost.sglang.plugins.module_utils.bench.probes import DEFAULT_PROBES

ROLE = os.path.join(os.path.dirname(__file__), "..", "..", "..", "roles", "sglang")
MAX_EXPOSURE = 2.5  # tests/integration/test_serving_unit_sandbox.py bounds the server's unit the same way


def defaults():
    with open(os.path.join(ROLE, "defaults", "main.yml")) as fh:
        return yaml.safe_load(fh)


def render(tmp_path, restart, python=sys.executable):
    d = defaults()
    ctx = dict(d, ansible_managed="test", sglang_unit="sglang.service", sglang_liveness_name="sglang-liveness",
               sglang_liveness_textfile=d["sglang_liveness_textfile_dir"] + "/gpuhost_liveness_sglang.prom",
               sglang_env_file="/etc/sglang/sglang.env", sglang_liveness_config=str(tmp_path / "cfg.json"),
               sglang_liveness_restart=restart)
    env = jinja2.Environment(loader=jinja2.FileSystemLoader(os.path.join(ROLE, "templates")),
                             undefined=jinja2.StrictUndefined, trim_blocks=True, keep_trailing_newline=True)
    # ExecStart must name files that exist for `verify`: the venv python and the installed program
    ctx["sglang_venv"] = os.path.dirname(os.path.dirname(python))
    ctx["sglang_install_dir"] = str(tmp_path)
    (tmp_path / "bin").mkdir()
    shutil.copy(os.path.join(ROLE, "files", "gpuhost-liveness.py"), str(tmp_path / "bin" / "gpuhost-liveness.py"))
    out = {}
    for kind in ("service", "timer"):
        text = _render(env, kind, ctx)
        path = tmp_path / ("sglang-liveness." + kind)
        path.write_text(text)
        out[kind] = path
    return out


def _render(env, kind, ctx):
    with open(os.path.join(ROLE, "templates", "liveness.%s.j2" % kind)) as fh:
        source = fh.read()
    env.filters["systemd_exec"] = systemd_exec  # the collection's filter, by its short name
    return env.from_string(source.replace("gpuhost.sglang.systemd_exec", "systemd_exec")).render(**ctx)


def test_default_probes_are_the_collections_own():
    for probe in defaults()["sglang_liveness_probes"]:
        assert probe in DEFAULT_PROBES, probe


@pytest.mark.parametrize("restart", [False, True])
def test_units_verify_and_the_service_is_hardened(tmp_path, restart):
    if not shutil.which("systemd-analyze"):
        pytest.skip("systemd-analyze missing")
    units = render(tmp_path, restart)
    text = units["service"].read_text()
    assert "Type=oneshot" in text and "CapabilityBoundingSet=\n" in text and "ProtectSystem=strict" in text
    assert "OnUnitActiveSec=5min" in units["timer"].read_text()
    res = subprocess.run(["systemd-analyze", "verify", "--man=no", str(units["service"]), str(units["timer"])],
                         capture_output=True, text=True, timeout=60, check=False)
    problems = [line for line in (res.stdout + res.stderr).splitlines()
                if line.strip() and "sglang.service" not in line and "Unit sglang-liveness" not in line]
    assert res.returncode == 0 and not problems, res.stdout + res.stderr
    sec = subprocess.run(["systemd-analyze", "security", "--offline=true", "--no-pager", str(units["service"])],
                         capture_output=True, text=True, timeout=60, check=False)
    score = float(re.search(r"Overall exposure level for \S+: ([0-9.]+)", sec.stdout).group(1))
    print("systemd-analyze security --offline sglang-liveness.service: %.1f" % score)
    assert score <= MAX_EXPOSURE, sec.stdout

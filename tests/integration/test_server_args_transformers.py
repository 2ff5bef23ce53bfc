# -*- coding: utf-8 -*-
# Copyright: gpuhost.sglang contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""flags.yml's transformers entry against the CPU engine's OWN parser (transformers serve, click).

The server_argv filter renders from data what the server_args module renders after asking the parser: when they
differ, the serving role cannot recognize a command line the module already validated (playbooks/tune.yml's
sglang_validated_argvs) and parses it again. Needs the engine venv (tests/fixtures/wheelhouse.sh, stage 20).
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import os
import subprocess

import pytest
import yaml

from ansible_collections.gpuhost.sglang.tests import harness
from ansible_collections.gpuhost.sglang.plugins.module_utils.serving.server_args import negatable_for, server_argv

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
PY = os.path.join(os.environ.get("GPUHOST_ROOT", ROOT), ".cache", "engine-venv", "bin", "python")

with open(os.path.join(ROOT, "roles", "sglang", "vars", "flags.yml")) as _f:
    FLAGS = yaml.safe_load(_f)["sglang_flags"]["transformers"]

pytestmark = [pytest.mark.engine]
if not os.access(PY, os.X_OK):
    pytestmark.append(pytest.mark.skip(reason="no engine venv: run tests/fixtures/wheelhouse.sh (make fixtures)"))


def test_negatable_data_matches_the_engine_parser():
    """Every click boolean flag pair of the installed transformers serve (--x/--no-x) is in flags.yml's negatable
    data for that version, and false renders the same argv through the filter's data as through the module."""
    # the serve command alone, built as the module builds it (plugins/module_utils/serving/server_args.py build_click)
    code = ("import typer, typer.main, transformers\nfrom transformers.cli.serve import Serve\napp = typer.Typer()\n"
            "app.command(name='serve')(Serve)\ncmd = typer.main.get_command(app)\nprint(transformers.__version__)\n"
            "print(' '.join(sorted(p.opts[0][2:] for p in cmd.params\n"
            "                      if getattr(p, 'param_type_name', '') == 'option' and getattr(p, 'secondary_opts', None))))")
    proc = subprocess.run([PY, "-c", code], capture_output=True, text=True, timeout=300, check=False)
    assert proc.returncode == 0, proc.stderr[-2000:]
    version, names = proc.stdout.split("\n")[0], proc.stdout.split("\n")[1].split()
    assert names, "the parser lists no boolean flag pairs: %s" % proc.stdout
    data = negatable_for(FLAGS["negatable"], version)
    assert sorted(data) == names, "flags.yml transformers negatable for %s: %s, the parser: %s" % (version, data, names)
    opts = dict((n, False) for n in names)
    opts.update(device="cpu")
    out = harness.run_module("server_args", {"python": PY, "engine": "transformers", "options": opts}, timeout=300)
    assert not out.get("failed"), out.get("msg")
    assert out["argv"] == server_argv(opts, negatable=data)

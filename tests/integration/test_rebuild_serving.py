# -*- coding: utf-8 -*-
# Copyright: gpuhost.sglang contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""A serving host reinstalled from nothing: rebuild.yml brings last-known-good back from the controller's copy, so
a first deploy that fails its gate on the new host rolls back to the old host's configuration and serves, with the
real CPU engine. Long (two engine installs, minutes): the gate in make test is test_rebuild_lkg.py (the restore and
the save on a real host without an engine) with test_serving_role.py's rollback cases (docs/testing.md).
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import os
import subprocess
import sys
import time

import pytest

from ansible_collections.gpuhost.sglang.tests import harness
from ansible_collections.gpuhost.sglang.tests.integration import test_serving_role as role

ENV = dict(os.environ, GPUHOST_TESTHOST_TAG=os.environ.get("GPUHOST_TESTHOST_TAG", "ir"))
NAME = "rbsrv"
pytestmark = [pytest.mark.testhosts, pytest.mark.engine, pytest.mark.long]
if not (os.path.isdir(role.WHEELHOUSE) and os.path.isfile(os.path.join(role.MODELS, "good", "config.json"))):
    pytestmark.append(pytest.mark.skip(reason="fixtures missing: run tests/stages/20-fixtures.sh (make fixtures)"))


def new_host(tmp_path_factory, copy):
    subprocess.run([sys.executable, role.TESTHOST, "destroy", NAME], env=ENV, check=False, capture_output=True)
    info = role.create_host(NAME, ENV, tmp_path_factory)
    with open(info["inventory"], "a") as fh:
        fh.write("          sglang_lkg_controller_dir: %s\n" % copy)
    return info


def play(host, name, extra=None):
    cmd = [os.path.join(os.path.dirname(sys.executable), "ansible-playbook"), "-i", host["inventory"],
           os.path.join(role.ROOT, "playbooks", name)]
    if extra:
        cmd += ["-e", extra]
    start = time.monotonic()
    proc = subprocess.run(cmd, cwd=role.ROOT, env=harness.ansible_env(PYTHONUNBUFFERED="1"), capture_output=True, text=True,
                          timeout=1800, check=False)
    return proc.returncode, " ".join((proc.stdout + proc.stderr).split()), time.monotonic() - start


def test_a_reinstalled_host_rolls_back_to_the_old_hosts_last_known_good(tmp_path_factory):
    copy = str(tmp_path_factory.mktemp("controller") / "lkg")
    try:
        old = new_host(tmp_path_factory, copy)
        rc, out, _secs = play(old, "deploy.yml")
        assert rc == 0 and "candidate 0 passed the gate" in out, out[-3000:]
        assert os.path.isfile(os.path.join(copy, "meta.json")), "deploy.yml saved no copy"
        # the box is reinstalled: a new host of the same name, nothing of the old one left but the controller's copy
        new = new_host(tmp_path_factory, copy)
        bad = '{"sglang_options": {"device": "cuda", "continuous-batching": true}}'   # cannot start on a CPU host
        rc, out, secs = play(new, "rebuild.yml", bad)
        print("rebuild.yml on the fresh host, first candidate failing: %.1f s" % secs)
        assert "last-known-good restored from %s" % copy in out, out[-3000:]
        assert rc != 0 and "No candidate passed the gate" in out, out[-3000:]
        assert role.ROLLED_BACK in out, out[-3000:]
        role.assert_lkg_serving(new)
    finally:
        subprocess.run([sys.executable, role.TESTHOST, "destroy", NAME], env=ENV, check=False, capture_output=True)

# -*- coding: utf-8 -*-
# Copyright: gpuhost.sglang contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The one test harness: where the collection lives, a module run as Ansible runs it, a module called in-process.

Import it as ``ansible_collections.gpuhost.sglang.tests.harness`` (tests/conftest.py puts the collections path on
sys.path; ansible-test runs inside .../ansible_collections/gpuhost/sglang where it already is). Stand-ins live beside
it: ``tests.harness.fake_nvml`` (pynvml) and ``tests.harness.toolchain_fake`` (nvcc banners, torch wheels).
After community.general's tests/unit/plugins/modules/utils.py + conftest.py: the in-process call sets the module
arguments with ansible-core's own ``ansible.module_utils.testing.patch_module_args``; unlike community.general it
keeps the real ``exit_json``/``fail_json`` (their JSON, warnings and exit code are what Ansible reads) and parses
what they print.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import contextlib
import json
import os
import queue
import re
import subprocess
import sys
import tempfile
import threading
import time

import pytest
import yaml

from ansible.module_utils.testing import patch_module_args

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def collections_path(root=ROOT):
    """The directory that holds ansible_collections/gpuhost/sglang: ansible-test's copy lives inside one; a clone has
    collections/ansible_collections/gpuhost/sglang, a committed symlink to the repository root."""
    parts = root.split(os.sep)
    if len(parts) >= 3 and parts[-3] == "ansible_collections" and parts[-2:] == ["gpuhost", "sglang"]:
        return os.sep.join(parts[:-3])
    return os.path.join(root, "collections")


COLLECTIONS = collections_path()
# SGLang's model gateway (SMG) of the router fixture (tests/fixtures/router-wheelhouse.sh); NO_SMG is the reason to skip
# a test that runs it, None when it is there
ROUTER_VENV = os.environ.get("GPUHOST_ROUTER_VENV") or os.path.join(ROOT, ".cache", "router-venv")
SMG = os.path.join(ROUTER_VENV, "bin", "smg")
NO_SMG = None if os.access(SMG, os.X_OK) else "no smg at %s: run tests/fixtures/router-wheelhouse.sh (make fixtures)" % SMG


def module_path(name):
    path = os.path.join(ROOT, "plugins", "modules", name + ".py")
    if not os.path.isfile(path):
        raise ValueError("no module %r: %s does not exist" % (name, path))
    return path


def ansible_env(**extra):
    """os.environ for a child ansible-playbook/ansible-doc: this collection, this repo's ansible.cfg, no colour."""
    env = dict(os.environ, ANSIBLE_COLLECTIONS_PATH=COLLECTIONS, ANSIBLE_CONFIG=os.path.join(ROOT, "ansible.cfg"),
               ANSIBLE_NOCOLOR="1")
    env.update(extra)
    return env


def watch_output(proc, faults, deadline_s):
    """Read a child's output (stdout, stderr merged, text) line by line; at the first line matching ``faults[i][0]``
    (a regex) run ``faults[i][1](proc)``, in order. ``deadline_s`` bounds the whole run, output or not: past it the
    child is killed and the test fails (a hang fails, it does not wait forever). Returns (output, actions' results)."""
    lines = queue.Queue()

    def read():
        for line in proc.stdout:
            lines.put(line)
        lines.put(None)

    threading.Thread(target=read, daemon=True).start()
    out, done = [], []
    deadline = time.monotonic() + deadline_s
    while True:
        try:
            line = lines.get(timeout=max(0.1, deadline - time.monotonic()))
        except queue.Empty:
            line = ""
        if time.monotonic() > deadline:
            proc.kill()
            proc.wait()
            pytest.fail("%s did not exit within %d s; its output:\n%s" % (proc.args[0], deadline_s, "".join(out)[-3000:]))
        if line is None:
            break
        out.append(line)
        if len(done) < len(faults) and re.search(faults[len(done)][0], line):
            done.append(faults[len(done)][1](proc))
    proc.wait()
    return "".join(out), done


def edit_yaml(path, change):
    """Load the YAML file, let ``change(data)`` edit it in place, write it back (tests that break a copy on purpose)."""
    with open(path, encoding="utf-8") as f:
        data = yaml.safe_load(f)
    change(data)
    with open(path, "w", encoding="utf-8") as f:
        yaml.safe_dump(data, f, sort_keys=False)


class ModuleResult(dict):
    """The module's JSON result; ``rc``, ``stdout``, ``stderr`` and ``seconds`` of the run as attributes."""

    rc = None
    stdout = ""
    stderr = ""
    seconds = 0.0


def run_module(name, args, tmp_path=None, python=None, pythonpath=(), check_mode=False, timeout=600):
    """Run plugins/modules/<name>.py as Ansible runs a module: its own interpreter, the arguments in a JSON file
    named on the command line (ansible.module_utils.basic._load_params reads sys.argv[1]).

    ``python`` is the interpreter (default: this one); ``pythonpath`` entries go before the collections path.
    Raises AssertionError, with the output, when the module printed no JSON result."""
    payload = dict(args)
    if check_mode:
        payload["_ansible_check_mode"] = True
    fd, argfile = tempfile.mkstemp(prefix="args-", suffix=".json", dir=str(tmp_path) if tmp_path else None)
    try:
        with os.fdopen(fd, "w") as f:
            json.dump({"ANSIBLE_MODULE_ARGS": payload}, f)
        env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(p) for p in pythonpath] + [COLLECTIONS]))
        t0 = time.monotonic()
        cp = subprocess.run([python or sys.executable, module_path(name), argfile], capture_output=True, text=True,
                            env=env, timeout=timeout, check=False)
        seconds = time.monotonic() - t0
    finally:
        os.unlink(argfile)
    try:
        res = ModuleResult(json.loads(cp.stdout))
    except ValueError:
        raise AssertionError("module %s printed no JSON result (rc %s): %s %s"
                             % (name, cp.returncode, cp.stdout[-2000:], cp.stderr[-2000:]))
    res.rc, res.stdout, res.stderr, res.seconds = cp.returncode, cp.stdout, cp.stderr, seconds
    return res


@contextlib.contextmanager
def as_managed_node():
    """A module runs in a fresh process on the managed node. In this (controller) process, once anything imported
    ansible's controller code, ``ansible.module_utils._internal.is_controller`` is True and ``module.warn()`` goes to
    the controller's Display instead of the result (ansible-core 2.19 module_utils/common/warnings.py), and warnings of
    earlier calls would stay in the global list: both are reset for the call, as in a fresh process."""
    from ansible.module_utils import _internal
    from ansible.module_utils.common import warnings as am_warnings
    saved = _internal.is_controller
    _internal.is_controller = False
    for name in ("_global_warnings", "_global_deprecations"):
        getattr(am_warnings, name, {}).clear()
    try:
        yield
    finally:
        _internal.is_controller = saved


def call_module(capsys, module, args, check_mode=False):
    """Call ``module.main()`` in this process with ``args`` (monkeypatch what it imports first); returns the
    result, a ModuleResult whose ``rc`` is the exit code the real exit_json (0) or fail_json (1) chose."""
    payload = dict(args)
    if check_mode:
        payload["_ansible_check_mode"] = True
    capsys.readouterr()
    with patch_module_args(payload), as_managed_node():
        with pytest.raises(SystemExit) as exc:
            module.main()
    out = capsys.readouterr().out
    try:
        res = ModuleResult(json.loads(out))
    except ValueError:
        raise AssertionError("%s.main() printed no JSON result (exit %s): %s" % (module.__name__, exc.value.code, out))
    res.rc, res.stdout = exc.value.code, out
    return res

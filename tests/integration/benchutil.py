# -*- coding: utf-8 -*-
# Copyright: gpuhost.sglang contributors
# Apache License 2.0 (see LICENSE)
"""Helpers for the serving_bench integration tests: loopback fake servers and running the module
as Ansible does (a separate interpreter, arguments in a JSON file, result JSON on stdout)."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import contextlib
import json
import os
import signal
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.abspath(os.path.join(HERE, "..", ".."))
MODULE = os.path.join(ROOT, "plugins", "modules", "serving_bench.py")
FAKESERVER = os.path.join(HERE, "fakeserver.py")


def collections_path():
    parts = ROOT.split(os.sep)
    if len(parts) >= 3 and parts[-3] == "ansible_collections":
        return os.sep.join(parts[:-3])
    return os.path.join(ROOT, "collections")


@contextlib.contextmanager
def fake_server(behavior="ok", *extra):
    """Start tests/integration/fakeserver.py on 127.0.0.1 (free port); yields (base_url, Popen)."""
    proc = subprocess.Popen([sys.executable, FAKESERVER, "--behavior", behavior, "--port", "0"] + list(extra),
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True)
    try:
        line = proc.stdout.readline()
        if not line.startswith("PORT "):
            raise RuntimeError("fake server did not start: %r %s" % (line, proc.stderr.read()))
        yield "http://127.0.0.1:%d" % int(line.split()[1]), proc
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGTERM)
            try:
                proc.wait(5)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait(5)


def free_port():
    import socket
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


def run_module(tmp_path, python=None, **args):
    """Run serving_bench like Ansible does; returns (result dict, seconds)."""
    argfile = os.path.join(str(tmp_path), "args-%d.json" % time.monotonic_ns())
    with open(argfile, "w") as f:
        json.dump({"ANSIBLE_MODULE_ARGS": args}, f)
    env = dict(os.environ, PYTHONPATH=collections_path())
    t0 = time.monotonic()
    cp = subprocess.run([python or sys.executable, MODULE, argfile], capture_output=True, text=True, env=env,
                        timeout=600)
    dt = time.monotonic() - t0
    try:
        res = json.loads(cp.stdout)
    except ValueError:
        raise AssertionError("module printed no JSON (rc %s): %s %s" % (cp.returncode, cp.stdout[-2000:],
                                                                        cp.stderr[-2000:]))
    return res, dt

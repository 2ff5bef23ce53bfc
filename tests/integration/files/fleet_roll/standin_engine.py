#!/usr/bin/env python3
# -*- coding: utf-8 -*-
# Copyright: gpuhost.sglang contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""A stand-in serving host for the rolling-deploy test: one fake OpenAI-compatible server
(tests/integration/fakeserver.py) on a fixed loopback port, restarted like the serving role restarts the engine.

    standin_engine.py STATE_DIR PORT CONFIG_JSON [--start-delay S] [--rollback-delay S]

The configuration in force is STATE_DIR/config.json, the server's pid STATE_DIR/pid. The same configuration again
changes nothing (the role restarts nothing when the configuration is live). Another one: the server is stopped,
nothing listens on PORT for --start-delay seconds (an engine's start: no request may reach the host now), then the
new server starts and must answer /health. A configuration whose ``model`` ends in ``/nan`` starts a server that
answers with empty text (fakeserver's ``empty``, the NaN model); the canary (one completion) sees it, and the
previous configuration is started again after --rollback-delay: what the serving role does with a candidate that
fails the canary (its own gates are proven in tests/unit/plugins/plugin_utils/test_deploy_transaction.py).
Prints one JSON line: changed, restarted, pid, canary, rollback ("ready" after a rollback that answers), config.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import argparse
import json
import os
import signal
import subprocess
import sys
import time
import urllib.request

# 30 ms a token: a 16-token answer streams for about half a second, so a stop under load cuts streams in flight
ITL = 0.03
FAKESERVER = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "fakeserver.py")


def read(path, default=None):
    try:
        with open(path) as fh:
            return json.load(fh)
    except (OSError, ValueError):
        return default


def write(path, data):
    with open(path + ".tmp", "w") as fh:
        json.dump(data, fh)
    os.replace(path + ".tmp", path)


def stop(state_dir):
    """Kill the server at once: a request in flight is cut, none is finished after the stop (the hard case; whether
    a real engine ends its streams on SIGTERM is unverified here)."""
    pid = read(os.path.join(state_dir, "pid"))
    if not pid:
        return
    try:
        os.killpg(pid, signal.SIGKILL)
    except OSError:
        return
    for _i in range(100):
        try:
            os.killpg(pid, 0)
        except OSError:
            return
        time.sleep(0.05)


def start(state_dir, port, config):
    behavior = "empty" if str(config.get("model", "")).endswith("/nan") else "ok"
    with open(os.path.join(state_dir, "server.log"), "a") as log:  # the server keeps its own copy of the descriptor
        proc = subprocess.Popen([sys.executable, FAKESERVER, "--behavior", behavior, "--port", str(port),
                                 "--itl", str(ITL)],
                                stdout=log, stderr=log, stdin=subprocess.DEVNULL, start_new_session=True)
    write(os.path.join(state_dir, "pid"), proc.pid)
    base = "http://127.0.0.1:%d" % port
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        try:
            urllib.request.urlopen(base + "/health", timeout=1).read()
            return proc.pid
        except OSError:
            if proc.poll() is not None:
                break
            time.sleep(0.1)
    raise SystemExit("the stand-in server on port %d did not answer /health (see %s/server.log)" % (port, state_dir))


def canary(port):
    body = json.dumps({"model": "fake-model", "prompt": "The capital of France is", "max_tokens": 8}).encode()
    req = urllib.request.Request("http://127.0.0.1:%d/v1/completions" % port, body, {"Content-Type": "application/json"})
    text = ""
    for line in urllib.request.urlopen(req, timeout=10).read().decode().splitlines():  # fakeserver always streams
        if line.startswith("data: {"):
            text += "".join(c.get("text") or "" for c in json.loads(line[6:]).get("choices", []))
    return "passed" if text.strip() else "FAILED: empty answer"


def main(argv=None):
    ap = argparse.ArgumentParser()
    ap.add_argument("state_dir")
    ap.add_argument("port", type=int)
    ap.add_argument("config")
    ap.add_argument("--start-delay", type=float, default=2.0)
    ap.add_argument("--rollback-delay", type=float, default=1.0)
    args = ap.parse_args(argv)
    os.makedirs(args.state_dir, exist_ok=True)
    config = json.loads(args.config)
    live_path = os.path.join(args.state_dir, "config.json")
    live = read(live_path)
    pid = read(os.path.join(args.state_dir, "pid"))
    if live == config and pid:
        print(json.dumps({"changed": False, "restarted": False, "pid": pid, "canary": canary(args.port),
                          "config": config}))
        return 0
    stop(args.state_dir)
    time.sleep(args.start_delay)
    pid = start(args.state_dir, args.port, config)
    verdict = canary(args.port)
    out = {"changed": True, "restarted": True, "pid": pid, "canary": verdict, "config": config}
    if verdict == "passed" or live is None:
        write(live_path, config)
        print(json.dumps(out))
        return 0
    stop(args.state_dir)
    time.sleep(args.rollback_delay)
    out["pid"] = start(args.state_dir, args.port, live)
    out["rollback"] = "ready" if canary(args.port) == "passed" else "failed"
    out["config"] = live
    print(json.dumps(out))
    return 0


if __name__ == "__main__":
    sys.exit(main())

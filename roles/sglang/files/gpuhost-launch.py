#!/usr/bin/env python3
# Copyright: gpuhost.sglang contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Start an inference server module with secret options taken from the environment.

Usage: gpuhost-launch.py -m MODULE [ARGS...]

GPUHOST_SECRET_OPTIONS names environment variables and the option each becomes, e.g.
"GPUHOST_API_KEY=--api-key". Each named variable that is set is removed from the environment and
appended as "OPTION VALUE" to the module's sys.argv *inside this process*: /proc/PID/cmdline (what
`ps` shows) keeps the argv systemd started us with, so secrets from the 0600 EnvironmentFile never
appear in a process list, a unit file or a log line.

GPUHOST_REPLICA (a rank of a multi-node replica) starts gpuhost_replica.py's peer watch in this process first.
"""
import os
import runpy
import sys


def build_argv(argv, environ):
    if len(argv) < 3 or argv[1] != "-m":
        raise SystemExit("usage: gpuhost-launch.py -m MODULE [ARGS...]")
    module, args = argv[2], list(argv[3:])
    spec = environ.pop("GPUHOST_SECRET_OPTIONS", "")
    for item in spec.split():
        var, sep, option = item.partition("=")
        if not sep or not option.startswith("--"):
            raise SystemExit("GPUHOST_SECRET_OPTIONS: bad item %r (want VAR=--option)" % item)
        value = environ.pop(var, None)
        if value:
            args += [option, value]
    return module, args


def main():
    module, args = build_argv(sys.argv, os.environ)
    # A rank of a multi-node replica: the peer watch (gpuhost_replica.py, next to this file) aborts this process
    # when a peer rank is lost, so that systemd restarts it and the replica comes back whole.
    if os.environ.get("GPUHOST_REPLICA"):
        import gpuhost_replica
        gpuhost_replica.start_peer_watch(os.environ["GPUHOST_REPLICA"], os.environ)
    sys.argv = [module] + args
    runpy.run_module(module, run_name="__main__", alter_sys=True)


if __name__ == "__main__":
    main()

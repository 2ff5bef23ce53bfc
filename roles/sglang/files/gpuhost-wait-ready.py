#!/usr/bin/env python3
# Copyright: gpuhost.sglang contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""ExecStartPost helper: block until URL answers HTTP 200, so systemd marks the unit active only when
the server really serves, and TimeoutStartSec bounds the model's load time.

Usage: gpuhost-wait-ready.py URL [INTERVAL_SECONDS]

systemd passes the main process id as $MAINPID to ExecStartPost: when that process is gone the server
cannot become ready, so this exits 1 at once instead of holding the unit until TimeoutStartSec.

A rank >= 1 of a multi-node replica serves no HTTP: URL file:///PATH waits instead until the peer watch's state
file (gpuhost_replica.py) says every rank joined, written by this very process ($MAINPID).
"""
import json
import os
import sys
import time
from urllib.error import HTTPError, URLError
from urllib.request import Request, urlopen


def joined(path, main_pid):
    try:
        with open(path) as fh:
            state = json.load(fh)
    except (OSError, ValueError):
        return False
    return bool(state.get("all_joined")) and (not main_pid or state.get("pid") == main_pid)


def main():
    if len(sys.argv) < 2:
        raise SystemExit("usage: gpuhost-wait-ready.py URL [INTERVAL_SECONDS]")
    url = sys.argv[1]
    interval = float(sys.argv[2]) if len(sys.argv) > 2 else 2.0
    key = os.environ.get("GPUHOST_API_KEY")
    headers = {"Authorization": "Bearer " + key} if key else {}
    main_pid = int(os.environ.get("MAINPID") or 0)
    while True:
        if main_pid and not os.path.exists("/proc/%d" % main_pid):
            sys.stderr.write("gpuhost-wait-ready: main process %d exited before %s answered\n" % (main_pid, url))
            return 1
        if url.startswith("file://"):
            if joined(url[len("file://"):], main_pid):
                return 0
            time.sleep(interval)
            continue
        try:
            with urlopen(Request(url, headers=headers), timeout=30) as resp:
                if resp.status == 200:
                    return 0
        except (HTTPError, URLError, OSError):
            pass
        time.sleep(interval)


if __name__ == "__main__":
    sys.exit(main())

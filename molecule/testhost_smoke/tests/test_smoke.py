# -*- coding: utf-8 -*-
# Copyright: gpuhost.sglang contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""testinfra verify of the testhost_smoke scenario: runs on the controller against the test host."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import json
import os
import re
import subprocess
import sys

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..", ".."))
TESTHOST = os.path.join(ROOT, "tests", "hosts", "testhost.py")
PORT = 8731


def test_system_is_running(host):
    assert host.run("systemctl is-system-running").stdout.strip() == "running"


def test_hostname_is_the_instance_name(host):
    assert host.check_output("hostname") == host.backend.get_hostname()


def test_service_active_and_enabled(host):
    svc = host.service("gpuhost-smoke")
    assert svc.is_running
    assert svc.is_enabled
    assert host.file("/etc/systemd/system/gpuhost-smoke.service").contains("--bind 0.0.0.0")


def test_service_listens_and_answers(host):
    assert host.socket("tcp://0.0.0.0:%d" % PORT).is_listening
    body = host.check_output(
        "python3 -c 'import urllib.request,sys; sys.stdout.write(urllib.request.urlopen(\"http://127.0.0.1:%d/\").read().decode())'"
        % PORT)
    assert body == "gpuhost smoke %s" % host.check_output("hostname")


def test_machine_id_is_unique(host):
    mid = host.file("/etc/machine-id").content_string.strip()
    assert re.fullmatch(r"[0-9a-f]{32}", mid), mid
    with open("/etc/machine-id") as fh:
        controller = fh.read().strip() if os.path.exists("/etc/machine-id") else ""
    assert mid != controller
    # Every other running test host (same tag) must have another machine-id.
    hosts = json.loads(subprocess.check_output([sys.executable, TESTHOST, "list"], text=True))
    me = host.backend.get_hostname()
    assert me in [h["name"] for h in hosts], "this host is missing from testhost.py list"
    compared = []
    for other in hosts:
        if other["name"] == me or not other["alive"]:
            continue
        res = subprocess.run(
            ["ssh", "-i", other["identity_file"], "-o", "BatchMode=yes", "-o", "StrictHostKeyChecking=no",
             "-o", "UserKnownHostsFile=/dev/null", "-o", "LogLevel=ERROR", "root@" + other["address"],
             "cat /etc/machine-id"], text=True, capture_output=True, check=False, timeout=30)
        if res.returncode == 0:  # a host being torn down right now is not our concern
            compared.append(other["name"])
            assert res.stdout.strip() != mid, "machine-id shared with host %s" % other["name"]
    # (compared may be empty when this is the only host; the checks above still ran)


def test_mknod_device_nodes_work(host):
    # Other scenarios fake GPU hosts with mknod'ed /dev/nvidia* nodes: that must keep working.
    cmd = host.run("rm -f /tmp/nvfake && mknod /tmp/nvfake c 195 0 && stat -c '%F %t:%T' /tmp/nvfake && rm -f /tmp/nvfake")
    assert cmd.rc == 0, cmd.stderr
    assert cmd.stdout.strip() == "character special file c3:0"

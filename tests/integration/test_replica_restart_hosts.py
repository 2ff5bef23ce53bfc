# -*- coding: utf-8 -*-
# Copyright: gpuhost.sglang contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Restart-together of a two-rank replica on two test hosts, CI-sized (no Ansible, no engine): the role's launcher,
peer watch and stand-in rank (roles/sglang/files) under a systemd unit with the role's restart settings
(Type=exec, ExecStartPost=gpuhost-wait-ready.py, Restart=on-failure). The whole path through playbooks/deploy.yml is
tests/integration/test_multinode_replica.py (long).

Shown: rank 1 started alone blocks (activating, not joined) until rank 0 is there; rank 0 serves only when both
joined; kill -9 of rank 1 restarts both ranks and the replica serves again; kill -9 of rank 0 the same.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import json
import os
import subprocess
import sys
import time

import pytest

from ansible_collections.gpuhost.sglang.plugins.module_utils.serving import ready

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
TESTHOST = os.path.join(ROOT, "tests", "hosts", "testhost.py")
FILES = os.path.join(ROOT, "roles", "sglang", "files")
ENV = dict(os.environ, GPUHOST_TESTHOST_TAG="im")
NAMES = ["mnw0", "mnw1"]
DATA_PLANE = ["10.233.8.1", "10.233.8.2"]
SSH_OPTS = ["-o", "BatchMode=yes", "-o", "StrictHostKeyChecking=no", "-o", "UserKnownHostsFile=/dev/null",
            "-o", "LogLevel=ERROR", "-o", "ConnectTimeout=5"]

pytestmark = [pytest.mark.testhosts]

UNIT = """[Unit]
Description=stand-in rank %(rank)d
StartLimitIntervalSec=600
StartLimitBurst=10
[Service]
Type=exec
Environment=GPUHOST_REPLICA="rank=%(rank)d nnodes=2 head=%(head)s port=5999 join_timeout=60"
Environment=GPUHOST_REPLICA_STATE=/run/replica.json
Environment=GPUHOST_STANDIN_COLLECTIVE_TIMEOUT=600
ExecStart=/usr/bin/python3 /opt/gpuhost/gpuhost-launch.py -m gpuhost_replica --nnodes 2 --node-rank %(rank)d \\
  --dist-init-addr %(head)s:5757 --host 0.0.0.0 --port 30000
ExecStartPost=/usr/bin/python3 /opt/gpuhost/gpuhost-wait-ready.py %(wait)s 0.2
TimeoutStartSec=120
Restart=on-failure
RestartSec=1
"""


def ssh(host, command, check=True):
    proc = subprocess.run(["ssh", *SSH_OPTS, "-i", host["identity_file"], "root@%s" % host["address"], command],
                          capture_output=True, text=True, timeout=300, check=False)
    if check:
        assert proc.returncode == 0, "ssh %s %r failed: %s" % (host["name"], command, proc.stderr)
    return proc.stdout.strip()


def data_plane(namespaces, addresses):
    """A point-to-point link dp0 between two test hosts' network namespaces (the replica's data-plane network, a
    separate NIC on GPU hosts: sglang_dist_address, sglang_dist_ifname); the management addresses do not route
    between test hosts. Removed with the namespaces."""
    cmds = [["ip", "link", "add", "mndp0", "netns", namespaces[0], "type", "veth", "peer", "name", "mndp1",
             "netns", namespaces[1]]]
    for i in (0, 1):
        cmds += [["ip", "-n", namespaces[i], "link", "set", "mndp%d" % i, "name", "dp0"],
                 ["ip", "-n", namespaces[i], "addr", "add", addresses[i] + "/30", "dev", "dp0"],
                 ["ip", "-n", namespaces[i], "link", "set", "dp0", "up"]]
    for cmd in cmds:
        subprocess.run(cmd, check=True, capture_output=True)


def unit(host):
    out = ssh(host, "systemctl show -p MainPID -p ActiveState -p NRestarts standin.service")
    return dict(line.split("=", 1) for line in out.splitlines())


def serving(host):
    return ssh(host, "python3 -c 'import urllib.request;urllib.request.urlopen(\"http://127.0.0.1:30000/v1/models\","
                     " timeout=2)' 2>/dev/null && echo up || echo down", check=False) == "up"


@pytest.fixture(scope="module")
def ranks():
    subprocess.run([sys.executable, TESTHOST, "destroy", *NAMES], env=ENV, check=False, capture_output=True)
    subprocess.run([sys.executable, TESTHOST, "prepare"], env=ENV, check=True, capture_output=True)
    hosts = []
    try:
        for name in NAMES:
            proc = subprocess.run([sys.executable, TESTHOST, "create", name, "--bind-ro", FILES + ":/opt/gpuhost"],
                                  env=ENV, check=True, capture_output=True, text=True)
            hosts.append(json.loads(proc.stdout.strip().splitlines()[-1]))
        data_plane(["im-%s" % n for n in NAMES], DATA_PLANE)
        for rank, host in enumerate(hosts):
            text = UNIT % {"rank": rank, "head": DATA_PLANE[0],
                           "wait": "file:///run/replica.json" if rank else "http://127.0.0.1:30000/v1/models"}
            ssh(host, "cat > /etc/systemd/system/standin.service <<'EOF'\n%sEOF\nsystemctl daemon-reload" % text)
        yield hosts
    finally:
        subprocess.run([sys.executable, TESTHOST, "destroy", *NAMES], env=ENV, check=False, capture_output=True)


STATE = ("systemctl show -p MainPID -p ActiveState -p NRestarts standin.service; python3 -c 'import urllib.request;"
         "urllib.request.urlopen(\"http://127.0.0.1:30000/v1/models\", timeout=2)' 2>/dev/null && echo Serving=up")


def states(hosts):
    """Both hosts' unit state (and whether rank 0 serves), read over ssh at the same time."""
    procs = [subprocess.Popen(["ssh", *SSH_OPTS, "-i", h["identity_file"], "root@%s" % h["address"], STATE],
                              stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True) for h in hosts]
    return [dict(line.split("=", 1) for line in p.communicate(timeout=60)[0].split() if "=" in line) for p in procs]


def wait_serving(hosts, before, t0, timeout=60):
    """Seconds until both ranks run a new process, both units are active and rank 0 serves."""
    while time.monotonic() - t0 < timeout:
        now = states(hosts)
        if all(n.get("ActiveState") == "active" and n.get("MainPID") != b["MainPID"] for n, b in zip(now, before)) \
                and now[0].get("Serving") == "up":
            return time.monotonic() - t0, now
    raise AssertionError("the replica did not serve again within %d s: %s" % (timeout, states(hosts)))


def test_rank_1_waits_for_rank_0_and_rank_0_serves_when_all_joined(ranks):
    r0, r1 = ranks
    ssh(r1, "systemctl start --no-block standin.service")
    time.sleep(1.5)
    assert unit(r1)["ActiveState"] == "activating", "rank 1 must block until rank 0 is there"
    assert "connected" not in ssh(r1, "journalctl -u standin -o cat")
    ssh(r0, "systemctl start standin.service")  # returns when ExecStartPost saw rank 0 serve
    assert serving(r0) and not serving(r1)
    deadline = time.monotonic() + 30
    while unit(r1)["ActiveState"] != "active" and time.monotonic() < deadline:
        time.sleep(0.2)
    assert unit(r1)["ActiveState"] == "active"


@pytest.mark.parametrize("victim", [1, 0])
def test_a_killed_rank_restarts_the_replica(ranks, victim):
    before = states(ranks)
    t0 = time.monotonic()
    ssh(ranks[victim], "kill -9 %s" % before[victim]["MainPID"])
    secs, after = wait_serving(ranks, before, t0)
    print("kill -9 rank %d: replica serving again after %.1f s, NRestarts %s -> %s" % (
        victim, secs, [b["NRestarts"] for b in before], [a["NRestarts"] for a in after]))
    other = 1 - victim
    assert "peer watch: rank %d lost; aborting" % victim in ssh(ranks[other], "journalctl -u standin -o cat")
    assert after[0].get("Serving") == "up" and "Serving" not in after[1]
    assert all(int(a["NRestarts"]) == int(b["NRestarts"]) + 1 for a, b in zip(after, before))


# The line a candidate that could not bind logs (sglang's uvicorn; ready.py's port_in_use signature), logged early in
# a second, then the host clock once the line is in the journal: what a rollback restarted in the same second sees.
SAME_SECOND = r"""
import subprocess, time
while time.time() % 1 > 0.3:
    time.sleep(0.01)
second = int(time.time())
subprocess.run(["systemd-run", "--unit=gpuhost-journal-window", "--wait", "-q", "sh", "-c",
                "echo \"ERROR: [Errno 98] error while attempting to bind on address: address already in use\""], check=True)
while b"Errno 98" not in subprocess.run(["journalctl", "-u", "gpuhost-journal-window", "-o", "cat", "-q"],
                                         stdout=subprocess.PIPE).stdout:
    time.sleep(0.01)
print(second, repr(round(time.time(), 6)))
"""


def test_the_readiness_read_starts_at_the_restart_not_at_its_second(ranks):
    """ready.read_journal's own journalctl command on a real Debian 12 host: from the restart's clock to the
    microsecond it leaves out a failure line logged earlier in the same second (read from the whole second, a
    rollback took its candidate's "address already in use" as its own and failed: the CI run of 2026-12-03), and
    from a second earlier it has the line."""
    host = ranks[0]

    def on_host(cmd, **_kw):
        return subprocess.run(["ssh", *SSH_OPTS, "-i", host["identity_file"], "root@%s" % host["address"],
                               " ".join("'%s'" % a for a in cmd)], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                              universal_newlines=True, timeout=60, check=False)

    second, since = ssh(host, "python3 -c '%s'" % SAME_SECOND.replace("'", "'\"'\"'")).split()
    since = float(since)
    assert int(since) == int(second), "the line and the clock must share a second for this case: %s %r" % (second, since)
    assert not [line for line in ready.read_journal("gpuhost-journal-window", since, run=on_host) if "Errno 98" in line]
    assert [line for line in ready.read_journal("gpuhost-journal-window", since - 1, run=on_host) if "Errno 98" in line]

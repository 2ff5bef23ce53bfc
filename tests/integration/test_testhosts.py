# -*- coding: utf-8 -*-
# Copyright: gpuhost.sglang contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Real test hosts (tests/hosts/testhost.py): parallel creates, SSH, identity, crash cleanup, leaks.

Select with ``pytest -m testhosts tests/integration/test_testhosts.py``. Needs root, debootstrap and
systemd-nspawn (``make setup``). Uses its own object tag (GPUHOST_TESTHOST_TAG=it) so that its
``destroy --all`` never touches the sandbox's or molecule's hosts (tag ``gh``).
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import json
import os
import re
import shutil
import subprocess
import sys
import time

import pytest

pytestmark = pytest.mark.testhosts

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
TESTHOST = os.path.join(ROOT, "tests", "hosts", "testhost.py")
TAG = "it"
ENV = dict(os.environ, GPUHOST_TESTHOST_TAG=TAG)
SSH_OPTS = ["-o", "BatchMode=yes", "-o", "StrictHostKeyChecking=no", "-o", "UserKnownHostsFile=/dev/null",
            "-o", "LogLevel=ERROR", "-o", "ConnectTimeout=5"]


def th(*args, check=True, timeout=300):
    proc = subprocess.run([sys.executable, TESTHOST, *args], env=ENV, capture_output=True, text=True,
                          timeout=timeout, check=False)
    if check:
        assert proc.returncode == 0, "testhost.py %s failed (%d):\n%s" % (" ".join(args), proc.returncode, proc.stderr)
    return proc


def ssh(host, command):
    proc = subprocess.run(["ssh", *SSH_OPTS, "-i", host["identity_file"], "-p", str(host["port"]),
                           "%s@%s" % (host["user"], host["address"]), command],
                          capture_output=True, text=True, timeout=120, check=False)
    assert proc.returncode == 0, "ssh %s %r failed (%d): %s" % (host["name"], command, proc.returncode, proc.stderr)
    return proc.stdout.strip()


def cgroup_pids(name):
    base = "/sys/fs/cgroup/systemd" if os.path.isdir("/sys/fs/cgroup/systemd") else "/sys/fs/cgroup"
    pids = set()
    for root, _dirs, files in os.walk(os.path.join(base, "%s-%s" % (TAG, name))):
        if "cgroup.procs" in files:
            with open(os.path.join(root, "cgroup.procs")) as fh:
                pids |= {int(x) for x in fh.read().split()}
    return pids


def leaks():
    proc = th("leaks", check=False)
    return proc.returncode, proc.stdout


@pytest.fixture(scope="module", autouse=True)
def prepared():
    if os.geteuid() != 0:
        pytest.skip("test hosts need root")
    missing = [t for t in ("debootstrap", "systemd-nspawn", "ip", "ssh") if shutil.which(t) is None]
    if missing:
        pytest.fail("missing tools %s: run `make setup` first" % missing)
    th("destroy", "--all")
    th("prepare", timeout=900)
    yield
    th("destroy", "--all", check=False)


def start_create(name, *extra):
    return subprocess.Popen([sys.executable, TESTHOST, "create", name, *extra], env=ENV,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def test_bad_input_fails_early_without_traceback():
    for args, needle in ((["create", "Bad_Name"], "allowed values"),
                         (["create", "waytoolongname1"], "1-12 chars"),
                         (["create", "okname", "--index", "999"], "1..254"),
                         (["create", "okname", "--bind-ro", "/nonexistent-src:/x"], "does not exist"),
                         (["create", "okname", "--bind-ro", "relative-dst"], "SRC:DST")):
        proc = th(*args, check=False)
        assert proc.returncode == 2, (args, proc.stdout, proc.stderr)
        assert needle in proc.stderr, (args, proc.stderr)
        assert "Traceback" not in proc.stderr
    proc = subprocess.run([sys.executable, TESTHOST, "leaks"], env=dict(ENV, GPUHOST_TESTHOST_TAG="BAD"),
                          capture_output=True, text=True, check=False)
    assert proc.returncode == 2 and "GPUHOST_TESTHOST_TAG" in proc.stderr and "Traceback" not in proc.stderr
    assert not os.path.exists("/run/netns/%s-okname" % TAG)


def test_two_parallel_hosts(tmp_path):
    share = tmp_path / "wheelhouse"
    share.mkdir()
    (share / "marker.txt").write_text("from the controller\n")
    t0 = time.monotonic()
    procs = {"ita": start_create("ita", "--bind-ro", "%s:/opt/wheelhouse" % share),
             "itb": start_create("itb")}
    hosts = {}
    for name, proc in procs.items():
        out, err = proc.communicate(timeout=300)
        assert proc.returncode == 0, "create %s failed:\n%s" % (name, err)
        hosts[name] = json.loads(out)
    print("two parallel creates: %.1fs" % (time.monotonic() - t0))
    a, b = hosts["ita"], hosts["itb"]
    assert set(a) == {"name", "address", "port", "user", "identity_file"}
    assert a["address"] != b["address"]
    assert (a["port"], a["user"]) == (22, "root")
    ids = {}
    for name, host in hosts.items():
        assert ssh(host, "hostname") == name
        assert ssh(host, "systemctl is-system-running --wait") == "running"
        ids[name] = ssh(host, "cat /etc/machine-id")
        assert re.fullmatch(r"[0-9a-f]{32}", ids[name])
        # fake GPU nodes: mknod works, opening one without a driver gives ENXIO (access allowed)
        out = ssh(host, "mknod -m 666 /dev/nvidia0 c 195 0 && stat -c '%F %t:%T' /dev/nvidia0 && "
                        "python3 -c 'import os\ntry: os.open(\"/dev/nvidia0\", os.O_RDWR)\n"
                        "except OSError as e: print(e.errno)'")
        assert out.splitlines() == ["character special file c3:0", "6"], out
    assert ids["ita"] != ids["itb"]
    # each host runs in its own cgroup (with --keep-unit they would otherwise share the caller's)
    pids = {name: cgroup_pids(name) for name in hosts}
    assert pids["ita"] and pids["itb"] and not pids["ita"] & pids["itb"], pids
    # the read-only bind is there and read-only
    assert ssh(a, "cat /opt/wheelhouse/marker.txt") == "from the controller"
    assert ssh(a, "touch /opt/wheelhouse/x 2>&1 || echo refused").endswith("refused")
    assert ssh(b, "test -e /opt/wheelhouse && echo yes || echo no") == "no"
    # idempotent create: same JSON, same machine
    again = json.loads(th("create", "ita", "--bind-ro", "%s:/opt/wheelhouse" % share).stdout)
    assert again == a
    assert ssh(a, "cat /etc/machine-id") == ids["ita"]
    # ...but asking for other binds on a running host is an error, not a silent mismatch
    proc = th("create", "ita", check=False)
    assert proc.returncode == 2 and "other binds" in proc.stderr
    listed = {h["name"]: h for h in json.loads(th("list").stdout)}
    assert set(listed) == {"ita", "itb"} and all(h["alive"] for h in listed.values())
    th("destroy", "ita", "itb")
    th("destroy", "ita")  # twice is fine
    rc, out = leaks()
    assert rc == 0, out


def wait_for(pred, timeout=60):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if pred():
            return True
        time.sleep(0.01)
    return False


def state_phase(name):
    try:
        with open("/var/lib/gpuhost-testhosts/%s/%s/state.json" % (TAG, name)) as fh:
            return json.load(fh).get("phase")
    except (OSError, ValueError):
        return None


@pytest.mark.parametrize("when", ["netns", "booting"])
def test_kill9_mid_create_then_destroy_all_is_clean(when):
    name = "itk-" + when[:4]
    proc = start_create(name)
    if when == "netns":
        assert wait_for(lambda: os.path.exists("/run/netns/%s-%s" % (TAG, name)))
    else:
        assert wait_for(lambda: state_phase(name) == "booting")
    proc.kill()
    proc.wait()
    time.sleep(0.5)
    rc, out = leaks()
    assert rc == 1, "a killed create must leave something to clean:\n" + out
    assert "%s-%s" % (TAG, name) in out
    th("destroy", "--all")
    rc, out = leaks()
    assert rc == 0, out
    assert out.strip().endswith("clean")
    # the index and the name are free again: a new create works
    host = json.loads(th("create", name).stdout)
    assert ssh(host, "systemctl is-system-running --wait") == "running"
    th("destroy", "--all")
    th("destroy", "--all")  # twice is fine
    rc, out = leaks()
    assert rc == 0, out

# -*- coding: utf-8 -*-
# Copyright: gpuhost.sglang contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""playbooks/rebuild.yml brings last-known-good back before the first deploy on a new host, from the controller's
copy that a good deploy saved (tasks_from lkg_save, as playbooks/deploy.yml calls it), on a real test host.

The host here is a fresh serving host (a reinstalled box or a new container: no /etc/sglang). The serving role is
stopped at its first input check (sglang_port=0): what is proven is the state the first deploy finds, which needs
no engine. The whole path to serving is the sandbox's (stage 31) deploy plus this restore; docs/rebuild.md.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import json
import os
import subprocess
import sys

import pytest

from ansible_collections.gpuhost.sglang.tests import harness
from ansible_collections.gpuhost.sglang.plugins.module_utils.serving import unit_host

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
TESTHOST = os.path.join(ROOT, "tests", "hosts", "testhost.py")
ENV = dict(os.environ, GPUHOST_TESTHOST_TAG=os.environ.get("GPUHOST_TESTHOST_TAG", "it"))
NAME = "rblkg"
LKG = "/etc/sglang/last-known-good"
SSH_OPTS = ["-o", "BatchMode=yes", "-o", "StrictHostKeyChecking=no", "-o", "UserKnownHostsFile=/dev/null",
            "-o", "LogLevel=ERROR", "-o", "ConnectTimeout=5"]

pytestmark = [pytest.mark.testhosts]

UNIT = "[Service]\nExecStart=/opt/sglang/venv-sglang-0.5.23/bin/python /opt/sglang/bin/gpuhost-launch.py\n"
ENVFILE = "SGLANG_API_KEY=k\n"


def record(argv):
    """A record in the shape the deploy transaction writes (plugins/module_utils/serving/unit_host.py record)."""
    meta = {"unit": "sglang.service", "unit_path": "/etc/systemd/system/sglang.service", "env_file": "/etc/sglang/sglang.env",
            "health_url": "http://127.0.0.1:30000/health_generate", "base_url": "http://127.0.0.1:30000", "argv": argv,
            "engine": "sglang", "engine_version": "0.5.23", "venv": "/opt/sglang/venv-sglang-0.5.23",
            "unit_b64": unit_host.b64(UNIT), "env_b64": unit_host.b64(ENVFILE)}
    return {"meta.json": json.dumps(meta, indent=2, sort_keys=True) + "\n", "sglang.service": UNIT, "env": ENVFILE}


@pytest.fixture(scope="module")
def host(tmp_path_factory):
    subprocess.run([sys.executable, TESTHOST, "destroy", NAME], env=ENV, check=False, capture_output=True)
    subprocess.run([sys.executable, TESTHOST, "prepare"], env=ENV, check=True, capture_output=True)
    try:
        proc = subprocess.run([sys.executable, TESTHOST, "create", NAME], env=ENV, check=True, capture_output=True, text=True)
        info = json.loads(proc.stdout.strip().splitlines()[-1])
        work = tmp_path_factory.mktemp("rebuild")
        (work / "hosts.yml").write_text(
            "all:\n  children:\n    sglang_servers:\n      hosts:\n        %s:\n          ansible_host: %s\n"
            "          ansible_user: root\n          ansible_ssh_private_key_file: %s\n"
            "          ansible_python_interpreter: /usr/bin/python3\n"
            "          sglang_lkg_controller_dir: %s\n" % (NAME, info["address"], info["identity_file"], work / "copy"))
        info.update(inventory=str(work / "hosts.yml"), copy=str(work / "copy"), work=work)
        yield info
    finally:
        subprocess.run([sys.executable, TESTHOST, "destroy", NAME], env=ENV, check=False, capture_output=True)


def ssh(host, command):
    proc = subprocess.run(["ssh", *SSH_OPTS, "-i", host["identity_file"], "root@%s" % host["address"], command],
                          capture_output=True, text=True, timeout=60, check=False)
    assert proc.returncode == 0, "ssh %r failed: %s" % (command, proc.stderr)
    return proc.stdout


def playbook(host, path, *extra):
    cmd = [os.path.join(os.path.dirname(sys.executable), "ansible-playbook"), "-i", host["inventory"], path] + list(extra)
    proc = subprocess.run(cmd, cwd=ROOT, env=harness.ansible_env(), capture_output=True, text=True, timeout=300, check=False)
    return proc.returncode, " ".join((proc.stdout + proc.stderr).split())


def host_record(host):
    out = ssh(host, "cd %s && for f in *; do printf '%%s %%s\\n' \"$f\" \"$(stat -c %%a \"$f\")\"; done; stat -c 'dir %%a' ." % LKG)
    names = dict(line.split() for line in out.splitlines())
    files = dict((n, ssh(host, "cat %s/%s" % (LKG, n))) for n in names if n != "dir")
    return files, names


def rebuild(host):
    # the host layer's plays find no Proxmox node here; the serving play stops at the role's first input check
    return playbook(host, os.path.join(ROOT, "playbooks", "rebuild.yml"), "-e", "sglang_port=0", "-e", "rebuild_nccl=false")


def test_rebuild_restores_the_controllers_copy_before_the_first_deploy(host):
    saved = record(["--tp-size", "8"])
    os.makedirs(host["copy"])
    for name, text in saved.items():   # what a good deploy saved on the controller (lkg_save, next test)
        with open(os.path.join(host["copy"], name), "w") as fh:
            fh.write(text)
    rc, out = rebuild(host)
    assert rc != 0 and "sglang_port=0" in out, out[-2000:]   # the role's first check: nothing of it ran
    assert "last-known-good restored from %s" % host["copy"] in out, out[-2000:]
    files, modes = host_record(host)
    assert files == saved
    assert modes == {"meta.json": "600", "sglang.service": "600", "env": "600", "dir": "700"}


def test_a_good_deploy_saves_the_hosts_record_and_a_host_keeps_its_own(host):
    newer = record(["--tp-size", "8", "--disable-cuda-graph"])   # the record a later deploy on the host wrote
    ssh(host, "cat > %s/meta.json <<'EOF'\n%sEOF" % (LKG, newer["meta.json"]))
    save = host["work"] / "save.yml"
    save.write_text("- hosts: sglang_servers\n  gather_facts: false\n  tasks:\n    - ansible.builtin.include_role:\n"
                    "        name: gpuhost.sglang.sglang\n        tasks_from: lkg_save\n")
    rc, out = playbook(host, str(save))
    assert rc == 0 and "last-known-good of %s saved in %s" % (LKG, host["copy"]) in out, out[-2000:]
    with open(os.path.join(host["copy"], "meta.json")) as fh:
        assert fh.read() == newer["meta.json"]
    with open(os.path.join(host["copy"] + ".previous", "meta.json")) as fh:
        assert json.load(fh)["argv"] == ["--tp-size", "8"]   # the copy it replaced is kept
    rc, out = playbook(host, str(save))   # a no-op deploy's save: the checksums match, nothing is read or written
    assert rc == 0 and "the controller copy in %s is current" % host["copy"] in out, out[-2000:]
    # a second rebuild finds the host's own record and leaves it
    rc, out = rebuild(host)
    assert "has a last-known-good record of its own: kept" in out, out[-2000:]
    assert host_record(host)[0]["meta.json"] == newer["meta.json"]

# -*- coding: utf-8 -*-
# Copyright: gpuhost.sglang contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Day one: ``playbooks/deploy.yml`` itself on a fresh Debian 12 test host whose system Python has no nvidia-ml-py,
presenting a GPU box as it presents itself (tests/fixtures/gpu-boxes: its sysfs tree as sglang_sysfs_root and
nccl_sysfs_root, NVML answered call by call from its nvml.json by the pynvml stand-in in the engine venv, the only
interpreter with a pynvml, as on a fresh box).

The engine venv holds the real SGLang 0.5.23 (the controller's CPU parser venv, .cache/sglang-venv, bound read-only
into the host and added to a venv at the role's path by a .pth file; its install stamp says the pinned request is
installed, so the install step checks it and installs nothing). No GPU facts are set: the play's and the role's
gpu_facts read the box. Every candidate is checked by SGLang's own parser before the unit is written.

SGLang cannot start on a CPU host: the deploy is expected to fail at the first start, and nothing answers on the
port. The test reads what was really rendered and written on the host (the unit's ExecStart, the NCCL environment
file the unit requires), the architecture the toolchain proof was given, and the deploy transaction's failure.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import json
import os
import re
import subprocess
import sys
import time

import pytest
import yaml

from ansible_collections.gpuhost.sglang.tests import harness

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
TESTHOST = os.path.join(ROOT, "tests", "hosts", "testhost.py")
BOXES = os.path.join(ROOT, "tests", "fixtures", "gpu-boxes")
# the parser venv's real path: its torch layer's .pth names it, so it is bound at the same path on the host
PARSER_VENV = os.path.realpath(os.environ.get("SGLANG_VENV") or os.path.join(ROOT, ".cache", "sglang-venv"))
# its torch layer links into the CPU engine's venv (torch 2.13.0+cpu), which also has the server's uvicorn and fastapi
ENGINE_VENV = os.path.realpath(os.path.join(ROOT, ".cache", "engine-venv"))
MODEL = os.path.join(ROOT, ".cache", "tinymodel", "good")
ENV = dict(os.environ, GPUHOST_TESTHOST_TAG=os.environ.get("GPUHOST_TESTHOST_TAG", "d1"))
NAME = "dayone"
VENV = "/opt/sglang/venv-sglang-0.5.23"   # the role's default sglang_venv for sglang 0.5.23
SITE = VENV + "/lib/python3.11/site-packages"
SSH_OPTS = ["-o", "BatchMode=yes", "-o", "StrictHostKeyChecking=no", "-o", "UserKnownHostsFile=/dev/null",
            "-o", "LogLevel=ERROR", "-o", "ConnectTimeout=5"]

NO_FIXTURES = not (os.path.isfile(os.path.join(PARSER_VENV, "bin", "python")) and os.path.isdir(ENGINE_VENV)
                   and os.path.isdir(MODEL))

# What each box must get: the production render test's SM120 pieces (tests/integration/test_production_inventory.py)
CASES = {
    "sm120-8x-2socket": {
        "sm": "sm_120",
        "argv": ["--disable-shared-experts-fusion", "--dsa-decode-backend flashinfer_sparse_mla",
                 "--kv-cache-dtype fp8_e4m3", "--mem-fraction-static 0.92", "--disable-custom-all-reduce",
                 "--cuda-graph-backend-decode disabled", "--cuda-graph-backend-prefill disabled", "--tp-size 8",
                 "--tool-call-parser glm47", "--reasoning-parser glm45"],
        "not_argv": [],
        "nccl": ["NCCL_P2P_LEVEL=SYS"],
    },
    "h200-2x-vm": {
        "sm": "sm_90",
        "argv": ["--attention-backend triton", "--cuda-graph-backend-decode disabled",
                 "--cuda-graph-backend-prefill disabled", "--tp-size 8", "--tool-call-parser glm47"],
        "not_argv": ["--disable-shared-experts-fusion", "--kv-cache-dtype fp8_e4m3"],
        "nccl": ["NCCL_P2P_LEVEL=NVL"],
    },
}


def ssh(host, command, check=True):
    proc = subprocess.run(["ssh", *SSH_OPTS, "-i", host["identity_file"], "root@%s" % host["address"], command],
                          capture_output=True, text=True, timeout=120, check=False)
    if check:
        assert proc.returncode == 0, "ssh %r failed: %s" % (command, proc.stderr)
    return proc


@pytest.fixture(scope="module")
def host(tmp_path_factory):
    subprocess.run([sys.executable, TESTHOST, "prepare"], env=ENV, check=True, capture_output=True)
    proc = subprocess.run([sys.executable, TESTHOST, "create", NAME, "--bind-ro", PARSER_VENV + ":" + PARSER_VENV,
                           "--bind-ro", ENGINE_VENV + ":" + ENGINE_VENV, "--bind-ro", BOXES + ":/srv/gpu-boxes"],
                          env=ENV, check=True, capture_output=True, text=True)
    info = json.loads(proc.stdout.strip().splitlines()[-1])
    try:
        # the engine venv at the role's path: the parser venv's packages (a .pth), the replaying pynvml, the stamp
        stamp = {"packages": ["sglang==0.5.23"], "requirements": "", "requirements_sha1": "", "extra_args": []}
        ssh(info, " && ".join([
            "/usr/bin/python3 -m venv --without-pip " + VENV,
            "echo \"import site; site.addsitedir('%s/lib/python3.11/site-packages'); "
            "site.addsitedir('%s/lib/python3.11/site-packages')\" > %s/gpuhost-parser-venv.pth" % (PARSER_VENV, ENGINE_VENV, SITE),
            "mkdir -p %s/pynvml" % SITE,
            "echo '%s' > %s/.gpuhost-install.json" % (json.dumps(stamp), VENV)]))
        for src, dest in (("pynvml_standin/pynvml.py", "pynvml/__init__.py"), ("fake_nvml.py", "fake_nvml.py")):
            subprocess.run(["scp", *SSH_OPTS, "-i", info["identity_file"], os.path.join(ROOT, "tests", "harness", src),
                            "root@%s:%s/%s" % (info["address"], SITE, dest)], check=True, capture_output=True)
        yield info
    finally:
        subprocess.run([sys.executable, TESTHOST, "destroy", NAME], env=ENV, check=False, capture_output=True)


def inventory(tmp_path, host, box):
    with open(os.path.join(ROOT, "inventories", "production", "group_vars", "sglang_servers.yml")) as fh:
        gv = yaml.safe_load(fh)
    for key in ("sglang_model_repo_id", "sglang_model_revision", "sglang_model_require_commit"):
        gv.pop(key)
    gv.update({
        "sglang_model_source": "controller", "sglang_model_controller_dir": MODEL,
        "sglang_api_key": "day-one-key", "sglang_ready_timeout": 120,
        # the box as it presents itself
        "sglang_sysfs_root": "/srv/gpu-boxes/%s/root" % box, "nccl_sysfs_root": "/srv/gpu-boxes/%s/root" % box,
        # a minbase host has no compiler and no package source; torch 2.13.0+cpu needs no CUDA compiler
        "sglang_toolchain_c": "none", "sglang_toolchain_install": False,
    })
    inv = tmp_path / "inv"
    (inv / "group_vars").mkdir(parents=True)
    (inv / "group_vars" / "sglang_servers.yml").write_text(yaml.safe_dump(gv))
    (inv / "hosts.yml").write_text(yaml.safe_dump({"all": {"children": {"sglang_servers": {"hosts": {NAME: {
        "ansible_host": host["address"], "ansible_user": "root", "ansible_ssh_private_key_file": host["identity_file"],
        "ansible_python_interpreter": "/usr/bin/python3"}}}}}}))
    return str(inv / "hosts.yml")


def test_no_test_sets_gpu_facts_by_hand():
    """The facts variable playbooks/deploy.yml registers is never set by a test or a scenario."""
    # spelled in two pieces, so that this file is not a hit of its own search
    proc = subprocess.run(["git", "grep", "-n", "gpuhost_" + "gpu_facts", "tests", "molecule"], cwd=ROOT,
                          capture_output=True, text=True, check=False)
    assert proc.stdout == "", proc.stdout
    # and the nccl role is handed facts only as gpu_facts read them from a presented box, never a written dict
    proc = subprocess.run(["git", "grep", "-n", "nccl_" + "gpu_facts:", "tests", "molecule"], cwd=ROOT,
                          capture_output=True, text=True, check=False)
    hand = [line for line in proc.stdout.splitlines() if not line.endswith('"{{ __sglang_gpu_facts }}"')]
    assert hand == [], hand


@pytest.mark.testhosts
@pytest.mark.sglang
@pytest.mark.long
@pytest.mark.skipif(NO_FIXTURES, reason="no .cache/sglang-venv, engine venv or tiny model: run tests/stages/20-fixtures.sh")
@pytest.mark.parametrize("box", list(CASES))
def test_day_one_deploy(host, box, tmp_path):
    case = CASES[box]
    # the host's system Python has no nvidia-ml-py; only the engine venv answers NVML (from the box's recording)
    assert ssh(host, "/usr/bin/python3 -c 'import pynvml'", check=False).returncode != 0
    ssh(host, "echo GPUHOST_NVML_REPLAY=/srv/gpu-boxes/%s/nvml.json > /etc/environment; "
              "rm -f /etc/gpuhost/nccl.env /etc/systemd/system/sglang.service" % box)
    # a new SSH connection per case: a persisting control master would keep the last case's login environment
    env = harness.ansible_env(ANSIBLE_SSH_CONTROL_PATH_DIR=str(tmp_path / "cp"))
    start = time.time()
    proc = subprocess.run([os.path.join(os.path.dirname(sys.executable), "ansible-playbook"), "-v", "-i",
                           inventory(tmp_path, host, box), os.path.join(ROOT, "playbooks", "deploy.yml")],
                          cwd=ROOT, env=env, capture_output=True, text=True, timeout=900, check=False)
    out = proc.stdout + proc.stderr
    print("deploy of %s: %.1f s, rc %d" % (box, time.time() - start, proc.returncode))
    flat = " ".join(out.split())
    (tmp_path / "deploy.log").write_text(out)
    assert proc.returncode != 0, flat[-3000:]
    unit = ssh(host, "cat /etc/systemd/system/sglang.service").stdout
    nccl = ssh(host, "cat /etc/gpuhost/nccl.env").stdout
    exec_start = [line for line in unit.splitlines() if line.startswith("ExecStart=")][0]
    print("## %s\n%s\n## nccl.env\n%s" % (box, exec_start, nccl))
    for piece in case["argv"]:
        assert piece in exec_start, (piece, exec_start)
    for piece in case["not_argv"]:
        assert piece not in exec_start, (piece, exec_start)
    for line in case["nccl"]:
        assert line in nccl.splitlines(), nccl
    # the toolchain proof was given the box's architecture (torch 2.13.0+cpu plans no CUDA compiler, so no kernel is
    # built here; with a CUDA torch and nvcc the kernel is compiled for these targets)
    proof = flat.split("TASK [gpuhost.sglang.sglang : Toolchain | plan from", 1)[1].split("TASK [", 1)[0]
    assert "targets: - %sa " % case["sm"] in proof, proof[:3000]
    # the failure: the real SGLang started on a CPU host and exited before readiness, every candidate
    fail = re.search(r"Roll halted at %s \(batch of %s\): No candidate passed the gate on %s\. (.*?) The hosts of later"
                     % (NAME, NAME, NAME), flat)
    assert fail, flat[-3000:]
    classes = re.findall(r"\[candidate \d+ \{[^}]*\}: (\w+): ", fail.group(1))
    assert classes and set(classes) == {"startup_failure"}, fail.group(1)
    assert "No last-known-good existed: the service was stopped." in fail.group(1)
    assert ssh(host, "systemctl is-active sglang.service", check=False).stdout.strip() != "active"

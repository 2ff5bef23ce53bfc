# -*- coding: utf-8 -*-
# Copyright: gpuhost.sglang contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The example production inventory (Proxmox VE + 8x RTX PRO 6000 Blackwell + GLM-5-NVFP4 in LXC):
every playbook passes --syntax-check with it, every role's variables pass the role's argument spec, and the
SGLang command line it renders (profile + options + each fallback) passes SGLang 0.5.23's own parser."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import glob
import os
import subprocess
import sys

import pytest

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
BIN = os.path.dirname(sys.executable)
SGLANG_PY = os.path.join(ROOT, ".cache", "sglang-venv", "bin", "python")
ENV = dict(os.environ, ANSIBLE_CONFIG=os.path.join(ROOT, "ansible.cfg"), ANSIBLE_NOCOLOR="1")
INVENTORIES = ["inventories/production", "inventories/sandbox"]


def playbook(*args):
    proc = subprocess.run([os.path.join(BIN, "ansible-playbook")] + list(args), cwd=ROOT, env=ENV,
                          capture_output=True, text=True, timeout=600, check=False)
    return proc.returncode, proc.stdout + proc.stderr


@pytest.mark.parametrize("inventory", INVENTORIES)
@pytest.mark.parametrize("play", sorted(os.path.basename(p) for p in glob.glob(os.path.join(ROOT, "playbooks", "*.yml"))))
def test_syntax_check(inventory, play):
    rc, out = playbook("-i", inventory, "--syntax-check", os.path.join("playbooks", play))
    assert rc == 0, out


@pytest.mark.sglang
@pytest.mark.skipif(not os.path.exists(SGLANG_PY), reason="no .cache/sglang-venv: run tests/fixtures/sglang-venv.sh")
def test_production_inventory_validates():
    rc, out = playbook("-i", "inventories/production", "tests/integration/files/validate_inventory.yml",
                       "-e", "gpuhost_sglang_python=" + SGLANG_PY, "-e", "gpuhost_gpu_arch=12.0")
    assert rc == 0, out[-4000:]
    # the SM120 + DSA profile reached the command line, and every candidate was checked
    assert "--dsa-decode-backend" in out and "--mem-fraction-static 0.92" in out
    assert "--tp-size 8" in out and "--tp " not in out
    assert "failed=0" in out


def test_validation_catches_a_bad_inventory(tmp_path):
    """The same check fails, naming the variable and the allowed values, on a broken copy."""
    inv = tmp_path / "inv"
    subprocess.run(["cp", "-r", os.path.join(ROOT, "inventories", "production"), str(inv)], check=True)
    gv = inv / "group_vars" / "proxmox_hosts.yml"
    gv.write_text(gv.read_text().replace("proxmox_host_mode: lxc", "proxmox_host_mode: lxd"))
    rc, out = playbook("-i", str(inv), "tests/integration/files/validate_inventory.yml",
                       "-e", "gpuhost_sglang_python=" + sys.executable, "-e", "gpuhost_gpu_arch=12.0")
    assert rc != 0
    assert "proxmox_host_mode" in out and "lxd" in out

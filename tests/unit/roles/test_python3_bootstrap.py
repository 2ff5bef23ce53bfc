# -*- coding: utf-8 -*-
# Copyright: gpuhost.sglang contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""A container fresh from a Proxmox template may have no python3: playbooks/host.yml bootstraps it with
ansible.builtin.raw before the first module in the container, and the script it sends is idempotent. The script runs
here for real under /bin/sh, with apt-get and python3 as stand-ins on PATH (a host without python3 is what it meets)."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import os
import subprocess

import yaml

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), os.pardir, os.pardir, os.pardir))
SCRIPT = os.path.join(ROOT, "playbooks/files/python3-bootstrap.sh")
# tasks that run on the controller or need no Python on the target
NO_PYTHON = {"ansible.builtin.meta", "meta", "ansible.builtin.raw", "raw", "ansible.builtin.set_fact", "set_fact",
             "ansible.builtin.assert", "assert", "ansible.builtin.debug", "debug"}


def action(task):
    return [k for k in task if "." in k or k in ("meta", "raw", "setup", "wait_for_connection", "set_fact", "assert",
                                                 "debug", "include_role")][0]


def test_the_container_play_sends_python3_with_raw_before_any_module():
    with open(os.path.join(ROOT, "playbooks/host.yml")) as f:
        plays = yaml.safe_load(f)
    (play,) = [p for p in plays if "sglang_servers" in p["hosts"]]
    assert play["gather_facts"] is False, "facts need python3: they come after the bootstrap"
    actions = [action(t) for t in play["tasks"]]
    first_module = [a for a in actions if a not in NO_PYTHON][0]
    assert "ansible.builtin.raw" in actions, "no raw bootstrap: the first task needing python3 is %s" % first_module
    assert actions.index("ansible.builtin.raw") < actions.index(first_module), actions
    raw = play["tasks"][actions.index("ansible.builtin.raw")]
    assert "python3-bootstrap.sh" in raw["ansible.builtin.raw"] and raw["args"]["executable"] == "/bin/sh"
    assert "gpuhost-python3: installed" in raw["changed_when"]


def run(stubs, fail_install=False):
    env = {"PATH": str(stubs), "STUBS": str(stubs), "FAIL_INSTALL": "1" if fail_install else ""}
    with open(SCRIPT) as f:
        text = f.read()
    return subprocess.run(["/bin/sh", "-c", text], env=env, capture_output=True, text=True, timeout=30, check=False)


def stub_apt(stubs):
    """apt-get stand-in: logs its arguments; 'install ... python3' puts a python3 that runs on PATH."""
    apt = stubs / "apt-get"
    apt.write_text('#!/bin/sh\necho "$*" >>"$STUBS/apt.log"\ncase "$*" in *install*python3*)\n'
                   '  [ -n "$FAIL_INSTALL" ] && exit 100\n'
                   '  printf "#!/bin/sh\\nexit 0\\n" >"$STUBS/python3"; /bin/chmod +x "$STUBS/python3";;\nesac\n')
    apt.chmod(0o755)


def test_without_python3_it_installs_then_finds_it(tmp_path):
    stub_apt(tmp_path)
    first = run(tmp_path)
    assert first.returncode == 0 and first.stdout.strip() == "gpuhost-python3: installed", first
    assert (tmp_path / "apt.log").read_text().splitlines() == [
        "update -qq", "install -y -qq --no-install-recommends python3"]
    second = run(tmp_path)
    assert second.returncode == 0 and second.stdout.strip() == "gpuhost-python3: present", second
    assert len((tmp_path / "apt.log").read_text().splitlines()) == 2, "the second run called apt-get"


def test_a_failed_install_fails_the_task(tmp_path):
    stub_apt(tmp_path)
    out = run(tmp_path, fail_install=True)
    assert out.returncode == 100 and "installed" not in out.stdout

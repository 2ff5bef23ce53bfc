# Copyright: (c) 2026, gpuhost.sglang contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Every role's first task is the shared input check: one ansible-playbook run (check mode,
preflight tags only, on localhost) gives each role one bad input and reads the message it failed with. The molecule
scenarios repeat this on real hosts and prove nothing changed there (molecule/resources/tasks/bad_input.yml)."""
from __future__ import annotations

import os
import re
import subprocess
import sys

import yaml

from ansible_collections.gpuhost.sglang.tests import harness

CASES = [
    ("sglang", {"sglang_start_limit_burst": 0},
     "sglang_start_limit_burst=0 is out of range: allowed an integer, 1 to 1000."),
    ("router", {"router_prometheus_port": 30000},
     "router_prometheus_port=30000 must be different from router_port=30000 (smg serves both on router_listen_address)."),
    ("router", {"router_ready_timeout": 3},
     "router_ready_timeout=3 must be greater than router_health_check.health-check-interval-secs=5"
     " (a worker is healthy only after one health-check interval)."),
    ("monitoring", {"monitoring_alert_error_ratio": 5},
     "monitoring_alert_error_ratio=5 is out of range: allowed a number, 0.0 to 1.0 (a fraction of requests)."),
    ("dcgm_exporter", {"dcgm_exporter_port": 65536}, "dcgm_exporter_port=65536 is out of range: allowed an integer, 1 to 65535."),
    ("nvidia_driver", {"nvidia_driver_reboot_timeout": 30},
     "nvidia_driver_reboot_timeout=30 is out of range: allowed an integer, 60 to 86400."),
    ("proxmox_host", {"proxmox_host_mode": "lxc", "proxmox_host_reboot_timeout": 0},
     "proxmox_host_reboot_timeout=0 is out of range: allowed an integer, 60 to 86400."),
    ("proxmox_lxc_gpu", {"proxmox_lxc_gpu_ctid": 101, "proxmox_lxc_gpu_options": {"cores": 0}},
     "proxmox_lxc_gpu_options.cores=0 is out of range: allowed an integer, 1 to 8192."),
]


def test_each_role_fails_first_on_its_bad_input(tmp_path):
    tasks = []
    for n, (role, bad, _msg) in enumerate(CASES):
        tasks.append({"name": "case %d" % n, "block": [
            {"name": "role %s" % role, "ansible.builtin.include_role": {"name": "gpuhost.sglang." + role},
             "vars": bad, "tags": ["always"]},
            {"name": "not reached", "ansible.builtin.debug": {"msg": "CASE %d ACCEPTED" % n}, "tags": ["always"]}],
            "rescue": [{"name": "message", "tags": ["always"], "ansible.builtin.debug": {
                "msg": "CASE %d TASK {{ ansible_failed_task.name }} MSG {{ ansible_failed_result.msg }} END" % n}}]})
    play = tmp_path / "play.yml"
    play.write_text(yaml.safe_dump([{"hosts": "localhost", "gather_facts": False, "tasks": tasks}], width=1000))
    tags = ",".join(sorted({role + "_preflight" for role, _bad, _msg in CASES}))
    proc = subprocess.run([os.path.join(os.path.dirname(sys.executable), "ansible-playbook"), "-i", "localhost,",
                           "-c", "local", "--check", "--tags", tags, str(play)],
                          env=harness.ansible_env(), cwd=harness.ROOT,
                          capture_output=True, text=True, timeout=300, check=False)
    out = " ".join((proc.stdout + proc.stderr).split())  # the yaml callback folds long messages
    assert proc.returncode == 0, out[-3000:]
    for n, (role, bad, msg) in enumerate(CASES):
        assert "CASE %d ACCEPTED" % n not in out, "%s accepted %s" % (role, bad)
        found = re.search(r"CASE %d TASK (.*?) MSG (.*?) END" % n, out)
        assert found, "%s: no message for %s in %s" % (role, bad, out[-2000:])
        assert "inputs in range and consistent" in found.group(1), "%s failed elsewhere first: %s" % (role, found.groups())
        assert found.group(2) == msg, (role, found.group(2))

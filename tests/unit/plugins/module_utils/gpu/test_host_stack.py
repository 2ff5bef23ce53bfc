# -*- coding: utf-8 -*-
# Copyright: gpuhost.sglang contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""A Proxmox host whose GPUs serve only containers gets no CUDA toolkit and no NCCL."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import os

import pytest
import yaml

from ansible_collections.gpuhost.sglang.plugins.module_utils.gpu.host_stack import host_compute_stack

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), *([os.pardir] * 5)))


def load(rel):
    with open(os.path.join(ROOT, rel)) as f:
        return yaml.safe_load(f)


def test_containers_only_host_gets_no_toolkit_and_no_nccl():
    res = host_compute_stack("host", "containers", "12.8", True)
    assert res["cuda_version"] == "" and res["nccl"] is False
    assert len(res["skipped"]) == 2 and "CUDA toolkit 12.8 not installed" in res["skipped"][0]
    assert host_compute_stack("host", "host", "12.8", True) == {"cuda_version": "12.8", "nccl": True, "skipped": []}
    assert host_compute_stack("container", "host", "12.8", True)["cuda_version"] == ""
    with pytest.raises(ValueError) as e:
        host_compute_stack("host", "vms", "12.8", True)
    assert "nvidia_driver_host_serves='vms' is invalid: allowed values are host, containers" in str(e.value)


def test_production_proxmox_host_asks_for_no_toolkit():
    inv = load("inventories/production/group_vars/proxmox_hosts.yml")
    defaults = load("roles/nvidia_driver/defaults/main.yml")
    assert inv["proxmox_host_mode"] == "lxc"
    res = host_compute_stack("host", "containers" if inv["proxmox_host_mode"] != "baremetal" else "host",
                             inv.get("nvidia_driver_cuda_version", defaults["nvidia_driver_cuda_version"]),
                             inv.get("nvidia_driver_install_nccl", defaults["nvidia_driver_install_nccl"]))
    assert res["cuda_version"] == "" and not res["nccl"]
    # the inventory alone (a play that includes the role without host.yml's nvidia_driver_host_serves)
    alone = host_compute_stack("host", defaults["nvidia_driver_host_serves"],
                               inv.get("nvidia_driver_cuda_version", defaults["nvidia_driver_cuda_version"]),
                               inv.get("nvidia_driver_install_nccl", defaults["nvidia_driver_install_nccl"]))
    assert alone["cuda_version"] == "" and not alone["nccl"], alone


def test_host_playbook_passes_containers_for_lxc():
    plays = load("playbooks/host.yml")
    task = [t for t in plays[0]["tasks"] if t.get("ansible.builtin.include_role", {}).get("name") ==
            "gpuhost.sglang.nvidia_driver"][0]
    assert "nvidia_driver_host_serves" in task["vars"] and "baremetal" in task["vars"]["nvidia_driver_host_serves"]

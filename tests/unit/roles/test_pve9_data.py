# -*- coding: utf-8 -*-
# Copyright: gpuhost.sglang contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Proxmox VE 9 (Debian 13 trixie) is data in the host roles: the driver's repository, the Proxmox repositories,
the container template family, the platforms."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import os

import yaml

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), os.pardir, os.pardir, os.pardir))


def load(rel):
    with open(os.path.join(ROOT, rel)) as f:
        return yaml.safe_load(f)


def test_driver_repository_knows_debian_13():
    distros = load("roles/nvidia_driver/vars/main.yml")["nvidia_driver_repo_distros"]
    assert distros["Debian-13"] == "debian13" and distros["Debian-12"] == "debian12"


def test_proxmox_releases_and_template_families():
    rel = load("roles/proxmox_host/vars/repositories.yml")["proxmox_host_pve_releases"]
    assert rel["trixie"]["pve"] == 9 and rel["trixie"]["format"] == "deb822"
    assert rel["bookworm"]["pve"] == 8 and rel["bookworm"]["format"] == "list"
    fam = load("roles/proxmox_lxc_gpu/vars/templates.yml")["proxmox_lxc_gpu_template_families"]
    assert fam == {"bookworm": "debian-12-standard", "trixie": "debian-13-standard"}


def test_platforms_list_trixie():
    for role in ("nvidia_driver", "proxmox_host", "proxmox_lxc_gpu"):
        platforms = load("roles/%s/meta/main.yml" % role)["galaxy_info"]["platforms"]
        versions = [v for p in platforms if p["name"] == "Debian" for v in p["versions"]]
        assert "trixie" in versions and "bookworm" in versions, role

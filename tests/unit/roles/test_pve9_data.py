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
    releases = load("roles/nvidia_driver/vars/main.yml")["nvidia_driver_repo_releases"]
    assert releases["Debian-13"]["distro"] == "debian13" and releases["Debian-12"]["distro"] == "debian12"
    # Debian 13's repository has a key of its own (the old one's SHA1 binding is refused by Debian 13's apt)
    assert releases["Debian-13"]["key_file"] == "8793F200.pub" and releases["Debian-12"]["key_file"] == "3bf863cc.pub"


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


def test_production_inventory_installs_a_driver_on_pve8_and_on_pve9():
    """The example inventory names no branch that one of the two majors' NVIDIA repositories lacks: Debian 13's
    carries 590 only (NVIDIA/cuda-repo-management #38), so a pinned "580" stops the role on Proxmox VE 9."""
    inv = load("inventories/production/group_vars/proxmox_hosts.yml")
    requested = str(inv.get("nvidia_driver_branch", "") or "")
    releases = load("roles/nvidia_driver/vars/main.yml").get("nvidia_driver_repo_releases", {})
    for release, pve in (("Debian-12", 8), ("Debian-13", 9)):
        carried = [str(b) for b in releases.get(release, {}).get("branches", ["590"] if pve == 9 else [])]
        assert not requested or not carried or requested in carried, (
            "PVE %d (%s): nvidia_driver_branch=%s is not in its NVIDIA repository (%s)" % (pve, release, requested, carried))
    from ansible_collections.gpuhost.sglang.plugins.module_utils.gpu.driver_repo import choose_branch, release_repository
    data = load("roles/nvidia_driver/vars/main.yml")
    chosen = [choose_branch(release_repository(r, releases, data["nvidia_driver_repo_base_url"]),
                            data["nvidia_driver_arch_policy"]["Blackwell"], "Blackwell", requested)["branch"]
              for r in ("Debian-12", "Debian-13")]
    assert chosen == ["580", "590"]

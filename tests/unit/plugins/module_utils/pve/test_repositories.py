# -*- coding: utf-8 -*-
# Copyright: gpuhost.sglang contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Proxmox VE repositories: a fresh host's enterprise sources fail apt-get update without a subscription (HTTP 401);
the role disables them only without a subscription and adds no-subscription, in PVE 8's and PVE 9's formats."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import os

import pytest
import yaml

from ansible_collections.gpuhost.sglang.plugins.module_utils.pve import repositories as repos
from ansible_collections.gpuhost.sglang.tests import harness

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), *([os.pardir] * 5)))
with open(os.path.join(ROOT, "roles/proxmox_host/vars/repositories.yml")) as f:
    RELEASES = yaml.safe_load(f)["proxmox_host_pve_releases"]

# A fresh PVE 8 install (admin guide, "Package Repositories": pve-enterprise.list enabled by default; the Ceph
# enterprise repository in ceph.list).
PVE8 = {
    "/etc/apt/sources.list": "deb http://deb.debian.org/debian bookworm main contrib\n"
                             "deb http://deb.debian.org/debian bookworm-updates main contrib\n"
                             "# security updates\n"
                             "deb http://security.debian.org/debian-security bookworm-security main contrib\n",
    "/etc/apt/sources.list.d/pve-enterprise.list": "deb https://enterprise.proxmox.com/debian/pve bookworm pve-enterprise\n",
    "/etc/apt/sources.list.d/ceph.list": "deb https://enterprise.proxmox.com/debian/ceph-quincy bookworm enterprise\n",
}
# A fresh PVE 9 install: deb822 files ceph.sources, debian.sources, pve-enterprise.sources.
PVE9 = {
    "/etc/apt/sources.list.d/debian.sources": "Types: deb deb-src\nURIs: http://deb.debian.org/debian/\n"
                                              "Suites: trixie trixie-updates\nComponents: main contrib non-free-firmware\n"
                                              "Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg\n",
    "/etc/apt/sources.list.d/pve-enterprise.sources": "Types: deb\nURIs: https://enterprise.proxmox.com/debian/pve\n"
                                                      "Suites: trixie\nComponents: pve-enterprise\n"
                                                      "Signed-By: /usr/share/keyrings/proxmox-archive-keyring.gpg\n",
    "/etc/apt/sources.list.d/ceph.sources": "Types: deb\nURIs: https://enterprise.proxmox.com/debian/ceph-squid\n"
                                            "Suites: trixie\nComponents: enterprise\n"
                                            "Signed-By: /usr/share/keyrings/proxmox-archive-keyring.gpg\n",
}


def apt_update_401(files):
    """The stand-in of apt-get update on a host without a key: every enabled enterprise entry answers 401."""
    return sorted(p for p, t in files.items() for e in repos.entries(p, t) if e["enabled"] and e["enterprise"])


def applied(files, res):
    out = dict(files)
    out.update(res["disable"])
    out.update(res["add"])
    return out


@pytest.mark.parametrize("files,release", [(PVE8, "bookworm"), (PVE9, "trixie")])
def test_no_subscription_host_gets_a_working_apt(files, release):
    assert apt_update_401(files)   # the fresh host fails apt-get update
    res = repos.plan(files, release, False, "no-subscription", release_data=RELEASES)
    assert res["problems"] == [] and len(res["disable"]) == 2
    after = applied(files, res)
    assert apt_update_401(after) == []
    rel = RELEASES[release]
    added = repos.entries(rel["path"], after[rel["path"]])
    assert [(e["uri"], e["suite"], e["components"]) for e in added] == [(rel["uri"], release, ["pve-no-subscription"])]
    # idempotent: a second plan changes nothing
    again = repos.plan(after, release, False, "no-subscription", release_data=RELEASES)
    assert again["disable"] == {} and again["add"] == {}


def test_pve9_disables_with_enabled_false_and_keeps_the_stanza():
    res = repos.plan(PVE9, "trixie", False, "no-subscription", release_data=RELEASES)
    text = res["disable"]["/etc/apt/sources.list.d/pve-enterprise.sources"]
    assert text.endswith("Enabled: false\n") and "URIs: https://enterprise.proxmox.com/debian/pve" in text
    assert res["add"]["/etc/apt/sources.list.d/proxmox.sources"].startswith("Types: deb\nURIs: ")


def test_subscription_keeps_enterprise():
    res = repos.plan(PVE8, "bookworm", True, "no-subscription", release_data=RELEASES)
    assert res["disable"] == {}
    assert repos.plan(PVE8, "bookworm", True, "unmanaged", release_data=RELEASES)["problems"] == []


def test_unmanaged_preflight_names_the_fix():
    res = repos.plan(PVE8, "bookworm", False, "unmanaged", release_data=RELEASES)
    assert res["disable"] == {} and res["add"] == {}
    msg = res["problems"][0]
    assert "/etc/apt/sources.list.d/pve-enterprise.list" in msg and "401" in msg
    assert "proxmox_host_pve_repository: no-subscription" in msg


def test_mirror_and_bad_input():
    res = repos.plan(PVE8, "bookworm", False, "mirror", "http://mirror.example/pve/", RELEASES)
    assert res["add"] == {"/etc/apt/sources.list.d/pve-no-subscription.list":
                          "deb http://mirror.example/pve bookworm pve-no-subscription\n"}
    with pytest.raises(repos.RepoError) as e:
        repos.plan(PVE8, "bookworm", False, "mirror", "", RELEASES)
    assert "proxmox_host_pve_repository_mirror" in str(e.value)
    with pytest.raises(repos.RepoError) as e:
        repos.plan(PVE8, "bookworm", False, "free", "", RELEASES)
    assert "proxmox_host_pve_repository='free' is invalid: allowed values are no-subscription" in str(e.value)
    res = repos.plan(PVE8, "bullseye", False, "no-subscription", release_data=RELEASES)
    assert "not a known Proxmox VE base" in res["problems"][0]
    # only checking: the release does not matter
    assert repos.plan({}, "forky", False, "unmanaged", release_data=RELEASES)["problems"] == []


def test_subscription_status_line():
    assert repos.subscription_active("message: ...\nstatus: active\nkey: pve4b-123\n")
    assert not repos.subscription_active("status: notfound\n")
    assert not repos.subscription_active("")


def test_list_parser_options_and_comments():
    e = repos.list_entries("deb [arch=amd64 signed-by=/k.gpg] http://x/pve bookworm pve-no-subscription # c\n"
                           "#deb https://enterprise.proxmox.com/debian/pve bookworm pve-enterprise\n")
    assert e[0]["uri"] == "http://x/pve" and e[0]["components"] == ["pve-no-subscription"] and e[0]["enabled"]
    assert e[1]["enterprise"] and not e[1]["enabled"]


@pytest.mark.parametrize("files,release", [(PVE8, "bookworm"), (PVE9, "trixie")])
def test_module_on_a_fake_root(tmp_path, files, release):
    for path, text in files.items():
        dest = tmp_path / "root" / path.lstrip("/")
        dest.parent.mkdir(parents=True, exist_ok=True)
        dest.write_text(text)
    (tmp_path / "root/etc/os-release").write_text('PRETTY_NAME="Debian"\nVERSION_CODENAME=%s\n' % release)
    args = dict(releases=RELEASES, sysroot=str(tmp_path / "root"), subscription_command=["echo", "status: notfound"])
    res = harness.run_module("pve_repositories", dict(args, mode="unmanaged"), tmp_path=tmp_path, timeout=60)
    assert res.get("failed") and "no active subscription" in res["msg"]
    res = harness.run_module("pve_repositories", args, tmp_path=tmp_path, timeout=60)
    assert res["changed"] and not res.get("failed") and res["release"] == release and len(res["disabled"]) == 2
    after = dict((p, (tmp_path / "root" / p.lstrip("/")).read_text()) for p in list(files) + res["added"])
    assert apt_update_401(after) == []
    res = harness.run_module("pve_repositories", args, tmp_path=tmp_path, timeout=60)
    assert not res["changed"]

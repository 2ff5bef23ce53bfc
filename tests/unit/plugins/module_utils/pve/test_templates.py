# -*- coding: utf-8 -*-
# Copyright: gpuhost.sglang contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The container template: chosen from data per Proxmox VE release and downloaded with pveam when missing."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import os

import pytest
import yaml

from ansible_collections.gpuhost.sglang.plugins.module_utils.pve import templates as tpl

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), *([os.pardir] * 5)))

# `pveam available --section system` and `pveam list local` as pveam prints them (names: unverified against today's
# index; the format is pveam's two columns)
AVAILABLE = """system          alpine-3.22-default_20250617_amd64.tar.xz
system          debian-12-standard_12.7-1_amd64.tar.zst
system          debian-12-standard_12.12-1_amd64.tar.zst
system          debian-13-standard_13.1-2_amd64.tar.zst
system          ubuntu-24.04-standard_24.04-2_amd64.tar.zst
"""
LIST = """NAME                                                         SIZE
local:vztmpl/debian-12-standard_12.7-1_amd64.tar.zst         120.29MB
"""


def families():
    with open(os.path.join(ROOT, "roles/proxmox_lxc_gpu/vars/templates.yml")) as f:
        return yaml.safe_load(f)["proxmox_lxc_gpu_template_families"]


def test_newest_of_the_release_family_is_downloaded():
    fam = families()
    avail, listed = tpl.parse_available(AVAILABLE), tpl.parse_list(LIST)
    res = tpl.choose("", "local", fam["trixie"], listed, avail)
    assert res == {"volid": "local:vztmpl/debian-13-standard_13.1-2_amd64.tar.zst",
                   "name": "debian-13-standard_13.1-2_amd64.tar.zst", "download": True}
    res = tpl.choose("", "local", fam["bookworm"], listed, avail)
    assert res["name"] == "debian-12-standard_12.12-1_amd64.tar.zst" and res["download"]   # 12.12 > 12.7
    # offline (no index): the newest already there
    assert tpl.choose("", "local", fam["bookworm"], listed, [])["download"] is False


def test_named_template_downloaded_only_when_missing():
    avail, listed = tpl.parse_available(AVAILABLE), tpl.parse_list(LIST)
    assert not tpl.choose("local:vztmpl/debian-12-standard_12.7-1_amd64.tar.zst", "local", "x", listed, avail)["download"]
    assert tpl.choose("debian-13-standard_13.1-2_amd64.tar.zst", "local", "x", listed, avail)["download"]
    with pytest.raises(tpl.TemplateError) as e:
        tpl.choose("local:vztmpl/debian-13-standard_13.0-1_amd64.tar.zst", "local", "x", listed, avail)
    assert "debian-13-standard_13.1-2_amd64.tar.zst" in str(e.value) and "proxmox_lxc_gpu_template" in str(e.value)


def test_default_is_no_hard_coded_name():
    with open(os.path.join(ROOT, "roles/proxmox_lxc_gpu/defaults/main.yml")) as f:
        assert yaml.safe_load(f)["proxmox_lxc_gpu_template"] == ""


def test_module_downloads_with_the_pveam_standin(tmp_path, monkeypatch):
    from ansible_collections.gpuhost.sglang.tests import harness
    standins = os.path.join(ROOT, "tests/fixtures/pve-standins/bin")
    monkeypatch.setenv("PATH", standins + os.pathsep + os.environ["PATH"])
    monkeypatch.setenv("GPUHOST_STANDIN_ROOT", str(tmp_path / "standin"))
    monkeypatch.setenv("GPUHOST_STANDIN_LOG", str(tmp_path / "standins.log"))
    (tmp_path / "root/etc").mkdir(parents=True)
    (tmp_path / "root/etc/os-release").write_text("VERSION_CODENAME=trixie\n")
    args = dict(families=families(), sysroot=str(tmp_path / "root"))
    res = harness.run_module("pve_template", args, tmp_path=tmp_path, timeout=60)
    assert res.get("changed") and res["volid"] == "local:vztmpl/debian-13-standard_13.1-2_amd64.tar.zst", res
    assert (tmp_path / "standin/templates/local/debian-13-standard_13.1-2_amd64.tar.zst").exists()
    res = harness.run_module("pve_template", args, tmp_path=tmp_path, timeout=60)
    assert not res["changed"] and res["volid"].endswith("debian-13-standard_13.1-2_amd64.tar.zst")
    log = (tmp_path / "standins.log").read_text()
    assert log.count("pveam download") == 1
    (tmp_path / "root/etc/os-release").write_text("VERSION_CODENAME=bullseye\n")
    res = harness.run_module("pve_template", args, tmp_path=tmp_path, timeout=60)
    assert res["failed"] and "has no template family" in res["msg"] and "proxmox_lxc_gpu_template" in res["msg"]

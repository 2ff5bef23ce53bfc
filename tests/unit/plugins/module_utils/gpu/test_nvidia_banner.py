# -*- coding: utf-8 -*-
# Copyright: gpuhost.sglang contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The one parser of /proc/driver/nvidia/version, on real banners (fixtures/SOURCES.md)."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import io
import os

import pytest

from ansible_collections.gpuhost.sglang.plugins.module_utils.gpu import nvidia_banner as nb
from ansible_collections.gpuhost.sglang.plugins.module_utils.pve import lxc as pve_lxc

FIX = os.path.join(os.path.dirname(__file__), "fixtures")


def _read(name):
    with io.open(os.path.join(FIX, name), encoding="utf-8") as f:
        return f.read()


REAL = [
    ("open-565.57.01-ubuntu2404.txt", "565.57.01", "open", "x86_64"),
    ("open-525.60.11-arch.txt", "525.60.11", "open", "x86_64"),
    ("open-555.58-gentoo.txt", "555.58", "open", "x86_64"),
    ("open-aarch64-jetson-35.3.1.txt", "35.3.1", "open", "aarch64"),
    ("proprietary-384.98-ubuntu.txt", "384.98", "proprietary", "x86_64"),
]


@pytest.mark.parametrize("name,version,flavour,arch", REAL)
def test_real_banners(name, version, flavour, arch):
    info = nb.parse_banner(_read(name))
    assert info == {"version": version, "flavour": flavour, "arch": arch, "branch": version.split(".")[0]}
    assert nb.module_version(_read(name)) == version


@pytest.mark.parametrize("name,version,flavour,arch", REAL)
def test_pve_lxc_uses_the_same_parser(name, version, flavour, arch, monkeypatch):
    assert pve_lxc.parse_nvidia_version(_read(name)) == version
    # pve_lxc has no parser of its own any more: replacing the shared one changes its answer
    monkeypatch.setattr(nb, "module_version", lambda text: "sentinel")
    assert pve_lxc.parse_nvidia_version(_read(name)) == "sentinel"


def test_debug_build_and_the_version_line_anywhere():
    # synthetic, in the utils.mk format (GENERATE_NVIDSTRING with DEBUG=1): "Debug Build" instead of "Release Build"
    text = ("GCC version:  gcc version 12.2.0 (Debian 12.2.0-14)\n"
            "NVRM version: NVIDIA UNIX Open Kernel Module for x86_64  580.105.08  Debug Build  (u@h)  Thu Oct 30 2025\n")
    assert nb.parse_banner(text)["version"] == "580.105.08"


@pytest.mark.parametrize("text", [
    "", None, "GCC version:  gcc version 12.2.0\n", "NVRM version: something else 570.1\n",
    # a module name without a version must not borrow the GCC version of the next line
    "NVRM version: NVIDIA UNIX x86_64 Kernel Module\nGCC version:  gcc version 12.2.0\n",
])
def test_no_banner(text):
    assert nb.parse_banner(text) is None
    assert nb.module_version(text) is None


def test_bytes_are_accepted():
    assert nb.module_version(_read("open-555.58-gentoo.txt").encode("utf-8")) == "555.58"

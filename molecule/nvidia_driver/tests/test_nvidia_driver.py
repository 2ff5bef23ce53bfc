# -*- coding: utf-8 -*-
# Copyright: gpuhost.sglang contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""testinfra verify of the nvidia_driver scenario, after converge (old versions) and side_effect (upgrade)."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import pytest

NEW = "570.133.20-1"
DRIVER_HOST = ["nvidia-kernel-open-dkms", "nvidia-driver", "nvidia-smi", "libcuda1", "libnvidia-ml1", "nvidia-persistenced",
               "nvidia-fabricmanager-570"]
CONTAINER = ["libcuda1", "libnvidia-ml1", "nvidia-smi"]


def is_host(host):
    return host.backend.get_hostname() == "nvdrv-host"


def selections(host):
    out = host.check_output("dpkg --get-selections")
    return dict(line.split() for line in out.splitlines())


def test_upgraded_driver_versions(host):
    names = DRIVER_HOST if is_host(host) else CONTAINER
    for name in names:
        pkg = host.package(name)
        assert pkg.is_installed, name
        assert pkg.version == NEW, (name, pkg.version)


def test_cuda_and_nccl_newest_for_cuda_12_8(host):
    if not is_host(host):
        for name in ("cuda-toolkit-12-8", "libnccl2", "nvidia-kernel-open-dkms", "nvidia-driver"):
            assert not host.package(name).is_installed, name
        return
    assert host.package("cuda-toolkit-12-8").version == "12.8.1-1"
    # 2.26.2-1+cuda12.9 is newer but built for another CUDA: must not be chosen
    assert host.package("libnccl2").version == "2.26.2-1+cuda12.8"
    assert host.package("libnccl-dev").version == "2.26.2-1+cuda12.8"


def test_open_modules_for_blackwell(host):
    if is_host(host):
        assert host.package("nvidia-kernel-open-dkms").is_installed
        assert not host.package("nvidia-kernel-dkms").is_installed


def test_everything_held(host):
    sel = selections(host)
    names = DRIVER_HOST + ["cuda-toolkit-12-8", "libnccl2", "libnccl-dev"] if is_host(host) else CONTAINER
    for name in names:
        assert sel.get(name) == "hold", (name, sel.get(name))


def test_pinned_in_apt_preferences(host):
    prefs = host.file("/etc/apt/preferences.d/gpuhost-nvidia")
    assert prefs.exists and prefs.mode == 0o644
    content = prefs.content_string
    assert "Package: libcuda1\nPin: version %s\nPin-Priority: 1001" % NEW in content
    if is_host(host):
        assert "Package: libnccl2\nPin: version 2.26.2-1+cuda12.8\nPin-Priority: 1001" in content
    # the policy apt applies agrees with the file
    policy = host.check_output("apt-cache policy libcuda1")
    assert "Candidate: %s" % NEW in policy


def test_signed_repository(host):
    src = host.file("/etc/apt/sources.list.d/gpuhost-nvidia-cuda.sources").content_string
    assert "Signed-By: /usr/share/keyrings/gpuhost-nvidia-cuda.gpg" in src
    assert "Trusted" not in src
    assert host.file("/usr/share/keyrings/gpuhost-nvidia-cuda.gpg").exists


def test_no_upgrade_moves_held_packages(host):
    out = host.check_output("apt-get -s dist-upgrade")
    assert "0 upgraded" in out


def test_host_only_settings(host):
    blacklist = host.file("/etc/modprobe.d/gpuhost-blacklist-nouveau.conf")
    marker = host.file("/var/lib/gpuhost/nvidia-reboot-required")
    if not is_host(host):
        assert not blacklist.exists
        assert not marker.exists
        return
    assert blacklist.contains("^blacklist nouveau$")
    assert host.service("nvidia-persistenced").is_enabled
    assert host.service("nvidia-fabricmanager").is_enabled  # NVSwitch added before the upgrade
    # the reboot was not allowed (nvidia_driver_reboot: false), so it is recorded as pending
    assert marker.exists and "kernel module packages changed" in marker.content_string


@pytest.mark.parametrize("flag", ["--query-gpu=driver_version"])
def test_nvidia_smi_reports_the_installed_version(host, flag):
    # the stand-in nvidia-smi of the installed package reports its own version
    assert host.check_output("nvidia-smi %s --format=csv,noheader" % flag) == NEW.split("-", maxsplit=1)[0]

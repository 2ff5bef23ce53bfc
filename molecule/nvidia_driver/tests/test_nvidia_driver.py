# -*- coding: utf-8 -*-
# Copyright: gpuhost.sglang contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""testinfra verify of the nvidia_driver scenario: converge (580.95.05), side_effect (dist-upgrade, Secure Boot,
upgrade to 580.105.08, then the intended branch change to 590.44.01)."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import pytest

NEW = "590.44.01-1"
DRIVER_HOST = ["nvidia-kernel-open-dkms", "nvidia-driver-cuda", "nvidia-smi", "libcuda1", "libnvidia-ml1", "nvidia-persistenced",
               "nvidia-fabricmanager-590"]
CONTAINER = ["libcuda1", "libnvidia-ml1", "nvidia-smi"]


def is_host(host):
    return host.backend.get_hostname() == "nvdrv-host"


def selections(host):
    out = host.check_output("dpkg --get-selections")
    return dict(line.split() for line in out.splitlines())


def dpkg_log_order(host, names):
    """First 'install' line of each package in /var/log/dpkg.log (line number)."""
    first = {}
    for i, line in enumerate(host.file("/var/log/dpkg.log").content_string.splitlines()):
        parts = line.split()
        if len(parts) > 3 and parts[2] == "install":
            first.setdefault(parts[3].split(":")[0], i)
    return [first.get(n) for n in names]


def test_branch_changed_versions(host):
    names = DRIVER_HOST if is_host(host) else CONTAINER
    for name in names:
        pkg = host.package(name)
        assert pkg.is_installed, name
        assert pkg.version == NEW, (name, pkg.version)


def test_compute_only_not_the_desktop_metapackage(host):
    assert not host.package("nvidia-driver").is_installed
    if is_host(host):
        assert host.package("nvidia-driver-cuda").is_installed
        assert not host.package("nvidia-settings").is_installed  # desktop tool, pulled only by cuda-drivers / nvidia-driver


def test_branch_lock_installed_before_the_driver_and_swapped_on_the_branch_change(host):
    assert host.package("nvidia-driver-pinning-590").is_installed
    assert not host.package("nvidia-driver-pinning-580").is_installed
    assert host.file("/etc/apt/preferences.d/nvidia-driver-pinning-590").contains("^Pin: version 590\\.\\*$")
    lock, driver = dpkg_log_order(host, ["nvidia-driver-pinning-580", "libcuda1"])
    assert lock is not None and driver is not None and lock < driver, (lock, driver)


def test_other_branch_packages_removed(host):
    if is_host(host):
        assert not host.package("nvidia-fabricmanager-580").is_installed


def test_cuda_and_nccl_newest_for_cuda_12_8(host):
    if not is_host(host):
        for name in ("cuda-toolkit-12-8", "libnccl2", "nvidia-kernel-open-dkms", "nvidia-driver-cuda"):
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
    for name in names + ["nvidia-driver-pinning-590"]:
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


def test_headers_before_the_kernel_module_and_dkms_built_it(host):
    if not is_host(host):
        return
    release = host.check_output("uname -r")
    headers, module = dpkg_log_order(host, ["linux-headers-" + release, "nvidia-kernel-open-dkms"])
    assert headers is not None and module is not None and headers < module, (headers, module)
    assert host.file("/lib/modules/%s/build/include" % release).is_directory
    ko = host.file("/lib/modules/%s/updates/dkms/nvidia.ko" % release)
    assert ko.exists, "DKMS skipped the build (no headers for the running kernel)"
    assert "590.44.01 for %s, signed: /etc/dkms/gpuhost-mok.der" % release in ko.content_string
    assert "nvidia/590.44.01, %s, x86_64: installed" % release in host.check_output("dkms status")


def test_signing_keys_for_dkms(host):
    if not is_host(host):
        return
    assert host.file("/etc/dkms/gpuhost-mok.key").mode == 0o600
    conf = host.file("/etc/dkms/framework.conf.d/gpuhost-mok.conf").content_string
    assert 'mok_signing_key="/etc/dkms/gpuhost-mok.key"' in conf and 'mok_certificate="/etc/dkms/gpuhost-mok.der"' in conf


def test_host_only_settings(host):
    blacklist = host.file("/etc/modprobe.d/gpuhost-blacklist-nouveau.conf")
    marker = host.file("/var/lib/gpuhost-sglang/reboot-required")
    if not is_host(host):
        assert not blacklist.exists
        assert not marker.exists
        return
    assert blacklist.contains("^blacklist nouveau$")
    assert host.service("nvidia-persistenced").is_enabled
    assert host.service("nvidia-fabricmanager").is_enabled  # NVSwitch added before the upgrade
    # the reboot was not allowed (nvidia_driver_reboot: false), so it is recorded as pending, one reason a line
    assert marker.exists
    assert "kernel module packages changed" in marker.content_string.splitlines()
    assert "nouveau blacklist changed" in marker.content_string.splitlines()
    assert not host.file("/var/lib/gpuhost").exists  # one state directory: /var/lib/gpuhost-sglang


@pytest.mark.parametrize("flag", ["--query-gpu=driver_version"])
def test_nvidia_smi_reports_the_installed_version(host, flag):
    # the stand-in nvidia-smi of the installed package reports its own version
    assert host.check_output("nvidia-smi %s --format=csv,noheader" % flag) == NEW.split("-", maxsplit=1)[0]

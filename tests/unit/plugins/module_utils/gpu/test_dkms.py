# -*- coding: utf-8 -*-
# Copyright: gpuhost.sglang contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""DKMS prerequisites: header packages for the running kernel, Secure Boot state, MOK enrollment."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import os

import pytest
import yaml

from ansible_collections.gpuhost.sglang.plugins.module_utils.gpu import dkms

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..", "..", "..", ".."))


def _table():
    with open(os.path.join(ROOT, "roles", "nvidia_driver", "vars", "main.yml")) as f:
        return yaml.safe_load(f)["nvidia_driver_kernel_headers"]


@pytest.mark.parametrize("release,distribution,expected", [
    # Proxmox VE kernels end in -pve; their headers come from Proxmox (proxmox-headers-<release>), and
    # proxmox-default-headers follows the default kernel series so the next kernel gets headers too
    ("6.8.12-4-pve", "Debian", ["proxmox-headers-6.8.12-4-pve", "proxmox-default-headers"]),
    ("6.14.8-2-pve", "Debian", ["proxmox-headers-6.14.8-2-pve", "proxmox-default-headers"]),
    ("6.1.0-28-amd64", "Debian", ["linux-headers-6.1.0-28-amd64"]),
    ("6.1.0-28-cloud-amd64", "Debian", ["linux-headers-6.1.0-28-cloud-amd64"]),
    ("6.8.0-45-generic", "Ubuntu", ["linux-headers-6.8.0-45-generic"]),
    ("6.8.0-1014-nvidia", "Ubuntu", ["linux-headers-6.8.0-1014-nvidia"]),
])
def test_header_packages_from_the_role_table(release, distribution, expected):
    assert dkms.header_packages(release, distribution, _table()) == expected


def test_header_packages_unknown_distribution_names_the_inputs():
    with pytest.raises(ValueError) as exc:
        dkms.header_packages("5.14.0-427.el9.x86_64", "RedHat", _table())
    assert "5.14.0-427.el9.x86_64" in str(exc.value) and "RedHat" in str(exc.value)


# mokutil --sb-state, as lcp/mokutil src/mokutil.c prints it (0.6.0, Debian 12; 0.7.x returns 1 when disabled):
#   "SecureBoot enabled" [+ "SecureBoot validation is disabled in shim"], "SecureBoot disabled"
#   [+ "Platform is in Setup Mode"], "Cannot determine secure boot state.", and on a BIOS boot
#   "EFI variables are not supported on this system" on stderr with exit 1.
@pytest.mark.parametrize("out,err,rc,state,signing", [
    ("SecureBoot enabled\n", "", 0, "enabled", True),
    ("SecureBoot enabled\nSecureBoot validation is disabled in shim\n", "", 0, "shim_validation_disabled", False),
    ("SecureBoot disabled\n", "", 0, "disabled", False),
    ("SecureBoot disabled\n", "", 1, "disabled", False),
    ("SecureBoot disabled\nPlatform is in Setup Mode\n", "", 0, "disabled", False),
    ("", "EFI variables are not supported on this system\n", 1, "not_uefi", False),
    ("Cannot determine secure boot state.\n", "", 0, "unknown", True),
    ("", "Failed to read \"SecureBoot\" variable: No such file or directory\n", 255, "unknown", True),
])
def test_secure_boot_state(out, err, rc, state, signing):
    got = dkms.secure_boot_state(out, err, rc)
    assert got["state"] == state
    assert got["signing_required"] is signing
    assert got["evidence"] == (out + err).strip()


@pytest.mark.parametrize("out,err,rc,state", [
    ("/etc/dkms/gpuhost-mok.der is already enrolled\n", "", 1, "enrolled"),
    ("/etc/dkms/gpuhost-mok.der is not enrolled\n", "", 0, "not_enrolled"),
    ("/etc/dkms/gpuhost-mok.der is already in the enrollment request\n", "", 1, "pending"),
    ("", "Not a valid x509 certificate\n", 255, "invalid"),
    ("", "EFI variables are not supported on this system\n", 1, "unknown"),
])
def test_mok_enrollment_state(out, err, rc, state):
    assert dkms.mok_enrollment_state(out, err, rc) == state


def test_enrollment_steps_name_the_certificate_and_the_variables():
    steps = "\n".join(dkms.enrollment_steps("/etc/dkms/gpuhost-mok.der"))
    assert "mokutil --import /etc/dkms/gpuhost-mok.der" in steps
    assert "nvidia_driver_mok_key_src" in steps and "nvidia_driver_mok_cert_src" in steps
    assert "reboot" in steps.lower() and "Enroll MOK" in steps

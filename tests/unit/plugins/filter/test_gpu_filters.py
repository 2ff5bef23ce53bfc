# -*- coding: utf-8 -*-
# Copyright: gpuhost.sglang contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
from __future__ import absolute_import, division, print_function

__metaclass__ = type

import pytest
from ansible.errors import AnsibleFilterError

from ansible_collections.gpuhost.sglang.plugins.filter.gpu import FilterModule

F = FilterModule().filters()


def test_filter_names():
    assert sorted(F) == ["host_compute_stack", "kernel_header_packages", "mok_enrollment_state", "mok_enrollment_steps",
                         "nvidia_driver_branch_choice", "nvidia_module_version", "nvidia_package_versions",
                         "nvidia_reboot_reasons", "nvidia_repo_release", "secure_boot_state"]


def test_module_version_is_a_string_for_templates():
    assert F["nvidia_module_version"]("NVRM version: NVIDIA UNIX Open Kernel Module for x86_64  580.105.08  Release Build") == "580.105.08"
    assert F["nvidia_module_version"]("") == ""


def test_header_packages_error_is_a_filter_error():
    with pytest.raises(AnsibleFilterError, match="RedHat"):
        F["kernel_header_packages"]("5.14.0", "RedHat", [{"distribution": "Debian", "packages": ["x"]}])


def test_secure_boot_and_mok():
    assert F["secure_boot_state"]("SecureBoot enabled\n")["signing_required"] is True
    assert F["mok_enrollment_state"]("c is already enrolled\n", "", 1) == "enrolled"
    assert any("mokutil --import /c" in s for s in F["mok_enrollment_steps"]("/c"))

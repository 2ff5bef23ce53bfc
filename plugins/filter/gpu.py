# -*- coding: utf-8 -*-
# Copyright: gpuhost.sglang contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Filters exposing the tested host-driver logic (module_utils/gpu) to the nvidia_driver role.

nvidia_module_version   /proc/driver/nvidia/version text -> loaded module version ("" when none)
nvidia_reboot_reasons   (loaded module version, installed driver version, kernel packages changed) -> why to reboot
kernel_header_packages  (kernel release, distribution, rule table) -> header packages for that kernel
secure_boot_state       (mokutil --sb-state stdout, stderr, rc) -> {state, signing_required, evidence}
mok_enrollment_state    (mokutil --test-key stdout, stderr, rc) -> enrolled | not_enrolled | pending | invalid | unknown
mok_enrollment_steps    certificate path on the host -> the operator's steps (list of lines)
host_compute_stack      (mode, host_serves, cuda_version, install_nccl) -> toolkit / NCCL to install on the host
nvidia_repo_release     (release key, release table, base URL, repo URL, keyring URL) -> the release's repository
nvidia_driver_branch_choice (repository, arch policy, arch, requested branch, its variable) -> the branch to install
nvidia_package_versions (offered versions per package, the packages and the versions asked for) -> {package: version}
The last two answer {error: text} instead of failing, so the role's assert prints the text as its message.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

from ansible.errors import AnsibleFilterError

from ansible_collections.gpuhost.sglang.plugins.plugin_utils.lazy_import import LazyModule

driver_repo = LazyModule("ansible_collections.gpuhost.sglang.plugins.module_utils.gpu.driver_repo")
dkms = LazyModule("ansible_collections.gpuhost.sglang.plugins.module_utils.gpu.dkms")
host_stack = LazyModule("ansible_collections.gpuhost.sglang.plugins.module_utils.gpu.host_stack")
nvidia_banner = LazyModule("ansible_collections.gpuhost.sglang.plugins.module_utils.gpu.nvidia_banner")


def nvidia_module_version(text):
    return nvidia_banner.module_version(text) or ""


def nvidia_reboot_reasons(loaded, installed, kernel_changed=False):
    return nvidia_banner.reboot_reasons(loaded, installed, kernel_changed)


def kernel_header_packages(release, distribution, table):
    try:
        return dkms.header_packages(release, distribution, table)
    except ValueError as exc:
        raise AnsibleFilterError(str(exc))


def secure_boot_state(stdout, stderr="", rc=0):
    return dkms.secure_boot_state(stdout, stderr, rc)


def mok_enrollment_state(stdout, stderr="", rc=0):
    return dkms.mok_enrollment_state(stdout, stderr, rc)


def mok_enrollment_steps(cert_path):
    return dkms.enrollment_steps(cert_path)


def host_compute_stack(mode, serves, cuda_version, install_nccl):
    try:
        return host_stack.host_compute_stack(mode, serves, cuda_version, install_nccl)
    except ValueError as exc:
        raise AnsibleFilterError("host_compute_stack: %s" % exc)


def nvidia_repo_release(release_key, releases, base_url, repo_url="", keyring_url=""):
    try:
        return dict(driver_repo.release_repository(release_key, releases, base_url, repo_url, keyring_url), error="")
    except ValueError as exc:
        return {"error": "nvidia_driver: %s" % exc}


def nvidia_driver_branch_choice(repository, policy, arch, requested="", requested_var="nvidia_driver_branch"):
    try:
        return dict(driver_repo.choose_branch(repository, policy, arch, requested, requested_var), error="")
    except ValueError as exc:
        return {"error": str(exc), "branch": "", "reason": ""}


def nvidia_package_versions(offered, driver_packages, cuda_packages, nccl_packages, driver_version, cuda_version,
                            cuda_package_version="", nccl_version=""):
    return driver_repo.package_versions(offered, driver_packages, cuda_packages, nccl_packages, driver_version,
                                        cuda_version, cuda_package_version, nccl_version)


class FilterModule(object):
    def filters(self):
        return {"host_compute_stack": host_compute_stack, "nvidia_module_version": nvidia_module_version,
                "nvidia_reboot_reasons": nvidia_reboot_reasons,
                "kernel_header_packages": kernel_header_packages, "secure_boot_state": secure_boot_state, "mok_enrollment_state": mok_enrollment_state,
                "mok_enrollment_steps": mok_enrollment_steps, "nvidia_repo_release": nvidia_repo_release,
                "nvidia_driver_branch_choice": nvidia_driver_branch_choice, "nvidia_package_versions": nvidia_package_versions}

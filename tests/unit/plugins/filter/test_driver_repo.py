# -*- coding: utf-8 -*-
# Copyright: gpuhost.sglang contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""NVIDIA's repository per distribution release and the driver branch chosen from it, on the role's own data
(roles/nvidia_driver/vars/main.yml), as the preflight and detect tasks pass it (here beside the filters: ansible-test
runs the module_utils units without ansible.errors, which the filter plugin imports)."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import os

import pytest
import yaml

from ansible_collections.gpuhost.sglang.plugins.filter.gpu import FilterModule
from ansible_collections.gpuhost.sglang.plugins.module_utils.gpu.driver_repo import choose_branch, release_repository

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), *[os.pardir] * 4))
with open(os.path.join(ROOT, "roles/nvidia_driver/vars/main.yml")) as f:
    VARS = yaml.safe_load(f)
RELEASES, BASE = VARS["nvidia_driver_repo_releases"], VARS["nvidia_driver_repo_base_url"]
BLACKWELL = VARS["nvidia_driver_arch_policy"]["Blackwell"]
F = FilterModule().filters()


def repo(key, **kw):
    return release_repository(key, RELEASES, BASE, **kw)


def test_each_release_has_its_own_repository_and_key():
    d12, d13 = repo("Debian-12"), repo("Debian-13")
    assert d12["url"] == "https://developer.download.nvidia.com/compute/cuda/repos/debian12/x86_64/"
    assert d12["keyring_url"].endswith("/debian12/x86_64/3bf863cc.pub")
    assert d13["url"] == "https://developer.download.nvidia.com/compute/cuda/repos/debian13/x86_64/"
    assert d13["keyring_url"].endswith("/debian13/x86_64/8793F200.pub")
    assert d13["fingerprint"].endswith("8793F200") and d12["fingerprint"].endswith("3BF863CC")
    assert d13["branches"] == ["590"] and d12["branches"] == []


def test_blackwell_defaults_per_release_inside_the_cuda_13_floor():
    assert choose_branch(repo("Debian-12"), BLACKWELL, "Blackwell")["branch"] == "580"
    d13 = choose_branch(repo("Debian-13"), BLACKWELL, "Blackwell")
    assert d13["branch"] == "590" and "580 is not in NVIDIA's debian13 repository" in d13["reason"]
    # the serving role's floor for CUDA 13 engines (roles/sglang/vars/cuda_compat.yml) is a 580 driver
    with open(os.path.join(ROOT, "roles/sglang/vars/cuda_compat.yml")) as f:
        floor = yaml.safe_load(f)["sglang_cuda_driver_rules"]["major_floor"]["13"]
    assert int(d13["branch"]) >= int(floor.split(".")[0]) >= BLACKWELL["min_branch"]


def test_580_on_debian_13_is_refused_naming_the_variable_value_and_allowed_values():
    with pytest.raises(ValueError) as err:
        choose_branch(repo("Debian-13"), BLACKWELL, "Blackwell", "580")
    msg = str(err.value)
    assert msg.startswith("nvidia_driver_branch=580 asks for driver branch 580")
    assert "debian13" in msg and "allowed values: 590" in msg and "nvidia_driver_repo_url" in msg
    # a container pinned to a host version names nvidia_driver_version
    out = F["nvidia_driver_branch_choice"](repo("Debian-13"), BLACKWELL, "Blackwell", "580", "nvidia_driver_version")
    assert out["branch"] == "" and out["error"].startswith("nvidia_driver_version=580")


def test_requests_the_repository_carries_pass():
    assert choose_branch(repo("Debian-13"), BLACKWELL, "Blackwell", "590") == {"branch": "590", "reason": "requested (nvidia_driver_branch)"}
    assert choose_branch(repo("Debian-12"), BLACKWELL, "Blackwell", "580")["branch"] == "580"


def test_a_repository_of_ones_own_lifts_the_branch_list():
    own = repo("Debian-13", repo_url="file:/srv/mirror/", keyring_url="file:/srv/mirror/key.pub")
    assert own["own"] and own["branches"] == [] and own["url"] == "file:/srv/mirror/"
    assert own["keyring_url"] == "file:/srv/mirror/key.pub"
    assert choose_branch(own, BLACKWELL, "Blackwell", "580")["branch"] == "580"
    assert choose_branch(own, BLACKWELL, "Blackwell")["branch"] == "580"


def test_no_newer_branch_takes_the_newest_supported_one_or_refuses():
    policy = {"min_branch": 470, "default_branch": 580}
    older = {"distro": "x", "url": "u", "branches": ["535", "550"]}
    assert choose_branch(older, policy, "Ampere")["branch"] == "550"
    with pytest.raises(ValueError, match="none of which supports the detected GPU architecture Blackwell"):
        choose_branch(older, BLACKWELL, "Blackwell")


def test_unknown_release_and_incomplete_data_answer_an_error():
    assert F["nvidia_repo_release"]("Debian-11", RELEASES, BASE)["error"] == (
        "nvidia_driver: distribution Debian-11 is not supported; allowed: Debian-12, Debian-13, Ubuntu-22.04, Ubuntu-24.04")
    assert "lacks key_file" in F["nvidia_repo_release"]("X-1", {"X-1": {"distro": "x", "branches": []}}, BASE)["error"]
    assert F["nvidia_repo_release"]("Debian-13", RELEASES, BASE)["error"] == ""


# ---- one exact version per package (tasks/packages.yml) ------------------------------------------------------------
# The driver lines are apt-cache madison's recorded output (module_utils/gpu/fixtures/driver_change); the CUDA and NCCL
# lines are in the same format with the versions of the stand-in repository (tests/fixtures/nvidia-apt-repo.sh).
MADISON = os.path.join(ROOT, "tests/unit/plugins/module_utils/gpu/fixtures/driver_change/apt-cache-madison.txt")
MORE = """cuda-toolkit-12-8 |   12.8.1-1 | file:/opt/nvidia-repo ./ Packages
cuda-toolkit-12-8 |   12.8.0-1 | file:/opt/nvidia-repo ./ Packages
  libnccl2 | 2.28.3-1+cuda13.0 | file:/opt/nvidia-repo ./ Packages
  libnccl2 | 2.27.7-1+cuda13.0 | file:/opt/nvidia-repo ./ Packages
  libnccl2 | 2.26.2-1+cuda12.9 | file:/opt/nvidia-repo ./ Packages
  libnccl2 | 2.26.2-1+cuda12.8 | file:/opt/nvidia-repo ./ Packages
  libnccl2 | 2.25.1-1+cuda12.8 | file:/opt/nvidia-repo ./ Packages
"""


def offered():
    """{package: versions} as the role indexes madison's lines: field 2 of each line of the package, in order."""
    with open(MADISON) as fh:
        lines = (fh.read() + MORE).splitlines()
    out = {}
    for line in lines:
        fields = [f.strip() for f in line.split("|")]
        out.setdefault(fields[0], []).append(fields[1])
    return out


DRIVER, CUDA, NCCL = ["nvidia-driver-cuda", "libcuda1"], ["cuda-toolkit-12-8"], ["libnccl2"]


def test_newest_fitting_version_per_package():
    got = F["nvidia_package_versions"](offered(), DRIVER, CUDA, NCCL, "580.105.08", "12.8")
    assert got == {"nvidia-driver-cuda": "580.105.08-1", "libcuda1": "580.105.08-1", "cuda-toolkit-12-8": "12.8.1-1",
                   "libnccl2": "2.26.2-1+cuda12.8"}
    assert list(got) == DRIVER + CUDA + NCCL


def test_exact_cuda_and_nccl_versions_win_and_a_missing_one_is_empty():
    got = F["nvidia_package_versions"](offered(), DRIVER, CUDA, NCCL, "580.142", "12.8", "12.8.0-1", "2.25.1-1+cuda12.8")
    assert got == {"nvidia-driver-cuda": "580.142-1", "libcuda1": "580.142-1", "cuda-toolkit-12-8": "12.8.0-1",
                   "libnccl2": "2.25.1-1+cuda12.8"}
    # a driver prefix matches whole versions only (580.1 is not 580.142's), NCCL for another CUDA is not taken
    got = F["nvidia_package_versions"](offered(), DRIVER, CUDA, NCCL, "580.1", "12.7", "12.8.9-1")
    assert got == {"nvidia-driver-cuda": "", "libcuda1": "", "cuda-toolkit-12-8": "", "libnccl2": ""}
    # CUDA 13.0 without an exact version: the newest NCCL built for it; 13.0 is not a prefix of 13.0x
    got = F["nvidia_package_versions"]({"libnccl2": ["2.28.3-1+cuda13.01", "2.27.7-1+cuda13.0"]}, [], [], NCCL, "", "13.0")
    assert got == {"libnccl2": "2.27.7-1+cuda13.0"}

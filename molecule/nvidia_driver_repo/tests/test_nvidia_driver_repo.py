# -*- coding: utf-8 -*-
# Copyright: gpuhost.sglang contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""testinfra verify of nvidia_driver_repo: the sources file and the key file the role wrote for the host's Debian
release, and apt's own verdict on them (the stand-in repository is signed by that release's test key only)."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import os

FIXTURE = os.path.join(os.path.dirname(__file__), os.pardir, os.pardir, os.pardir, "tests", "fixtures", "nvidia-standin-repos")
# release -> (repository directory, key file): roles/nvidia_driver/vars/main.yml nvidia_driver_repo_releases
RELEASES = {"12": ("debian12", "3bf863cc.pub"), "13": ("debian13", "8793F200.pub")}
SOURCES = "/etc/apt/sources.list.d/gpuhost-nvidia-cuda.sources"
KEYRING = "/usr/share/keyrings/gpuhost-nvidia-cuda.asc"


def release(host):
    return host.check_output(". /etc/os-release && echo $VERSION_ID")


def test_sources_name_the_release_repository_and_signed_by(host):
    distro, _key = RELEASES[release(host)]
    f = host.file(SOURCES)
    assert f.user == "root" and f.mode == 0o644
    fields = dict(line.split(": ", 1) for line in f.content_string.splitlines() if ": " in line and not line.startswith("#"))
    assert fields == {"Types": "deb", "URIs": "file:///srv/nvidia-standin-repos/%s/x86_64/" % distro, "Suites": "/",
                      "Signed-By": KEYRING}


def test_key_file_is_the_release_key(host):
    distro, key = RELEASES[release(host)]
    with open(os.path.join(FIXTURE, distro, "x86_64", key)) as f:
        expected = f.read()
    k = host.file(KEYRING)
    assert k.user == "root" and k.mode == 0o644
    assert k.content_string == expected


def test_apt_accepts_the_signature_with_that_key(host):
    distro, _key = RELEASES[release(host)]
    # the test host has no other apt source (tests/hosts/testhost.py): this reads the role's repository alone
    out = host.run("apt-get update")
    assert out.rc == 0, out.stdout + out.stderr
    for bad in ("NO_PUBKEY", "not signed", "W:", "Warning:", "E:"):
        assert bad not in out.stdout + out.stderr, out.stdout + out.stderr
    # apt keeps a repository's InRelease only once its signature verified
    lists = host.check_output("ls /var/lib/apt/lists")
    stored = "_srv_nvidia-standin-repos_%s_x86%%5f64_InRelease" % distro   # apt escapes "_" in a path part
    assert stored in lists.split(), lists
    assert "Label: %s stand-in" % distro in host.file("/var/lib/apt/lists/" + stored).content_string

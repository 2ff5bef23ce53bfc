# -*- coding: utf-8 -*-
# Copyright: gpuhost.sglang contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""NVIDIA's CUDA repository for one distribution release, and the driver branch to install from it.

NVIDIA publishes one repository per release, and the releases differ in more than the path: Debian 13's repository
is signed with a key of its own and carries fewer driver branches than Debian 12's (the evidence sits beside the
data, roles/nvidia_driver/vars/main.yml nvidia_driver_repo_releases). The role's tasks only declare the result:
the repository and key URLs, and the branch, or an error that names the one variable to change.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

RELEASE_FIELDS = ("distro", "key_file", "branches")


def release_repository(release_key, releases, base_url, repo_url="", keyring_url=""):
    """The repository of ``release_key`` ("Debian-13"): {distro, url, keyring_url, key_file, fingerprint, branches,
    own}. ``repo_url``/``keyring_url`` (the role's nvidia_driver_repo_url / _keyring_url) replace NVIDIA's; a
    repository of one's own (a mirror, a local test repository) carries what it carries: ``own`` is then true and
    ``branches`` empty (no list applies; the role still asserts the branch lock package is offered)."""
    if release_key not in releases:
        raise ValueError("distribution %s is not supported; allowed: %s" % (release_key, ", ".join(sorted(releases))))
    rel = releases[release_key] or {}
    missing = [f for f in RELEASE_FIELDS if f not in rel]
    if missing:
        raise ValueError("release data of %s lacks %s" % (release_key, ", ".join(missing)))
    nvidia_url = "%s/%s/x86_64/" % (base_url.rstrip("/"), rel["distro"])
    own = bool(repo_url)
    return {
        "distro": rel["distro"],
        "url": repo_url or nvidia_url,
        "keyring_url": keyring_url or nvidia_url + rel["key_file"],
        "key_file": rel["key_file"],
        "fingerprint": rel.get("fingerprint", ""),
        "branches": [] if own else [str(b) for b in rel["branches"]],
        "own": own,
    }


def choose_branch(repository, policy, arch, requested="", requested_var="nvidia_driver_branch"):
    """The driver branch to install: {branch, reason}.

    ``requested`` (from ``requested_var``: nvidia_driver_branch, or the first field of nvidia_driver_version) must
    be one the repository carries; without a request the architecture's default branch when the repository carries
    it, else the lowest branch it carries above that default (newer drivers keep the CUDA floor the default was chosen
    for), else the newest it carries that the architecture supports (policy min_branch). An empty branch list
    means every branch (NVIDIA's Debian 12 and Ubuntu repositories, or a repository of one's own)."""
    offered = sorted(repository.get("branches") or [], key=int)
    minimum = int(policy["min_branch"])
    where = ("NVIDIA's %s repository (%s)" % (repository["distro"], repository["url"])) if offered else ""
    if requested:
        requested = str(requested)
        if offered and requested not in offered:
            raise ValueError(
                "%s=%s asks for driver branch %s, which %s does not carry: allowed values: %s (or empty for the "
                "default). To install another branch anyway, point nvidia_driver_repo_url and "
                "nvidia_driver_repo_keyring_url at a repository that carries it (docs/gpu-stack.md)."
                % (requested_var, requested, requested, where, ", ".join(offered)))
        return {"branch": requested, "reason": "requested (%s)" % requested_var}
    default = str(policy["default_branch"])
    if not offered or default in offered:
        return {"branch": default, "reason": "the %s default" % arch}
    newer = [b for b in offered if int(b) > int(default)]
    if newer:
        return {"branch": newer[0], "reason": "the %s default %s is not in %s: its lowest newer branch"
                % (arch, default, where)}
    usable = [b for b in offered if int(b) >= minimum]
    if not usable:
        raise ValueError(
            "%s carries only driver branches %s, none of which supports the detected GPU architecture %s (it needs "
            ">= %d): set nvidia_driver_repo_url and nvidia_driver_repo_keyring_url to a repository that carries one"
            % (where, ", ".join(offered), arch, minimum))
    return {"branch": usable[-1], "reason": "the %s default %s is not in %s: its newest branch for %s"
            % (arch, default, where, arch)}


def package_versions(offered, driver_packages, cuda_packages, nccl_packages, driver_version, cuda_version,
                     cuda_package_version="", nccl_version=""):
    """{package: the exact version to install, "" when the repository offers none that fits}, in the order driver,
    CUDA, NCCL packages; ``offered``: {package: versions as apt-cache madison lists them, newest first}.

    The first offered version that fits wins: a driver package the chosen driver's (``driver_version``-*), the CUDA
    toolkit ``cuda_package_version`` exactly when set, else ``cuda_version``.*; NCCL ``nccl_version`` exactly when
    set, else the newest built for ``cuda_version`` (*+cuda12.8, NVIDIA's NCCL package versions)."""
    out = {}
    for name in list(driver_packages) + list(cuda_packages) + list(nccl_packages):
        versions = [str(v) for v in offered.get(name) or []]
        if name in driver_packages:
            fits = [v for v in versions if v.startswith("%s-" % driver_version)]
        elif name in cuda_packages and cuda_package_version:
            fits = [v for v in versions if v == str(cuda_package_version)]
        elif name in cuda_packages:
            fits = [v for v in versions if v.startswith("%s." % cuda_version)]
        elif nccl_version:
            fits = [v for v in versions if v == str(nccl_version)]
        else:
            fits = [v for v in versions if v.endswith("+cuda%s" % cuda_version)]
        out[name] = fits[0] if fits else ""
    return out

# -*- coding: utf-8 -*-
# Copyright: gpuhost.sglang contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""A Proxmox VE 9 (and 8) box rebuilt from nothing to serving by rebuild.yml, last-known-good brought back, on test hosts.

The layout: the node is a Debian 13 (trixie) test host made into a fake Proxmox VE 9 host (tests/fixtures/pve-standins:
pveversion 9.0, stand-in NVIDIA and distribution repositories, no network), or for Proxmox VE 8 a Debian 12 one
(pveversion 8.3, NVIDIA's debian12 layout and key, branch 580); the serving container CT 210 is a Debian 12
test host reachable by SSH whose root is the node's /var/lib/gpuhost-standin/ct/210/rootfs (the stand-in pct creates
the container there, lists its libraries and runs its nvidia-smi in it, as pct exec does). Proxmox VE 9 still offers the
debian-12-standard template (docs/rebuild.md), and the CPU engine's wheelhouse is built for Debian 12's Python 3.11.
The container has no python3 at first (removed with dpkg), as a minimal template may come.

What one rebuild.yml run must do, in order: the NVIDIA repository of Debian 13 (its key's fingerprint checked) and the
590 driver branch on the node (the only one that repository carries), the host mode, CT 210 created from the template,
python3 bootstrapped in it before the first module, its userspace at the node's exact driver version, the lockstep check
through pct exec, NCCL settings, last-known-good from the controller's copy (saved by deploy.yml on the old host), then
the serving role: a first candidate that cannot start rolls back to the restored record, which serves. Long (two engine
installs and the host layer, minutes): the gates in make test are test_rebuild_lkg.py, molecule/proxmox_rebuild,
molecule/nvidia_driver_repo and test_serving_role.py's rollback cases (docs/testing.md).
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import glob
import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import time

import pytest

from ansible_collections.gpuhost.sglang.tests.integration import test_rebuild_serving as rebuild
from ansible_collections.gpuhost.sglang.tests.integration import test_serving_role as role

TAG = os.environ.get("GPUHOST_TESTHOST_TAG", "ir")
ENV = dict(os.environ, GPUHOST_TESTHOST_TAG=TAG)
TRIXIE_CACHE = os.environ.get("GPUHOST_TESTHOST_TRIXIE_CACHE", "/var/cache/gpuhost-testhosts-trixie")
ENV_TRIXIE = dict(ENV, GPUHOST_TESTHOST_SUITE="trixie", GPUHOST_TESTHOST_CACHE=TRIXIE_CACHE)
STATE_BASE = os.environ.get("GPUHOST_TESTHOST_STATE", "/var/lib/gpuhost-testhosts")
NODE, CT = "rb9node", "rb9ct"
NVIDIA_REPO = os.path.join(role.ROOT, ".cache", "nvidia-apt-repo")
STANDINS = os.path.join(role.ROOT, "tests", "fixtures", "pve-standins")
DEBS = os.path.join(os.environ.get("GPUHOST_TESTHOST_CACHE", "/var/cache/gpuhost-testhosts"), "debs")
DISTRO_SOURCES = os.path.join(role.ROOT, "molecule", "resources", "files", "gpuhost-standin-distro.sources")
# python3 removed from the container with what depends on it (python3-apt, python3-venv, ...), as a template lacks it
PYTHON_PACKAGES = ["python3", "python3-minimal", "python3.11", "python3.11-minimal"]
SYSROOT = "/var/lib/gpuhost-standin/sysroot"
# two RTX PRO 6000 Blackwell (10de:2bb5) on the node, as molecule/proxmox_rebuild fakes them
PCI = [("0000:01:00.0", "0x10de", "0x2bb5", "0x030200"), ("0000:41:00.0", "0x10de", "0x2bb5", "0x030200"),
       ("0000:01:00.1", "0x10de", "0x22e8", "0x040300")]

pytestmark = [pytest.mark.testhosts, pytest.mark.engine, pytest.mark.long]
if not (os.path.isdir(role.WHEELHOUSE) and os.path.isfile(os.path.join(role.MODELS, "good", "config.json"))
        and os.path.isfile(os.path.join(NVIDIA_REPO, "repo", "InRelease"))):
    pytestmark.append(pytest.mark.skip(reason="fixtures missing: run tests/stages/20-fixtures.sh (make fixtures) and "
                                              "tests/fixtures/nvidia-apt-repo.sh"))
elif not glob.glob(os.path.join(TRIXIE_CACHE, "rootfs-*")):
    pytestmark.append(pytest.mark.skip(reason="no Debian 13 test-host rootfs: GPUHOST_TESTHOST_SUITE=trixie "
                                              "GPUHOST_TESTHOST_CACHE=%s tests/hosts/testhost.py prepare" % TRIXIE_CACHE))


def run(cmd, env=None, **kw):
    return subprocess.run(cmd, env=env or ENV, check=True, capture_output=True, text=True, **kw)


def create(name, env, binds):
    args = [sys.executable, role.TESTHOST, "create", name]
    for src, dst, ro in binds:
        args += ["--bind-ro" if ro else "--bind", "%s:%s" % (src, dst)]
    return json.loads(run(args, env).stdout.strip().splitlines()[-1])


def ssh_ok(host, command):
    out = subprocess.run(["ssh", *role.SSH_OPTS, "-i", host["identity_file"], "root@%s" % host["address"], command],
                         capture_output=True, text=True, timeout=300, check=False)
    assert out.returncode == 0, "%s: %s" % (command, out.stdout + out.stderr)
    return out.stdout


# per Proxmox VE major: the node's test-host environment, NVIDIA's repository and key file for its Debian release
# (roles/nvidia_driver/vars/main.yml nvidia_driver_repo_releases) and the branch a Blackwell node must get there
MAJORS = {
    "9": {"env": ENV_TRIXIE, "codename": "trixie", "distro": "debian13", "key_file": "8793F200.pub", "branch": "590"},
    "8": {"env": ENV, "codename": "bookworm", "distro": "debian12", "key_file": "3bf863cc.pub", "branch": "580"},
}


def standin_repos(tmp, major):
    """NVIDIA's <distro>/x86_64 layout holding the stand-in packages (570, 580, 590) with the stand-in key named like
    NVIDIA's key file (armored, as NVIDIA publishes it), and Debian 12's packages as a flat repository."""
    nv = tmp / "nvidia" / major["distro"] / "x86_64"
    shutil.copytree(os.path.join(NVIDIA_REPO, "repo"), str(nv))
    keyring = os.path.join(NVIDIA_REPO, "repo", "gpuhost-test-archive.gpg")
    armored = run(["gpg", "--batch", "--no-default-keyring", "--keyring", keyring, "--export", "--armor"]).stdout
    (nv / major["key_file"]).write_text(armored)
    fpr = [line.split(":")[9] for line in run(["gpg", "--batch", "--show-keys", "--with-colons", keyring]).stdout.splitlines()
           if line.startswith("fpr:")][0]
    py = tmp / "debian"
    py.mkdir()
    for deb in glob.glob(os.path.join(DEBS, "*.deb")):   # the test hosts' own Debian 12 packages
        shutil.copy(deb, str(py))
    packages = run(["dpkg-scanpackages", "."], cwd=str(py)).stdout.encode()
    (py / "Packages").write_bytes(packages)
    # a flat repository's Release (Debian wiki DebianRepository/Format, "Flat Repository Format"), unsigned: trusted
    (py / "Release").write_text("Origin: gpuhost-test-debian-standin\nDate: %s\nSHA256:\n %s %d Packages\n"
                                % (time.strftime("%a, %d %b %Y %H:%M:%S UTC", time.gmtime()),
                                   hashlib.sha256(packages).hexdigest(), len(packages)))
    return str(tmp / "nvidia"), str(py), fpr


def inventory(tmp, node, ct, fpr, copy):
    inv = tmp / "inv"
    (inv / "group_vars").mkdir(parents=True)
    with open(os.path.join(role.ROOT, "inventories", "sandbox", "group_vars", "sglang_servers.yml")) as fh:
        gv = fh.read()
    gv = re.sub(r"(?m)^sglang_model_controller_dir:.*$", "sglang_model_controller_dir: %s/good" % role.MODELS, gv)
    (inv / "group_vars" / "sglang_servers.yml").write_text(gv)
    hosts = {"all": {"children": {
        "proxmox_hosts": {"hosts": {NODE: {
            "ansible_host": node["address"], "ansible_user": "root", "ansible_ssh_private_key_file": node["identity_file"],
            "ansible_python_interpreter": "/usr/bin/python3",
            "proxmox_host_mode": "lxc", "proxmox_host_lxc_gpus": ["0000:01:00.0", "0000:41:00.0"],
            "proxmox_lxc_gpu_ctid": 210, "proxmox_lxc_gpu_hostname": CT,
            # Proxmox VE 9 offers debian-12-standard beside debian-13-standard (docs/rebuild.md)
            "proxmox_lxc_gpu_template": "debian-12-standard_12.12-1_amd64.tar.zst",
            "proxmox_lxc_gpu_options": {"memory": 4096, "cores": 2, "onboot": 1},
            "proxmox_host_sysroot": SYSROOT, "proxmox_host_reboot_command": "/usr/local/sbin/gpuhost-standin-reboot",
            "proxmox_host_boot_time_command": "cat /var/lib/gpuhost-standin/boot_id",
            "proxmox_host_nvidia_modprobe": "/usr/local/sbin/nvidia-modprobe", "proxmox_host_load_modules": False,
            "proxmox_host_reboot_timeout": 120,
            # NVIDIA's layout (debian13/x86_64/8793F200.pub on PVE 9) from the stand-in: the release's data picks repository,
            # key file and branch; the stand-in key is not NVIDIA's, so its own fingerprint is the expected one
            "nvidia_driver_repo_key_fingerprint": fpr,
            "nvidia_driver_kernel_modules": "open", "nvidia_driver_sysfs_root": SYSROOT,
            "nvidia_driver_reboot_command": "/usr/local/sbin/gpuhost-standin-reboot",
            "nvidia_driver_boot_time_command": "cat /var/lib/gpuhost-standin/boot_id",
            "nvidia_driver_reboot_timeout": 120, "nvidia_driver_verify": False}}},
        "sglang_servers": {"hosts": {CT: {
            "ansible_host": ct["address"], "ansible_user": "root", "ansible_ssh_private_key_file": ct["identity_file"],
            "ansible_python_interpreter": "/usr/bin/python3",
            "gpuhost_proxmox_node": NODE, "proxmox_lxc_gpu_ctid": 210, "sglang_lkg_controller_dir": copy,
            # the container's userspace from Debian 12's stand-in repository (the node's version, exactly)
            "nvidia_driver_repo_url": "file:/srv/nvidia-apt-repo/",
            "nvidia_driver_repo_keyring_src": os.path.join(NVIDIA_REPO, "repo", "gpuhost-test-archive.gpg"),
            "nvidia_driver_verify": False}}}}}}
    (inv / "hosts.yml").write_text(json.dumps(hosts, indent=1))
    return str(inv / "hosts.yml")


def make_node(node):
    """The fake Proxmox VE node: stand-ins, GPUs by PCI ID, freshly reinstalled (no NVIDIA module loaded)."""
    ssh_ok(node, "bash /opt/pve-standins/make-fake-pve.sh --cpu intel --bootloader grub >/dev/null && "
                 "rm -f %s/proc/driver/nvidia/version" % SYSROOT)
    for bdf, vendor, device, cls in PCI:
        d = "%s/sys/bus/pci/devices/%s" % (SYSROOT, bdf)
        ssh_ok(node, "mkdir -p %s && echo %s >%s/vendor && echo %s >%s/device && echo %s >%s/class"
               % (d, vendor, d, device, d, cls, d))


def destroy(name, env):
    subprocess.run([sys.executable, role.TESTHOST, "destroy", name], env=env, check=False, capture_output=True)


@pytest.fixture(scope="module")
def controller_copy(tmp_path_factory):
    """The box before: a deploy that saved its last-known-good on the controller (once for both majors: a rebuild
    whose deploy fails saves nothing). GPUHOST_REBUILD_LKG_COPY: a copy an earlier run kept (with -s it prints where),
    the deploy is then not repeated (debugging the rebuild)."""
    copy = os.environ.get("GPUHOST_REBUILD_LKG_COPY") or str(tmp_path_factory.mktemp("controller") / "lkg")
    if not os.path.isfile(os.path.join(copy, "meta.json")):
        try:
            old = rebuild.new_host(tmp_path_factory, copy)
            rc, out, _secs = rebuild.play(old, "deploy.yml")
            assert rc == 0 and os.path.isfile(os.path.join(copy, "meta.json")), out[-3000:]
        finally:
            destroy(rebuild.NAME, ENV)
        print("controller copy of last-known-good: %s" % copy)
    return copy


@pytest.mark.parametrize("pve", ["9", "8"])
def test_a_proxmox_box_rebuilt_from_nothing_serves_its_last_known_good(tmp_path_factory, controller_copy, pve):
    major = MAJORS[pve]
    tmp = tmp_path_factory.mktemp("pve" + pve)
    copy = controller_copy
    nvidia, python_repo, fpr = standin_repos(tmp, major)
    try:
        # reinstalled: an empty Debian 12 container root without python3, on an empty node
        for name, env in ((NODE, major["env"]), (CT, ENV)):
            destroy(name, env)
        run([sys.executable, role.TESTHOST, "prepare"], ENV)
        ct = create(CT, ENV, [(role.WHEELHOUSE, "/opt/wheelhouse", True), (os.path.join(NVIDIA_REPO, "repo"), "/srv/nvidia-apt-repo", True),
                              (python_repo, "/srv/debian-standin", True)])
        ssh_ok(ct, "printf 'Types: deb\\nURIs: file:/srv/debian-standin/\\nSuites: /\\nTrusted: yes\\n' "
                   ">/etc/apt/sources.list.d/debian-standin.sources && "
                   "DEBIAN_FRONTEND=noninteractive apt-get purge -y -q %s >/dev/null && ! command -v python3"
                   % " ".join(PYTHON_PACKAGES))
        node = create(NODE, major["env"], [
            (STANDINS, "/opt/pve-standins", True), (nvidia, "/srv/nvidia-repos", True),
            (os.path.join(NVIDIA_REPO, "distro"), "/srv/distro-apt-repo", True),
            (os.path.join(STATE_BASE, TAG, CT, "merged"), "/var/lib/gpuhost-standin/ct/210/rootfs", False)])
        assert major["codename"] in ssh_ok(node, ". /etc/os-release; echo $VERSION_CODENAME")
        subprocess.run(["scp", *role.SSH_OPTS, "-i", node["identity_file"], DISTRO_SOURCES,
                        "root@%s:/etc/apt/sources.list.d/" % node["address"]], check=True, capture_output=True)
        make_node(node)
        inv = inventory(tmp, node, ct, fpr, copy)
        # a first candidate that cannot start on a CPU host; NVIDIA's layout from the stand-in (the role's vars hold
        # NVIDIA's base URL: only extra vars are above them)
        extra = json.dumps({"sglang_options": {"device": "cuda", "continuous-batching": True},
                            "nvidia_driver_repo_base_url": "file:///srv/nvidia-repos"})
        start = time.monotonic()
        proc = subprocess.run([os.path.join(os.path.dirname(sys.executable), "ansible-playbook"), "-i", inv,
                               os.path.join(role.ROOT, "playbooks", "rebuild.yml"), "-e", extra], cwd=role.ROOT,
                              env=role.harness.ansible_env(PYTHONUNBUFFERED="1"), capture_output=True, text=True,
                              timeout=2400, check=False)
        secs = time.monotonic() - start
        out = " ".join((proc.stdout + proc.stderr).split())
        (tmp / "rebuild.log").write_text(proc.stdout + proc.stderr)
        print("rebuild.yml, PVE %s layout, from nothing to serving (first candidate failing): %.1f s; log %s"
              % (pve, secs, tmp / "rebuild.log"))
        # the raw bootstrap installed python3 (changed), before the first module ran in the container
        assert re.search(r"python3 in the container before the first module [^\]]*\] \*+ changed: \[%s\]" % CT, out), out[-3000:]
        assert "last-known-good restored from %s" % copy in out, out[-3000:]
        assert proc.returncode != 0 and "No candidate passed the gate" in out, out[-3000:]
        assert role.ROLLED_BACK in out, out[-3000:]
        role.assert_lkg_serving(ct)
        ssh_ok(ct, "python3 -c 'import apt, venv'")
        # the node runs the release's branch (590: the only one NVIDIA's debian13 repository carries), the container
        # its exact userspace
        version = ssh_ok(node, "cat %s/proc/driver/nvidia/version" % SYSROOT)
        assert re.search(r"Kernel Module for x86_64\s+%s\." % major["branch"], version), version
        assert "Signed-By: /usr/share/keyrings/gpuhost-nvidia-cuda.asc" in ssh_ok(
            node, "cat /etc/apt/sources.list.d/gpuhost-nvidia-cuda.sources")
        assert "pve-manager/%s." % pve in ssh_ok(node, "pveversion")
        assert ssh_ok(node, "pct exec 210 -- nvidia-smi --query-gpu=driver_version --format=csv,noheader").startswith(major["branch"] + ".")
    finally:
        for name, env in ((NODE, major["env"]), (CT, ENV)):
            destroy(name, env)

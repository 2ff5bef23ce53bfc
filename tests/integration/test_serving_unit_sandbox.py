# -*- coding: utf-8 -*-
# Copyright: gpuhost.sglang contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The serving unit's sandbox on a real Debian 12 test host, for the GPU node layouts the role meets,
without an engine: the role's device tasks (roles/sglang/tasks/devices.yml) and its unit template
render /etc/systemd/system/sglang.service for each layout, then the probe (files/unit_probe.py) runs under that
unit file with only ExecStart/ExecStartPost/Type/Restart changed, as the service user:

  proxmox    nodes as Proxmox VE passes them into a container: mode 0660, root:44 (pve-container src/PVE/LXC.pm
             create_passthrough_device_node; gid 44 = proxmox_lxc_gpu_gid), MIG capability nodes included
  baremetal  nodes 0666 root:root (the driver's default) and no /dev/nvidia-uvm at deploy: the nvidia-modprobe
             stand-in creates it when the unit starts (through gpuhost-nvidia-uvm.service)
  udev_rdma  nodes 0660 root:render (a udev rule) plus /dev/infiniband/uverbs0 and rdma_cm 0666
  owner_only a node 0600 root:root: the deploy fails before anything is written, naming what sets the mode
  no_group   nodes 0660 with a gid that has no group in the container: fails early (systemd: 216/GROUP)

The probe asserts every step PyTorch/NCCL/CUDA need works inside the unit (fork, pidfd_open, pidfd_getfd, memfd,
W+X mapping, /dev/shm, opening each node) and that a call the filter denies returns EPERM and the process lives on.
Not covered here: DeviceAllow= itself. These hosts run systemd under hybrid cgroups with the v1 devices hierarchy
mounted read-only, so systemd cannot apply device rules in them (a unit with DevicePolicy=strict still opens
/dev/zero there); the device rules are checked as rendered text only.

Each case has its own test host (six, booted side by side); one ansible-playbook run renders every case that must
pass, one every case that must fail (each case's vars are its host's inventory vars).
Needs root and the cached test-host rootfs (tests/hosts/testhost.py prepare). Own object tag "iu".
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import json
import os
import re
import subprocess
import sys
import time

import pytest
import yaml

from ansible_collections.gpuhost.sglang.tests import harness

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
TESTHOST = os.path.join(ROOT, "tests", "hosts", "testhost.py")
PLAYBOOK = os.path.join(ROOT, "tests", "integration", "files", "serving_unit.yml")
ENV = dict(os.environ, GPUHOST_TESTHOST_TAG="iu")
SSH_OPTS = ["-o", "BatchMode=yes", "-o", "StrictHostKeyChecking=no", "-o", "UserKnownHostsFile=/dev/null",
            "-o", "LogLevel=ERROR", "-o", "ConnectTimeout=5"]
PROBE = "/usr/local/bin/gpuhost-unit-probe.py"
UNIT = "/etc/systemd/system/sglang.service"
PROBE_UNIT = "/etc/systemd/system/sglang-probe.service"
RESULT = "/var/lib/sglang/probe.jsonl"
CHANGED = ("Type=", "Restart=", "ExecStart=", "ExecStartPost=")
MAX_EXPOSURE = 2.5

pytestmark = [pytest.mark.testhosts]


def gpu(mode, gid, uvm=True, caps=False):
    nodes = [{"path": "/dev/nvidia%d" % i, "major": 195, "minor": i, "mode": mode, "gid": gid} for i in (0, 1)]
    nodes.append({"path": "/dev/nvidiactl", "major": 195, "minor": 255, "mode": mode, "gid": gid})
    if uvm:  # nvidia-uvm's major is dynamic; 510 is free here, so no driver answers (ENXIO)
        nodes += [{"path": "/dev/nvidia-uvm", "major": 510, "minor": 0, "mode": mode, "gid": gid},
                  {"path": "/dev/nvidia-uvm-tools", "major": 510, "minor": 1, "mode": mode, "gid": gid}]
    if caps:
        nodes += [{"path": "/dev/nvidia-caps/nvidia-cap%d" % i, "major": 509, "minor": i, "mode": mode, "gid": gid}
                  for i in (1, 2)]
    return nodes


RDMA = [{"path": "/dev/infiniband/uverbs0", "major": 231, "minor": 192, "mode": "0666", "gid": 0},
        {"path": "/dev/infiniband/rdma_cm", "major": 10, "minor": 120, "mode": "0666", "gid": 0}]

LAYOUTS = {
    "proxmox": {"nodes": gpu("0660", 44, caps=True), "groups": ["video"]},
    "baremetal": {"nodes": gpu("0666", 0, uvm=False), "standin": True, "groups": [],
                  "later": ["/dev/nvidia-uvm", "/dev/nvidia-uvm-tools"]},
    "udev_rdma": {"nodes": gpu("0660", "render") + RDMA, "groups": ["render"]},
}


LXC_STANDIN = "/usr/local/sbin/gpuhost-lxc-systemd-run"   # tests/integration/files/lxc-systemd-run-standin
LXC_DROP = {"sglang_test_lxc_refuses": ["ProtectProc=invisible"], "sglang_sandbox_command": [LXC_STANDIN]}
LXC_FAIL = {"sglang_test_lxc_refuses": ["ProtectProc=invisible", "ProtectKernelTunables=yes"],
            "sglang_sandbox_command": [LXC_STANDIN], "sglang_sandbox_refused": "fail"}
UNUSABLE = {
    "owner_only": [{"path": "/dev/nvidia0", "major": 195, "minor": 0, "mode": "0600", "gid": 0}],
    "no_group": [{"path": "/dev/nvidia0", "major": 195, "minor": 0, "mode": "0660", "gid": 2000}],
}
# One test host per case, all rendered by two ansible-playbook runs (the cases that must pass, the cases that must
# fail) instead of one run each: a case's vars are its host's inventory vars, its failure the run's fatal lines for
# its host. Only the lxc_drop host refuses a property in the passing run, so the refusal's warning is its own.
PASSING = dict((name, dict({"sglang_test_nodes": lay["nodes"], "sglang_test_uvm_standin": lay.get("standin", False)}))
               for name, lay in LAYOUTS.items() if name != "proxmox")
PASSING["lxc_drop"] = dict({"sglang_test_nodes": LAYOUTS["proxmox"]["nodes"]}, **LXC_DROP)
FAILING = dict((name, {"sglang_test_nodes": nodes}) for name, nodes in UNUSABLE.items())
FAILING["lxc_fail"] = dict({"sglang_test_nodes": LAYOUTS["proxmox"]["nodes"]}, **LXC_FAIL)
HOSTNAMES = dict((case, "su-" + case.replace("_", "")[:9]) for case in list(PASSING) + list(FAILING))


def _create(names):
    subprocess.run([sys.executable, TESTHOST, "prepare"], env=ENV, check=True, capture_output=True)
    procs = dict((name, subprocess.Popen([sys.executable, TESTHOST, "create", name], env=ENV, stdout=subprocess.PIPE,
                                         stderr=subprocess.PIPE, text=True)) for name in names)
    infos = {}
    for name, proc in procs.items():
        out, err = proc.communicate(timeout=600)
        assert proc.returncode == 0, "testhost.py create %s failed: %s%s" % (name, out, err)
        infos[name] = json.loads(out.strip().splitlines()[-1])
    return infos


@pytest.fixture(scope="module")
def hosts(tmp_path_factory):
    """{case: host info with "inventory"}: the test hosts of every case, booted side by side."""
    names = sorted(HOSTNAMES.values())
    try:
        infos = _create(names)
        inv = tmp_path_factory.mktemp("inv") / "hosts.yml"
        inv.write_text(yaml.safe_dump({"all": {"hosts": dict(
            (HOSTNAMES[case], dict(case_vars, ansible_host=infos[HOSTNAMES[case]]["address"], ansible_user="root",
                                   ansible_ssh_private_key_file=infos[HOSTNAMES[case]]["identity_file"],
                                   ansible_python_interpreter="/usr/bin/python3"))
            for case, case_vars in list(PASSING.items()) + list(FAILING.items()))}}))
        yield dict((case, dict(infos[name], inventory=str(inv), name=name)) for case, name in HOSTNAMES.items())
    finally:
        for name in names:
            subprocess.run([sys.executable, TESTHOST, "destroy", name], env=ENV, check=False, capture_output=True)


@pytest.fixture(scope="module")
def passing(hosts):
    """The run over the cases that must pass: (rc, output with whitespace collapsed)."""
    return render(hosts, sorted(PASSING))


@pytest.fixture(scope="module")
def failing(hosts):
    """The run over the cases that must fail: (rc, raw output)."""
    return render(hosts, sorted(FAILING), collapse=False)


def ssh(host, command, check=True):
    proc = subprocess.run(["ssh", *SSH_OPTS, "-i", host["identity_file"], "root@%s" % host["address"], command],
                          capture_output=True, text=True, timeout=300, check=False)
    if check:
        assert proc.returncode == 0, "ssh %r failed: %s%s" % (command, proc.stdout, proc.stderr)
    return proc


def render(hosts, cases, collapse=True):
    """Run the role's device tasks and unit template on the hosts of ``cases``, each with its own node layout and
    vars; returns (rc, output, whitespace collapsed unless ``collapse`` is false)."""
    limit = ",".join(HOSTNAMES[c] for c in cases)
    cmd = [os.path.join(os.path.dirname(sys.executable), "ansible-playbook"), "-i", hosts[cases[0]]["inventory"],
           "--limit", limit, PLAYBOOK]
    t0 = time.time()
    proc = subprocess.run(cmd, cwd=ROOT, env=harness.ansible_env(), capture_output=True, text=True, timeout=600,
                          check=False)
    print("render of %s: %.1f s" % (limit, time.time() - t0))
    out = proc.stdout + proc.stderr
    return proc.returncode, " ".join(out.split()) if collapse else out


def failure_of(out, host):
    """The fatal result lines of ``host`` in a run's output (the line and its indented continuation), collapsed."""
    lines = out.splitlines()
    for i, line in enumerate(lines):
        if line.startswith("fatal: [%s]: FAILED!" % host):
            block = [line]
            for nxt in lines[i + 1:]:
                if nxt and not nxt[0].isspace():
                    break
                block.append(nxt)
            return " ".join(" ".join(block).split())
    raise AssertionError("no failure of %s in:\n%s" % (host, out[-3000:]))


def run_probe(host):
    ssh(host, "rm -f %s && python3 %s derive %s %s %s && systemctl daemon-reload"
              % (RESULT, PROBE, UNIT, PROBE_UNIT, RESULT))
    start = ssh(host, "systemctl start sglang-probe.service", check=False)
    show = ssh(host, "systemctl show -p Result -p ExecMainCode -p ExecMainStatus sglang-probe.service").stdout
    result = json.loads(ssh(host, "python3 %s steps %s" % (PROBE, RESULT)).stdout)
    control = json.loads(ssh(host, "python3 {0} probe /tmp/probe-control.jsonl >/dev/null; python3 {0} steps "
                                   "/tmp/probe-control.jsonl".format(PROBE)).stdout)
    unit = ssh(host, "cat %s" % UNIT).stdout
    derived = ssh(host, "cat %s" % PROBE_UNIT).stdout
    ssh(host, "rm -f %s && systemctl daemon-reload" % PROBE_UNIT)
    return {"start": start, "show": show, "steps": result, "control": control, "unit": unit, "derived": derived}


# The proxmox layout under the full sandbox: molecule/sglang (stage 40) probes the unit a whole deploy wrote on its
# host, nodes 0660 root:44 (molecule/sglang/tests/test_unit_sandbox.py, its exposure in tests/test_sglang.py); here the
# same layout is the lxc_drop case's (test_a_property_the_container_refuses_is_left_out_with_a_warning), with every
# check below.
@pytest.mark.parametrize("name", sorted(set(LAYOUTS) - {"proxmox"}))
def test_unit_sandbox(hosts, passing, name):
    rc, out = passing
    assert rc == 0, out[-3000:]
    t0 = time.time()
    res = run_probe(hosts[name])
    print("%s: probe %.1f s" % (name, time.time() - t0))
    check_unit(hosts[name], name, LAYOUTS[name], res)


def check_unit(host, name, layout, res):
    """The rendered unit of ``layout`` and the probe's run under it (``res``, from run_probe)."""
    # the probe unit is the rendered unit but for the four keys it must change
    assert [ln for ln in res["derived"].splitlines()[1:] if not ln.startswith(CHANGED)] == \
        [ln for ln in res["unit"].splitlines() if not ln.startswith(CHANGED)]
    unit = res["unit"]
    groups = re.findall(r"(?m)^SupplementaryGroups=(.*)$", unit)
    assert (groups[0].split() if groups else []) == layout["groups"], unit
    allowed = re.findall(r"(?m)^DeviceAllow=(\S+) rw$", unit)
    for node in layout["nodes"]:
        assert node["path"] in allowed
    for later in layout.get("later", []):
        assert later not in allowed   # absent at deploy: only the device class covers it
    for cls in ("char-nvidia", "char-nvidiactl", "char-nvidia-uvm", "char-nvidia-caps", "char-infiniband_verbs"):
        assert cls in allowed
    assert "SystemCallErrorNumber=EPERM" in unit and "MemoryDenyWriteExecute" not in unit

    # control: the host itself allows each step, so a failure inside the unit is the unit's doing
    ctl = res["control"]
    assert "done" in ctl and ctl["denied"]["end"]["detail"]["ret"] >= 0, ctl

    got = res["steps"]
    assert res["start"].returncode == 0 and "Result=success" in res["show"], \
        "%s\nlast step started: %s" % (res["show"], list(got)[-1] if got else None)
    for step in ("nodes", "memfd", "wx_mmap", "shm", "fork_pidfd", "denied"):
        assert step in got and "end" in got[step], "the probe died in step %s" % step
        assert got[step]["end"]["ok"], got[step]["end"]
    ident = got["identity"]["end"]["detail"]
    assert ident["uid"] != 0
    nodes = got["nodes"]["end"]["detail"]
    expected = sorted([n["path"] for n in layout["nodes"]] + layout.get("later", []))
    assert sorted(nodes) == expected
    denied = dict((p, r) for p, r in nodes.items() if not r.startswith("opened"))
    assert not denied, "service user (uid %s, groups %s) cannot open: %s" % (ident["uid"], ident["groups"], denied)
    assert got["denied"]["end"]["detail"]["ret"] == -1 and got["denied"]["end"]["detail"]["errno"] == "EPERM"

    exposure = ssh(host, "systemd-analyze security sglang.service --no-pager").stdout
    score = float(re.search(r"Overall exposure level for sglang.service: ([0-9.]+)", exposure).group(1))
    print("%s: systemd-analyze security sglang.service: %.1f" % (name, score))
    assert score <= MAX_EXPOSURE


@pytest.mark.parametrize("name,expect", [
    ("owner_only",
     ["GPU node /dev/nvidia0 (0600, uid 0, group root) cannot be opened read-write by the service user sglang",
      "no group can be granted", "proxmox_lxc_gpu_dev_mode", "NVreg_DeviceFileMode", "sglang_device_groups"]),
    ("no_group", ["The nodes /dev/nvidia0 have group id 2000, which has no group on the target", "216/GROUP",
                  "proxmox_lxc_gpu_gid"]),
])
def test_unusable_nodes_fail_before_the_unit_is_written(hosts, failing, name, expect):
    rc, out = failing
    assert rc != 0
    mine = failure_of(out, hosts[name]["name"])
    for text in expect:
        assert text in mine, mine
    assert "Traceback" not in out
    assert ssh(hosts[name], "test -e %s" % UNIT, check=False).returncode != 0


def unit_lines(text):
    return [ln for ln in text.splitlines() if ln and not ln.startswith("#")]


def test_a_property_the_container_refuses_is_left_out_with_a_warning(hosts, passing):
    """The stand-in fails a transient unit with ProtectProc=invisible the way LXC fails a sandboxed unit (226/NAMESPACE,
    "Failed to set up mount namespacing", lxc/lxc #4052): the unit is written without it, the rest of its sandbox
    kept, and it starts."""
    host = hosts["lxc_drop"]
    rc, out = passing
    assert rc == 0, out[-3000:]
    assert [c for c in PASSING if PASSING[c].get("sglang_test_lxc_refuses")] == ["lxc_drop"]  # the warning is its own
    assert "[WARNING]: this host refuses ProtectProc=invisible (a transient unit with it failed:" in out, out[-3000:]
    assert "status=226" in out and "Failed to set up mount namespacing" in out, out[-3000:]
    assert "a first deploy has no last-known-good to fall back to" in out and "stops the failing unit" in out
    res = run_probe(host)
    check_unit(host, "lxc_drop", LAYOUTS["proxmox"], res)
    lines = unit_lines(res["unit"])
    assert "ProtectProc=invisible" not in lines
    assert "# Left out, this host refuses it (sglang_sandbox_refused=drop): ProtectProc=invisible" in res["unit"]
    for kept in ("ProtectSystem=strict", "DevicePolicy=closed", "ProtectKernelTunables=yes", "RestrictNamespaces=yes"):
        assert kept in lines, res["unit"]
    assert res["start"].returncode == 0 and "Result=success" in res["show"], res["show"]
    # a second run writes the same file (the probe units' names never reach it)
    rc, out = render(hosts, ["lxc_drop"])
    assert rc == 0 and ssh(host, "cat %s" % UNIT).stdout == res["unit"]


def test_a_refused_property_with_policy_fail_stops_before_the_unit_is_written(hosts, failing):
    rc, out = failing
    assert rc != 0
    mine = failure_of(out, hosts["lxc_fail"]["name"])
    assert ("this host refuses the sandboxing properties ProtectKernelTunables=yes, ProtectProc=invisible of "
            "sglang.service") in mine, mine
    assert "sglang_sandbox_refused=fail stops here, before the unit is written (allowed: drop" in mine
    assert "a first deploy has no last-known-good to fall back to" in mine and "Traceback" not in out
    assert ssh(hosts["lxc_fail"], "test -e %s" % UNIT, check=False).returncode != 0

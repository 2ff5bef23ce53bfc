from __future__ import (absolute_import, division, print_function)

__metaclass__ = type

import os

import pytest

from ansible_collections.gpuhost.sglang.plugins.module_utils.pve import lxc as x

FIX = os.path.join(os.path.dirname(__file__), "fixtures")


def _read(name):
    with open(os.path.join(FIX, name)) as f:
        return f.read()


def node(path, major, minor):
    return {"path": path, "type": "c", "major": major, "minor": minor}


HOST = [node("/dev/nvidia0", 195, 0), node("/dev/nvidia1", 195, 1), node("/dev/nvidia10", 195, 10),
        node("/dev/nvidiactl", 195, 255), node("/dev/nvidia-uvm", 508, 0), node("/dev/nvidia-uvm-tools", 508, 1),
        node("/dev/nvidia-caps/nvidia-cap1", 237, 1), node("/dev/nvidia-caps/nvidia-cap2", 237, 2),
        {"path": "/dev/nvidia-caps", "type": "d", "major": 0, "minor": 0}, node("/dev/sda", 8, 0)]


def test_parse_config_skips_snapshots_and_comments():
    cfg = x.parse_pve_config(_read("lxc-101.conf"))
    assert cfg["dev1"] == "/dev/nvidia0,gid=44" and "dev7" not in cfg and cfg["hostname"] == "sglang"
    assert cfg["net0"].startswith("name=eth0")


@pytest.mark.parametrize("bad", ["abc", 99, "1000000000", None, "10 1"])
def test_ctid_rejects(bad):
    with pytest.raises(x.LxcError, match="100..999999999"):
        x.validate_ctid(bad)


def test_select_nodes_all_and_subset():
    paths = [n["path"] for n in x.select_nodes(HOST)]
    assert paths == ["/dev/nvidia0", "/dev/nvidia1", "/dev/nvidia10", "/dev/nvidiactl", "/dev/nvidia-uvm",
                     "/dev/nvidia-uvm-tools", "/dev/nvidia-caps/nvidia-cap1", "/dev/nvidia-caps/nvidia-cap2"]
    sub = [n["path"] for n in x.select_nodes(HOST, gpu_minors={1})]
    assert "/dev/nvidia0" not in sub and "/dev/nvidia1" in sub and "/dev/nvidiactl" in sub
    with pytest.raises(x.LxcError, match=r"\[5\]"):
        x.select_nodes(HOST, gpu_minors={5})
    with pytest.raises(x.LxcError, match="nvidiactl"):
        x.select_nodes([node("/dev/nvidia0", 195, 0)])


def test_plan_keeps_foreign_entries_and_indexes():
    cfg = x.parse_pve_config(_read("lxc-101.conf"))
    nodes = x.select_nodes(HOST, gpu_minors={0, 1})
    plan = x.plan_dev_entries(cfg, nodes, gid=44)
    assert "dev0" not in plan["set"] and "dev0" not in plan["delete"]  # /dev/dri stays untouched
    assert "dev1" not in plan["set"] and "dev3" not in plan["set"]  # already right
    assert plan["delete"] == []
    assert plan["set"]["dev2"] == "/dev/nvidia1,gid=44"  # lowest free index
    values = sorted(plan["entries"].values())
    assert "/dev/nvidia-uvm-tools,gid=44" in values and "/dev/nvidiactl,gid=44" in values
    # Apply and replan: nothing left to do (idempotent).
    cfg2 = dict(cfg)
    cfg2.update(plan["set"])
    again = x.plan_dev_entries(cfg2, nodes, gid=44)
    assert again["set"] == {} and again["delete"] == []
    assert x.pct_set_argv(101, again) is None


def test_plan_removes_and_updates():
    cfg = {"dev0": "/dev/nvidia0,gid=44", "dev1": "/dev/nvidia1,gid=44", "dev2": "/dev/nvidiactl", "dev5": "/dev/ttyUSB0"}
    nodes = x.select_nodes(HOST, gpu_minors={1})
    plan = x.plan_dev_entries(cfg, nodes, gid=44, mode="0666")
    assert plan["delete"] == ["dev0"]
    assert plan["set"]["dev1"] == "/dev/nvidia1,gid=44,mode=0666"
    assert plan["set"]["dev2"] == "/dev/nvidiactl,gid=44,mode=0666"
    argv = x.pct_set_argv("101", plan)
    assert argv[:3] == ["pct", "set", "101"] and argv[-2:] == ["--delete", "dev0"]
    # Removing every GPU entry (mode none) keeps the operator's entry.
    gone = x.plan_dev_entries(cfg, [])
    assert sorted(gone["delete"]) == ["dev0", "dev1", "dev2"] and gone["set"] == {}


def test_render_raw_uses_real_majors():
    nodes = x.select_nodes(HOST, gpu_minors={0})
    plan = x.plan_dev_entries({}, nodes, gid=44)
    raw = x.render_lxc_raw(plan["entries"], HOST, cgroup_v1=True)
    assert "lxc.cgroup2.devices.allow = c 195:0 rwm" in raw
    assert "lxc.cgroup2.devices.allow = c 508:0 rwm" in raw  # the dynamic uvm major, read from the node
    assert "lxc.cgroup.devices.allow = c 195:255 rwm" in raw
    assert "lxc.mount.entry = /dev/nvidia-uvm dev/nvidia-uvm none bind,optional,create=file" in raw
    with pytest.raises(x.LxcError):
        x.render_lxc_raw({"dev0": "/dev/nvidia9"}, HOST)
    moved = x.render_lxc_raw(plan["entries"], HOST, host_dev_root="/tmp/hd")
    assert "lxc.mount.entry = /tmp/hd/nvidia-caps/nvidia-cap1 dev/nvidia-caps/nvidia-cap1 none bind,optional,create=file" in moved


def test_discover_nodes_reads_real_numbers(tmp_path):
    if os.geteuid() != 0:
        pytest.skip("mknod needs root")
    os.mknod(str(tmp_path / "nvidia0"), 0o20666, os.makedev(195, 0))
    os.mknod(str(tmp_path / "nvidia-uvm"), 0o20666, os.makedev(508, 0))
    (tmp_path / "nvidia-caps").mkdir()
    os.mknod(str(tmp_path / "nvidia-caps" / "nvidia-cap1"), 0o20400, os.makedev(237, 1))
    (tmp_path / "sda").write_text("")
    nodes = {n["path"]: n for n in x.discover_nodes(str(tmp_path))}
    assert nodes["/dev/nvidia0"] == {"path": "/dev/nvidia0", "type": "c", "major": 195, "minor": 0}
    assert nodes["/dev/nvidia-uvm"]["major"] == 508
    assert nodes["/dev/nvidia-caps/nvidia-cap1"]["minor"] == 1
    assert nodes["/dev/nvidia-caps"]["type"] == "d" and "/dev/sda" not in nodes


@pytest.mark.parametrize("bad", ["nvidia0", "/dev/a,b", "/dev/x=y"])
def test_render_dev_value_rejects(bad):
    with pytest.raises(x.LxcError):
        x.render_dev_value(bad)


def test_versions():
    assert x.parse_nvidia_version(_read("nvidia-version-open.txt")) == "570.133.20"
    assert x.parse_nvidia_version(_read("nvidia-version-prop.txt")) == "550.54.14"
    assert x.parse_nvidia_version("") is None
    assert x.parse_gpu_information("Model: \t\t NVIDIA RTX PRO 6000\nIRQ: 130\nDevice Minor: \t 3\n") == {
        "minor": 3, "model": "NVIDIA RTX PRO 6000"}
    assert x.container_lib_version("/usr/lib/x86_64-linux-gnu/libnvidia-ml.so.570.133.20\n") == "570.133.20"
    assert x.container_lib_version("ii  libnvidia-ml1:amd64  570.133.20-1  amd64  NVIDIA") == "570.133.20"


def test_lockstep():
    assert x.lockstep_status("570.133.20", "570.133.20")["ok"] is True
    st = x.lockstep_status("570.133.20", "550.54.14")
    assert st["state"] == "mismatch" and "reboot" in st["fix"] and "570.133.20" in st["fix"]
    st = x.lockstep_status("570.133.20", "570.133.20", 18, "Failed to initialize NVML: Driver/library version mismatch\n")
    assert st["state"] == "mismatch" and "Failed to initialize NVML" in st["message"]
    assert x.lockstep_status(None, "1.2")["state"] == "no_host_driver"
    assert x.lockstep_status("570.133.20", None)["state"] == "no_container_libs"


def test_pct_create_merges_the_options_over_the_roles_defaults():
    import yaml
    root = os.path.abspath(os.path.join(os.path.dirname(__file__), *[os.pardir] * 5))
    with open(os.path.join(root, "roles", "proxmox_lxc_gpu", "defaults", "main.yml")) as fh:
        defaults = yaml.safe_load(fh)["proxmox_lxc_gpu_default_options"]
    volid = "local:vztmpl/debian-12-standard_12.7-1_amd64.tar.zst"
    argv = x.pct_create_argv(101, volid, "sglang", defaults, {"cores": 32, "swap": None, "mp0": "/srv/models,mp=/models"})
    assert argv == ["pct", "create", "101", volid, "--hostname", "sglang", "--cores", "32", "--memory", "131072",
                    "--rootfs", "local-lvm:200", "--net0", "name=eth0,bridge=vmbr0,ip=dhcp", "--unprivileged", "1",
                    "--features", "nesting=1", "--onboot", "1", "--ostype", "debian", "--mp0", "/srv/models,mp=/models"]
    assert x.pct_create_argv("102", volid, "h", None, None) == ["pct", "create", "102", volid, "--hostname", "h"]
    with pytest.raises(x.LxcError, match="container id 99 is out of range"):
        x.pct_create_argv(99, volid, "h", defaults)

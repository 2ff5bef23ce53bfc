# -*- coding: utf-8 -*-
# Copyright: gpuhost.sglang contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Which groups the serving unit needs to open the GPU nodes (node layouts of bare metal, Proxmox VE, udev)."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import pytest

from ansible_collections.gpuhost.sglang.plugins.module_utils.serving.device_access import (
    DeviceAccessError, access_class, from_ansible, plan_device_access)

GROUPS = {"root": 0, "video": 44, "render": 105, "sglang": 997}
UID, GID = 999, 997


def nodes(mode, gid, uid=0, paths=("/dev/nvidia0", "/dev/nvidiactl", "/dev/nvidia-uvm")):
    return [{"path": p, "mode": mode, "uid": uid, "gid": gid} for p in paths]


def plan(ns, members=(), extra=None, uid=UID, gid=GID):
    return plan_device_access(ns, "sglang", uid, gid, list(members), GROUPS, extra)


def test_bare_metal_0666_needs_no_group():
    res = plan(nodes("0666", 0))
    assert res["groups"] == [] and res["problems"] == []
    assert res["nodes"] == ["/dev/nvidia-uvm", "/dev/nvidia0", "/dev/nvidiactl"]


def test_proxmox_devn_0660_gid44_grants_video():
    # pve-container create_passthrough_device_node: chmod 0660, chown 0:<entry gid>
    res = plan(nodes("0660", 44))
    assert res["groups"] == ["video"] and res["problems"] == []
    assert res["grants"][0]["gid"] == 44 and len(res["grants"][0]["nodes"]) == 3


def test_gid_without_a_group_fails_early():
    # systemd 252: SupplementaryGroups=2000 with no group 2000 -> the unit exits 216/GROUP
    res = plan(nodes("0660", 2000, paths=("/dev/nvidia0",)))
    assert res["problems"] == [
        "The nodes /dev/nvidia0 have group id 2000, which has no group on the target: systemd refuses a "
        "SupplementaryGroups= entry without one (the unit would exit with 216/GROUP). Create it (groupadd -g 2000 "
        "NAME) or give the nodes a gid that exists there (Proxmox VE: proxmox_lxc_gpu_gid)."]


def test_udev_render_group():
    res = plan(nodes("0660", 105))
    assert res["groups"] == ["render"]


def test_member_already_needs_no_grant():
    res = plan(nodes("0660", 44), members=[44])
    assert res["groups"] == [] and res["problems"] == []


def test_owner_only_node_fails_naming_what_to_change():
    res = plan(nodes("0600", 0, paths=("/dev/nvidia0",)))
    assert res["groups"] == []
    text = " ".join(res["problems"])
    assert "/dev/nvidia0 (0600, uid 0, group root)" in text
    assert "no group can be granted" in text
    assert "proxmox_lxc_gpu_dev_mode" in text and "NVreg_DeviceFileMode" in text and "sglang_device_groups" in text


def test_group_read_only_fails():
    res = plan(nodes("0640", 44, paths=("/dev/nvidia0",)))
    assert res["problems"] and "group bits are r--" in res["problems"][0]


def test_member_of_a_group_whose_bits_deny_although_others_may():
    # the kernel applies the group bits to members, even when the other bits would allow
    res = plan(nodes("0606", 44, paths=("/dev/nvidia0",)), members=[44])
    assert res["problems"] and "member of group video, whose bits are ---" in res["problems"][0]


def test_explicit_group_that_would_lock_out_is_reported():
    res = plan(nodes("0606", 44, paths=("/dev/nvidia0",)), extra=["video"])
    assert res["problems"] and "remove it from sglang_device_groups" in res["problems"][0]


def test_extra_groups_by_name_and_number():
    res = plan(nodes("0666", 0), extra=["render", 44, "44"])
    assert res["groups"] == ["render", "video"] and res["problems"] == []
    res = plan(nodes("0666", 0), extra=[3000])
    assert res["problems"] and res["problems"][0].startswith("sglang_device_groups lists group id 3000, which has no group")


def test_unknown_extra_group_is_an_error_naming_the_variable():
    res = plan(nodes("0666", 0), extra=["gpu-users"])
    assert res["problems"] == ["sglang_device_groups: group 'gpu-users' does not exist on the target "
                               "(a group name or a numeric gid; groups there: render, root, sglang, video)."]


def test_owner_is_the_user():
    assert access_class({"mode": 0o600, "uid": UID, "gid": 0}, UID, set()) == ("owner", True)
    assert access_class({"mode": 0o066, "uid": UID, "gid": 0}, UID, {0})[1] is False


def test_user_that_does_not_exist_yet_check_mode():
    res = plan(nodes("0660", 44), uid=None, gid=None)
    assert res["groups"] == ["video"] and res["problems"] == []


def test_mixed_nodes_two_groups():
    ns = nodes("0660", 44, paths=("/dev/nvidia0",)) + nodes("0660", 105, paths=("/dev/infiniband/uverbs0",)) \
        + nodes("0666", 0, paths=("/dev/nvidia-uvm",))
    res = plan(ns)
    assert res["groups"] == ["render", "video"]


def test_bad_mode_raises():
    with pytest.raises(DeviceAccessError, match="not an octal mode"):
        plan(nodes("rw-rw----", 44))


def test_from_ansible_reads_find_and_getent():
    found = [{"path": "/dev/nvidia0", "mode": "0660", "uid": 0, "gid": 44, "gr_name": "video", "ischr": True},
             {"path": "/dev/nvidia-caps", "mode": "0755", "uid": 0, "gid": 0, "gr_name": "root", "ischr": False}]
    passwd = ["x", "999", "997", "", "/var/lib/sglang", "/usr/sbin/nologin"]
    group_db = {"video": ["x", "44", ""], "render": ["x", "105", "sglang,other"], "sglang": ["x", "997", ""]}
    res = from_ansible(found, passwd, group_db, [], "sglang")
    assert res["nodes"] == ["/dev/nvidia0"] and res["groups"] == ["video"]
    res = from_ansible(found, passwd, dict(group_db, video=["x", "44", "sglang"]), [], "sglang")
    assert res["groups"] == []   # already a member: systemd adds the user's groups itself

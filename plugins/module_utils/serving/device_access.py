# -*- coding: utf-8 -*-
# Copyright: gpuhost.sglang contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Can the serving unit's user open every GPU / RDMA node, and which groups must the unit get so that it can?

The nodes come from different places with different modes: the NVIDIA driver on bare metal creates them 0666
root:root (nvidia-modprobe NV_DEVICE_FILE_MODE, overridable with the module's NVreg_DeviceFileMode/GID);
Proxmox VE creates passed-through nodes 0660 with the ``devN:`` entry's uid/gid (pve-container
src/PVE/LXC.pm create_passthrough_device_node: mode defaults to 0660, uid/gid to 0); udev rules set whatever
they set (e.g. 0660 root:render). The unit runs without capabilities (CapabilityBoundingSet= is empty), so the
kernel's plain mode check decides (fs/namei.c acl_permission_check): the owner bits when the caller owns the node,
else the group bits when the node's group is one of the caller's groups, else the other bits. CUDA opens the
nodes read-write, so each needs both bits in the class that applies.

``plan_device_access`` reads the nodes as found on the target and returns the groups to grant (systemd
``SupplementaryGroups=``) or, for a node no group can open, a problem naming what to change. POSIX ACLs on
device nodes (udev ``uaccess``) are not considered: compute nodes do not get them.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

RW = {"owner": 0o600, "group": 0o060, "other": 0o006}

FIX_HINT = (
    "Make the node read-write for a group: on Proxmox VE the container's devN: entries take mode= and gid= "
    "(role proxmox_lxc_gpu: proxmox_lxc_gpu_dev_mode, proxmox_lxc_gpu_gid; default 0660 and gid 44); on bare metal "
    "the nvidia module parameters NVreg_DeviceFileMode / NVreg_DeviceFileGID (default 0666 root:root); with udev "
    "rules their MODE=/GROUP=. The role then grants that group to the unit by itself. Groups the nodes get only "
    "later (after this deploy) go in %s.")


class DeviceAccessError(Exception):
    pass


def _mode(value, path):
    if isinstance(value, int):
        return value & 0o7777
    try:
        return int(str(value), 8) & 0o7777
    except ValueError:
        raise DeviceAccessError("node %s: mode %r is not an octal mode" % (path, value))


def _bits(mode, cls):
    """'rw-' style triplet of one class."""
    shift = {"owner": 6, "group": 3, "other": 0}[cls]
    m = (mode >> shift) & 7
    return "".join(c if m & b else "-" for c, b in (("r", 4), ("w", 2), ("x", 1)))


def access_class(node, uid, gids):
    """Which permission class the kernel applies to a caller (uid, gids) opening ``node``, and whether it allows rw."""
    mode = node["mode"]
    if uid is not None and node["uid"] == uid:
        cls = "owner"
    elif node["gid"] in gids:
        cls = "group"
    else:
        cls = "other"
    return cls, (mode & RW[cls]) == RW[cls]


def _resolve_groups(entries, group_gids, var_name):
    """Names or numeric ids from ``var_name`` -> list of gids (in order), problems."""
    gids, problems = [], []
    for entry in entries or []:
        text = str(entry).strip()
        if text.isdigit():
            gid = int(text)
        elif text in group_gids:
            gid = group_gids[text]
        else:
            known = ", ".join(sorted(group_gids)) or "none"
            problems.append("%s: group %r does not exist on the target (a group name or a numeric gid; groups there: %s)."
                            % (var_name, text, known))
            continue
        if gid not in gids:
            gids.append(gid)
    return gids, problems


def plan_device_access(nodes, user, uid, primary_gid, member_gids, group_gids, extra_groups=None,
                       var_name="sglang_device_groups"):
    """Groups to grant so that ``user`` can open every node read-write, or the problems that no group solves.

    nodes        list of {path, mode (int or octal string), uid, gid, gr_name (optional)}
    user         the service user's name (messages only); uid / primary_gid: its ids (None when it does not exist yet)
    member_gids  gids of the groups the user is a member of (the group database); they apply in the unit too
    group_gids   {group name: gid} of the target
    extra_groups names or gids to grant in addition (``var_name``)

    Returns {"nodes": [paths, sorted], "groups": [names (or gids without a name) to put in SupplementaryGroups=],
    "grants": [{"group", "gid", "nodes"}], "problems": [text]}.
    """
    parsed = []
    for node in nodes or []:
        path = node.get("path")
        if not path:
            raise DeviceAccessError("a node without a path: %r" % (node,))
        parsed.append({"path": path, "mode": _mode(node.get("mode"), path), "uid": int(node.get("uid", 0)),
                       "gid": int(node.get("gid", 0)), "gr_name": node.get("gr_name") or ""})
    parsed.sort(key=lambda n: n["path"])
    base = set(member_gids or [])
    if primary_gid is not None:
        base.add(int(primary_gid))
    names = {}
    for name, gid in sorted((group_gids or {}).items()):
        names.setdefault(int(gid), name)
    for n in parsed:
        if n["gr_name"]:
            names.setdefault(n["gid"], n["gr_name"])

    extra, problems = _resolve_groups(extra_groups, dict((k, int(v)) for k, v in (group_gids or {}).items()), var_name)
    auto = {}
    for n in parsed:
        cls, ok = access_class(n, uid, base)
        if cls == "other" and not ok and (n["mode"] & RW["group"]) == RW["group"]:
            auto.setdefault(n["gid"], []).append(n["path"])
    final = base | set(auto) | set(extra)

    for n in parsed:
        cls, ok = access_class(n, uid, final)
        if ok:
            continue
        owner = n["uid"]
        group = names.get(n["gid"], str(n["gid"]))
        desc = "%s (%04o, uid %d, group %s)" % (n["path"], n["mode"], owner, group)
        who = "%s (uid %s)" % (user, "?" if uid is None else uid)
        if cls == "owner":
            why = "%s owns it, but the owner bits are %s" % (who, _bits(n["mode"], "owner"))
        elif cls == "group" and n["gid"] in extra and n["gid"] not in base:
            why = ("%s lists group %s, whose bits %s then apply instead of the others' %s: remove it from %s"
                   % (var_name, group, _bits(n["mode"], "group"), _bits(n["mode"], "other"), var_name))
        elif cls == "group":
            why = "%s is a member of group %s, whose bits are %s" % (who, group, _bits(n["mode"], "group"))
        else:
            why = ("no group can be granted: the group bits are %s and the others' %s"
                   % (_bits(n["mode"], "group"), _bits(n["mode"], "other")))
        problems.append("GPU node %s cannot be opened read-write by the service user %s: %s." % (desc, who, why))
    if any(p.startswith("GPU node") for p in problems):
        problems.append(FIX_HINT % var_name)

    grant_gids = [g for g in sorted(set(auto) | set(extra)) if g not in base]
    db_names = set(int(v) for v in (group_gids or {}).values())
    for g in grant_gids:
        if g not in db_names:
            # systemd resolves each SupplementaryGroups= entry with getgrgid() and, without an entry, the unit fails
            # with 216/GROUP (src/core/execute.c get_supplementary_groups -> get_group_creds; seen on systemd 252)
            where = ("The nodes %s have group id %d" % (", ".join(auto[g]), g)) if g in auto \
                else "%s lists group id %d" % (var_name, g)
            problems.append("%s, which has no group on the target: systemd refuses a SupplementaryGroups= entry "
                            "without one (the unit would exit with 216/GROUP). Create it (groupadd -g %d NAME) or "
                            "give the nodes a gid that exists there (Proxmox VE: proxmox_lxc_gpu_gid)."
                            % (where, g))
    grants = [{"group": names.get(g, str(g)), "gid": g, "nodes": auto.get(g, [])} for g in grant_gids]
    return {"nodes": [n["path"] for n in parsed], "groups": sorted(g["group"] for g in grants),
            "grants": grants, "problems": problems}


def from_ansible(find_files, passwd_entry, group_db, extra_groups=None, user="sglang", var_name="sglang_device_groups"):
    """Adapter for Ansible data: ``find`` results (character devices only), ``getent passwd`` entry of the user
    ([password, uid, gid, gecos, home, shell] or None), ``getent group`` database ({name: [password, gid, members]})."""
    nodes = [f for f in (find_files or []) if f.get("ischr")]
    uid = primary = None
    if passwd_entry:
        uid, primary = int(passwd_entry[1]), int(passwd_entry[2])
    group_gids, members = {}, []
    for name, entry in (group_db or {}).items():
        gid = int(entry[1])
        group_gids[name] = gid
        if user in [m.strip() for m in (entry[2] or "").split(",")]:
            members.append(gid)
    return plan_device_access(nodes, user, uid, primary, members, group_gids, extra_groups, var_name)

# -*- coding: utf-8 -*-
# Copyright: gpuhost.sglang contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""What a role reads on a host before it changes anything, in one module call (module host_read).

The same data as ansible.builtin.slurp, stat (with a sha1), find and getent give, in their shapes where a filter
already reads them (find's path/mode/uid/gid/ischr/isblk; getent's lists), one round trip instead of one each.
``root`` prefixes every path (tests).
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import fnmatch
import grp
import hashlib
import os
import pwd
import stat

from ansible_collections.gpuhost.sglang.plugins.module_utils.serving import unit_host

MAX_READ = 1 << 20   # the records read here are small; a larger file is a mistake in the request


class ReadError(Exception):
    pass


def read_files(root, paths):
    out = {}
    for path in paths:
        full = unit_host._path(root, path)
        if os.path.isfile(full) and os.path.getsize(full) > MAX_READ:
            raise ReadError("%s is larger than %d bytes: not a record to read" % (path, MAX_READ))
        out[path] = unit_host.read_text(root, path)
    return out


def sha1(root, path):
    full = unit_host._path(root, path)
    if not os.path.isfile(full):
        return None
    digest = hashlib.sha1()
    with open(full, "rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def find_nodes(root, paths, patterns, depth):
    """Character and block device nodes whose base name matches a pattern, down to ``depth`` levels (find's
    recurse + depth), sorted by path."""
    found = []
    for top in paths:
        base = unit_host._path(root, top)
        start = base.rstrip(os.sep).count(os.sep)
        for dirpath, dirnames, filenames in os.walk(base):
            if dirpath.count(os.sep) - start + 1 >= depth:
                dirnames[:] = []
            for name in filenames + dirnames:
                if not any(fnmatch.fnmatch(name, p) for p in patterns):
                    continue
                full = os.path.join(dirpath, name)
                try:
                    st = os.lstat(full)
                except OSError:
                    continue
                if not (stat.S_ISCHR(st.st_mode) or stat.S_ISBLK(st.st_mode)):
                    continue
                path = full[len(root.rstrip(os.sep)):] if root else full
                found.append({"path": path, "mode": "%04o" % (st.st_mode & 0o7777), "uid": st.st_uid,
                              "gid": st.st_gid, "ischr": stat.S_ISCHR(st.st_mode), "isblk": stat.S_ISBLK(st.st_mode)})
    return sorted(found, key=lambda n: n["path"])


def _entry(path, full, st, names):
    """One path in ansible.builtin.find's shape (path, isdir, isreg, islnk, mode, pw_name, gr_name; checksum: the
    sha1 of a regular file)."""
    entry = {"path": path, "isdir": stat.S_ISDIR(st.st_mode), "isreg": stat.S_ISREG(st.st_mode),
             "islnk": stat.S_ISLNK(st.st_mode), "mode": "%04o" % (st.st_mode & 0o7777),
             "pw_name": names.setdefault(("u", st.st_uid), _name(pwd.getpwuid, st.st_uid)),
             "gr_name": names.setdefault(("g", st.st_gid), _name(grp.getgrgid, st.st_gid))}
    if entry["isreg"]:
        entry["checksum"] = sha1("", full)
    return entry


def read_tree(root, top):
    """Every entry under ``top`` (hidden ones too, links not followed) with a sha1 of each regular file, in
    ansible.builtin.find's shape (recurse, file_type any, get_checksum): {"files": [{path, isdir, isreg, islnk, mode,
    pw_name, gr_name, checksum}]}, sorted by path; no entries when ``top`` is not a directory. Used on the host
    (module host_read) and on the controller (plugins/plugin_utils/model_files.py), so both sides read alike."""
    base = unit_host._path(root, top)
    entries = []
    if not os.path.isdir(base):
        return {"files": entries}
    names = {}
    for dirpath, dirnames, filenames in os.walk(base):
        for name in dirnames + filenames:
            full = os.path.join(dirpath, name)
            try:
                st = os.lstat(full)
            except OSError:
                continue
            entries.append(_entry(full[len(root.rstrip(os.sep)):] if root else full, full, st, names))
    return {"files": sorted(entries, key=lambda e: e["path"])}


def stat_paths(root, paths):
    """{path: entry or None (absent)} of each path, links followed as module host_files follows them (the entry's
    shape is read_tree's): what the controller compares a host_files task's declaration with
    (plugins/action/host_files.py) before it calls the module."""
    names, out = {}, {}
    for path in paths:
        full = unit_host._path(root, path)
        try:
            st = os.stat(full)
        except OSError:
            out[path] = None
            continue
        out[path] = _entry(path, full, st, names)
    return out


def _name(lookup, ident):
    try:
        return lookup(ident)[0]
    except KeyError:
        return str(ident)


def passwd_entry(name):
    """getent passwd NAME as ansible.builtin.getent gives it: [password, uid, gid, gecos, home, shell], or None."""
    try:
        pw = pwd.getpwnam(name)
    except KeyError:
        return None
    return [pw.pw_passwd, str(pw.pw_uid), str(pw.pw_gid), pw.pw_gecos, pw.pw_dir, pw.pw_shell]


def group_db():
    """getent group as ansible.builtin.getent gives it: {name: [password, gid, 'member,member']}."""
    return dict((g.gr_name, [g.gr_passwd, str(g.gr_gid), ",".join(g.gr_mem)]) for g in grp.getgrall())


def unit_states(run, units):
    """{unit: {active, enabled}} from one ``systemctl show`` (ActiveState, UnitFileState; a unit systemd does not know
    reads inactive and an empty enabled state)."""
    if not units:
        return {}
    rc, out, _err = run(["systemctl", "show", "--property=Id,ActiveState,UnitFileState"] + list(units))
    states = dict((u, {"active": "inactive", "enabled": ""}) for u in units)
    if rc != 0:
        return states
    for unit, block in zip(units, out.strip().split("\n\n")):
        fields = dict(line.split("=", 1) for line in block.splitlines() if "=" in line)
        states[unit] = {"active": fields.get("ActiveState", "inactive"), "enabled": fields.get("UnitFileState", "")}
    return states


def read(root, files=(), checksums=(), exists=(), devices=None, account=None, groups=False, units=(), run=None, tree=None,
         stats=()):
    out = {"files": read_files(root, files),
           "checksums": dict((p, sha1(root, p)) for p in checksums),
           "exists": dict((p, os.path.lexists(unit_host._path(root, p))) for p in exists)}
    if devices:
        out["devices"] = find_nodes(root, devices.get("paths") or ["/dev"], devices.get("patterns") or ["*"],
                                    int(devices.get("depth") or 1))
    if account:
        out["passwd"] = {account: passwd_entry(account)}
    if groups:
        out["group"] = group_db()
    if units:
        out["units"] = unit_states(run, units)
    if tree:
        out["tree"] = read_tree(root, tree)
    if stats:
        out["stat"] = stat_paths(root, stats)
    return out

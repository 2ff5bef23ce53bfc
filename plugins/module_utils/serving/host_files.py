# -*- coding: utf-8 -*-
# Copyright: gpuhost.sglang contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Directories and small text files of a role, made as declared in one module call (module host_files).

ansible.builtin.copy and template cost two round trips per file (a stat, then the copy or a file call) and
ansible.builtin.file one per path: a role that declares a dozen paths spends seconds on SSH when nothing changes.
Here every path is compared on the host and only what differs is written, by a rename in its directory (a reader
sees the old file or the new one), with the owner, group and mode declared. ``root`` prefixes every path (tests).
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import grp
import hashlib
import os
import pwd

from ansible_collections.gpuhost.sglang.plugins.module_utils.serving import unit_host


class FilesError(Exception):
    pass


# What a declaration leaves out (the module's argument spec takes its defaults from here too)
OWNER = "root"
GROUP = "root"
DIRECTORY_MODE = "0755"
FILE_MODE = "0644"


def declared(spec, default_mode):
    """(owner, group, mode string) of a directory or file declaration, the defaults filled in."""
    return spec.get("owner") or OWNER, spec.get("group") or GROUP, spec.get("mode") or default_mode


def _ids(owner, group, check_mode):
    """(uid, gid) of the names; None for a name this host does not know yet, which only check mode may accept (the
    user the same play creates first)."""
    ids = []
    for name, lookup, kind in ((owner, pwd.getpwnam, "user"), (group, grp.getgrnam, "group")):
        try:
            ids.append(lookup(name)[2])
        except KeyError:
            if not check_mode:
                raise FilesError("%s %r does not exist on this host" % (kind, name))
            ids.append(None)
    return ids[0], ids[1]


def _mode(value, what):
    try:
        mode = int(str(value), 8)
    except ValueError:
        raise FilesError("%s: mode %r is not an octal number such as '0644'" % (what, value))
    if not 0 <= mode <= 0o7777:
        raise FilesError("%s: mode %r is out of range 0000-7777" % (what, value))
    return mode


def _differs(full, uid, gid, mode):
    st = os.stat(full)
    return [what for what, bad in (("owner", uid is not None and st.st_uid != uid),
                                   ("group", gid is not None and st.st_gid != gid),
                                   ("mode", st.st_mode & 0o7777 != mode)) if bad]


def ensure_directory(root, spec, check_mode):
    """Returns the list of what changed ('created', 'owner', 'group', 'mode'); empty when nothing did. A
    ``create_only`` directory gets its owner, group and mode only when it is made: an existing one is the host's
    (a dataset bind-mounted from a Proxmox host, say) and is left as the host set it."""
    path = spec["path"]
    full = unit_host._path(root, path)
    owner, group, mode = declared(spec, DIRECTORY_MODE)
    mode = _mode(mode, path)
    uid, gid = _ids(owner, group, check_mode)
    if os.path.lexists(full) and not os.path.isdir(full):
        raise FilesError("%s exists and is not a directory" % path)
    if spec.get("create_only") and os.path.isdir(full):
        return []
    if not os.path.isdir(full):
        if not check_mode:
            os.makedirs(full)
            os.chmod(full, mode)
            os.chown(full, uid, gid)
        return ["created"]
    changes = _differs(full, uid, gid, mode)
    if changes and not check_mode:
        os.chmod(full, mode)
        os.chown(full, uid if uid is not None else -1, gid if gid is not None else -1)
    return changes


def ensure_file(root, spec, check_mode):
    """Returns (what changed, the content before or None)."""
    dest = spec["dest"]
    full = unit_host._path(root, dest)
    owner, group, mode = declared(spec, FILE_MODE)
    mode = _mode(mode, dest)
    uid, gid = _ids(owner, group, check_mode)
    if os.path.isdir(full):
        raise FilesError("%s is a directory, a file was declared" % dest)
    before = unit_host.read_text(root, dest)
    if before != spec["content"]:
        if not check_mode:
            unit_host.write_atomic(root, dest, spec["content"], mode, uid, gid)
        return (["content"] if before is not None else ["created"]), before
    changes = _differs(full, uid, gid, mode)
    if changes and not check_mode:
        os.chmod(full, mode)
        os.chown(full, uid if uid is not None else -1, gid if gid is not None else -1)
    return changes, before


def ensure(root, directories, files, check_mode=False):
    """Directories first, in order, then files. Returns {changed, paths: {path: [what]}, diff: [...]}."""
    paths, diff = {}, []
    for spec in directories:
        changes = ensure_directory(root, spec, check_mode)
        if changes:
            paths[spec["path"]] = changes
    for spec in files:
        changes, before = ensure_file(root, spec, check_mode)
        if changes:
            paths[spec["dest"]] = changes
            if "content" in changes or "created" in changes:
                diff.append({"before_header": spec["dest"], "after_header": spec["dest"],
                             "before": before or "", "after": spec["content"]})
    return {"changed": bool(paths), "paths": paths, "diff": diff}


def known_difference(directories, files, known):
    """None when ``known`` (module host_read's ``stat`` of the host, read earlier in the play) shows every declared
    directory and file exactly as ensure() would leave it: the controller then skips the call (a round trip of a
    no-op run). Otherwise the first path that may differ ("" when there is no read), and the module decides on the
    host: a path the read did not cover or found absent, another type, content (sha1 of the declared text), owner
    or group name, or mode, and a declaration the module would refuse (it names the error)."""
    if not isinstance(known, dict):
        return ""
    path = ""
    try:
        for spec in directories:
            path = spec["path"]
            entry = known.get(path)
            if not (isinstance(entry, dict) and entry.get("isdir")
                    and (spec.get("create_only") or _same_owner_mode(entry, spec, DIRECTORY_MODE))):
                return path
        for spec in files:
            path = spec["dest"]
            entry = known.get(path)
            digest = hashlib.sha1(spec["content"].encode("utf-8", "surrogateescape")).hexdigest()  # as written
            if not (isinstance(entry, dict) and entry.get("isreg") and _same_owner_mode(entry, spec, FILE_MODE)
                    and entry.get("checksum") == digest):
                return path
    except (FilesError, KeyError, TypeError, ValueError, AttributeError):
        return path
    return None


def _same_owner_mode(entry, spec, default_mode):
    owner, group, mode = declared(spec, default_mode)
    return (entry.get("pw_name") == owner and entry.get("gr_name") == group
            and int(str(entry.get("mode")), 8) == _mode(mode, "declared"))

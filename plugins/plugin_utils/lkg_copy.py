# -*- coding: utf-8 -*-
# Copyright: gpuhost.sglang contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The controller's copy of a serving host's last-known-good record (action gpuhost.sglang.serving_lkg_copy).

The serving role keeps last-known-good on the host (sglang_lkg_dir: meta.json, which holds the unit and environment
file contents, and copies beside it). A reinstalled host, or a new container, loses it: the first deploy there then
has nothing to roll back to. After a good deploy the playbook saves the record on the controller; before the first
deploy on a rebuilt host it puts the record back, only where the host has none of its own (a host's own record is
never replaced: it is at least as new as the copy).

The record holds the environment file, with the API key: the copy is written 0600 in a 0700 directory, replaced in
one rename, and the copy it replaces is kept beside it (``<dir>.previous``), never lost silently.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import hashlib
import json
import os
import shutil
import tempfile

META = "meta.json"
# what serving_unit's inspect needs of a record (plugins/module_utils/serving/unit_host.py inspect)
REQUIRED = ("unit", "unit_path", "env_file", "health_url", "base_url")
# meta.json keys that are bookkeeping, not configuration: the process that passed the gate, which a restart of the
# same record changes (unit_host.record writes it without reporting a change; the copy does the same)
BOOKKEEPING = ("invocation",)


class CopyError(Exception):
    pass


def record_problem(files):
    """"" when ``files`` ({name: text}) hold a whole last-known-good record, else why not."""
    text = files.get(META)
    if text is None:
        return "no %s" % META
    try:
        meta = json.loads(text)
    except ValueError as exc:
        return "%s is not JSON (%s)" % (META, exc)
    if not isinstance(meta, dict):
        return "%s is not a JSON object" % META
    missing = [k for k in REQUIRED if k not in meta]
    # unit_host.inspect completes an older record from its copies beside meta.json
    if "unit_b64" not in meta and meta.get("unit") not in files:
        missing.append("unit_b64 (or the unit's copy)")
    if "env_b64" not in meta and "env" not in files:
        missing.append("env_b64 (or the env copy)")
    return "%s lacks %s" % (META, ", ".join(missing)) if missing else ""


def _check_names(files):
    for name in files:
        if not name or "/" in name or name in (".", ".."):
            raise CopyError("last-known-good file name %r is not a plain file name" % name)


def read_copy(directory):
    """{name: text} of the copy in ``directory``; {} when there is none."""
    if not os.path.isdir(directory):
        return {}
    out = {}
    for name in sorted(os.listdir(directory)):
        path = os.path.join(directory, name)
        if os.path.isfile(path) and not os.path.islink(path):
            with open(path, encoding="utf-8", errors="surrogateescape") as fh:
                out[name] = fh.read()
    return out


def checksums(files):
    """{name: sha1 of the text as written} (module host_read's tree gives the host's files in this form)."""
    return dict((name, hashlib.sha1(text.encode("utf-8", "surrogateescape")).hexdigest()) for name, text in files.items())


def _configuration(meta_text):
    """meta.json's object without its bookkeeping keys; None when it is not a JSON object."""
    try:
        meta = json.loads(meta_text)
    except (TypeError, ValueError):
        return None
    if not isinstance(meta, dict):
        return None
    return dict((k, v) for k, v in meta.items() if k not in BOOKKEEPING)


def difference(copy, files):
    """How the controller's ``copy`` differs from the host's record ``files`` (both {name: text}): "" (the same),
    "bookkeeping" (only meta.json's bookkeeping keys: the same configuration, another process) or "record"."""
    if copy == files:
        return ""
    if set(copy) == set(files) and all(copy[n] == files[n] for n in files if n != META):
        ours = _configuration(copy.get(META))
        if ours is not None and ours == _configuration(files.get(META)):
            return "bookkeeping"
    return "record"


def _write_private(path, text):
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "w", encoding="utf-8", errors="surrogateescape") as fh:
        fh.write(text)


def save(directory, files):
    """Make ``directory`` hold exactly ``files`` (the host's record). Returns {changed, previous}: the copy it
    replaced, if any, is ``<directory>.previous``. A record that differs only in bookkeeping (the same configuration
    restarted) refreshes meta.json in place, by one rename: not a change, and the previous copy is kept."""
    _check_names(files)
    problem = record_problem(files)
    if problem:
        raise CopyError("the host's last-known-good is not a whole record (%s): nothing saved" % problem)
    directory = os.path.abspath(directory)
    how = difference(read_copy(directory), files)
    if not how:
        return {"changed": False, "previous": ""}
    if how == "bookkeeping":
        fd, tmp = tempfile.mkstemp(prefix=".%s.tmp-" % META, dir=directory)  # mode 0600
        try:
            with os.fdopen(fd, "w", encoding="utf-8", errors="surrogateescape") as fh:
                fh.write(files[META])
            os.rename(tmp, os.path.join(directory, META))
        except BaseException:
            if os.path.exists(tmp):
                os.unlink(tmp)
            raise
        return {"changed": False, "previous": ""}
    parent = os.path.dirname(directory)
    os.makedirs(parent, mode=0o700, exist_ok=True)
    tmp = tempfile.mkdtemp(prefix=".%s.tmp-" % os.path.basename(directory), dir=parent)
    try:
        for name, text in files.items():
            _write_private(os.path.join(tmp, name), text)
        previous = ""
        if os.path.isdir(directory):
            previous = directory + ".previous"
            if os.path.isdir(previous):
                shutil.rmtree(previous)
            os.rename(directory, previous)
        os.rename(tmp, directory)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return {"changed": True, "previous": previous}


def restore_plan(host_meta_text, copy, directory):
    """Whether to put the controller's ``copy`` ({name: text} from ``directory``) on a host whose record's meta.json
    reads ``host_meta_text`` (None: absent). {restore: bool, reason: text}."""
    if host_meta_text is not None:
        return {"restore": False, "reason": "the host has a last-known-good record of its own: kept, the copy in %s "
                                            "not used" % directory}
    if not copy:
        return {"restore": False, "reason": "no controller copy in %s: the first deploy has no last-known-good to "
                                            "roll back to" % directory}
    _check_names(copy)
    problem = record_problem(copy)
    if problem:
        return {"restore": False, "reason": "the controller copy in %s is not a whole record (%s): not restored"
                                            % (directory, problem)}
    return {"restore": True, "reason": "last-known-good restored from %s (%s)" % (directory, ", ".join(sorted(copy)))}

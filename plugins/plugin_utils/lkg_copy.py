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


def save(directory, files):
    """Make ``directory`` hold exactly ``files`` (the host's record). Returns {changed, previous}: the copy it
    replaced, if any, is ``<directory>.previous``."""
    _check_names(files)
    problem = record_problem(files)
    if problem:
        raise CopyError("the host's last-known-good is not a whole record (%s): nothing saved" % problem)
    directory = os.path.abspath(directory)
    if read_copy(directory) == files:
        return {"changed": False, "previous": ""}
    parent = os.path.dirname(directory)
    os.makedirs(parent, mode=0o700, exist_ok=True)
    tmp = tempfile.mkdtemp(prefix=".%s.tmp-" % os.path.basename(directory), dir=parent)
    try:
        for name, text in files.items():
            fd = os.open(os.path.join(tmp, name), os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
            with os.fdopen(fd, "w", encoding="utf-8", errors="surrogateescape") as fh:
                fh.write(text)
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

# -*- coding: utf-8 -*-
# Copyright: gpuhost.sglang contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The serving host's side of the deploy transaction: files and systemd, one operation per call.

The decisions (which candidate, restart or not, keep or roll back) are made on the controller by
plugins/plugin_utils/deploy.py; every function here does one thing on the host and says what it did.
``run`` executes a command (argv list) and returns (rc, stdout, stderr); ``root`` prefixes every path (tests).
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import base64
import hashlib
import json
import os
import shutil
import tempfile
import time


class HostError(Exception):
    pass


def _path(root, path):
    return os.path.join(root, path.lstrip("/")) if root else path


def read_text(root, path):
    try:
        with open(_path(root, path), "rb") as fh:
            return fh.read().decode("utf-8", "surrogateescape")
    except (IOError, OSError):
        return None


def write_atomic(root, path, content, mode, uid=0, gid=0):
    """Write ``content`` to ``path`` by a rename in its directory: a reader sees the old file or the new one.
    Owned by uid:gid (root's by default) when this process may give files away."""
    full = _path(root, path)
    directory = os.path.dirname(full)
    if not os.path.isdir(directory):
        os.makedirs(directory, 0o755)
    fd, tmp = tempfile.mkstemp(prefix=".gpuhost-", dir=directory)
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(content.encode("utf-8", "surrogateescape"))
            fh.flush()
            os.fsync(fh.fileno())
        os.chmod(tmp, mode)
        if os.geteuid() == 0:
            os.chown(tmp, uid, gid)
        os.rename(tmp, full)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise


def ensure_file(root, path, content, mode, check_mode):
    """Returns (changed, before). A file is rewritten only when its content or mode differs."""
    before = read_text(root, path)
    full = _path(root, path)
    same_mode = before is not None and (os.stat(full).st_mode & 0o7777) == mode
    if before == content and same_mode:
        return False, before
    if not check_mode:
        write_atomic(root, path, content, mode)
    return True, before


def remove_path(root, path, check_mode):
    full = _path(root, path)
    if not os.path.lexists(full):
        return False
    if not check_mode:
        if os.path.isdir(full) and not os.path.islink(full):
            shutil.rmtree(full)
        else:
            os.unlink(full)
    return True


def systemctl(run, *args):
    rc, out, err = run(["systemctl"] + list(args))
    return rc, (out or "").strip(), (err or "").strip()


def unit_props(run, unit):
    """ActiveState, MainPID and InvocationID of ``unit`` from one `systemctl show`. InvocationID is the
    128-bit id systemd gives each runtime cycle of a unit: a new one for every start, automatic restarts
    included (systemd.exec(5), $INVOCATION_ID); empty for a unit that does not run."""
    rc, out, _err = systemctl(run, "show", "-p", "ActiveState,MainPID,InvocationID", unit)
    return dict(line.split("=", 1) for line in out.splitlines() if "=" in line)


def unit_state(run, unit):
    """(ActiveState, MainPID) of ``unit``; ('inactive', 0) for a unit systemd does not know."""
    props = unit_props(run, unit)
    try:
        pid = int(props.get("MainPID", "0") or 0)
    except ValueError:
        pid = 0
    return props.get("ActiveState", "inactive") or "inactive", pid


def invocation(props):
    """The unit's current invocation id while it is active, else "" (no process to vouch for)."""
    return props.get("InvocationID", "") if props.get("ActiveState") == "active" else ""


def parse_record(meta_text, lkg_dir):
    """(record, problem) of last-known-good's meta.json text: ({}, "") when there is none, ({}, why) when it is
    damaged (a damaged record is no last-known-good, never a crash)."""
    if meta_text is None:
        return {}, ""
    try:
        meta = json.loads(meta_text)
        if not isinstance(meta, dict):
            raise ValueError("not an object")
    except ValueError as exc:
        return {}, "%s/meta.json is not a JSON object (%s): treated as no last-known-good" % (lkg_dir, exc)
    return meta, ""


def owned_files(unit, unit_dir, env_file, lkg_dir):
    """The files a deploy owns on the host (what install, record and restore write), in one place."""
    return [os.path.join(unit_dir, unit), env_file, os.path.join(lkg_dir, "meta.json"), os.path.join(lkg_dir, unit),
            os.path.join(lkg_dir, "env"), os.path.join(unit_dir, unit + ".d", "10-start-timeout.conf")]


def checksums(root, paths):
    """{path: SHA-256 of its bytes, or None when it is missing}."""
    out = {}
    for path in paths:
        try:
            with open(_path(root, path), "rb") as fh:
                out[path] = hashlib.sha256(fh.read()).hexdigest()
        except (IOError, OSError):
            out[path] = None
    return out


def files_changed(before, after):
    """What differs between two ``checksums`` answers: a file missing on either side is a difference too (a
    renamed or lost file must not pass because both sides read "absent"). Returns one sentence per path."""
    problems = []
    for path in sorted(set(before) | set(after)):
        old, new = before.get(path), after.get(path)
        if old is None or new is None:
            when = "before and after" if old is None and new is None else ("before" if old is None else "after")
            problems.append("%s is missing %s" % (path, when))
        elif old != new:
            problems.append("%s changed (sha256 %s -> %s)" % (path, old[:12], new[:12]))
    return problems


def inspect(root, run, unit, unit_dir, env_file, lkg_dir, preview=None):
    """What is live and what last-known-good holds. An older record (before the contents were kept in
    meta.json) is completed from its copies beside it, at the unit's own name and address. With ``preview``
    ({unit_content, env_content}): what install() of those contents would change, without writing anything
    (the first candidate's install then needs no call of its own when nothing would)."""
    meta, damaged = parse_record(read_text(root, os.path.join(lkg_dir, "meta.json")), lkg_dir)
    if meta and "unit_b64" not in meta:
        unit_copy = read_text(root, os.path.join(lkg_dir, meta.get("unit", unit)))
        env_copy = read_text(root, os.path.join(lkg_dir, "env"))
        if unit_copy is not None and env_copy is not None:
            meta.update(unit_b64=b64(unit_copy), env_b64=b64(env_copy))
    if meta:
        missing = [k for k in ("unit", "unit_path", "env_file", "health_url", "base_url", "unit_b64", "env_b64") if k not in meta]
        if missing:
            damaged = "%s/meta.json lacks %s: treated as no last-known-good" % (lkg_dir, ", ".join(missing))
            meta = {}
    props = unit_props(run, unit)
    active = props.get("ActiveState", "inactive") or "inactive"
    live_unit = read_text(root, os.path.join(unit_dir, unit))
    live_env = read_text(root, env_file)
    # whether the live files are last-known-good's (the environment file is compared here: it holds secrets)
    same = bool(meta) and meta.get("unit") == unit and live_unit is not None and b64(live_unit) == meta["unit_b64"] \
        and live_env is not None and b64(live_env) == meta["env_b64"]
    out = {"lkg": meta, "lkg_problem": damaged, "active": active, "clock": clock(), "live_is_lkg": same,
           "invocation": invocation(props), "files": checksums(root, owned_files(unit, unit_dir, env_file, lkg_dir))}
    if preview:
        would = install(root, unit, unit_dir, preview["unit_content"], env_file, preview["env_content"], True)
        out["preview"] = {"unit_changed": would["unit_changed"], "env_changed": would["env_changed"]}
    return out


def b64(text):
    return base64.b64encode(text.encode("utf-8", "surrogateescape")).decode("ascii")


def unb64(data):
    return base64.b64decode(data).decode("utf-8", "surrogateescape")


def install(root, unit, unit_dir, unit_content, env_file, env_content, check_mode):
    unit_changed, unit_before = ensure_file(root, os.path.join(unit_dir, unit), unit_content, 0o644, check_mode)
    env_changed, _env_before = ensure_file(root, env_file, env_content, 0o600, check_mode)
    return {"unit_changed": unit_changed, "env_changed": env_changed, "unit_before": unit_before or ""}


def clock():
    """The host clock, epoch seconds to the microsecond. A readiness read takes the journal from here
    (``journalctl --since @SECONDS.MICROSECONDS``, systemd.time(7)): to the whole second, a rollback restarted in the
    second its candidate failed read the candidate's failure line as its own."""
    return round(time.time(), 6)


def restart(run, unit, stop_unit=""):
    """Restart ``unit`` (no-block: readiness is waited for separately). Returns the host clock before the restart.

    StartLimitBurst= counts every start, manual ones included, and `systemctl reset-failed` flushes the unit's
    start rate counter (systemd.unit(5), StartLimitIntervalSec=): flushing it before a deploy's restart leaves the
    whole burst to crash restarts. A last-known-good unit of another name still holds the port and the GPUs:
    it is stopped (and disabled) first."""
    since = clock()
    if stop_unit and stop_unit != unit:
        systemctl(run, "disable", "--now", stop_unit)
    systemctl(run, "reset-failed", unit)
    for args in (("daemon-reload",), ("enable", unit), ("restart", "--no-block", unit)):
        rc, _out, err = systemctl(run, *args)
        if rc != 0:
            raise HostError("systemctl %s failed (rc %d): %s" % (" ".join(args), rc, err))
    return since


def stop(run, unit, disable=False):
    rc, _out, err = systemctl(run, *(("disable", "--now", unit) if disable else ("stop", unit)))
    systemctl(run, "reset-failed", unit)
    return rc == 0 or "not loaded" in err or "does not exist" in err


def record(root, run, lkg_dir, meta, unit, unit_dir, env_file, timeout_content, remove_paths, forget_unit,
           install_dir, keep_venv, check_mode):
    """Make the live configuration last-known-good: meta.json (one atomic rename holds the whole record),
    the copies derived from it, the start-timeout drop-in, the renamed unit's old files, the venvs that are
    neither live nor last-known-good, and the stable venv link. Returns the paths it changed."""
    changed = []
    unit_text = read_text(root, os.path.join(unit_dir, unit))
    env_text = read_text(root, env_file)
    if unit_text is None or env_text is None:
        raise HostError("the live unit %s or its environment file %s is missing: nothing to record" % (unit, env_file))
    # the process that passed the gate: a later no-op deploy that finds the same one need not repeat the canary
    meta = dict(meta, unit_b64=b64(unit_text), env_b64=b64(env_text), invocation=invocation(unit_props(run, unit)))
    old = read_text(root, os.path.join(lkg_dir, "meta.json"))
    try:
        old_meta = json.loads(old) if old else {}
    except ValueError:
        old_meta = {}
    # rewritten when the recorded contents differ, or on a restart (a new load time); the invocation alone is
    # bookkeeping (which process was proven), not configuration: written, not reported as a change
    if old_meta != meta:
        if not check_mode:
            write_atomic(root, os.path.join(lkg_dir, "meta.json"), json.dumps(meta, indent=2, sort_keys=True) + "\n", 0o600)
        if dict(old_meta, invocation="") != dict(meta, invocation=""):
            changed.append(os.path.join(lkg_dir, "meta.json"))
    for name, text in ((unit, unit_text), ("env", env_text)):
        if ensure_file(root, os.path.join(lkg_dir, name), text, 0o600, check_mode)[0]:
            changed.append(os.path.join(lkg_dir, name))
    dropin = os.path.join(unit_dir, unit + ".d", "10-start-timeout.conf")
    reload_needed = False
    if ensure_file(root, dropin, timeout_content, 0o644, check_mode)[0]:
        changed.append(dropin)
        reload_needed = True
    for path in remove_paths:
        if remove_path(root, path, check_mode):
            changed.append(path)
            reload_needed = True
    if forget_unit and not check_mode:
        systemctl(run, "reset-failed", forget_unit)
    if install_dir:
        changed += prune_venvs(root, install_dir, keep_venv, check_mode)
    if reload_needed and not check_mode:
        systemctl(run, "daemon-reload")
    return changed


def prune_venvs(root, install_dir, keep_venv, check_mode):
    """The venv that passed is last-known-good now: the others (an older version's, a failed candidate's) go;
    the stable path ``install_dir/venv`` links to the live one."""
    changed = []
    base = _path(root, install_dir)
    stable = os.path.join(install_dir, "venv")
    if not os.path.isdir(base):
        return changed
    for name in sorted(os.listdir(base)):
        path = os.path.join(install_dir, name)
        if not (name == "venv" or name.startswith("venv-")) or os.path.islink(_path(root, path)):
            continue
        if path in (keep_venv, stable if keep_venv == stable else ""):
            continue
        if remove_path(root, path, check_mode):
            changed.append(path)
    if keep_venv != stable:
        link = _path(root, stable)
        if not (os.path.islink(link) and os.readlink(link) == keep_venv):
            if not check_mode:
                if os.path.lexists(link):
                    remove_path(root, stable, False)
                os.symlink(keep_venv, link)
            changed.append(stable)
    return changed


def restore(root, run, lkg, unit, unit_dir, env_file, check_mode, restart_it=True):
    """Put last-known-good back exactly as recorded and restart it (unless ``restart_it`` is off: a replica's
    ranks restart in order, phase by phase). A candidate unit of another name is stopped and its files removed.
    Returns the host clock before the restart."""
    if unit != lkg["unit"]:
        if not check_mode:
            stop(run, unit, disable=True)
        for path in (os.path.join(unit_dir, unit), os.path.join(unit_dir, unit + ".d"), env_file):
            if path not in (lkg["unit_path"], lkg["env_file"]):
                remove_path(root, path, check_mode)
    ensure_file(root, lkg["unit_path"], unb64(lkg["unit_b64"]), 0o644, check_mode)
    ensure_file(root, lkg["env_file"], unb64(lkg["env_b64"]), 0o600, check_mode)
    if check_mode or not restart_it:
        return clock()
    return restart(run, lkg["unit"])


def rank_state(root, run, unit, state_file):
    """A unit's ActiveState and MainPID, and a replica rank's peer-watch state file (None when absent or not
    JSON): what decides whether the rank joined its replica (plugins/plugin_utils/deploy.py rank_joined)."""
    active, pid = unit_state(run, unit)
    out = {"active": active, "pid": pid, "replica": None}
    if state_file:
        text = read_text(root, state_file)
        try:
            out["replica"] = json.loads(text) if text else None
        except ValueError:
            out["replica"] = None
    return out

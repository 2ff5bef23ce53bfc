# -*- coding: utf-8 -*-
# Copyright: gpuhost.sglang contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Which sandboxing properties of the serving unit this host (container) refuses, and what to drop.

A container may refuse what systemd needs for a sandbox: inside LXC a hardened unit fails at its start with
"Failed to set up mount namespacing: /run/systemd/unit-root/proc/...: No such file or directory" (or "Permission
denied"), "Failed at step NAMESPACE", status 226/NAMESPACE (lxc/lxc #4052, privileged and unprivileged containers;
systemd/systemd #17866, ProtectProc=). An older systemd refuses a property it does not know when the transient unit is
created ("Unknown assignment"). The deploy gate would catch either only after the real unit is written and restarted,
and a first deploy has no last-known-good to fall back to: the transaction then stops the failing unit and the host
serves nothing.

So before the unit is written, the role starts transient units (``systemd-run --wait -p NAME=VALUE ... /bin/true``)
with the unit's sandboxing properties: all together first; when that fails, each group alone (DevicePolicy=closed
with its DeviceAllow= lines is one group); the groups that fail alone are refused. :func:`decide` turns those runs
into the groups to keep and to drop, a warning per dropped group, or an error naming each refused property when the
policy is ``fail`` or when the kept set still fails together. The runs themselves are the module's
(plugins/modules/serving_sandbox_probe.py); this file only decides.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import hashlib
import json
import re

POLICIES = ("drop", "fail")
POLICY_VAR = "sglang_sandbox_refused"
_LINE_RE = re.compile(r"^[A-Z][A-Za-z]+=\S.*$")
# the lines of systemd-run's output and the unit's journal that say why a start failed
# the transient units' own names (one per run) would make the unit file differ on every run
_PROBE_UNIT_RE = re.compile(r"gpuhost-sandbox-probe-[0-9-]+\.service")
PROBE_UNIT = "gpuhost-sandbox-probe-%d-%d.service"
_EVIDENCE_RE = re.compile(r"(Failed|failed|Unknown|unknown|status=|denied|not supported|Invalid|Cannot)")
FIRST_DEPLOY = ("a first deploy has no last-known-good to fall back to: when no candidate passes the gate the deploy "
                "transaction stops the failing unit and the host serves nothing")


class SandboxError(ValueError):
    """Bad arguments (names the argument and what is allowed)."""


def check_groups(groups):
    """``[{name, lines[, device_allow]}]``: each group a name and its unit lines ``Key=value``.

    Raises SandboxError naming the entry."""
    if not isinstance(groups, list) or not groups:
        raise SandboxError("groups must be a non-empty list of {name, lines}, got %r" % (groups,))
    seen = set()
    for i, g in enumerate(groups):
        if not isinstance(g, dict) or not g.get("name") or not isinstance(g.get("lines"), list) or not g["lines"]:
            raise SandboxError("groups[%d] must be {name, lines: [Key=value, ...]} with at least one line, got %r" % (i, g))
        if g["name"] in seen:
            raise SandboxError("groups[%d]: the name %s is given twice" % (i, g["name"]))
        seen.add(g["name"])
        for line in g["lines"]:
            if not isinstance(line, str) or not _LINE_RE.match(line):
                raise SandboxError("groups[%d] (%s): %r is not a unit line Key=value" % (i, g["name"], line))
    return groups


def expand(groups, device_allow):
    """The groups with the unit's ``DeviceAllow=X rw`` lines added to the one marked ``device_allow: true``."""
    check_groups(groups)
    if not isinstance(device_allow, list) or [d for d in device_allow if not isinstance(d, str) or not d.strip()
                                              or " " in d.strip()]:
        raise SandboxError("device_allow must be a list of device nodes or classes (e.g. /dev/nvidiactl, "
                           "char-nvidia), got %r" % (device_allow,))
    extra = ["DeviceAllow=%s rw" % d.strip() for d in device_allow]
    return [{"name": g["name"], "lines": list(g["lines"]) + (extra if g.get("device_allow") else [])} for g in groups]


def evidence(text, limit=3):
    """The lines of systemd-run's output and the journal that say why (at most ``limit``), joined by ' | '."""
    lines = [_PROBE_UNIT_RE.sub("probe", ln.strip()) for ln in (text or "").splitlines() if ln.strip()]
    picked = [ln for ln in lines if _EVIDENCE_RE.search(ln)]
    return " | ".join((picked or lines[-limit:])[:limit]) or "no output"


def lines_of(groups):
    return [line for g in groups for line in g["lines"]]


def _warning(refused, unit):
    lines = refused["lines"]
    what = lines[0] + (" and its %d DeviceAllow= lines" % (len(lines) - 1) if len(lines) > 1 else "")
    return ("this host refuses %s (a transient unit with it failed: %s): %s is written without it (%s=drop; 'fail' "
            "stops instead). Left in, the unit would fail at its start and %s." % (
                what, refused["evidence"], unit, POLICY_VAR, FIRST_DEPLOY))


def decide(groups, run, policy="drop", unit="the unit"):
    """Probe ``groups`` with ``run(lines) -> (ok, text)`` and decide.

    Returns ``{kept, dropped: [{name, lines, evidence}], warnings, error, runs}``; ``kept`` are the group names whose
    lines the unit keeps. ``error`` is set (and nothing should be written) when systemd cannot start a transient unit
    at all, when a refused group meets ``policy='fail'``, or when the kept groups still fail together.
    """
    check_groups(groups)
    if policy not in POLICIES:
        raise SandboxError("%s=%r is not known: allowed %s" % (POLICY_VAR, policy, ", ".join(POLICIES)))
    runs = []

    def probe(lines):
        ok, text = run(lines)
        runs.append({"lines": list(lines), "ok": bool(ok), "evidence": "" if ok else evidence(text)})
        return bool(ok), text

    res = {"kept": [g["name"] for g in groups], "dropped": [], "warnings": [], "error": "", "runs": runs}
    ok, _text = probe(lines_of(groups))
    if ok:
        return res
    ok, text = probe([])
    if not ok:
        res["error"] = ("systemd-run cannot start a transient unit on this host even without sandboxing (%s): the "
                        "sandbox of %s cannot be checked; %s" % (evidence(text), unit, FIRST_DEPLOY))
        return res
    refused = []
    for g in groups:
        ok, text = probe(g["lines"])
        if not ok:
            refused.append({"name": g["name"], "lines": list(g["lines"]), "evidence": evidence(text)})
    names = ", ".join(" ".join(r["lines"][:1]) for r in refused)
    if not refused:
        res["error"] = ("the sandboxing properties of %s fail together on this host (%s) although each starts alone: "
                        "nothing can be dropped safely; %s" % (unit, runs[0]["evidence"], FIRST_DEPLOY))
        return res
    if policy == "fail":
        res["error"] = ("this host refuses the sandboxing properties %s of %s (%s); %s=fail stops here, before the unit "
                        "is written (allowed: drop, to write the unit without them; fail). Otherwise %s" % (
                            names, unit, "; ".join("%s: %s" % (r["name"], r["evidence"]) for r in refused),
                            POLICY_VAR, FIRST_DEPLOY))
        return res
    kept = [g for g in groups if g["name"] not in set(r["name"] for r in refused)]
    if kept:
        ok, text = probe(lines_of(kept))
        if not ok:
            res["error"] = ("after dropping %s, the remaining sandboxing properties of %s still fail together on this "
                            "host (%s); %s" % (names, unit, evidence(text), FIRST_DEPLOY))
            return res
    res["kept"] = [g["name"] for g in kept]
    res["dropped"] = refused
    res["warnings"] = [_warning(r, unit) for r in refused]
    return res


def cache_key(groups, user, policy, command, boot_id, binary_stamp):
    """What a decision was made for: the groups (with their DeviceAllow= lines), the user, the policy, the command
    and its binary's stamp, and the host's boot id (a container whose configuration changed has restarted)."""
    return hashlib.sha256(json.dumps([groups, user, policy, list(command), (boot_id or "").strip(), binary_stamp],
                                     sort_keys=True).encode("utf-8")).hexdigest()


def cache_record(key, res):
    """The text of the cache file: the key and the decision (never one with an error)."""
    if res.get("error"):
        raise SandboxError("a decision with an error is not kept: %s" % res["error"])
    return json.dumps({"key": key, "decision": res}, sort_keys=True) + "\n"


def cached(text, key):
    """The decision kept for ``key`` in the cache file's text, or None (absent, damaged or made for another key)."""
    try:
        record = json.loads(text) if text else None
    except ValueError:
        return None
    if not isinstance(record, dict) or record.get("key") != key or not isinstance(record.get("decision"), dict):
        return None
    res = record["decision"]
    if res.get("error") or not all(k in res for k in ("kept", "dropped", "warnings", "runs")):
        return None
    return dict(res, error="")

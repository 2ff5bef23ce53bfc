# -*- coding: utf-8 -*-
# Copyright: gpuhost.sglang contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""A driver change of one serving host as a resumable transaction: drain -> record the running driver as driver
last-known-good -> references (accuracy, bench baseline) with it -> install the target -> reboot -> redeploy -> the
deploy's gates -> adopt (pass) or pin the recorded packages back, reboot and prove serving (fail) -> rejoin the router
only when proven -> finish (rc != 0 with the failure class on a failed change).

Runs on the host (module gpuhost.sglang.driver_change). The steps that need Ansible (drain and rejoin through the
router, reboot, redeploy with the serving role, the gates' modules) run in playbooks/driver.yml and report here with
``op: mark``; the package steps (record, install, pin_back, adopt) run here (``op: run``). Every step is recorded in
a state file before the next one is handed out, so an interrupted run resumes where it stopped (``op: plan``).

Why: a new driver is where serving silently breaks (NVIDIA/open-gpu-kernel-modules#1001: 115 -> 5 tok/s after 570 ->
580.105.08; sgl-project/sglang#24321: garbage tokens with driver 580.x on SM120), and an LXC container's userspace must
follow the host's module (community-scripts/ProxmoxVE PR#12796: the host version read from /proc/driver/nvidia/version
may have 2 or 3 segments).

The host interface (tests: tests/unit/plugins/module_utils/gpu/test_driver_change.py models a Debian 12 host):

  run(argv, where)  -> (rc, stdout, stderr); where is "host" or "container" (LXC mode: ``pct exec CTID --``)
  read(path)        -> text or None (missing)
  write(path, text) -> None, atomic (temporary file + rename)
  remove(path)      -> None
  now()             -> epoch seconds

What the package commands print (recorded on a Debian 12 test host, dpkg 1.21.22, apt 2.6.1):
  dpkg-query -W -f '${binary:Package}\\t${Version}\\t${db:Status-Abbrev}\\n' PATTERN...: one line per package dpkg
    knows that matches, installed or not ("ii " installed, "hi " held and installed, "un " known, not installed);
    "dpkg-query: no packages found matching PATTERN" on stderr with rc 1 for a pattern that matches nothing;
  apt-mark showhold: one held package name per line;
  apt-cache madison NAME...: "NAME | VERSION | SOURCE Packages" per offered version, newest first.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import json
import re

PASS_PATH = ("drain", "record", "reference", "install", "reboot", "redeploy", "gate", "adopt", "rejoin", "finish")
FAIL_PATH = ("pin_back", "reboot_back", "prove", "rejoin", "finish")
# steps this module does itself (op: run); the others run in the playbook and are marked (op: mark)
RUN_STEPS = ("record", "install", "pin_back", "adopt")
MARK_STEPS = ("drain", "reference", "reboot", "redeploy", "gate", "reboot_back", "prove", "rejoin")
STEPS = tuple(sorted(set(PASS_PATH + FAIL_PATH)))
MODES = ("host", "lxc")
QUERY_FORMAT = "${binary:Package}\\t${Version}\\t${db:Status-Abbrev}\\n"
STATE_FILE = "state.json"
LKG_FILE = "last-known-good.json"
HISTORY_FILE = "history.jsonl"
BOOT_ID = "/proc/sys/kernel/random/boot_id"   # a new one at every boot (proc(5))
APT_ENV_ARGS = ["-o", "Dpkg::Options::=--force-confold", "-o", "Dpkg::Options::=--force-confdef"]


class ChangeError(Exception):
    """A failure with a message for the operator (bad input, a host command that failed)."""

    def __init__(self, message, cls="driver_change_error", result=None):
        super(ChangeError, self).__init__(message)
        self.cls = cls
        self.result = result or {}


# ---- parsing what the host prints ---------------------------------------------------------------------------------
def parse_query(text):
    """dpkg-query -W output (QUERY_FORMAT) -> {name: {'version', 'held'}} of the INSTALLED packages only."""
    out = {}
    for line in (text or "").splitlines():
        fields = line.split("\t")
        if len(fields) != 3:
            continue
        name, version, status = fields[0].split(":", 1)[0], fields[1], fields[2]
        # db:Status-Abbrev: selection (u i r p h), state (n i c U F h W t), error flag: "ii ", "hi ", "un "
        if len(status) >= 2 and status[1] == "i" and version:
            out[name] = {"version": version, "held": status[0] == "h"}
    return out


def parse_holds(text):
    return sorted(set(line.strip().split(":", 1)[0] for line in (text or "").splitlines() if line.strip()))


def parse_madison(text):
    """apt-cache madison -> {name: [versions, newest first]}."""
    out = {}
    for line in (text or "").splitlines():
        fields = [f.strip() for f in line.split("|")]
        if len(fields) >= 3 and fields[0] and fields[1]:
            out.setdefault(fields[0], [])
            if fields[1] not in out[fields[0]]:
                out[fields[0]].append(fields[1])
    return out


def upstream(version):
    """'1:580.105.08-1' -> '580.105.08' (no epoch, no Debian revision)."""
    v = (version or "").split(":", 1)[-1]
    return v.rsplit("-", 1)[0] if "-" in v else v


def driver_version(packages, anchors):
    """The driver version of a recorded package set: the upstream version of the first anchor package installed."""
    for name in anchors:
        if name in packages:
            return upstream(packages[name]["version"])
    return ""


def branch_of(version):
    return (version or "").split(".", 1)[0]


# ---- the package plan ---------------------------------------------------------------------------------------------
def target_packages(recorded, old_version, target_version, offered):
    """{name: exact version} that moves every package of the running driver to ``target_version``: the packages whose
    version is the running driver's (libcuda1 580.95.05-1, ...), and the branch-named ones (nvidia-driver-pinning-580,
    libnvidia-compute-580) under the target branch's name. Other packages (CUDA toolkit, NCCL) are left as they are.
    Returns (plan, removed names, errors)."""
    plan, removed, errors = {}, [], []
    old_branch, new_branch = branch_of(old_version), branch_of(target_version)
    for name in sorted(recorded):
        version = recorded[name]["version"]
        new_name = name
        if old_branch != new_branch and re.search(r"-%s$" % re.escape(old_branch), name):
            new_name = name[:-len(old_branch)] + new_branch
        if upstream(version) == old_version:
            prefix = target_version + "-"
        elif new_name != name:
            prefix = new_branch
        else:
            continue
        matches = [v for v in offered.get(new_name, []) if v.split(":", 1)[-1].startswith(prefix)]
        if not matches:
            errors.append("%s: the repositories offer no version %s* (offered: %s)" % (
                new_name, prefix, ", ".join(offered.get(new_name, [])) or "none"))
            continue
        plan[new_name] = matches[0]
        if new_name != name:
            removed.append(name)
    return plan, removed, errors


def rewrite_preferences(text, plan):
    """The nvidia_driver role's apt preferences (roles/nvidia_driver/templates/preferences.j2: "Package: NAME",
    "Pin: version V", "Pin-Priority: 1001" stanzas) with the planned packages' pins moved to their new versions;
    ``None`` when there is no such file."""
    if text is None:
        return None
    out, current = [], None
    for line in text.splitlines():
        m = re.match(r"^Package:\s*(\S+)\s*$", line)
        if m:
            current = m.group(1)
        elif current in plan and re.match(r"^Pin:\s*version\s", line):
            line = "Pin: version %s" % plan[current]
        out.append(line)
    return "\n".join(out) + ("\n" if text.endswith("\n") else "")


# ---- the gates' verdicts ------------------------------------------------------------------------------------------
def verdict(result):
    """(class, message) of the first failed gate in a step's result, ('', '') when every one passed. ``result`` holds
    the registered results of the steps' tasks: ``deploy`` (the serving role: failed, msg, and sglang_deploy_result's
    attempts for the class), ``accuracy`` (serving_accuracy: passed, class, message), ``bench`` (serving_bench:
    failed, failure_class, msg). A missing one did not run."""
    dep = result.get("deploy") or {}
    if dep.get("failed"):
        classes = [a.get("class") for a in (dep.get("attempts") or []) if a.get("outcome") == "failed" and a.get("class")]
        return (classes[0] if classes else "deploy_failed"), str(dep.get("msg") or "the serving role failed")[:600]
    # the playbook registers these with failed_when: false, which sets failed to false: the class tells
    acc = result.get("accuracy") or {}
    if acc and (acc.get("failed") or acc.get("passed") is False or acc.get("class") not in (None, "", "ok")):
        return acc.get("class") or "accuracy_error", str(acc.get("message") or acc.get("msg") or "")[:600]
    bench = result.get("bench") or {}
    if bench.get("failed") or bench.get("failure_class") not in (None, "", "ok"):
        return bench.get("failure_class") or "bench_failed", str(bench.get("msg") or "")[:600]
    return "", ""


# ---- the transaction ----------------------------------------------------------------------------------------------
class DriverChange(object):
    """One host's driver change. ``params``: state_dir, target (driver version, e.g. 580.105.08), packages (dpkg-query
    patterns of the driver's packages on the host), container_packages (the same in the container, LXC mode),
    anchors (package names whose version is the driver's, in order), mode (host | lxc), preferences_path (the
    nvidia_driver role's apt preferences file), retry_failed (try a target again that failed before), host (the
    inventory name, for messages)."""

    def __init__(self, host, params):
        self.h = host
        self.p = params
        self.dir = params["state_dir"].rstrip("/")
        self.changed = False
        wheres = ["host", "container"] if params.get("mode") == "lxc" else ["host"]
        self.wheres = wheres

    # -- files --
    def _load(self, name):
        text = self.h.read("%s/%s" % (self.dir, name))
        if text is None:
            return None
        try:
            return json.loads(text)
        except ValueError:
            raise ChangeError("%s/%s is not JSON: repair or remove it (it was written by this module)" % (self.dir, name))

    def _save(self, name, doc):
        self.h.write("%s/%s" % (self.dir, name), json.dumps(doc, indent=1, sort_keys=True) + "\n")
        self.changed = True

    def state(self):
        return self._load(STATE_FILE)

    def lkg(self):
        return self._load(LKG_FILE) or {}

    def boot_id(self):
        return (self.h.read(self.p.get("boot_id_path") or BOOT_ID) or "").strip()

    # -- host commands --
    def _run(self, argv, where="host", ok=(0,)):
        rc, out, err = self.h.run(argv, where)
        if rc not in ok:
            place = "" if where == "host" else "in the container: "
            raise ChangeError("%s%s failed (rc=%s): %s" % (place, " ".join(argv), rc, (err or out).strip()[-800:]), "command_failed")
        return out

    def installed(self, where):
        pats = self.p["container_packages"] if where == "container" else self.p["packages"]
        # rc 1 with "no packages found matching" when a pattern matches nothing (dpkg-query(1))
        rc, out, err = self.h.run(["dpkg-query", "-W", "-f", QUERY_FORMAT] + list(pats), where)
        if rc not in (0, 1):
            raise ChangeError("dpkg-query failed (rc=%s) on the %s: %s" % (rc, where, (err or out).strip()), "command_failed")
        pkgs = parse_query(out)
        holds = parse_holds(self._run(["apt-mark", "showhold"], where))
        for name in pkgs:
            pkgs[name]["held"] = pkgs[name]["held"] or name in holds
        return pkgs

    def snapshot(self):
        snap = {}
        for where in self.wheres:
            pkgs = self.installed(where)
            snap[where] = {"packages": pkgs, "holds": sorted(n for n in pkgs if pkgs[n]["held"]),
                           "driver": driver_version(pkgs, self.p["anchors"])}
        pref = self.p.get("preferences_path") or ""
        snap["preferences"] = self.h.read(pref) if pref else None
        snap["boot_id"] = self.boot_id()
        return snap

    # -- plan --
    def plan(self):
        """Start a change, or resume the one in progress: {next, state, msg}."""
        st = self.state()
        target = self.p["target"]
        if st:
            if st["target"] != target:
                raise ChangeError(
                    "a driver change to %s is in progress on %s (next step: %s): driver_change_version=%s is not it; rerun "
                    "with driver_change_version=%s to finish it first" % (
                        st["target"], self.p.get("host", "this host"), st["next"], target, st["target"]), "in_progress")
            return self._resume(st)
        snap = self.snapshot()
        now = snap["host"]["driver"]
        if not now:
            raise ChangeError("none of %s is installed on %s: there is no running driver to record (packages: %s)" % (
                ", ".join(self.p["anchors"]), self.p.get("host", "this host"), ", ".join(self.p["packages"])), "no_driver")
        if now == target:
            return {"next": "none", "state": {}, "msg": "driver %s is installed already: nothing to change" % now}
        failed = [f for f in self.lkg().get("failed_targets", []) if f.get("target") == target]
        if failed and not self.p.get("retry_failed"):
            raise ChangeError("driver %s failed the gate on %s before (%s: %s) and was pinned back to %s; "
                              "driver_change_retry_failed=true tries it again" % (
                                  target, self.p.get("host", "this host"), failed[-1].get("class"),
                                  failed[-1].get("message", "")[:300], failed[-1].get("from")), "failed_before")
        st = {"target": target, "from": now, "mode": self.p.get("mode", "host"), "started": self.h.now(),
              "next": "drain", "done": [], "path": "pass", "proven": False, "touched": False,
              "class": "", "message": "", "resumed": 0}
        self._save(STATE_FILE, st)
        return {"next": "drain", "state": st, "msg": "driver change %s -> %s: started" % (now, target)}

    def _resume(self, st):
        st["resumed"] = st.get("resumed", 0) + 1
        nxt = st["next"]
        # a reboot that already happened (the boot id changed since the step before it) is not done twice
        if nxt in ("reboot", "reboot_back") and st.get("boot_id_before") and \
                self.boot_id() != st["boot_id_before"]:
            self._advance(st, nxt, {"note": "the host rebooted already (boot id changed) before the interrupt"})
            nxt = st["next"]
        # out of the router first on every rerun, until the host is proven (a router restart may have put it back)
        if nxt not in ("drain", "rejoin", "finish"):
            st["resume_at"] = nxt
            st["next"] = "drain"
        self._save(STATE_FILE, st)
        return {"next": st["next"], "state": st, "msg": "driver change %s -> %s: resumed at %s (rerun %d)" % (
            st["from"], st["target"], nxt, st["resumed"])}

    # -- steps --
    def _check_next(self, st, step):
        if st is None:
            raise ChangeError("no driver change in progress on %s (op=plan starts one)" % self.p.get("host", "this host"),
                              "not_started")
        if st["next"] != step:
            raise ChangeError("step %s is not the next step of the driver change on %s: the next one is %s" % (
                step, self.p.get("host", "this host"), st["next"]), "out_of_order")

    def _advance(self, st, step, note=None):
        st["done"].append({"step": step, "at": self.h.now(), "note": note or {}})
        if step == "drain" and st.get("resume_at"):
            st["next"] = st.pop("resume_at")
            return
        path = FAIL_PATH if st["path"] == "fail" else PASS_PATH
        if step in path:
            st["next"] = path[path.index(step) + 1]
        else:
            st["next"] = "finish"

    def _fail(self, st, cls, message):
        """A failed step: before the host was touched, rejoin as it was; after, pin the recorded packages back."""
        st["class"], st["message"] = cls, message
        if st.get("touched"):
            st["path"] = "fail"
            st["next"] = "pin_back"
        else:
            st["proven"] = True   # nothing changed: the host serves as it served before it was drained
            st["next"] = "rejoin"

    def mark(self, step, result):
        if step not in MARK_STEPS:
            raise ChangeError("step=%s cannot be marked: allowed %s (the others run with op=run: %s)" % (
                step, ", ".join(MARK_STEPS), ", ".join(RUN_STEPS)), "bad_input")
        st = self.state()
        self._check_next(st, step)
        result = result or {}
        if step == "rejoin" and not st.get("proven"):
            raise ChangeError("refused: %s is not proven on a driver, it does not rejoin the router" % self.p.get("host"),
                              "unproven")
        self._advance(st, step, dict((k, result[k]) for k in ("changed", "note") if k in result))
        if step in ("reboot", "reboot_back"):
            st.pop("boot_id_before", None)
        if step in ("reference", "redeploy", "gate"):
            cls, msg = verdict(result)
            if cls:
                self._fail(st, cls if step != "reference" else "reference_" + cls,
                           ("%s: %s" % (step, msg)) if step != "reference" else
                           "the running driver %s failed its own references before the change: %s" % (st["from"], msg))
            elif step == "gate":
                st["proven"] = True
        if step == "prove":
            cls, msg = verdict(result)
            if cls:
                st["proven"] = False
                st["prove_class"], st["prove_message"] = cls, msg
                st["next"] = "finish"
            else:
                st["proven"] = True
        self._save(STATE_FILE, st)
        return {"next": st["next"], "state": st}

    def run(self, step):
        if step not in RUN_STEPS:
            raise ChangeError("step=%s does not run here: allowed %s (the others are marked with op=mark: %s)" % (
                step, ", ".join(RUN_STEPS), ", ".join(MARK_STEPS)), "bad_input")
        st = self.state()
        self._check_next(st, step)
        out = getattr(self, "_" + step)(st)
        self._save(STATE_FILE, st)
        return dict(out, next=st["next"], state=st)

    def _record(self, st):
        """The running driver as driver last-known-good (kept in the state too: the resumed steps read it there)."""
        snap = self.snapshot()
        st["recorded"] = snap
        lkg = self.lkg()
        lkg.update({"driver": snap["host"]["driver"], "recorded": snap, "at": self.h.now()})
        self._save(LKG_FILE, lkg)
        self._advance(st, "record")
        return {"msg": "recorded driver %s (%d package(s) on the host%s) as driver last-known-good" % (
            snap["host"]["driver"], len(snap["host"]["packages"]),
            ", %d in the container" % len(snap["container"]["packages"]) if "container" in snap else "")}

    def _plan_for(self, st):
        """{where: (plan, removed)} moving every recorded place to the target (LXC: the container's userspace to the
        same version as the host's module: lockstep)."""
        out, errors = {}, []
        for where in self.wheres:
            rec = st["recorded"][where]["packages"]
            names = sorted(set(rec) | set(n[:-len(branch_of(st["from"]))] + branch_of(st["target"]) for n in rec
                                          if n.endswith("-" + branch_of(st["from"]))))
            offered = parse_madison(self._run(["apt-cache", "madison"] + names, where))
            plan, removed, errs = target_packages(rec, st["from"], st["target"], offered)
            errors += ["%s: %s" % (where, e) for e in errs]
            out[where] = (plan, removed)
        if errors:
            raise ChangeError("driver %s cannot be installed: %s" % (st["target"], "; ".join(errors)), "not_offered")
        return out

    def _apt_install(self, where, versions, hold):
        """Exact versions, downgrades allowed, holds lifted first and set again."""
        names = sorted(versions)
        held = [n for n in names if n in parse_holds(self._run(["apt-mark", "showhold"], where))]
        if held:
            self._run(["apt-mark", "unhold"] + held, where)
        self._run(["apt-get", "install", "-y", "-q", "--no-install-recommends", "--allow-downgrades",
                   "--allow-change-held-packages"] + APT_ENV_ARGS + ["%s=%s" % (n, versions[n]) for n in names], where)
        if hold:
            self._run(["apt-mark", "hold"] + sorted(hold), where)

    def _install(self, st):
        st["touched"] = True      # from here on a failure pins the recorded packages back
        st["boot_id_before"] = self.boot_id()
        self._save(STATE_FILE, st)
        try:
            plans = self._plan_for(st)
        except ChangeError as exc:
            # nothing was installed: the host serves as recorded
            st["touched"] = False
            self._fail(st, exc.cls, str(exc))
            st["done"].append({"step": "install", "at": self.h.now(), "note": {"failed": exc.cls}})
            return {"msg": str(exc)}
        lines = []
        try:
            for where in self.wheres:   # LXC: the host's module first, then the container's userspace (lockstep)
                plan, removed = plans[where]
                rec = st["recorded"][where]
                if removed:
                    self._run(["apt-mark", "unhold"] + removed, where)
                    self._run(["apt-get", "remove", "-y", "-q"] + removed, where)
                hold = [n for n in plan if n in rec["holds"] or n not in rec["packages"]]
                self._apt_install(where, plan, hold)
                lines.append("%s: %s" % (where, ", ".join("%s=%s" % kv for kv in sorted(plan.items()))))
            pref = self.p.get("preferences_path") or ""
            new_pref = rewrite_preferences(st["recorded"].get("preferences"), plans["host"][0])
            if pref and new_pref is not None:
                self.h.write(pref, new_pref)
        except ChangeError as exc:
            self._fail(st, "install_failed", str(exc))
            st["done"].append({"step": "install", "at": self.h.now(), "note": {"failed": exc.cls}})
            return {"msg": str(exc)}
        self._advance(st, "install", {"installed": lines})
        return {"msg": "installed driver %s (%s)" % (st["target"], "; ".join(lines))}

    def _pin_back(self, st):
        """Every recorded package at its recorded version, the recorded holds, packages the target brought removed,
        the recorded apt preferences back byte for byte."""
        st["boot_id_before"] = self.boot_id()
        lines = []
        try:
            for where in self.wheres:
                rec = st["recorded"][where]
                now = self.installed(where)
                extra = sorted(n for n in now if n not in rec["packages"])
                if extra:
                    self._run(["apt-mark", "unhold"] + extra, where)
                    self._run(["apt-get", "remove", "-y", "-q", "--allow-change-held-packages"] + extra, where)
                self._apt_install(where, dict((n, rec["packages"][n]["version"]) for n in rec["packages"]), rec["holds"])
                unheld = sorted(n for n in rec["packages"] if n not in rec["holds"] and n in
                                parse_holds(self._run(["apt-mark", "showhold"], where)))
                if unheld:
                    self._run(["apt-mark", "unhold"] + unheld, where)
                back = self.installed(where)
                wrong = sorted(n for n in rec["packages"] if (back.get(n) or {}).get("version") != rec["packages"][n]["version"]
                               or bool(back[n]["held"]) != (n in rec["holds"]))
                if wrong:
                    raise ChangeError("after the pin back %s differ from the record: %s" % (where, ", ".join(
                        "%s (%s, recorded %s)" % (n, (back.get(n) or {}).get("version", "missing"), rec["packages"][n]["version"])
                        for n in wrong)), "pin_back_failed")
                lines.append("%s: %d package(s), %d held" % (where, len(rec["packages"]), len(rec["holds"])))
            pref = self.p.get("preferences_path") or ""
            if pref:
                if st["recorded"].get("preferences") is None:
                    self.h.remove(pref)
                else:
                    self.h.write(pref, st["recorded"]["preferences"])
        except ChangeError as exc:
            st["pin_back_class"], st["pin_back_message"] = "pin_back_failed", str(exc)
            st["proven"] = False
            st["next"] = "finish"
            st["done"].append({"step": "pin_back", "at": self.h.now(), "note": {"failed": str(exc)[:300]}})
            return {"msg": str(exc)}
        self._advance(st, "pin_back", {"pinned": lines})
        return {"msg": "pinned driver %s back (%s)" % (st["from"], "; ".join(lines))}

    def _adopt(self, st):
        """The new driver becomes driver last-known-good."""
        snap = self.snapshot()
        lkg = self.lkg()
        lkg.update({"driver": snap["host"]["driver"], "recorded": snap, "at": self.h.now(),
                    "previous": {"driver": st["from"], "recorded": st["recorded"]}})
        self._save(LKG_FILE, lkg)
        self._advance(st, "adopt")
        return {"msg": "driver %s is driver last-known-good now (was %s)" % (snap["host"]["driver"], st["from"])}

    def finish(self):
        """Close the transaction: a history line, the state file removed; the verdict."""
        st = self.state()
        self._check_next(st, "finish")
        failed = bool(st.get("class") or st.get("prove_class") or st.get("pin_back_class"))
        line = {"target": st["target"], "from": st["from"], "started": st["started"], "ended": self.h.now(),
                "result": "failed" if failed else "adopted", "class": st.get("class", ""), "message": st.get("message", ""),
                "pinned_back": st["path"] == "fail", "proven": st.get("proven"), "rejoined": any(
                    d["step"] == "rejoin" for d in st["done"]), "steps": [d["step"] for d in st["done"]],
                "resumed": st.get("resumed", 0)}
        if failed and st.get("touched"):
            lkg = self.lkg()
            lkg.setdefault("failed_targets", []).append({"target": st["target"], "from": st["from"], "class": st["class"],
                                                         "message": st["message"][:600], "at": self.h.now()})
            self._save(LKG_FILE, lkg)
        hist = self.h.read("%s/%s" % (self.dir, HISTORY_FILE)) or ""
        self.h.write("%s/%s" % (self.dir, HISTORY_FILE), hist + json.dumps(line, sort_keys=True) + "\n")
        self.h.remove("%s/%s" % (self.dir, STATE_FILE))
        self.changed = True
        host = self.p.get("host", "this host")
        if not failed:
            return {"failed": False, "result": line,
                    "msg": "driver %s adopted on %s (was %s): gates passed, back in the router" % (st["target"], host, st["from"])}
        parts = ["driver change %s -> %s on %s failed [%s]: %s." % (
            st["from"], st["target"], host, st["class"] or "?", st["message"])]
        if st.get("pin_back_class"):
            parts.append("Pinning %s back FAILED: %s. The host stays out of the router." % (st["from"], st["pin_back_message"]))
        elif st.get("prove_class"):
            parts.append("Pinned back to %s, but serving was NOT proven [%s]: %s. The host stays out of the router." % (
                st["from"], st["prove_class"], st["prove_message"]))
        elif st["path"] == "fail":
            parts.append("Pinned back to %s (packages and holds as recorded), rebooted, serving proven at its address, "
                         "back in the router." % st["from"])
        else:
            parts.append("Nothing was installed: driver %s serves as before, back in the router." % st["from"])
        cls = st.get("pin_back_class") or st.get("prove_class") or st["class"]
        return {"failed": True, "failure_class": cls, "gate_class": st["class"], "result": line, "msg": " ".join(parts)}

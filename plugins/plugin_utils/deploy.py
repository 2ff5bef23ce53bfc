# -*- coding: utf-8 -*-
# Copyright: gpuhost.sglang contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The deploy transaction of one serving host: try each candidate until one passes the gate, keep it, or put
last-known-good back.

Controller-side. ``DeployTransaction`` decides; a *host* does. The host interface is
plugins/plugin_utils/deploy_host.py (``DeployHost``; ``ReplicaHost`` for a rank of a multi-node replica), with
three implementations: plugins/action/serving_deploy.py drives a real host through modules,
plugins/plugin_utils/tune_loop.py one process launcher, tests/harness/fake_deploy_host.py a fake one in memory.

Phases (``run``): for each candidate in order, install -> restart when anything changed or the unit is not
active -> readiness -> canary -> the accuracy gate when the spec turns it on (``accuracy``: {checks}; against the
reference recorded with last-known-good, then the passing candidate's own reference measured for the record);
the first pass is recorded as last-known-good (unless ``lkg_update`` is off)
and the later candidates are never touched. When none passes, or the run is interrupted after the live unit
was touched, last-known-good is restored through ``restore`` and proven with the same readiness wait and
canary at its own address; without a record the failing unit is stopped. Failure classes are values; a later
candidate runs what the earlier failures' classes taught (``learned``: profiles.py learned_chain).

Interrupts: the host raises KeyboardInterrupt from the operation in flight (plugins/action/serving_deploy.py turns
the worker's first SIGINT into one). The candidate in flight is then a failure of class ``interrupted`` (also
when it had passed and its record was being written: it is not last-known-good until recorded), the later ones
are not tried, and the rollback runs as above; the run ends in DeployFailed, never in the interrupt itself, so
the play reports it and stops. The rollback itself runs to its end through one more interrupt (the step it lands
in runs again): that interrupt asked for last-known-good, which is what it does. The next one aborts it (the
action plugin lets Ansible's own handling end the worker then); its time is bounded by the readiness timeout.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import hashlib
import json

from ansible_collections.gpuhost.sglang.plugins.plugin_utils.unit_timing import start_timeout

RESULT_PASSED = "passed"
RESULT_FAILED = "failed"
RESULT_NOT_TRIED = "not tried"
RESULT_WOULD = "check mode"
RESULT_SKIPPED = "skipped"
CLASS_INTERRUPTED = "interrupted"


class DeployFailed(Exception):
    """No candidate passed; ``result`` holds every attempt and the rollback."""

    def __init__(self, message, result):
        super(DeployFailed, self).__init__(message)
        self.result = result


def _reasons(inst, active):
    return [r for r in ("unit file" if inst["unit_changed"] else "",
                        "environment file" if inst["env_changed"] else "",
                        "not running" if active != "active" else "") if r]


def rollback_line(rb):
    """The failure message's sentence on what the rollback left serving."""
    if rb["state"] == "stopped":
        return "No last-known-good existed: the service was stopped."
    ready = rb["state"] if rb["state"] == "ready" else "%s (%s: %s)" % (rb["state"], rb.get("cls") or "timeout", rb.get("evidence", ""))
    return "Rolled back to last-known-good %s at %s: %s, canary %s." % (rb["unit"], rb["base_url"], ready, rb["canary"])


def prove_lkg(host, spec, lkg, since, ready=None):
    """Readiness (unless ``ready`` is already known) and the canary of restored last-known-good, at its own
    address. Returns the rollback summary."""
    if ready is None:
        ready = host.wait_ready(lkg["unit"], lkg["health_url"], since, spec["ready_timeout"])
    rb = {"unit": lkg["unit"], "base_url": lkg["base_url"], "state": ready.get("state", "?"),
          "cls": ready.get("cls") or "", "evidence": ready.get("evidence") or ""}
    if rb["state"] != "ready" or not spec.get("probes", True):
        rb["canary"] = "not run"
    else:
        problems = host.canary(lkg["base_url"])
        rb["canary"] = ("FAILED: " + "; ".join(problems)) if problems else "passed"
    return rb


def group_candidates(flat):
    """The role's flat candidate list (profiles.py learned_chain, each entry with ``position`` and ``learned``)
    as the transaction's: one per position, its learned entries under ``learned`` by lesson key. Entries without
    a position are positions of their own, in order (a chain that learns nothing)."""
    out = []
    for i, entry in enumerate(flat):
        if "position" not in entry:
            out.append(dict(entry))
            continue
        if entry["position"] not in (len(out), len(out) - 1):
            raise ValueError("candidates[%d]: position %r out of order (after %d positions)" % (i, entry["position"], len(out)))
        cand = dict((k, v) for k, v in entry.items() if k not in ("position", "learned"))
        key = "+".join(sorted(entry.get("learned") or []))
        if not key:
            if entry["position"] != len(out):
                raise ValueError("candidates[%d]: position %d has two entries that learned nothing" % (i, entry["position"]))
            out.append(dict(cand, learned={}))
        elif entry["position"] != len(out) - 1:
            raise ValueError("candidates[%d]: the learned entry %r comes before position %d itself" % (i, key, entry["position"]))
        else:
            out[-1]["learned"][key] = cand
    return out


class DeployTransaction(object):
    """One host's deploy. ``spec`` keys:

    unit, unit_dir, env_file, lkg_dir, health_url, base_url: where the candidate serves;
    candidates: [{'options': dict, 'argv': [...], 'unit_content': str, 'lessons': [...], 'learned': {key: candidate}}]
    in order (the first is the configuration); ``learned`` holds the candidate as it runs after earlier failures of
    the classes its key names (profiles.py lesson_key; group_candidates builds it from the role's flat list): the
    transaction runs the entry for the classes it has seen, and skips one whose command line already failed;
    ready_timeout: seconds; probes: run the canary; noop_canary: run it also when nothing changed and the server is
    the very process that passed it (same systemd invocation as recorded; off by default: that process was proven,
    and the liveness check probes it on its own schedule); lkg_update: record a pass as last-known-good;
    accuracy: {} (off) or {'checks': [score and/or greedy]} (bench/accuracy.py, through host.accuracy);
    meta: fields of the record (engine, engine_version, model_path, venv); install_dir: the venvs' directory;
    timeout_start_sec_min: the start-timeout drop-in's floor; check_mode; host: the inventory name.
    """

    def __init__(self, host, spec):
        self.h = host
        self.s = spec
        self.attempts = []
        self.touched = False
        self.lkg = {}
        self.rollback = {}
        self.diff = []
        self.changed = False
        self.clock = 0
        self.live_is_lkg = False
        self.invocation = ""     # the live unit's systemd invocation at inspect ("" when not active)
        self.interrupts = 0
        self.accuracy = []       # the accuracy gate's verdicts and reference measurements, in order
        self.reference = None    # the passing candidate's accuracy reference, for the record
        self.learned = []        # the failure classes earlier candidates taught a lesson for, in the order seen
        self.ran = {}            # index -> the candidate as it ran (with what earlier failures taught)

    # ---- what earlier failures taught (plugins/plugin_utils/profiles.py learned_chain) ------------------------
    def lesson_classes(self):
        """The classes some candidate has a learned entry for: the failures this chain reacts to."""
        found = set()
        for cand in self.s["candidates"]:
            for key in (cand.get("learned") or {}):
                found.update(key.split("+"))
        return found

    def pick(self, index):
        """Candidate ``index`` as it runs after the classes learned so far: its entry for exactly those classes."""
        base = self.s["candidates"][index]
        key = "+".join(sorted(self.learned))
        cand = (base.get("learned") or {}).get(key, base) if key else base
        if key and cand is base:
            self.h.say("WARNING: candidate %d has no entry for what it learned (%s): it runs as configured" % (index, key))
        self.ran[index] = cand
        return cand

    def learn(self, index, cls):
        if cls in self.lesson_classes() and cls not in self.learned:
            self.learned.append(cls)
            self.h.say("candidate %d failed with %s: every later candidate applies its lesson" % (index, cls))

    # ---- the whole transaction -------------------------------------------------------------------------------
    def run(self):
        index = None
        try:
            state = self.h.inspect()
            self.lkg = state.get("lkg") or {}
            # the host clock as inspect gave it (to the microsecond): the first readiness wait of a no-op names this very
            # value, and the host answers it from inspect's own look only for the same clock
            self.clock = state.get("clock") or 0
            self.live_is_lkg = bool(state.get("live_is_lkg"))
            self.invocation = state.get("invocation") or ""
            if state.get("lkg_problem"):
                self.h.say("WARNING: %s" % state["lkg_problem"])
            active = state.get("active", "inactive")
            for index in range(len(self.s["candidates"])):
                cand = self.pick(index)
                known = self.known_failure(index, cand)
                if known:
                    self.attempts.append(self._row(index, RESULT_SKIPPED, **{"class": known["class"], "message": (
                        "failed the gate before with the same command line and engine version (%s); "
                        "sglang_retry_failed=true tries it again" % known["class"])}))
                    self.h.say("candidate %d: skipped, it failed the gate before (%s)" % (index, known["class"]))
                    self.learn(index, known["class"])
                    continue
                same = [a["candidate"] for a in self.attempts if a["outcome"] == RESULT_FAILED
                        and self.ran[a["candidate"]]["argv"] == cand["argv"]]
                if same:
                    self.attempts.append(self._row(index, RESULT_SKIPPED, **{"class": "same_as_failed", "message": (
                        "with what the earlier failures taught it is candidate %d's command line, which failed" % same[0])}))
                    self.h.say("candidate %d: skipped, the same command line as candidate %d, which failed" % (index, same[0]))
                    continue
                passed, active = self.attempt(index, cand, active)
                if passed:
                    for later in range(index + 1, len(self.s["candidates"])):
                        self.attempts.append(self._row(later, RESULT_NOT_TRIED))
                    return self.result(index)
        except KeyboardInterrupt:
            return self.interrupted(index)
        return self.fail()

    def interrupted(self, index):
        """The run was interrupted while candidate ``index`` was in flight (None: before the first): it failed with
        class ``interrupted``, the later ones are not tried, and last-known-good is put back as for a failure."""
        self.interrupts += 1
        step = "before its gate decided"
        if index is not None:
            rows = [a for a in self.attempts if a["candidate"] == index]
            if rows and rows[-1]["outcome"] == RESULT_PASSED:
                # passed, but not recorded: not last-known-good, the old server comes back as for a failure
                self.attempts.remove(rows[-1])
                step = "after it passed the gate, before it was recorded as last-known-good"
            if not rows or rows[-1]["outcome"] == RESULT_PASSED:
                self.attempts.append(self._row(index, RESULT_FAILED, restarted=self.touched, journal_tail=[], **{
                    "class": CLASS_INTERRUPTED, "message": "interrupted (SIGINT to ansible-playbook) %s" % step}))
            for later in range(index + 1, len(self.s["candidates"])):
                self.attempts.append(self._row(later, RESULT_NOT_TRIED, **{"class": "", "message": "not tried: interrupted"}))
        self.h.say("interrupted%s: %s" % ("" if index is None else " at candidate %d" % index,
                                          "restoring last-known-good (interrupt again to abort)" if self.touched
                                          and not self.s.get("check_mode") else "the live server was not touched"))
        return self.fail()

    def _again_once(self, step, *args):
        """One step of the rollback; an interrupt that lands in it runs it again (the first interrupt asked for
        last-known-good, which the rollback is), the next one goes on (abort)."""
        try:
            return step(*args)
        except KeyboardInterrupt:
            if self.interrupts:
                raise
            self.interrupts += 1
            self.h.say("interrupted during the rollback: it goes on (interrupt again to abort)")
            return step(*args)

    def known_failure(self, index, cand):
        """A candidate that failed the gate before, in the run that recorded last-known-good, with the same argv
        and engine version, while last-known-good is a later candidate of this chain: trying it again would
        restart the server only to fail and come back (minutes per load of a large model)."""
        lkg, s = self.lkg, self.s
        if s.get("retry_failed") or not lkg.get("failed_before"):
            return None
        if lkg.get("engine_version") != (s.get("meta") or {}).get("engine_version"):
            return None
        later = [v["argv"] for c in s["candidates"][index + 1:] for v in [c] + list((c.get("learned") or {}).values())]
        if lkg.get("argv") not in later:
            return None
        for f in lkg["failed_before"]:
            if f.get("argv") == cand["argv"]:
                return f
        return None

    def restore_only(self):
        """Serve last-known-good again when the live unit is not it (the end of a tuning campaign without an
        adoption): restored and proven through the same code as a rollback. Fails when that proof fails."""
        state = self.h.inspect()
        self.lkg = state.get("lkg") or {}
        if not self.lkg:
            raise DeployFailed("No last-known-good record on %s: nothing to restore (%s)" % (
                self.s.get("host", "this host"), state.get("lkg_problem") or "no meta.json"), self.result(None))
        if state.get("live_is_lkg") and state.get("active") == "active":
            return self.result(None, "last-known-good %s serves already: nothing to restore" % self.lkg["unit"],
                               gate="last-known-good serves")
        if self.s.get("check_mode"):
            self.changed = True
            return self.result(None, "check mode: last-known-good %s would be restored and restarted" % self.lkg["unit"],
                               gate="check mode: would restore")
        self.touched = True
        rb = self.restore_lkg()
        line = "restored last-known-good %s at %s: %s, canary %s" % (rb["unit"], rb["base_url"], rb["state"], rb["canary"])
        if rb["state"] != "ready" or rb["canary"].startswith("FAILED"):
            raise DeployFailed("Restoring last-known-good failed: " + line, self.result(None, line))
        return self.result(None, line, gate="last-known-good restored")

    def _row(self, index, outcome, **extra):
        cand = self.ran.get(index, self.s["candidates"][index])
        row = {"candidate": index, "options": cand.get("options", {}), "outcome": outcome}
        if cand.get("lessons"):
            row["lessons"] = list(cand["lessons"])
        row.update(extra)
        return row

    # ---- one candidate ---------------------------------------------------------------------------------------
    def attempt(self, index, cand, active):
        """Returns (passed, the unit's state afterwards)."""
        s = self.s
        inst = self.h.install(cand["unit_content"])
        if inst.get("diff"):
            self.diff.append(inst["diff"])
        reasons = _reasons(inst, active)
        self.changed = self.changed or inst["unit_changed"] or inst["env_changed"]
        if s.get("check_mode"):
            self.attempts.append(self._row(index, RESULT_WOULD, restart=bool(reasons), reasons=reasons))
            self.h.say(self._gate_line(index))
            return True, active
        # not restarted: readiness is read from the journal since the host clock at inspect
        since, restarted, t0 = self.clock, False, None
        if reasons:
            stop_unit = self.lkg.get("unit", "") if self.lkg.get("unit", s["unit"]) != s["unit"] else ""
            self.touched = self.changed = True
            since = self.h.restart(stop_unit)
            restarted, t0 = True, self.h.monotonic()
            self.h.say("candidate %d: restarted (%s changed), waiting for readiness" % (index, ", ".join(reasons)))
        ready = self.h.wait_ready(s["unit"], s["health_url"], since, s["ready_timeout"])
        if ready.get("state") != "ready":
            cls = ready.get("cls") or "timeout"
            msg = "%s Evidence: %s" % (
                ready.get("hint") or "Not ready within sglang_ready_timeout=%s s." % s["ready_timeout"],
                ready.get("evidence") or ready.get("health") or "")
            return self._failed(index, cls, msg, ready.get("journal_tail") or [], restarted)
        load = (self.h.monotonic() - t0) if restarted else None
        if s.get("probes", True) and not restarted and self.proven_process():
            self.h.say("candidate %d: ready, the same server process that passed the gate (systemd invocation %s): "
                       "canary not repeated (sglang_noop_canary=true repeats it)" % (index, self.invocation[:12]))
        elif s.get("probes", True):
            after = (" after %d s" % int(round(load))) if restarted else ""
            self.h.say("candidate %d: ready%s, coherence canary" % (index, after))
            problems = self.h.canary(s["base_url"])
            if problems:
                return self._failed(index, "incoherent", "; ".join(problems), [], restarted)
        problem = self.accuracy_gate(index, cand)
        if problem:
            return self._failed(index, problem[0], problem[1], [], restarted)
        self.attempts.append(self._row(index, RESULT_PASSED, restarted=restarted,
                                       load_seconds=round(load, 1) if load is not None else None))
        self.h.say("candidate %d passed the gate%s" % (index, "" if restarted else " (no restart: nothing changed)"))
        if s.get("lkg_update", True):
            self.commit(cand, since, load)
        return True, "active"

    def proven_process(self):
        """Nothing changed and the live process is the one last-known-good's record says passed the gate: the
        same unit files and systemd invocation id (a crash restart, a reboot or a manual restart gives a new one)."""
        return bool(not self.s.get("noop_canary") and self.live_is_lkg and self.invocation
                    and self.invocation == self.lkg.get("invocation"))

    # ---- the opt-in accuracy gate --------------------------------------------------------------------------
    def reference_file(self, cand):
        """Where a candidate's accuracy reference lives: in the last-known-good directory, named by its command
        line and engine version (a reference is only comparable for the configuration that measured it)."""
        key = json.dumps([cand["argv"], (self.s.get("meta") or {}).get("engine_version")], sort_keys=True)
        return "%s/accuracy-%s.json" % (self.s["lkg_dir"], hashlib.sha256(key.encode()).hexdigest()[:12])

    def _accuracy_call(self, index, action, checks, path):
        res = self.h.accuracy(self.s["base_url"], action, checks, path) or {}
        row = {"candidate": index, "action": action, "checks": list(checks), "file": path}
        row.update((k, res.get(k)) for k in ("passed", "class", "message", "requests", "seconds"))
        if action == "measure":
            row["passed"] = not res.get("failed") and res.get("class") in (None, "ok")
        self.accuracy.append(row)
        return row, res

    def accuracy_gate(self, index, cand):
        """The accuracy gate (spec ``accuracy``: {checks}; off when empty): the candidate against the reference
        recorded with last-known-good (its checks that the reference holds), then, when the pass is recorded, the
        candidate's own reference. No reference (a first deploy, or one recorded before the gate was on): the
        comparison is skipped and said so. Returns None (passed or not run) or (class, message)."""
        acc = self.s.get("accuracy") or {}
        if not acc or self.s.get("check_mode"):
            return None
        ref = self.lkg.get("accuracy") or {}
        checks = [c for c in acc["checks"] if c in (ref.get("checks") or [])]
        own = self.reference_file(cand)
        if not ref.get("file"):
            self.h.say("candidate %d: no accuracy reference recorded with last-known-good: nothing to compare with%s" % (
                index, " (this pass records one)" if self.s.get("lkg_update", True) else ""))
        elif ref["file"] == own:
            self.h.say("candidate %d: last-known-good's own command line and engine version: no accuracy comparison" % index)
        elif not checks:
            self.h.say("candidate %d: the reference recorded with last-known-good has %s, not %s: no accuracy comparison" % (
                index, ", ".join(ref.get("checks") or []) or "no check", ", ".join(acc["checks"])))
        else:
            row, _res = self._accuracy_call(index, "gate", checks, ref["file"])
            if not row["passed"]:
                return row["class"] or "accuracy_drop", "accuracy gate: %s" % (row["message"] or "failed")
            self.h.say("candidate %d passed the accuracy gate: %s" % (index, (row["message"] or "")[:300]))
        self.reference = None
        if not self.s.get("lkg_update", True):
            return None
        if ref.get("file") == own and set(acc["checks"]) <= set(ref.get("checks") or []):
            self.reference = dict(ref)
            return None
        row, res = self._accuracy_call(index, "measure", acc["checks"], own)
        if not row["passed"]:
            return "accuracy_error", "measuring the accuracy reference failed: %s" % (res.get("msg") or row["message"])
        self.reference = {"file": own, "checks": list(acc["checks"]), "argv": cand["argv"],
                          "requests": (res.get("measured") or {}).get("requests"),
                          "seconds": (res.get("measured") or {}).get("seconds")}
        return None

    def _failed(self, index, cls, message, journal_tail, restarted):
        self.attempts.append(self._row(index, RESULT_FAILED, restarted=restarted, **{
            "class": cls, "message": message[:600], "journal_tail": journal_tail}))
        self.h.say("candidate %d FAILED the gate: %s: %s" % (index, cls, message[:300]))
        self.learn(index, cls)
        return False, "failed"

    # ---- keep ------------------------------------------------------------------------------------------------
    def commit(self, cand, since, load):
        s = self.s
        unit_path = "%s/%s" % (s["unit_dir"], s["unit"])
        load_seconds = int(round(load)) if load is not None else int(self.lkg.get("load_seconds", 0) or 0)
        meta = dict(s.get("meta") or {})
        failed = [{"argv": self.ran.get(a["candidate"], s["candidates"][a["candidate"]])["argv"], "class": a["class"]}
                  for a in self.attempts if a["outcome"] == RESULT_FAILED
                  or (a["outcome"] == RESULT_SKIPPED and a["class"] != "same_as_failed")]
        meta.update(argv=cand["argv"], candidate=self.attempts[-1]["candidate"], failed_before=failed,
                    ready_epoch=int(since + load) if load is not None else int(self.lkg.get("ready_epoch", 0) or 0),
                    load_seconds=load_seconds, unit=s["unit"], unit_path=unit_path, env_file=s["env_file"],
                    health_url=s["health_url"], base_url=s["base_url"])
        timeout = start_timeout(load_seconds, int(s.get("timeout_start_sec_min", 300)), int(s["ready_timeout"]))
        timeout_content = (
            "# Ansible managed: gpuhost.sglang serving_deploy\n"
            "# Sized from the measured model load time (%d s): the larger of\n"
            "# sglang_timeout_start_sec_min and three times the load time, rounded up to a minute.\n"
            "[Service]\nTimeoutStartSec=%d\n" % (load_seconds, timeout))
        remove, forget = [], ""
        if self.reference is not None:
            meta["accuracy"] = self.reference
            old_ref = (self.lkg.get("accuracy") or {}).get("file")
            if old_ref and old_ref != self.reference["file"]:
                remove.append(old_ref)
        if load is None and self.live_is_lkg and not remove and all(self.lkg.get(k) == v for k, v in meta.items()) \
                and self.invocation and self.invocation == self.lkg.get("invocation"):
            # nothing restarted, the live files are last-known-good's and the record says the same: a no-op deploy
            # of the process the record names rewrites nothing (serving_unit record would compare and keep it all),
            # so it costs no round trip; another process (restarted since) is recorded as the one that passed
            return
        old_unit = self.lkg.get("unit", s["unit"])
        if old_unit != s["unit"] and self.lkg.get("unit_path"):
            keep = (unit_path, s["env_file"])
            remove += [p for p in (self.lkg["unit_path"], self.lkg["unit_path"] + ".d", self.lkg.get("env_file", ""),
                                   "%s/%s" % (s["lkg_dir"], old_unit)) if p and p not in keep]
            forget = old_unit
        if self.h.record(meta, timeout_content, remove, forget):
            self.changed = True

    # ---- give back -------------------------------------------------------------------------------------------
    def restore_lkg(self):
        """Last-known-good back as recorded, proven at its own address. Returns the rollback summary."""
        lkg = self.lkg
        self.changed = True
        if not lkg:
            self._again_once(self.h.stop, self.s["unit"])
            self.rollback = {"state": "stopped", "canary": "not run"}
            return self.rollback
        since = self._again_once(self.h.restore, lkg)
        self.rollback = self._again_once(prove_lkg, self.h, self.s, lkg, since)
        return self.rollback

    def fail(self):
        s = self.s
        parts = ["No candidate passed the gate on %s." % s.get("host", "this host")]
        for a in self.attempts:
            if a["outcome"] != RESULT_NOT_TRIED:
                parts.append("[candidate %d %s: %s: %s]" % (a["candidate"], a["options"], a["class"], a["message"]))
        if not self.touched or s.get("check_mode"):
            parts.append("The live server was not touched.")
        else:
            parts.append(rollback_line(self.restore_lkg()))
        msg = " ".join(parts)
        raise DeployFailed(msg, self.result(None, msg))

    def result(self, passed, msg=None, gate=None):
        """The action's result; ``gate`` is its one-line verdict (by default from the candidate that passed)."""
        if gate is None:
            gate = self._gate_line(passed)
            if passed is not None:
                msg = msg or gate
        if passed is None and self.interrupts:
            gate = "interrupted: no candidate passed the gate"
        return {"changed": self.changed, "passed_candidate": passed, "gate_result": gate, "msg": msg,
                "interrupted": bool(self.interrupts),
                "attempts": self.attempts, "live_touched": self.touched, "rollback": self.rollback,
                "lkg_unit": self.lkg.get("unit", ""), "accuracy": self.accuracy,
                "diffs": [d for d in self.diff if d.get("before") != d.get("after")]}

    def _gate_line(self, passed):
        if passed is None:
            return "no candidate passed the gate"
        if not self.s.get("check_mode"):
            return "candidate %d passed the gate" % passed
        row = self.attempts[passed]
        return "check mode: candidate %d %s; the gate was NOT run" % (
            passed, ("would restart (%s changed)" % ", ".join(row["reasons"])) if row["restart"] else "would not restart")


# ---- a multi-node replica, phase by phase ----------------------------------------------------------------------
# The play calls serving_deploy once per phase, on every rank of the replica at once (Ansible's linear strategy
# keeps the hosts in step), with every rank's state after the previous phase (``peers``, in rank order). Each
# rank decides here what it does in that phase; a phase that is not its own leaves it as it was.
#   prepare  install this rank's unit and environment files; say why it would restart
#   stop     the replica restarts when any rank changed or is not running: every rank reloads systemd, the
#            ranks >= 1 stop (none joins the old rank 0, nor, restarted by its peer watch, the new one early)
#   restart  rank 0 restarts and its old process is gone
#   join     each rank >= 1 starts once rank 0's dist-init port answers, then waits until its peer watch says
#            every rank joined (its own process, active)
#   gate     rank 0: readiness and the canary (a rank >= 1 that did not join fails the replica here, named)
#   settle   passed on every rank: last-known-good recorded on each; failed after the live units were touched:
#            each rank's last-known-good files back (a rollback round of stop/restart/join/gate follows), or
#            every unit stopped when a rank has no record
#   report   the result; fails with the cause and what the rollback left serving
REPLICA_PHASES = ("prepare", "stop", "restart", "join", "gate", "settle", "stop", "restart", "join", "gate", "report")
PID_TIMEOUT = 150
JOIN_POLL = 2


def rank_joined(obs):
    """A rank >= 1 joined: its unit active, and the peer watch's state file says every rank joined and names
    the unit's own main process."""
    rep = obs.get("replica")
    return obs.get("active") == "active" and isinstance(rep, dict) and bool(rep.get("all_joined")) \
        and str(rep.get("pid", -1)) == str(obs.get("pid"))


class ReplicaRank(object):
    """One rank's part of one phase. ``spec`` is DeployTransaction's (one candidate) plus ``replica``:
    {rank, nnodes, head_address, dist_port, state_file}; ``peers``: every rank's state after the last phase."""

    def __init__(self, host, spec, peers):
        self.h, self.s = host, spec
        rep = spec["replica"]
        self.rank, self.nnodes = int(rep["rank"]), int(rep["nnodes"])
        self.peers = [p or {} for p in peers]
        self.st = dict(self.peers[self.rank]) if len(self.peers) > self.rank else {}
        self.changed = False

    def phase(self, name):
        """Returns (this rank's state, whether this phase changed the host); raises DeployFailed from report.

        Interrupted (KeyboardInterrupt from the host operation in flight, or ``interrupted`` in the spec: the
        play was interrupted while another rank's phase ran, plugins/strategy/interruptible_linear.py): in the
        deploy round up to the gate, this rank fails with class ``interrupted`` and the phases that follow roll
        the replica back as for any failure (nothing restarts when the replica had not restarted yet); in the
        settle phase and the rollback round the step runs again once (a proven pass is recorded, a rollback
        finishes); the next interrupt ends the phase with it (abort)."""
        if name not in REPLICA_PHASES:
            raise ValueError("phase=%r: allowed values %s" % (name, ", ".join(sorted(set(REPLICA_PHASES)))))
        if name == "report":
            return self.report(), False
        if self._deciding(name) and self.s.get("interrupted") and self.st.get("outcome") != RESULT_FAILED:
            self.fail(CLASS_INTERRUPTED, "interrupted (SIGINT to ansible-playbook) before phase %s" % name)
            return self.st, self.changed
        before = dict(self.st)
        try:
            self._run_phase(name)
        except KeyboardInterrupt:
            if not self._deciding(name):
                self.st = before
                self._say("interrupted in phase %s: %s goes on (interrupt again to abort)" % (
                    name, "the rollback" if self._rolling_back() else "recording the pass"))
                self._run_phase(name)
            elif self.st.get("outcome") != RESULT_FAILED:
                self.st.setdefault("round", "deploy")
                self.fail(CLASS_INTERRUPTED, "interrupted (SIGINT to ansible-playbook) in phase %s" % name)
        return self.st, self.changed

    def _run_phase(self, name):
        if name == "prepare":
            self.prepare()
        elif self.st.get("round") in ("deploy", "rollback") and not self.s.get("check_mode"):
            getattr(self, "_" + name)()

    def _deciding(self, name):
        """The deploy round before its verdict is settled: an interrupt there fails the candidate."""
        return name in ("prepare", "stop", "restart", "join", "gate") and self.st.get("round", "deploy") == "deploy"

    # ---- helpers -------------------------------------------------------------------------------------------
    def _rolling_back(self):
        return self.st.get("round") == "rollback"

    def _where(self):
        """unit, health_url, base_url of this round: the candidate's, or last-known-good's in a rollback."""
        src = self.st["lkg"] if self._rolling_back() else self.s
        return src["unit"], src["health_url"], src["base_url"]

    def _say(self, line):
        self.h.say("rank %d: %s" % (self.rank, line))

    def _touch(self):
        self.st["touched"] = self.changed = True

    def fail(self, cls, message, journal_tail=None, ready_state="failed"):
        if self._rolling_back():
            self.st["rollback"] = {"unit": self.st["lkg"]["unit"], "base_url": self.st["lkg"]["base_url"],
                                   "state": ready_state, "cls": cls, "evidence": message[:600], "canary": "not run"}
            self._say("last-known-good did not come back: %s: %s" % (cls, message[:300]))
        else:
            self.st.update(outcome=RESULT_FAILED, message=message[:600], journal_tail=journal_tail or [], **{"class": cls})
            self._say("FAILED: %s: %s" % (cls, message[:300]))

    def _passed(self, line):
        if self._rolling_back():
            self.st["rollback"] = {"unit": self.st["lkg"]["unit"], "base_url": self.st["lkg"]["base_url"],
                                   "state": "ready", "cls": "", "evidence": "", "canary": "not run"}
        else:
            self.st["outcome"] = RESULT_PASSED
        self._say(line)

    def _failed_already(self):
        return (self.st.get("rollback") or {}).get("state", "ready") != "ready" if self._rolling_back() \
            else self.st.get("outcome") == RESULT_FAILED

    # ---- phases --------------------------------------------------------------------------------------------
    def prepare(self):
        s = self.s
        self.st = {"rank": self.rank, "round": "deploy", "reasons": [], "touched": False, "outcome": None, "lkg": {},
                   "rollback": {}}
        state = self.h.inspect()
        if state.get("lkg_problem"):
            self._say("WARNING: %s" % state["lkg_problem"])
        inst = self.h.install(s["candidates"][0]["unit_content"])
        reasons = _reasons(inst, state.get("active", "inactive"))
        self.changed = bool(inst["unit_changed"] or inst["env_changed"])
        lkg = state.get("lkg") or {}
        clock = state.get("clock") or 0  # the host clock as inspect gave it (DeployTransaction keeps it the same way)
        self.st = {"rank": self.rank, "round": "deploy", "reasons": reasons, "clock": clock, "since": clock, "t0": None,
                   "touched": False, "outcome": None, "lkg": dict((k, v) for k, v in lkg.items() if k != "env_b64"),
                   "rollback": {}, "diff": inst.get("diff") if inst["unit_changed"] else None}
        if s.get("check_mode"):
            self.st.update(round="done", outcome=RESULT_WOULD)

    def _restarts(self):
        """The whole replica restarts when any rank changed or is not running (a rank restarted alone loses its
        peers anyway); a rollback restarts it always."""
        if self._rolling_back():
            return ["rolling back"]
        if self._given_up():
            return []
        return ["rank %d: %s" % (p.get("rank", i), r) for i, p in enumerate(self.peers) for r in p.get("reasons") or []]

    def _given_up(self):
        """A rank failed before the replica restarted (interrupted, or a host operation failed): it stays as it is."""
        return not self._rolling_back() and not self.st.get("restarts") and \
            any(p.get("outcome") == RESULT_FAILED for p in self.peers + [self.st])

    def _stop(self):
        why = self._restarts()
        self.st["restarts"] = bool(why)
        if not why:
            return
        unit = self._where()[0]
        self.h.reload()
        if self.rank > 0:
            # last-known-good's unit under another name runs until now
            for name in sorted(set([unit, self.st["lkg"].get("unit", unit)])):
                self.h.stop(name)
            self._touch()
            self._say("%s stopped before rank 0 restarts (%s)" % (unit, ", ".join(why)))

    def _restart(self):
        if self.rank != 0 or not self.st.get("restarts"):
            return
        unit = self._where()[0]
        lkg_unit = self.st["lkg"].get("unit", unit)
        stop_unit = lkg_unit if (lkg_unit != unit and not self._rolling_back()) else ""
        _active, old_pid = self.h.unit_state(unit)
        self._touch()
        self.st["since"] = self.h.restart(stop_unit, unit)
        self.st["t0"] = self.h.monotonic()
        deadline = self.st["t0"] + PID_TIMEOUT
        while True:
            active, pid = self.h.unit_state(unit)
            if pid not in (old_pid, 0) or active == "failed":
                break
            if self.h.monotonic() >= deadline:
                return self.fail("timeout", "%s: the old process %d still runs %d s after the restart" % (unit, old_pid, PID_TIMEOUT))
            self.h.sleep(1)
        self._say("%s restarted, the ranks >= 1 join it" % unit)

    def _join(self):
        if self.rank == 0 or self._failed_already() or self._given_up():
            return
        rep, timeout = self.s["replica"], int(self.s["ready_timeout"])
        unit = self._where()[0]
        if self.st.get("restarts"):
            if not self.h.wait_port(rep["head_address"], int(rep["dist_port"]), timeout):
                return self.fail("timeout", "rank 0's dist-init port %s:%s did not answer within sglang_ready_timeout=%d s" % (
                    rep["head_address"], rep["dist_port"], timeout), ready_state="timeout")
            self._touch()
            self.st["since"] = self.h.restart("", unit)
            self.st["t0"] = self.h.monotonic()
        deadline = self.h.monotonic() + timeout
        while True:
            obs = self.h.rank_state(unit, rep["state_file"])
            if rank_joined(obs):
                return self._passed("%s joined its replica" % unit)
            if obs.get("active") == "failed":
                return self.fail("startup_failure", "%s exited before its replica formed: unit failed, peer watch %s" % (
                    unit, obs.get("replica")))
            if self.h.monotonic() >= deadline:
                return self.fail("timeout", "%s did not join its replica within sglang_ready_timeout=%d s: unit %s, main pid %s, "
                                 "peer watch %s" % (unit, timeout, obs.get("active"), obs.get("pid"), obs.get("replica")),
                                 ready_state="timeout")
            self.h.sleep(JOIN_POLL)

    def _gate(self):
        if self.rank > 0:
            if self._rolling_back():
                self.st["round"] = "done"
            return
        self._gate_rank0()
        if self._rolling_back():
            self.st["round"] = "done"

    def _gate_rank0(self):
        lost = [p for p in self.peers[1:] if (p.get("rollback") or {}).get("state", "ready") != "ready"] if self._rolling_back() \
            else [p for p in self.peers[1:] if p.get("outcome") == RESULT_FAILED]
        if self._failed_already():
            return
        unit, health_url, base_url = self._where()
        ready = None
        if lost:
            # a rank waiting for rank 0's port: rank 0's own failure is the cause when it has one (one look)
            ready = self.h.wait_ready(unit, health_url, self.st["since"], 0)
        if lost and ready.get("state") != "failed":
            p = lost[0]
            if self._rolling_back():
                rb = p["rollback"]
                return self.fail(rb["cls"], "rank %d: %s" % (p["rank"], rb["evidence"]), ready_state=rb["state"])
            return self.fail(p["class"], "rank %d: %s" % (p["rank"], p["message"]), p.get("journal_tail"))
        if ready is None:
            ready = self.h.wait_ready(unit, health_url, self.st["since"], self.s["ready_timeout"])
        if self._rolling_back():
            self.st["rollback"] = prove_lkg(self.h, self.s, self.st["lkg"], self.st["since"], ready)
            self._say("last-known-good %s at %s: %s, canary %s" % (unit, base_url, ready.get("state"), self.st["rollback"]["canary"]))
            return None
        if ready.get("state") != "ready":
            return self.fail(ready.get("cls") or "timeout", "%s Evidence: %s" % (
                ready.get("hint") or "Not ready within sglang_ready_timeout=%s s." % self.s["ready_timeout"],
                ready.get("evidence") or ready.get("health") or ""), ready.get("journal_tail"))
        t0 = self.st.get("t0")
        self.st["load"] = (self.h.monotonic() - t0) if t0 is not None else None
        if self.s.get("probes", True):
            self._say("ready, coherence canary")
            problems = self.h.canary(base_url)
            if problems:
                return self.fail("incoherent", "; ".join(problems))
        return self._passed("candidate 0 passed the gate%s" % ("" if self.st.get("restarts") else " (no restart: nothing changed)"))

    def _settle(self):
        if self._rolling_back():
            return
        st, s = self.st, self.s
        if len(self.peers) == self.nnodes and all(p.get("outcome") == RESULT_PASSED for p in self.peers):
            st["round"] = "done"
            if s.get("lkg_update", True):
                tx = DeployTransaction(self.h, s)
                tx.lkg = st["lkg"]
                tx.attempts = [{"candidate": 0, "outcome": RESULT_PASSED}]
                t0 = st.get("t0")
                tx.commit(s["candidates"][0], st["since"], (self.h.monotonic() - t0) if t0 is not None else None)
                self.changed = tx.changed
            return
        if st.get("outcome") != RESULT_FAILED:
            st.update(outcome=RESULT_FAILED, message="the replica failed the gate", journal_tail=[], **{"class": "replica"})
        if not any(p.get("touched") for p in self.peers):
            st["round"] = "done"
            return
        self.changed = True
        if all(p.get("lkg") for p in self.peers) and len(self.peers) == self.nnodes:
            lkg = self.h.inspect().get("lkg") or {}
            self.h.restore(lkg, False)
            st["round"] = "rollback"
            self._say("last-known-good %s back in place, the replica restarts in order" % lkg["unit"])
            return
        self.h.stop(s["unit"])
        st.update(round="done", rollback={"state": "stopped", "canary": "not run"})
        self._say("a rank has no last-known-good record: %s stopped" % s["unit"])

    def report(self):
        s, head = self.s, (self.peers[0] if self.peers else self.st)
        verdict = head if head.get("outcome") == RESULT_FAILED else self.st
        row = {"candidate": 0, "options": s["candidates"][0].get("options", {}), "outcome": verdict.get("outcome"),
               "restarted": bool(self.st.get("restarts"))}
        if verdict.get("outcome") == RESULT_FAILED:
            row.update({"class": verdict.get("class"), "message": verdict.get("message"), "journal_tail": verdict.get("journal_tail") or []})
        passed = verdict.get("outcome") in (RESULT_PASSED, RESULT_WOULD)
        if s.get("check_mode"):
            why = ["rank %d: %s" % (p.get("rank", i), r) for i, p in enumerate(self.peers) for r in p.get("reasons") or []]
            gate = "check mode: candidate 0 %s; the gate was NOT run" % (
                ("would restart the replica (%s changed)" % ", ".join(why)) if why else "would not restart")
        else:
            gate = "candidate 0 passed the gate" if passed else "no candidate passed the gate"
        rollback = head.get("rollback") or self.st.get("rollback") or {}
        result = {"changed": False, "passed_candidate": 0 if passed else None, "gate_result": gate, "msg": gate,
                  "attempts": [row], "live_touched": any(p.get("touched") for p in self.peers), "rollback": rollback,
                  "lkg_unit": self.st.get("lkg", {}).get("unit", ""), "replica": self.st,
                  "diffs": [self.st["diff"]] if self.st.get("diff") else []}
        if passed:
            return result
        parts = ["No candidate passed the gate on %s (rank %d of %d)." % (s.get("host", "this host"), self.rank, self.nnodes),
                 "[candidate 0 %s: %s: %s]" % (row["options"], row["class"], row["message"])]
        parts.append(rollback_line(rollback) if rollback else "The live server was not touched.")
        result["msg"] = " ".join(parts)
        raise DeployFailed(result["msg"], result)

# -*- coding: utf-8 -*-
# Copyright: gpuhost.sglang contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The deploy transaction of one serving host: try each candidate until one passes the gate, keep it, or put
last-known-good back.

Controller-side. ``DeployTransaction`` decides; a *host* does (plugins/action/serving_deploy.py drives a real
one through modules, tests/harness/fake_deploy_host.py a fake one in memory). The host interface:

  inspect()                      -> {'lkg': record or {}, 'lkg_problem': str, 'active': str}
  install(unit_content)          -> {'unit_changed': bool, 'env_changed': bool, 'diff': {...}}
  restart(stop_unit)             -> host clock before the restart (epoch seconds)
  wait_ready(unit, health_url, since, timeout)
                                 -> {'state': 'ready'|'failed'|'timeout', 'cls', 'hint', 'evidence', 'journal_tail'}
  canary(base_url)               -> list of failure messages (empty: passed)
  record(meta, timeout_content, remove_paths, forget_unit) -> list of changed paths
  restore(lkg)                   -> host clock before the restart of last-known-good
  stop(unit)                     -> None
  monotonic()                    -> seconds (controller clock, for the load time)
  say(line)                      -> None (one line of progress for the operator)

Phases (``run``): for each candidate in order, install -> restart when anything changed or the unit is not
active -> readiness -> canary; the first pass is recorded as last-known-good (unless ``lkg_update`` is off)
and the later candidates are never touched. When none passes, or the run is interrupted after the live unit
was touched, last-known-good is restored through ``restore`` and proven with the same readiness wait and
canary at its own address; without a record the failing unit is stopped. Failure classes are values.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

from ansible_collections.gpuhost.sglang.plugins.plugin_utils.unit_timing import start_timeout

RESULT_PASSED = "passed"
RESULT_FAILED = "failed"
RESULT_NOT_TRIED = "not tried"
RESULT_WOULD = "check mode"
RESULT_SKIPPED = "skipped"


class DeployFailed(Exception):
    """No candidate passed; ``result`` holds every attempt and the rollback."""

    def __init__(self, message, result):
        super(DeployFailed, self).__init__(message)
        self.result = result


def _reasons(inst, active):
    return [r for r in ("unit file" if inst["unit_changed"] else "",
                        "environment file" if inst["env_changed"] else "",
                        "not running" if active != "active" else "") if r]


class DeployTransaction(object):
    """One host's deploy. ``spec`` keys:

    unit, unit_dir, env_file, lkg_dir, health_url, base_url: where the candidate serves;
    candidates: [{'options': dict, 'argv': [...], 'unit_content': str}] in order (the first is the configuration);
    ready_timeout: seconds; probes: run the canary; lkg_update: record a pass as last-known-good;
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

    # ---- the whole transaction -------------------------------------------------------------------------------
    def run(self):
        state = self.h.inspect()
        self.lkg = state.get("lkg") or {}
        self.clock = int(state.get("clock") or 0)
        if state.get("lkg_problem"):
            self.h.say("WARNING: %s" % state["lkg_problem"])
        active = state.get("active", "inactive")
        try:
            for index, cand in enumerate(self.s["candidates"]):
                known = self.known_failure(index, cand)
                if known:
                    self.attempts.append(self._row(index, RESULT_SKIPPED, **{"class": known["class"], "message": (
                        "failed the gate before with the same command line and engine version (%s); "
                        "sglang_retry_failed=true tries it again" % known["class"])}))
                    self.h.say("candidate %d: skipped, it failed the gate before (%s)" % (index, known["class"]))
                    continue
                passed, active = self.attempt(index, cand, active)
                if passed:
                    for later in range(index + 1, len(self.s["candidates"])):
                        self.attempts.append(self._row(later, RESULT_NOT_TRIED))
                    return self.result(index)
        except KeyboardInterrupt:
            # interrupted (SIGINT to ansible-playbook): the old server serves again before the interrupt goes on
            if self.touched and not self.s.get("check_mode"):
                self.h.say("interrupted: restoring last-known-good")
                self.restore_lkg()
            raise
        return self.fail()

    def known_failure(self, index, cand):
        """A candidate that failed the gate before, in the run that recorded last-known-good, with the same argv
        and engine version, while last-known-good is a later candidate of this chain: trying it again would
        restart the server only to fail and come back (minutes per load of a large model)."""
        lkg, s = self.lkg, self.s
        if s.get("retry_failed") or not lkg.get("failed_before"):
            return None
        if lkg.get("engine_version") != (s.get("meta") or {}).get("engine_version"):
            return None
        later = [c["argv"] for c in s["candidates"][index + 1:]]
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
        row = {"candidate": index, "options": self.s["candidates"][index].get("options", {}), "outcome": outcome}
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
        if s.get("probes", True):
            after = (" after %d s" % int(round(load))) if restarted else ""
            self.h.say("candidate %d: ready%s, coherence canary" % (index, after))
            problems = self.h.canary(s["base_url"])
            if problems:
                return self._failed(index, "incoherent", "; ".join(problems), [], restarted)
        self.attempts.append(self._row(index, RESULT_PASSED, restarted=restarted,
                                       load_seconds=round(load, 1) if load is not None else None))
        self.h.say("candidate %d passed the gate%s" % (index, "" if restarted else " (no restart: nothing changed)"))
        if s.get("lkg_update", True):
            self.commit(cand, since, load)
        return True, "active"

    def _failed(self, index, cls, message, journal_tail, restarted):
        self.attempts.append(self._row(index, RESULT_FAILED, restarted=restarted, **{
            "class": cls, "message": message[:600], "journal_tail": journal_tail}))
        self.h.say("candidate %d FAILED the gate: %s: %s" % (index, cls, message[:300]))
        return False, "failed"

    # ---- keep ------------------------------------------------------------------------------------------------
    def commit(self, cand, since, load):
        s = self.s
        unit_path = "%s/%s" % (s["unit_dir"], s["unit"])
        load_seconds = int(round(load)) if load is not None else int(self.lkg.get("load_seconds", 0) or 0)
        meta = dict(s.get("meta") or {})
        failed = [{"argv": s["candidates"][a["candidate"]]["argv"], "class": a["class"]}
                  for a in self.attempts if a["outcome"] in (RESULT_FAILED, RESULT_SKIPPED)]
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
        old_unit = self.lkg.get("unit", s["unit"])
        if old_unit != s["unit"] and self.lkg.get("unit_path"):
            keep = (unit_path, s["env_file"])
            remove = [p for p in (self.lkg["unit_path"], self.lkg["unit_path"] + ".d", self.lkg.get("env_file", ""),
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
            self.h.stop(self.s["unit"])
            self.rollback = {"state": "stopped", "canary": "not run"}
            return self.rollback
        since = self.h.restore(lkg)
        ready = self.h.wait_ready(lkg["unit"], lkg["health_url"], since, self.s["ready_timeout"])
        rb = {"unit": lkg["unit"], "base_url": lkg["base_url"], "state": ready.get("state", "?"),
              "cls": ready.get("cls") or "", "evidence": ready.get("evidence") or ""}
        if rb["state"] != "ready" or not self.s.get("probes", True):
            rb["canary"] = "not run"
        else:
            problems = self.h.canary(lkg["base_url"])
            rb["canary"] = ("FAILED: " + "; ".join(problems)) if problems else "passed"
        self.rollback = rb
        return rb

    def fail(self):
        s = self.s
        parts = ["No candidate passed the gate on %s." % s.get("host", "this host")]
        for a in self.attempts:
            parts.append("[candidate %d %s: %s: %s]" % (a["candidate"], a["options"], a["class"], a["message"]))
        if not self.touched:
            parts.append("The live server was not touched.")
        else:
            rb = self.restore_lkg()
            if rb["state"] == "stopped":
                parts.append("No last-known-good existed: the service was stopped.")
            else:
                ready = rb["state"] if rb["state"] == "ready" else "%s (%s: %s)" % (rb["state"], rb["cls"] or "timeout", rb["evidence"])
                parts.append("Rolled back to last-known-good %s at %s: %s, canary %s." % (rb["unit"], rb["base_url"], ready, rb["canary"]))
        msg = " ".join(parts)
        raise DeployFailed(msg, self.result(None, msg))

    def result(self, passed, msg=None, gate=None):
        """The action's result; ``gate`` is its one-line verdict (by default from the candidate that passed)."""
        if gate is None:
            gate = self._gate_line(passed)
            if passed is not None:
                msg = msg or gate
        return {"changed": self.changed, "passed_candidate": passed, "gate_result": gate, "msg": msg,
                "attempts": self.attempts, "live_touched": self.touched, "rollback": self.rollback,
                "lkg_unit": self.lkg.get("unit", ""), "diffs": [d for d in self.diff if d.get("before") != d.get("after")]}

    def _gate_line(self, passed):
        if passed is None:
            return "no candidate passed the gate"
        if not self.s.get("check_mode"):
            return "candidate %d passed the gate" % passed
        row = self.attempts[passed]
        return "check mode: candidate %d %s; the gate was NOT run" % (
            passed, ("would restart (%s changed)" % ", ".join(row["reasons"])) if row["restart"] else "would not restart")

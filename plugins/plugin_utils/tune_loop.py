# -*- coding: utf-8 -*-
# Copyright: gpuhost.sglang contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The tuning campaign's one loop: plan, parser verdicts, next candidate, crash memory and resume (the tune_campaign
module's ``run``: state, decision, table, Pareto plot), deploy through the gate, the bench ladder between two GPU
health readings, the accuracy gate, the row, the decision against the measured noise, adoption or last-known-good.

Two callers run this same ``CampaignLoop``; they differ only in its effects (``deploy``, ``restore_lkg``,
``gpu_health``):
  playbooks/tune.yml            the tune_step action (plugins/action/tune_step.py, ``PlaybookLoop``): it runs the
                                loop from the campaign's state until an effect needs the serving role (deploy a
                                candidate or the winner, restore last-known-good), returns which, and its next call
                                picks the loop up where the role's result lets it go on (playbooks/tasks/tune_step.yml)
  benchmarks/gpu/sglang/tune.py the lent GPU machine (no systemd, no Ansible): the effects run in process, the deploy
                                transaction (plugin_utils/deploy.py) over ``LauncherHost``, a process launcher in place
                                of the unit, with the argv the engine's parser checked (``EngineParser``)
Extra gates (callables run after the canary, before the ladder) plug in as ``gates``.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import json
import os
import shutil
import signal
import subprocess
import time

from ansible_collections.gpuhost.sglang.plugins.module_utils.bench import accuracy as bench_accuracy
from ansible_collections.gpuhost.sglang.plugins.module_utils.bench import store as bench_store
from ansible_collections.gpuhost.sglang.plugins.module_utils.bench.runner import BenchRun
from ansible_collections.gpuhost.sglang.plugins.module_utils.serving import ready
from ansible_collections.gpuhost.sglang.plugins.module_utils.tune.state import CampaignState, state_path
from ansible_collections.gpuhost.sglang.plugins.modules import server_args as server_args_module
from ansible_collections.gpuhost.sglang.plugins.modules import serving_bench
from ansible_collections.gpuhost.sglang.plugins.modules import tune_campaign
from ansible_collections.gpuhost.sglang.plugins.plugin_utils.deploy import DeployFailed, DeployTransaction
from ansible_collections.gpuhost.sglang.plugins.plugin_utils.deploy_host import DeployHost

UNIT = "sglang-tune"


def _read_json(path):
    with open(path) as f:
        return json.load(f)


class LoopError(Exception):
    """The campaign cannot go on (its base fails the parser or the gate); the message says why."""


def bench_params(**overrides):
    """serving_bench's parameters: the module's defaults (its argument spec) under ``overrides``."""
    spec = serving_bench.argument_spec()
    unknown = sorted(set(overrides) - set(spec))
    if unknown:
        raise LoopError("bench options %s are not serving_bench options (allowed: %s)" % (unknown, ", ".join(sorted(spec))))
    params = dict((k, v.get("default")) for k, v in spec.items())
    params.update(overrides)
    return params


def bench_canary(base_url, apis=("completions",), **extra):
    """The deploy gate's canary (plugins/action/serving_deploy.py): serving_bench's known-answer probes only."""
    problems = []
    for api in apis:
        res = BenchRun(bench_params(base_url=base_url, api=api, probes_only=True, **extra)).execute()
        if res.failed:
            problems.append(res.msg or "the %s canary failed" % api)
    return problems


def merged(options, profile=None, managed=None):
    """What the serving role renders (filter tune_merge): the profile under the candidate, managed options on top."""
    out = dict(profile or {})
    out.update(options or {})
    out.update(managed or {})
    return out


class _ProbeModule(object):
    """What the server_args module's ``run_probe`` needs of AnsibleModule, with the engine's environment."""

    def __init__(self, env):
        self.env = env

    @staticmethod
    def get_bin_path(name):
        return shutil.which(name)

    def run_command(self, cmd, data=None, environ_update=None):
        env = dict(os.environ, **self.env)
        env.update(environ_update or {})
        p = subprocess.run(cmd, input=data, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env, check=False,
                           universal_newlines=True)
        return p.returncode, p.stdout, p.stderr


class EngineParser(object):
    """The engine's own parser through the server_args module's probe (one import for every option set)."""

    def __init__(self, python, engine="sglang", env=None, timeout=180):
        self.python, self.engine, self.env, self.timeout = python, engine, dict(env or {}), timeout
        self.version = None

    def __call__(self, option_sets):
        sa = server_args_module
        prepared = [sa._prepare(o) for o in option_sets]  # pylint: disable=protected-access
        requests = [{"op": "describe"}] + [{"op": "parse", "chunks": chunks} for _o, chunks in prepared]
        try:
            answers = sa.run_probe(_ProbeModule(self.env), self.python, self.engine, requests, self.timeout)
        except sa.ProbeFailure as exc:
            raise LoopError("cannot build the %s parser with %s: %s" % (self.engine, self.python, exc))
        meta = answers[0]
        self.version = meta["engine_version"]
        rules = sa.flag_rules([], [], self.version)
        out = []
        for o, (opts, chunks), ans in zip(option_sets, prepared, answers[1:]):
            v = sa._verdict(o, opts, chunks, ans, meta, rules)  # pylint: disable=protected-access
            v.update(failed=bool(v["errors"]), engine=self.engine, engine_version=self.version)
            if v["errors"]:
                v["msg"] = sa._problems(v["errors"], self.engine, self.version)  # pylint: disable=protected-access
            out.append(v)
        return out


class LauncherHost(DeployHost):
    """The deploy transaction's host interface (plugins/plugin_utils/deploy_host.py) over one process launcher: the
    "unit" is a JSON file holding the whole command; a restart stops the running server's process group and starts
    that command in a new session, its output in a log; readiness is ready.wait over that log (the journal's
    stand-in) and the process state (systemctl's). A failed start that does not exit by itself (SGLang 0.5.17 after
    a scheduler exception) is stopped, so that it does not hold the GPU."""

    def __init__(self, workdir, lkg_dir=None, env=None, say=None, canary=None, stop_grace=10.0, interval=0.5):
        self.workdir = os.path.abspath(workdir)
        self.lkg_dir = os.path.abspath(lkg_dir or os.path.join(workdir, "last-known-good"))
        for d in (self.workdir, self.lkg_dir):
            os.makedirs(d, exist_ok=True)
        self.env = env
        self.say_fn = say or print
        self.canary_fn = canary or bench_canary
        self.stop_grace = stop_grace
        self.interval = interval
        self.signatures = ready.compile_signatures(ready.DEFAULT_SIGNATURES)
        self.unit_path = os.path.join(self.workdir, UNIT + ".json")
        self.pid_path = os.path.join(self.workdir, UNIT + ".pid")
        self.proc = None
        self.starts = 0
        self.label = ""  # which candidate the deploy transaction's lines are about (its own index is always 0)
        self.log_path = None
        self.logs = []
        self._stop_leftover()

    # -- helpers ------------------------------------------------------------------------------------------
    def _read(self, path):
        try:
            with open(path) as f:
                return f.read()
        except (OSError, IOError):
            return None

    def _write(self, path, text):
        tmp = path + ".tmp"
        with open(tmp, "w") as f:
            f.write(text)
        os.replace(tmp, path)

    def _stop_leftover(self):
        """A server that a cut-off run left behind (its pid file) holds the port and the GPU: stopped."""
        text = self._read(self.pid_path)
        if text and text.strip().isdigit():
            self._kill_group(int(text))
            self.say("stopped the server a cut-off run left (pid %s)" % text.strip())
        if os.path.exists(self.pid_path):
            os.remove(self.pid_path)

    @staticmethod
    def _reap(pid):
        """Reap ``pid`` if it is an exited child of this process: a zombie still counts as a member of its process
        group, so killpg(pid, 0) would find the group alive until the grace ran out (a loop cut off in this same
        process, whose Popen nobody polls, left its server as such a child)."""
        try:
            os.waitpid(pid, os.WNOHANG)
        except ChildProcessError:  # not our child: init reaps it
            pass

    def _kill_group(self, pid, wait=None):
        for sig, grace in ((signal.SIGTERM, self.stop_grace), (signal.SIGKILL, 5.0)):
            try:
                os.killpg(pid, sig)
            except OSError:
                return
            deadline = time.monotonic() + grace
            while time.monotonic() < deadline:
                if wait is None or wait() is not None:  # the leader has exited (or: is it a zombie of ours?)
                    if wait is None:
                        self._reap(pid)
                    try:  # its children of the same group may not have
                        os.killpg(pid, 0)
                    except OSError:
                        return
                time.sleep(0.1)

    def alive(self):
        return self.proc is not None and self.proc.poll() is None

    def _journal(self, unit, since):
        text = self._read(self.log_path) if self.log_path else None
        return [line for line in (text or "").splitlines() if line.strip()]

    def _state(self, unit):
        if self.proc is None:
            return {"ActiveState": "inactive", "SubState": "dead", "NRestarts": "0"}
        rc = self.proc.poll()
        if rc is None:
            return {"ActiveState": "active", "SubState": "running", "NRestarts": "0", "MainPID": str(self.proc.pid)}
        return {"ActiveState": "failed", "SubState": "failed", "NRestarts": "0", "Result": "exit-code",
                "ExecMainStatus": str(rc), "MainPID": "0"}

    # -- the host interface -------------------------------------------------------------------------------
    def inspect(self):
        lkg, problem = {}, ""
        text = self._read(os.path.join(self.lkg_dir, "meta.json"))
        if text:
            try:
                lkg = json.loads(text)
            except ValueError:
                lkg, problem = {}, "meta.json damaged: treated as no last-known-good"
        live = self._read(self.unit_path)
        return {"lkg": lkg, "lkg_problem": problem, "clock": int(time.time()),
                "live_is_lkg": bool(lkg) and live == lkg.get("unit_content"),
                "active": "active" if self.alive() else "inactive"}

    def install(self, unit_content):
        before = self._read(self.unit_path)
        changed = before != unit_content
        if changed:
            self._write(self.unit_path, unit_content)
        return {"unit_changed": changed, "env_changed": False, "diff": {"before": before or "", "after": unit_content}}

    def restart(self, stop_unit, unit=None):
        self.stop(UNIT)
        command = json.loads(self._read(self.unit_path))["command"]
        self.starts += 1
        self.log_path = os.path.join(self.workdir, "server-%02d.log" % self.starts)
        self.logs.append(self.log_path)
        since = time.time()
        with open(self.log_path, "w") as log:
            log.write("# %s\n" % json.dumps(command))
            log.flush()
            self.proc = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                         start_new_session=True, env=self.env)
        self._write(self.pid_path, str(self.proc.pid))
        return since

    def wait_ready(self, unit, health_url, since, timeout):
        res = ready.wait(unit, health_url, since, self.signatures, timeout, interval=self.interval,
                         journal=self._journal, state=self._state)
        if res["state"] == ready.STATE_STARTING:
            res["state"] = "timeout"
        if res["state"] != ready.STATE_READY:
            self.stop(unit)
        res["log"] = self.log_path
        return res

    def canary(self, base_url):
        return self.canary_fn(base_url)

    def record(self, meta, timeout_content, remove_paths, forget_unit):
        meta = dict(meta, unit_content=self._read(self.unit_path))
        path = os.path.join(self.lkg_dir, "meta.json")
        new = json.dumps(meta, sort_keys=True)
        if self._read(path) == new:
            return []
        self._write(path, new)
        return [path]

    def restore(self, lkg, restart=True):
        self.install(lkg["unit_content"])
        return self.restart("", lkg.get("unit", UNIT)) if restart else time.time()

    def accuracy(self, base_url, action, checks, lkg_file):
        """The campaign gates accuracy itself (CampaignLoop.accuracy): its deploy spec leaves the gate off."""
        return {"failed": True, "class": "accuracy_error",
                "msg": "the launcher host runs no accuracy gate inside a deploy: the campaign measures accuracy itself"}

    def stop(self, unit):
        if self.proc is not None and self.proc.poll() is None:
            self._kill_group(self.proc.pid, wait=self.proc.poll)
        if self.proc is not None:
            try:
                self.proc.wait(5)
            except subprocess.TimeoutExpired:
                pass
        if os.path.exists(self.pid_path):
            os.remove(self.pid_path)

    def monotonic(self):
        return time.monotonic()

    def say(self, line):
        self.say_fn(self.label + line)


class CampaignLoop(object):
    """One campaign. ``doc``: the campaign (mapping or YAML path), or ``plan``: a plan tune_campaign made already;
    ``command``: the engine's command before its options (``[python, -m, sglang.launch_server]``); ``parser``:
    option sets -> the server_args module's verdicts (``EngineParser``); ``managed``: the options the launcher owns
    (model path, host, port...); ``gates``: callables ``gate(candidate=, base_url=, plan=)`` run after the canary,
    returning None or a dict: with ``class`` (and ``message``) the candidate failed (its row has that class), without
    it passed; a dict is also kept in the state as a ``gate`` event (an accuracy gate's scores); ``deadline``: a
    monotonic time after which no candidate starts (the campaign is cut off there and resumes on the next run);
    ``estimate_s``: the time a candidate is assumed to take before one has been measured; ``adopt``: overrides the
    campaign's adopt.enabled (None: the campaign's). ``bench``: serving_bench options of every ladder level.

    The control flow is ``run``, ``candidate`` and ``adopt``; the effects below them (``deploy``, ``put_back``,
    ``gpu_health``, ``resuming``, ``started``) run in this process over ``host`` (a ``LauncherHost``), or, in the
    playbook's ``PlaybookLoop``, are handed to the serving role."""

    def __init__(self, doc, state_dir, host, command, parser, base_url, managed=None, profile=None, gates=(),
                 bench=None, ready_timeout=600, deadline=None, estimate_s=120.0, restore=True, plots=True, say=None,
                 meta=None, plan=None, adopt=None, api_key=None):
        self.doc, self.state_dir, self.host, self.command, self.parser = doc, state_dir, host, command, parser
        self.base_url = base_url.rstrip("/")
        self.managed, self.profile, self.gates = dict(managed or {}), dict(profile or {}), list(gates)
        self.bench = dict(bench or {})
        self.ready_timeout, self.deadline, self.estimate_s = ready_timeout, deadline, estimate_s
        self.restore, self.plots, self.adopt_enabled, self.api_key = restore, plots, adopt, api_key
        self.say = say or print
        self.meta = dict(meta or {})
        self.plan = plan
        self.units = []
        self.taken = []
        self.cut_off = None

    def tune(self, action, **params):
        p = {"action": action, "campaign": None, "base_options": None, "profile_options": self.profile,
             "state_dir": self.state_dir, "plan": self.plan, "index": None, "stage": None, "failure": None,
             "levels": None, "parser": None, "note": "", "duration_s": 0.0, "plots": self.plots}
        p.update(params)
        return tune_campaign.run(p, False)

    def left_s(self):
        return None if self.deadline is None else self.deadline - time.monotonic()

    def out_of_time(self):
        need = max(self.taken) if self.taken else self.estimate_s
        left = self.left_s()
        return left is not None and left < need

    # -- the campaign ---------------------------------------------------------------------------------------
    def run(self):
        planned_here = self.plan is None
        if planned_here:
            res = self.tune("plan", campaign=self.doc)
            self.plan = res["plan"]
            self.say("campaign %s: %d candidates (base + %d); done before: %s; interrupted (run again): %s; state %s" % (
                self.plan["name"], len(self.plan["candidates"]), len(self.plan["candidates"]) - 1,
                sorted(d["index"] for d in res["done"]), res["interrupted"], res["state_file"]))
        cands = self.plan["candidates"]
        verdicts = self.parser([merged(c["options"], self.profile, self.managed) for c in cands])
        self.meta.setdefault("engine_version", verdicts[0].get("engine_version"))
        for c, v in zip(cands, verdicts):
            if planned_here:
                self.say("  %d %s: %s" % (c["index"], c["name"] or "base", ("REJECTED: " + v["msg"]) if v["failed"]
                                          else "parser ok: " + " ".join(v["argv"])))
        if verdicts[0]["failed"]:
            raise LoopError("the base configuration fails the engine's parser: %s" % verdicts[0]["msg"])
        self.units = [(v["argv"], json.dumps({"command": list(self.command or []) + v["argv"]}, sort_keys=True))
                      for v in verdicts]
        for c, v in zip(cands, verdicts):
            if v["failed"]:
                self.tune("record", index=c["index"], stage="rejected", parser=v)  # kept when it has its row
        for c, v in zip(cands, verdicts):
            if v["failed"]:
                continue
            if self.out_of_time():
                self.cut_off = "cut off before candidate %d: %.0f s left, a candidate takes about %.0f s; run again to resume" % (
                    c["index"], self.left_s(), max(self.taken) if self.taken else self.estimate_s)
                self.say(self.cut_off)
                break
            begin = {"decision": "run"} if self.resuming(c["index"]) else self.tune("begin", index=c["index"])
            if begin["decision"] != "run":
                if planned_here or begin["decision"] != "done":
                    self.say("candidate %d %s: %s %s" % (c["index"], c["name"], begin["decision"], begin.get("message") or ""))
                continue
            if not self.candidate(c) and c["index"] == 0:
                break
        report = self.tune("report")
        for line in report["table"]:
            self.say(line)
        self.say(report["reason"])
        adopted = None
        enabled = self.plan["adopt"]["enabled"] if self.adopt_enabled is None else self.adopt_enabled
        if report.get("winner") and enabled and not self.cut_off:
            adopted = self.adopt(report["winner"])
        restored = None if adopted and adopted["adopted"] else self.restore_lkg()
        return {"plan": self.plan, "report": report, "cut_off": self.cut_off, "restored": restored, "adopted": adopted}

    def report_only(self):
        """The decision, table and plot again from the state (another machine's run, say): nothing starts."""
        self.plan = self.tune("plan", campaign=self.doc)["plan"]
        return {"plan": self.plan, "report": self.tune("report"), "cut_off": None, "restored": None}

    def adopt(self, winner):
        """The winner through the deploy gate again (install, restart, readiness, the coherence canary), recorded as
        last-known-good when it passes; when it fails, the transaction's own rollback puts last-known-good back.
        Returns {adopted, index, message}."""
        i = winner["index"]
        if self.out_of_time():
            msg = "winner %d not adopted: too little time left (run the campaign again to adopt it)" % i
            self.say(msg)
            return {"adopted": False, "index": i, "message": msg}
        failure = self.deploy(i, True, "adopt-%d" % i)
        if failure is None:
            self.tune("adopted", index=i)
            msg, ok = "winner %d %s adopted as last-known-good" % (i, winner.get("name")), True
        else:
            msg, ok = "winner %d not adopted: %s" % (i, failure["message"][:600]), False
        self.say(msg)
        return {"adopted": ok, "index": i, "message": msg}

    def restore_lkg(self):
        """Last-known-good serves again (no restart when it serves already)."""
        if not self.restore:
            return None
        if self.out_of_time():
            self.say("last-known-good not restored: too little time left")
            return None
        return self.put_back()

    def candidate(self, cand):
        """Deploy (not as last-known-good, except the base), gates, the ladder between two GPU health readings, the
        accuracy gate, the row. Returns whether it was benched."""
        i = cand["index"]
        t0 = self.started(i)
        failure = self.deploy(i, i == 0, "deploy-%d" % i)
        if failure is not None:
            self.finish(cand, t0, stage="gate_failed" if failure.get("failure") else "error",
                        failure=failure.get("failure"), note=failure["message"][:600])
            return False
        for gate in self.gates:
            res = gate(candidate=cand, base_url=self.base_url, plan=self.plan) or {}
            if res:  # kept beside the row (an accuracy gate's scores, for the table's columns)
                CampaignState(state_path(self.state_dir, self.plan["name"])).append(
                    "gate", id=cand["id"], index=i, gate=getattr(gate, "__name__", str(gate)), result=res)
            if res.get("class"):
                self.finish(cand, t0, stage="gate_failed", failure=res, note=res.get("message", ""))
                return False
        before = self.gpu_health("before")
        levels = [self.level(cand, conc, before) for conc in self.plan["workload"]["concurrency"]]
        after = self.gpu_health("after")
        if after is not None:  # the ladder's run marked when its GPUs degraded (the row says so below)
            BenchRun(bench_params(base_url=self.base_url, mode="finalize", gpu_health_after=after,
                                  report_dir=self.bench_dir(), run_id=self.run_id(cand))).execute()
        self.finish(cand, t0, stage="benched", levels=levels, accuracy=self.accuracy(cand), gpu_health=before,
                    gpu_health_after=after)
        return True

    def accuracy_dir(self):
        return os.path.join(self.state_dir, self.plan["name"])

    def bench_dir(self):
        return os.path.join(self.state_dir, self.plan["name"], "bench")

    def run_id(self, cand):
        return "%s-%d-%s" % (self.plan["name"], cand["index"], cand["id"])

    def accuracy(self, cand):
        """The accuracy gate (serving_accuracy's steps): the base measures last-known-good into accuracy-lkg.json (the
        checks any candidate needs), every other candidate is compared with it by its own checks. Returns the
        module's result for the row, or None (gate off, or no check needed). What the row leaves out (per-item
        answers, greedy texts, which outputs differ) goes to accuracy-<index>-<id>.json."""
        acc, i = self.plan["accuracy"], cand["index"]
        checks = acc["lkg_checks"] if i == 0 else cand["accuracy_checks"]
        if not acc["enabled"] or not checks:
            return None
        keys = ("api", "concurrency", "limit", "greedy_prompts", "alpha", "margin", "greedy_margin", "greedy_metric")
        p = dict((k, acc[k]) for k in keys)
        p.update(action="measure" if i == 0 else "gate", base_url=self.base_url, checks=checks, delta=cand["delta"],
                 lkg_file=os.path.join(self.accuracy_dir(), "accuracy-lkg.json"), model=None, api_key=self.api_key,
                 timeout=120.0, fail_on_gate=False)
        path = os.path.join(self.accuracy_dir(), "accuracy-%d-%s.json" % (i, cand["id"]))

        def detail(full):
            bench_store.atomic_write_json(path, full)
            for name, d in sorted((full.get("differences") or {}).items()):
                self.say("  accuracy %s: %s" % (name, json.dumps(d, sort_keys=True)[:600]))

        try:
            res, _failed, msg = bench_accuracy.run_module(p, bench_store.atomic_write_json, _read_json, detail=detail)
        except bench_accuracy.AccuracyError as exc:
            res = {"passed": False, "class": "accuracy_error", "message": str(exc), "checks": {}}
            msg = "accuracy gate error: %s" % exc
        self.say("  %s" % msg[:600])
        return res

    def finish(self, cand, t0, **record):
        took = time.time() - t0
        self.taken.append(took)
        record = dict((k, v) for k, v in record.items() if v is not None)
        row = self.tune("record", index=cand["index"], duration_s=took, **record)["row"]
        self.say("candidate %d %s: %s %s %s (%.0f s)" % (cand["index"], cand["name"] or "base", row["status"],
                                                         row.get("class") or "", (row.get("message") or "")[:300], took))

    def level(self, cand, conc, gpu_health=None):
        w = self.plan["workload"]
        params = dict(self.bench, base_url=self.base_url, api=w["api"], concurrency=conc, num_prompts=w.get("num_prompts"),
                      input_len=w["input_len"], output_len=w["output_len"], trials=w["trials"],
                      warmup=w["warmup"], run_probes=False, plots=False, report_dir=self.bench_dir(),
                      run_id=self.run_id(cand))
        if self.api_key:
            params["api_key"] = self.api_key
        if gpu_health is not None:
            params["gpu_health"] = gpu_health
        res = BenchRun(bench_params(**params)).execute()
        self.say("  c=%d: %s" % (conc, res.msg))
        return dict(res.out, failed=res.failed, msg=res.msg)

    # -- the effects: in this process over the launcher host -------------------------------------------------
    def spec(self, index, lkg_update):
        cand = self.plan["candidates"][index]
        return {"unit": UNIT, "unit_dir": self.host.workdir, "env_file": "", "lkg_dir": self.host.lkg_dir,
                "health_url": self.base_url + "/health", "base_url": self.base_url, "ready_timeout": self.ready_timeout,
                "candidates": [{"options": cand["options"], "argv": self.units[index][0], "unit_content": self.units[index][1]}],
                "probes": True, "lkg_update": lkg_update, "meta": self.meta, "host": "launcher"}

    def deploy(self, index, lkg_update, key):
        """Candidate ``index`` through the deploy gate (``key``: deploy-<index>, or adopt-<index> for the winner).
        Returns None when it passed, else {failure: the failed attempt's row or None, message}."""
        cand = self.plan["candidates"][index]
        self.host.label = "[adopt] " if key.startswith("adopt") else "[%d %s] " % (index, cand["name"] or "base")
        try:
            DeployTransaction(self.host, self.spec(index, lkg_update)).run()
        except DeployFailed as exc:
            failed = [a for a in exc.result["attempts"] if a["outcome"] == "failed"]
            return {"failure": failed[-1] if failed else None, "message": str(exc)}
        return None

    def put_back(self):
        """The deploy transaction's restore of last-known-good; its gate line, or None without a record."""
        if not self.host.inspect()["lkg"]:
            return None
        self.host.label = "[restore] "
        try:
            return DeployTransaction(self.host, self.spec(0, False)).restore_only()["gate_result"]
        except DeployFailed as exc:
            return str(exc)

    def gpu_health(self, when):
        """GPU health read ``before`` or ``after`` the ladder: the launcher reads none."""
        return None

    def resuming(self, index):
        """Whether this process picks up a candidate that an earlier call began (never, in one process)."""
        return False

    def started(self, index):
        """When the candidate began (its row's duration)."""
        return time.time()

# -*- coding: utf-8 -*-
# Copyright: gpuhost.sglang contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Action plugin of gpuhost.sglang.serving_deploy: runs plugins/plugin_utils/deploy.py's transaction against the
host through modules (serving_unit for files and systemd, serving_ready for readiness, serving_bench for the
canary under the engine venv's interpreter). Documentation: plugins/modules/serving_deploy.py."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import signal
import threading
import time

from ansible.errors import AnsibleActionFail
from ansible.plugins.action import ActionBase
from ansible.utils.display import Display

from ansible_collections.gpuhost.sglang.plugins.plugin_utils import candidates as builder
from ansible_collections.gpuhost.sglang.plugins.plugin_utils.deploy_host import ReplicaHost
from ansible_collections.gpuhost.sglang.plugins.plugin_utils.deploy import (
    REPLICA_PHASES, DeployFailed, DeployTransaction, ReplicaRank, group_candidates)

display = Display()

ARGS = {
    "unit": str, "unit_dir": str, "env_file": str, "lkg_dir": str, "env_content": str, "candidates": list,
    "health_url": str, "base_url": str, "ready_timeout": int, "probes": bool, "canary": dict, "canary_python": str,
    "lkg_update": bool, "retry_failed": bool, "meta": dict, "install_dir": str, "timeout_start_sec_min": int,
    "api_key": str, "restore": bool, "phase": str, "replica": dict, "peers": list, "interrupted": bool,
    "accuracy": dict, "noop_canary": bool, "build": dict, "render_only": bool,
}
REQUIRED = ("unit", "env_file", "lkg_dir", "health_url", "base_url", "canary_python")
DEFAULTS = {"unit_dir": "/etc/systemd/system", "ready_timeout": 1800, "probes": True, "canary": {}, "lkg_update": True,
            "retry_failed": False, "meta": {}, "install_dir": "", "timeout_start_sec_min": 300, "api_key": "",
            "restore": False, "candidates": [], "env_content": None, "phase": "all", "replica": {}, "peers": [],
            "interrupted": False, "accuracy": {}, "noop_canary": False, "build": None, "render_only": False}
ACCURACY_CHECKS = ("score", "greedy")  # bench/accuracy.py CHECKS
REPLICA_KEYS = ("rank", "nnodes", "head_address", "dist_port", "state_file")


class InterruptGuard(object):
    """SIGINT as KeyboardInterrupt inside the deploy transaction, in the worker process that runs this action.

    Ansible's own handling never lets an action see an interrupt: the controller's handler
    (ansible/executor/task_queue_manager.py, ``TaskQueueManager._signal_handler``) sends SIGINT to each worker and
    raises KeyboardInterrupt in the controller, whose clean-up then terminates the workers
    (``_cleanup_processes``: SIGTERM, no wait); the worker's handler (ansible/executor/process/worker.py,
    ``WorkerProcess._term``) resets the signal to its default action and sends it to the worker's own process
    group: the worker ends at once, wherever the transaction was (a candidate restarted, unrecorded, still
    serving). Here the first SIGINT raises KeyboardInterrupt in the transaction, which rolls back and returns a
    failure of class ``interrupted``; this handler is then gone, so the next SIGINT is Ansible's own again
    (abort). SIGTERM before the first SIGINT is the same interrupt (the controller goes away); after it, the
    rollback in flight finishes. The strategy gpuhost.sglang.interruptible_linear keeps the controller waiting
    for this task's result; under another strategy the controller does not wait, and the rollback still runs.
    """

    def __init__(self):
        self.caught = False
        self.saved = {}

    def __enter__(self):
        if threading.current_thread() is threading.main_thread():   # signal handlers: main thread only
            for signum, handler in ((signal.SIGINT, self._interrupt), (signal.SIGTERM, self._terminate)):
                self.saved[signum] = signal.signal(signum, handler)
        return self

    def __exit__(self, *exc):
        for signum, handler in self.saved.items():
            signal.signal(signum, handler)
        self.saved = {}
        return False

    def _interrupt(self, signum, frame):
        if signal.SIGINT in self.saved:
            signal.signal(signal.SIGINT, self.saved.pop(signal.SIGINT))
        self.caught = True
        raise KeyboardInterrupt()

    def _terminate(self, signum, frame):
        if not self.caught:
            self._interrupt(signum, frame)


def check_args(args):
    """The options, typed, with defaults; a clear error naming the first one that is wrong."""
    unknown = sorted(set(args) - set(ARGS))
    if unknown:
        raise AnsibleActionFail("serving_deploy: unknown option(s) %s: allowed %s" % (", ".join(unknown), ", ".join(sorted(ARGS))))
    out = dict(DEFAULTS)
    for name in REQUIRED:
        if args.get(name) in (None, ""):
            raise AnsibleActionFail("serving_deploy: %s is required" % name)
    for name, value in args.items():
        kind = ARGS[name]
        if value is None:
            continue
        if kind is int:
            try:
                value = int(value)
            except (TypeError, ValueError):
                raise AnsibleActionFail("serving_deploy: %s=%r is not an integer" % (name, value))
        elif kind is bool:
            if isinstance(value, str):
                if value.lower() not in ("true", "false", "yes", "no", "1", "0"):
                    raise AnsibleActionFail("serving_deploy: %s=%r is not a boolean: allowed true or false" % (name, value))
                value = value.lower() in ("true", "yes", "1")
            value = bool(value)
        elif not isinstance(value, kind):
            raise AnsibleActionFail("serving_deploy: %s must be a %s, got %s" % (name, kind.__name__, type(value).__name__))
        out[name] = value
    if out["accuracy"]:
        acc = out["accuracy"]
        checks = acc.get("checks")
        if set(acc) != {"checks"} or not isinstance(checks, list) or not checks or any(c not in ACCURACY_CHECKS for c in checks):
            raise AnsibleActionFail("serving_deploy: accuracy=%r: allowed {} (off) or {checks: [...]} with checks a "
                                    "non-empty list of %s (sglang_accuracy_checks)" % (acc, ", ".join(ACCURACY_CHECKS)))
        if out["phase"] != "all":
            raise AnsibleActionFail("serving_deploy: accuracy is not run for a multi-node replica (phase=%s): allowed "
                                    "accuracy={} there (sglang_accuracy_gate=false)" % out["phase"])
    if out["restore"]:
        return out
    if out["build"] is not None:
        if out["candidates"]:
            raise AnsibleActionFail("serving_deploy: candidates and build are mutually exclusive: build makes the candidates")
        try:
            out["build"] = builder.check_build(out["build"])
        except builder.BuildError as exc:
            raise AnsibleActionFail("serving_deploy: %s" % exc)
    if out["phase"] != "all":
        if out["phase"] not in REPLICA_PHASES:
            raise AnsibleActionFail("serving_deploy: phase=%r: allowed values all, %s" % (
                out["phase"], ", ".join(sorted(set(REPLICA_PHASES)))))
        missing = [k for k in REPLICA_KEYS if out["replica"].get(k) in (None, "")]
        if missing:
            raise AnsibleActionFail("serving_deploy: phase=%s needs replica with %s (missing %s)" % (
                out["phase"], ", ".join(REPLICA_KEYS), ", ".join(missing)))
    if out["env_content"] is None:
        raise AnsibleActionFail("serving_deploy: env_content is required (the environment file's content)")
    if out["ready_timeout"] < 1:
        raise AnsibleActionFail("serving_deploy: ready_timeout=%d is out of range: allowed an integer >= 1" % out["ready_timeout"])
    if out["build"] is None:
        out["candidates"] = check_candidates(out["candidates"], out["phase"])
    return out


def check_candidates(flat, phase):
    """The flat candidate list (given, or made from build) as the transaction takes it (deploy.py group_candidates)."""
    try:
        grouped = group_candidates(flat)
    except (ValueError, TypeError, AttributeError) as exc:
        raise AnsibleActionFail("serving_deploy: candidates: %s" % exc)
    if phase != "all" and len(grouped) > 1:
        raise AnsibleActionFail("serving_deploy: a multi-node replica deploys one candidate, got %d" % len(grouped))
    if not grouped:
        raise AnsibleActionFail("serving_deploy: candidates is empty: at least the configuration itself is needed")
    for i, cand in enumerate(flat):
        if not isinstance(cand, dict) or not isinstance(cand.get("argv"), list) or not isinstance(cand.get("unit_content"), str):
            raise AnsibleActionFail("serving_deploy: candidates[%d] must be a mapping with argv (a list) and unit_content (a string)" % i)
    return grouped


class ModuleHost(ReplicaHost):
    """The transaction's host interface (plugins/plugin_utils/deploy_host.py), one module call per operation."""

    def __init__(self, action, task_vars, a):
        self.action, self.task_vars, self.a = action, task_vars, a
        self.inventory_name = task_vars.get("inventory_hostname", "")
        self._unchanged = None
        self._ready_look = None    # (clock, serving_ready's result) when inspect found the live server ready

    def _run(self, module, args, task_vars=None):
        start = time.monotonic()
        res = self.action._execute_module(module_name=module, module_args=args, task_vars=task_vars or self.task_vars)
        # -vv shows where a deploy's time goes, one line per module call
        display.vv("%s: %s %s: %.2f s" % (self.inventory_name, module.rpartition(".")[2], args.get("op", ""),
                                          time.monotonic() - start))
        if res.get("failed") and module == "gpuhost.sglang.serving_unit":
            raise AnsibleActionFail(res.get("msg") or "%s failed" % module, result=res)
        return res

    def _unit(self, op, **args):
        a = self.a
        if op != "inspect":
            self._ready_look = None   # the host changed (install, restart, restore, ...): what inspect saw is stale
        base = {"op": op, "unit": a["unit"], "unit_dir": a["unit_dir"], "env_file": a["env_file"], "lkg_dir": a["lkg_dir"]}
        base.update(args)
        return self._run("gpuhost.sglang.serving_unit", base)

    def inspect(self):
        # the first candidate's install previewed in the same call: when it would change nothing (a no-op deploy),
        # install() of that content needs no round trip of its own
        first = (self.a.get("candidates") or [{}])[0].get("unit_content")
        # and readiness looked at once: a no-op's readiness wait from the same clock needs no call of its own
        look = {"health_url": self.a["health_url"]} if self.a.get("phase", "all") == "all" else {}
        if look and self.a["api_key"]:
            look["api_key"] = self.a["api_key"]
        if first is None:
            res = self._unit("inspect", **look)
        else:
            res = self._unit("inspect", unit_content=first, env_content=self.a["env_content"], **look)
            if res.get("preview") and not (res["preview"]["unit_changed"] or res["preview"]["env_changed"]):
                self._unchanged = first
        self._ready_look = (res.get("clock"), res["ready"]) if (res.get("ready") or {}).get("state") == "ready" else None
        return dict((k, res.get(k)) for k in ("lkg", "lkg_problem", "active", "clock", "live_is_lkg", "invocation"))

    def install(self, unit_content):
        unchanged, self._unchanged = self._unchanged, None
        if unchanged is not None and unit_content == unchanged:
            return {"unit_changed": False, "env_changed": False, "diff": None}
        res = self._unit("install", unit_content=unit_content, env_content=self.a["env_content"])
        return {"unit_changed": res.get("unit_changed", False), "env_changed": res.get("env_changed", False),
                "diff": res.get("diff") if res.get("unit_changed") else None}

    def restart(self, stop_unit, unit=None):
        return self._unit("restart", stop_unit=stop_unit, unit=unit or self.a["unit"]).get("since", 0)

    def wait_ready(self, unit, health_url, since, timeout):
        look, self._ready_look = self._ready_look, None
        if look is not None and unit == self.a["unit"] and health_url == self.a["health_url"] and since == look[0]:
            return look[1]   # ready at inspect, nothing done since (the transaction's first readiness wait)
        deadline = time.monotonic() + timeout
        args = {"unit": unit, "health_url": health_url, "since": float(since or 0), "wait": 10}
        if self.a["api_key"]:
            args["api_key"] = self.a["api_key"]
        start = time.monotonic()
        while True:
            res = self._run("gpuhost.sglang.serving_ready", args)
            if res.get("failed"):
                return {"state": "failed", "cls": "deploy_error", "evidence": res.get("msg", "")}
            if res.get("state") != "starting":
                return res
            if time.monotonic() >= deadline:
                res["state"] = "timeout"
                return res
            self.say("%s: still starting after %.0f s (%s)" % (unit, time.monotonic() - start, res.get("health", "")))

    def canary(self, base_url):
        """Every API of the gate in one serving_bench call (probe_apis): the failed ones' messages, in order."""
        c = self.a["canary"]
        apis = c.get("apis") or ["completions"]
        args = {"base_url": base_url, "api": apis[0], "probe_apis": apis, "probes_only": True}
        for key in ("probe_chat_fields", "probe_max_tokens", "probe_think_tokens", "timeout"):
            if c.get(key) is not None:
                args[key] = c[key]
        if self.a["api_key"]:
            args["api_key"] = self.a["api_key"]
        tv = dict(self.task_vars, ansible_python_interpreter=self.a["canary_python"])
        res = self._run("gpuhost.sglang.serving_bench", args, tv)
        if not res.get("failed"):
            return []
        per_api = res.get("apis") or {}
        return [(per_api.get(api) or {}).get("msg") or "the %s canary failed" % api
                for api in res.get("failed_apis") or []] or [res.get("msg") or "the canary failed"]

    def accuracy(self, base_url, action, checks, lkg_file):
        """serving_accuracy on the host under the engine venv's interpreter (the canary's), its reference file in
        the last-known-good directory; a failed gate is a result (fail_on_gate off), a module failure a class."""
        args = {"action": action, "base_url": base_url, "checks": list(checks), "lkg_file": lkg_file,
                "api": (self.a["canary"].get("apis") or ["completions"])[0], "fail_on_gate": False}
        if self.a["api_key"]:
            args["api_key"] = self.a["api_key"]
        res = self._run("gpuhost.sglang.serving_accuracy", args,
                        dict(self.task_vars, ansible_python_interpreter=self.a["canary_python"]))
        if res.get("failed"):
            res = dict(res, passed=False, message=res.get("msg") or "serving_accuracy failed")
            res["class"] = res.get("class") or "accuracy_error"
        return res

    def record(self, meta, timeout_content, remove_paths, forget_unit):
        return self._unit("record", meta=meta, timeout_content=timeout_content, remove_paths=remove_paths,
                          forget_unit=forget_unit, install_dir=self.a["install_dir"] or None,
                          keep_venv=self.a["meta"].get("venv") or None).get("paths", [])

    def restore(self, lkg, restart=True):
        return self._unit("restore", lkg=lkg, restart=restart).get("since", 0)

    def stop(self, unit):
        self._run("gpuhost.sglang.serving_unit", {"op": "stop", "unit": unit})

    def monotonic(self):
        return time.monotonic()

    def sleep(self, seconds):
        time.sleep(seconds)

    def reload(self):
        self._run("gpuhost.sglang.serving_unit", {"op": "reload", "unit": self.a["unit"]})

    def unit_state(self, unit):
        res = self._run("gpuhost.sglang.serving_unit", {"op": "state", "unit": unit})
        return res.get("active", "inactive"), res.get("pid", 0)

    def rank_state(self, unit, state_file):
        res = self._run("gpuhost.sglang.serving_unit", {"op": "state", "unit": unit, "state_file": state_file})
        return {"active": res.get("active", "inactive"), "pid": res.get("pid", 0), "replica": res.get("replica")}

    def wait_port(self, address, port, timeout):
        res = self._run("ansible.builtin.wait_for", {"host": address, "port": port, "timeout": timeout})
        return not res.get("failed")

    def say(self, line):
        try:
            display.display("%s: %s" % (self.inventory_name, line))
        except (OSError, EOFError, ValueError):
            pass   # the controller went away (interrupted under another strategy): the rollback goes on unseen


class ActionModule(ActionBase):
    TRANSFERS_FILES = False
    _VALID_ARGS = frozenset(ARGS)

    def run(self, tmp=None, task_vars=None):
        result = super(ActionModule, self).run(tmp, task_vars)
        del tmp
        a = check_args(dict(self._task.args))
        if a["build"] is not None:
            flat = self._build_candidates(a, task_vars or {})
            if a["render_only"]:
                result.update(changed=False, candidates=[dict(c, command_line=builder.command_line(a["build"], c))
                                                         for c in flat])
                return result
            a["candidates"] = check_candidates(flat, a["phase"])
        elif a["render_only"]:
            raise AnsibleActionFail("serving_deploy: render_only needs build (the candidates' inputs)")
        host = self._deploy_host(task_vars or {}, a)
        spec = dict(a, check_mode=bool(self._task.check_mode), host=host.inventory_name)
        if a["phase"] != "all":
            return self._phase(result, host, spec)
        try:
            tx = DeployTransaction(host, spec)
            with InterruptGuard():
                out = tx.restore_only() if a["restore"] else tx.run()
        except DeployFailed as exc:
            exc.result.pop("diffs", None)
            result.update(exc.result)
            result.update(failed=True, msg=str(exc))
            return result
        except KeyboardInterrupt:   # before the transaction touched anything (restore_only's first look)
            result.update(failed=True, interrupted=True, msg="Interrupted (SIGINT to ansible-playbook) before any change.")
            return result
        diffs = out.pop("diffs", [])
        result.update(out)
        if self._task.diff and diffs:
            result["diff"] = diffs
        return result

    def _build_candidates(self, a, task_vars):
        """The candidates from the role's inputs (plugins/plugin_utils/candidates.py): every option set through the
        engine's parser in one server_args call (a replica: in its first phase only), each unit file from the role's
        template with ExecStart from the very argv the parser checked."""
        b = a["build"]
        try:
            entries = builder.plan(b, one=a["phase"] != "all")
            if a["phase"] in ("all", "prepare") and builder.needs_parser(b, entries):
                self._parse(b, entries, task_vars)
            return builder.finish(b, entries, lambda exec_start: self._render_unit(b["unit_template"], exec_start, task_vars))
        except builder.BuildError as exc:
            raise AnsibleActionFail("serving_deploy: %s" % exc)

    def _parse(self, b, entries, task_vars):
        """One server_args call for every option set; its refusal fails the task before anything on the host changes."""
        start = time.monotonic()
        res = self._execute_module(module_name="gpuhost.sglang.server_args", module_args=builder.parser_args(b, entries),
                                   task_vars=task_vars)
        display.vv("%s: server_args, %d option sets: %.2f s" % (
            task_vars.get("inventory_hostname", ""), len(entries), time.monotonic() - start))
        try:
            warnings = builder.check_parsed(b, entries, res)
        except builder.BuildError as exc:
            raise AnsibleActionFail("serving_deploy: %s" % exc, result=dict(
                (k, res[k]) for k in ("errors", "results", "engine_version") if k in res))
        for w in warnings:
            display.warning("candidate %s: --%s: %s" % (w.get("set"), w.get("option"), w.get("warning")))

    def _render_unit(self, template, exec_start, task_vars):
        """The role's unit template, as the template lookup renders it (the task's variables, ExecStart given)."""
        lookup = self._shared_loader_obj.lookup_loader.get("ansible.builtin.template", loader=self._loader,
                                                           templar=self._templar)
        return lookup.run([template], variables=task_vars, template_vars={"sglang_exec_start": exec_start})[0]

    def _deploy_host(self, task_vars, a):
        """The host the transaction drives: through modules (a test stands a fake one in here)."""
        return ModuleHost(self, task_vars, a)

    def _phase(self, result, host, spec):
        """One phase of a multi-node replica's deploy on this rank (plugins/plugin_utils/deploy.py ReplicaRank);
        ``replica`` in the result is this rank's state, which the next phase reads back through ``peers``."""
        rank = ReplicaRank(host, spec, spec["peers"])
        try:
            with InterruptGuard():
                state, changed = rank.phase(spec["phase"])
        except DeployFailed as exc:
            diffs = exc.result.pop("diffs", [])
            result.update(exc.result)
            result.update(failed=True, msg=str(exc))
            if self._task.diff and diffs:
                result["diff"] = diffs
            return result
        except AnsibleActionFail as exc:
            # a host operation failed: the replica fails (and rolls back) through the phases that follow
            rank.fail("deploy_error", str(exc))
            state, changed = rank.st, True
        except KeyboardInterrupt:   # a second interrupt in a step that ran again: this phase is aborted
            result.update(failed=True, interrupted=True, replica=rank.st,
                          msg="Interrupted twice in phase %s on rank %d: aborted." % (spec["phase"], rank.rank))
            return result
        if spec["phase"] == "report":
            diffs = state.pop("diffs", [])
            result.update(state)
            if self._task.diff and diffs:
                result["diff"] = diffs
            return result
        result.update(changed=changed, replica=state)
        return result

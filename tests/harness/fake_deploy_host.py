# -*- coding: utf-8 -*-
# Copyright: gpuhost.sglang contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""A serving host in memory, for the deploy transaction's tests (plugins/plugin_utils/deploy.py).

It keeps files by path and units by name the way the real host side does (plugins/module_utils/serving/
unit_host.py): a restart reads the unit file as it is then; what the started server does comes from the
unit file's content, a JSON object ``{"name", "port", "behave"}`` where behave is one of
  ok          starts, ready, answers the probes;
  fail_start  exits during startup (class startup_failure, as serving_ready classifies it);
  timeout     never becomes ready;
  incoherent  ready, but the canary fails (NaN or garbage answers);
  inaccurate  ready, the canary passes, but its answers differ from any other configuration's: the accuracy gate
              (``accuracy``) fails it against a reference measured on another unit text.
``interrupt`` = (operation, n) raises KeyboardInterrupt at the n-th call (1-based) of that operation, before
it acts, the way a SIGINT caught by the action plugin during that module call would; a list of such pairs raises
at each (a second interrupt).

``ranks(n)`` makes the hosts of an n-rank multi-node replica: they share ``net`` (one log of every rank's
operations in order); rank 0's dist-init port answers while its unit runs (a server that exits during startup
never listens), a rank >= 1 has joined while its unit and rank 0's run, and rank 0 is ready only when every
rank joined, as the role's peer watch and SGLang's own start-up behave (tests/integration/test_replica_restart_hosts.py).
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import json

from ansible_collections.gpuhost.sglang.plugins.plugin_utils.deploy_host import ReplicaHost


def unit_text(name, behave="ok", port=30000, cls=None):
    """A unit file's content; ``cls``: the failure class serving_ready names for a ``fail_start`` (startup_failure
    when not given), as it reads the journal's signature (a CUDA-graph capture crash, NaN in decode, ...)."""
    data = {"name": name, "port": port, "behave": behave}
    if cls:
        data["cls"] = cls
    return json.dumps(data, sort_keys=True)


class FakeHost(ReplicaHost):
    def __init__(self, unit="sglang.service", env_file="/etc/sglang/sglang.env", env="HOME=/var/lib/sglang\n",
                 lkg_dir="/etc/sglang/last-known-good", unit_dir="/etc/systemd/system", interrupt=None, net=None, rank=0):
        self.unit, self.env_file, self.env, self.lkg_dir, self.unit_dir = unit, env_file, env, lkg_dir, unit_dir
        self.net, self.rank = net, rank
        self.pid = 100
        self.files = {}
        self.units = {}          # name -> {"state": active|failed|activating|inactive, "started_from": unit text}
        self.starts = {}         # name -> number of starts
        self.log = []            # (operation, detail) in order
        self.lines = []          # what the transaction said
        self.interrupt = interrupt
        self.interrupt_next = False   # True: the next operation, whichever it is, raises KeyboardInterrupt once
        self.calls = {}
        self.clock = 1000
        self.mono = 0.0

    # ---- test set-up helpers ------------------------------------------------------------------------------
    def serve(self, text, unit=None, record=True):
        """A host that already serves ``text`` under ``unit``, recorded as last-known-good when ``record``."""
        unit = unit or self.unit
        self.files["%s/%s" % (self.unit_dir, unit)] = text
        self.files[self.env_file] = self.env
        self._start(unit)
        if record:
            self.files[self.lkg_dir + "/meta.json"] = json.dumps(self.meta_for(unit, text))

    def meta_for(self, unit, text):
        port = json.loads(text)["port"]
        return {"argv": ["serve", json.loads(text)["name"]], "unit": unit, "unit_path": "%s/%s" % (self.unit_dir, unit),
                "env_file": self.env_file, "health_url": "http://127.0.0.1:%d/health" % port,
                "base_url": "http://127.0.0.1:%d" % port, "unit_b64": text, "env_b64": self.env, "load_seconds": 5}

    def live(self, unit=None):
        return self.files.get("%s/%s" % (self.unit_dir, unit or self.unit))

    def record_meta(self):
        text = self.files.get(self.lkg_dir + "/meta.json")
        return json.loads(text) if text else None

    def serving(self):
        """{unit: behave} of every unit running now (active or starting)."""
        return dict((u, json.loads(v["started_from"])["behave"]) for u, v in self.units.items()
                    if v["state"] in ("active", "activating"))

    # ---- the host interface -------------------------------------------------------------------------------
    def _op(self, name, detail=""):
        self.calls[name] = self.calls.get(name, 0) + 1
        if self.interrupt_next:
            self.interrupt_next = False
            raise KeyboardInterrupt()
        points = [self.interrupt] if isinstance(self.interrupt, tuple) else (self.interrupt or [])
        if (name, self.calls[name]) in [tuple(p) for p in points]:
            raise KeyboardInterrupt()
        self.log.append((name, detail))
        if self.net is not None:
            self.net["log"].append((self.rank, name, detail))
        self.clock += 1

    def _start(self, unit):
        text = self.files["%s/%s" % (self.unit_dir, unit)]
        behave = json.loads(text)["behave"]
        self.starts[unit] = self.starts.get(unit, 0) + 1
        self.pid += 1
        self.units[unit] = {"state": "failed" if behave == "fail_start" else
                            ("activating" if behave == "timeout" else "active"), "started_from": text,
                            "pid": 0 if behave == "fail_start" else self.pid}

    def inspect(self):
        self._op("inspect")
        text = self.files.get(self.lkg_dir + "/meta.json")
        lkg, problem = {}, ""
        if text is not None:
            try:
                lkg = json.loads(text)
                need = ("unit", "unit_path", "env_file", "health_url", "base_url", "unit_b64", "env_b64")
                if not isinstance(lkg, dict) or any(k not in lkg for k in need):
                    raise ValueError("incomplete")
            except ValueError:
                lkg, problem = {}, "meta.json damaged: treated as no last-known-good"
        live_is_lkg = bool(lkg) and lkg["unit"] == self.unit and self.live() == lkg["unit_b64"] \
            and self.files.get(self.env_file) == lkg["env_b64"]
        return {"lkg": lkg, "lkg_problem": problem, "clock": self.clock, "live_is_lkg": live_is_lkg,
                "active": self.units.get(self.unit, {}).get("state", "inactive"), "invocation": self.invocation()}

    def invocation(self, unit=None):
        """systemd's InvocationID stand-in: one per start of the unit (its pid here), "" when not active."""
        u = self.units.get(unit or self.unit, {})
        return "inv-%d" % u["pid"] if u.get("state") == "active" else ""

    def install(self, unit_content):
        self._op("install", unit_content)
        path = "%s/%s" % (self.unit_dir, self.unit)
        before = self.files.get(path)
        unit_changed = before != unit_content
        env_changed = self.files.get(self.env_file) != self.env
        if not self.check_mode:
            self.files[path] = unit_content
            self.files[self.env_file] = self.env
        return {"unit_changed": unit_changed, "env_changed": env_changed,
                "diff": {"before": before or "", "after": unit_content}}

    check_mode = False

    def restart(self, stop_unit, unit=None):
        unit = unit or self.unit
        self._op("restart", unit)
        since = self.clock
        if stop_unit:
            self.units.pop(stop_unit, None)
        # a port held by another running unit: the new server cannot bind it
        port = json.loads(self.live(unit))["port"]
        for other, v in self.units.items():
            if other != unit and v["state"] == "active" and json.loads(v["started_from"])["port"] == port:
                self._start(unit)
                self.units[unit]["state"] = "failed"
                return since
        self._start(unit)
        return since

    def wait_ready(self, unit, health_url, since, timeout):
        self._op("wait_ready", unit)
        self.mono += 7.0
        state = self.units.get(unit, {}).get("state", "inactive")
        if state == "active" and self.net is not None and not all(
                h.units.get(h.unit, {}).get("state") == "active" for h in self.net["hosts"]):
            return {"state": "timeout", "evidence": "waiting for every rank to join"}
        if state == "active":
            return {"state": "ready"}
        if state == "activating":
            return {"state": "timeout", "evidence": "still loading"}
        cls = json.loads(self.units[unit]["started_from"]).get("cls", "startup_failure") if unit in self.units else "startup_failure"
        return {"state": "failed", "cls": cls, "hint": "The server exited during startup.",
                "evidence": "Traceback ...", "journal_tail": ["RuntimeError: no CUDA device"]}

    def canary(self, base_url):
        self._op("canary", base_url)
        for unit, v in self.units.items():
            data = json.loads(v["started_from"])
            if v["state"] == "active" and "http://127.0.0.1:%d" % data["port"] == base_url:
                return ["probe capital: expected 'Paris', got 'NaN NaN'"] if data["behave"] == "incoherent" else []
        return ["no server answers at %s" % base_url]

    def accuracy(self, base_url, action, checks, lkg_file):
        """serving_accuracy's result against the server at ``base_url``: ``measure`` stores which server answered
        in ``lkg_file``; ``gate`` fails an ``inaccurate`` server against a reference another one measured, and fails
        with accuracy_error when the file is missing (as the module does)."""
        self._op("accuracy", "%s %s" % (action, ",".join(checks)))
        served = [json.loads(v["started_from"]) for v in self.units.values() if v["state"] == "active"]
        served = [d for d in served if "http://127.0.0.1:%d" % d["port"] == base_url]
        if not served:
            return {"failed": True, "class": "accuracy_error", "msg": "no server answers at %s" % base_url}
        if action == "measure":
            self.files[lkg_file] = json.dumps({"checks": list(checks), "measured_on": served[0]["name"]})
            return {"changed": True, "checks": list(checks), "measured": {"requests": 624, "seconds": 3.5}}
        if lkg_file not in self.files:
            return {"failed": True, "class": "accuracy_error", "msg": "lkg_file: %s cannot be read" % lkg_file}
        ref = json.loads(self.files[lkg_file])["measured_on"]
        bad = served[0]["behave"] == "inaccurate" and ref != served[0]["name"]
        return {"passed": not bad, "class": "accuracy_drop" if bad else "ok", "requests": 528, "seconds": 2.5,
                "message": "%s: exact-match score 0.410 vs last-known-good 0.930 (%s)" % ("FAILED" if bad else "passed", ref)}

    def record(self, meta, timeout_content, remove_paths, forget_unit):
        self._op("record", meta.get("candidate"))
        meta = dict(meta, unit_b64=self.live(), env_b64=self.files[self.env_file], invocation=self.invocation())
        new = json.dumps(meta, sort_keys=True)
        changed = []
        old = self.files.get(self.lkg_dir + "/meta.json")
        if old != new:
            self.files[self.lkg_dir + "/meta.json"] = new
            try:
                same = dict(json.loads(old), invocation="") == dict(meta, invocation="")
            except (TypeError, ValueError):   # none, or damaged (not a JSON object)
                same = False
            if not same:
                changed.append("meta.json")   # the invocation alone is bookkeeping, as serving_unit record says
        dropin = "%s/%s.d/10-start-timeout.conf" % (self.unit_dir, self.unit)
        if self.files.get(dropin) != timeout_content:
            self.files[dropin] = timeout_content
            changed.append(dropin)
        for path in remove_paths:
            if self.files.pop(path, None) is not None:
                changed.append(path)
        return changed

    def restore(self, lkg, restart=True):
        self._op("restore", lkg["unit"])
        since = self.clock
        if self.unit != lkg["unit"]:
            self.units.pop(self.unit, None)
            for path in ("%s/%s" % (self.unit_dir, self.unit), self.env_file):
                if path not in (lkg["unit_path"], lkg["env_file"]):
                    self.files.pop(path, None)
        self.files[lkg["unit_path"]] = lkg["unit_b64"]
        self.files[lkg["env_file"]] = lkg["env_b64"]
        if restart:
            self._start(lkg["unit"])
        return since

    def stop(self, unit):
        self._op("stop", unit)
        self.units.pop(unit, None)

    def monotonic(self):
        return self.mono

    def sleep(self, seconds):
        self.mono += seconds

    def reload(self):
        self._op("reload")

    def unit_state(self, unit):
        self._op("unit_state", unit)
        u = self.units.get(unit, {})
        return u.get("state", "inactive"), u.get("pid", 0)

    def _head_runs(self):
        head = self.net["hosts"][0]
        return any(v["state"] in ("active", "activating") for v in head.units.values())

    def wait_port(self, address, port, timeout):
        self._op("wait_port", "%s:%d" % (address, port))
        if not self._head_runs():
            self.mono += timeout
            return False
        return True

    def rank_state(self, unit, state_file):
        self._op("rank_state", unit)
        u = self.units.get(unit, {})
        joined = u.get("state") == "active" and self._head_runs()
        return {"active": u.get("state", "inactive"), "pid": u.get("pid", 0),
                "replica": {"all_joined": joined, "pid": u.get("pid", 0)} if u else None}

    def say(self, line):
        self.lines.append(line)


def ranks(n, **kwargs):
    """The hosts of an n-rank replica, sharing one network and one log."""
    net = {"log": [], "hosts": []}
    net["hosts"] = [FakeHost(net=net, rank=r, **kwargs) for r in range(n)]
    return net["hosts"]

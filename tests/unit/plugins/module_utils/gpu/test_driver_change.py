# -*- coding: utf-8 -*-
# Copyright: gpuhost.sglang contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The driver-change transaction (module_utils/gpu/driver_change.py) against a fake Debian 12 host whose dpkg-query,
apt-mark and apt-cache print what a real one printed (fixtures/driver_change, checked byte for byte below), driven
the way playbooks/driver.yml drives it: every path, and an interrupt before and after every step."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import fnmatch
import json
import os

import pytest

from ansible_collections.gpuhost.sglang.plugins.module_utils.gpu import driver_change as dc

FIX = os.path.join(os.path.dirname(os.path.abspath(__file__)), "fixtures", "driver_change")
PATTERNS = ["nvidia-*", "libnvidia-*", "libcuda*"]
ANCHORS = ["nvidia-driver-cuda", "libcuda1"]
NAMES = ["nvidia-driver-cuda", "libcuda1", "libnvidia-ml1", "nvidia-smi"]
PREF = "/etc/apt/preferences.d/gpuhost-nvidia"
STATE = "/var/lib/gpuhost-sglang/driver-change"
# what tests/fixtures/driver-change-apt-repo.sh's libcuda1 of each version does to the engine
BEHAVIOUR = {"580.95.05": "fine", "580.105.08": "fine", "580.126.09": "slow2x", "580.142": "garbage"}


def fixture(name):
    with open(os.path.join(FIX, name)) as fh:
        return fh.read()


class Interrupted(Exception):
    """ansible-playbook stopped (Ctrl-C, a lost connection): nothing after this point ran."""


class FakeDebian(object):
    """One Debian 12 host (and, with lxc, its container): dpkg's database, the repository, a boot id, files."""

    def __init__(self, version="580.95.05", held=("libcuda1", "libnvidia-ml1", "nvidia-driver-cuda"), lxc=False):
        offered = dc.parse_madison(fixture("apt-cache-madison.txt"))
        self.offered = {"host": offered, "container": offered}
        self.pkgs = {"host": dict((n, [version + "-1", n in held]) for n in NAMES)}
        if lxc:
            self.pkgs["container"] = dict((n, [version + "-1", n in held]) for n in ("libcuda1", "libnvidia-ml1", "nvidia-smi"))
        self.files = {PREF: "".join("\nPackage: %s\nPin: version %s-1\nPin-Priority: 1001\n" % (n, version) for n in sorted(NAMES))}
        self.boot = 1
        self.calls = []
        self.interrupt_on = None     # (where, argv prefix): raise Interrupted once when such a command has run
        self.broken_versions = set()  # apt-get install of these fails in a maintainer script
        self.clock = 1000.0

    # the host interface
    def run(self, argv, where="host"):
        self.calls.append((where, list(argv)))
        res = self._run(argv, where)
        if self.interrupt_on and where == self.interrupt_on[0] and argv[:len(self.interrupt_on[1])] == self.interrupt_on[1]:
            self.interrupt_on = None
            raise Interrupted(argv)
        return res

    def read(self, path):
        if path == "/proc/sys/kernel/random/boot_id":
            return "00000000-0000-4000-8000-%012d\n" % self.boot
        return self.files.get(path)

    def write(self, path, text):
        self.files[path] = text

    def remove(self, path):
        self.files.pop(path, None)

    def now(self):
        self.clock += 1
        return self.clock

    # what the host prints
    def query(self, where, patterns):
        db = self.pkgs[where]
        names = sorted(n for n in db if any(fnmatch.fnmatch(n, p) for p in patterns))
        out = "".join("%s\t%s\t%si \n" % (n, db[n][0], "h" if db[n][1] else "i") for n in names)
        missing = [p for p in patterns if not any(fnmatch.fnmatch(n, p) for n in db)]
        return (1 if missing else 0), out, "".join("dpkg-query: no packages found matching %s\n" % p for p in missing)

    def showhold(self, where):
        return "".join("%s\n" % n for n in sorted(self.pkgs[where]) if self.pkgs[where][n][1])

    def madison(self, where, names):
        # apt-pkg's madison: name and version right-aligned to 10 columns (cmdline/apt-cache.cc, std::setw(10))
        return "".join("%10s | %10s | file:/opt/driver-repo ./ Packages\n" % (n, v)
                       for n in names for v in self.offered[where].get(n, []))

    def _run(self, argv, where):
        db = self.pkgs[where]
        if argv[:2] == ["dpkg-query", "-W"]:
            assert argv[2:4] == ["-f", dc.QUERY_FORMAT]
            return self.query(where, argv[4:])
        if argv[:2] == ["apt-mark", "showhold"]:
            return 0, self.showhold(where), ""
        if argv[:2] in (["apt-mark", "hold"], ["apt-mark", "unhold"]):
            for n in argv[2:]:
                if n in db:
                    db[n][1] = argv[1] == "hold"
            return 0, "".join("%s set on hold.\n" % n for n in argv[2:]) if argv[1] == "hold" else "", ""
        if argv[:2] == ["apt-cache", "madison"]:
            return 0, self.madison(where, argv[2:]), ""
        if argv[:2] == ["apt-get", "remove"]:
            for n in argv[2:]:
                if not n.startswith("-"):
                    db.pop(n, None)
            return 0, "", ""
        if argv[:2] == ["apt-get", "install"]:
            args = [a for i, a in enumerate(argv) if i >= 2 and argv[i - 1] != "-o" and not a.startswith("-")]
            want = dict(a.split("=", 1) for a in args)
            for n, v in sorted(want.items()):
                if v not in self.offered[where].get(n, []):
                    return 100, "", fixture("apt-get-version-not-found.txt").replace("9.9-1", v).replace("nvidia-driver-cuda", n)
            if "--allow-change-held-packages" not in argv and any(db.get(n, ["", False])[1] and db[n][0] != v for n, v in want.items()):
                return 100, "", "E: Held packages were changed and -y was used without --allow-change-held-packages.\n"
            new = dict((n, list(v)) for n, v in db.items())
            for n, v in want.items():
                new[n] = [v, new.get(n, [v, False])[1]]
            # nvidia-driver-cuda depends on the exact same version of the other three (the repository's Depends)
            drv = new.get("nvidia-driver-cuda")
            if drv and any(new.get(n, [""])[0] != drv[0] for n in ("libcuda1", "libnvidia-ml1", "nvidia-smi")):
                return 100, "", "E: Unable to correct problems, you have held broken packages.\n"
            if any(v.split("-")[0] in self.broken_versions for v in want.values()):
                return 100, "", "dpkg: error processing package libcuda1 (--configure):\nE: Sub-process /usr/bin/dpkg returned an error code (1)\n"
            self.pkgs[where] = new
            return 0, "", ""
        raise AssertionError("unexpected command %r" % argv)

    def driver(self, where="host"):
        return dc.upstream(self.pkgs[where]["libcuda1"][0])

    def reboot(self):
        self.boot += 1


PARAMS = {"state_dir": STATE, "target": "580.105.08", "packages": PATTERNS, "anchors": ANCHORS, "mode": "host",
          "preferences_path": PREF, "retry_failed": False, "container_packages": [], "host": "gpu01"}


def gate_results(host, step):
    """What the playbook's tasks register for a step, from what the installed stand-in driver does to the engine."""
    behaviour = BEHAVIOUR[host.driver()]
    if step == "redeploy" or step == "prove":
        if behaviour == "garbage":
            return {"deploy": {"failed": True, "msg": "No candidate passed the gate on gpu01.",
                               "attempts": [{"candidate": 0, "outcome": "failed", "class": "incoherent"}]}}
        return {"deploy": {"failed": False}}
    if step == "gate":
        if behaviour == "slow2x":
            return {"accuracy": {"passed": True, "class": "ok"},
                    "bench": {"failed": False, "failure_class": "regression", "msg": "output_throughput -49.8%"}}
        return {"accuracy": {"passed": True, "class": "ok"}, "bench": {"failed": False}}
    return {"accuracy": {"changed": True}, "bench": {"failed": False}}


class Playbook(object):
    """playbooks/driver.yml's loop over the module: the YAML steps on the fake host and router."""

    def __init__(self, host, params=None, results=gate_results):
        self.h = host
        self.p = dict(PARAMS, **(params or {}))
        self.results = results
        self.router = {"gpu01"}
        self.trace = []
        self.interrupt = None   # (step, "before" | "after")

    def _maybe(self, step, when):
        if self.interrupt == (step, when):
            self.interrupt = None
            raise Interrupted(step)

    def run(self):
        tx = dc.DriverChange(self.h, self.p)
        nxt = tx.plan()["next"]
        while nxt not in ("finish", "none"):
            self.trace.append(nxt)
            self._maybe(nxt, "before")
            if nxt in dc.RUN_STEPS:
                nxt = tx.run(nxt)["next"]
                self._maybe(self.trace[-1], "after")
                continue
            if nxt == "drain":
                self.router.discard("gpu01")
            elif nxt == "rejoin":
                self.router.add("gpu01")
            elif nxt in ("reboot", "reboot_back"):
                self.h.reboot()
            # never in the router while a driver that was not proven is installed
            assert "gpu01" not in self.router or nxt == "rejoin", (nxt, self.trace)
            res = self.results(self.h, nxt) if nxt in ("reference", "redeploy", "gate", "prove") else {}
            self._maybe(nxt, "after")
            nxt = tx.mark(nxt, res)["next"]
        if nxt == "none":
            return {"failed": False, "next": "none"}
        return tx.finish()


def holds(host, where="host"):
    return sorted(n for n, v in host.pkgs[where].items() if v[1])


# ---- what the host prints, as recorded -----------------------------------------------------------------------------
def test_the_fake_prints_what_the_debian_12_host_printed():
    h = FakeDebian()
    assert h.query("host", PATTERNS)[:2] == (0, fixture("dpkg-query-580.95.05-held.txt"))
    assert h.showhold("host") == fixture("apt-mark-showhold-3.txt")
    assert h.madison("host", NAMES) == fixture("apt-cache-madison.txt")
    h.pkgs["host"] = {"libcuda1": ["580.142-1", True], "libnvidia-ml1": ["580.142-1", False], "nvidia-smi": ["580.142-1", False]}
    assert h.query("host", PATTERNS)[1] == fixture("dpkg-query-580.142-after-remove.txt")
    assert h.showhold("host") == fixture("apt-mark-showhold-1.txt")
    assert h.query("host", ["nvidia-kernel-*"]) == (1, "", "dpkg-query: no packages found matching nvidia-kernel-*\n")


def test_parsers_read_the_recorded_output():
    pkgs = dc.parse_query(fixture("dpkg-query-580.95.05-held.txt"))
    assert pkgs == {"libcuda1": {"version": "580.95.05-1", "held": True}, "libnvidia-ml1": {"version": "580.95.05-1", "held": True},
                    "nvidia-driver-cuda": {"version": "580.95.05-1", "held": True},
                    "nvidia-smi": {"version": "580.95.05-1", "held": False}}
    assert dc.parse_holds(fixture("apt-mark-showhold-3.txt")) == ["libcuda1", "libnvidia-ml1", "nvidia-driver-cuda"]
    offered = dc.parse_madison(fixture("apt-cache-madison.txt"))
    assert offered["libcuda1"] == ["580.142-1", "580.126.09-1", "580.105.08-1", "580.95.05-1"]
    assert dc.driver_version(pkgs, ANCHORS) == "580.95.05"
    assert dc.upstream("1:580.142-1") == "580.142"
    # "un " (known, not installed) and "rc " (config files only) are not installed
    assert dc.parse_query("nvidia-smi\t\tun \nlibcuda1\t580.95.05-1\trc \n") == {}


def test_target_plan_moves_the_driver_packages_only_and_two_segment_versions_match():
    rec = {"libcuda1": {"version": "580.95.05-1"}, "libnccl2": {"version": "2.26.2-1+cuda12.8"},
           "nvidia-driver-pinning-580": {"version": "580-1"}}
    offered = {"libcuda1": ["580.142-1", "580.105.08-1"], "nvidia-driver-pinning-590": ["590-1"], "libcuda1x": []}
    plan, removed, errors = dc.target_packages(rec, "580.95.05", "580.142", offered)
    assert plan == {"libcuda1": "580.142-1"} and removed == [] and errors == []
    plan, removed, errors = dc.target_packages(rec, "580.95.05", "590.44.01", dict(offered, libcuda1=["590.44.01-1"]))
    assert plan == {"libcuda1": "590.44.01-1", "nvidia-driver-pinning-590": "590-1"}
    assert removed == ["nvidia-driver-pinning-580"] and errors == []
    _plan, _removed, errors = dc.target_packages(rec, "580.95.05", "580.999", offered)
    assert errors == ["libcuda1: the repositories offer no version 580.999-* (offered: 580.142-1, 580.105.08-1)"]


def test_the_verdict_reads_the_class_of_results_registered_with_failed_when_false():
    # Ansible sets failed to false in a result registered with failed_when: false (playbooks/driver.yml does)
    assert dc.verdict({"bench": {"failed": False, "failure_class": "regression", "msg": "output_throughput -47%"}}) == (
        "regression", "output_throughput -47%")
    assert dc.verdict({"accuracy": {"failed": False, "class": "accuracy_error", "msg": "connection refused"}})[0] == "accuracy_error"
    assert dc.verdict({"accuracy": {"passed": True, "class": "ok"}, "bench": {"failed": False, "failure_class": "ok"}}) == ("", "")
    assert dc.verdict({"accuracy": {"changed": True, "measured": {}}, "bench": {"failure_class": "ok"}}) == ("", "")


def test_preferences_follow_the_plan():
    text = "# managed\n\nPackage: libcuda1\nPin: version 580.95.05-1\nPin-Priority: 1001\n\nPackage: libnccl2\nPin: version 2.26.2-1\n"
    out = dc.rewrite_preferences(text, {"libcuda1": "580.105.08-1"})
    assert "Pin: version 580.105.08-1" in out and "Pin: version 2.26.2-1" in out and out.endswith("\n")
    assert dc.rewrite_preferences(None, {}) is None


# ---- the paths ------------------------------------------------------------------------------------------------------
def test_a_good_driver_is_adopted():
    h = FakeDebian()
    before_pref = h.files[PREF]
    pb = Playbook(h)
    res = pb.run()
    assert not res["failed"], res
    assert pb.trace == ["drain", "record", "reference", "install", "reboot", "redeploy", "gate", "adopt", "rejoin"]
    assert h.driver() == "580.105.08" and all(v[0] == "580.105.08-1" for v in h.pkgs["host"].values())
    assert holds(h) == ["libcuda1", "libnvidia-ml1", "nvidia-driver-cuda"]   # the recorded holds, on the new versions
    assert h.files[PREF] == before_pref.replace("580.95.05-1", "580.105.08-1")
    lkg = json.loads(h.files[STATE + "/last-known-good.json"])
    assert lkg["driver"] == "580.105.08" and lkg["previous"]["driver"] == "580.95.05"
    assert STATE + "/state.json" not in h.files
    hist = [json.loads(line) for line in h.files[STATE + "/history.jsonl"].splitlines()]
    assert hist[-1]["result"] == "adopted" and hist[-1]["rejoined"] and not hist[-1]["pinned_back"]
    assert pb.router == {"gpu01"}
    # a rerun: the target is installed, nothing to do
    assert Playbook(h).run()["next"] == "none"


@pytest.mark.parametrize("target,cls,trace_tail", [
    ("580.126.09", "regression", ["redeploy", "gate", "pin_back", "reboot_back", "prove", "rejoin"]),
    ("580.142", "incoherent", ["redeploy", "pin_back", "reboot_back", "prove", "rejoin"]),
])
def test_a_bad_driver_is_pinned_back_exactly_and_the_host_rejoins_proven(target, cls, trace_tail):
    h = FakeDebian()
    recorded = json.loads(json.dumps(h.pkgs))
    pref = h.files[PREF]
    pb = Playbook(h, {"target": target})
    res = pb.run()
    assert res["failed"] and res["failure_class"] == cls, res
    assert pb.trace[-len(trace_tail):] == trace_tail
    assert h.pkgs == recorded and h.files[PREF] == pref     # versions, holds, preferences as recorded
    assert "Pinned back to 580.95.05" in res["msg"] and "back in the router" in res["msg"], res["msg"]
    assert pb.router == {"gpu01"} and h.boot == 3          # the target's reboot and the pin back's
    # the rerun does not try the failed target again
    with pytest.raises(dc.ChangeError) as exc:
        Playbook(h, {"target": target}).run()
    assert exc.value.cls == "failed_before" and "driver_change_retry_failed=true" in str(exc.value)
    assert Playbook(h, {"target": target, "retry_failed": True}).run()["failure_class"] == cls


def test_a_pinned_back_driver_that_does_not_serve_stays_out_of_the_router():
    h = FakeDebian()

    def results(host, step):
        if step == "prove":
            return {"deploy": {"failed": True, "msg": "ready timeout", "attempts": [
                {"outcome": "failed", "class": "timeout"}]}}
        return gate_results(host, step)
    pb = Playbook(h, {"target": "580.142"}, results)
    res = pb.run()
    assert res["failed"] and res["failure_class"] == "timeout" and res["gate_class"] == "incoherent", res
    assert "rejoin" not in pb.trace and "gpu01" not in pb.router and "stays out of the router" in res["msg"]


def test_rejoin_is_refused_unproven():
    h = FakeDebian()
    tx = dc.DriverChange(h, dict(PARAMS))
    for step in ("drain",):
        tx.plan()
        tx.mark(step, {})
    tx.run("record")
    st = json.loads(h.files[STATE + "/state.json"])
    st["next"] = "rejoin"   # a state that would let an unproven host back in (damaged or edited)
    h.files[STATE + "/state.json"] = json.dumps(st)
    with pytest.raises(dc.ChangeError) as exc:
        tx.mark("rejoin", {})
    assert exc.value.cls == "unproven"


def test_a_target_the_repository_lacks_changes_nothing():
    h = FakeDebian()
    recorded = json.loads(json.dumps(h.pkgs))
    pb = Playbook(h, {"target": "580.999"})
    res = pb.run()
    assert res["failed"] and res["failure_class"] == "not_offered" and h.pkgs == recorded and h.boot == 1
    assert pb.trace == ["drain", "record", "reference", "install", "rejoin"] and "Nothing was installed" in res["msg"]


def test_an_install_that_fails_halfway_is_pinned_back():
    h = FakeDebian()
    h.broken_versions = {"580.105.08"}
    recorded = json.loads(json.dumps(h.pkgs))
    res = Playbook(h).run()
    assert res["failed"] and res["failure_class"] == "install_failed" and h.pkgs == recorded, res


def test_a_failed_reference_before_the_change_touches_nothing():
    h = FakeDebian()

    def results(host, step):
        if step == "reference":
            return {"bench": {"failed": True, "failure_class": "regression", "msg": "slower than its own baseline"}}
        return gate_results(host, step)
    pb = Playbook(h, results=results)
    res = pb.run()
    assert res["failure_class"] == "reference_regression" and pb.trace[-1] == "rejoin" and h.boot == 1, res


def test_lxc_host_module_and_container_userspace_move_in_lockstep_and_back():
    h = FakeDebian(lxc=True)
    lxc = {"mode": "lxc", "container_packages": ["libnvidia-*", "libcuda*", "nvidia-smi"]}
    assert not Playbook(h, lxc).run()["failed"]
    assert h.driver("host") == h.driver("container") == "580.105.08"
    installs = [w for w, argv in h.calls if argv[:2] == ["apt-get", "install"]]
    assert installs == ["host", "container"]      # the host's module first
    recorded = json.loads(json.dumps(h.pkgs))
    res = Playbook(h, dict(lxc, target="580.142")).run()
    assert res["failure_class"] == "incoherent" and h.pkgs == recorded


# ---- bad input and order ---------------------------------------------------------------------------------------------
def test_out_of_order_and_other_targets_are_refused_while_a_change_is_in_progress():
    h = FakeDebian()
    tx = dc.DriverChange(h, dict(PARAMS))
    tx.plan()
    with pytest.raises(dc.ChangeError) as exc:
        tx.run("install")
    assert exc.value.cls == "out_of_order" and "the next one is drain" in str(exc.value)
    with pytest.raises(dc.ChangeError) as exc:
        dc.DriverChange(h, dict(PARAMS, target="580.142")).plan()
    assert exc.value.cls == "in_progress" and "driver_change_version=580.105.08" in str(exc.value)
    with pytest.raises(dc.ChangeError):
        tx.mark("install", {})
    with pytest.raises(dc.ChangeError):
        tx.run("gate")


def test_no_driver_installed_is_an_error():
    h = FakeDebian()
    h.pkgs["host"] = {}
    with pytest.raises(dc.ChangeError) as exc:
        dc.DriverChange(h, dict(PARAMS)).plan()
    assert exc.value.cls == "no_driver"


# ---- interrupts at every step ---------------------------------------------------------------------------------------
PASS_STEPS = ["drain", "record", "reference", "install", "reboot", "redeploy", "gate", "adopt", "rejoin"]
FAIL_STEPS = ["drain", "record", "reference", "install", "reboot", "redeploy", "gate", "pin_back", "reboot_back", "prove", "rejoin"]


def converge(target, step, when, router_restart):
    h = FakeDebian()
    pb = Playbook(h, {"target": target})
    pb.interrupt = (step, when)
    with pytest.raises(Interrupted):
        pb.run()
    if router_restart:   # a router restarted from a static worker list puts the host back in
        pb.router.add("gpu01")
    pb.trace = []
    res = pb.run()
    assert pb.trace[0] == "drain" or pb.trace == ["rejoin"] or not pb.trace, pb.trace
    return h, pb, res


@pytest.mark.parametrize("when", ["before", "after"])
@pytest.mark.parametrize("step", PASS_STEPS)
def test_an_interrupted_good_change_converges_on_the_rerun(step, when):
    h, pb, res = converge("580.105.08", step, when, router_restart=True)
    assert not res["failed"] and h.driver() == "580.105.08" and pb.router == {"gpu01"}, res
    assert holds(h) == ["libcuda1", "libnvidia-ml1", "nvidia-driver-cuda"]
    # the reboot ran once: a rerun after it does not reboot again
    assert h.boot == 2, (step, when, h.boot)
    assert json.loads(h.files[STATE + "/last-known-good.json"])["previous"]["driver"] == "580.95.05"


@pytest.mark.parametrize("when", ["before", "after"])
@pytest.mark.parametrize("step", FAIL_STEPS)
def test_an_interrupted_bad_change_converges_on_the_rerun(step, when):
    h, pb, res = converge("580.126.09", step, when, router_restart=True)
    assert res["failed"] and res["failure_class"] == "regression", res
    assert h.driver() == "580.95.05" and holds(h) == ["libcuda1", "libnvidia-ml1", "nvidia-driver-cuda"]
    assert pb.router == {"gpu01"} and h.boot == 3, (step, when, h.boot)


@pytest.mark.parametrize("argv", [["apt-get", "install"], ["apt-mark", "hold"]])
def test_an_interrupt_inside_the_install_converges(argv):
    for target in ("580.105.08", "580.126.09"):
        h = FakeDebian()
        h.interrupt_on = ("host", argv)
        pb = Playbook(h, {"target": target})
        with pytest.raises(Interrupted):
            pb.run()
        res = pb.run()
        assert h.driver() == ("580.105.08" if target == "580.105.08" else "580.95.05"), (target, res)
        assert holds(h) == ["libcuda1", "libnvidia-ml1", "nvidia-driver-cuda"] and pb.router == {"gpu01"}


def test_a_damaged_state_file_is_named():
    h = FakeDebian()
    h.files[STATE + "/state.json"] = "{half"
    with pytest.raises(dc.ChangeError) as exc:
        dc.DriverChange(h, dict(PARAMS)).plan()
    assert "state.json is not JSON" in str(exc.value)

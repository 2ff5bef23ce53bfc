from __future__ import absolute_import, division, print_function

__metaclass__ = type

import os

import pytest
import yaml

from ansible_collections.gpuhost.sglang.plugins.module_utils.serving import sandbox

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..", "..", "..", ".."))
with open(os.path.join(ROOT, "roles", "sglang", "vars", "sandbox.yml")) as f:
    GROUPS = yaml.safe_load(f)["sglang_sandbox_groups"]
DEVICES = ["/dev/nvidiactl", "char-nvidia"]

# What systemd-run --wait and the unit's journal say when LXC refuses a property: the lines of lxc/lxc #4052
# ("Failed to set up mount namespacing ... Failed at step NAMESPACE ... status=226/NAMESPACE"), as systemd 252 prints
# them for a transient unit (measured on a Debian 12 test host).
NAMESPACE = ("Running as unit: gpuhost-sandbox-probe-4711-3.service\nFinished with result: exit-code\n"
             "Main processes terminated with: code=exited/status=226\nService runtime: 3ms\n"
             "gpuhost-sandbox-probe-4711-3.service: Failed to set up mount namespacing: "
             "/run/systemd/unit-root/proc/sys/kernel/domainname: No such file or directory\n"
             "gpuhost-sandbox-probe-4711-3.service: Failed at step NAMESPACE spawning /bin/true: No such file or directory\n")
UNKNOWN = "Unknown assignment: ProtectProc=invisible\n"


def host(refuses=(), broken=False, together_only=False):
    """A fake systemd-run: fails a run that carries a refused line (or everything, or only the whole set)."""
    calls = []

    def run(lines):
        calls.append(list(lines))
        if broken:
            return False, "Failed to connect to bus: No such file or directory"
        if together_only and len(lines) > 5:
            return False, NAMESPACE
        for line in lines:
            if line in refuses:
                return False, UNKNOWN if line.startswith("ProtectProc") else NAMESPACE
        return True, ""
    return run, calls


def groups():
    return sandbox.expand(GROUPS, DEVICES)


def test_device_allow_lines_go_with_device_policy():
    dp = [g for g in groups() if g["name"] == "DevicePolicy"][0]
    assert dp["lines"] == ["DevicePolicy=closed", "DeviceAllow=/dev/nvidiactl rw", "DeviceAllow=char-nvidia rw"]
    assert all(len(g["lines"]) == 1 for g in groups() if g["name"] != "DevicePolicy")


def test_a_host_that_takes_everything_starts_one_transient_unit():
    run, calls = host()
    res = sandbox.decide(groups(), run)
    assert len(calls) == 1 and res["dropped"] == [] and res["error"] == "" and res["warnings"] == []
    assert res["kept"] == [g["name"] for g in GROUPS]


def test_refused_properties_are_dropped_with_a_warning_naming_each():
    run, calls = host(refuses={"ProtectProc=invisible", "DevicePolicy=closed"})
    res = sandbox.decide(groups(), run, "drop", "sglang.service")
    assert [d["name"] for d in res["dropped"]] == ["DevicePolicy", "ProtectProc"]
    assert "ProtectProc" not in res["kept"] and "ProtectSystem" in res["kept"]
    # all together, none at all, each alone, then the kept ones together
    assert len(calls) == 1 + 1 + len(GROUPS) + 1 and calls[1] == []
    dp, pp = res["warnings"]
    assert dp.startswith("this host refuses DevicePolicy=closed and its 2 DeviceAllow= lines")
    assert "status=226" in dp and "Failed to set up mount namespacing" in dp
    assert pp.startswith("this host refuses ProtectProc=invisible") and "Unknown assignment" in pp
    assert "sglang_sandbox_refused=drop" in pp
    assert "a first deploy has no last-known-good to fall back to" in pp and "stops the failing unit" in pp
    # the probe units' own names never reach the evidence (the unit file would change on every run)
    assert all("4711" not in d["evidence"] for d in res["dropped"]), res["dropped"]


def test_policy_fail_names_each_refused_property_and_the_first_deploy():
    run, _calls = host(refuses={"ProtectProc=invisible", "ProtectKernelTunables=yes"})
    res = sandbox.decide(groups(), run, "fail", "sglang.service")
    assert res["error"].startswith("this host refuses the sandboxing properties ProtectKernelTunables=yes, "
                                   "ProtectProc=invisible of sglang.service")
    assert "sglang_sandbox_refused=fail" in res["error"] and "allowed: drop" in res["error"]
    assert "a first deploy has no last-known-good" in res["error"]


def test_no_transient_unit_at_all_is_an_error_not_a_drop():
    run, _calls = host(broken=True)
    res = sandbox.decide(groups(), run)
    assert res["error"].startswith("systemd-run cannot start a transient unit on this host even without sandboxing")
    assert res["dropped"] == []


def test_a_set_that_fails_only_together_is_an_error():
    run, _calls = host(together_only=True)
    res = sandbox.decide(groups(), run)
    assert "fail together on this host" in res["error"] and "nothing can be dropped safely" in res["error"]


@pytest.mark.parametrize("call,msg", [
    (lambda: sandbox.decide(groups(), host()[0], "maybe"), "sglang_sandbox_refused='maybe' is not known: allowed drop, fail"),
    (lambda: sandbox.check_groups([{"name": "X", "lines": ["not a line"]}]), "groups[0] (X): 'not a line' is not a unit line"),
    (lambda: sandbox.check_groups([]), "groups must be a non-empty list"),
    (lambda: sandbox.expand(GROUPS, ["/dev/a b"]), "device_allow must be a list of device nodes or classes"),
])
def test_bad_arguments(call, msg):
    with pytest.raises(sandbox.SandboxError) as exc:
        call()
    assert str(exc.value).startswith(msg)


def test_a_kept_decision_answers_the_same_request_on_the_same_boot_only():
    """A no-op deploy starts no transient unit: the decision is kept with its key; another boot of the container
    (its configuration changed), another systemd-run or other properties probe again; an error is never kept."""
    run, _calls = host(refuses={"ProtectProc=invisible"})
    res = sandbox.decide(groups(), run)
    key = sandbox.cache_key(groups(), "sglang", "drop", ["systemd-run"], "boot-1\n", "/usr/bin/systemd-run:1:2")
    text = sandbox.cache_record(key, res)
    again = sandbox.cached(text, key)
    assert again["dropped"] == res["dropped"] and again["warnings"] == res["warnings"] and again["error"] == ""
    for other in (sandbox.cache_key(groups(), "sglang", "drop", ["systemd-run"], "boot-2", "/usr/bin/systemd-run:1:2"),
                  sandbox.cache_key(groups(), "sglang", "drop", ["systemd-run"], "boot-1", "/usr/bin/systemd-run:9:9"),
                  sandbox.cache_key(groups()[1:], "sglang", "drop", ["systemd-run"], "boot-1", "/usr/bin/systemd-run:1:2"),
                  sandbox.cache_key(groups(), "sglang", "fail", ["systemd-run"], "boot-1", "/usr/bin/systemd-run:1:2")):
        assert sandbox.cached(text, other) is None
    for damaged in (None, "", "{torn", "[]", '{"key": "%s"}' % key):
        assert sandbox.cached(damaged, key) is None
    broken, _calls = host(broken=True)
    with pytest.raises(sandbox.SandboxError, match="not kept"):
        sandbox.cache_record(key, sandbox.decide(groups(), broken))

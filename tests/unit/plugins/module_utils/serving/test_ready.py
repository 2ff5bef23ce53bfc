from __future__ import absolute_import, division, print_function

__metaclass__ = type

import pytest

from ansible_collections.gpuhost.sglang.plugins.module_utils.serving import ready as sr

SIGS = sr.compile_signatures(sr.DEFAULT_SIGNATURES)
ACTIVE = {"ActiveState": "active", "SubState": "running", "NRestarts": "0"}


@pytest.mark.parametrize("line,cls", [
    ("RuntimeError: probability tensor contains either `inf`, `nan` or element < 0", "nan"),
    ("CUDA error: device-side assert triggered", "nan"),
    ("Exception: Capture cuda graph failed: CUDA error: operation not permitted", "cuda_graph_capture"),
    ("RuntimeError: TllmGenFmhaRunner: Unsupported architecture", "unsupported_arch"),
    ("torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB", "out_of_memory"),
    ("Health check failed. Server couldn't get a response from detokenizer for last 20 seconds.", "wedged_detokenizer"),
    ("Scheduler hit an exception: Traceback (most recent call last):", "scheduler_exception"),
    ("Initialization failed. warmup error: ...", "warmup_failed"),
    ("launch_server.py: error: unrecognized arguments: --nsa-decode-backend trtllm", "bad_arguments"),
    ("OSError: [Errno 98] error while attempting to bind on address ('127.0.0.1', 30000): address already in use", "port_in_use"),
])
def test_signature_classes(line, cls):
    res = sr.classify(["INFO starting", line, "INFO after"], ACTIVE, SIGS, healthy=True)
    assert res["state"] == sr.STATE_FAILED
    assert res["cls"] == cls
    assert res["evidence"] == line


def test_nan_wins_over_other_signatures_and_health():
    lines = ["Capture cuda graph failed", "probability tensor contains either inf, nan or element < 0"]
    assert sr.classify(lines, ACTIVE, SIGS, healthy=True)["cls"] == "nan"


def test_ready_needs_health():
    assert sr.classify(["loading"], ACTIVE, SIGS, healthy=False)["state"] == sr.STATE_STARTING
    assert sr.classify(["loading"], ACTIVE, SIGS, healthy=True)["state"] == sr.STATE_READY


@pytest.mark.parametrize("unit", [
    {"ActiveState": "failed", "SubState": "failed", "NRestarts": "0", "ExecMainStatus": "1"},
    {"ActiveState": "activating", "SubState": "auto-restart", "NRestarts": "1", "ExecMainStatus": "1"},
    {"ActiveState": "active", "SubState": "running", "NRestarts": "2", "ExecMainStatus": "0"},
])
def test_startup_failure_from_unit_state(unit):
    res = sr.classify(["Traceback", "ValueError: boom"], unit, SIGS, healthy=False)
    assert res["state"] == sr.STATE_FAILED
    assert res["cls"] == "startup_failure"
    assert res["evidence"] == "ValueError: boom"


def test_inactive_after_a_start_is_not_running():
    lines = ["Starting sglang.service - server...", "Deactivated successfully."]
    res = sr.classify(lines, {"ActiveState": "inactive", "NRestarts": "0"}, SIGS)
    assert (res["state"], res["cls"]) == (sr.STATE_FAILED, "not_running")


@pytest.mark.parametrize("active", ["inactive", "deactivating"])
def test_restart_not_begun_yet_is_starting(active):
    # right after a non-blocking restart the old process is still stopping: no "Starting" line yet
    lines = ["Stopping sglang.service - server...", "INFO:     Shutting down"]
    res = sr.classify(lines, {"ActiveState": active, "NRestarts": "0"}, SIGS)
    assert res["state"] == sr.STATE_STARTING


def test_bad_signature_is_reported():
    with pytest.raises(ValueError, match="bad log signature"):
        sr.compile_signatures([{"class": "x", "pattern": "("}])
    with pytest.raises(ValueError):
        sr.compile_signatures([{"pattern": "x"}])


def test_parse_systemctl_show():
    props = sr.parse_systemctl_show("ActiveState=active\nSubState=running\nNRestarts=0\nExecMainStatus=0\n")
    assert props == {"ActiveState": "active", "SubState": "running", "NRestarts": "0", "ExecMainStatus": "0"}


def test_wait_polls_until_ready_and_reports_tail():
    calls = {"n": 0}
    now = [0.0]

    def health(url, api_key=None):
        calls["n"] += 1
        return (calls["n"] >= 3, "HTTP 200" if calls["n"] >= 3 else "HTTP 503")

    res = sr.wait("u", "http://x/health", 0, SIGS, wait_seconds=60, clock=lambda: now[0],
                  sleep=lambda s: now.__setitem__(0, now[0] + s),
                  journal=lambda u, s: ["poll %d" % i for i in range(calls["n"] + 1)],
                  state=lambda u: dict(ACTIVE), health=health)
    assert res["state"] == sr.STATE_READY
    assert calls["n"] == 3
    # the journal was read before the third (successful) health probe
    assert res["journal_tail"] == ["poll 0", "poll 1", "poll 2"]


def test_wait_returns_starting_at_deadline():
    now = [0.0]
    res = sr.wait("u", "http://x/health", 0, SIGS, wait_seconds=5, clock=lambda: now[0],
                  sleep=lambda s: now.__setitem__(0, now[0] + s),
                  journal=lambda u, s: ["Loading weights"], state=lambda u: dict(ACTIVE),
                  health=lambda url, api_key=None: (False, "refused"))
    assert res["state"] == sr.STATE_STARTING
    assert res["evidence"] == "Loading weights"
    assert now[0] >= 5


def test_main_process_gone_while_start_post_waits():
    unit = {"ActiveState": "activating", "SubState": "start-post", "NRestarts": "0", "MainPID": "0", "ExecMainStatus": "1"}
    res = sr.classify(["Traceback", "ImportError: no torch"], unit, SIGS)
    assert (res["state"], res["cls"]) == (sr.STATE_FAILED, "startup_failure")
    still_loading = dict(unit, MainPID="4242")
    assert sr.classify(["Loading"], still_loading, SIGS)["state"] == sr.STATE_STARTING


def test_seccomp_kill_is_named():
    res = sr.classify(["sglang.service: Main process exited, code=killed, status=31/SYS"], ACTIVE, SIGS)
    assert res["cls"] == "seccomp"

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import os
import re

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


# Journal of transformers serve started with --device cuda on a CPU-only host (measured on a test host).
CUDA_ON_CPU = [
    "Starting sglang.service - OpenAI-compatible inference server sglang (transformers 5.24.0)...",
    "Traceback (most recent call last):",
    '  File "/opt/sglang/venv/lib/python3.11/site-packages/torch/cuda/__init__.py", line 403, in _lazy_init',
    '    raise AssertionError("Torch not compiled with CUDA enabled")',
    "AssertionError: Torch not compiled with CUDA enabled",
    "sglang.service: Main process exited, code=exited, status=1/FAILURE",
    "sglang.service: Failed with result 'exit-code'.",
    "Traceback (most recent call last):",
    "AssertionError: Torch not compiled with CUDA enabled",
    "sglang.service: Main process exited, code=exited, status=1/FAILURE",
]


def test_startup_failure_quotes_the_engine_error_once():
    unit = {"ActiveState": "activating", "SubState": "auto-restart", "NRestarts": "1", "ExecMainStatus": "1"}
    res = sr.classify(CUDA_ON_CPU, unit, SIGS)
    assert res["cls"] == "startup_failure"
    assert res["evidence"] == "AssertionError: Torch not compiled with CUDA enabled"


def test_signature_evidence_adds_engine_errors_deduplicated():
    lines = ["ERROR: [Errno 98] error while attempting to bind on address ('127.0.0.1', 30000): address already in use",
             "ERROR: [Errno 98] error while attempting to bind on address ('127.0.0.1', 30000): address already in use",
             "OSError: [Errno 98] Address already in use",
             "sglang.service: Main process exited, code=exited, status=1/FAILURE"]
    res = sr.classify(lines, ACTIVE, SIGS)
    assert res["cls"] == "port_in_use"
    assert res["evidence"] == lines[0] + " | " + lines[2]


def test_missing_module_is_the_evidence():
    lines = ["Traceback (most recent call last):", '  File "<frozen runpy>", line 198, in _run_module_as_main',
             "ModuleNotFoundError: No module named 'transformers'",
             "sglang.service: Main process exited, code=exited, status=1/FAILURE"]
    res = sr.classify(lines, {"ActiveState": "failed", "NRestarts": "0"}, SIGS)
    assert res["evidence"] == "ModuleNotFoundError: No module named 'transformers'"


def test_without_engine_errors_the_last_line_stays_the_evidence():
    lines = ["INFO loading", "sglang.service: Main process exited, code=killed, status=9/KILL"]
    res = sr.classify(lines, {"ActiveState": "failed", "NRestarts": "0"}, SIGS)
    assert res["evidence"] == lines[-1]


def test_hints_never_name_an_option_the_role_manages():
    managed = ["model-path", "served-model-name", "host", "port", "api-key"]
    for sig in sr.DEFAULT_SIGNATURES:
        for opt in managed:
            # as a flag, as an option name to set, or through sglang_options (the role sets these itself)
            pattern = r"--%s\b|\b%s=|set %s\b|sglang_options" % ((re.escape(opt),) * 3)
            assert not re.search(pattern, sig["hint"]), (sig["class"], opt)


REAL = os.path.join(os.path.dirname(__file__), "..", "..", "..", "..", "fixtures", "sglang-0.5.17")
RUNNING = {"ActiveState": "active", "SubState": "running", "NRestarts": "0"}


@pytest.mark.parametrize("log,cls,words", [
    ("startup-fail-fa3.log", "unsupported_arch", "Can not import FA3 in sgl_kernel"),
    ("startup-fail-memfrac.log", "no_kv_cache_memory", "Raise --mem-fraction-static above 0.001"),
])
def test_real_sglang_startup_failures_are_named(log, cls, words):
    # SGLang 0.5.17 on an H200: the process stays up after the scheduler's exception, so the journal decides
    with open(os.path.join(REAL, log)) as f:
        lines = f.read().splitlines()
    v = sr.classify(lines, RUNNING, sr.compile_signatures(sr.DEFAULT_SIGNATURES), healthy=False)
    assert v["state"] == "failed" and v["cls"] == cls, v
    assert words in v["evidence"]


def test_real_sglang_good_start_is_ready():
    with open(os.path.join(REAL, "startup-good.log")) as f:
        lines = f.read().splitlines()
    v = sr.classify(lines, RUNNING, sr.compile_signatures(sr.DEFAULT_SIGNATURES), healthy=True)
    assert v["state"] == "ready", v

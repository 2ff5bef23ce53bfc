# -*- coding: utf-8 -*-
# Copyright: gpuhost.sglang contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Readiness and failure classification for an inference server run as a systemd unit.

Pure functions (``classify``, ``parse_systemctl_show``) are unit-tested; ``probe_health`` and
``read_journal`` do the I/O and are exercised against real units on the test hosts.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import re
import subprocess
import time

from ansible.module_utils.six.moves.urllib.error import HTTPError, URLError
from ansible.module_utils.urls import open_url

STATE_READY = "ready"
STATE_STARTING = "starting"
STATE_FAILED = "failed"

# Order matters: the first class whose pattern matches wins, so specific signatures come first.
DEFAULT_SIGNATURES = [
    {"class": "nan", "pattern": r"probability tensor contains either .?inf.?, .?nan.?|device-side assert triggered",
     "hint": "Decode produced NaN/inf: try another attention backend pair for this GPU architecture (see the profile evidence)."},
    {"class": "cuda_graph_capture", "pattern": r"Capture cuda graph failed|CUDA graph capture failed",
     "hint": "CUDA graph capture failed: lower cuda-graph-max-bs or disable CUDA graphs for this backend."},
    {"class": "unsupported_arch", "pattern": r"Unsupported architecture|no kernel image is available for execution on the device",
     "hint": "A kernel of this build does not support this GPU architecture: choose a backend listed for it in the profile."},
    # SGLang 0.5.17 with a kernel package that lacks FA3 (a trimmed sglang-kernel; recorded on an H200):
    # "ImportError: Can not import FA3 in sgl_kernel. Please check your installation."
    {"class": "unsupported_arch", "pattern": r"Can not import FA3 in sgl_kernel|cannot import name '\w+_ops' from 'sgl_kernel'",
     "hint": "The installed kernel package has no kernel for this attention backend on this GPU: choose another "
             "backend (triton needs none) or install the full kernel package."},
    # SGLang 0.5.17, --mem-fraction-static 0.0001 (recorded on an H200): "ValueError: Loaded weights leave no GPU
    # memory for the KV cache under --mem-fraction-static=0.0001. Raise --mem-fraction-static above 0.001 ..."
    {"class": "no_kv_cache_memory", "pattern": r"leave no GPU memory for the KV cache",
     "hint": "mem-fraction-static is too small to hold the weights and a KV cache: raise it (the engine's message "
             "names the minimum)."},
    {"class": "out_of_memory", "pattern": r"CUDA out of memory|OutOfMemoryError|Not enough memory",
     "hint": "Out of GPU memory: lower mem-fraction-static (0.92 left headroom on the reference box) or max-running-requests."},
    {"class": "wedged_detokenizer", "pattern": r"Server couldn't get a response from detokenizer",
     "hint": "The detokenizer stopped answering: see the scheduler log above this line."},
    {"class": "scheduler_exception", "pattern": r"Scheduler hit an exception",
     "hint": "The scheduler crashed: the traceback is in the journal excerpt."},
    {"class": "warmup_failed", "pattern": r"Initialization failed\. warmup error",
     "hint": "The server's own warmup request failed."},
    {"class": "bad_arguments", "pattern": r"error: unrecognized arguments|error: argument |usage: .*\n.*error:",
     "hint": "The engine rejected its command line: run the flag validator (server_args) against this version."},
    {"class": "seccomp", "pattern": r"Main process exited, code=killed, status=31/SYS",
     "hint": "The unit's SystemCallFilter killed the server (SIGSYS): a system call it needs is filtered."},
    {"class": "port_in_use", "pattern": r"address already in use|Errno 98",
     "hint": "Another process holds the port (ss -ltnp on the host names it): stop it or choose another sglang_port."},
    {"class": "model_load", "pattern": r"OSError: .*(config\.json|does not appear to have a file)|No such file or directory: .*model|Can't load",
     "hint": "The model could not be loaded from its path."},
]


def compile_signatures(signatures):
    """Return [(class, compiled regex, hint)] from a list of dicts; raises ValueError naming a bad pattern."""
    compiled = []
    for sig in signatures:
        try:
            compiled.append((sig["class"], re.compile(sig["pattern"], re.IGNORECASE), sig.get("hint", "")))
        except (KeyError, re.error) as exc:
            raise ValueError("bad log signature %r: %s" % (sig, exc))
    return compiled


def parse_systemctl_show(text):
    """Parse ``systemctl show -p A,B`` output into a dict."""
    props = {}
    for line in text.splitlines():
        if "=" in line:
            key, value = line.split("=", 1)
            props[key.strip()] = value.strip()
    return props


# The engine's own error lines: a Python exception line ("RuntimeError: Torch not compiled with CUDA enabled",
# "ModuleNotFoundError: No module named 'x'", "torch.OutOfMemoryError: ...") or an error-level log line.
# systemd's own lines about the unit ("Main process exited, code=...", "Failed with result ...") name no cause.
_ENGINE_ERROR = re.compile(r"^\s*(?:[A-Za-z_][\w.]*\.)?[A-Z]\w*(?:Error|Exception|Interrupt|Exit)\b(?::.*)?$"
                           r"|\bERROR\b|\berror: |\bFATAL\b|\bCRITICAL\b")
_SYSTEMD_LINE = re.compile(r"^(?:\S+\.service: |Started |Starting |Stopped |Stopping |Failed to start |Deactivated )")
MAX_EVIDENCE_LINES = 4


def engine_errors(lines, first=None):
    """The engine's own error lines, deduplicated in order (``first`` leads), at most MAX_EVIDENCE_LINES."""
    found = [first] if first else []
    for line in lines:
        text = line.strip()
        if not text or _SYSTEMD_LINE.match(text) or not _ENGINE_ERROR.search(text):
            continue
        if text not in [f.strip() for f in found]:
            found.append(text)
    return found[:MAX_EVIDENCE_LINES]


def _evidence(lines, first=None):
    errors = engine_errors(lines, first)
    if errors:
        return " | ".join(e.strip() for e in errors)
    return lines[-1] if lines else None


def classify(lines, unit, signatures, healthy=False):
    """Decide the server state from its journal lines since the (re)start and the unit's systemd state.

    ``unit`` is a dict from ``parse_systemctl_show`` (ActiveState, SubState, NRestarts, Result, ExecMainStatus).
    Returns dict(state, cls, hint, evidence) where evidence is the matching journal line followed by the
    engine's own error lines, deduplicated (or the last line when the engine logged no error, None without lines).
    A matching failure signature wins even if the HTTP endpoint still answers: a server that logged a
    device-side NaN failure is not healthy.
    """
    text = "\n".join(lines)
    for cls, regex, hint in signatures:
        match = regex.search(text)
        if match:
            line = _line_of(text, match.start())
            return {"state": STATE_FAILED, "cls": cls, "hint": hint, "evidence": _evidence(lines, line)}
    active = unit.get("ActiveState", "")
    sub = unit.get("SubState", "")
    restarts = _int(unit.get("NRestarts", "0"))
    # activating with no main process: it exited and only ExecStartPost is left waiting
    main_gone = active == "activating" and sub == "start-post" and unit.get("MainPID", "") == "0"
    if active == "failed" or (active == "activating" and sub == "auto-restart") or restarts > 0 or main_gone:
        return {"state": STATE_FAILED, "cls": "startup_failure",
                "hint": "The process exited before it was ready (exit status %s, %d restarts)."
                        % (unit.get("ExecMainStatus", "?"), restarts),
                "evidence": _evidence(lines)}
    if active in ("inactive", "deactivating"):
        # A restart queued without blocking first stops the old process: until systemd logs "Starting ..."
        # for this unit, inactive means "not started yet", not "exited".
        if not any(line.startswith("Starting ") for line in lines):
            return {"state": STATE_STARTING, "cls": None, "hint": "", "evidence": lines[-1] if lines else None}
        return {"state": STATE_FAILED, "cls": "not_running", "hint": "The unit stopped after it was started.",
                "evidence": _evidence(lines)}
    if healthy:
        return {"state": STATE_READY, "cls": None, "hint": "", "evidence": None}
    return {"state": STATE_STARTING, "cls": None, "hint": "", "evidence": lines[-1] if lines else None}


def _line_of(text, pos):
    start = text.rfind("\n", 0, pos) + 1
    end = text.find("\n", pos)
    return text[start:end if end >= 0 else len(text)]


def _int(value):
    try:
        return int(value)
    except (TypeError, ValueError):
        return 0


def probe_health(url, timeout=5.0, api_key=None):
    """GET url; return (ok, detail). ok is True only for HTTP 200."""
    headers = {"Authorization": "Bearer %s" % api_key} if api_key else {}
    try:
        resp = open_url(url, headers=headers, timeout=timeout, use_proxy=False)
        try:
            return resp.status == 200, "HTTP %d" % resp.status
        finally:
            resp.close()
    except HTTPError as exc:
        return False, "HTTP %d" % exc.code
    except (URLError, OSError) as exc:
        return False, str(getattr(exc, "reason", exc))


def read_journal(unit, since_epoch, run=subprocess.run):
    """Journal lines of ``unit`` since ``since_epoch`` (seconds, to the microsecond: systemd.time(7) takes
    "@SECONDS.FRACTION"), message text only."""
    cmd = ["journalctl", "-u", unit, "--since", "@%.6f" % float(since_epoch), "-o", "cat", "--no-pager", "-q"]
    res = run(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, universal_newlines=True, check=False)
    return [line for line in res.stdout.splitlines() if line.strip()]


def unit_state(unit, run=subprocess.run):
    cmd = ["systemctl", "show", "-p", "ActiveState,SubState,NRestarts,Result,ExecMainStatus,MainPID", unit]
    res = run(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, universal_newlines=True, check=False)
    return parse_systemctl_show(res.stdout)


def wait(unit, health_url, since_epoch, signatures, wait_seconds, interval=1.0, api_key=None,
         clock=time.monotonic, sleep=time.sleep, journal=read_journal, state=unit_state, health=probe_health):
    """Poll for up to ``wait_seconds``; return the classification plus the journal tail and timings."""
    deadline = clock() + wait_seconds
    while True:
        lines = journal(unit, since_epoch)
        props = state(unit)
        ok, detail = health(health_url, api_key=api_key) if props.get("ActiveState") == "active" else (False, "unit not active")
        result = classify(lines, props, signatures, healthy=ok)
        result["health"] = detail
        result["journal_tail"] = lines[-30:]
        result["unit"] = props
        if result["state"] != STATE_STARTING or clock() >= deadline:
            return result
        sleep(interval)

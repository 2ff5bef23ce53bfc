#!/usr/bin/env python3
# Copyright: gpuhost.sglang contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Deep liveness check of an OpenAI-compatible server, run by gpuhost-liveness.timer every few minutes.

A server can answer /health while it streams garbage or NaN (vllm #24207, #39863; sglang #33187 with PR #33206,
where NaN rows were sanitised into fluent-looking garbage). This check reads the answers: it sends known-answer
probes at temperature 0 and one NaN probe (the first probe again, with logprobs) through the serving API, judges
them as serving_bench's coherence gate does (expected word within the first 12 words, its numeral counts; no U+FFFD
or control characters; no NaN/inf logprob, no "Out of range float values" refusal), writes the verdict for
node_exporter's textfile collector (tmp file + rename, as the Debian prometheus-node-exporter README.textfile
shows) and, when ``restart`` is on, restarts the server's unit once it failed ``restart_after`` runs in a row,
logging why.

Usage: gpuhost-liveness.py CONFIG.json        (keys: see DEFAULTS; the API key comes from $GPUHOST_API_KEY)
Exit status: 0 when the server passed, 1 when it failed, 2 on a bad config.
Stdlib only (it runs with the engine venv's python and has nothing to import from the collection).
"""
import json
import math
import os
import re
import subprocess
import sys
import time
from urllib.error import HTTPError, URLError
from urllib.request import Request, urlopen

DEFAULTS = {
    "base_url": "http://127.0.0.1:30000",
    "health_path": "/health",
    "api": "completions",            # completions | chat
    "model": None,                   # None: the first entry of /v1/models
    "probes": [],                    # [{"name", "prompt", "question", "expect"}]
    "nan_probe": True,
    "max_tokens": 32,
    "chat_fields": {},               # extra fields of chat requests (e.g. ask a reasoning model not to think)
    "timeout": 60.0,
    "textfile": "/var/lib/prometheus/node-exporter/gpuhost_liveness.prom",
    "state_file": "/var/lib/gpuhost-liveness/state.json",
    "unit": "sglang.service",
    "restart": False,
    "restart_after": 2,
    "restart_command": ["systemctl", "restart"],
    # only an active unit is probed: a unit that is starting (loading the model), stopping or stopped is systemd's
    # and the deploy's business, and probing it would count a deploy as failures
    "active_command": ["systemctl", "is-active", "--quiet"],
}
FAILURE_CLASSES = ("ok", "health", "connect", "http", "empty", "garbage", "incoherent", "nan")

NUMBER_WORDS = dict((w, str(i)) for i, w in enumerate(
    "zero one two three four five six seven eight nine ten eleven twelve thirteen fourteen fifteen sixteen "
    "seventeen eighteen nineteen twenty".split()))
NUMERAL_WORDS = dict((v, k) for k, v in NUMBER_WORDS.items())
WORD_RE = re.compile(r"\w+", re.U)


def log(msg):
    sys.stderr.write("gpuhost-liveness: %s\n" % msg)
    sys.stderr.flush()


def load_config(path):
    with open(path) as fh:
        cfg = dict(DEFAULTS, **json.load(fh))
    errs = []
    if cfg["api"] not in ("completions", "chat"):
        errs.append("api must be completions or chat, got %r" % cfg["api"])
    if not cfg["probes"]:
        errs.append("probes must list at least one known-answer probe, got %r" % cfg["probes"])
    if not isinstance(cfg["restart_after"], int) or cfg["restart_after"] < 1:
        errs.append("restart_after must be an int >= 1, got %r" % cfg["restart_after"])
    if errs:
        raise ValueError("; ".join(errs))
    return cfg


# -- judging ---------------------------------------------------------------------------------------------------

def expect_found(text, expect, window_words=12):
    forms = [expect] + [f for f in (NUMBER_WORDS.get(expect.lower()), NUMERAL_WORDS.get(expect)) if f]
    head = " ".join(WORD_RE.findall(text)[:window_words])
    return re.search(r"(?<!\w)(?:%s)(?!\w)" % "|".join(re.escape(f) for f in forms), head, re.I | re.U) is not None


def garbage(text):
    """U+FFFD (bytes that are not text) or control characters other than whitespace."""
    return "\ufffd" in text or any(ord(c) < 32 and c not in "\t\n\r" for c in text)


def has_nan(values):
    return any(isinstance(v, float) and (math.isnan(v) or math.isinf(v)) for v in values)


def judge_probe(probe, answer):
    """(class, detail) of one known-answer probe's answer."""
    if answer is None or not answer.strip():
        return "empty", "empty answer"
    if garbage(answer):
        return "garbage", "U+FFFD or control characters in %r" % answer[:80]
    if not expect_found(answer, probe["expect"]):
        return "incoherent", "expected %r, got %r" % (probe["expect"], answer[:80])
    return "ok", None


# -- HTTP ------------------------------------------------------------------------------------------------------

def http(url, body=None, key=None, timeout=60.0):
    """(status, body bytes, error text). status 0: no HTTP answer (connection refused, timeout)."""
    headers = {"Content-Type": "application/json"}
    if key:
        headers["Authorization"] = "Bearer " + key
    data = json.dumps(body).encode() if body is not None else None
    try:
        with urlopen(Request(url, data=data, headers=headers), timeout=timeout) as resp:
            return resp.status, resp.read(), None
    except HTTPError as exc:
        return exc.code, exc.read() or b"", "HTTP %d" % exc.code
    except (URLError, OSError) as exc:
        return 0, b"", str(getattr(exc, "reason", exc))


def parse_stream(raw, api):
    """Text and logprobs of a streamed (SSE) or plain JSON completion. json.loads reads NaN and Infinity."""
    text, logprobs = [], []
    chunks = []
    body = raw.decode("utf-8", "replace")
    if body.lstrip().startswith("{"):
        chunks.append(json.loads(body))
    else:
        for line in body.splitlines():
            if line.startswith("data:") and line[5:].strip() not in ("", "[DONE]"):
                chunks.append(json.loads(line[5:].strip()))
    for obj in chunks:
        for choice in obj.get("choices") or []:
            if api == "chat":
                part = (choice.get("delta") or choice.get("message") or {}).get("content")
                lp = choice.get("logprobs") or {}
                logprobs += [c.get("logprob") for c in lp.get("content") or []]
            else:
                part = choice.get("text")
                lp = choice.get("logprobs") or {}
                logprobs += list(lp.get("token_logprobs") or [])
            if part:
                text.append(part)
    return "".join(text), logprobs


def payload(cfg, model, probe, logprobs=False):
    if cfg["api"] == "chat":
        body = dict(cfg["chat_fields"], model=model, messages=[{"role": "user", "content": probe.get("question") or probe["prompt"]}])
        if logprobs:
            body.update(logprobs=True, top_logprobs=1)
    else:
        body = {"model": model, "prompt": probe.get("prompt") or probe["question"]}
        if logprobs:
            body["logprobs"] = 1
    body.update(max_tokens=cfg["max_tokens"], temperature=0.0, stream=True)
    return body


def check(cfg, key=None, clock=time.monotonic):
    """Run the probes once: {"passed", "class", "detail", "probes": {name: passed}, "nan", "seconds",
    "requests"}."""
    t0 = clock()
    out = {"passed": False, "class": "ok", "detail": None, "probes": {}, "nan": None, "requests": 0}

    def fail(cls, detail):
        out.update({"class": cls, "detail": detail, "seconds": round(clock() - t0, 3)})
        return out

    base = cfg["base_url"].rstrip("/")
    status, dummy, err = http(base + cfg["health_path"], key=key, timeout=cfg["timeout"])
    out["requests"] += 1
    if status != 200:
        return fail("health" if status else "connect", "%s: %s" % (cfg["health_path"], err or "HTTP %d" % status))
    model = cfg["model"]
    if not model:
        status, raw, err = http(base + "/v1/models", key=key, timeout=cfg["timeout"])
        out["requests"] += 1
        try:
            model = json.loads(raw.decode())["data"][0]["id"] if status == 200 else None
        except (ValueError, KeyError, IndexError):
            model = None
        if not model:
            return fail("http", "/v1/models: %s" % (err or "no model listed"))
    path = "/v1/chat/completions" if cfg["api"] == "chat" else "/v1/completions"
    worst = None
    for probe in cfg["probes"]:
        status, raw, err = http(base + path, payload(cfg, model, probe), key=key, timeout=cfg["timeout"])
        out["requests"] += 1
        if status != 200:
            out["probes"][probe["name"]] = False
            worst = worst or ("connect" if not status else "http", "%s: %s %s" % (
                probe["name"], err, raw[:200].decode("utf-8", "replace")))
            continue
        try:
            answer, dummy = parse_stream(raw, cfg["api"])
        except ValueError as exc:
            answer, cls, detail = None, "http", "malformed response: %s" % exc
        else:
            cls, detail = judge_probe(probe, answer)
        out["probes"][probe["name"]] = cls == "ok"
        if cls != "ok":
            worst = worst or (cls, "%s: %s" % (probe["name"], detail))
    if cfg["nan_probe"]:
        status, raw, err = http(base + path, payload(cfg, model, cfg["probes"][0], logprobs=True), key=key,
                                timeout=cfg["timeout"])
        out["requests"] += 1
        text = raw.decode("utf-8", "replace").lower()
        if status == 400 and ("out of range float" in text or " nan" in text):
            out["nan"] = True  # the server could not serialise NaN/inf logprobs
        elif status == 200:
            try:
                out["nan"] = has_nan(parse_stream(raw, cfg["api"])[1])
            except ValueError:
                out["nan"] = None
        if out["nan"]:
            worst = ("nan", "NaN probe: NaN or inf logprobs (%s)" % (err or "in the stream"))
    if worst:
        return fail(*worst)
    out["passed"] = True
    out["seconds"] = round(clock() - t0, 3)
    return out


# -- state, restart decision, textfile -------------------------------------------------------------------------

def decide(state, result, cfg, now):
    """New state and the restart reason (None: no restart). A restart resets the count, so a server that stays
    broken is restarted once per ``restart_after`` failed runs, not on every run."""
    state = dict(state or {})
    state.setdefault("restarts", 0)
    if result["passed"]:
        state["consecutive_failures"] = 0
        state["last_success"] = now
        return state, None
    state["consecutive_failures"] = int(state.get("consecutive_failures") or 0) + 1
    state["last_failure"] = {"time": now, "class": result["class"], "detail": result["detail"]}
    if cfg["restart"] and state["consecutive_failures"] >= cfg["restart_after"]:
        reason = "%s failed %d liveness checks in a row (last: %s: %s)" % (
            cfg["unit"], state["consecutive_failures"], result["class"], result["detail"])
        state["consecutive_failures"] = 0
        state["restarts"] += 1
        state["last_restart"] = {"time": now, "reason": reason}
        return state, reason
    return state, None


def _label(value):
    return str(value).replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"')


def render_prom(cfg, result, state, now, restarted):
    """The node_exporter textfile (Prometheus text format 0.0.4)."""
    unit = 'unit="%s"' % _label(cfg["unit"])
    lines = [
        "# HELP gpuhost_liveness_unit_active 1 when the unit was active and was probed; 0: not probed this run.",
        "# TYPE gpuhost_liveness_unit_active gauge",
        "gpuhost_liveness_unit_active{%s} %d" % (unit, 0 if result["class"] == "inactive" else 1),
        "# HELP gpuhost_liveness_passed 1 when the last deep liveness check passed (known answers, no garbage, no NaN).",
        "# TYPE gpuhost_liveness_passed gauge",
        "gpuhost_liveness_passed{%s} %d" % (unit, 1 if result["passed"] else 0),
        "# HELP gpuhost_liveness_failure Class of the last check's failure (1 for the class that failed).",
        "# TYPE gpuhost_liveness_failure gauge",
    ]
    for cls in FAILURE_CLASSES[1:]:
        lines.append('gpuhost_liveness_failure{%s,class="%s"} %d' % (unit, cls, 1 if result["class"] == cls else 0))
    lines += [
        "# HELP gpuhost_liveness_probe_passed Per known-answer probe: 1 when its answer was right.",
        "# TYPE gpuhost_liveness_probe_passed gauge",
    ]
    for name, ok in sorted(result["probes"].items()):
        lines.append('gpuhost_liveness_probe_passed{%s,probe="%s"} %d' % (unit, _label(name), 1 if ok else 0))
    lines += [
        "# HELP gpuhost_liveness_nan 1 when the NaN probe saw NaN/inf logprobs, 0 when not, -1 when not judged.",
        "# TYPE gpuhost_liveness_nan gauge",
        "gpuhost_liveness_nan{%s} %d" % (unit, -1 if result["nan"] is None else int(bool(result["nan"]))),
        "# HELP gpuhost_liveness_consecutive_failures Failed checks in a row (reset by a pass or a restart).",
        "# TYPE gpuhost_liveness_consecutive_failures gauge",
        "gpuhost_liveness_consecutive_failures{%s} %d" % (unit, state.get("consecutive_failures", 0)),
        "# HELP gpuhost_liveness_restarts_total Restarts this check made.",
        "# TYPE gpuhost_liveness_restarts_total counter",
        "gpuhost_liveness_restarts_total{%s} %d" % (unit, state.get("restarts", 0)),
        "# HELP gpuhost_liveness_restart_enabled 1 when the check restarts a failing server.",
        "# TYPE gpuhost_liveness_restart_enabled gauge",
        "gpuhost_liveness_restart_enabled{%s} %d" % (unit, 1 if cfg["restart"] else 0),
        "# HELP gpuhost_liveness_requests Requests the last check sent.",
        "# TYPE gpuhost_liveness_requests gauge",
        "gpuhost_liveness_requests{%s} %d" % (unit, result["requests"]),
        "# HELP gpuhost_liveness_duration_seconds How long the last check took.",
        "# TYPE gpuhost_liveness_duration_seconds gauge",
        "gpuhost_liveness_duration_seconds{%s} %s" % (unit, result.get("seconds", 0)),
        "# HELP gpuhost_liveness_last_run_timestamp_seconds When the last check ran (unix time).",
        "# TYPE gpuhost_liveness_last_run_timestamp_seconds gauge",
        "gpuhost_liveness_last_run_timestamp_seconds{%s} %d" % (unit, now),
    ]
    if restarted:
        lines.append("# the check restarted %s in this run" % cfg["unit"])
    return "\n".join(lines) + "\n"


def atomic_write(path, text, mode=0o644):
    """Write next to the target and rename over it: node_exporter never reads half a file."""
    directory = os.path.dirname(path) or "."
    os.makedirs(directory, exist_ok=True)
    tmp = os.path.join(directory, ".%s.%d.tmp" % (os.path.basename(path), os.getpid()))
    with open(tmp, "w") as fh:
        fh.write(text)
        fh.flush()
        os.fsync(fh.fileno())
    os.chmod(tmp, mode)
    os.rename(tmp, path)


def read_state(path):
    try:
        with open(path) as fh:
            return json.load(fh)
    except (OSError, ValueError):
        return {}


def run(cfg, key=None, now=None, runner=subprocess.call):
    """One check: probe, decide, restart when due, write state and textfile. Returns (result, state, restarted)."""
    now = int(now if now is not None else time.time())
    if cfg["active_command"] and runner(list(cfg["active_command"]) + [cfg["unit"]]) != 0:
        log("%s is not active (starting, stopping or stopped): nothing probed" % cfg["unit"])
        state = read_state(cfg["state_file"])
        result = {"passed": False, "class": "inactive", "detail": None, "probes": {}, "nan": None, "requests": 0,
                  "seconds": 0}
        atomic_write(cfg["textfile"], render_prom(cfg, result, state, now, False))
        return result, state, False
    result = check(cfg, key)
    state, reason = decide(read_state(cfg["state_file"]), result, cfg, now)
    restarted = False
    if result["passed"]:
        log("%s passed: %d probes, NaN probe %s, %.2f s" % (
            cfg["unit"], len(result["probes"]), result["nan"], result["seconds"]))
    else:
        in_a_row = cfg["restart_after"] if reason else state.get("consecutive_failures", 0)
        log("%s FAILED (%s): %s; %d in a row" % (cfg["unit"], result["class"], result["detail"], in_a_row))
    if reason:
        log("restarting %s: %s" % (cfg["unit"], reason))
        rc = runner(list(cfg["restart_command"]) + [cfg["unit"]])
        restarted = rc == 0
        state["last_restart"]["rc"] = rc
        if rc != 0:
            log("restart of %s failed: %s exited %d" % (cfg["unit"], " ".join(cfg["restart_command"]), rc))
    atomic_write(cfg["state_file"], json.dumps(state, indent=1, sort_keys=True) + "\n", 0o600)
    atomic_write(cfg["textfile"], render_prom(cfg, result, state, now, restarted))
    return result, state, restarted


def main(argv=None):
    argv = sys.argv[1:] if argv is None else argv
    if len(argv) != 1:
        log("usage: gpuhost-liveness.py CONFIG.json")
        return 2
    try:
        cfg = load_config(argv[0])
    except (OSError, ValueError) as exc:
        log("bad config %s: %s" % (argv[0], exc))
        return 2
    result, dummy, dummy2 = run(cfg, key=os.environ.get("GPUHOST_API_KEY") or None)
    return 0 if result["passed"] or result["class"] == "inactive" else 1


if __name__ == "__main__":
    sys.exit(main())

# -*- coding: utf-8 -*-
# Copyright: gpuhost.sglang contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""serving_bench's input checks: each message names the one wrong variable, its value and the allowed values, and
a concurrency the controller cannot open (file descriptors, ephemeral ports) is refused before any request."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

from ansible_collections.gpuhost.sglang.plugins.module_utils.bench import coherence
from ansible_collections.gpuhost.sglang.plugins.module_utils.bench import metrics as bench_metrics

MAX_CONCURRENCY = 100000


def argument_spec():
    """serving_bench's options (the module's argument_spec; here so that BenchRun's defaults can be had without
    Ansible)."""
    return dict(
        base_url=dict(type="str", required=True),
        model=dict(type="str"),
        api=dict(type="str", choices=["completions", "chat"], default="completions"),
        concurrency=dict(type="raw", default=1),
        num_prompts=dict(type="int"),
        input_len=dict(type="int", default=128),
        output_len=dict(type="int", default=64),
        dataset=dict(type="path"),
        tokenizer=dict(type="path"),
        ignore_eos=dict(type="bool", default=True),
        temperature=dict(type="float", default=0.0),
        seed=dict(type="int", default=0),
        warmup=dict(type="int", default=2),
        warmup_per_slot=dict(type="float", default=1.0),
        warmup_output_len=dict(type="int", default=16),
        probes=dict(type="list", elements="dict"),
        run_probes=dict(type="bool", default=True),
        probes_only=dict(type="bool", default=False),
        probe_apis=dict(type="list", elements="str", choices=["completions", "chat"]),
        probe_max_tokens=dict(type="int", default=32, no_log=False),
        probe_think_tokens=dict(type="int", default=1024, no_log=False),
        probe_chat_fields=dict(type="dict", default={}),
        probe_min_pass=dict(type="float", default=1.0, no_log=False),
        nan_probe=dict(type="bool", default=True),
        load_checks=dict(type="list", elements="str", choices=list(coherence.DETECTORS),
                         default=list(coherence.DETECTORS)),
        max_incoherent_rate=dict(type="float", default=0.05),
        max_error_rate=dict(type="float", default=0.0),
        require_usage=dict(type="bool", default=True),
        api_key=dict(type="str", no_log=True),
        timeout=dict(type="float", default=300.0),
        stall_timeout=dict(type="float", default=60.0),
        allow_queue_bound=dict(type="bool", default=False),
        server_metrics=dict(type="str", choices=["auto", "require", "off"], default="auto"),
        server_metrics_tolerance=dict(type="float", default=0.02),
        client_processes=dict(type="int", default=0),
        client_lag_threshold_ms=dict(type="float", default=1.0),
        client_cpu_threshold=dict(type="float", default=0.9),
        trials=dict(type="int", default=1),
        tolerance=dict(type="float", default=0.1),
        min_abs_ms=dict(type="float", default=1.0),
        min_duration_s=dict(type="float", default=5.0),
        min_requests=dict(type="int", default=32),
        noise_factor=dict(type="float", default=3.0),
        max_threshold=dict(type="float", default=0.4),
        confirm_regressions=dict(type="int", default=1),
        gate_metrics=dict(type="list", elements="str", choices=sorted(bench_metrics.GATE_METRICS),
                          default=["output_throughput", "ttft_ms.p50", "tpot_ms.p50"]),
        fingerprint=dict(type="dict", default={}),
        baseline_dir=dict(type="path"),
        update_baseline=dict(type="bool", default=False),
        report_dir=dict(type="path"),
        run_id=dict(type="str"),
        mode=dict(type="str", choices=["run", "report", "finalize"], default="run"),
        gpu_health=dict(type="dict"),
        gpu_health_after=dict(type="dict"),
        plots=dict(type="bool", default=True),
    )


def api_key_error(key):
    """The message for an api_key that cannot go into an ``Authorization: Bearer`` header, or None. The key is
    never echoed (the module marks it no_log)."""
    if key and not all(32 < ord(c) < 127 for c in key):
        return ("api_key is invalid: allowed printable ASCII without spaces or line breaks (it is sent as "
                "'Authorization: Bearer <api_key>'; the value is not shown)")
    return None


def parse_concurrency(value):
    """int, list of ints or comma string -> sorted list of ints in [1, 100000]; ValueError naming the allowed values
    (duplicates are refused)."""
    allowed = "an int >= 1, a list of ints, or a comma-separated string like '1,16,256'"
    if isinstance(value, bool) or value is None:
        raise ValueError("concurrency must be %s, got %r" % (allowed, value))
    if isinstance(value, int):
        items = [value]
    elif isinstance(value, str):
        items = [x.strip() for x in value.strip().strip("[]").split(",") if x.strip()]
    elif isinstance(value, (list, tuple)):
        items = list(value)
    else:
        raise ValueError("concurrency must be %s, got %r" % (allowed, value))
    out = []
    for it in items:
        try:
            if isinstance(it, bool) or (isinstance(it, float) and not it.is_integer()):
                raise ValueError()
            n = int(it)
        except (TypeError, ValueError):
            raise ValueError("concurrency must be %s; %r is not an int" % (allowed, it))
        if n < 1 or n > MAX_CONCURRENCY:
            raise ValueError("concurrency values must be between 1 and %d, got %d" % (MAX_CONCURRENCY, n))
        out.append(n)
    if not out:
        raise ValueError("concurrency must be %s, got an empty value" % allowed)
    dups = sorted(set(n for n in out if out.count(n) > 1))
    if dups:
        # each level is measured once per run; trials are how a level is repeated (8,8 once failed against itself)
        raise ValueError("concurrency=%r has duplicate levels: %s (each level runs once per run; use trials to "
                         "repeat one)" % (value, ", ".join(str(n) for n in dups)))
    return sorted(out)


def validate(p):
    """Early, precise input errors (variable name and allowed values)."""
    errs = []

    def need(name, ok, allowed):
        if not ok:
            errs.append("%s=%r is invalid: allowed %s" % (name, p[name], allowed))

    for name in ("input_len", "output_len", "probe_max_tokens", "trials"):
        need(name, p[name] >= 1, "an int >= 1")
    need("probe_think_tokens", p["probe_think_tokens"] >= 0, "an int >= 0 (0 = no second attempt)")
    need("num_prompts", p["num_prompts"] is None or p["num_prompts"] >= 1, "an int >= 1 (or unset for 2 x concurrency)")
    need("warmup", p["warmup"] >= 0, "an int >= 0 (0 = no warm-up)")
    need("warmup_per_slot", 0 <= p["warmup_per_slot"] <= 100, "a number from 0 to 100 (warm-up requests per slot)")
    need("warmup_output_len", p["warmup_output_len"] >= 1, "an int >= 1")
    need("client_processes", p["client_processes"] >= 0, "an int >= 0 (0 = auto)")
    for name in ("probe_min_pass", "max_incoherent_rate", "max_error_rate", "client_cpu_threshold"):
        need(name, 0.0 <= p[name] <= 1.0, "a number between 0 and 1")
    need("tolerance", 0.0 <= p["tolerance"] <= 10.0, "a number between 0 and 10 (0.1 = 10%)")
    for name in ("timeout", "stall_timeout", "client_lag_threshold_ms"):
        need(name, p[name] > 0, "a number > 0")
    need("min_abs_ms", p["min_abs_ms"] >= 0, "a number >= 0")
    need("min_duration_s", p["min_duration_s"] >= 0, "a number of seconds >= 0 (0 = no minimum)")
    need("min_requests", p["min_requests"] >= 1, "an int >= 1")
    need("noise_factor", p["noise_factor"] >= 0, "a number >= 0 (0 = tolerance only)")
    need("max_threshold", 0.0 < p["max_threshold"] <= 10.0, "a number in (0, 10] (0.4 = 40%)")
    need("confirm_regressions", 0 <= p["confirm_regressions"] <= 5, "an int from 0 to 5 (0 = no re-measurement)")
    need("temperature", p["temperature"] >= 0, "a number >= 0")
    url = p["base_url"] or ""
    need("base_url", url.startswith("http://") or url.startswith("https://"), "an http:// or https:// URL")
    key_err = api_key_error(p.get("api_key"))
    if key_err:
        errs.append(key_err)
    for i, probe in enumerate(p["probes"] or []):
        if not isinstance(probe, dict) or not isinstance(probe.get("expect"), str) or not probe.get("expect") or not (
                isinstance(probe.get("prompt"), str) or isinstance(probe.get("question"), str)):
            errs.append("probes[%d] is invalid: each probe needs a non-empty string 'expect' and a string 'prompt' "
                        "and/or 'question' (optional 'name')" % i)
    if p["mode"] == "report" and not (p["report_dir"] and p["run_id"]):
        errs.append("mode=report needs report_dir and run_id")
    if p["mode"] == "finalize" and not (p["report_dir"] and p["run_id"] and p.get("gpu_health_after")):
        errs.append("mode=finalize needs report_dir, run_id and gpu_health_after (gpu_facts' health read after the "
                    "run), got report_dir=%r run_id=%r gpu_health_after=%s" % (
                        p["report_dir"], p["run_id"], "set" if p.get("gpu_health_after") else "unset"))
    for name in ("gpu_health", "gpu_health_after"):
        value = p.get(name)
        if value and value.get("state") not in ("ok", "degraded", "unknown"):
            errs.append("%s must be gpu_facts' health result (state ok, degraded or unknown), got state=%r" % (
                name, value.get("state")))
    return errs


# One socket (one file descriptor, one local port towards the server) per stream, plus the interpreter's own
# files, the shard pipes and aiohttp's resolver: 64 is the headroom (unverified, measured: a c=1 run holds ~20).
FD_HEADROOM = 64


def open_file_limit(want):
    """(soft, hard) RLIMIT_NOFILE after raising the soft limit towards ``want`` (never above hard)."""
    try:
        import resource  # pylint: disable=import-outside-toplevel
    except ImportError:  # pragma: no cover - not on Linux
        return None, None
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft != resource.RLIM_INFINITY and soft < want:
        target = want if hard == resource.RLIM_INFINITY else min(want, hard)
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
            soft = target
        except (ValueError, OSError):
            pass
    inf = resource.RLIM_INFINITY
    return (None if soft == inf else soft), (None if hard == inf else hard)


def ephemeral_ports(path="/proc/sys/net/ipv4/ip_local_port_range"):
    """(low, high) of the local port range the kernel picks client ports from (Linux), or None."""
    try:
        with open(path) as f:
            lo, hi = [int(x) for x in f.read().split()[:2]]
        return lo, hi
    except (OSError, ValueError):
        return None


def capacity_errors(levels):
    """Concurrency the controller cannot open, refused before any request (names the limit and how to raise it)."""
    errs = []
    top = max(levels)
    want = top + FD_HEADROOM
    soft, hard = open_file_limit(want)
    if soft is not None and soft < want:
        errs.append("concurrency=%d needs about %d open files (one socket per stream + %d) but the file-descriptor "
                    "limit (RLIMIT_NOFILE) is %d (hard limit %s): raise it (ulimit -n, LimitNOFILE=, "
                    "/etc/security/limits.conf) or lower concurrency" % (top, want, FD_HEADROOM, soft, hard))
    ports = ephemeral_ports()
    if ports is not None:
        n = ports[1] - ports[0] + 1
        if top > n:
            errs.append("concurrency=%d needs %d local ports towards one server but net.ipv4.ip_local_port_range "
                        "%d-%d gives %d ports: widen the range (sysctl) or lower concurrency" % (
                            top, top, ports[0], ports[1], n))
    return errs

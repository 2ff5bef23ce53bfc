# -*- coding: utf-8 -*-
# Copyright: gpuhost.sglang contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The server's own limits (SGLang /get_server_info) and which concurrency levels they make queue-bound.

SGLang answers GET /get_server_info (deprecated alias of /server_info in newer releases) with, in one object
(sgl-project/sglang python/sglang/srt/entrypoints/http_server.py, get_server_info -> server_info):
  - every server argument (dataclasses.asdict(server_args)): "max_running_requests" as configured (null = chosen
    by the scheduler), "dp_size";
  - the scheduler's init info (python/sglang/srt/managers/scheduler.py get_init_info): "max_total_num_tokens"
    (KV cache capacity in tokens), "max_req_input_len";
  - "internal_states": one per data-parallel rank (scheduler.py get_internal_state), each with
    "effective_max_running_requests_per_dp" = the scheduler's max_running_requests after its own capping
    (SGLang docs, basic_usage/native_api: example output `"effective_max_running_requests_per_dp": 128`).
A level above the running-request cap measures the server's waiting queue, not its throughput: the surplus
requests wait for a slot, their TTFT is queue time, and a stall watchdog that starts at the send can fire.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import json

PATHS = ("/get_server_info", "/server_info")


def _int(v):
    if isinstance(v, bool) or v is None:
        return None
    try:
        v = int(v)
    except (TypeError, ValueError):
        return None
    return v if v > 0 else None


def limits_from_server_info(info):
    """The /get_server_info object -> {"max_running_requests", "max_total_num_tokens", "dp_size", "from"}.

    max_running_requests is the effective cap over all DP ranks (sum of effective_max_running_requests_per_dp)
    where the server reports it, else the configured server argument; None where neither is known."""
    if not isinstance(info, dict):
        raise ValueError("server info is not a JSON object")
    states = info.get("internal_states")
    per_dp = []
    if isinstance(states, list):
        per_dp = [_int(s.get("effective_max_running_requests_per_dp")) for s in states if isinstance(s, dict)]
        per_dp = [v for v in per_dp if v]
    dp_size = _int(info.get("dp_size")) or 1
    if per_dp:
        mrr = sum(per_dp)
        src = "internal_states[*].effective_max_running_requests_per_dp"
    else:
        mrr = _int(info.get("max_running_requests"))
        src = "max_running_requests" if mrr else None
    return {"max_running_requests": mrr, "max_total_num_tokens": _int(info.get("max_total_num_tokens")),
            "dp_size": dp_size, "from": src, "version": info.get("version")}


def fetch(get_json, base_url, api_key=None, timeout=10.0):
    """get_json(url, api_key, timeout) -> (status, body). Returns (limits, None) or (None, reason)."""
    base = base_url.rstrip("/")
    if base.endswith("/v1"):
        base = base[:-3]
    reasons = []
    for path in PATHS:
        try:
            status, body = get_json(base + path, api_key, timeout)
        except Exception as e:  # pylint: disable=broad-except
            return None, "GET %s: %s: %s" % (path, type(e).__name__, e)
        if status == 200:
            try:
                return limits_from_server_info(json.loads(body)), None
            except ValueError as e:
                return None, "GET %s: %s" % (path, e)
        reasons.append("GET %s: HTTP %d" % (path, status))
        if status != 404:
            break
    return None, "; ".join(reasons)


def queue_bound(levels, limits, input_len=None, output_len=None):
    """Levels the server cannot run at once: {level: reason} (running-request cap, or KV tokens of all in flight)."""
    out = {}
    mrr = (limits or {}).get("max_running_requests")
    kv = (limits or {}).get("max_total_num_tokens")
    per_req = (input_len or 0) + (output_len or 0)
    for c in levels:
        if mrr and c > mrr:
            out[c] = "above max_running_requests %d: %d requests wait in the server's queue" % (mrr, c - mrr)
        elif kv and per_req and c * per_req > kv:
            out[c] = ("%d requests x %d tokens = %d > max_total_num_tokens %d: the KV cache holds about %d at once"
                      % (c, per_req, c * per_req, kv, kv // per_req))
    return out


def verdict(levels, limits, allow, input_len=None, output_len=None, option="allow_queue_bound"):
    """-> (error or None, warnings, bound). Error when a level is queue-bound and `allow` is false."""
    if limits is None:
        return None, [], {}
    bound = queue_bound(levels, limits, input_len, output_len)
    if not bound:
        return None, [], bound
    text = "; ".join("c=%d %s" % (c, bound[c]) for c in sorted(bound))
    if not allow:
        return ("concurrency levels %s are queue-bound (%s): they would measure the server's queue, not its "
                "throughput. Raise the server's max-running-requests (the server arguments), drop those levels, or "
                "set %s=true to measure them anyway." % (", ".join(str(c) for c in sorted(bound)), text, option)), [], bound
    return None, ["queue-bound levels measured on request (%s=true): %s" % (option, text)], bound

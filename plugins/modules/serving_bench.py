#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: gpuhost.sglang contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
---
module: serving_bench
short_description: Coherence-gated streaming benchmark with stored baselines for OpenAI-compatible servers
version_added: "0.1.0"
description:
  - Benchmarks an OpenAI-compatible server (SGLang first; vLLM and transformers serve work too) by streaming
    C(/v1/completions) or C(/v1/chat/completions) at one or more concurrency levels, with sglang bench_serving's
    metric definitions (TTFT, TPOT, ITL, E2E, output/total/peak throughput, achieved concurrency).
  - "Coherence gate: known-answer probes at temperature 0 (default: the collection's C(DEFAULT_PROBES)),
    a NaN probe through logprobs where the server supports them, and detectors for empty output, U+FFFD and
    control characters, script soup and repetition loops on every load request. Throughput counts only coherent
    output; a run whose output is garbage fails however fast it is."
  - "Reasoning models: a probe is judged on its answer only; the reasoning (C(reasoning_content), or an inline
    C(<think>) block or text ending in C(</think>) when the server has no reasoning parser) is recorded apart.
    O(probe_chat_fields) can ask the engine to skip thinking; a probe that ran out of tokens while thinking
    gets O(probe_think_tokens) more once; one that still has no answer fails with class C(no_answer)."
  - "Regression gate: with O(baseline_dir), each concurrency level is compared with the stored baseline of the
    same O(fingerprint) and workload. A metric fails when it is worse than the baseline median by more than
    min(max(O(tolerance), O(noise_factor) x measured noise), O(max_threshold)) (docs/bench.md states the rule).
    Duplicate concurrency levels are refused. The first run records the baseline; only O(update_baseline=true)
    replaces one, and the replaced baseline is archived and logged."
  - "Faults are classified and counted per request: C(connection_refused), C(connect_error), C(connect_timeout),
    C(http_4xx), C(http_429), C(http_5xx), C(model_not_found), C(disconnected), C(stalled), C(timeout),
    C(malformed_sse), C(stream_error), C(nan), C(client_error); C(missing_usage) when the server omits usage and
    O(require_usage=true). The task fails with the class in C(msg), never a traceback, and what was measured
    is saved first."
  - The client is asyncio + aiohttp, sharded over processes; it measures its own event-loop lag and CPU use and
    marks a level C(client_bound) instead of silently reporting latency it inflated itself.
  - With O(report_dir), writes per-run JSON, an append-only history JSONL, a Markdown table, JUnit XML, PNG plots
    (when matplotlib is installed) and C(progress.log) (one line per completed level/trial and every few seconds).
author:
  - gpuhost.sglang contributors (@gpuhost)
requirements:
  - python >= 3.10
  - aiohttp
  - tokenizers or transformers (only for O(tokenizer))
  - matplotlib (optional, for plots)
  - orjson (optional, faster JSON)
options:
  base_url:
    description: Server root URL, for example C(http://10.0.0.5:30000) (C(/v1) is appended when missing).
    type: str
    required: true
  model:
    description: Model name sent in requests. Default is the first entry of C(/v1/models).
    type: str
  api:
    description: Which endpoint to stream.
    type: str
    choices: [completions, chat]
    default: completions
  concurrency:
    description:
      - "Concurrency level(s): an int, a list of ints, or a comma-separated string such as C(1,16,256)."
    type: raw
    default: 1
  num_prompts:
    description: Requests per concurrency level and trial. Default 2 x concurrency, at least 8.
    type: int
  input_len:
    description: Prompt length in tokens (exact with O(tokenizer); words otherwise).
    type: int
    default: 128
  output_len:
    description: C(max_tokens) of each load request.
    type: int
    default: 64
  dataset:
    description:
      - Path to a prompt file (JSONL with C(prompt) or C(messages), optional C(output_len); or a JSON list).
        Replaces the random prompts.
    type: path
  tokenizer:
    description:
      - Local Hugging Face tokenizer directory (or C(tokenizer.json)) for exact-length prompts and for counting
        tokens when the server sends no usage; the mismatch against server usage is reported.
    type: path
  ignore_eos:
    description:
      - Ask for exactly O(output_len) tokens with C(ignore_eos). When the server rejects the field with a 4xx
        (transformers serve answers 422) the run continues without it and C(ignore_eos_accepted=false) is returned.
    type: bool
    default: true
  temperature:
    description: Sampling temperature of load requests (probes always use 0).
    type: float
    default: 0.0
  seed:
    description: Seed of the random prompts (same seed, same workload).
    type: int
    default: 0
  warmup:
    description:
      - Fewest warm-up requests before each level (not measured); 0 turns the warm-up off.
      - "Before every level, max(O(warmup), ceil(O(warmup_per_slot) x concurrency)) requests of the workload are sent
        at the level's own concurrency, so a c=256 level does not measure the server's ramp to 256 streams."
    type: int
    default: 2
  warmup_per_slot:
    description: Warm-up requests per concurrency slot before each level (see O(warmup)); 0 leaves O(warmup) alone.
    type: float
    default: 1.0
  warmup_output_len:
    description:
      - "C(max_tokens) of the warm-up requests (at most O(output_len)): every slot prefills and decodes, at a fraction
        of a measured request's cost. Each level's result says what its warm-up was (C(warmup)); C(first_window) says
        whether the level's first requests were still slower than the rest (an outlier is warned about and marked
        C(~) in the table)."
    type: int
    default: 16
  probes:
    description:
      - Known-answer probes, each with C(expect) and a C(prompt) (completions) and/or C(question) (chat);
        optional C(name). Default is C(DEFAULT_PROBES) of the collection (module_utils/bench/probes.py).
    type: list
    elements: dict
  run_probes:
    description: Run the coherence probes before the load.
    type: bool
    default: true
  probes_only:
    description: Run only the coherence probes (no load); what the serving role's readiness gate uses.
    type: bool
    default: false
  probe_apis:
    description:
      - With O(probes_only), the probes on each of these endpoints in turn, in this one call (the deploy gate's
        canary of C(sglang_gate_apis)); O(api) is not used then. The result's RV(apis) holds each endpoint's; the call
        fails when one fails, its message naming each that failed.
    type: list
    elements: str
    choices: [completions, chat]
  probe_max_tokens:
    description:
      - Answer budget, C(max_tokens) of each probe. The expected word must be among the answer's first 12 words;
        32 tokens leave room for a short sentence.
    type: int
    default: 32
  probe_think_tokens:
    description:
      - Thinking budget of reasoning models. A probe that ran out of tokens before answering (reasoning and no
        answer, or plain fluent text cut at C(max_tokens), which is what template-opened reasoning looks like
        without a reasoning parser) is sent once more with O(probe_max_tokens) + O(probe_think_tokens).
        If it still has no answer it fails with class C(no_answer) ("thought for N tokens and never answered").
      - 0 disables the second attempt.
    type: int
    default: 1024
  probe_chat_fields:
    description:
      - "Extra request fields merged into every chat probe, for example
        C(chat_template_kwargs: {enable_thinking: false}) to ask SGLang (or transformers serve) to skip a
        reasoning model's thinking. The serving role passes its engine's C(probe_chat_fields)
        (roles/sglang/vars/main.yml)."
      - Empty (default) sends nothing extra, since strict engines answer HTTP 422 to unknown fields.
    type: dict
    default: {}
  probe_min_pass:
    description: Fraction of probes that must pass.
    type: float
    default: 1.0
  nan_probe:
    description: Also send one probe with logprobs and fail with class C(nan) on NaN/inf logprobs or the
      server's "Out of range float values" error.
    type: bool
    default: true
  load_checks:
    description: Detectors applied to every load request's output.
    type: list
    elements: str
    choices: [empty, replacement_chars, control_chars, script_soup, repetition]
    default: [empty, replacement_chars, control_chars, script_soup, repetition]
  max_incoherent_rate:
    description: Largest fraction of completed load requests allowed to fail O(load_checks).
    type: float
    default: 0.05
  max_error_rate:
    description: Largest fraction of load requests allowed to fail (any error class).
    type: float
    default: 0.0
  require_usage:
    description: Fail with C(missing_usage) when the server sends no usage (tokens would only be estimated).
    type: bool
    default: true
  api_key:
    description: Bearer token.
    type: str
  timeout:
    description: Per-request limit in seconds (whole request).
    type: float
    default: 300
  allow_queue_bound:
    description:
      - Before any load, the module reads the server's limits from SGLang's C(/get_server_info)
        (C(internal_states[*].effective_max_running_requests_per_dp), else C(max_running_requests), and
        C(max_total_num_tokens)). A level above the running-request cap, or whose requests need more KV tokens
        than C(max_total_num_tokens), measures the server's queue, not its throughput, and is refused
        (class C(queue_bound)) unless this is true; then it is measured, warned about and marked C(queue_bound)
        in its result. A server without that endpoint is measured with a warning.
    type: bool
    default: false
  stall_timeout:
    description: Seconds without a byte from the server before a stream is classified C(stalled).
    type: float
    default: 60
  server_metrics:
    description:
      - Read the server's Prometheus metrics (SGLang C(--enable-metrics), C(sglang:) or C(sglang_) names) before and
        after each level and report its generated-token, request and TTFT figures next to the client's
        (C(results[].server_metrics)). C(auto) when exported; C(require) also fails the run with class
        C(server_metrics) on a disagreement beyond O(server_metrics_tolerance) or when none are exported.
    type: str
    choices: [auto, require, "off"]
    default: auto
  server_metrics_tolerance:
    description: Relative difference of server and client token/request counts above which they disagree.
    type: float
    default: 0.02
  client_processes:
    description: Client processes; 0 means one per 256 concurrent streams, at most one per CPU.
    type: int
    default: 0
  client_lag_threshold_ms:
    description:
      - Event-loop lag p99 above which a level is marked C(client_bound). Half of the 2 ms timing-error budget
        (the measurements behind it are in docs/bench.md, "The client tells the truth").
      - On a client-bound level the regression gate ignores latency changes below twice the measured lag p99.
    type: float
    default: 1.0
  client_cpu_threshold:
    description: Client CPU use (fraction of one core per process) above which a level is marked C(client_bound).
    type: float
    default: 0.9
  trials:
    description: Trials per level; the regression gate uses their median and spread.
    type: int
    default: 1
  tolerance:
    description: Smallest relative regression threshold (0.1 = 10%); see O(noise_factor) for the whole rule.
    type: float
    default: 0.1
  min_abs_ms:
    description: Latency regressions smaller than this many milliseconds are ignored (timer noise).
      On client-bound levels the floor is raised to twice the client's lag p99.
    type: float
    default: 1.0
  min_duration_s:
    description:
      - "Shortest measured trial of a level, in seconds. A first trial that ends sooner is a calibration run (kept
        in C(sizing), not gated): the level is resized from its measured rate and run again. 0 disables it."
      - The default comes from the sandbox measurements in docs/bench.md ("Choosing the defaults").
    type: float
    default: 5.0
  min_requests:
    description: Fewest requests per level and trial (raises O(num_prompts) and the 2 x concurrency default).
    type: int
    default: 32
  noise_factor:
    description:
      - "Multiple of the measured noise a metric may move before it is a regression: the threshold of a metric is
        min(max(O(tolerance), O(noise_factor) x noise), O(max_threshold)), noise = the larger of the baseline's
        stored spread and this run's (trial half-range, or the within-trial standard error)."
    type: float
    default: 3.0
  max_threshold:
    description:
      - Largest threshold the noise may widen a metric to (0.4 = 40%), so a 2x slowdown (throughput -50%, TPOT
        +100%) always fails. A check cut to it is marked C(noise_limited).
    type: float
    default: 0.4
  confirm_regressions:
    description:
      - "How many times a level that fails the regression rule is measured again before the module fails: it fails
        only when every measurement fails (a real regression persists; a slow phase of a shared host does not; the
        measurements behind it are in docs/bench.md, section The regression rule). The failed measurements are kept in the
        level's C(regression.unconfirmed) and in the history. 0 = fail on the first measurement."
    type: int
    default: 1
  gate_metrics:
    description: Metrics the regression gate compares.
    type: list
    elements: str
    choices: [output_throughput, total_throughput, peak_output_throughput, ttft_ms.p50, ttft_ms.p99, tpot_ms.p50,
              tpot_ms.mean, itl_ms.p50, itl_ms.p99, e2e_ms.p50, e2e_ms.p99]
    default: [output_throughput, ttft_ms.p50, tpot_ms.p50]
  fingerprint:
    description:
      - What identifies the system under test (host, GPU model/count, driver, engine version, rendered server
        args, model, ...). Baselines are keyed by it plus the workload.
    type: dict
    default: {}
  gpu_health:
    description:
      - "GPU health read before the run (the C(health) result of C(gpuhost.sglang.gpu_facts)). Every level result, history
        line and the run's fingerprint carry its state. With it a level does not record its baseline at once: it
        is C(pending) until O(mode=finalize) shows the GPUs did not degrade during the run. A run whose GPUs are
        degraded before it starts records no baseline (C(withheld)); a regression verdict against a baseline
        measured in another health state is refused (failure class C(gpu_health), with both states)."
    type: dict
  gpu_health_after:
    description:
      - With O(mode=finalize), the GPU health read after the run. When it shows the GPUs degraded (new problems,
        XIDs, ECC counts, thermal violation time, a link that trained down), the run is marked C(gpu_degraded),
        its pending baselines are discarded and the task fails with class C(gpu_degraded); otherwise they are
        recorded.
    type: dict
  baseline_dir:
    description: Controller directory of baselines. Without it there is no regression gate.
    type: path
  update_baseline:
    description: Replace the stored baseline with this run (the old one is archived). The only way to replace one.
    type: bool
    default: false
  report_dir:
    description: Directory for run JSON, history JSONL, Markdown, JUnit XML, plots and C(progress.log).
    type: path
  run_id:
    description: Run identifier; tasks of one sweep pass the same one to share a run file. Default is a timestamp.
    type: str
  mode:
    description:
      - C(run) benchmarks; C(report) only renders the reports of an existing O(run_id) (no traffic); C(finalize)
        judges the run's GPU health (O(gpu_health_after)) and records or discards its pending baselines.
    type: str
    choices: [run, report, finalize]
    default: run
  plots:
    description: Write PNG plots (needs matplotlib; skipped with a warning when missing).
    type: bool
    default: true
notes:
  - In check mode nothing is sent and nothing is written.
  - Use C(delegate_to) to run it on the controller (default in playbooks/bench.yml) or on the target with the
    engine venv's python.
attributes:
  check_mode:
    support: full
    description: In check mode no request is sent and nothing is written.
  diff_mode:
    support: none
    description: Nothing on the host changes, so there is no diff.
"""

EXAMPLES = r"""
- name: Coherence gate only (fast; after every restart)
  gpuhost.sglang.serving_bench:
    base_url: http://127.0.0.1:30000
    probes_only: true

- name: Sweep with baselines and reports
  gpuhost.sglang.serving_bench:
    base_url: "http://{{ ansible_host }}:30000"
    concurrency: [1, 16, 256]
    input_len: 1024
    output_len: 256
    trials: 3
    fingerprint:
      host: "{{ inventory_hostname }}"
      gpu: 8x RTX PRO 6000
      engine: sglang 0.5.23
    baseline_dir: "{{ playbook_dir }}/../reports/baselines"
    report_dir: "{{ playbook_dir }}/../reports"
  delegate_to: localhost
"""

RETURN = r"""
apis:
  description: With O(probe_apis), each endpoint's result (its C(msg), C(failed), C(coherence), C(failure_class)).
  returned: with probe_apis
  type: dict
failed_apis:
  description: With O(probe_apis), the endpoints whose probes failed, in order.
  returned: with probe_apis
  type: list
  elements: str
results:
  description: One entry per concurrency level (see docs/bench.md for every field).
  returned: when load ran
  type: list
  elements: dict
  contains:
    concurrency:
      description: Concurrency level.
      type: int
    output_throughput:
      description: Coherent output tokens per second over the level's duration.
      type: float
    total_throughput:
      description: (prompt + output tokens) per second.
      type: float
    peak_output_throughput:
      description: Largest full 1-second bucket of output tokens, never below the level's average.
      type: float
    achieved_concurrency:
      description: Sum of request E2E over duration.
      type: float
    ttft_ms:
      description: Time to first token, mean/p50/p90/p99/max in ms.
      type: dict
    tpot_ms:
      description: Time per output token after the first, mean/p50/p90/p99/max in ms.
      type: dict
    itl_ms:
      description: Gaps between text chunks, mean/p50/p90/p99/max in ms.
      type: dict
    e2e_ms:
      description: Request latency, mean/p50/p90/p99/max in ms.
      type: dict
    completed:
      description: Requests that finished without error.
      type: int
    errors:
      description: Failed requests by class.
      type: dict
    client_bound:
      description: The client itself was saturated (see client_bound_reason); latency is an upper bound.
      type: bool
    counts:
      description:
        - "Whether the level's token counts were verified (reason in C(counts_reason)): C(verified) (the server's
          generated-token counter agrees), C(unchecked) (no counter read; no response claimed more tokens than the
          text it streamed) or C(unverified) (responses claimed more tokens than their streamed text and no counter
          confirmed it, or it disagrees). An C(unverified) level is marked C(?) in the table, its token-derived
          metrics are not compared with the baseline and it is never recorded as one (start SGLang with
          C(--enable-metrics) to verify)."
      type: str
    regression:
      description: Baseline verdict of the level (status recorded/compared/replaced/kept/disabled, checks).
      type: dict
coherence:
  description:
    - "Probe verdicts; C(passed), C(class), C(probes) (per probe: C(answer), C(reasoning), C(finish_reason),
      C(output_tokens), C(max_tokens), C(retried), C(detail)), C(chat_fields), C(retried), C(nan_probe)."
  returned: when probes ran
  type: dict
failed:
  description: True when a gate failed.
  returned: on failure
  type: bool
failure_class:
  description: Class of the first failure (connection_refused, http_5xx, nan, empty, incoherent, regression, ...).
  returned: always
  type: str
model:
  description: Model name used.
  returned: when a server was contacted
  type: str
ignore_eos_accepted:
  description: Whether the server accepted C(ignore_eos) (null when not asked).
  returned: when load ran
  type: bool
ignore_eos_rejection:
  description: The server's answer when it rejected C(ignore_eos) (the run continued without it).
  returned: when the server rejected ignore_eos
  type: str
coherence_sample:
  description:
    - Under C(ignore_eos) the load outputs run past the model's own end and are not judged for repetition; this sample
      of up to 8 requests of the workload, sent without C(ignore_eos), is judged with every check (C(requests),
      C(completed), C(incoherent), C(flags), C(samples)). Too many repeating outputs there fail the run (class
      incoherent); the other checks run on every load output.
  returned: when load ran with ignore_eos accepted
  type: dict
run_id:
  description: Run identifier.
  returned: always
  type: str
table:
  description:
    - Markdown table lines (Concurrency | Output tok/s | Total tok/s | Peak | TPOT ms | TTFT p50/p99 ms | ITL p99 | Coherent).
    - RV(legend) explains its marks.
  returned: always
  type: list
  elements: str
legend:
  description: What each mark of RV(table) means, one line a mark (every mark, whether a row carries it or not).
  returned: always
  type: list
  elements: str
gpu_degraded:
  description: With O(mode=finalize), what got worse on the GPUs during the run (empty when nothing did).
  returned: with mode=finalize
  type: list
  elements: str
baselines:
  description: With O(mode=finalize), the baseline event per pending level (recorded, replaced or kept).
  returned: with mode=finalize when the GPUs did not degrade
  type: dict
files:
  description: Report files written.
  returned: always
  type: list
  elements: str
"""

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.gpuhost.sglang.plugins.module_utils.bench.inputs import argument_spec
from ansible_collections.gpuhost.sglang.plugins.module_utils.bench.inputs import parse_concurrency  # noqa: F401 pylint: disable=unused-import
from ansible_collections.gpuhost.sglang.plugins.module_utils.bench.runner import BenchRun


def main():
    module = AnsibleModule(argument_spec=argument_spec(), supports_check_mode=True)
    p = module.params
    if p["probe_apis"] and p["probes_only"]:
        # one process for every endpoint's probes: the canary of a deploy costs one round trip
        apis, failed = {}, []
        for api in p["probe_apis"]:
            result = BenchRun(dict(p, api=api), check_mode=module.check_mode).execute()
            for w in result.warnings:
                module.warn("%s: %s" % (api, w))
            apis[api] = dict(result.out, msg=result.msg, failed=result.failed)
            if result.failed:
                failed.append(api)
        msg = "; ".join(apis[a]["msg"] for a in failed) or "; ".join("%s: %s" % (a, apis[a]["msg"]) for a in apis)
        if failed:
            module.fail_json(msg=msg, apis=apis, failed_apis=failed)
        module.exit_json(msg=msg, apis=apis, failed_apis=[])
    result = BenchRun(p, check_mode=module.check_mode).execute()
    for w in result.warnings:
        module.warn(w)
    if result.failed:
        module.fail_json(msg=result.msg, **result.out)
    module.exit_json(msg=result.msg, **result.out)


if __name__ == "__main__":
    main()

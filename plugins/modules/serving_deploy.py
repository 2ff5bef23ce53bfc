#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: gpuhost.sglang contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
---
module: serving_deploy
short_description: Deploy a serving configuration behind the readiness and coherence gate, or roll back
version_added: "0.2.0"
description:
  - The deploy transaction of one serving host (an action plugin over C(plugins/plugin_utils/deploy.py)). It tries
    O(candidates) in order and stops at the first that passes the gate; the later ones are never installed.
  - For each candidate it installs the unit and environment files, restarts the unit only when a file changed
    or the unit is not active, waits for readiness (M(gpuhost.sglang.serving_ready), which names the failure
    class from the journal), and runs the known-answer canary (M(gpuhost.sglang.serving_bench) with
    C(probes_only)) under the engine venv's interpreter.
  - The first pass is recorded as last-known-good (one atomic C(meta.json)), with the candidates that failed
    before it; a later run with the same chain, engine version and command lines skips those instead of
    restarting the server only to fail again (O(retry_failed) tries them).
  - When no candidate passes, or the run is interrupted after the live unit was touched, last-known-good is put
    back exactly as recorded (unit name, files, address) and proven with the same readiness wait and canary at
    its own address; without a record the failing unit is stopped. The task then fails with every attempt's class.
  - Interrupted (SIGINT to ansible-playbook, under the strategy gpuhost.sglang.interruptible_linear that
    playbooks/deploy.yml uses), the candidate in flight fails with class C(interrupted) and last-known-good is put
    back the same way; the task fails and the play stops. A second SIGINT aborts at once.
  - Check mode says which candidate would restart and why, and runs no gate; diff mode shows the unit file.
  - A multi-node replica deploys its one candidate through the same transaction in phases (O(phase)), the play
    calling each phase on all ranks at once with every rank's state after the previous phase (O(peers)); the
    ranks >= 1 stop first, rank 0 restarts, the others start once rank 0's dist-init port answers, the gate runs
    through rank 0, and a failure rolls every rank back to last-known-good in the same order.
author:
  - gpuhost.sglang contributors (@gpuhost)
options:
  unit:
    description: The server's systemd unit name.
    type: str
    required: true
  unit_dir:
    description: Directory of the unit file.
    type: str
    default: /etc/systemd/system
  env_file:
    description: The unit's environment file (mode 0600).
    type: str
    required: true
  env_content:
    description: The environment file's content (secrets; never shown). Required unless O(restore).
    type: str
  lkg_dir:
    description: Directory of the last-known-good record.
    type: str
    required: true
  candidates:
    description:
      - The configurations in order, the first being the configuration itself. Each a mapping with C(options)
        (shown in messages), C(argv) (the full command line, recorded) and C(unit_content) (the rendered unit file).
      - An entry with C(position) and C(learned) (a list of failure classes; O(build) and the
        C(gpuhost.sglang.sglang_learned_chain) filter make them) is candidate C(position) as it runs after earlier
        candidates failed with those classes (its own change plus what each class taught, C(lessons) names it).
        A later candidate runs the entry for the classes seen so far; one whose command line already failed in this
        run is skipped. Each position's entry with C(learned=[]) comes first.
      - Required unless O(restore) or O(build); mutually exclusive with O(build).
    type: list
    elements: dict
    default: []
  build:
    description:
      - The candidates' inputs; the action builds the candidates itself (C(plugins/plugin_utils/candidates.py)), as the
        C(gpuhost.sglang.sglang) role calls it. The positions are the configuration, then C(fallback_chain), then the
        profile's C(fallbacks) (only the configuration when C(fallbacks=false) or for a multi-node replica), each also
        as it runs after earlier failures (the profile's C(lessons) and C(fallback_lessons)).
      - Every candidate's options are merged in one precedence, lowest first - C(defaults), the profile's C(options),
        C(options), the candidate's own change, C(managed) - and rendered once into its command line (C(prefix), then
        the options; C(--no-x) for the C(negatable) options of C(flags) at C(engine_version)).
      - Every option set goes through the engine's own parser (module M(gpuhost.sglang.server_args) with C(python) and
        C(validator)) in one call, which must answer the very command line rendered; the configuration alone skips it
        when it is C(lkg)'s command line on the same engine version or in C(validated_argvs). Each unit file is the
        template C(unit_template) rendered with C(sglang_exec_start), that command line for systemd.
      - "Keys: C(profile) (the selected profile: options, fallbacks, lessons), C(defaults), C(options), C(fallback_chain),
        C(fallback_lessons), C(fallbacks), C(managed), C(prefix) (required), C(flags) (one engine's entry of
        C(roles/sglang/vars/flags.yml)), C(engine_version) (required), C(validator), C(python) (required), C(lkg),
        C(validated_argvs), C(unit_template) (required)."
    type: dict
  render_only:
    description:
      - With O(build), return the candidates (C(candidates), each with C(argv), C(command_line) and C(unit_content))
        and touch nothing on the host.
    type: bool
    default: false
  restore:
    description:
      - Only serve last-known-good again when the live unit is not it (files or state), proven with the readiness
        wait and the canary at its own address; fails when that proof fails. The end of a tuning campaign that
        adopts nothing.
    type: bool
    default: false
  health_url:
    description: The readiness endpoint of the candidate.
    type: str
    required: true
  base_url:
    description: The API base URL of the candidate (the canary's target).
    type: str
    required: true
  ready_timeout:
    description: Seconds a restarted candidate has to become ready.
    type: int
    default: 1800
  probes:
    description: Run the coherence canary.
    type: bool
    default: true
  noop_canary:
    description:
      - Run the canary also when nothing changed and the live server is the very process that passed the gate (the
        unit's systemd InvocationID, recorded with last-known-good). Off, such a no-op checks readiness only.
    type: bool
    default: false
  canary:
    description: >-
      The canary's options: C(apis) (list), C(probe_chat_fields), C(probe_max_tokens), C(probe_think_tokens),
      C(timeout), as M(gpuhost.sglang.serving_bench) takes them.
    type: dict
    default: {}
  canary_python:
    description: The interpreter the canary runs under on the host (the engine venv's).
    type: str
    required: true
  lkg_update:
    description: Record a pass as last-known-good (tuning campaigns turn it off).
    type: bool
    default: true
  retry_failed:
    description: Try candidates that failed the gate before with the same command line and engine version.
    type: bool
    default: false
  meta:
    description: Fields stored in the record (C(engine), C(engine_version), C(model_path), C(venv)).
    type: dict
    default: {}
  install_dir:
    description: Where the engine venvs live; after a pass the ones neither live nor last-known-good are removed.
    type: str
    default: ""
  timeout_start_sec_min:
    description: Floor of the start-timeout drop-in sized from the measured load time.
    type: int
    default: 300
  api_key:
    description: Bearer token for the readiness and canary requests.
    type: str
    default: ""
  phase:
    description:
      - C(all) runs the whole transaction of one host. The others are one phase of a multi-node replica's deploy,
        called in this order on all its ranks - C(prepare), C(stop), C(restart), C(join), C(gate), C(settle), then
        C(stop), C(restart), C(join), C(gate) again (they act only while rolling back), and C(report), which fails
        when the replica did not pass.
    type: str
    default: all
    choices: [all, prepare, stop, restart, join, gate, settle, report]
  replica:
    description: This rank of the replica (with a phase other than C(all)).
    type: dict
    suboptions:
      rank:
        description: This host's rank (0 serves the API).
        type: int
      nnodes:
        description: The replica's number of ranks.
        type: int
      head_address:
        description: Rank 0's address on the data plane.
        type: str
      dist_port:
        description: Rank 0's dist-init port.
        type: int
      state_file:
        description: The peer watch's state file of a rank >= 1.
        type: path
  peers:
    description: Every rank's C(replica) result of the previous phase, in rank order.
    type: list
    elements: dict
    default: []
  interrupted:
    description:
      - The play was interrupted while this replica's deploy was between two phases (set by the strategy
        gpuhost.sglang.interruptible_linear). A phase up to the gate then fails the candidate with class
        C(interrupted), and the phases that follow roll the replica back.
    type: bool
    default: false
  accuracy:
    description:
      - The opt-in accuracy gate after the canary (M(gpuhost.sglang.serving_accuracy) on the host, under
        O(canary_python)); empty (the default) turns it off. C(checks) is a non-empty list of C(score), C(greedy).
      - A candidate is compared with the reference recorded with last-known-good (the checks that reference
        holds) and fails with C(accuracy_drop), C(greedy_divergence) or C(accuracy_error) like any gate failure
        (the next candidate, or the rollback). The candidate that passes, when recorded, measures its own
        reference into O(lkg_dir) (C(accuracy-<hash of its command line and engine version>.json), named in
        C(meta.json)'s C(accuracy)); the previous reference file is removed. No reference yet, or the same
        command line and engine version as last-known-good - no comparison, said so.
      - "Cost: a comparison is 528 requests (score, 8 tokens each) and/or 48 (greedy, 32 tokens); a reference
        528 and/or 2 x 48; seconds in docs/bench.md. Not for a multi-node replica (O(phase) other than C(all))."
    type: dict
    default: {}
    suboptions:
      checks:
        description: The checks, C(score) and/or C(greedy).
        type: list
        elements: str
        choices: [score, greedy]
notes:
  - It runs these modules on the host, M(gpuhost.sglang.serving_unit), M(gpuhost.sglang.serving_ready),
    M(gpuhost.sglang.serving_bench) and, with O(accuracy), M(gpuhost.sglang.serving_accuracy).
extends_documentation_fragment:
  - ansible.builtin.action_common_attributes
attributes:
  check_mode:
    support: full
  diff_mode:
    support: partial
    details: the unit file; the environment file holds secrets and is never shown
  platform:
    platforms: posix
"""

EXAMPLES = r"""
- name: Deploy behind the gate
  gpuhost.sglang.serving_deploy:
    unit: sglang.service
    env_file: /etc/sglang/sglang.env
    env_content: "{{ lookup('ansible.builtin.template', 'sglang.env.j2') }}"
    lkg_dir: /etc/sglang/last-known-good
    candidates: "{{ rendered_candidates }}"
    health_url: http://127.0.0.1:30000/health_generate
    base_url: http://127.0.0.1:30000
    canary_python: /opt/sglang/venv/bin/python
  register: deploy_result
"""

RETURN = r"""
candidates:
  description:
    - With O(render_only), the candidates as O(build) made them, in order - C(position), C(learned), C(lessons),
      C(options) (the candidate's own change), C(argv), C(command_line) (the engine options, quoted) and C(unit_content).
  returned: with O(render_only)
  type: list
  elements: dict
passed_candidate:
  description: Index of the candidate that passed (null when none did).
  returned: always
  type: int
gate_result:
  description: One line, e.g. C(candidate 0 passed the gate).
  returned: always
  type: str
attempts:
  description: >-
    One row per candidate: C(candidate), C(options), C(outcome) (passed, failed, skipped, not tried, check mode),
    and for a failure C(class), C(message), C(journal_tail).
  returned: always
  type: list
  elements: dict
rollback:
  description: When none passed, what was restored (C(unit), C(base_url), C(state), C(canary)).
  returned: always
  type: dict
live_touched:
  description: Whether the live unit was restarted or stopped.
  returned: always
  type: bool
interrupted:
  description: Whether the run was interrupted (the candidate in flight then failed with class C(interrupted)).
  returned: with O(phase=all)
  type: bool
accuracy:
  description: >-
    The accuracy gate's calls in order (empty when O(accuracy) is off) - C(candidate), C(action) (gate, measure),
    C(checks), C(file), C(passed), C(class), C(message), C(requests), C(seconds).
  returned: always
  type: list
  elements: dict
replica:
  description: This rank's state after the phase (a phase other than C(all)); the next phase reads it in O(peers).
  returned: with a replica phase
  type: dict
"""

#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: gpuhost.sglang contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
---
module: server_args
short_description: Render serving-engine options and validate them with the engine's own parser
version_added: "0.1.0"
description:
  - Renders a structured options dict (canonical long option name -> value) into an argv,
    then validates that argv with the argument parser of the engine installed on the target,
    run by the engine's own interpreter (O(python)). Nothing is started and no GPU is needed.
  - For C(sglang) it builds C(ServerArgs.add_cli_args) on an argparse parser with abbreviations
    disabled; for C(transformers) it introspects the click command behind C(transformers serve).
    When the parser cannot be built the result has RV(validated=false) and a RV(reason); the argv is still rendered.
  - Unknown, renamed, removed and abbreviated options, invalid choices (listing the valid ones)
    and invalid values are all reported at once and the task fails before anything restarts.
  - Deprecation messages the parser prints are returned as RV(parser_warnings) and shown as task warnings.
  - Renames and removals are data (C(roles/sglang/vars/flags.yml)), filtered here by the engine version found.
options:
  python:
    description: Interpreter of the engine's venv, e.g. C(/opt/sglang/venv/bin/python).
    type: path
    required: true
  engine:
    description:
      - Which engine's parser to build. C(smg) is SGLang's model gateway (PyPI C(smg), the parser of C(smg launch)),
        used by the C(router) role for the router's own options.
    type: str
    choices: [sglang, transformers, smg]
    default: sglang
  options:
    description:
      - "Server options: C({long option name (with or without leading --): value}). One of O(options) and O(option_sets)."
      - C(true) -> bare flag; C(false)/C(null) -> omitted, or C(--no-x) where the parser defines a BooleanOptionalAction;
        list -> values after one flag; dict -> JSON string; numbers -> string. Output is sorted by option name.
    type: dict
  option_sets:
    description:
      - Several option mappings (for example a tuning campaign's candidates), validated with one start of the engine's
        interpreter (importing SGLang takes seconds); each gets its own entry in RV(results).
      - The task fails when any set has a problem; RV(results) says which.
    type: list
    elements: dict
  negatable:
    description:
      - The options rendered as C(--no-x) when C(false) (the caller's flag data for this engine version, as
        C(roles/sglang/vars/flags.yml) C(negatable) lists them), so that RV(argv) is exactly the caller's rendering.
      - The parser then checks those C(--no-x) flags, and an option set to C(false) that the parser can negate but the
        list lacks is an error (problem C(negation)). Without it, the parser's own negatable options are used.
    type: list
    elements: str
  renames:
    description:
      - "Renamed options as data: a list of C({old, new, since, until, evidence}) (C(since) inclusive, C(until) exclusive),
        or a plain C({old: new}) mapping. Only entries whose range contains the engine version apply."
    type: raw
    default: []
  removed:
    description: Removed options as data, a list of C({option, since, until, replacement, evidence}).
    type: list
    elements: dict
    default: []
  expected_version:
    description: When set, fail if the engine version found differs (e.g. the pinned C(0.5.23)).
    type: str
  timeout:
    description: Seconds allowed for importing the engine and parsing.
    type: int
    default: 180
requirements:
  - On the target, the engine installed in the venv of O(python) (C(sglang) or C(transformers) with C(typer)).
author:
  - gpuhost.sglang contributors (@gpuhost)
notes:
  - Only the parser runs; SGLang's C(ServerArgs.__post_init__) checks (which inspect the hardware) are not run.
attributes:
  check_mode:
    support: full
    description: Only parses; runs the same way in check mode.
  diff_mode:
    support: none
    description: Nothing is changed, so there is no diff.
"""

EXAMPLES = r"""
- name: Validate the server options with the pinned SGLang's own parser
  gpuhost.sglang.server_args:
    python: /opt/sglang/venv/bin/python
    engine: sglang
    options:
      model-path: /srv/models/GLM-5-NVFP4
      tp-size: 8
      mem-fraction-static: 0.92
      dsa-decode-backend: flashinfer_sparse_mla
      disable-shared-experts-fusion: true
    renames: "{{ sglang_flags.sglang.renames }}"
    removed: "{{ sglang_flags.sglang.removed }}"
    expected_version: "0.5.23"
  register: sglang_args

- name: Render the unit's ExecStart from the validated argv
  ansible.builtin.debug:
    msg: "{{ (['/opt/sglang/venv/bin/python', '-m', 'sglang.launch_server'] + sglang_args.argv) | gpuhost.sglang.systemd_exec }}"
"""

RETURN = r"""
argv:
  description: The rendered options as an argv list (without the executable).
  returned: always
  type: list
  elements: str
  sample: ["--mem-fraction-static", "0.92", "--tp-size", "8"]
command_line:
  description: RV(argv) quoted for a POSIX shell, for display.
  returned: always
  type: str
validated:
  description: Whether the engine's own parser checked the argv.
  returned: always
  type: bool
reason:
  description: Why the argv could not be validated.
  returned: when RV(validated) is false
  type: str
engine:
  description: The engine whose parser was used.
  returned: always
  type: str
engine_version:
  description: The engine version the argv was checked against.
  returned: when validated
  type: str
errors:
  description:
    - One entry per problem. C(problem) is one of unknown, renamed, abbreviation, invalid_choice, invalid_value, removed, missing, negation.
    - C(replacement) names the option to use instead; C(choices) lists the valid values; C(text) is the human message.
  returned: always
  type: list
  elements: dict
  sample: [{"option": "tp", "problem": "abbreviation", "replacement": "tp-size", "text": "--tp is an abbreviation ... use --tp-size"}]
parser_warnings:
  description: Deprecation and alias messages the parser produced, C({option, warning}); each is also shown as a task warning.
  returned: always
  type: list
  elements: dict
  sample: [{"option": "disable-cuda-graph", "warning": "'--disable-cuda-graph' is deprecated and will be removed in a future release."}]
verdicts:
  description: One entry per option in RV(argv) order, C({option, values, verdict, detail}); verdict is ok, warning or an error class.
  returned: when validated
  type: list
  elements: dict
suggested_argv:
  description: RV(argv) with renamed and unambiguously abbreviated options replaced.
  returned: when there are errors
  type: list
  elements: str
results:
  description:
    - With O(option_sets), one entry per set in order, each with RV(argv), RV(command_line), RV(errors), RV(verdicts),
      RV(parser_warnings), C(failed) and C(msg) (the problems) and RV(suggested_argv) when it has errors.
  returned: with O(option_sets), when validated
  type: list
  elements: dict
"""

import json
import os

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.gpuhost.sglang.plugins.module_utils.serving.server_args import (
    OptionsError, PROBE_SOURCE, classify, flag_rules, normalize_name, reverse_renames, server_argv, shell_quote, split_argv,
    suggested_argv, negation_error)


class ProbeFailure(Exception):
    pass


def run_probe(module, python, engine, requests, timeout):
    """Run PROBE_SOURCE with the engine's interpreter; one JSON answer per request."""
    cmd = [python, "-c", PROBE_SOURCE, engine]
    timeout_bin = module.get_bin_path("timeout")
    if timeout_bin:
        cmd = [timeout_bin, "-k", "10", str(timeout)] + cmd
    env = {"PYTHONDONTWRITEBYTECODE": "1", "PYTHONUNBUFFERED": "1"}
    rc, out, err = module.run_command(cmd, data="\n".join(json.dumps(r) for r in requests), environ_update=env)
    answers = []
    for line in out.splitlines():
        try:
            answers.append(json.loads(line))
        except ValueError:
            continue
    if answers and "fatal" in answers[0]:
        raise ProbeFailure("%s; stderr: %s" % (answers[0]["fatal"], err.strip()[-1500:]))
    if len(answers) < len(requests):
        why = "timed out after %ss" % timeout if rc in (124, 137) else "exited with rc=%s" % rc
        raise ProbeFailure("the engine interpreter %s without answering: %s" % (why, err.strip()[-1500:]))
    return answers


def _prepare(options):
    """argv and parse chunks of one option set (raises OptionsError)."""
    opts = {normalize_name(k): v for k, v in options.items()}
    # Options set to false/null are not in the parse request: they render as --no-x only where the
    # parser defines that negation (known after describe), else they are omitted.
    plain = {k: v for k, v in opts.items() if v is not None and v is not False}
    return opts, split_argv(server_argv(plain))


def _verdict(options, opts, chunks, ans, meta, rules, given=None):
    """The result fields of one option set from the parser's answer; ``given``: the caller's negatable names."""
    known = meta["options"]
    parser_negatable = [o[2:] for o, m in known.items() if m.get("negatable") and not o.startswith("--no-")]
    negatable = parser_negatable if given is None else [normalize_name(n, "negatable") for n in given]
    argv = server_argv(options, negatable=negatable)
    renames, removed = rules
    # Names whose value is false/null are checked for existence too (a typo must not vanish silently).
    parsed = list(ans["parsed"])
    chunks = list(chunks)
    argv_chunks = list(chunks)
    missed = []
    for name in sorted(k for k, v in opts.items() if v is None or v is False):
        flag = "--" + name
        if flag not in known:
            chunks.append([flag])
            parsed.append({"ok": False, "unknown": [flag]})
        elif name in negatable and opts[name] is False:
            chunks.append(["--no-" + name])
            # the caller's data can name a negation this parser lacks: then --no-x is unknown to it
            parsed.append({"ok": True, "warnings": []} if name in parser_negatable else {"ok": False, "unknown": ["--no-" + name]})
            argv_chunks.append(chunks[-1])
        elif name in parser_negatable and opts[name] is False:
            missed.append(negation_error(name))
    errors, warnings, verdicts = classify(chunks, parsed, meta, renames, removed)
    errors.extend(missed)
    whole = ans.get("whole", {})
    if not errors and not whole.get("ok", True):
        errors.append({"option": "(whole command line)", "problem": "invalid_value", "text": whole.get("error") or str(whole.get("unknown")),
                       "message": whole.get("error") or str(whole.get("unknown"))})
    out = dict(argv=argv, command_line=shell_quote(argv), errors=errors, verdicts=verdicts, validated=True, parser_warnings=warnings)
    if errors:
        out["suggested_argv"] = suggested_argv(argv_chunks, errors)
    return out


def _problems(errors, engine, version):
    return "%d problem(s) in the %s %s options (nothing was changed): %s" % (
        len(errors), engine, version, "; ".join(e["text"] for e in errors))


def main():
    module = AnsibleModule(
        argument_spec=dict(
            python=dict(type="path", required=True),
            engine=dict(type="str", choices=["sglang", "transformers", "smg"], default="sglang"),
            options=dict(type="dict"),
            option_sets=dict(type="list", elements="dict"),
            negatable=dict(type="list", elements="str"),
            renames=dict(type="raw", default=[]),
            removed=dict(type="list", elements="dict", default=[]),
            expected_version=dict(type="str"),
            timeout=dict(type="int", default=180),
        ),
        required_one_of=[("options", "option_sets")],
        mutually_exclusive=[("options", "option_sets")],
        supports_check_mode=True,
    )
    p = module.params
    result = dict(changed=False, engine=p["engine"], errors=[], parser_warnings=[], validated=False)
    many = p["option_sets"] is not None
    sets = p["option_sets"] if many else [p["options"]]
    if not isinstance(p["renames"], (list, dict)):
        module.fail_json(msg="renames must be a list of {old, new, since, until, evidence} or a {old: new} dict", **result)
    try:
        flag_rules(p["renames"], p["removed"], None)  # shape check before anything runs
        prepared = [_prepare(o) for o in sets]
        if not many:
            result["argv"] = server_argv(p["options"])
            result["command_line"] = shell_quote(result["argv"])
    except OptionsError as exc:
        module.fail_json(msg=str(exc), **result)
    if not (os.path.isfile(p["python"]) and os.access(p["python"], os.X_OK)):
        module.fail_json(msg="python: %s is not an executable file (expected the engine venv's interpreter)" % p["python"], **result)

    try:
        answers = run_probe(module, p["python"], p["engine"],
                            [{"op": "describe"}] + [{"op": "parse", "chunks": chunks} for _o, chunks in prepared], p["timeout"])
    except ProbeFailure as exc:
        if p["engine"] == "transformers":
            result["reason"] = "cannot introspect the transformers serve CLI: %s" % exc
            if many:   # each set's argv rendered all the same, unvalidated (as for one set)
                result["results"] = [dict(argv=a, command_line=shell_quote(a), validated=False, failed=False)
                                     for a in (server_argv(o, p["negatable"] or ()) for o in sets)]
            module.exit_json(**result)
        module.fail_json(msg="cannot build the %s parser with %s: %s" % (p["engine"], p["python"], exc), **result)

    meta = answers[0]
    version = meta["engine_version"]
    result["engine_version"] = version
    try:
        renames, removed = flag_rules(p["renames"], p["removed"], version)
        for new_name, entry in reverse_renames(p["renames"], version).items():
            renames.setdefault(new_name, entry)
    except OptionsError as exc:
        module.fail_json(msg=str(exc), **result)
    checked = [_verdict(o, opts, chunks, ans, meta, (renames, removed), p["negatable"])
               for o, (opts, chunks), ans in zip(sets, prepared, answers[1:])]
    if p["expected_version"] and version != p["expected_version"]:
        result.update(checked[0] if not many else {"results": checked})
        module.fail_json(msg="engine_version: %s found in %s, expected_version is %s" % (version, p["python"], p["expected_version"]), **result)
    if many:
        for c in checked:
            c.update(failed=bool(c["errors"]), engine=p["engine"], engine_version=version)
            if c["errors"]:
                c["msg"] = _problems(c["errors"], p["engine"], version)
        result.update(results=checked, validated=True,
                      errors=[dict(e, set=i) for i, c in enumerate(checked) for e in c["errors"]],
                      parser_warnings=[dict(w, set=i) for i, c in enumerate(checked) for w in c["parser_warnings"]])
        if result["errors"]:
            module.fail_json(msg="%d of %d option sets have problems: %s" % (
                sum(1 for c in checked if c["failed"]), len(checked),
                "; ".join("set %d: %s" % (i, c["msg"]) for i, c in enumerate(checked) if c["failed"])), **result)
        module.exit_json(**result)
    result.update(checked[0])
    for w in result["parser_warnings"]:
        module.warn(w["warning"] if "--" + w["option"] in w["warning"] else "--%s: %s" % (w["option"], w["warning"]))
    if result["errors"]:
        module.fail_json(msg=_problems(result["errors"], p["engine"], version), **result)
    module.exit_json(**result)


if __name__ == "__main__":
    main()

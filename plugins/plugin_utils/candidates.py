# -*- coding: utf-8 -*-
# Copyright: gpuhost.sglang contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The serving deploy's candidates, built in one place from the role's inputs (controller-side).

The serving role hands ``gpuhost.sglang.serving_deploy`` its *inputs* (``build``: the selected GPU profile, the
role's default options, ``sglang_options``, ``sglang_fallback_chain``, ``sglang_fallback_lessons``, the managed
options, the launch prefix, the engine's flag data, the engine version); the action turns them into candidates:

1. ``chain``: the candidate positions (profiles.py candidate_chain: the configuration, the host's chain, the
   profile's fallbacks), cut to the configuration alone for ``fallbacks: false`` or a multi-node replica, and every
   option set they can run with after earlier failures (profiles.py learned_chain);
2. ``plan``: each one's engine options through the one precedence (profiles.py merge_options: defaults < profile <
   sglang_options < candidate < managed) and its command line through the one renderer (``render_argv``:
   module_utils/serving/server_args.py server_argv, negations from flags.yml for the engine version);
3. ``parser_args``/``check_parsed``: every option set through the engine's own parser in one call of the
   server_args module, which renders with the same negations and must answer the very argv rendered here;
4. ``finish``: each candidate's unit file (``render_unit``: the role's template, ExecStart from that argv).

Only the configuration itself can skip the parser (``needs_parser``): when it is last-known-good's command line on
the same engine version, or one the parser accepted earlier in this run (``validated_argvs``).
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

from ansible_collections.gpuhost.sglang.plugins.module_utils.serving.server_args import (
    OptionsError, negatable_for, precheck, server_argv, shell_quote, systemd_exec)
from ansible_collections.gpuhost.sglang.plugins.plugin_utils.profiles import (
    ProfileError, candidate_chain, learned_chain, merge_options)

# build's keys: (type, default); None as default: required
BUILD = {
    "profile": (dict, {}), "defaults": (dict, {}), "options": (dict, {}), "fallback_chain": (list, []),
    "fallback_lessons": (dict, {}), "fallbacks": (bool, True), "managed": (dict, {}), "prefix": (list, None),
    "flags": (dict, {}), "engine_version": (str, None), "validator": (str, "sglang"), "python": (str, None),
    "lkg": (dict, {}), "validated_argvs": (list, []), "unit_template": (str, None),
}


class BuildError(ValueError):
    """Bad build input, or a candidate the flag data or the engine's parser refuses (the message names it)."""


def check_build(build):
    """``build`` typed, with defaults; a BuildError naming the first key that is wrong."""
    if not isinstance(build, dict):
        raise BuildError("build must be a mapping of the candidates' inputs, got %s" % type(build).__name__)
    unknown = sorted(set(build) - set(BUILD))
    if unknown:
        raise BuildError("build: unknown key(s) %s: allowed %s" % (", ".join(unknown), ", ".join(sorted(BUILD))))
    out = {}
    for key, (kind, default) in BUILD.items():
        value = build.get(key)
        if value is None:
            if default is None:
                raise BuildError("build.%s is required" % key)
            value = default
        if kind is bool and isinstance(value, str) and value.lower() in ("true", "false", "yes", "no"):
            value = value.lower() in ("true", "yes")
        if not isinstance(value, kind):
            raise BuildError("build.%s must be a %s, got %s" % (key, kind.__name__, type(value).__name__))
        out[key] = value
    if any(not isinstance(w, str) for w in out["prefix"]):
        raise BuildError("build.prefix must be a list of strings (the launch prefix and positional arguments), got %r" % out["prefix"])
    return out


def chain(b, one=False):
    """[{position, learned, lessons, options}]: every option change a candidate runs with, in order (position 0's
    base first, each position's base before its learned entries); ``one``: the configuration alone."""
    profile = b["profile"]
    try:
        positions = candidate_chain(profile.get("fallbacks") or [], b["fallback_chain"], b["options"])
        if one or not b["fallbacks"]:
            positions = positions[:1]
        return learned_chain(positions, profile.get("lessons") or [], b["options"], b["fallback_lessons"])
    except ProfileError as exc:
        raise BuildError(str(exc))


def negatable(b):
    """The options with a ``--no-x`` form in this engine version (flags.yml ``negatable``)."""
    try:
        return negatable_for(b["flags"].get("negatable"), b["engine_version"])
    except OptionsError as exc:
        raise BuildError("flag data: %s" % exc)


def render_argv(b, merged, negations):
    """The one renderer: the launch prefix and positional arguments, then the engine options."""
    try:
        return list(b["prefix"]) + server_argv(merged, negations, "sglang_options")
    except OptionsError as exc:
        raise BuildError(str(exc))


def plan(b, one=False):
    """Every entry of ``chain`` with ``merged`` (the engine's options) and ``argv`` (the whole command line).
    The configuration itself is checked against the flag data first (renamed, removed, abbreviated names): that
    check needs no parser, so a no-op deploy that skips the parser still gets it."""
    negations = negatable(b)
    out = []
    for entry in chain(b, one):
        try:
            merged = merge_options(b["profile"].get("options") or {}, b["options"], entry["options"], b["managed"],
                                   b["defaults"])
        except ProfileError as exc:
            raise BuildError(str(exc))
        out.append(dict(entry, merged=merged, argv=render_argv(b, merged, negations)))
    flags = b["flags"]
    try:
        errors = precheck(out[0]["merged"], flags.get("renames"), flags.get("removed"), flags.get("abbreviations"),
                          b["engine_version"], "sglang_options")
    except OptionsError as exc:
        raise BuildError("flag data: %s" % exc)
    if errors:
        raise BuildError("sglang_options: %s" % "; ".join(e["text"] for e in errors))
    return out


def needs_parser(b, entries):
    """False only for the configuration alone when it is last-known-good's command line on the same engine version
    (validated when it passed the gate) or one the parser accepted earlier in this run."""
    if len(entries) != 1:
        return True
    argv = entries[0]["argv"]
    lkg = b["lkg"]
    if argv == lkg.get("argv") and b["engine_version"] == lkg.get("engine_version"):
        return False
    return argv[len(b["prefix"]):] not in b["validated_argvs"]


def parser_args(b, entries):
    """The server_args module's arguments: every option set in one call, rendered with the same negations."""
    return {"python": b["python"], "engine": b["validator"], "option_sets": [e["merged"] for e in entries],
            "negatable": negatable(b), "renames": b["flags"].get("renames") or [],
            "removed": b["flags"].get("removed") or []}


def check_parsed(b, entries, res):
    """The parser's answer: its failure as a BuildError with its message; else every set's argv must be the one
    rendered here (one renderer: the unit runs exactly what the parser checked)."""
    if res.get("failed"):
        raise BuildError(res.get("msg") or "the engine's parser refused the options")
    results = res.get("results") or []
    if len(results) != len(entries):
        raise BuildError("the engine's parser answered %d of %d option sets" % (len(results), len(entries)))
    for i, (entry, got) in enumerate(zip(entries, results)):
        mine = entry["argv"][len(b["prefix"]):]
        if got.get("argv") != mine:
            raise BuildError("candidate %d: the parser checked %r, the unit would run %r" % (i, got.get("argv"), mine))
    return list(res.get("parser_warnings") or [])


def finish(b, entries, render_unit):
    """The transaction's flat candidate list: each entry's option change (shown in messages), lessons, position,
    learned classes, argv and unit file (``render_unit(exec_start)``)."""
    out = []
    for entry in entries:
        cand = dict((k, v) for k, v in entry.items() if k != "merged")
        try:
            cand["unit_content"] = render_unit(systemd_exec(entry["argv"]))
        except OptionsError as exc:
            raise BuildError(str(exc))
        out.append(cand)
    return out


def command_line(b, cand):
    """A candidate's engine options (its argv after the launch prefix), quoted for a shell: for display."""
    return shell_quote(cand["argv"][len(b["prefix"]):])

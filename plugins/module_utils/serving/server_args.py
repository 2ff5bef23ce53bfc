# -*- coding: utf-8 -*-
# Copyright: gpuhost.sglang contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Serving-engine command lines: structured options -> argv, quoting, and verdicts.

Pure stdlib; runs on the controller (filters) and on the targets (the ``server_args`` module).

* :func:`server_argv` turns ``{canonical long option: value}`` into a stable argv.
* :func:`systemd_exec` / :func:`shell_quote` quote an argv for a unit's ``ExecStart=`` / a shell.
* :func:`flag_rules` selects the version-specific renames/removals of ``roles/sglang/vars/flags.yml``.
* :data:`PROBE_SOURCE` (``probes/server_args_probe.py``) is run by the ENGINE's interpreter: it builds the engine's own parser
  (SGLang ``ServerArgs.add_cli_args``; ``transformers serve`` through its click command) and
  answers JSON requests on stdin/stdout. :func:`classify` turns its raw answers into verdicts.
"""

from __future__ import absolute_import, division, print_function

import difflib
import json
import re

from ansible_collections.gpuhost.sglang.plugins.module_utils.serving import probes
from ansible_collections.gpuhost.sglang.plugins.module_utils.serving.probes import server_args_probe

__metaclass__ = type

ERROR_CLASSES = ("unknown", "renamed", "abbreviation", "invalid_choice", "invalid_value", "removed", "missing")

_NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]*$")
_VERSION_RE = re.compile(r"^\s*v?(\d+(?:\.\d+)*)(?:[.-]?(a|b|rc|dev|post)[.-]?(\d*))?")
_ANSI_RE = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")


class OptionsError(ValueError):
    """Bad structured options; the message names the variable and what is allowed."""


# --------------------------------------------------------------------------- rendering

def normalize_name(key, var_name="options"):
    """``--mem_fraction_static`` / ``mem-fraction-static`` -> ``mem-fraction-static``."""
    if not isinstance(key, str):
        raise OptionsError("%s: option names must be strings, got %r" % (var_name, key))
    name = key[2:] if key.startswith("--") else key
    if not name or name.startswith("-") or not _NAME_RE.match(name):
        raise OptionsError(
            "%s: invalid option name %r: use the long option name without or with a leading '--' "
            "(letters, digits, '-', '_' and '.'; e.g. 'tp-size' or '--tp-size')" % (var_name, key))
    return name.replace("_", "-")


def _scalar(value, name, var_name):
    if isinstance(value, bool):
        raise OptionsError("%s.%s: booleans are only allowed as the whole value (true -> bare flag), "
                           "not inside a list" % (var_name, name))
    if isinstance(value, (int, float)):
        return repr(value) if isinstance(value, float) else str(value)
    if isinstance(value, str):
        return value
    if isinstance(value, dict):
        return json.dumps(value, sort_keys=True, separators=(",", ":"))
    raise OptionsError("%s.%s: unsupported value %r (%s); allowed: string, number, boolean, null, "
                       "list of scalars, dict (rendered as JSON)" % (var_name, name, value, type(value).__name__))


def server_argv(options, negatable=(), var_name="options"):
    """Render ``{option: value}`` as an argv list, sorted by option name (stable across merges).

    True -> ``--x``; False/None -> omitted, or ``--no-x`` when ``x`` is in ``negatable`` (the
    parser defines a BooleanOptionalAction); list -> ``--x v1 v2`` (empty list -> omitted);
    dict -> ``--x '{"json":...}'``; numbers -> ``str``.
    """
    if options is None:
        return []
    if not isinstance(options, dict):
        raise OptionsError("%s must be a dict of {long option name: value}, got %s" % (var_name, type(options).__name__))
    negatable = {normalize_name(n, "negatable") for n in (negatable or ())}
    rendered = {}
    for key, value in options.items():
        name = normalize_name(key, var_name)
        if name in rendered:
            raise OptionsError("%s: option %r is given twice (as %r and another spelling)" % (var_name, name, key))
        if value is None or value is False:
            rendered[name] = ["--no-" + name] if (value is False and name in negatable) else []
        elif value is True:
            rendered[name] = ["--" + name]
        elif isinstance(value, (list, tuple)):
            rendered[name] = ["--" + name] + [_scalar(v, name, var_name) for v in value] if value else []
        else:
            rendered[name] = ["--" + name, _scalar(value, name, var_name)]
    argv = []
    for name in sorted(rendered):
        argv.extend(rendered[name])
    return argv


def split_argv(argv):
    """Split an argv into option chunks ``[[--opt, values...], ...]``; leading positionals form one chunk."""
    chunks = []
    for tok in argv:
        if tok.startswith("--") and len(tok) > 2 or (tok.startswith("-") and len(tok) > 1 and not _is_number(tok)):
            chunks.append([tok])
        elif chunks:
            chunks[-1].append(tok)
        else:
            chunks.append([tok])
    return chunks


def _is_number(tok):
    try:
        float(tok)
        return True
    except ValueError:
        return False


# --------------------------------------------------------------------------- quoting

_SYSTEMD_SAFE = re.compile(r"^[A-Za-z0-9_@+=:,./-]+$")
_SYSTEMD_ESCAPES = {"\\": "\\\\", '"': '\\"', "\n": "\\n", "\t": "\\t", "\r": "\\r", "\a": "\\a",
                    "\b": "\\b", "\f": "\\f", "\v": "\\v"}


def systemd_quote(word):
    """Quote one argument for ``ExecStart=`` (systemd.service(5) "Command lines").

    Specifiers: ``%`` -> ``%%``; environment expansion: ``$`` -> ``$$``. Anything outside a safe
    set is double-quoted with C escapes (``\\\\``, ``\\"``, ``\\n``, ``\\xNN`` for other controls).
    Quoting also keeps a lone ``;`` (command separator) and an empty string literal.
    """
    if not isinstance(word, str):
        word = str(word)
    word = word.replace("%", "%%").replace("$", "$$")
    if word and _SYSTEMD_SAFE.match(word.replace("%", "").replace("$", "")):
        return word
    out = []
    for ch in word:
        if ch in _SYSTEMD_ESCAPES:
            out.append(_SYSTEMD_ESCAPES[ch])
        elif ord(ch) < 0x20 or ord(ch) == 0x7f:
            out.append("\\x%02x" % ord(ch))
        else:
            out.append(ch)
    return '"' + "".join(out) + '"'


def systemd_exec(argv):
    """Quote a whole argv (executable first) into one ``ExecStart=`` value."""
    if isinstance(argv, str) or not isinstance(argv, (list, tuple)):
        raise OptionsError("systemd_exec expects a list of arguments, got %s" % type(argv).__name__)
    if not argv:
        raise OptionsError("systemd_exec: empty argv")
    for a in argv:
        if isinstance(a, (dict, list, tuple)) or a is None:
            raise OptionsError("systemd_exec: argument %r is not a scalar" % (a,))
        if "\x00" in str(a):
            raise OptionsError("systemd_exec: NUL byte in argument %r" % (a,))
    first = str(argv[0])
    if first[:1] in ("@", "-", ":", "+", "!", "|"):
        raise OptionsError("systemd_exec: executable %r starts with a systemd prefix character; use an absolute path" % first)
    return " ".join(systemd_quote(a) for a in argv)


def shell_quote(argv):
    """POSIX-shell quoting of an argv, for display and copy-paste."""
    import shlex
    return " ".join(shlex.quote(str(a)) for a in argv)


# --------------------------------------------------------------------------- versions / data

def parse_version(text):
    """``'0.5.23'`` -> comparable tuple; ``'0.5.15.post1'`` > ``'0.5.15'`` > ``'0.5.15rc1'``."""
    m = _VERSION_RE.match(str(text))
    if not m:
        raise OptionsError("cannot parse version %r (expected e.g. 0.5.23, 0.5.15.post1, 0.6.0rc1)" % (text,))
    release = tuple(int(x) for x in m.group(1).split("."))
    release = release + (0,) * (4 - len(release)) if len(release) < 4 else release
    tag, num = m.group(2), int(m.group(3) or 0)
    rank = {"dev": -3, "a": -2, "b": -1, "rc": -1, None: 0, "post": 1}[tag]
    return release + (rank, num)


def version_in_range(version, since=None, until=None):
    """``since`` inclusive, ``until`` exclusive; missing bounds are open."""
    v = parse_version(version)
    if since not in (None, "") and v < parse_version(since):
        return False
    if until not in (None, "") and v >= parse_version(until):
        return False
    return True


def flag_rules(renames=None, removed=None, version=None):
    """Select the entries of flags.yml that apply to ``version``.

    ``renames``: list of ``{old, new, since?, until?, evidence?}`` or a plain ``{old: new}`` dict.
    ``removed``: list of ``{option, since?, until?, replacement?, evidence?}``.
    Returns ``({old: entry}, {option: entry})`` with names normalized.
    """
    out_ren, out_rem = {}, {}
    if isinstance(renames, dict):
        renames = [{"old": k, "new": v} for k, v in renames.items()]
    for i, e in enumerate(renames or []):
        if not isinstance(e, dict) or "old" not in e or "new" not in e:
            raise OptionsError("renames[%d] must be a dict with keys old, new (optional since, until, evidence), got %r" % (i, e))
        if version is None or version_in_range(version, e.get("since"), e.get("until")):
            old = normalize_name(e["old"], "renames")
            out_ren[old] = dict(e, old=old, new=normalize_name(e["new"], "renames"))
    for i, e in enumerate(removed or []):
        if not isinstance(e, dict) or "option" not in e:
            raise OptionsError("removed[%d] must be a dict with key option (optional since, until, replacement, evidence), got %r" % (i, e))
        if version is None or version_in_range(version, e.get("since"), e.get("until")):
            name = normalize_name(e["option"], "removed")
            out_rem[name] = dict(e, option=name)
    return out_ren, out_rem


def reverse_renames(renames, version):
    """Renames whose range starts AFTER ``version``: the new name is not known yet, the old one is.

    Returns ``{new: entry}`` where ``entry["new"]`` is the OLD name (the one to use on this version).
    """
    out = {}
    if isinstance(renames, dict):
        renames = [{"old": k, "new": v} for k, v in renames.items()]
    for e in renames or []:
        if e.get("since") in (None, "") or version is None:
            continue
        if parse_version(version) < parse_version(e["since"]):
            new = normalize_name(e["new"], "renames")
            out[new] = dict(e, old=new, new=normalize_name(e["old"], "renames"),
                            evidence="this version predates the rename (since %s); %s" % (e["since"], e.get("evidence") or ""))
    return out


def negatable_for(entries, version):
    """Option names with a ``--no-x`` form for ``version``, from flags.yml ``negatable`` entries
    (``[{since?, until?, options: [...]}]``); an unknown version matches no ranged entry."""
    names = []
    for i, e in enumerate(entries or []):
        if not isinstance(e, dict) or not isinstance(e.get("options"), list):
            raise OptionsError("negatable[%d] must be a dict with a list 'options' (optional since, until, evidence), got %r" % (i, e))
        ranged = e.get("since") not in (None, "") or e.get("until") not in (None, "")
        if ranged and (version in (None, "") or not version_in_range(version, e.get("since"), e.get("until"))):
            continue
        names.extend(normalize_name(n, "negatable") for n in e["options"])
    return names


def precheck(options, renames=None, removed=None, abbreviations=None, version=None, var_name="options"):
    """Data-only check (no parser): renamed, removed and known-abbreviated option names."""
    ren, rem = flag_rules(renames, removed, version)
    abbr = {normalize_name(k, "abbreviations"): normalize_name(v, "abbreviations") for k, v in (abbreviations or {}).items()}
    errors = []
    for key in (options or {}):
        name = normalize_name(key, var_name)
        if name in ren:
            errors.append(_err(name, "renamed", replacement=ren[name]["new"], evidence=ren[name].get("evidence")))
        elif name in rem:
            errors.append(_err(name, "removed", replacement=rem[name].get("replacement"), evidence=rem[name].get("evidence")))
        elif name in abbr:
            errors.append(_err(name, "abbreviation", replacement=abbr[name]))
    return errors


# --------------------------------------------------------------------------- verdicts

def _err(option, problem, replacement=None, choices=None, message=None, evidence=None, candidates=None, value=None):
    e = {"option": option, "problem": problem}
    if value is not None:
        e["value"] = value
    if replacement:
        e["replacement"] = replacement
    if choices is not None:
        e["choices"] = [str(c) for c in choices]
    if candidates:
        e["candidates"] = candidates
    if message:
        e["message"] = message
    if evidence:
        e["evidence"] = evidence
    e["text"] = format_error(e)
    return e


def negation_error(name):
    """``name`` is false and the parser has ``--no-name``, but the caller's negatable data lacks it (the argv would
    leave the option out, which is not what false says where the engine's default is on)."""
    return _err(name, "negation")


def format_error(e):
    opt = "--" + e["option"]
    p = e["problem"]
    if p == "renamed":
        s = "%s was renamed: use --%s" % (opt, e["replacement"])
    elif p == "removed":
        s = "%s is not accepted by this version" % opt + (": %s" % e["replacement"] if e.get("replacement") else "")
    elif p == "abbreviation":
        if e.get("replacement"):
            s = "%s is an abbreviation (accepted only by argparse prefix matching): use --%s" % (opt, e["replacement"])
        else:
            s = "%s is an ambiguous abbreviation of %s" % (opt, ", ".join("--" + c for c in e.get("candidates", [])))
    elif p == "invalid_choice":
        s = "%s%s: invalid choice; valid choices: %s" % (
            opt, " %s" % e["value"] if e.get("value") else "", ", ".join(e.get("choices", [])))
    elif p == "invalid_value":
        s = "%s: invalid value" % opt
    elif p == "missing":
        s = "%s is required by the engine" % opt
    elif p == "negation":
        s = ("%s: false leaves it out of the command line, but this parser has --no-%s: the flag data's negatable list "
             "(roles/sglang/vars/flags.yml) lacks it for this engine version" % (opt, e["option"]))
    else:
        s = "%s is unknown to the engine" % opt
        if e.get("candidates"):
            s += "; did you mean %s?" % " or ".join("--" + c for c in e["candidates"])
    if e.get("message") and p in ("invalid_value", "unknown"):
        s += " (%s)" % e["message"]
    return s


def _long_opts(meta):
    return [o for o in meta["options"] if o.startswith("--")]


def classify(chunks, parsed, meta, renames=None, removed=None):
    """Turn the probe's per-chunk parse results into verdicts.

    ``chunks``: the argv split by :func:`split_argv`; ``parsed``: the probe's list of
    ``{ok, unknown, error, warnings}``; ``meta``: the probe's parser description.
    Returns ``(errors, warnings, verdicts)``; ``verdicts`` has one entry per chunk.
    """
    ren = renames or {}
    rem = removed or {}
    opts = meta["options"]
    longs = _long_opts(meta)
    errors, warnings, verdicts = [], [], []
    for chunk, res in zip(chunks, parsed):
        flag = chunk[0]
        name = flag[2:] if flag.startswith("--") else flag
        values = chunk[1:]
        found = []
        if res.get("unknown") and flag.startswith("--"):
            prefixed = sorted({opts[o]["canonical"] for o in longs if o.startswith(flag) and o != flag})
            if name in ren:
                e = _err(name, "renamed", replacement=ren[name]["new"], evidence=ren[name].get("evidence"))
                new = "--" + ren[name]["new"]
                if new in opts and opts[new].get("choices") and values and values[0] not in opts[new]["choices"]:
                    e["choices"] = [str(c) for c in opts[new]["choices"]]
                    e["text"] += "; %r is not a valid choice there (valid: %s)" % (values[0], ", ".join(e["choices"]))
                elif new not in opts:
                    e["text"] += " (note: --%s is not known to this parser either)" % ren[name]["new"]
                found.append(e)
            elif name in rem:
                found.append(_err(name, "removed", replacement=rem[name].get("replacement"), evidence=rem[name].get("evidence")))
            elif len(prefixed) == 1:
                found.append(_err(name, "abbreviation", replacement=prefixed[0][2:]))
            elif len(prefixed) > 1:
                found.append(_err(name, "abbreviation", candidates=[p[2:] for p in prefixed]))
            else:
                close = difflib.get_close_matches(flag, longs, n=3, cutoff=0.75)
                cands = []
                for c in close:
                    canon = opts[c]["canonical"][2:]
                    if canon.startswith("no-") and not name.startswith("no-"):
                        continue
                    if canon not in cands:
                        cands.append(canon)
                found.append(_err(name, "unknown", candidates=cands))
        elif res.get("error"):
            msg = _ANSI_RE.sub("", res["error"])
            action = opts.get(flag, {})
            if "invalid choice" in msg or (action.get("choices") and values and str(values[0]) not in [str(c) for c in action["choices"]]):
                found.append(_err(name, "invalid_choice", choices=action.get("choices") or _choices_from_msg(msg), message=msg,
                                  value=" ".join(str(v) for v in values)))
            else:
                found.append(_err(name, "invalid_value", message=msg))
        elif res.get("unknown"):
            found.append(_err(name, "unknown", message="unexpected positional argument(s): %s" % " ".join(chunk)))
        w = [_ANSI_RE.sub("", x).strip() for x in res.get("warnings", []) if x.strip()]
        for x in w:
            warnings.append({"option": name, "warning": x})
        if not found and flag in opts and opts[flag]["canonical"] != flag and flag.startswith("--"):
            warnings.append({"option": name, "warning": "--%s is an alias of %s" % (name, opts[flag]["canonical"])})
        errors.extend(found)
        verdicts.append({"option": name, "values": values, "verdict": found[0]["problem"] if found else ("warning" if w else "ok"),
                         "detail": found[0]["text"] if found else ("; ".join(w) if w else "")})
    given = {c[0] for c in chunks}
    for opt_strings in meta.get("required", []):
        if not any(o in given for o in opt_strings):
            errors.append(_err(opt_strings[0][2:], "missing"))
    return errors, warnings, verdicts


def _choices_from_msg(msg):
    m = re.search(r"choose from (.*)\)", msg)
    if not m:
        return []
    return [c.strip().strip("'\"") for c in m.group(1).split(",")]


def suggested_argv(chunks, errors):
    """argv with renames and unambiguous abbreviations replaced, re-sorted like :func:`server_argv`."""
    fix = {e["option"]: e["replacement"] for e in errors if e["problem"] in ("renamed", "abbreviation") and e.get("replacement")}
    lead, fixed = [], []
    for chunk in chunks:
        if not chunk[0].startswith("--"):
            lead.extend(chunk)
            continue
        name = chunk[0][2:]
        fixed.append(["--" + fix[name] if name in fix else chunk[0]] + list(chunk[1:]))
    fixed.sort(key=lambda c: c[0][5:] if c[0].startswith("--no-") else c[0][2:])
    return lead + [tok for chunk in fixed for tok in chunk]


# --------------------------------------------------------------------------- the probe

# Runs inside the ENGINE's interpreter (its venv), never imports Ansible: probes/server_args_probe.py (protocol
# there). Imported so that the module packer ships the file; its source is handed to ``python -c``.
PROBE_SOURCE = probes.source(server_args_probe.__name__.rpartition(".")[2])

# -*- coding: utf-8 -*-
# Copyright: gpuhost.sglang contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Known-good option profiles per (GPU arch, model family, engine version), from data.

The data is ``sglang_profiles`` of ``roles/sglang/vars/profiles.yml``::

    gpu_archs: [{compute_capability: "12.0", arch: sm120, ...}, ...]
    model_families: {glm-dsa: "...", ...}
    profiles: [{name, engine?, gpu_archs, model_families?, since?, until?,
                options: {opt: {value, evidence}}, environment?: {VAR: {value, evidence}},
                notes?, fallbacks?: [{name, options, evidence}],
                lessons?: [{class, name, options, evidence}]}, ...]

:func:`select_profile` merges every matching profile (arch-only before arch + family, then file
order) and then the host overrides on top. An unknown arch or family yields an empty profile with a
note, never an error; malformed DATA raises :class:`ProfileError` naming the offending key.
:func:`candidate_chain` turns the configuration, the host's fallback chain and the profile's own
fallbacks into the ordered list of candidates deploy tries.
"""

from __future__ import absolute_import, division, print_function

import re

from ansible_collections.gpuhost.sglang.plugins.module_utils.serving.server_args import (
    OptionsError, normalize_name, parse_version, version_in_range)

__metaclass__ = type

_NO_GPU = ("", "none", "cpu", "null")
# The failure classes a later candidate can learn from (a lesson names one): the journal signatures' classes of
# plugins/module_utils/serving/ready.py (DEFAULT_SIGNATURES; not imported here: it pulls the HTTP client into every
# profile filter call, and tests/unit/plugins/plugin_utils/test_learned_fallbacks.py keeps the two equal) and the
# canary's own class (plugins/plugin_utils/deploy.py).
LEARNED_CLASSES = ("bad_arguments", "cuda_graph_capture", "incoherent", "model_load", "nan", "no_kv_cache_memory",
                   "out_of_memory", "port_in_use", "scheduler_exception", "seccomp", "unsupported_arch",
                   "warmup_failed", "wedged_detokenizer")
_ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


class ProfileError(ValueError):
    """Malformed profile data or arguments (names the key and what is allowed)."""


def _check_data(data):
    if not isinstance(data, dict):
        raise ProfileError("profile data (sglang_profiles) must be a dict with keys gpu_archs, model_families, profiles; got %s"
                           % type(data).__name__)
    archs = data.get("gpu_archs", [])
    if not isinstance(archs, list):
        raise ProfileError("sglang_profiles.gpu_archs must be a list of {compute_capability, arch}")
    for i, a in enumerate(archs):
        if not isinstance(a, dict) or "arch" not in a or "compute_capability" not in a:
            raise ProfileError("sglang_profiles.gpu_archs[%d] must have keys compute_capability and arch, got %r" % (i, a))
    profiles = data.get("profiles", [])
    if not isinstance(profiles, list):
        raise ProfileError("sglang_profiles.profiles must be a list")
    for i, p in enumerate(profiles):
        where = "sglang_profiles.profiles[%d]" % i
        if not isinstance(p, dict) or not p.get("name"):
            raise ProfileError("%s must be a dict with a name" % where)
        where = "sglang_profiles.profiles[%d] (%s)" % (i, p["name"])
        if not isinstance(p.get("gpu_archs"), list) or not p["gpu_archs"]:
            raise ProfileError("%s.gpu_archs must be a non-empty list of arch names (e.g. [sm120])" % where)
        opts = p.get("options", {}) or {}
        if not isinstance(opts, dict):
            raise ProfileError("%s.options must be a dict {option: {value, evidence}}" % where)
        for name, spec in opts.items():
            if not isinstance(spec, dict) or "value" not in spec or not spec.get("evidence"):
                raise ProfileError("%s.options.%s must be {value: ..., evidence: '...'}: every value needs an evidence note"
                                   % (where, name))
        env = p.get("environment", {}) or {}
        if not isinstance(env, dict):
            raise ProfileError("%s.environment must be a dict {VARIABLE: {value, evidence}}" % where)
        for name, spec in env.items():
            if not isinstance(name, str) or not _ENV_NAME.match(name):
                raise ProfileError("%s.environment name %r must match [A-Za-z_][A-Za-z0-9_]* (a variable name)" % (where, name))
            if not isinstance(spec, dict) or "value" not in spec or not spec.get("evidence"):
                raise ProfileError("%s.environment.%s must be {value: ..., evidence: '...'}: every value needs an evidence note"
                                   % (where, name))
            if isinstance(spec["value"], (dict, list, tuple)) or spec["value"] is None:
                raise ProfileError("%s.environment.%s value must be a string, number or boolean, got %r" % (where, name, spec["value"]))
        for key in ("since", "until"):
            if p.get(key) not in (None, ""):
                try:
                    parse_version(p[key])
                except OptionsError as exc:
                    raise ProfileError("%s.%s: %s" % (where, key, exc))
        for j, fb in enumerate(p.get("fallbacks", []) or []):
            if not isinstance(fb, dict) or not fb.get("name") or not isinstance(fb.get("options"), dict) or not fb.get("evidence"):
                raise ProfileError("%s.fallbacks[%d] must be {name, options: {...}, evidence}" % (where, j))
        for j, lesson in enumerate(p.get("lessons", []) or []):
            check_lesson(lesson, "%s.lessons[%d]" % (where, j))
    return archs, profiles


def check_lesson(lesson, where):
    """A lesson: ``{class, name, options, evidence}``, its class one the readiness wait or the canary names."""
    if not isinstance(lesson, dict) or not lesson.get("name") or not isinstance(lesson.get("options"), dict) \
            or not lesson.get("evidence"):
        raise ProfileError("%s must be {class, name, options: {...}, evidence}, got %r" % (where, lesson))
    if lesson.get("class") not in LEARNED_CLASSES:
        raise ProfileError("%s.class=%r: allowed %s" % (where, lesson.get("class"), ", ".join(LEARNED_CLASSES)))


def normalize_arch(gpu_arch, data):
    """``'12.0'``, ``12.0``, ``'sm_120'``, ``'SM120'`` -> ``('sm120', note)``; no GPU -> ``(None, note)``."""
    archs = _check_data(data)[0]
    if gpu_arch is None or (isinstance(gpu_arch, str) and gpu_arch.strip().lower() in _NO_GPU):
        return None, "no GPU architecture given (%r): no profile" % (gpu_arch,)
    if isinstance(gpu_arch, bool):
        return None, "gpu_arch %r is not an architecture: no profile" % (gpu_arch,)
    text = str(gpu_arch).strip()
    if isinstance(gpu_arch, (int, float)) or re.match(r"^\d+\.\d+$", text):
        cc = "%.1f" % float(text)
        for a in archs:
            if "%.1f" % float(a["compute_capability"]) == cc:
                return a["arch"], "compute capability %s -> %s" % (cc, a["arch"])
        return None, "compute capability %s is not in sglang_profiles.gpu_archs: no profile" % cc
    m = re.match(r"^sm_?(\d+)[a-z]?$", text.lower())
    if m:
        return "sm" + m.group(1), None
    for a in archs:
        if text.lower() in (str(a.get("family", "")).lower(), a["arch"]):
            return a["arch"], None
    return text.lower(), None


def select_profile(gpu_arch, model_family, engine_version, data, overrides=None, engine="sglang"):
    """Pick the known-good options for (arch, family, version), host ``overrides`` on top.

    Returns ``{arch, model_family, engine_version, options, evidence, environment, environment_evidence,
    matched, notes, fallbacks, lessons}``; ``options`` is ``{option: value}`` ready for :func:`server_args.server_argv`,
    ``environment`` is ``{VARIABLE: "text"}`` for the unit's environment file.
    """
    archs, profiles = _check_data(data)
    if overrides is not None and not isinstance(overrides, dict):
        raise ProfileError("overrides (host options) must be a dict {option: value}, got %s" % type(overrides).__name__)
    arch, note = normalize_arch(gpu_arch, data)
    notes = [note] if note else []
    family = str(model_family).strip().lower() if model_family not in (None, "") else None
    known_arch = {a["arch"] for a in archs} | {g for p in profiles for g in p["gpu_archs"]}
    families = data.get("model_families", {}) or {}
    version_ok = True
    if engine_version in (None, ""):
        version_ok = False
        notes.append("engine version unknown: only profiles without a version range apply")
    else:
        try:
            parse_version(engine_version)
        except OptionsError:
            version_ok = False
            notes.append("engine version %r is not parseable: only profiles without a version range apply" % (engine_version,))
    if arch is not None and arch not in known_arch:
        notes.append("GPU architecture %r is not in the profile data (known: %s): no profile" % (arch, ", ".join(sorted(known_arch))))
    if family is not None and families and family not in families:
        notes.append("model family %r is not in the profile data (known: %s): no family-specific profile"
                     % (family, ", ".join(sorted(families))))

    matches = []
    for order, p in enumerate(profiles):
        if arch is None or arch not in p["gpu_archs"]:
            continue
        if p.get("engine", "sglang") != engine:
            continue
        fams = p.get("model_families")
        if fams and family not in fams:
            continue
        ranged = p.get("since") not in (None, "") or p.get("until") not in (None, "")
        if ranged and not version_ok:
            continue
        if ranged and not version_in_range(engine_version, p.get("since"), p.get("until")):
            continue
        matches.append((1 if fams else 0, order, p))
    matches.sort(key=lambda m: (m[0], m[1]))

    options, evidence, matched, fallbacks, lessons = {}, {}, [], [], []
    environment, env_evidence = {}, {}
    for match in matches:
        p = match[2]
        matched.append(p["name"])
        for name, spec in (p.get("options") or {}).items():
            key = normalize_name(name, "sglang_profiles.profiles.%s.options" % p["name"])
            options[key] = spec["value"]
            evidence[key] = "profile %s: %s" % (p["name"], spec["evidence"])
        for name, spec in (p.get("environment") or {}).items():
            environment[name] = _env_text(spec["value"])
            env_evidence[name] = "profile %s: %s" % (p["name"], spec["evidence"])
        notes.extend(p.get("notes", []) or [])
        fallbacks.extend(p.get("fallbacks", []) or [])
        lessons.extend(p.get("lessons", []) or [])
    if arch is not None and not matched and arch in known_arch:
        notes.append("no profile for %s + %s with %s %s: engine defaults" % (arch, family, engine, engine_version))
    for name, value in (overrides or {}).items():
        key = normalize_name(name, "overrides")
        options[key] = value
        evidence[key] = "host override"
    return {"arch": arch, "model_family": family, "engine_version": engine_version, "options": options,
            "evidence": evidence, "environment": environment, "environment_evidence": env_evidence,
            "matched": matched, "notes": notes, "fallbacks": fallbacks, "lessons": lessons}


def _env_text(value):
    if isinstance(value, bool):
        return "1" if value else "0"
    return str(value)


def _normalized(options, where):
    if not isinstance(options, dict):
        raise ProfileError("%s must be a mapping {option: value}, got %s" % (where, type(options).__name__))
    try:
        return dict((normalize_name(k, where), v) for k, v in options.items())
    except OptionsError as exc:
        raise ProfileError(str(exc))


def candidate_chain(profile_fallbacks, host_chain, host_options=None):
    """The candidates deploy tries, in order: the configuration itself (``{}``), each entry of the host's
    ``sglang_fallback_chain``, then each of the profile's own fallbacks.

    Every candidate is a mapping of options merged over (profile + host options); names are normalized. A
    candidate equal to an earlier one is tried once. A profile fallback that would change an option the host set
    in ``sglang_options`` is left out: the host's explicit choice wins over profile data, as it does for the
    configuration itself (the host's own chain may change anything).
    """
    if not isinstance(host_chain, (list, tuple)):
        raise ProfileError("sglang_fallback_chain must be a list of option mappings, got %s" % type(host_chain).__name__)
    if not isinstance(profile_fallbacks, (list, tuple)):
        raise ProfileError("profile fallbacks must be a list of {name, options, evidence}, got %s" % type(profile_fallbacks).__name__)
    pinned = set(_normalized(host_options if host_options is not None else {}, "sglang_options"))
    chain = [{}]
    for i, entry in enumerate(host_chain):
        where = "sglang_fallback_chain[%d]" % i
        if not isinstance(entry, dict):
            raise ProfileError("%s must be a mapping {option: value}, got %r" % (where, entry))
        cand = _normalized(entry, where)
        if cand not in chain:
            chain.append(cand)
    for i, fb in enumerate(profile_fallbacks):
        if not isinstance(fb, dict) or not fb.get("name") or not isinstance(fb.get("options"), dict) or not fb.get("evidence"):
            raise ProfileError("profile fallbacks[%d] must be {name, options, evidence}, got %r" % (i, fb))
        cand = _normalized(fb["options"], "profile fallback %s" % fb["name"])
        if pinned & set(cand) or cand in chain:
            continue
        chain.append(cand)
    return chain


def lesson_key(classes):
    """The key of what earlier failures taught: their lesson classes, sorted, joined by '+' ('' for nothing)."""
    return "+".join(sorted(set(classes)))


def _lesson_overlays(lessons, host_lessons, pinned):
    """{class: (names, options)}: the profile's lessons (minus the options the host pinned in sglang_options: the
    host's explicit choice wins over profile data) then the host's own (sglang_fallback_lessons: any option)."""
    out = {}
    for i, lesson in enumerate(lessons or []):
        check_lesson(lesson, "profile lessons[%d]" % i)
        opts = dict((k, v) for k, v in _normalized(lesson["options"], "lesson %s" % lesson["name"]).items() if k not in pinned)
        if not opts:
            continue
        names, have = out.get(lesson["class"], ([], {}))
        have.update(opts)
        out[lesson["class"]] = (names + [lesson["name"]], have)
    if not isinstance(host_lessons, dict):
        raise ProfileError("sglang_fallback_lessons must be a mapping {failure class: {option: value}}, got %s"
                           % type(host_lessons).__name__)
    for cls, opts in host_lessons.items():
        if cls not in LEARNED_CLASSES:
            raise ProfileError("sglang_fallback_lessons: class %r: allowed %s" % (cls, ", ".join(LEARNED_CLASSES)))
        names, have = out.get(cls, ([], {}))
        have.update(_normalized(opts, "sglang_fallback_lessons.%s" % cls))
        out[cls] = (names + ["sglang_fallback_lessons.%s" % cls], have)
    return out


def _subsets(items, most):
    found = [()]
    for item in items:
        found += [s + (item,) for s in found if len(s) < most]
    return found


def learned_chain(chain, lessons=None, host_options=None, host_lessons=None):
    """Every option set a fallback chain can run once it learns from failures.

    ``chain`` is candidate_chain's list of option changes, ``lessons`` the profile's ``[{class, name, options,
    evidence}]``, ``host_lessons`` the host's ``{class: {option: value}}``. A candidate that follows a failure
    runs with its own change and, on top of it, what each earlier failure's class taught (a CUDA-graph capture
    crash: graphs off; NaN: another attention backend), in class-name order whatever order the failures came in; the deploy transaction picks the
    entry for the classes it has seen (plugins/plugin_utils/deploy.py). Position ``i`` follows at most ``i``
    failures, so its entries are the base and the lesson sets of at most ``i`` classes.

    Returns ``[{position, learned: [class...], lessons: [name...], options}]``: position 0's base first, each
    position's base before its learned entries.
    """
    if not isinstance(chain, (list, tuple)):
        raise ProfileError("candidates must be a list of option mappings, got %s" % type(chain).__name__)
    pinned = set(_normalized(host_options if host_options is not None else {}, "sglang_options"))
    overlays = _lesson_overlays(lessons, host_lessons if host_lessons is not None else {}, pinned)
    classes = [c for c in LEARNED_CLASSES if c in overlays and overlays[c][1]]
    out = []
    for position, cand in enumerate(chain):
        for learned in _subsets(classes, position):
            opts = _normalized(cand, "candidate %d" % position)
            names = []
            for cls in learned:
                names += overlays[cls][0]
                opts.update(overlays[cls][1])
            out.append({"position": position, "learned": list(learned), "lessons": names, "options": opts})
    return out


# The one precedence of server options, lowest first (the serving deploy's candidates, plugins/plugin_utils/candidates.py,
# playbooks/tune.yml and the inventory checks all merge through merge_options).
OPTION_LAYERS = ("defaults", "profile", "sglang_options", "candidate", "managed")


def merge_options(profile=None, host=None, candidate=None, managed=None, defaults=None):
    """Server options as the engine gets them: the role's defaults (sglang_metrics) under the GPU profile's
    (arch, then arch + model family: select_profile), those under the host's ``sglang_options``, those under the
    candidate's own (a fallback and what earlier failures taught), the options the role manages (address, port,
    model path, a replica's rank) on top. Names are normalized first, so ``tp_size`` in one layer replaces
    ``tp-size`` in a lower one; two spellings of one option within one layer are an error naming that layer."""
    out = {}
    for where, layer in zip(OPTION_LAYERS, (defaults, profile, host, candidate, managed)):
        if layer is None:
            continue
        if not isinstance(layer, dict):
            raise ProfileError("%s options must be a mapping {option: value}, got %s" % (where, type(layer).__name__))
        seen = {}
        for key, value in layer.items():
            try:
                name = normalize_name(key, where)
            except OptionsError as exc:
                raise ProfileError(str(exc))
            if name in seen:
                raise ProfileError("%s: option %r is given twice (as %r and %r)" % (where, name, seen[name], key))
            seen[name] = key
            out[name] = value
    return out


def option_sets(candidates, profile=None, host=None, managed=None, defaults=None):
    """merge_options for each candidate of candidate_chain, in order."""
    if not isinstance(candidates, (list, tuple)):
        raise ProfileError("candidates must be a list of option mappings, got %s" % type(candidates).__name__)
    return [merge_options(profile, host, cand, managed, defaults) for cand in candidates]


def managed_options(engine, listen_address, port, model_path, model_name="", replica_options=None):
    """The options the role sets itself from dedicated variables (the ``managed`` layer of merge_options), in the
    engine's names (``engine``: its entry of sglang_engines): a multi-node replica's own (nnodes, node-rank,
    dist-init-addr), then the listen address and port, the model path when the engine takes it as an option, the
    served model name when the engine has one and it is set."""
    out = dict(replica_options or {})
    out[engine["host_option"]] = listen_address
    out[engine["port_option"]] = int(port)
    if engine.get("model_option"):
        out[engine["model_option"]] = model_path
    if engine.get("served_name_option") and model_name:
        out[engine["served_name_option"]] = model_name
    return out

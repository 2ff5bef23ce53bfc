#!/usr/bin/env python3
# Copyright: (c) 2026, gpuhost.sglang contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Role interface lint: meta/argument_specs.yml, defaults/main.yml and the generated README agree.

Like prometheus-community/ansible's .github/scripts/lint_arguments_spec.sh (every variable in defaults is in the
argument spec and the other way round), plus: every spec default equals the defaults value (a templated default
is rendered with the role's other defaults first), and roles/<role>/README.md holds exactly what aar-doc
generates from the spec (`make role-docs` rewrites it).

Private names, like prometheus-community/ansible's roles (`__node_exporter_is_installed` in
roles/node_exporter/tasks/preflight.yml): a name the role's tasks or handlers set (set_fact, register, task or block
vars, loop_var) that starts with the role's prefix (`sglang_`) is public, so it must be documented: an option of
meta/argument_specs.yml, or an output named in a description paragraph of an entry point that starts with "Exports"
(the facts other roles and playbooks may read). Everything else the role sets for itself starts with `__<role>_`.
A `_`-prefixed name is never documented. tests/lint/role_specs_allow.yml lists the exceptions, each with its reason;
an entry for a name the role no longer sets is itself a finding.

Usage: tests/lint/role_specs.py [--roles DIR] [--allow FILE] [--fix-docs]   exit 0 clean, 1 findings, 2 usage/tool error
"""
from __future__ import annotations

import argparse
import os
import re
import shutil
import subprocess
import sys
import tempfile

import jinja2
import yaml

AAR_DOC = "aar-doc"
ALLOW_FILE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "role_specs_allow.yml")
SET_FACT = ("set_fact", "ansible.builtin.set_fact", "ansible.legacy.set_fact")
EXPORTS = re.compile(r"^Exports\b")


def load_yaml(path: str) -> dict:
    if not os.path.exists(path):
        return {}
    with open(path, encoding="utf-8") as f:
        return yaml.safe_load(f) or {}


def render_default(value, defaults: dict, depth: int = 0):
    """A defaults value as the role sees it: strings with Jinja are rendered with the other defaults."""
    if not isinstance(value, str) or "{{" not in value or depth > 5:
        return value
    env = jinja2.Environment(undefined=jinja2.StrictUndefined)
    context = {k: render_default(v, defaults, depth + 1) for k, v in defaults.items() if v is not value}
    try:
        return env.from_string(value).render(context)
    except jinja2.TemplateError:
        return value  # depends on facts or filters only a play has: compared as written


def spec_findings(role_dir: str) -> list[str]:
    """Disagreements between a role's defaults/main.yml and its meta/argument_specs.yml."""
    name = os.path.basename(os.path.normpath(role_dir))
    defaults = load_yaml(os.path.join(role_dir, "defaults", "main.yml"))
    specs = load_yaml(os.path.join(role_dir, "meta", "argument_specs.yml")).get("argument_specs") or {}
    out = []
    if "main" not in specs:
        return [f"{name}: meta/argument_specs.yml has no 'main' entry point"]
    main_opts = specs["main"].get("options") or {}
    for var in sorted(set(defaults) - set(main_opts)):
        out.append(f"{name}: defaults/main.yml sets {var}, which meta/argument_specs.yml (main) does not document")
    for entry, spec in sorted(specs.items()):
        for var, opt in sorted((spec.get("options") or {}).items()):
            if var not in defaults and not opt.get("required") and "default" in opt:
                out.append(f"{name}: argument_specs ({entry}) gives {var} default {opt['default']!r}, but "
                           "defaults/main.yml does not set it (ansible-core does not apply spec defaults: ansible/ansible#77159)")
            if var in defaults and "default" in opt:
                have = render_default(defaults[var], defaults)
                if have != opt["default"] and defaults[var] != opt["default"]:
                    out.append(f"{name}: {var} defaults to {defaults[var]!r} in defaults/main.yml but "
                               f"{opt['default']!r} in argument_specs ({entry})")
            if var in defaults and opt.get("required"):
                out.append(f"{name}: {var} is required in argument_specs ({entry}) but has a default in defaults/main.yml")
    return out


def task_names(tasks, where: str, out: list) -> list:
    """(name, how, where) for every variable a task list sets: register, set_fact, task/block vars, loop_var,
    index_var."""
    for task in tasks if isinstance(tasks, list) else []:
        if not isinstance(task, dict):
            continue
        for key in ("block", "rescue", "always"):
            task_names(task.get(key), where, out)
        if isinstance(task.get("register"), str):
            out.append((task["register"], "register", where))
        for module in SET_FACT:
            if isinstance(task.get(module), dict):
                out += [(var, "set_fact", where) for var in task[module] if var != "cacheable"]
        if isinstance(task.get("vars"), dict):
            out += [(var, "vars", where) for var in task["vars"]]
        control = task.get("loop_control") if isinstance(task.get("loop_control"), dict) else {}
        for how in ("loop_var", "index_var"):
            if isinstance(control.get(how), str):
                out.append((control[how], how, where))
    return out


def set_names(role_dir: str) -> list:
    """(name, how, file) for every variable set in the role's tasks/ and handlers/."""
    out = []
    for sub in ("tasks", "handlers"):
        top = os.path.join(role_dir, sub)
        for dirpath, _dirs, files in sorted(os.walk(top)):
            for fname in sorted(files):
                if fname.endswith((".yml", ".yaml")):
                    path = os.path.join(dirpath, fname)
                    task_names(load_yaml(path), os.path.relpath(path, role_dir), out)
    return out


def exported(specs: dict, prefix: str) -> set:
    """Names an entry point's description declares as outputs: its paragraphs that start with "Exports"."""
    names = set()
    for spec in specs.values():
        desc = spec.get("description") or []
        for para in [desc] if isinstance(desc, str) else desc:
            if isinstance(para, str) and EXPORTS.match(para):
                names |= set(re.findall(r"(?<![\w.])" + re.escape(prefix) + r"\w+", para))
    return names


def load_allowance(path: str = ALLOW_FILE) -> dict:
    """{role: {name: reason}} from role_specs_allow.yml; an entry without a reason is an error."""
    data = load_yaml(path)
    if not isinstance(data, dict) or not all(isinstance(names, dict) for names in data.values()):
        raise ValueError(f"{path} is not a mapping of role to {{name: reason}}")
    for role, names in data.items():
        for var, reason in names.items():
            if not isinstance(reason, str) or not reason.strip():
                raise ValueError(f"{path}: {role}.{var} has no reason (every allowance says why)")
    return data


def name_findings(role_dir: str, allowance: dict) -> list[str]:
    """Private names documented, public-looking names set but undocumented, stale exports and allowances."""
    name = os.path.basename(os.path.normpath(role_dir))
    prefix = name + "_"
    defaults = load_yaml(os.path.join(role_dir, "defaults", "main.yml"))
    specs = load_yaml(os.path.join(role_dir, "meta", "argument_specs.yml")).get("argument_specs") or {}
    options = set(defaults)
    for spec in specs.values():
        options |= set(spec.get("options") or {})
    exports = exported(specs, prefix)
    out = [f"{name}: {var} is private (leading _) but documented in defaults/main.yml or meta/argument_specs.yml"
           for var in sorted(options) if var.startswith("_")]
    allowed = allowance.get(name, {})
    seen = set()
    for var, how, where in set_names(role_dir):
        seen.add(var)
        if var.startswith(prefix) and var not in options and var not in exports and var not in allowed:
            out.append(f"{name}: {where} sets {var} ({how}): a public name ({prefix}*) that meta/argument_specs.yml does "
                       f"not document; rename it __{var} if it is internal, or document it (an option, or an "
                       "\"Exports\" paragraph for an output)")
    for var in sorted(exports - seen):
        out.append(f"{name}: meta/argument_specs.yml exports {var}, but no task or handler of the role sets it")
    for var in sorted(set(allowed) - seen):
        out.append(f"{name}: the allowance file allows {var}, which the role no longer sets: remove the entry")
    return sorted(set(out), key=out.index)


def generate_readme(role_dir: str, dest_root: str) -> str:
    """README.md as aar-doc generates it for role_dir, built in a copy under dest_root; returns its text."""
    name = os.path.basename(os.path.normpath(role_dir))
    # aar-doc names the role namespace.collection.role from the galaxy.yml two levels up: keep that layout.
    roles = os.path.join(dest_root, "roles")
    shutil.copytree(role_dir, os.path.join(roles, name), symlinks=True)
    galaxy = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(role_dir))), "galaxy.yml")
    if os.path.exists(galaxy):
        shutil.copy(galaxy, dest_root)
    copy = os.path.join(roles, name)
    proc = subprocess.run([AAR_DOC, copy, "markdown"], capture_output=True, text=True, check=False)
    if proc.returncode != 0:
        raise RuntimeError(f"aar-doc failed for {name}: {proc.stderr.strip() or proc.stdout.strip()}")
    with open(os.path.join(copy, "README.md"), encoding="utf-8") as f:
        return f.read()


def doc_findings(role_dir: str, fix: bool) -> list[str]:
    name = os.path.basename(os.path.normpath(role_dir))
    readme = os.path.join(role_dir, "README.md")
    with tempfile.TemporaryDirectory() as tmp:
        want = generate_readme(role_dir, tmp)
    have = None
    if os.path.exists(readme):
        with open(readme, encoding="utf-8") as f:
            have = f.read()
    if have == want:
        return []
    if fix:
        with open(readme, "w", encoding="utf-8") as f:
            f.write(want)
        print(f"{name}: README.md regenerated")
        return []
    what = "is missing" if have is None else "is stale (it differs from meta/argument_specs.yml)"
    return [f"{name}: roles/{name}/README.md {what}: run `make role-docs` and commit the result"]


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--roles", default="roles", help="directory holding the roles (default: roles)")
    ap.add_argument("--fix-docs", action="store_true", help="rewrite stale role READMEs instead of failing")
    ap.add_argument("--allow", default=ALLOW_FILE,
                    help="allowance file of public-looking internal names, each with a reason (default: %(default)s)")
    args = ap.parse_args(argv)
    if shutil.which(AAR_DOC) is None:
        print(f"role_specs: {AAR_DOC} not found on PATH (it is pinned in requirements/dev.txt: make setup)",
              file=sys.stderr)
        return 2
    if not os.path.isdir(args.roles):
        print(f"role_specs: --roles {args.roles!r} is not a directory", file=sys.stderr)
        return 2
    try:
        allowance = load_allowance(args.allow)
    except (OSError, ValueError, yaml.YAMLError) as exc:
        print(f"role_specs: --allow: {exc}", file=sys.stderr)
        return 2
    findings = []
    role_dirs = sorted(os.path.join(args.roles, d) for d in os.listdir(args.roles)
                       if os.path.isfile(os.path.join(args.roles, d, "meta", "argument_specs.yml")))
    for role_dir in role_dirs:
        findings += spec_findings(role_dir)
        findings += name_findings(role_dir, allowance)
        try:
            findings += doc_findings(role_dir, args.fix_docs)
        except RuntimeError as exc:
            findings.append(str(exc))
    for line in findings:
        print(line)
    print(f"role_specs: {len(role_dirs)} roles, {len(findings)} findings")
    return 1 if findings else 0


if __name__ == "__main__":
    sys.exit(main())

#!/usr/bin/env python3
# Copyright: (c) 2026, gpuhost.sglang contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Role interface lint: meta/argument_specs.yml, defaults/main.yml and the generated README agree.

Like prometheus-community/ansible's .github/scripts/lint_arguments_spec.sh (every variable in defaults is in the
argument spec and the other way round), plus: every spec default equals the defaults value (a templated default
is rendered with the role's other defaults first), and roles/<role>/README.md holds exactly what aar-doc
generates from the spec (`make role-docs` rewrites it).

Usage: tests/lint/role_specs.py [--roles DIR] [--fix-docs]   exit 0 clean, 1 findings, 2 usage/tool error
"""
from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile

import jinja2
import yaml

AAR_DOC = "aar-doc"


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
    args = ap.parse_args(argv)
    if shutil.which(AAR_DOC) is None:
        print(f"role_specs: {AAR_DOC} not found on PATH (it is pinned in requirements/dev.txt: make setup)",
              file=sys.stderr)
        return 2
    if not os.path.isdir(args.roles):
        print(f"role_specs: --roles {args.roles!r} is not a directory", file=sys.stderr)
        return 2
    findings = []
    role_dirs = sorted(os.path.join(args.roles, d) for d in os.listdir(args.roles)
                       if os.path.isfile(os.path.join(args.roles, d, "meta", "argument_specs.yml")))
    for role_dir in role_dirs:
        findings += spec_findings(role_dir)
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

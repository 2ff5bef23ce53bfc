#!/usr/bin/env python3
# Copyright: (c) 2026, gpuhost.sglang contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Public-references lint: every tracked file speaks of the project alone.

A clone of this repository has no workstation, no tracker and no local caches of its developers, so a tracked
file must not point at them. Rules (one finding per line and rule):

* ``machine-path``: a workstation path: ``/work/...``, ``/root/...``, ``/home/<user>/...``, ``../shared/...``.
* ``tracker-ref``: a reference into the project's own tracker or its private brief: ``issue 12``,
  ``issue 12 item 3`` (no ``#``: upstream citations read ``sglang issue #1234``, ``PR #1234``, ``sglang #1234``
  and pass), ``seeds`` (the private brief), ``research note``.
* ``cache-source``: a local cache folder (``.cache/...``) cited as the source of a claim (on a line that says
  ``source``, ``evidence``, ``captured``, ``as in`` or ``read from``). A ``.cache/`` path as a default location
  of a fixture is fine.

Cite public sources instead: a URL, an upstream repository path, an upstream issue or PR number, the project's
own docs/*.md; or write "unverified".

Exceptions live in ``tests/lint/public_refs_allow.yml``: ``path`` (a glob), ``rule``, optional ``match`` (a regex
the flagged line must also match) and a ``reason``; ``temporary: true`` marks exclusions that are to go.

``public_refs.py [--root DIR] [--allow FILE] [FILE ...]``: the files given (relative to DIR), else the files git
tracks in DIR (every file under DIR when it is not a git checkout). Exit 0 clean, 1 findings, 2 usage error.
"""
from __future__ import annotations

import argparse
import fnmatch
import os
import re
import subprocess
import sys

import yaml

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
ALLOW = os.path.join(ROOT, "tests", "lint", "public_refs_allow.yml")

# A path starts at a boundary: "upper/work/merged" or "$OUT/root/usr" are not workstation paths.
_START = r"(?<![\w.$/-])"
RULES = (
    ("machine-path", re.compile(_START + r"/(?:work|root)/|" + _START + r"/home/[A-Za-z0-9_.-]+/|\.\./shared/")),
    ("tracker-ref", re.compile(r"\bissues?\s+\d+|\bseeds\b|\bresearch\s+notes?\b", re.IGNORECASE)),
    ("cache-source", re.compile(r"(?<![\w-])\.cache/[\w.-]*")),
)
# cache-source: only where the line cites it (a .cache/ path as a fixture's default location is fine)
_CITES = re.compile(r"\b(?:sources?|evidence|captured|as in|read from)\b", re.IGNORECASE)
SKIP_DIRS = {".git", ".venv", ".cache", "collections", "__pycache__"}


def load_allow(path):
    with open(path, encoding="utf-8") as f:
        entries = yaml.safe_load(f) or []
    names = {rule[0] for rule in RULES}
    for i, entry in enumerate(entries):
        missing = [k for k in ("path", "rule", "reason") if not str(entry.get(k) or "").strip()]
        if missing:
            raise ValueError("%s entry %d: %s missing (every exception names its path, rule and reason)"
                             % (path, i + 1, ", ".join(missing)))
        if entry["rule"] not in names:
            raise ValueError("%s entry %d: rule %r is not one of %s" % (path, i + 1, entry["rule"], sorted(names)))
        entry["_match"] = re.compile(entry["match"]) if entry.get("match") else None
    return entries


def allowed(entries, relpath, rule, line):
    for e in entries:
        if e["rule"] == rule and fnmatch.fnmatch(relpath, e["path"]) and (e["_match"] is None or e["_match"].search(line)):
            return True
    return False


def tracked_files(root):
    try:
        out = subprocess.run(["git", "-C", root, "ls-files", "-z"], capture_output=True, check=True).stdout
        return [p for p in out.decode().split("\0") if p]
    except (OSError, subprocess.CalledProcessError):
        files = []
        for dirpath, dirnames, filenames in os.walk(root):
            dirnames[:] = sorted(d for d in dirnames if d not in SKIP_DIRS)
            files.extend(os.path.relpath(os.path.join(dirpath, n), root) for n in sorted(filenames))
        return files


def check_file(root, relpath, entries):
    path = os.path.join(root, relpath)
    if os.path.islink(path) or not os.path.isfile(path):
        return []
    with open(path, "rb") as f:
        data = f.read()
    if b"\0" in data:  # binary
        return []
    findings = []
    for n, line in enumerate(data.decode("utf-8", "replace").splitlines(), 1):
        for rule, rx in RULES:
            m = rx.search(line)
            if m and rule == "cache-source" and not _CITES.search(line):
                continue
            if m and not allowed(entries, relpath, rule, line):
                text = m.group(0) or line.strip()
                findings.append("%s:%d: %s: %s" % (relpath, n, rule, text[:80]))
    return findings


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n", maxsplit=1)[0])
    ap.add_argument("--root", default=ROOT)
    ap.add_argument("--allow", default=ALLOW)
    ap.add_argument("files", nargs="*")
    args = ap.parse_args(argv)
    if not os.path.isdir(args.root):
        print("public_refs: --root %r is not a directory" % args.root, file=sys.stderr)
        return 2
    try:
        entries = load_allow(args.allow) if os.path.exists(args.allow) else []
    except (ValueError, re.error, yaml.YAMLError) as exc:
        print("public_refs: %s" % exc, file=sys.stderr)
        return 2
    files = args.files or tracked_files(args.root)
    findings = [f for rel in files for f in check_file(args.root, rel, entries)]
    for f in findings:
        print(f)
    temporary = sorted({e["path"] for e in entries if e.get("temporary")})
    print("public_refs: %d files, %d findings%s" % (
        len(files), len(findings), " (temporary exclusions: %s)" % ", ".join(temporary) if temporary else ""))
    return 1 if findings else 0


if __name__ == "__main__":
    sys.exit(main())

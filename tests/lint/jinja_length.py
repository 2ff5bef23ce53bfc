#!/usr/bin/env python3
# Copyright: (c) 2026, gpuhost.sglang contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Jinja length lint: no Jinja expression over LIMIT characters in roles/ and playbooks/, none excepted.

An expression is each ``{{ ... }}`` / ``{% ... %}`` of a YAML scalar, or the whole value of a bare condition
(``when``, ``that``, ``until``, ``changed_when``, ``failed_when``), whitespace folded to one space. A long deciding
expression belongs in a tested filter or module.

``jinja_length.py [--root DIR] [--measure]``: exit 1 and one line per finding; ``--measure`` prints every expression
over 120 characters, the longest first, and the totals.
"""
from __future__ import annotations

import argparse
import glob
import os
import re
import sys

import yaml

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
LIMIT = 250
BARE = ("when", "that", "until", "changed_when", "failed_when")
JINJA = re.compile(r"\{\{.*?\}\}|\{%.*?%\}", re.S)


def _scalars(node, key=None):
    """(key it sits under, scalar node) for every scalar of a composed YAML node."""
    if isinstance(node, yaml.ScalarNode):
        yield key, node
    elif isinstance(node, yaml.SequenceNode):
        for item in node.value:
            yield from _scalars(item, key)
    elif isinstance(node, yaml.MappingNode):
        for k, v in node.value:
            yield from _scalars(v, k.value if isinstance(k, yaml.ScalarNode) else None)


def expressions(path):
    """[(line, length, text)] of every Jinja expression in one YAML file."""
    out = []
    with open(path) as fh:
        docs = list(yaml.compose_all(fh))
    for doc in docs:
        for key, node in _scalars(doc):
            if not isinstance(node.value, str):
                continue
            found = JINJA.findall(node.value)
            if not found and key in BARE and node.tag.endswith(":str"):
                found = [node.value]
            for text in found:
                folded = " ".join(text.split())
                out.append((node.start_mark.line + 1, len(folded), folded))
    return out


def files(root):
    return sorted(glob.glob(os.path.join(root, "roles", "**", "*.yml"), recursive=True)
                  + glob.glob(os.path.join(root, "playbooks", "**", "*.yml"), recursive=True))


def long_ones(root, limit=LIMIT):
    """{relative path: [(line, length)]} of the expressions over ``limit``."""
    out = {}
    for path in files(root):
        rel = os.path.relpath(path, root)
        over = [(line, n) for line, n, _t in expressions(path) if n > limit]
        if over:
            out[rel] = over
    return out


def findings(root):
    return ["%s: %d Jinja expression(s) over %d characters (%s): move the logic into a tested filter"
            % (rel, len(over), LIMIT, ", ".join("line %d: %d" % o for o in over)) for rel, over in sorted(long_ones(root).items())]


def measure(root):
    every = [(n, os.path.relpath(p, root), line) for p in files(root) for line, n, _t in expressions(p)]
    every.sort(reverse=True)
    for n, rel, line in [e for e in every if e[0] > 120]:
        print("%4d %s:%d" % (n, rel, line))
    print("expressions %d, over 120: %d, over %d: %d, longest %d" % (
        len(every), len([e for e in every if e[0] > 120]), LIMIT, len([e for e in every if e[0] > LIMIT]),
        every[0][0] if every else 0))


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--root", default=ROOT)
    ap.add_argument("--measure", action="store_true")
    a = ap.parse_args(argv)
    if a.measure:
        measure(a.root)
        return 0
    out = findings(a.root)
    for line in out:
        print(line)
    print("jinja_length: %d finding(s), limit %d characters" % (len(out), LIMIT))
    return 1 if out else 0


if __name__ == "__main__":
    sys.exit(main())

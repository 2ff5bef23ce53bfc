# -*- coding: utf-8 -*-
# Copyright: gpuhost.sglang contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""No behaviour is proven only outside `make test`: every test marked `long` (opt-in acceptance tests, run with
`-m long`) has a row in docs/testing.md's table "Acceptance tests outside make test" naming the gate tests that
prove its behaviour in `make test`, and every gate named there exists and is not itself marked `long`.

``python tests/integration/test_acceptance_map.py`` prints the count: long tests, and those without a gate."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import ast
import os
import re

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
DOC = os.path.join(ROOT, "docs", "testing.md")
TITLE = "## Acceptance tests outside `make test`"
TEST_ID = re.compile(r"`(tests/[\w/.-]+\.py)::(\w+)`")


def _is_long(node):
    """``pytest.mark.long`` (a decorator or an item of a module's pytestmark)."""
    return isinstance(node, ast.Attribute) and node.attr == "long" and isinstance(node.value, ast.Attribute) \
        and node.value.attr == "mark"


def file_tests(path):
    """{test function name: marked long} of one test file."""
    with open(path) as fh:
        tree = ast.parse(fh.read(), path)
    module_long = any(isinstance(n, ast.Assign) and any(getattr(t, "id", "") == "pytestmark" for t in n.targets)
                      and any(_is_long(x) for x in ast.walk(n.value)) for n in tree.body)
    return dict((n.name, module_long or any(_is_long(d) for d in n.decorator_list))
                for n in tree.body if isinstance(n, ast.FunctionDef) and n.name.startswith("test_"))


def all_tests():
    """{'tests/...py::name': marked long} of every test file under tests/unit and tests/integration."""
    out = {}
    for top in ("unit", "integration"):
        for dirpath, _dirs, files in os.walk(os.path.join(ROOT, "tests", top)):
            for name in sorted(files):
                if name.startswith("test_") and name.endswith(".py"):
                    rel = os.path.relpath(os.path.join(dirpath, name), ROOT)
                    out.update(("%s::%s" % (rel, t), is_long) for t, is_long in file_tests(os.path.join(dirpath, name)).items())
    return out


def table(doc=DOC):
    """[(acceptance test id or script, [gate test ids])] of the table under TITLE."""
    with open(doc) as fh:
        text = fh.read()
    assert TITLE in text, "%s has no section %r" % (doc, TITLE)
    section = text.split(TITLE, 1)[1].split("\n## ", 1)[0]
    rows = []
    for line in section.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) < 3 or not line.startswith("|") or set(cells[0]) <= set("-: ") or cells[0] == "acceptance test":
            continue
        first = TEST_ID.search(cells[0])
        rows.append(("%s::%s" % first.groups() if first else cells[0],
                     ["%s::%s" % m for m in TEST_ID.findall(cells[1])]))
    return rows


def without_gate(tests=None, rows=None):
    """The long tests that no row maps to an existing gate, and the named gates that do not exist or are long."""
    tests = all_tests() if tests is None else tests
    rows = table() if rows is None else rows
    mapped = dict(rows)
    missing = sorted(t for t, is_long in tests.items() if is_long and not mapped.get(t))
    bad = sorted(set(g for gates in mapped.values() for g in gates if tests.get(g) is not False))
    return missing, bad


def test_every_long_test_names_an_existing_gate():
    tests = all_tests()
    missing, bad = without_gate(tests)
    assert sum(tests.values()) > 0, "no test is marked long: the scan found none"
    assert missing == [], "long tests with no gate in docs/testing.md: %s" % missing
    assert bad == [], "gates named in docs/testing.md that do not exist or are marked long: %s" % bad


def test_the_check_fails_on_an_unmapped_long_test_and_on_a_missing_gate():
    tests = {"tests/a.py::test_x": True, "tests/a.py::test_gate": False, "tests/a.py::test_slow": True}
    assert without_gate(tests, [("tests/a.py::test_x", ["tests/a.py::test_gate"])]) == (["tests/a.py::test_slow"], [])
    assert without_gate(tests, [("tests/a.py::test_x", ["tests/a.py::test_gone"]),
                                ("tests/a.py::test_slow", ["tests/a.py::test_x"])]) == \
        ([], ["tests/a.py::test_gone", "tests/a.py::test_x"])


if __name__ == "__main__":
    found = all_tests()
    unmapped, wrong = without_gate(found)
    print("long tests: %d; without a gate in make test: %d %s; gates that do not exist or are long: %d %s" % (
        sum(found.values()), len(unmapped), unmapped, len(wrong), wrong))

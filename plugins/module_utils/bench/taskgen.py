# -*- coding: utf-8 -*-
# Copyright: gpuhost.sglang contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The accuracy gate's task set: arithmetic and string tasks with exact answers, generated from a seed.

No download: every item comes from ``random.Random(seed)`` (Mersenne Twister; ``randrange``/``choice``/``shuffle``
give the same sequence for an int seed on every CPython >= 3.2) over the word list below. The generated set is
checked in as ``taskset.py`` (``python taskgen.py --write``); a unit test regenerates it and compares the bytes.

Each item: ``id`` (kind-number), ``kind``, ``question``, ``answer`` (one word, no whitespace) and ``prompt``: one
instruction line, one solved example of the same kind, then the question, in completion form::

    Answer with the answer only, one word or number, nothing else.
    Q: What is 3 + 4?
    A: 7
    Q: What is 25 + 18?
    A:

A base model continues after ``A:``; an instruction-tuned one (completions or chat) answers the question. The reply
is judged by :func:`accuracy.normalize` (first word of the first non-empty line of the answer, surrounding quotes,
asterisks and trailing punctuation removed), compared case-sensitively with ``answer``.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import json
import os
import random
import sys

SEED = 20261203
PER_KIND = 48
INSTRUCTION = "Answer with the answer only, one word or number, nothing else."
# common short English words (lowercase ASCII, 3-7 letters): string tasks operate on these
WORDS = (
    "apple river stone cloud garden window copper silver market bridge planet signal orange violet winter summer "
    "table chair house mouse horse tiger lemon melon grape bread water light night sound music paper pencil "
    "rocket forest castle dragon island mirror candle jacket basket button butter ladder magnet needle pocket "
    "rabbit saddle ticket tunnel velvet wallet yellow zipper anchor bottle carpet dinner engine finger guitar "
    "hammer kitten lizard monkey number orbit parrot quartz rubber spider turtle valley wizard"
).split()
# kind -> (question template, solved example (question, answer)); answers are computed in _make
KINDS = (
    ("add", "What is {a} + {b}?", ("What is 3 + 4?", "7")),
    ("sub", "What is {a} - {b}?", ("What is 9 - 5?", "4")),
    ("mul", "What is {a} * {b}?", ("What is 3 * 5?", "15")),
    ("max", "Which is larger, {a} or {b}?", ("Which is larger, 12 or 31?", "31")),
    ("upper", "Write the word {w} in capital letters.", ("Write the word cat in capital letters.", "CAT")),
    ("reverse", "Write the word {w} backwards.", ("Write the word cat backwards.", "tac")),
    ("first", "What is the first letter of the word {w}?", ("What is the first letter of the word dog?", "d")),
    ("last", "What is the last letter of the word {w}?", ("What is the last letter of the word dog?", "g")),
    ("length", "How many letters are in the word {w}?", ("How many letters are in the word dog?", "3")),
    ("before", "Which number comes just before {a}?", ("Which number comes just before 40?", "39")),
    ("count", "How many times does the letter {l} appear in {w}?",
     ("How many times does the letter o appear in moon?", "2")),
)
KIND_NAMES = tuple(k[0] for k in KINDS)


def _make(kind, rnd):
    """(question fields, answer) of one item of ``kind``."""
    if kind == "before":
        a = rnd.randrange(11, 1000)
        return {"a": a}, str(a - 1)
    if kind in ("add", "sub", "max"):
        a, b = rnd.randrange(10, 100), rnd.randrange(10, 100)
        if kind == "sub":
            a, b = max(a, b), min(a, b)
        if kind == "max" and a == b:
            b += 1
        return {"a": a, "b": b}, str({"add": a + b, "sub": a - b, "max": max(a, b)}[kind])
    if kind == "mul":
        a, b = rnd.randrange(2, 13), rnd.randrange(2, 13)
        return {"a": a, "b": b}, str(a * b)
    w = rnd.choice(WORDS)
    if kind == "count":
        letter = rnd.choice(sorted(set(w)))
        return {"w": w, "l": letter}, str(w.count(letter))
    answer = {"upper": w.upper(), "reverse": w[::-1], "first": w[0], "last": w[-1], "length": str(len(w))}[kind]
    return {"w": w}, answer


def prompt_for(kind, question):
    """The completion-form prompt of one question of ``kind`` (instruction, one solved example, the question)."""
    example = dict((k[0], k[2]) for k in KINDS)[kind]
    return "%s\nQ: %s\nA: %s\nQ: %s\nA:" % (INSTRUCTION, example[0], example[1], question)


def generate(seed=SEED, per_kind=PER_KIND):
    """The task set: ``per_kind`` distinct questions of each kind, in kind order, ids ``<kind>-NNN``."""
    rnd = random.Random(seed)
    items = []
    for kind, template, example in KINDS:
        seen = set([example[0]])
        n = tries = 0
        while n < per_kind:
            tries += 1
            if tries > 100 * per_kind:
                raise ValueError("per_kind %d: kind %s has fewer distinct questions" % (per_kind, kind))
            fields, answer = _make(kind, rnd)
            question = template.format(**fields)
            if question in seen:
                continue
            seen.add(question)
            items.append({"id": "%s-%03d" % (kind, n), "kind": kind, "question": question, "answer": answer,
                          "prompt": prompt_for(kind, question)})
            n += 1
    return items


def render(items, seed=SEED, per_kind=PER_KIND):
    """The text of taskset.py for ``items``: one item a line (JSON), so a diff shows which items changed."""
    lines = [
        "# -*- coding: utf-8 -*-",
        "# Copyright: gpuhost.sglang contributors",
        "# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)",
        '"""The accuracy gate\'s task set, GENERATED by taskgen.py (seed %d, %d per kind): do not edit;'
        % (seed, per_kind),
        "regenerate with ``python plugins/module_utils/bench/taskgen.py --write``.\"\"\"",
        "",
        "from __future__ import absolute_import, division, print_function",
        "",
        "__metaclass__ = type",
        "",
        "SEED = %d" % seed,
        "PER_KIND = %d" % per_kind,
        "TASKS = (",
    ]
    for it in items:
        lines.append("    %s," % json.dumps(dict((k, it[k]) for k in ("id", "kind", "question", "answer")),
                                            sort_keys=False))
    lines.append(")")
    return "\n".join(lines) + "\n"


def main(argv):
    path = os.path.join(os.path.dirname(os.path.abspath(__file__)), "taskset.py")
    text = render(generate())
    if argv[1:] == ["--write"]:
        with open(path, "w") as f:
            f.write(text)
        sys.stdout.write("wrote %s (%d items)\n" % (path, len(generate())))
    else:
        sys.stdout.write(text)


if __name__ == "__main__":
    main(sys.argv)

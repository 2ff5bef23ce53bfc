# -*- coding: utf-8 -*-
# Copyright: gpuhost.sglang contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Default known-answer coherence probes.

One source of truth: the serving_bench module uses them as its default ``probes`` and the
sandbox's tiny test model is trained to answer exactly these, in completion and chat form.
Each probe has a completion-form ``prompt``, a chat-form ``question`` and the ``expect``
string that must appear (case-insensitive, as a whole word) near the start of the answer; a number word
also counts as its numeral and vice versa ("four" or "4", coherence.expect_forms).
They are facts any instruction-tuned model answers at temperature 0.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DEFAULT_PROBES = [
    {"name": "capital", "prompt": "The capital of France is", "question": "What is the capital of France?", "expect": "Paris"},
    {"name": "arithmetic", "prompt": "Two plus two equals", "question": "What is two plus two?", "expect": "four"},
    {"name": "gold", "prompt": "The chemical symbol for gold is", "question": "What is the chemical symbol for gold?", "expect": "Au"},
    {"name": "planet", "prompt": "The largest planet in the solar system is",
     "question": "What is the largest planet in the solar system?", "expect": "Jupiter"},
    {"name": "hamlet", "prompt": "The play Hamlet was written by", "question": "Who wrote the play Hamlet?", "expect": "Shakespeare"},
    {"name": "month", "prompt": "The first month of the year is", "question": "What is the first month of the year?", "expect": "January"},
    {"name": "sky", "prompt": "On a clear day the color of the sky is", "question": "What color is the sky on a clear day?", "expect": "blue"},
    {"name": "week", "prompt": "The number of days in a week is", "question": "How many days are in a week?", "expect": "seven"},
]

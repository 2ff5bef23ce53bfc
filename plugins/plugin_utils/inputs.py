# -*- coding: utf-8 -*-
# Copyright: gpuhost.sglang contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Range and relation checks of role inputs, before anything on the host changes.

Ansible's role argument validation checks types and choices but has no min/max
(ansible-core lib/ansible/module_utils/common/parameters.py: no range keys in argument specs), so the rules
live as data, one file per role (roles/<role>/vars/ranges.yml, key ``rules``), and every role's first preflight
task runs them through this one function (filters ``input_names`` and ``range_error``). It reports the FIRST
violation: one variable, its value and the allowed range per message.

A rule is a mapping:
  name      the variable (required)
  key       a key inside the variable when it is a mapping (e.g. one smg option of router_health_check);
            a key that is not set is not checked
  type      int (default), float, or duration (Prometheus duration text such as 15s, 1m30s; min/max in seconds)
  min, max  inclusive bounds (either may be absent)
  optional  true: an empty value ("" or null) is allowed and not checked
  relation  one of > >= < <= != : compares the value with the variable ``other`` (and ``other_key``)
  if        the name of a boolean variable: the rule applies only when it is true
  why       a short reason, printed with the allowed range
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import operator
import re

_KINDS = {"int": "an integer", "float": "a number",
          "duration": "a duration (Prometheus format, e.g. 15s, 1m30s)"}

# prometheus/common model/time.go ParseDuration: units y w d h m s ms, each at most once, in this order
_DURATION = re.compile(r"^(?:(\d+)y)?(?:(\d+)w)?(?:(\d+)d)?(?:(\d+)h)?(?:(\d+)m)?(?:(\d+)s)?(?:(\d+)ms)?$")
_UNIT_SECONDS = (365 * 86400, 7 * 86400, 86400, 3600, 60, 1, 0.001)

_RELATIONS = {">": (operator.gt, "greater than"), ">=": (operator.ge, "at least"), "<": (operator.lt, "less than"),
              "<=": (operator.le, "at most"), "!=": (operator.ne, "different from")}


def _duration(value):
    text = str(value).strip()
    match = _DURATION.match(text)
    if not text or text == "0" or not match:
        return 0.0 if text == "0" else None
    return float(sum(int(n) * unit for n, unit in zip(match.groups(), _UNIT_SECONDS) if n))


def _number(value, kind):
    """The value as int/float (seconds for a duration), or None when it is not one (booleans are not numbers)."""
    if isinstance(value, bool) or value is None:
        return None
    if kind == "duration":
        return _duration(value)
    try:
        if kind == "int":
            if isinstance(value, float) and not value.is_integer():
                return None
            return int(str(value).strip()) if not isinstance(value, (int, float)) else int(value)
        return float(value)
    except (TypeError, ValueError):
        return None


def _allowed(rule):
    kind = rule.get("type", "int")
    lo, hi = rule.get("min"), rule.get("max")
    unit = " seconds" if kind == "duration" else ""
    if lo is not None and hi is not None:
        text = "%s to %s%s" % (lo, hi, unit)
    elif lo is not None:
        text = ">= %s%s" % (lo, unit)
    elif hi is not None:
        text = "<= %s%s" % (hi, unit)
    else:
        text = "any value"
    return "%s, %s%s" % (_KINDS.get(kind, kind), text, (" (%s)" % rule["why"]) if rule.get("why") else "")


def _label(name, key):
    return "%s.%s" % (name, key) if key is not None else name


def _lookup(values, name, key):
    """(found, value) of variable ``name`` (and its ``key``)."""
    if name not in values:
        return False, None
    value = values[name]
    if key is None:
        return True, value
    if not isinstance(value, dict) or key not in value:
        return False, None
    return True, value[key]


def _truthy(value):
    """Ansible's notion of a true condition variable, for values given as text on the command line too."""
    if isinstance(value, str):
        return value.strip().lower() not in ("", "0", "false", "no", "off", "n", "f")
    return bool(value)


def input_names(rules):
    """The variable names the rules read, in order, each once (for query('vars', ...))."""
    names = []
    for rule in rules:
        for name in (rule.get("name"), rule.get("other"), rule.get("if")):
            if name and name not in names:
                names.append(name)
    return names


def _relation_error(rule, label, value, num, values):
    op, words = _RELATIONS[rule["relation"]]
    other_label = _label(rule["other"], rule.get("other_key"))
    found, other = _lookup(values, rule["other"], rule.get("other_key"))
    other_num = _number(other, rule.get("type", "int")) if found else None
    if other_num is None or op(num, other_num):
        return ""  # the other variable's own range rule reports it when it is not a number
    why = (" (%s)" % rule["why"]) if rule.get("why") else ""
    return "%s=%s must be %s %s=%s%s." % (label, value, words, other_label, other, why)


def range_error(values, ranges):
    """First range or relation violation as one message naming the variable, or "" when all are in range.

    ``values``: variable name -> value. ``ranges``: list of rules (see the module docstring), checked in order.
    """
    for rule in ranges:
        name, key = rule["name"], rule.get("key")
        if rule.get("if") and not _truthy(values.get(rule["if"])):
            continue
        found, value = _lookup(values, name, key)
        if not found or (rule.get("optional") and value in (None, "")):
            continue
        kind, label = rule.get("type", "int"), _label(name, key)
        num = _number(value, kind)
        if num is None:
            return "%s=%r is not %s: allowed %s." % (label, value, _KINDS.get(kind, kind), _allowed(rule))
        if rule.get("relation"):
            msg = _relation_error(rule, label, value, num, values)
            if msg:
                return msg
            continue
        lo, hi = rule.get("min"), rule.get("max")
        if (lo is not None and num < lo) or (hi is not None and num > hi):
            return "%s=%s is out of range: allowed %s." % (label, value, _allowed(rule))
    return ""

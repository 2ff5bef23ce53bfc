# -*- coding: utf-8 -*-
# Copyright: gpuhost.sglang contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Range and relation checks of role inputs, before anything on the host changes (issue 12, item 2).

Ansible's role argument validation checks types and choices but has no min/max
(ansible-core lib/ansible/module_utils/common/parameters.py: no range keys in argument specs), so the ranges
live as data (roles/<role>/vars/ranges.yml) and this function reports the FIRST violation: one variable,
its value and the allowed range per message.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

_KINDS = {"int": "an integer", "float": "a number"}


def _number(value, kind):
    """The value as int/float, or None when it is not one (booleans are not numbers here)."""
    if isinstance(value, bool):
        return None
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
    if lo is not None and hi is not None:
        text = "%s to %s" % (lo, hi)
    elif lo is not None:
        text = ">= %s" % lo
    elif hi is not None:
        text = "<= %s" % hi
    else:
        text = "any value"
    return "%s, %s%s" % (_KINDS.get(kind, kind), text, (" (%s)" % rule["why"]) if rule.get("why") else "")


def range_error(values, ranges):
    """First range or relation violation as one message naming the variable, or "" when all are in range.

    ``values``: variable name -> value. ``ranges``: list of rules, checked in order:
      {name, type: int|float, min, max, why}  a range (min/max inclusive; either may be absent)
    """
    for rule in ranges:
        name = rule["name"]
        if name not in values:
            continue
        kind = rule.get("type", "int")
        value = values[name]
        num = _number(value, kind)
        if num is None:
            return "%s=%r is not %s: allowed %s." % (name, value, _KINDS.get(kind, kind), _allowed(rule))
        lo, hi = rule.get("min"), rule.get("max")
        if (lo is not None and num < lo) or (hi is not None and num > hi):
            return "%s=%s is out of range: allowed %s." % (name, value, _allowed(rule))
    return ""

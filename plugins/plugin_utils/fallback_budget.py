# -*- coding: utf-8 -*-
# Copyright: gpuhost.sglang contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The worst-case time of a deploy's candidate chain, and the cap on it.

Every candidate that fails the gate costs up to one full model load (``sglang_ready_timeout``); when every candidate
fails and a last-known-good record exists, restoring it is one more load. On a ~430 GB model each load can take most of
an hour, so a long chain can hold a host for hours: the preflight prints this figure (with the measured load time of the
last-known-good, when there is one) and fails before anything restarts when it exceeds
``sglang_fallback_budget_seconds`` (0 = no cap).
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

BUDGET_VAR = "sglang_fallback_budget_seconds"


class BudgetError(ValueError):
    """Bad arguments (names the argument and what is allowed)."""


def _int(name, value, minimum):
    try:
        n = int(value)
    except (TypeError, ValueError):
        raise BudgetError("%s=%r is not an integer: allowed an integer, at least %d" % (name, value, minimum))
    if n < minimum or isinstance(value, bool):
        raise BudgetError("%s=%r is out of range: allowed an integer, at least %d" % (name, value, minimum))
    return n


def fallback_budget(candidates, ready_timeout, budget_seconds, lkg_meta=None, chain=True):
    """Worst case of trying ``candidates`` (the configuration first, as ``sglang_candidates`` returns them).

    ``chain`` false (``sglang_fallbacks: false``, a multi-node replica) keeps the configuration only, as deploy does.
    ``lkg_meta`` is the last-known-good record (``{}`` when none): it adds the restore's load and gives the measured
    ``load_seconds``. Returns ``{candidates, loads, restore, worst_case_seconds, load_seconds, expected_seconds,
    budget_seconds, line, error}``; ``error`` is empty when the worst case fits the budget (or there is no cap).
    """
    if not isinstance(candidates, list) or not candidates:
        raise BudgetError("candidates must be a non-empty list of option mappings (the configuration first), got %r"
                          % (candidates,))
    timeout = _int("sglang_ready_timeout", ready_timeout, 1)
    budget = _int(BUDGET_VAR, budget_seconds, 0)
    meta = lkg_meta if isinstance(lkg_meta, dict) else {}
    n = len(candidates) if chain else 1
    restore = bool(meta)
    loads = n + (1 if restore else 0)
    worst = loads * timeout
    try:
        load = int(meta.get("load_seconds") or 0)
    except (TypeError, ValueError):
        load = 0
    expected = loads * load if load > 0 else None
    parts = "%d candidate%s (the configuration%s)" % (
        n, "" if n == 1 else "s", "" if n == 1 else " and %d fallback%s" % (n - 1, "" if n == 2 else "s"))
    first = " (no last-known-good to restore: a first deploy stops the failing unit)"
    what = parts + (" + restoring last-known-good" if restore else first)
    line = "fallback chain worst case: %s = %d load%s x sglang_ready_timeout=%d s = %d s" % (
        what, loads, "" if loads == 1 else "s", timeout, worst)
    line += ("; at the last-known-good's measured load time (%d s): %d s" % (load, expected) if expected is not None
             else "; no measured load time yet")
    line += "; cap %s=%s" % (BUDGET_VAR, budget if budget else "0 (none)")
    error = ""
    if budget and worst > budget:
        error = ("%s=%d is below the fallback chain's worst case of %d s (%s, each up to sglang_ready_timeout=%d s): "
                 "allowed 0 (no cap) or at least %d; or fewer candidates (a shorter sglang_fallback_chain, "
                 "sglang_fallbacks: false) or a smaller sglang_ready_timeout" % (
                     BUDGET_VAR, budget, worst, what, timeout, worst))
    return dict(candidates=n, loads=loads, restore=restore, worst_case_seconds=worst,
                load_seconds=load if load > 0 else None, expected_seconds=expected, budget_seconds=budget,
                line=line, error=error)

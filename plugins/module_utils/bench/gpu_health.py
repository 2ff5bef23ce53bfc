# -*- coding: utf-8 -*-
# Copyright: gpuhost.sglang contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""GPU health in serving_bench: what a result carries, when a run may become a baseline, when a regression
verdict is refused.

A measurement on a GPU whose PCIe link trained down, that throttles, or that logged XID or ECC errors is a wrong
measurement. serving_bench takes gpu_facts' ``health`` reading taken before the run (option ``gpu_health``) and,
in ``mode=finalize``, the one taken after (``gpu_health_after``):

* every level result and history line carries ``gpu_health`` (the comparable state, gpu/health.py ``state()``),
  and so does the run's fingerprint;
* a level that would record a baseline only marks it ``pending``; ``finalize`` records the pending baselines when
  the GPUs stayed healthy and discards them, marking the run ``gpu_degraded``, when they did not (a run that is
  never finalised records none: the safe side);
* a run whose GPUs were degraded before it started records no baseline and gets no verdict;
* a regression verdict against a baseline measured in another health state is refused, with both states' reasons.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

from ansible_collections.gpuhost.sglang.plugins.module_utils.gpu import health as gpu_health


def state(reading):
    """The comparable state of a gpu_facts health reading (None when no reading was given)."""
    if not reading:
        return None
    if reading.get("state") == "unknown":
        return {"state": "unknown", "reason": reading.get("reason"), "gpus": [], "p2p": None}
    return gpu_health.state(reading)


def describe(st):
    if st is None:
        return "not recorded"
    if st.get("state") == "unknown":
        return "unknown (%s)" % st.get("reason")
    problems = ["gpu%d: %s" % (g["index"], p) for g in st.get("gpus") or [] for p in g.get("problems") or []]
    links = ", ".join(sorted(set(g["pcie_max"] + " width x%s" % g["pcie_width"] for g in st.get("gpus") or [])))
    return "%s, %d GPU(s) %s%s" % (st["state"], len(st.get("gpus") or []), links,
                                   ("; " + "; ".join(problems)) if problems else "")


def refusal(base_state, now_state):
    """Why a regression verdict between a baseline and this run is refused, or None when their GPU health states
    are the same. A baseline recorded before health was recorded has none: it is compared as before."""
    if base_state is None:
        return None
    if now_state is None:
        return ("the baseline was measured with GPU health recorded (%s) and this run has none: pass gpu_health "
                "(gpu_facts' health) to compare" % describe(base_state))
    if now_state.get("state") != "ok":
        return "this run's GPUs are %s" % describe(now_state)
    if base_state != now_state:
        return "GPU health differs: baseline %s; this run %s" % (describe(base_state), describe(now_state))
    return None


def may_record(now_state):
    """(bool, why not): a degraded or unknown GPU state never becomes a baseline."""
    if now_state is None:
        return True, None
    if now_state.get("state") != "ok":
        return False, "GPU health before the run is %s" % describe(now_state)
    return True, None


def degradation(before, after):
    """What got worse during the run (gpu/health.py degradation of the two full readings)."""
    if before and before.get("state") == "unknown":
        return []  # nothing was known before the run (no NVML): nothing to degrade from, and no baseline is pending
    if not before or not after:
        return ["no GPU health reading %s the run" % ("before" if not before else "after")]
    if after.get("state") == "unknown":
        return ["GPU health after the run could not be read: %s" % after.get("reason")]
    return gpu_health.degradation(before, after)

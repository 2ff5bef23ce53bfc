# -*- coding: utf-8 -*-
# Copyright: gpuhost.sglang contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Campaign state on the controller: one append-only JSONL file per campaign (bench/store.append_jsonl: one
write under an exclusive lock, fsync, a torn last line never glued onto). Events:
  plan   {candidates, campaign}        each run of the playbook
  start  {id, index}                   a candidate is about to restart the server
  row    {id, index, status, class, ...}  the candidate's result (terminal: it never runs again; except a
                                       gpu_degraded row, measured on degraded GPUs: the candidate runs again and
                                       its next row replaces it)
  adopt  {id, options}                 the winner was deployed as last-known-good
A candidate with a ``start`` and no ``row`` was interrupted: a resumed campaign runs it again, nothing else.
Crash memory carries over: the failed rows of the other campaigns in the same state directory (one host's) rule
out a new campaign's candidates too (``earlier_failures``).
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import glob
import os
import time

from ansible_collections.gpuhost.sglang.plugins.module_utils.bench import store
from ansible_collections.gpuhost.sglang.plugins.module_utils.tune import memory

TERMINAL = ("ok", "rejected", "ruled_out", "incoherent", "inaccurate", "slo_violation", "bench_failed", "startup_failed",
            "error")
# rows whose measurement is void: the candidate runs again when the campaign resumes
RERUN = ("gpu_degraded",)


FAILED = ("startup_failed", "incoherent", "bench_failed")


def state_path(state_dir, name):
    return os.path.join(state_dir, name, "state.jsonl")


def earlier_failures(state_dir, name):
    """Failed rows of every other campaign under ``state_dir``, each with its ``campaign`` name (crash memory that
    carries over to the next campaign on the same host), in campaign-name order."""
    out = []
    for path in sorted(glob.glob(os.path.join(state_dir, "*", "state.jsonl"))):
        other = os.path.basename(os.path.dirname(path))
        if other == name:
            continue
        for row in sorted(CampaignState(path).rows().values(), key=lambda r: r.get("index", 0)):
            if row.get("status") in FAILED and row.get("class"):
                out.append(dict(row, campaign=other))
    return out


class CampaignState(object):
    def __init__(self, path):
        self.path = path
        self.events = store.read_jsonl(path)

    def append(self, event, **fields):
        fields.update({"event": event, "ts": store.now_iso(), "epoch": round(time.time(), 3)})
        store.append_jsonl(self.path, fields)
        self.events.append(fields)
        return fields

    def rows(self):
        """Rows by candidate id (the first terminal one wins: it is never replaced; a RERUN row is, by the next)."""
        out = {}
        for ev in self.events:
            if ev.get("event") == "row" and (ev.get("id") not in out or out[ev["id"]].get("status") in RERUN):
                out[ev["id"]] = ev
        return out

    def final(self, candidate_id):
        """The candidate's row when it never runs again (None: none yet, or a RERUN row)."""
        row = self.rows().get(candidate_id)
        return None if row is None or row.get("status") in RERUN else row

    def interrupted(self):
        rows = self.rows()
        started = [ev for ev in self.events if ev.get("event") == "start"]
        return sorted(set(ev["id"] for ev in started if ev["id"] not in rows))

    def spent_s(self):
        """Seconds spent on candidates so far, over every run of the campaign."""
        return round(sum(r.get("duration_s") or 0.0 for r in self.rows().values()), 1)

    def begin(self, candidate, rules, budget_s=None, now=None, earlier=()):
        """Decide what happens to ``candidate``: run, done (resume), ruled_out (a row is recorded) or budget.
        ``earlier``: failed rows of earlier campaigns (``earlier_failures``), consulted after this campaign's."""
        rows = self.rows()
        if self.final(candidate["id"]):
            return {"action": "done", "row": rows[candidate["id"]]}
        if candidate["index"] > 0:
            hit = memory.ruled_out(candidate, sorted(rows.values(), key=lambda r: r.get("index", 0)) + list(earlier), rules)
            if hit:
                row = self.append("row", id=candidate["id"], index=candidate["index"], name=candidate["name"],
                                  options=candidate["options"], delta=candidate["delta"], status="ruled_out",
                                  ruled_out_by=hit["row"], ruled_out_by_index=hit["index"], message=hit["reason"],
                                  ruled_out_by_campaign=hit.get("campaign"), duration_s=0.0)
                return {"action": "ruled_out", "row": row}
            if budget_s is not None and self.spent_s() >= budget_s:
                return {"action": "budget", "row": None,
                        "message": "time budget %ss spent (%ss): not started; raise time_budget_s and resume" % (budget_s, self.spent_s())}
        rerun = candidate["id"] in self.interrupted() or candidate["id"] in rows
        self.append("start", id=candidate["id"], index=candidate["index"], name=candidate["name"], rerun=rerun)
        return {"action": "run", "row": None, "rerun": rerun}

# -*- coding: utf-8 -*-
# Copyright: gpuhost.sglang contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The polling loop of gpuhost.sglang.async_progress: ask an async job's status, print the job's progress line when it
changed, stop when the job finished or the wait ran out. The job itself runs detached on the host (Ansible's
async_wrapper forks it into its own session: ansible/modules/async_wrapper.py ``daemonize_self``), so a wait that ends
early, a dropped connection or a killed controller leave it running."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import time

JOB_KEYS = ("ansible_job_id", "results_file", "started", "finished", "stdout", "stderr", "stdout_lines",
            "stderr_lines", "erased")


def wait(status, progress, show, interval, timeout, sleep=time.sleep, clock=time.monotonic):
    """Poll until the job finished; returns (finished, result): the job's result (its own keys, without async_status'
    bookkeeping) with ``progress_lines`` (how many lines were shown), or why the wait ended without it.

    ``status()``: async_status' answer; ``progress()``: the job's progress line or None; ``show(line)``: prints it."""
    deadline = clock() + timeout
    last, shown = None, 0
    # polls 1, 2, 4 ... s apart up to interval: a job that ends at once (a model found in place) is not waited for a
    # whole interval
    pause = min(1.0, interval)
    while True:
        st = status()
        if st.get("failed") and not st.get("finished"):
            return False, {"failed": True, "msg": "the async job's status could not be read: %s" % st.get("msg", st)}
        line = progress()
        if line and line != last:
            show(line)
            last, shown = line, shown + 1
        if st.get("finished"):
            res = dict((k, v) for k, v in st.items() if k not in JOB_KEYS)
            res["progress_lines"] = shown
            return True, res
        if clock() >= deadline:
            msg = ("the job %s still runs after %d s; it keeps running on the host: run the play again to wait for it "
                   "(a new run waits for the running one)" % (st.get("ansible_job_id"), timeout))
            return False, {"failed": True, "progress_lines": shown, "msg": msg}
        sleep(pause)
        pause = min(pause * 2, interval)

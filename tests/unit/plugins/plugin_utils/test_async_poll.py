from __future__ import absolute_import, division, print_function

__metaclass__ = type

from ansible_collections.gpuhost.sglang.plugins.plugin_utils import async_poll


class Clock(object):
    def __init__(self):
        self.t = 0.0

    def __call__(self):
        return self.t

    def sleep(self, s):
        self.t += s


def test_prints_each_new_line_and_returns_the_jobs_result():
    clock = Clock()
    answers = iter([{"started": True, "finished": False, "ansible_job_id": "j1"}] * 3
                   + [{"started": True, "finished": True, "ansible_job_id": "j1", "changed": True, "status": "downloaded"}])
    lines = iter(["m: downloading 0.10 / 1.00 GiB (10%)", "m: downloading 0.10 / 1.00 GiB (10%)",
                  "m: downloading 0.60 / 1.00 GiB (60%)", "m: done 1.00 / 1.00 GiB (100%)"])
    shown = []
    finished, res = async_poll.wait(lambda: next(answers), lambda: next(lines), shown.append, 15, 100, clock.sleep, clock)
    assert shown == ["m: downloading 0.10 / 1.00 GiB (10%)", "m: downloading 0.60 / 1.00 GiB (60%)",
                     "m: done 1.00 / 1.00 GiB (100%)"]
    # polls 1, 2 and 4 s apart (a quick job is not waited for a whole interval), then every interval
    assert finished and res == {"changed": True, "status": "downloaded", "progress_lines": 3} and clock.t == 1 + 2 + 4


def test_a_failed_job_fails_with_its_message():
    finished, res = async_poll.wait(lambda: {"finished": True, "failed": True, "msg": "revision: sglang_model_revision=x"},
                                    lambda: None, print, 1, 10)
    assert finished and res["failed"] and res["msg"].startswith("revision: sglang_model_revision=x")


def test_the_wait_ends_at_the_timeout_and_leaves_the_job_running():
    clock = Clock()
    finished, res = async_poll.wait(lambda: {"started": True, "finished": False, "ansible_job_id": "j2"}, lambda: None,
                                    print, 10, 30, clock.sleep, clock)
    assert not finished and res["failed"] and "j2 still runs after 30 s" in res["msg"] and clock.t == 1 + 2 + 4 + 8 + 10 + 10


def test_an_unreadable_status_fails():
    finished, res = async_poll.wait(lambda: {"failed": True, "msg": "could not find job"}, lambda: None, print, 1, 10)
    assert not finished and res["failed"] and "could not find job" in res["msg"]

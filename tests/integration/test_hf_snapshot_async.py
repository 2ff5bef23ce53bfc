# -*- coding: utf-8 -*-
# Copyright: gpuhost.sglang contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The serving role's model phase as a play (tests/integration/files/model_download.yml, local connection): the
download runs as an async job, the play prints its progress lines, and a controller that dies mid-download (its
whole process group killed, as when the SSH session drops) leaves the job running; the next run waits for it and
downloads nothing again, and a run after that sends no request at all. The Hub is the loopback stand-in (tests/harness/hub_standin.py), throttled so that the
download lasts a few seconds."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import os
import signal
import subprocess
import sys
import time

import pytest

from ansible_collections.gpuhost.sglang.tests import harness
from ansible_collections.gpuhost.sglang.tests.harness.hub_standin import HubStandin
from engine import ENGINE_VENV, TINYMODEL  # pylint: disable=import-error

XDIST_SCOPE = "test"
MODEL = os.path.join(TINYMODEL, "good")
REPO = "gpuhost-test/tiny-chat"
PLAY = os.path.join(harness.ROOT, "tests", "integration", "files", "model_download.yml")
pytestmark = pytest.mark.skipif(
    not (os.access(os.path.join(ENGINE_VENV, "bin", "python"), os.X_OK) and os.path.isfile(os.path.join(MODEL, "config.json"))),
    reason="engine venv / tiny model missing: run tests/fixtures/engine-venv.sh and tests/fixtures/tinymodel.sh")


def start(tmp_path, hub, *extra):
    (tmp_path / "state").mkdir(exist_ok=True)
    inv = tmp_path / "hosts"
    # an inventory variable, not -e: the role's tasks set their own interpreter (the engine venv's) over it
    inv.write_text("localhost ansible_connection=local ansible_python_interpreter=%s\n" % sys.executable)
    cmd = [os.path.join(os.path.dirname(sys.executable), "ansible-playbook"), "-i", str(inv), PLAY,
           "-e", "sglang_venv=%s" % ENGINE_VENV,
           "-e", "sglang_state_dir=%s" % (tmp_path / "state"), "-e", "sglang_model_path=%s" % (tmp_path / "model"),
           "-e", "sglang_model_repo_id=%s" % REPO, "-e", "sglang_model_progress_interval=1",
           # the async job's status files: this test's own directory
           "-e", "ansible_async_dir=%s" % (tmp_path / "async")] + list(extra)
    env = harness.ansible_env(HF_ENDPOINT=hub.base_url, HF_HOME=str(tmp_path / "hf-home"), TMPDIR=str(tmp_path))
    env.pop("HF_TOKEN", None)
    return subprocess.Popen(cmd, cwd=harness.ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            start_new_session=True)


def kill_group(proc):
    os.killpg(proc.pid, signal.SIGKILL)  # the controller and its workers: the connection is gone
    return time.monotonic()


def test_the_download_outlives_a_dead_controller_and_the_next_run_waits_for_it(tmp_path):
    shard = bytes(range(256)) * (6 << 12)  # 6 MiB more weights, at 0.5 MiB/s: about 16 s
    with HubStandin(REPO, MODEL, extra_files={"model-extra-shard.safetensors": shard}, throttle=1 << 19) as hub:
        total = sum(len(f["data"]) for f in hub.files.values())
        first = start(tmp_path, hub)
        out1, killed = harness.watch_output(first, [(r"downloading \d", kill_group)], 120)
        first.wait()
        assert killed, out1[-3000:]
        t0 = time.monotonic()
        second = start(tmp_path, hub)
        out2, dummy = harness.watch_output(second, [], 120)
        seconds = time.monotonic() - t0
        print("killed after the first progress line; the rerun waited %.1f s; %d requests, %d of %d bytes sent"
              % (seconds, len(hub.requests), hub.bytes_sent, total))
        asked = len(hub.requests)
        t0 = time.monotonic()
        third = start(tmp_path, hub)
        out3, dummy = harness.watch_output(third, [], 120)
        third_s = time.monotonic() - t0
        print("a third run, the model in place: %.1f s (the whole play), %d requests" % (third_s, len(hub.requests) - asked))
    assert third.returncode == 0 and len(hub.requests) == asked, out3[-3000:]  # offline: not one request
    assert [ln for ln in out3.splitlines() if "localhost: model: " in ln] == [
        "localhost: model: present 0.01 / 0.01 GiB (100%), 7/7 files, 0.0 MiB/s"], out3[-3000:]  # not the old job's line
    assert second.returncode == 0, out2[-4000:]
    assert "Model | download progress" in out2
    lines = [ln for ln in out2.splitlines() if "localhost: model: " in ln]
    print("\n".join(lines))
    # the rerun followed the detached job live (its progress file), then its own job found the model in place
    assert any(ln.startswith("localhost: model: downloading") for ln in lines), out2[-3000:]
    assert lines[-1].startswith("localhost: model: present 0.01 / 0.01 GiB (100%), 7/7 files"), out2[-3000:]
    # the first job finished the download alone: every byte once, the Hub listed once (the rerun's job found the
    # manifest after the lock)
    assert hub.bytes_sent == total, (hub.bytes_sent, total)
    assert hub.count("GET", "model_info") == 1
    with open(str(tmp_path / "model" / "model-extra-shard.safetensors"), "rb") as fh:
        assert fh.read() == shard


def test_check_mode_lists_the_repository_and_writes_nothing(tmp_path):
    """--check: the download task runs in place (no async job) as the module's check mode: it asks the Hub for the
    file list once, says it would change, and writes nothing."""
    with HubStandin(REPO, MODEL) as hub:
        proc = start(tmp_path, hub, "--check")
        out, dummy = harness.watch_output(proc, [], 120)
    assert proc.returncode == 0, out[-3000:]
    assert "changed=1" in out and "Model | download progress" in out
    assert [r["kind"] for r in hub.requests] == ["model_info"] and hub.bytes_sent == 0
    assert not os.path.exists(str(tmp_path / "model")) and os.listdir(str(tmp_path / "state")) == []

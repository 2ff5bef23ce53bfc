# -*- coding: utf-8 -*-
# Copyright: gpuhost.sglang contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""roles/sglang/files/gpuhost-liveness.py (the deep liveness timer's program) against the loopback fake server:
a server that answers /health but streams garbage fails the check, the second failure in a row restarts it
(when enabled) and says why, NaN logprobs are caught, a healthy server passes; the textfile is valid Prometheus
text that promtool reads."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import importlib.util
import json
import os
import subprocess
import sys
import urllib.request

import pytest

from fakeserver import fake_server, free_port  # pylint: disable=import-error

from ansible_collections.gpuhost.sglang.plugins.module_utils.bench.probes import DEFAULT_PROBES

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
PROGRAM = os.path.join(ROOT, "roles", "sglang", "files", "gpuhost-liveness.py")
CACHE = os.path.join(os.environ.get("GPUHOST_ROOT") or ROOT, ".cache")
PROMTOOL = os.path.join(CACHE, "monitoring-apt-repo", "root", "usr", "bin", "promtool")


def load():
    spec = importlib.util.spec_from_file_location("gpuhost_liveness", PROGRAM)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


live = load()


def config(tmp_path, url, **kw):
    cfg = dict(live.DEFAULTS, base_url=url, probes=DEFAULT_PROBES[:3], textfile=str(tmp_path / "tf" / "liveness.prom"),
               state_file=str(tmp_path / "state" / "state.json"), timeout=10.0, unit="sglang.service")
    cfg.update(kw)
    return cfg


class Restarts(object):
    """systemctl: ``is-active`` answers ``active_rc`` (0 = active), ``restart`` calls are recorded."""

    def __init__(self, active_rc=0):
        self.calls = []
        self.active_rc = active_rc

    def __call__(self, argv):
        if argv[:2] == ["systemctl", "is-active"]:
            return self.active_rc
        self.calls.append(argv)
        return 0


def prom(cfg):
    with open(cfg["textfile"]) as fh:
        return fh.read()


def test_healthy_server_passes_and_writes_the_textfile(tmp_path):
    with fake_server("ok") as (url, dummy):
        cfg = config(tmp_path, url, restart=True)
        result, state, restarted = live.run(cfg, now=1000, runner=Restarts())
    assert result["passed"] and result["class"] == "ok" and result["nan"] is False
    assert result["probes"] == {"capital": True, "arithmetic": True, "gold": True}
    assert result["requests"] == 6  # /health, /v1/models, 3 probes, the NaN probe
    text = prom(cfg)
    assert 'gpuhost_liveness_passed{unit="sglang.service"} 1' in text
    assert 'gpuhost_liveness_last_run_timestamp_seconds{unit="sglang.service"} 1000' in text
    assert not restarted and state["consecutive_failures"] == 0
    assert not [f for f in os.listdir(os.path.dirname(cfg["textfile"])) if f.endswith(".tmp")]


def test_garbage_behind_a_healthy_health_endpoint_fails_and_restarts_after_two(tmp_path, capsys):
    restarts = Restarts()
    with fake_server("garbage") as (url, dummy):
        with urllib.request.urlopen(url + "/health", timeout=5) as resp:
            assert resp.status == 200  # the liveness check that exists today passes
        cfg = config(tmp_path, url, restart=True, restart_after=2)
        first, state, restarted = live.run(cfg, now=1000, runner=restarts)
        assert not first["passed"] and first["class"] == "garbage" and not restarted and restarts.calls == []
        assert state["consecutive_failures"] == 1
        assert 'gpuhost_liveness_failure{unit="sglang.service",class="garbage"} 1' in prom(cfg)
        second, state, restarted = live.run(cfg, now=1300, runner=restarts)
    assert restarted and restarts.calls == [["systemctl", "restart", "sglang.service"]]
    assert state["restarts"] == 1 and state["consecutive_failures"] == 0
    assert "failed 2 liveness checks in a row (last: garbage: capital: U+FFFD or control characters" in \
        state["last_restart"]["reason"]
    err = capsys.readouterr().err
    assert "gpuhost-liveness: restarting sglang.service: sglang.service failed 2 liveness checks in a row" in err
    assert 'gpuhost_liveness_restarts_total{unit="sglang.service"} 1' in prom(cfg)


def test_restart_disabled_only_counts(tmp_path):
    restarts = Restarts()
    with fake_server("garbage") as (url, dummy):
        cfg = config(tmp_path, url, restart=False)
        for t in (1, 2, 3):
            dummy1, state, restarted = live.run(cfg, now=t, runner=restarts)
    assert restarts.calls == [] and state["consecutive_failures"] == 3 and not restarted
    assert 'gpuhost_liveness_restart_enabled{unit="sglang.service"} 0' in prom(cfg)


@pytest.mark.parametrize("behavior,cls", [("nan_logprobs", "nan"), ("empty", "empty"), ("http_5xx", "http")])
def test_failure_classes(tmp_path, behavior, cls):
    with fake_server(behavior) as (url, dummy):
        result = live.check(config(tmp_path, url))
    assert not result["passed"] and result["class"] == cls, result


def test_nothing_listening_is_connect_and_a_pass_resets_the_count(tmp_path):
    cfg = config(tmp_path, "http://127.0.0.1:%d" % free_port(), restart=True, restart_after=3)
    result, state, dummy = live.run(cfg, now=1, runner=Restarts())
    assert result["class"] == "connect" and state["consecutive_failures"] == 1
    with fake_server("ok") as (url, dummy):
        cfg["base_url"] = url
        dummy1, state, dummy2 = live.run(cfg, now=2, runner=Restarts())
    assert state["consecutive_failures"] == 0 and state["last_success"] == 2


def test_a_unit_that_is_not_active_is_not_probed_nor_counted(tmp_path):
    with fake_server("garbage") as (url, dummy):
        cfg = config(tmp_path, url, restart=True, restart_after=1)
        result, state, restarted = live.run(cfg, now=1, runner=Restarts(active_rc=3))
    assert result["class"] == "inactive" and result["requests"] == 0 and not restarted
    assert state.get("consecutive_failures", 0) == 0
    assert 'gpuhost_liveness_unit_active{unit="sglang.service"} 0' in prom(cfg)


def test_nan_and_inf_logprobs_in_a_stream_are_nan():
    raw = b'data: {"choices":[{"text":" Paris","logprobs":{"token_logprobs":[NaN]}}]}\n\ndata: [DONE]\n\n'
    text, lps = live.parse_stream(raw, "completions")
    assert text == " Paris" and live.has_nan(lps)
    raw = b'{"choices":[{"message":{"content":"Paris"},"logprobs":{"content":[{"logprob":-Infinity}]}}]}'
    assert live.has_nan(live.parse_stream(raw, "chat")[1])
    assert live.judge_probe({"expect": "four"}, "2 + 2 = 4")[0] == "ok"


def test_program_cli_exit_codes_and_bad_config(tmp_path):
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps({"api": "grpc", "probes": []}))
    res = subprocess.run([sys.executable, PROGRAM, str(bad)], capture_output=True, text=True, timeout=30, check=False)
    assert res.returncode == 2 and "api must be completions or chat, got 'grpc'" in res.stderr
    with fake_server("garbage") as (url, dummy):
        cfg = config(tmp_path, url, active_command=[])
        path = tmp_path / "cfg.json"
        path.write_text(json.dumps(cfg))
        res = subprocess.run([sys.executable, PROGRAM, str(path)], capture_output=True, text=True, timeout=60, check=False)
    assert res.returncode == 1 and "FAILED (garbage)" in res.stderr


def test_textfile_is_valid_prometheus_text(tmp_path):
    if not os.access(PROMTOOL, os.X_OK):
        pytest.skip("promtool missing: tests/fixtures/monitoring-apt-repo.sh (stage 20) unpacks it")
    with fake_server("garbage") as (url, dummy):
        cfg = config(tmp_path, url)
        live.run(cfg, now=5, runner=Restarts())
    with open(cfg["textfile"]) as fh:
        res = subprocess.run([PROMTOOL, "check", "metrics"], stdin=fh, capture_output=True, text=True, timeout=60, check=False)
    assert res.returncode == 0, res.stdout + res.stderr

# -*- coding: utf-8 -*-
# Copyright: gpuhost.sglang contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""hf_snapshot as Ansible runs it (its own process, the engine venv's interpreter) with the real huggingface_hub
client (the engine venv's pin) against a Hub stand-in on loopback (tests/harness/hub_standin.py, HF_ENDPOINT) that
serves the sandbox's tiny model: a fresh download, a rerun that sends no request at all, a download whose
connection drops halfway through the weights and is resumed, a wrong revision refused naming the variable, and the
token sent only where the repository needs one."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import filecmp
import os
import sys

import pytest

from ansible_collections.gpuhost.sglang.tests import harness
from ansible_collections.gpuhost.sglang.tests.harness.hub_standin import COMMIT, HubStandin
from engine import ENGINE_VENV, TINYMODEL  # pylint: disable=import-error

XDIST_SCOPE = "test"
ENGINE_PY = os.path.join(ENGINE_VENV, "bin", "python")
MODEL = os.path.join(TINYMODEL, "good")
REPO = "gpuhost-test/tiny-chat"
WEIGHTS = "model.safetensors"
SHARD = "model-extra-shard.safetensors"
PLACEHOLDER = "replace-me-with-ansible-vault"  # the production inventory's vault placeholder
pytestmark = pytest.mark.skipif(
    not (os.access(ENGINE_PY, os.X_OK) and os.path.isfile(os.path.join(MODEL, WEIGHTS))),
    reason="engine venv / tiny model missing: run tests/fixtures/engine-venv.sh and tests/fixtures/tinymodel.sh")


@pytest.fixture(name="ansible_path")
def ansible_path_fixture(tmp_path_factory):
    """The engine venv has no ansible: the module's ansible.module_utils come from this interpreter's ansible, as
    AnsiballZ would carry them to the host."""
    import ansible  # pylint: disable=import-outside-toplevel
    d = tmp_path_factory.mktemp("ansible-path")
    os.symlink(os.path.dirname(ansible.__file__), str(d / "ansible"))
    return str(d)


@pytest.fixture(autouse=True)
def own_tmpdir(monkeypatch, tmp_path):
    """hf_snapshot's lock file goes to the temporary directory (TMPDIR): this test's own."""
    monkeypatch.setenv("TMPDIR", str(tmp_path))


@pytest.fixture(name="hub")
def hub_fixture(monkeypatch, tmp_path):
    with HubStandin(REPO, MODEL, tokens=("hf_validReadToken",)) as hub:
        monkeypatch.setenv("HF_ENDPOINT", hub.base_url)
        monkeypatch.setenv("HF_HOME", str(tmp_path / "hf-home"))  # no token or cache of the machine's own
        monkeypatch.delenv("HF_TOKEN", raising=False)
        monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
        yield hub


def snapshot(ansible_path, tmp_path, **args):
    args.setdefault("repo_id", REPO)
    args.setdefault("local_dir", str(tmp_path / "model"))
    res = harness.run_module("hf_snapshot", args, tmp_path=tmp_path, python=ENGINE_PY, pythonpath=[ansible_path],
                             timeout=120)
    assert "Traceback" not in res.stdout + res.stderr, res.stderr[-3000:]
    return res


def figures(hub, res, what):
    """The run's figures (pytest -s prints them): requests by kind, body bytes sent, seconds."""
    kinds = {}
    for r in hub.requests:
        kinds["%s %s" % (r["method"], r["kind"])] = kinds.get("%s %s" % (r["method"], r["kind"]), 0) + 1
    print("%s: %d requests %s, %d body bytes, %.2f s (module run)"
          % (what, len(hub.requests), kinds, hub.bytes_sent, res.seconds))


def same_files(local_dir):
    names = sorted(n for n in os.listdir(MODEL) if os.path.isfile(os.path.join(MODEL, n)))
    match, mismatch, errors = filecmp.cmpfiles(MODEL, local_dir, names, shallow=False)
    return sorted(match) == names and not mismatch and not errors


def test_fresh_download_then_a_rerun_sends_no_request(hub, ansible_path, tmp_path):
    res = snapshot(ansible_path, tmp_path, revision="main")
    figures(hub, res, "fresh")
    assert not res.get("failed"), res.get("msg")
    assert (res["changed"], res["status"], res["commit"]) == (True, "downloaded", COMMIT)
    assert same_files(str(tmp_path / "model"))
    assert hub.count("GET", "resolve") == len(hub.files)  # each file once
    assert hub.bytes_sent == sum(len(f["data"]) for f in hub.files.values())
    hub.reset_counts()
    again = snapshot(ansible_path, tmp_path, revision="main")
    figures(hub, again, "rerun")
    assert not again.get("failed"), again.get("msg")
    assert (again["changed"], again["status"]) == (False, "present")
    assert hub.requests == [] and hub.bytes_sent == 0  # not a single request: the manifest matched


def test_a_download_cut_halfway_resumes_with_a_range_request(ansible_path, tmp_path, monkeypatch):
    """The connection drops in the middle of a weights shard; huggingface_hub's http_get resumes it with a Range
    request from what it had written. It writes what it reads in DOWNLOAD_CHUNK_SIZE pieces (10 MiB, constants.py;
    file_download.py ``http_get``), so it resumes from the last whole piece: the tiny model's weights (2 MiB) would
    simply start over, and the repository gets a second, 24 MiB shard that is cut at 15 MiB."""
    chunk = 10 << 20
    shard = bytes(range(256)) * (24 << 12)
    with HubStandin(REPO, MODEL, extra_files={SHARD: shard}) as hub:
        monkeypatch.setenv("HF_ENDPOINT", hub.base_url)
        monkeypatch.setenv("HF_HOME", str(tmp_path / "hf-home"))
        cut = 15 << 20
        hub.cut_after[SHARD] = cut
        res = snapshot(ansible_path, tmp_path, revision=COMMIT)
    figures(hub, res, "cut at %d of %d bytes, resumed" % (cut, len(shard)))
    assert not res.get("failed"), res.get("msg")
    assert res["status"] == "downloaded" and same_files(str(tmp_path / "model"))
    with open(str(tmp_path / "model" / SHARD), "rb") as fh:
        assert fh.read() == shard
    gets = [r for r in hub.requests if r["method"] == "GET" and r["path"].endswith("/" + SHARD)]
    assert [r["range"] for r in gets] == [None, "bytes=%d-" % chunk], gets
    # sent once in full, and again only from the last whole piece to the cut
    assert hub.bytes_sent == sum(len(f["data"]) for f in hub.files.values()) + (cut - chunk)


@pytest.mark.parametrize("revision", ["0" * 40, "no-such-branch"])
def test_a_wrong_revision_is_refused_naming_the_variable(hub, ansible_path, tmp_path, revision):
    res = snapshot(ansible_path, tmp_path, revision=revision, names={"revision": "sglang_model_revision"})
    assert res.get("failed") and res["cls"] == "revision", res
    assert "sglang_model_revision=%s does not exist in repository %s" % (revision, REPO) in res["msg"]
    assert not os.path.exists(str(tmp_path / "model"))  # refused before anything was written
    assert hub.count("GET", "resolve") == 0


def test_a_public_repository_is_never_sent_the_placeholder_token(hub, ansible_path, tmp_path):
    """The Hub answers a request that carries an unknown token with 401, public repository or not: with the vault
    placeholder as the token, the download still works, and no request carried it."""
    res = snapshot(ansible_path, tmp_path, token=PLACEHOLDER)
    assert not res.get("failed"), res.get("msg")
    assert res["status"] == "downloaded" and same_files(str(tmp_path / "model"))
    assert not any(r["token"] for r in hub.requests)


def test_send_token_always_reports_a_refused_token_naming_the_variable(hub, ansible_path, tmp_path):
    res = snapshot(ansible_path, tmp_path, token=PLACEHOLDER, send_token="always", names={"token": "sglang_hf_token"})
    assert res.get("failed") and res["cls"] == "token", res
    assert "sglang_hf_token was refused by the Hub (401 Invalid credentials" in res["msg"]


def test_a_gated_repository_gets_the_token_after_the_hub_asks_for_it(ansible_path, tmp_path, monkeypatch):
    with HubStandin(REPO, MODEL, tokens=("hf_validReadToken",), gated=True) as hub:
        monkeypatch.setenv("HF_ENDPOINT", hub.base_url)
        monkeypatch.setenv("HF_HOME", str(tmp_path / "hf-home"))
        res = snapshot(ansible_path, tmp_path, token="hf_validReadToken")
        first_run = list(hub.requests)
        missing = snapshot(ansible_path, tmp_path, local_dir=str(tmp_path / "other"), names={"token": "sglang_hf_token"})
    assert not res.get("failed"), res.get("msg")
    assert res["status"] == "downloaded" and same_files(str(tmp_path / "model"))
    assert [(r["kind"], r["token"]) for r in first_run[:2]] == [("model_info", False), ("model_info", True)]
    assert all(r["token"] for r in first_run[2:])  # asked without it first, then everything with it
    assert missing.get("failed") and missing["cls"] == "gated" and "set sglang_hf_token" in missing["msg"]


if __name__ == "__main__":
    sys.exit(pytest.main([__file__, "-s", "-q", "-p", "no:cacheprovider"] + sys.argv[1:]))

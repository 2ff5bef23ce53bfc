# -*- coding: utf-8 -*-
# Copyright: gpuhost.sglang contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The host operations of the deploy transaction that its fake host (tests/harness/fake_deploy_host.py) stands in
for: the systemctl calls of a restart, and the venvs kept or pruned after a pass, on a real directory tree."""
from __future__ import absolute_import, division, print_function

__metaclass__ = type

import hashlib
import os
import subprocess

import pytest

from ansible_collections.gpuhost.sglang.plugins.module_utils.serving import ready, unit_host


def recorder(fail=None):
    calls = []

    def run(argv):
        calls.append(argv[1:])
        return (1, "", "boom") if fail and argv[1] == fail else (0, "", "")
    return calls, run


def test_a_restart_flushes_the_start_counter_first():
    """StartLimitBurst= counts every start, the deploy's own included, and reset-failed flushes the counter
    (systemd.unit(5), StartLimitIntervalSec=): flushed before each deploy restart, three deploys in a row leave the
    whole burst to crash restarts (the on-host proof: test_serving_role.py's crash after several deploys)."""
    calls, run = recorder()
    unit_host.restart(run, "sglang.service")
    assert calls == [["reset-failed", "sglang.service"], ["daemon-reload"], ["enable", "sglang.service"],
                     ["restart", "--no-block", "sglang.service"]]


def test_the_readiness_read_starts_at_the_restart_to_the_microsecond(monkeypatch, tmp_path):
    """A rollback restarted in the second its candidate failed read the candidate's failure line (port in use) as
    its own when the journal was taken from the whole second: the clock of a restart and of a restore, and the
    journal read from it, keep the microseconds (inspect's clock: test_unit_host_replica.py's no-op deploy; the
    on-host proof: test_replica_restart_hosts.py)."""
    monkeypatch.setattr(unit_host.time, "time", lambda: 1796322745.6543214)
    _calls, run = recorder()
    assert unit_host.restart(run, "sglang.service") == 1796322745.654321
    lkg = {"unit": "u.service", "unit_path": "/etc/systemd/system/u.service", "env_file": "/etc/u.env",
           "unit_b64": unit_host.b64("[Service]\n"), "env_b64": unit_host.b64("")}
    assert unit_host.restore(str(tmp_path), run, lkg, "u.service", "/etc/systemd/system", "/etc/u.env", False) \
        == 1796322745.654321
    argv = []

    def journalctl(cmd, **_kw):
        argv.append(cmd)
        return subprocess.CompletedProcess(cmd, 0, stdout="", stderr="")

    ready.read_journal("sglang.service", 1796322745.654321, run=journalctl)
    assert argv[0][argv[0].index("--since") + 1] == "@1796322745.654321", argv


def test_a_renamed_unit_stops_the_old_one_before_its_restart():
    calls, run = recorder()
    unit_host.restart(run, "sglang-b.service", stop_unit="sglang.service")
    assert calls[0] == ["disable", "--now", "sglang.service"] and calls[1] == ["reset-failed", "sglang-b.service"]


def test_a_failed_systemctl_step_names_itself():
    _calls, run = recorder(fail="enable")
    with pytest.raises(unit_host.HostError, match=r"systemctl enable sglang.service failed \(rc 1\): boom"):
        unit_host.restart(run, "sglang.service")


def venvs(root, names):
    for name in names:
        os.makedirs(os.path.join(str(root), "opt/sglang", name, "bin"))


@pytest.mark.parametrize("check_mode", [False, True])
def test_after_a_version_change_passes_the_old_venv_goes_and_the_stable_path_follows(tmp_path, check_mode):
    """An engine version change installs into its own venv; the pass keeps it and removes the others. A failed
    candidate is never recorded, so nothing is pruned and the last-known-good's venv stays (the transaction's
    tests: the record is untouched after every order of failures)."""
    venvs(tmp_path, ["venv-transformers-5.23.0", "venv-transformers-5.24.0"])
    os.symlink("/opt/sglang/venv-transformers-5.23.0", str(tmp_path / "opt/sglang/venv"))
    keep = "/opt/sglang/venv-transformers-5.24.0"
    changed = unit_host.prune_venvs(str(tmp_path), "/opt/sglang", keep, check_mode)
    assert changed == ["/opt/sglang/venv-transformers-5.23.0", "/opt/sglang/venv"]
    left = sorted(os.listdir(str(tmp_path / "opt/sglang")))
    if check_mode:
        assert left == ["venv", "venv-transformers-5.23.0", "venv-transformers-5.24.0"]
        assert os.readlink(str(tmp_path / "opt/sglang/venv")) == "/opt/sglang/venv-transformers-5.23.0"
    else:
        assert left == ["venv", "venv-transformers-5.24.0"]
        assert os.readlink(str(tmp_path / "opt/sglang/venv")) == keep
        assert unit_host.prune_venvs(str(tmp_path), "/opt/sglang", keep, False) == []  # the rerun changes nothing


def test_inspect_reports_the_checksum_of_every_file_the_deploy_owns_and_none_for_a_missing_one(tmp_path):
    """playbooks/tune.yml's "host untouched" check reads these; the list is unit_host's own (owned_files)."""
    unit_host.write_atomic(str(tmp_path), "/etc/systemd/system/u.service", "[Service]\n", 0o644)
    unit_host.write_atomic(str(tmp_path), "/etc/u.env", "A=1\n", 0o600)
    _calls, run = recorder()
    out = unit_host.inspect(str(tmp_path), run, "u.service", "/etc/systemd/system", "/etc/u.env", "/etc/u/lkg")
    files = out["files"]
    assert sorted(files) == sorted(["/etc/systemd/system/u.service", "/etc/u.env", "/etc/u/lkg/meta.json", "/etc/u/lkg/u.service",
                                    "/etc/u/lkg/env", "/etc/systemd/system/u.service.d/10-start-timeout.conf"])
    assert files["/etc/u.env"] == hashlib.sha256(b"A=1\n").hexdigest()
    assert files["/etc/u/lkg/meta.json"] is None
    assert unit_host.files_changed(files, files) == [
        "/etc/systemd/system/u.service.d/10-start-timeout.conf is missing before and after",
        "/etc/u/lkg/env is missing before and after", "/etc/u/lkg/meta.json is missing before and after",
        "/etc/u/lkg/u.service is missing before and after"]
    after = dict(files, **{"/etc/u.env": "0" * 64})
    assert "/etc/u.env changed (sha256 " in unit_host.files_changed(files, after)[1]

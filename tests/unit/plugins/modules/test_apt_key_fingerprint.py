# -*- coding: utf-8 -*-
# Copyright: gpuhost.sglang contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The repository key's primary fingerprint, read from the key file itself (no gpg on a Debian 13 host), against the
one the data names: the committed stand-in keys (armored, as NVIDIA publishes its .pub files) and the stand-in
repository's binary keyring, whose fingerprints gpg printed when they were made (tests/fixtures/nvidia-standin-repos.sh,
`gpg --show-keys --with-colons`)."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import os

import pytest

from ansible_collections.gpuhost.sglang.plugins.module_utils.gpu import openpgp
from ansible_collections.gpuhost.sglang.plugins.modules import apt_key_fingerprint
from ansible_collections.gpuhost.sglang.tests import harness

FIXTURES = os.path.join(os.path.dirname(__file__), os.pardir, os.pardir, os.pardir, "fixtures", "nvidia-standin-repos")
DEBIAN12 = os.path.join(FIXTURES, "debian12", "x86_64", "3bf863cc.pub")
DEBIAN13 = os.path.join(FIXTURES, "debian13", "x86_64", "8793F200.pub")
FPR12 = "C2900E2A16FF1722568B2ED8272EE525F2D0F4CC"
FPR13 = "B732DA044AECFD220ED06D8F13D01DC0AC042511"


def read(path):
    with open(path, "rb") as fh:
        return fh.read()


@pytest.mark.parametrize("path,fpr", [(DEBIAN12, FPR12), (DEBIAN13, FPR13)])
def test_armored_and_binary_key_give_gpgs_fingerprint(path, fpr):
    armored = read(path)
    assert openpgp.primary_fingerprint(armored) == fpr
    assert openpgp.primary_fingerprint(openpgp.dearmor(armored)) == fpr   # the binary keyring form (.gpg)


@pytest.mark.parametrize("data,why", [(b"", "no public key packet"), (b"\x00\x01", "not an OpenPGP packet"),
                                      (b"-----BEGIN PGP PUBLIC KEY BLOCK-----\n\n!!!\n-----END PGP PUBLIC KEY BLOCK-----\n",
                                       "bad ASCII armor")])
def test_not_a_key_is_refused(data, why):
    with pytest.raises(openpgp.NotAKey, match=why):
        openpgp.primary_fingerprint(data)


def test_a_truncated_key_is_refused():
    with pytest.raises(openpgp.NotAKey, match="truncated"):
        openpgp.primary_fingerprint(openpgp.dearmor(read(DEBIAN13))[:40])


def test_the_expected_key_passes_spaces_and_case_ignored(tmp_path, capsys):
    key = tmp_path / "k.asc"
    key.write_bytes(read(DEBIAN13))
    spaced = " ".join(FPR13[i:i + 4] for i in range(0, 40, 4)).lower()
    out = harness.call_module(capsys, apt_key_fingerprint, {"path": str(key), "fingerprint": spaced})
    assert out.rc == 0 and out["checked"] and out["fingerprint"] == FPR13 and not out["changed"], out
    assert key.exists()


def test_another_key_is_removed_and_the_variable_named(tmp_path, capsys):
    key = tmp_path / "k.asc"
    key.write_bytes(read(DEBIAN12))   # the old release's key where Debian 13's is expected
    out = harness.call_module(capsys, apt_key_fingerprint, {"path": str(key), "fingerprint": FPR13,
                                                            "source": "file:///srv/repo/debian13/x86_64/8793F200.pub"})
    assert out.rc == 1 and out["fingerprint"] == FPR12, out
    assert out["msg"].startswith("nvidia_driver_repo_key_fingerprint=%s: the repository key %s (from file:" % (FPR13, key))
    assert "has the primary key fingerprint %s; apt was not told to trust it and it was removed" % FPR12 in out["msg"]
    assert not key.exists()


def test_check_mode_reports_and_removes_nothing(tmp_path, capsys):
    key = tmp_path / "k.asc"
    key.write_bytes(read(DEBIAN12))
    out = harness.call_module(capsys, apt_key_fingerprint, {"path": str(key), "fingerprint": FPR13}, check_mode=True)
    assert out.rc == 1 and "it was removed" not in out["msg"] and key.exists(), out


def test_without_an_expected_fingerprint_it_reports_only(tmp_path, capsys):
    key = tmp_path / "k.gpg"
    key.write_bytes(openpgp.dearmor(read(DEBIAN12)))
    out = harness.call_module(capsys, apt_key_fingerprint, {"path": str(key)})
    assert out.rc == 0 and not out["checked"] and out["fingerprint"] == FPR12, out

# -*- coding: utf-8 -*-
# Copyright: gpuhost.sglang contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""dpkg selections of several packages in two dpkg calls (module gpuhost.sglang.dpkg_selections)."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import pytest

from ansible_collections.gpuhost.sglang.plugins.module_utils.gpu import dpkg_selections as ds

# dpkg 1.21 (Debian 12) `dpkg --get-selections libcuda1 nvidia-smi nvidia-kernel-open-dkms nope`: a Multi-Arch "same"
# package carries its architecture, an unknown name is only on stderr
GET = "libcuda1:amd64\t\t\t\thold\nnvidia-smi\t\t\t\t\tinstall\nnvidia-kernel-open-dkms\t\t\t\thold\n"


class FakeDpkg:
    def __init__(self, stdout=GET, set_rc=0):
        self.stdout, self.set_rc, self.calls = stdout, set_rc, []

    def __call__(self, argv, data=None):
        self.calls.append((argv, data))
        if argv[1] == "--get-selections":
            return 0, self.stdout, "dpkg: no packages found matching nope\n"
        return self.set_rc, "", "dpkg: error: unexpected end of file\n" if self.set_rc else ""


def test_parse_keys_arch_qualified_names_by_name_too():
    got = ds.parse_selections(GET + "garbage line here\n")
    assert got == {"libcuda1:amd64": "hold", "libcuda1": "hold", "nvidia-smi": "install",
                   "nvidia-kernel-open-dkms": "hold"}


def test_only_the_names_without_the_selection_are_set_in_one_call():
    dpkg = FakeDpkg()
    res = ds.apply(dpkg, ["libcuda1", "nvidia-smi", "nope", "nvidia-smi"], "hold")
    assert res["changed"] and res["changed_names"] == ["nvidia-smi", "nope"]
    assert res["before"] == {"libcuda1": "hold", "nvidia-smi": "install", "nope": "not present"}
    assert dpkg.calls == [(["dpkg", "--get-selections", "libcuda1", "nvidia-smi", "nope", "nvidia-smi"], None),
                          (["dpkg", "--set-selections"], "nvidia-smi hold\nnope hold\n")]


def test_nothing_to_do_is_unchanged_and_writes_nothing():
    dpkg = FakeDpkg()
    res = ds.apply(dpkg, ["libcuda1", "nvidia-kernel-open-dkms"], "hold")
    assert not res["changed"] and res["changed_names"] == []
    assert [c[0][1] for c in dpkg.calls] == ["--get-selections"]


def test_empty_list_calls_nothing():
    dpkg = FakeDpkg()
    assert ds.apply(dpkg, [], "install") == {"changed": False, "changed_names": [], "before": {}}
    assert dpkg.calls == []


def test_check_mode_reports_without_writing():
    dpkg = FakeDpkg()
    res = ds.apply(dpkg, ["libcuda1"], "install", check_mode=True)
    assert res["changed"] and res["changed_names"] == ["libcuda1"]
    assert len(dpkg.calls) == 1


def test_set_failure_names_the_packages_and_dpkg_s_message():
    with pytest.raises(ds.SelectionError, match=r"rc=2\) for nvidia-smi: dpkg: error: unexpected end of file"):
        ds.apply(FakeDpkg(set_rc=2), ["nvidia-smi"], "hold")


@pytest.mark.parametrize("names,selection,match", [
    (["nvidia-smi"], "keep", r"selection='keep' is invalid: allowed values are install, hold, deinstall, purge"),
    (["--force-all"], "hold", r"names: '--force-all' is not a package name"),
    (["a b"], "hold", r"names: 'a b' is not a package name"),
    ([""], "hold", r"names: '' is not a package name"),
])
def test_bad_input_is_named(names, selection, match):
    with pytest.raises(ds.SelectionError, match=match):
        ds.apply(FakeDpkg(), names, selection)

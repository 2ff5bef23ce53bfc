# -*- coding: utf-8 -*-
# Copyright: gpuhost.sglang contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""host_files (declared directories and files in one call) and host_read (what a role reads first, in one call) on
a real directory tree; the serving role's no-op deploy relies on both saying "unchanged" exactly when nothing
differs. The modules themselves run on the sandbox host in stage 31 (deploy, then the changed=0 rerun)."""
from __future__ import absolute_import, division, print_function

__metaclass__ = type

import grp
import hashlib
import os
import pwd
import stat

import pytest

from ansible_collections.gpuhost.sglang.plugins.module_utils.serving import host_files, host_read

ME = pwd.getpwuid(os.getuid()).pw_name
MY_GROUP = grp.getgrgid(os.getgid()).gr_name


def declared(tmp_path, content="a=1\n", mode="0644"):
    return ([{"path": "/etc/app", "mode": "0750", "owner": ME, "group": MY_GROUP}],
            [{"dest": "/etc/app/app.conf", "content": content, "mode": mode, "owner": ME, "group": MY_GROUP}])


def test_first_run_creates_the_second_changes_nothing(tmp_path):
    dirs, files = declared(tmp_path)
    first = host_files.ensure(str(tmp_path), dirs, files)
    assert first["changed"] and first["paths"] == {"/etc/app": ["created"], "/etc/app/app.conf": ["created"]}
    assert (tmp_path / "etc/app/app.conf").read_text() == "a=1\n"
    assert oct((tmp_path / "etc/app").stat().st_mode & 0o7777) == "0o750"
    assert host_files.ensure(str(tmp_path), dirs, files) == {"changed": False, "paths": {}, "diff": []}


def test_content_and_mode_drift_are_put_back_and_named(tmp_path):
    dirs, files = declared(tmp_path)
    host_files.ensure(str(tmp_path), dirs, files)
    conf = tmp_path / "etc/app/app.conf"
    conf.write_text("edited by hand\n")
    os.chmod(str(tmp_path / "etc/app"), 0o777)
    res = host_files.ensure(str(tmp_path), dirs, files)
    assert res["paths"] == {"/etc/app": ["mode"], "/etc/app/app.conf": ["content"]}
    assert res["diff"] == [{"before_header": "/etc/app/app.conf", "after_header": "/etc/app/app.conf",
                            "before": "edited by hand\n", "after": "a=1\n"}]
    assert conf.read_text() == "a=1\n"
    os.chmod(str(conf), 0o600)
    assert host_files.ensure(str(tmp_path), dirs, files)["paths"] == {"/etc/app/app.conf": ["mode"]}
    assert oct(conf.stat().st_mode & 0o7777) == "0o644"


def test_check_mode_says_what_would_change_and_writes_nothing(tmp_path):
    dirs, files = declared(tmp_path)
    files.append({"dest": "/etc/app/other", "content": "x", "owner": "no-such-user-here", "group": MY_GROUP})
    res = host_files.ensure(str(tmp_path), dirs, files, check_mode=True)
    assert set(res["paths"]) == {"/etc/app", "/etc/app/app.conf", "/etc/app/other"} and res["changed"]
    assert not (tmp_path / "etc").exists()


@pytest.mark.parametrize("bad, message", [
    ({"owner": "no-such-user-here"}, "user 'no-such-user-here' does not exist"),
    ({"mode": "rw-r--r--"}, "mode 'rw-r--r--' is not an octal number"),
    ({"mode": "17777"}, "out of range"),
])
def test_bad_declarations_are_named(tmp_path, bad, message):
    dirs, files = declared(tmp_path)
    files[0].update(bad)
    with pytest.raises(host_files.FilesError, match=message):
        host_files.ensure(str(tmp_path), dirs, files)


def test_a_directory_where_a_file_is_declared_is_an_error(tmp_path):
    (tmp_path / "etc/app/app.conf").mkdir(parents=True)
    dirs, files = declared(tmp_path)
    with pytest.raises(host_files.FilesError, match="is a directory"):
        host_files.ensure(str(tmp_path), dirs, files)


def test_read_gives_files_checksums_existence_and_accounts(tmp_path):
    (tmp_path / "lkg").mkdir()
    (tmp_path / "lkg/meta.json").write_text('{"argv": ["x"]}')
    (tmp_path / "req.txt").write_bytes(b"torch==2.13.0\n")
    out = host_read.read(str(tmp_path), files=["/lkg/meta.json", "/absent"], checksums=["/req.txt", "/absent"],
                         exists=["/lkg", "/absent"], account=ME, groups=True)
    assert out["files"] == {"/lkg/meta.json": '{"argv": ["x"]}', "/absent": None}
    assert out["checksums"] == {"/req.txt": hashlib.sha1(b"torch==2.13.0\n").hexdigest(), "/absent": None}
    assert out["exists"] == {"/lkg": True, "/absent": False}
    assert out["passwd"][ME][1] == str(os.getuid()) and out["group"][MY_GROUP][1] == str(os.getgid())
    assert host_read.read(str(tmp_path), account="no-such-user-here")["passwd"] == {"no-such-user-here": None}


def test_read_refuses_a_large_file(tmp_path):
    (tmp_path / "big").write_bytes(b"x" * (host_read.MAX_READ + 1))
    with pytest.raises(host_read.ReadError, match="larger than"):
        host_read.read(str(tmp_path), files=["/big"])


def test_device_nodes_in_find_shape_to_the_given_depth(tmp_path, monkeypatch):
    """Device nodes cannot be made without privileges here: the walk is checked on regular files standing in for
    them (lstat reports them as character devices), with the depth find gives (2: /dev/x and /dev/dir/x)."""
    for rel in ("dev/nvidia0", "dev/nvidiactl", "dev/nvidia-caps/nvidia-cap1", "dev/deep/er/nvidia9", "dev/null"):
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / rel).write_text("")
    real_lstat = os.lstat

    class Node(object):
        def __init__(self, st):
            # a regular file reads as a character device (S_IFCHR | 0666); directories stay directories
            self.st_mode = 0o20666 if stat.S_ISREG(st.st_mode) else st.st_mode
            self.st_uid, self.st_gid = st.st_uid, st.st_gid

    monkeypatch.setattr(host_read.os, "lstat", lambda p: Node(real_lstat(p)))
    found = host_read.find_nodes(str(tmp_path), ["/dev"], ["nvidia*"], 2)
    assert [n["path"] for n in found] == ["/dev/nvidia-caps/nvidia-cap1", "/dev/nvidia0", "/dev/nvidiactl"]
    assert found[0]["mode"] == "0666" and found[0]["ischr"] and not found[0]["isblk"]


def test_unit_states_from_one_systemctl_show():
    """systemd 252's output for a known timer, an unknown one and a service (measured on a Debian 12 test host)."""
    calls = []

    def run(argv):
        calls.append(argv)
        return 0, ("Id=sglang-liveness.timer\nActiveState=active\nUnitFileState=enabled\n\n"
                   "Id=nonexist.timer\nActiveState=inactive\nUnitFileState=\n\n"
                   "Id=sglang.service\nActiveState=activating\nUnitFileState=disabled\n"), ""
    units = ["sglang-liveness.timer", "nonexist.timer", "sglang.service"]
    assert host_read.unit_states(run, units) == {
        "sglang-liveness.timer": {"active": "active", "enabled": "enabled"},
        "nonexist.timer": {"active": "inactive", "enabled": ""},
        "sglang.service": {"active": "activating", "enabled": "disabled"}}
    assert len(calls) == 1 and calls[0][:2] == ["systemctl", "show"]
    failing = host_read.unit_states(lambda argv: (1, "", "Failed to connect to bus"), ["a.timer"])
    assert failing == {"a.timer": {"active": "inactive", "enabled": ""}}


def _known(root, dirs, files):
    return host_read.stat_paths(root, [d["path"] for d in dirs] + [f["dest"] for f in files])


def _drift_cases(tmp_path):
    """(name, mutation of the tree under tmp_path) after a first ensure(); each leaves the declaration as it was."""
    conf, app = tmp_path / "etc/app/app.conf", tmp_path / "etc/app"
    return [
        ("nothing", lambda: None),
        ("content", lambda: conf.write_text("edited by hand\n")),
        ("same length content", lambda: conf.write_text("a=2\n")),
        ("file mode", lambda: os.chmod(str(conf), 0o600)),
        ("directory mode", lambda: os.chmod(str(app), 0o755)),
        ("file owner", lambda: os.chown(str(conf), 65534, -1)),
        ("directory group", lambda: os.chown(str(app), -1, 65534)),
        ("file removed", conf.unlink),
        ("file replaced by a link to the same content", lambda: (
            (tmp_path / "same.conf").write_text("a=1\n"), conf.unlink(), conf.symlink_to(tmp_path / "same.conf"))),
    ]


@pytest.mark.parametrize("case", range(9))
def test_the_controller_says_unchanged_exactly_when_the_module_would(tmp_path, case):
    """What the action plugin decides from host_read's stat (plugins/action/host_files.py) against what the module
    does on the host: the same answer for every kind of drift (root: the owner cases chown to nobody)."""
    dirs, files = declared(tmp_path)
    host_files.ensure(str(tmp_path), dirs, files)
    name, mutate = _drift_cases(tmp_path)[case]
    if "owner" in name or "group" in name:
        if os.getuid() != 0:
            pytest.skip("chown needs root")
    mutate()
    module_unchanged = not host_files.ensure(str(tmp_path), dirs, files, check_mode=True)["changed"]
    difference = host_files.known_difference(dirs, files, _known(str(tmp_path), dirs, files))
    assert (difference is None) is module_unchanged, name
    if not module_unchanged:
        assert difference == ("/etc/app" if "directory" in name else "/etc/app/app.conf"), name
    assert module_unchanged is (name in ("nothing", "file replaced by a link to the same content")), name


def test_the_controller_calls_the_module_for_what_it_did_not_read_or_cannot_judge(tmp_path):
    dirs, files = declared(tmp_path)
    host_files.ensure(str(tmp_path), dirs, files)
    known = _known(str(tmp_path), dirs, files)
    assert host_files.known_difference(dirs, files, known) is None
    # a path the read did not cover, no read at all, a declaration the module would refuse (it names the error)
    other = dict(files[0], dest="/etc/app/other.conf")
    assert host_files.known_difference(dirs, files + [other], known) == "/etc/app/other.conf"
    assert host_files.known_difference(dirs, files, None) == ""
    assert host_files.known_difference(dirs, [dict(files[0], mode="rw-r--r--")], known) == "/etc/app/app.conf"
    # defaults as the module's: root:root, 0755 for a directory, 0644 for a file
    root_dir = [{"path": "/etc/app"}]
    os.chmod(str(tmp_path / "etc/app"), 0o755)
    as_root = ME == "root" and MY_GROUP == "root"
    assert host_files.known_difference(root_dir, [], _known(str(tmp_path), root_dir, [])) == (None if as_root else "/etc/app")


def _model_parent_declaration():
    """The serving role's declaration of the model's parent directory (roles/sglang/vars/main.yml)."""
    import yaml
    root = os.path.abspath(os.path.join(os.path.dirname(__file__), *[os.pardir] * 5))
    with open(os.path.join(root, "roles/sglang/vars/main.yml")) as f:
        dirs = yaml.safe_load(f)["__sglang_install_dirs_declared"]
    (spec,) = [d for d in dirs if d["path"] == "{{ sglang_model_path | dirname }}"]
    return dict(spec, path="/srv/models", group=MY_GROUP)


def test_the_hosts_model_dataset_keeps_its_owner_group_and_mode(tmp_path):
    """The model's parent on a Proxmox host is the host's dataset, bind-mounted: the serving role makes it only when
    it is missing and never chgrp's or chmod's one that exists."""
    spec = _model_parent_declaration()
    dataset = tmp_path / "srv/models"
    dataset.mkdir(parents=True)
    other = [g for g in grp.getgrall() if g.gr_gid != os.getgid()][0]
    if os.getuid() == 0:
        os.chown(str(dataset), -1, other.gr_gid)
    os.chmod(str(dataset), 0o2770)
    before = dataset.stat()
    res = host_files.ensure(str(tmp_path), [spec], [])
    after = dataset.stat()
    assert res["paths"] == {}, "the role changed the host's dataset: %s" % res["paths"]
    assert (after.st_uid, after.st_gid, after.st_mode) == (before.st_uid, before.st_gid, before.st_mode)
    stat_entry = {"isdir": True, "pw_name": ME, "gr_name": other.gr_name, "mode": "2770"}
    assert host_files.known_difference([spec], [], {"/srv/models": stat_entry}) is None
    # missing, it is made as declared (the role's own then)
    dataset.rmdir()
    assert host_files.ensure(str(tmp_path), [spec], [])["paths"] == {"/srv/models": ["created"]}
    assert oct(dataset.stat().st_mode & 0o7777) == "0o" + spec["mode"].lstrip("0")

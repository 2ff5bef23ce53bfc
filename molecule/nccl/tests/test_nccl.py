# -*- coding: utf-8 -*-
# Copyright: gpuhost.sglang contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""testinfra verify of the nccl scenario."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type


def settings(text):
    return dict(line.split("=", 1) for line in text.splitlines() if line and not line.startswith("#"))


def test_conf_and_env_agree_and_have_reasons(host):
    conf = host.file("/etc/nccl.conf")
    env = host.file("/etc/gpuhost/nccl.env")
    assert conf.exists and env.exists and conf.mode == 0o644
    assert settings(conf.content_string) == settings(env.content_string)
    lines = conf.content_string.splitlines()
    for n, line in enumerate(lines):
        if line and not line.startswith("#"):
            assert lines[n - 1].startswith("# ") and len(lines[n - 1]) > 10, "no reason above %s" % line


def test_settings_follow_the_facts(host):
    got = settings(host.file("/etc/nccl.conf").content_string)
    conf = host.file("/etc/nccl.conf").content_string
    if host.backend.get_hostname() == "nccl-pcievm":
        # a VFIO guest is not widened on NVML's word alone (no link probe result on this host)
        assert got == {"NCCL_IB_DISABLE": "1"}
        assert "8 x NVIDIA RTX PRO 6000 Blackwell" in conf and "virtualization: passthrough" in conf
    else:
        assert got == {"NCCL_P2P_LEVEL": "NVL", "NCCL_DEBUG": "WARN"}
        assert "InfiniBand/RoCE devices: mlx5_0" in conf and "2 x NVIDIA H200" in conf


def test_bad_override_wrote_nothing(host):
    assert not host.file("/tmp/never-written-nccl.conf").exists

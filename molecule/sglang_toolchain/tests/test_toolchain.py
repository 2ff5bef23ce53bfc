"""What the toolchain tasks left on the hosts: tc-full has Debian's real compiler and headers, the CUDA compiler
stand-in under /usr/local/cuda-13.0, and a unit environment with CUDA_HOME; tc-none has none of it."""

import pytest


def name(host):
    return host.check_output("hostname")


def test_tc_full_has_the_real_compiler_and_headers(host):
    if name(host) != "tc-full":
        pytest.skip("tc-full only")
    assert "gcc (Debian 12." in host.check_output("gcc --version")
    assert host.package("python3.11-dev").is_installed
    assert host.file("/usr/include/python3.11/Python.h").exists


def test_tc_full_nvcc_prints_the_real_banner(host):
    if name(host) != "tc-full":
        pytest.skip("tc-full only")
    out = host.check_output("/usr/local/cuda-13.0/bin/nvcc --version")
    assert "Cuda compilation tools, release 13.0, V13.0.88" in out
    res = host.run("/usr/local/cuda-13.0/bin/nvcc")
    assert res.rc == 1 and "No input files specified" in res.stderr


def test_tc_full_unit_environment_has_cuda_home_and_the_venv_first_on_path(host):
    if name(host) != "tc-full":
        pytest.skip("tc-full only")
    env = host.file("/root/sglang.env").content_string.splitlines()
    assert "CUDA_HOME=/usr/local/cuda-13.0" in env
    assert "PATH=/opt/sglang/venv/bin:/usr/local/cuda-13.0/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin" in env


def test_tc_none_stayed_without_a_compiler(host):
    if name(host) != "tc-none":
        pytest.skip("tc-none only")
    assert host.run("command -v gcc cc clang").rc != 0
    assert not host.file("/usr/include/python3.11/Python.h").exists
    assert not host.file("/usr/local/cuda-13.0").exists

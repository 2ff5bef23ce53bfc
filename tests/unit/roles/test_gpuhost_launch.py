from __future__ import absolute_import, division, print_function

__metaclass__ = type

import os
import subprocess
import sys

import pytest

LAUNCH = os.path.join(os.path.dirname(__file__), "..", "..", "..", "roles", "sglang", "files", "gpuhost-launch.py")


def _load():
    import importlib.util
    spec = importlib.util.spec_from_file_location("gpuhost_launch", LAUNCH)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_secret_appended_and_removed_from_environment():
    env = {"GPUHOST_SECRET_OPTIONS": "GPUHOST_API_KEY=--api-key HF_X=--hf-token", "GPUHOST_API_KEY": "s3cret", "KEEP": "1"}
    module, args = _load().build_argv(["launch", "-m", "sglang.launch_server", "--port", "1"], env)
    assert module == "sglang.launch_server"
    assert args == ["--port", "1", "--api-key", "s3cret"]
    assert env == {"KEEP": "1"}


@pytest.mark.parametrize("argv", [["launch"], ["launch", "x", "mod"]])
def test_usage(argv):
    with pytest.raises(SystemExit, match="usage"):
        _load().build_argv(argv, {})


def test_bad_spec():
    with pytest.raises(SystemExit, match="bad item"):
        _load().build_argv(["l", "-m", "m"], {"GPUHOST_SECRET_OPTIONS": "NOEQUALS"})


def test_secret_not_in_process_cmdline(tmp_path):
    # a real child process: the module sees the secret in sys.argv, /proc/self/cmdline does not contain it
    (tmp_path / "probe_mod.py").write_text(
        "import sys\n"
        "cmdline = open('/proc/self/cmdline','rb').read().split(b'\\0')\n"
        "print('ARGV', sys.argv[1:])\n"
        "print('LEAK', any(b's3cret' in part for part in cmdline))\n")
    env = dict(os.environ, PYTHONPATH=str(tmp_path), GPUHOST_SECRET_OPTIONS="K=--api-key", K="s3cret")
    out = subprocess.run([sys.executable, LAUNCH, "-m", "probe_mod", "--port", "5"], env=env,
                         stdout=subprocess.PIPE, universal_newlines=True, check=True).stdout
    assert "ARGV ['--port', '5', '--api-key', 's3cret']" in out
    assert "LEAK False" in out

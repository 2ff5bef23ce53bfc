# -*- coding: utf-8 -*-
# Copyright: gpuhost.sglang contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""tests/fixtures/wheelhouse.sh: the CPU build of torch when pip can find it, else the public index's torch.

The real script and the real pip run against a stand-in "public index" (a PEP 503 file:// index of tiny
wheels) with pip's own configuration ignored: `demotorch==1.0+cpu` plays torch==2.13.0+cpu (only in a
separate find-links folder, like /opt/wheels here or a CPU wheel index), `demotorch==1.0` plays the
public index's torch (which needs `democuda`, like torch 2.13.0 needs NVIDIA's CUDA runtime wheels).
GPUHOST_ENGINE_REQUIREMENTS points the script at the two small requirement files written here.

The last test checks the real pair of requirement files against each other.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import base64
import hashlib
import os
import re
import subprocess
import zipfile

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SCRIPT = os.path.join(ROOT, "tests", "fixtures", "wheelhouse.sh")
REQ_CPU = os.path.join(ROOT, "tests", "fixtures", "engine-requirements.txt")
REQ_PYPI = os.path.join(ROOT, "tests", "fixtures", "engine-requirements-pypi.txt")


def _wheel(folder, name, version, requires=()):
    """A minimal, valid py3-none-any wheel."""
    dist = "%s-%s" % (name, version)
    path = os.path.join(str(folder), "%s-py3-none-any.whl" % dist)
    files = {
        "%s/__init__.py" % name: "",
        "%s.dist-info/METADATA" % dist: "Metadata-Version: 2.1\nName: %s\nVersion: %s\n%s" % (
            name, version, "".join("Requires-Dist: %s\n" % r for r in requires)),
        "%s.dist-info/WHEEL" % dist: "Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\nTag: py3-none-any\n",
    }
    record = []
    with zipfile.ZipFile(path, "w") as z:
        for arc, text in files.items():
            data = text.encode()
            z.writestr(arc, data)
            digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
            record.append("%s,sha256=%s,%d" % (arc, digest, len(data)))
        record.append("%s.dist-info/RECORD,," % dist)
        z.writestr("%s.dist-info/RECORD" % dist, "\n".join(record) + "\n")
    return path


def _sha256(path):
    with open(path, "rb") as f:
        return hashlib.sha256(f.read()).hexdigest()


@pytest.fixture
def world(tmp_path):
    files = tmp_path / "files"
    cpu = tmp_path / "cpu-wheels"
    files.mkdir()
    cpu.mkdir()
    public = {
        "demoapp": _wheel(files, "demoapp", "1.0", ["demotorch>=1.0"]),
        "demotorch": _wheel(files, "demotorch", "1.0", ["democuda==1.0"]),
        "democuda": _wheel(files, "democuda", "1.0"),
    }
    _wheel(cpu, "demotorch", "1.0+cpu")
    simple = tmp_path / "simple"
    for name, path in public.items():
        (simple / name).mkdir(parents=True)
        (simple / name / "index.html").write_text('<a href="%s#sha256=%s">%s</a>\n' % (
            "file://" + path, _sha256(path), os.path.basename(path)))
    req = tmp_path / "engine-requirements.txt"
    req.write_text("# top level\ndemotorch==1.0+cpu\n# dependencies\ndemoapp==1.0\n")
    size = sum(os.path.getsize(p) for p in public.values())
    pypi = tmp_path / "engine-requirements-pypi.txt"
    pypi.write_text("# download-bytes: %d\n%s" % (size, "".join(
        "%s==1.0 --hash=sha256:%s\n" % (n, _sha256(public[n])) for n in ("demotorch", "demoapp", "democuda"))))
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PIP_", "GPUHOST_"))}
    env.update(PIP_CONFIG_FILE=os.devnull, PIP_INDEX_URL="file://%s" % simple, PIP_NO_CACHE_DIR="1",
               PIP_DISABLE_PIP_VERSION_CHECK="1", GPUHOST_ROOT=ROOT, GPUHOST_ENGINE_REQUIREMENTS=str(req))

    class World:
        pass

    w = World()
    w.tmp, w.cpu, w.req, w.pypi, w.env, w.size = tmp_path, str(cpu), req, pypi, env, size
    w.dest = str(tmp_path / "wheelhouse")

    def run(expect_rc=0, **extra):
        res = subprocess.run(["bash", SCRIPT, w.dest], env=dict(env, **extra), capture_output=True, text=True,
                             timeout=300, check=False)
        out = res.stdout + res.stderr
        assert res.returncode == expect_rc, out
        return out

    def wheels():
        return sorted(f for f in os.listdir(w.dest) if f.endswith(".whl"))

    w.run, w.wheels = run, wheels
    return w


def test_cpu_build_through_configured_find_links_stays_the_default(world):
    out = world.run(PIP_FIND_LINKS=world.cpu)
    assert "falling back" not in out
    assert world.wheels() == ["demoapp-1.0-py3-none-any.whl", "demotorch-1.0+cpu-py3-none-any.whl"]
    with open(os.path.join(world.dest, ".complete")) as f:
        assert f.read().strip() == _sha256(str(world.req))
    assert "up to date" in world.run(PIP_FIND_LINKS=world.cpu)


def test_public_index_only_falls_back_in_one_line_with_the_download_size(world):
    out = world.run()
    lines = [line for line in out.splitlines() if "falling back" in line]
    assert len(lines) == 1, out
    assert "demotorch==1.0+cpu" in lines[0] and "engine-requirements-pypi.txt" in lines[0]
    assert "3 wheels" in lines[0] and ("%d bytes" % world.size) in lines[0], lines[0]
    assert "ERROR" not in out  # pip's not-found error is the reason, not shown as a failure
    assert world.wheels() == ["demoapp-1.0-py3-none-any.whl", "democuda-1.0-py3-none-any.whl",
                              "demotorch-1.0-py3-none-any.whl"]
    with open(os.path.join(world.dest, "engine-requirements.txt")) as f:
        assert f.read() == world.pypi.read_text()  # what the hosts install from, hashes included
    again = world.run()
    assert "up to date" in again and "falling back" not in again


def test_cpu_build_wins_once_reachable_and_the_fallback_wheels_go(world):
    world.run()
    out = world.run(PIP_FIND_LINKS=world.cpu)
    assert "pruning" in out and "democuda-1.0" in out
    assert world.wheels() == ["demoapp-1.0-py3-none-any.whl", "demotorch-1.0+cpu-py3-none-any.whl"]
    with open(os.path.join(world.dest, ".complete")) as f:
        assert f.read().strip() == _sha256(str(world.req))


def test_explicit_wheel_folder_wins_over_a_fallback_wheelhouse(world):
    world.run()
    out = world.run(GPUHOST_TORCH_WHEELS=world.cpu)
    assert "falling back" not in out
    assert world.wheels() == ["demoapp-1.0-py3-none-any.whl", "demotorch-1.0+cpu-py3-none-any.whl"]


def test_explicit_folder_without_the_wheel_fails_instead_of_a_big_download(world, tmp_path):
    empty = tmp_path / "empty"
    empty.mkdir()
    out = world.run(expect_rc=1, GPUHOST_TORCH_WHEELS=str(empty))
    assert "falling back" not in out and "GPUHOST_TORCH_WHEELS=%s" % empty in out
    assert not os.path.exists(os.path.join(world.dest, ".complete"))


def test_variant_is_validated(world):
    out = world.run(expect_rc=2, GPUHOST_TORCH_VARIANT="gpu")
    assert "GPUHOST_TORCH_VARIANT" in out and "'gpu'" in out and "auto, cpu, pypi" in out


def test_forced_public_variant_even_where_the_cpu_build_is_reachable(world):
    out = world.run(PIP_FIND_LINKS=world.cpu, GPUHOST_TORCH_VARIANT="pypi")
    assert "demotorch-1.0-py3-none-any.whl" in world.wheels() and "public index" in out


def test_stale_download_size_fails(world):
    world.pypi.write_text(re.sub(r"download-bytes: \d+", "download-bytes: 1", world.pypi.read_text()))
    out = world.run(expect_rc=1)
    assert "download-bytes" in out and "1 recorded" in out


def test_tampered_public_wheel_fails_the_hash_check(world):
    path = os.path.join(str(world.tmp), "files", "democuda-1.0-py3-none-any.whl")
    with open(path, "ab") as f:
        f.write(b"\0")
    world.run(expect_rc=1)
    assert not os.path.exists(os.path.join(world.dest, ".complete"))


def _pins(path):
    pins, hashes = {}, {}
    with open(path) as f:
        for line in f:
            line = line.split("#", 1)[0].strip()
            if not line:
                continue
            m = re.fullmatch(r"([A-Za-z0-9_.-]+)(?:\[[^\]]*\])?==(\S+)((?: --hash=sha256:[0-9a-f]{64})*)", line)
            assert m, "%s: %r" % (path, line)
            name = re.sub(r"[-_.]+", "-", m.group(1)).lower()
            pins[name] = m.group(2)
            hashes[name] = m.group(3)
    return pins, hashes


def test_public_index_set_is_the_cpu_set_plus_torchs_cuda_runtime():
    cpu = _pins(REQ_CPU)[0]
    pypi, hashes = _pins(REQ_PYPI)
    assert cpu["torch"].endswith("+cpu") and pypi["torch"] == cpu["torch"][:-len("+cpu")]
    assert {n: v for n, v in pypi.items() if n in cpu and n != "torch"} == {n: v for n, v in cpu.items() if n != "torch"}
    extra = sorted(set(pypi) - set(cpu))
    assert extra and all(n.startswith(("nvidia-", "cuda-")) or n == "triton" for n in extra), extra
    assert all(hashes.values()), [n for n, h in hashes.items() if not h]
    with open(REQ_PYPI) as f:
        assert re.search(r"^# download-bytes: \d+$", f.read(), re.M)

# -*- coding: utf-8 -*-
# Copyright: gpuhost.sglang contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The example production inventory (Proxmox VE + 8x RTX PRO 6000 Blackwell + GLM-5-NVFP4 in LXC):
every playbook passes --syntax-check with it, every role's variables pass the role's argument spec, the
plays put each role where it belongs (NCCL settings in the serving container, the driver in container mode
there), and the SGLang command line and environment it renders (profile + options + each candidate) pass
SGLang 0.5.23's own parser.

``python tests/integration/test_production_inventory.py --render`` prints the rendered command line, the
unit's EnvironmentFile lines and the environment (secrets masked)."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import glob
import os
import re
import subprocess
import sys

import pytest

from ansible_collections.gpuhost.sglang.tests import harness

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
BIN = os.path.dirname(sys.executable)
SGLANG_PY = os.path.join(os.environ.get("SGLANG_VENV") or os.path.join(ROOT, ".cache", "sglang-venv"), "bin", "python")
ENV = harness.ansible_env()
INVENTORIES = ["inventories/production", "inventories/sandbox"]


def playbook(*args):
    proc = subprocess.run([os.path.join(BIN, "ansible-playbook")] + list(args), cwd=ROOT, env=ENV,
                          capture_output=True, text=True, timeout=600, check=False)
    return proc.returncode, proc.stdout + proc.stderr


@pytest.mark.parametrize("inventory", INVENTORIES)
@pytest.mark.parametrize("play", sorted(os.path.basename(p) for p in glob.glob(os.path.join(ROOT, "playbooks", "*.yml"))))
def test_syntax_check(inventory, play):
    rc, out = playbook("-i", inventory, "--syntax-check", os.path.join("playbooks", play))
    assert rc == 0, out


@pytest.mark.sglang
@pytest.mark.skipif(not os.path.exists(SGLANG_PY), reason="no .cache/sglang-venv: run tests/fixtures/sglang-venv.sh")
def test_production_inventory_validates():
    rc, out = playbook("-i", "inventories/production", "tests/integration/files/validate_inventory.yml",
                       "-e", "gpuhost_sglang_python=" + SGLANG_PY, "-e", "gpuhost_gpu_arch=12.0")
    assert rc == 0, out[-4000:]
    out = " ".join(out.split())   # the yaml callback folds long messages
    # the SM120 + DSA profile reached the command line, and every candidate was checked
    assert "--dsa-decode-backend" in out and "--mem-fraction-static 0.92" in out
    assert "--tp-size 8" in out and "--tp " not in out
    assert "--tool-call-parser glm47" in out and "--reasoning-parser glm45" in out
    # the profile's own fallbacks are candidates too, and each passed the parser; the trtllm fallback with a bf16 KV
    # cache is gone (unsupported on SM120: flashinfer-ai/flashinfer #5290, sglang PR #29580)
    assert "--dsa-prefill-backend triton_sparse_mla" in out and "--kv-cache-dtype bf16" not in out
    assert "failed=0" in out


def test_validation_catches_a_bad_inventory(tmp_path):
    """The same check fails, naming the variable and the allowed values, on a broken copy."""
    inv = tmp_path / "inv"
    subprocess.run(["cp", "-r", os.path.join(ROOT, "inventories", "production"), str(inv)], check=True)
    gv = inv / "group_vars" / "proxmox_hosts.yml"
    gv.write_text(gv.read_text().replace("proxmox_host_mode: lxc", "proxmox_host_mode: lxd"))
    rc, out = playbook("-i", str(inv), "tests/integration/files/validate_inventory.yml",
                       "-e", "gpuhost_sglang_python=" + sys.executable, "-e", "gpuhost_gpu_arch=12.0")
    assert rc != 0
    assert "proxmox_host_mode" in out and "lxd" in out


def plays(out):
    """``--list-hosts --list-tasks`` output -> [{"pattern", "name", "hosts": [...], "tasks": [...]}] in play order."""
    result = []
    for line in out.splitlines():
        m = re.match(r"^  play #\d+ \(([^)]*)\): (.*?)\tTAGS:", line)
        if m:
            result.append({"pattern": m.group(1), "name": m.group(2), "hosts": [], "tasks": [], "_in": None})
            continue
        if not result:
            continue
        cur = result[-1]
        if re.match(r"^    hosts \(\d+\):", line):
            cur["_in"] = "hosts"
        elif line.strip() == "tasks:":
            cur["_in"] = "tasks"
        elif line.startswith("      ") and cur["_in"]:
            cur[cur["_in"]].append(line.strip().split("\t")[0])
    return result


NCCL_ENV_TASK = "gpuhost.sglang.nccl : Write /etc/nccl.conf and the serving unit's NCCL environment file"


@pytest.mark.parametrize("play", ["deploy.yml", "rebuild.yml"])
def test_nccl_role_runs_where_the_server_runs(play):
    """The NCCL settings are written inside the serving container (a Proxmox host's /etc/nccl.conf is invisible
    there), before the serving role renders the unit that reads them."""
    rc, out = playbook("-i", "inventories/production", "--list-hosts", "--list-tasks", os.path.join("playbooks", play))
    assert rc == 0, out
    with_nccl = [p for p in plays(out) if NCCL_ENV_TASK in p["tasks"]]
    assert with_nccl, "no play of %s runs the nccl role:\n%s" % (play, out)
    for p in with_nccl:
        assert p["hosts"] == ["glm5-ct"], p
        serving = [i for i, t in enumerate(p["tasks"]) if t.startswith("gpuhost.sglang.sglang :") or "serving role" in t]
        assert serving and p["tasks"].index(NCCL_ENV_TASK) < serving[0], p["tasks"]
    assert not [p for p in plays(out) if NCCL_ENV_TASK in p["tasks"] and "pve-gpu1" in p["hosts"]]


def gpu_yml_tags(tags, *extra):
    """playbooks/gpu.yml's decisions (``tags``) for every production host, run on this controller (no host is
    contacted: the decisions need only inventory variables and the gathered facts)."""
    return playbook("-i", "inventories/production", "playbooks/gpu.yml", "--tags", tags,
                    "-e", "ansible_connection=local", "-e", "ansible_python_interpreter=" + sys.executable, *extra)


def gpu_yml(*extra):
    """playbooks/gpu.yml's driver-mode decision for every production host."""
    return gpu_yml_tags("driver_mode", *extra)


def test_gpu_yml_runs_the_driver_in_container_mode_inside_the_container():
    # this controller may itself be a container: take the virtualization guard out of this structural check
    rc, out = gpu_yml("-e", '{"gpu_container_virtualization": []}')
    assert rc == 0, out[-4000:]
    modes = dict(re.findall(r"driver mode of (\S+): (\w+)", out))
    assert modes == {"glm5-ct": "container", "pve-gpu1": "host"}, out[-4000:]
    assert "kernel module lives on pve-gpu1" in out


def test_gpu_yml_probes_with_the_engine_interpreter_and_skips_the_lxc_mode_node():
    """The link probe needs torch and nvidia-ml-py: on the serving container the engine venv has both (the system
    Python has neither); the Proxmox node in LXC mode has no torch at all and is skipped with the reason."""
    rc, out = gpu_yml_tags("probe_plan")
    assert rc == 0, out[-4000:]
    flat = " ".join(out.split())
    assert "link probe on glm5-ct with /opt/sglang/venv-sglang-0.5.23/bin/python" in flat, out[-4000:]
    assert "link probe skipped on pve-gpu1: a Proxmox VE host in LXC mode has no torch" in flat, out[-4000:]


def _controller_is_a_container():
    proc = subprocess.run(["systemd-detect-virt", "--container"], capture_output=True, text=True, check=False)
    return proc.returncode == 0 and proc.stdout.strip() not in ("", "none")


@pytest.mark.skipif(not _controller_is_a_container(), reason="the controller is not a container")
def test_gpu_yml_refuses_the_host_mode_driver_inside_a_container():
    """Run on this controller (a container), the host-mode entry (pve-gpu1) is refused before the driver role,
    naming the variables; the Proxmox container (glm5-ct) still gets container mode."""
    rc, out = gpu_yml()
    assert rc != 0
    flat = " ".join(out.split())
    assert "pve-gpu1 is a container" in flat and "gpuhost_proxmox_node" in flat and "nvidia_driver_mode" in flat
    assert "driver mode of glm5-ct: container" in flat


RENDER = os.path.join(ROOT, "tests", "integration", "files", "render_serving.yml")


def render(tmp_path, *extra):
    """Render the production serving host's unit and environment with the role's own templates and data, every
    candidate checked by SGLang 0.5.23's parser (tests/integration/files/render_serving.yml)."""
    rc, out = playbook("-i", "inventories/production", RENDER, "-e", "render_dir=%s" % tmp_path,
                       "-e", "gpuhost_sglang_python=" + SGLANG_PY, "-e", "vault_sglang_api_key=SECRET-KEY",
                       "-e", "vault_hf_token=SECRET-TOKEN", *extra)
    return rc, out


@pytest.mark.sglang
@pytest.mark.skipif(not os.path.exists(SGLANG_PY), reason="no .cache/sglang-venv: run tests/fixtures/sglang-venv.sh")
def test_production_unit_requires_the_nccl_file_and_carries_the_profile_environment(tmp_path):
    rc, out = render(tmp_path)
    assert rc == 0, out[-4000:]
    unit = (tmp_path / "glm5-ct" / "sglang.service").read_text()
    env = (tmp_path / "glm5-ct" / "sglang.env").read_text()
    files = [line.split("=", 1)[1] for line in unit.splitlines() if line.startswith("EnvironmentFile=")]
    nccl = str(tmp_path / "glm5-ct" / "nccl.env")
    # required (no "-"), written by the nccl role that ran, read before the role's own file so sglang_environment wins
    assert files == [nccl, "/etc/sglang/sglang.env"], files
    # the target box (tests/fixtures/gpu-boxes/sm120-8x-2socket): NVML P2P OK up to SYS in the container (bare metal PCIe)
    assert "NCCL_P2P_LEVEL=SYS" in (tmp_path / "glm5-ct" / "nccl.env").read_text().splitlines()
    exec_start = [line for line in unit.splitlines() if line.startswith("ExecStart=")][0]
    for piece in ("--tool-call-parser glm47", "--reasoning-parser glm45", "--kv-cache-dtype fp8_e4m3",
                  "--dsa-decode-backend flashinfer_sparse_mla", "--disable-custom-all-reduce", "--tp-size 8",
                  "--disable-shared-experts-fusion",
                  "--enable-metrics",  # sglang_metrics, accepted by the engine's own parser
                  # the operators' one working launch: CUDA graphs off from the first candidate
                  "--cuda-graph-backend-decode disabled", "--cuda-graph-backend-prefill disabled"):
        assert piece in exec_start, (piece, exec_start)
    # the candidates, learned entries included (graphs off + triton prefill after a NaN), each accepted by the parser
    cands = (tmp_path / "glm5-ct" / "candidates.txt").read_text().splitlines()
    assert len(cands) == 4 and all("--dsa-prefill-backend triton_sparse_mla" in c for c in cands[1:]), cands
    assert all("--cuda-graph-backend-decode disabled" in c for c in cands), cands
    assert "SECRET" not in unit
    assert 'SGLANG_ENABLE_JIT_DEEPGEMM="0"' in env.splitlines()
    # the exposure warning: 0.0.0.0 with an API key leaves /health* and /metrics* open
    flat = " ".join(out.split())
    assert "/health_generate" in flat and "without the API key" in flat
    show(str(tmp_path))   # pytest -s prints what the box would run


@pytest.mark.sglang
@pytest.mark.skipif(not os.path.exists(SGLANG_PY), reason="no .cache/sglang-venv: run tests/fixtures/sglang-venv.sh")
def test_without_the_nccl_role_the_unit_names_no_nccl_file(tmp_path):
    rc, out = render(tmp_path, "-e", "render_nccl=false")
    assert rc == 0, out[-4000:]
    unit = (tmp_path / "glm5-ct" / "sglang.service").read_text()
    assert [line for line in unit.splitlines() if line.startswith("EnvironmentFile=")] == ["EnvironmentFile=/etc/sglang/sglang.env"]


def show(render_dir):
    """The production serving host as rendered: command line, EnvironmentFile lines, environment (secrets masked)."""
    host = os.path.join(render_dir, "glm5-ct")
    with open(os.path.join(host, "argv.txt")) as f:
        print("## command line (candidate 0, as ExecStart runs it)\n" + f.read().strip())
    with open(os.path.join(host, "candidates.txt")) as f:
        print("\n## every candidate, each accepted by sglang 0.5.23's parser\n" + f.read().strip())
    with open(os.path.join(host, "sglang.service")) as f:
        print("\n## unit environment files\n" + "\n".join(line for line in f.read().splitlines() if line.startswith("EnvironmentFile=")))
    for name in ("sglang.env", "nccl.env"):
        with open(os.path.join(host, name)) as f:
            lines = [re.sub(r'^(GPUHOST_API_KEY|HF_TOKEN)=.*', r'\1=<secret>', line) for line in f.read().splitlines()
                     if line and not line.startswith("#")]
        print("\n## %s\n%s" % (name, "\n".join(lines)))
    with open(os.path.join(host, "exposure.txt")) as f:
        print("\n## deploy's exposure warning\n" + f.read().strip())


if __name__ == "__main__":
    if "--render" in sys.argv:
        import tempfile
        d = tempfile.mkdtemp(prefix="gpuhost-render-")
        code, text = render(d)
        if code != 0:
            sys.exit(text[-4000:])
        show(d)


def test_production_model_revision_placeholder_is_refused_by_the_preflight(tmp_path):
    """The production inventory names a public repository that exists (lukealonso/GLM-5-NVFP4) with a revision the
    operator must pin: the serving role's preflight refuses the placeholder before anything changes, naming
    sglang_model_revision, its value and what is allowed."""
    play = tmp_path / "preflight.yml"
    play.write_text("- hosts: sglang_servers\n  gather_facts: false\n  tasks:\n"
                    "    - ansible.builtin.include_role: {name: gpuhost.sglang.sglang}\n      tags: [always]\n")
    rc, out = playbook("-i", "inventories/production", "-c", "local", "--check", "--tags", "sglang_preflight",
                       "-e", "vault_sglang_api_key=SECRET-KEY", str(play))
    flat = " ".join(out.split())
    assert rc != 0
    assert "sglang_model_revision=SET-ME-to-the-commit-of-lukealonso/GLM-5-NVFP4-you-tested is not a commit hash" in flat, \
        flat[-3000:]
    assert "sglang_model_repo_id=lukealonso/GLM-5-NVFP4" in flat and "allowed 40 lowercase hex characters" in flat
    # a pinned commit passes that check: the preflight goes on to read the host (which this machine is not)
    rc, out = playbook("-i", "inventories/production", "-c", "local", "--check", "--tags", "sglang_preflight",
                       "-e", "vault_sglang_api_key=SECRET-KEY", "-e", "sglang_model_revision=" + "0123456789abcdef" * 2 + "01234567",
                       str(play))
    flat = " ".join(out.split())
    assert "is not a commit hash" not in flat and "Preflight | the host as it is, in one read" in flat, flat[-3000:]

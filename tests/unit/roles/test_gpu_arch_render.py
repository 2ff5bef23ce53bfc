# -*- coding: utf-8 -*-
# Copyright: gpuhost.sglang contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""What the serving role derives from a GPU box as it presents itself: the real gpu_facts module reads a box of
tests/fixtures/gpu-boxes (its sysfs tree; NVML through the pynvml stand-in replaying the box's nvml.json, or no
pynvml at all, as a fresh box's system Python), registered under the names the play and the role give it, and
ansible-playbook renders the role's own expressions (roles/sglang/vars/main.yml, tasks/toolchain.yml) with the
role's defaults and the collection's filters. No GPU facts are written by hand."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import json
import os
import subprocess
import sys

import pytest
import yaml

from ansible_collections.gpuhost.sglang.tests import harness

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..", ".."))
BOXES = os.path.join(ROOT, "tests", "fixtures", "gpu-boxes")
STANDIN = os.path.join(ROOT, "tests", "harness", "pynvml_standin")


def _tasks(path):
    with open(os.path.join(ROOT, path)) as fh:
        return yaml.safe_load(fh)


def _walk(tasks):
    for task in tasks or []:
        yield task
        for key in ("block", "rescue", "always", "tasks", "pre_tasks"):
            yield from _walk(task.get(key))


def register_names():
    """The names the GPU facts are registered under: the deploy play's read, and the role's own read after the engine
    install where the role has one (roles/sglang/tasks/gpu.yml)."""
    names = [t["register"] for t in _walk(_tasks("playbooks/deploy.yml")) if "gpuhost.sglang.gpu_facts" in t]
    gpu_yml = os.path.join(ROOT, "roles", "sglang", "tasks", "gpu.yml")
    if os.path.exists(gpu_yml):
        names += [t["register"] for t in _tasks(gpu_yml) if "gpuhost.sglang.gpu_facts" in t]
    assert names, "no gpu_facts task registers the facts in playbooks/deploy.yml"
    return names


def toolchain_expressions():
    """gpu_archs and environment of the toolchain proof, and the block's vars, as roles/sglang/tasks/toolchain.yml has them."""
    for task in _tasks("roles/sglang/tasks/toolchain.yml"):
        defaults = (task.get("module_defaults") or {}).get("gpuhost.sglang.serving_toolchain")
        if defaults:
            return {"gpu_archs": defaults["gpu_archs"], "environment": defaults["environment"]}, task.get("vars", {})
    raise AssertionError("no serving_toolchain module_defaults in roles/sglang/tasks/toolchain.yml")


def render(tmp_path, box, nvml):
    """Run gpu_facts on ``box`` (nvml: 'replay' the box's nvml.json, or None: no pynvml) and render the role's
    expressions; returns {name: value}."""
    exprs, block_vars = toolchain_expressions()
    facts_task = {"name": "gpu_facts", "gpuhost.sglang.gpu_facts": {"sysfs_root": os.path.join(BOXES, box, "root"),
                                                                    "health": False}}
    tasks = [
        {"name": "the serving role's defaults and vars", "when": False,
         "ansible.builtin.import_role": {"name": "gpuhost.sglang.sglang", "tasks_from": "restore.yml"}},
        {"name": "profiles", "ansible.builtin.include_vars": {"file": os.path.join(ROOT, "roles", "sglang", "vars", "profiles.yml")}},
    ]
    for name in register_names():
        tasks.append(dict(facts_task, register=name))
    outputs = {
        "arch": "{{ sglang_gpu_arch_effective }}",
        "options": "{{ (sglang_gpu_arch_effective | gpuhost.sglang.sglang_profile('glm-dsa', '0.5.23', sglang_profiles)) }}",
        "gpu_archs": exprs["gpu_archs"],
        "environment": exprs["environment"],
    }
    content = "{{ {%s} | to_json }}" % ", ".join("%s: (%s)" % (json.dumps(k), v.strip()[2:-2].strip()) for k, v in outputs.items())
    tasks.append({"name": "render", "vars": dict(block_vars, __sglang_toolchain_result={"cuda_home": "/usr/local/cuda-13.0"},
                                                 sglang_installed_version="0.5.23", sglang_model_family="glm-dsa"),
                  "ansible.builtin.copy": {"dest": str(tmp_path / "out.json"), "content": content}})
    play = [{"hosts": "localhost", "connection": "local", "gather_facts": False,
             "vars": {"ansible_python_interpreter": sys.executable}, "tasks": tasks}]
    path = tmp_path / "play.yml"
    path.write_text(yaml.safe_dump(play, sort_keys=False))
    env = harness.ansible_env()
    env.pop("GPUHOST_NVML_REPLAY", None)
    if nvml == "replay":
        env["PYTHONPATH"] = STANDIN + os.pathsep + env.get("PYTHONPATH", "")
        env["GPUHOST_NVML_REPLAY"] = os.path.join(BOXES, box, "nvml.json")
    proc = subprocess.run(["ansible-playbook", "-i", "localhost,", str(path)], cwd=str(tmp_path), env=env,
                          stdout=subprocess.PIPE, stderr=subprocess.STDOUT, universal_newlines=True, timeout=120, check=False)
    assert proc.returncode == 0, proc.stdout[-3000:]
    with open(str(tmp_path / "out.json")) as fh:
        return json.load(fh)


@pytest.fixture(scope="module")
def sm120_fresh(tmp_path_factory):
    """A fresh target box: the system Python has no nvidia-ml-py, the PCI bus shows 8x 10de:2bb5."""
    return render(tmp_path_factory.mktemp("sm120"), "sm120-8x-2socket", None)


def test_sm120_box_without_pynvml_gets_the_sm120_profile(sm120_fresh):
    """F1: the profile is applied, not dropped with a note."""
    assert sm120_fresh["arch"] == "12.0"
    assert sm120_fresh["options"].get("disable-shared-experts-fusion") is True
    assert sm120_fresh["options"].get("dsa-decode-backend") == "flashinfer_sparse_mla"


def test_sm120_box_without_pynvml_toolchain_proof_targets_sm120_in_the_profile_env(sm120_fresh):
    """N4: the kernel proof builds for sm_120, in the unit's environment with the profile's variables."""
    assert sm120_fresh["gpu_archs"] == ["sm_120"]
    assert sm120_fresh["environment"].get("SGLANG_ENABLE_JIT_DEEPGEMM") == "0"


def test_h200_recording_gets_sm90(tmp_path):
    out = render(tmp_path, "h200-2x-vm", "replay")
    assert out["arch"] == "9.0"
    assert out["gpu_archs"] == ["sm_90"]

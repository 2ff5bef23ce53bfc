# Copyright: gpuhost.sglang contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The collection's stdlib-only GPU module_utils (plugins/module_utils/gpu/*.py), loaded by path for the scripts
in benchmarks/gpu/ that run on a GPU box without Ansible (gpu_check.py, gpu_health.py), and pynvml when it is
there (gpu_health.py, sglang/health_bench.py)."""

import importlib.util
import os

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def load(name):
    """plugins/module_utils/gpu/<name>.py as a module named gpuhost_<name>."""
    path = os.path.join(ROOT, "plugins", "module_utils", "gpu", name + ".py")
    spec = importlib.util.spec_from_file_location("gpuhost_" + name, path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def pynvml_or_none():
    """The pynvml module, or None (said on stdout): gpu/health.py then reads the state ``unknown`` with the reason."""
    try:
        import pynvml  # pylint: disable=import-outside-toplevel
    except ImportError as exc:
        print("pynvml not importable: %s" % exc)
        return None
    return pynvml

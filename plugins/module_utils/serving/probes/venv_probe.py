# -*- coding: utf-8 -*-
# Copyright: gpuhost.sglang contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""JIT toolchain probe (module_utils/serving/toolchain.py): run by the engine venv's interpreter (``python -c``).

Prints one JSON object: the interpreter, its include dir and extension suffix, the versions of the engine's
distributions and torch's CUDA. Never imports torch: torch/version.py is parsed with ast, so the probe is fast and
needs no GPU and no CUDA library.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import ast
import importlib.util
import json
import os
import sys
import sysconfig

try:
    import importlib.metadata as md
except ImportError:
    md = None

DISTS = ("torch", "triton", "flashinfer-python", "flashinfer-cubin", "flashinfer-jit-cache", "sglang")


def torch_version_py(path, out):
    """Every literal assignment of torch/version.py as ``torch_<name>`` in ``out``."""
    with open(path) as fh:
        tree = ast.parse(fh.read())
    for node in tree.body:
        target = value = None
        if isinstance(node, ast.Assign) and len(node.targets) == 1:
            target, value = node.targets[0], node.value
        elif isinstance(node, ast.AnnAssign):
            target, value = node.target, node.value
        if isinstance(target, ast.Name) and value is not None:
            try:
                out["torch_" + target.id] = ast.literal_eval(value)
            except ValueError:
                pass


def probe():
    """The probe's answer, a dict."""
    out = {"python": sys.executable, "python_version": "%d.%d" % sys.version_info[:2],
           "ext_suffix": sysconfig.get_config_var("EXT_SUFFIX") or ".so"}
    scheme = sysconfig.get_default_scheme() if hasattr(sysconfig, "get_default_scheme") else sysconfig._get_default_scheme()
    if scheme == "posix_local":
        scheme = "posix_prefix"
    out["include"] = sysconfig.get_paths(scheme=scheme)["include"]
    dists = {}
    for name in DISTS:
        try:
            dists[name] = md.version(name) if md else None
        except Exception:
            dists[name] = None
    out["dists"] = dict((k, v) for k, v in dists.items() if v is not None)
    try:
        out["torch_requires"] = md.requires("torch") or [] if dists.get("torch") else []
    except Exception:
        out["torch_requires"] = []
    out["torch_version_py"] = False
    try:
        spec = importlib.util.find_spec("torch")
    except Exception:
        spec = None
    if spec is not None and spec.origin:
        path = os.path.join(os.path.dirname(spec.origin), "version.py")
        if os.path.exists(path):
            out["torch_version_py"] = True
            torch_version_py(path, out)
    return out


def main():
    sys.stdout.write(json.dumps(probe()) + "\n")


if __name__ == "__main__":
    main()

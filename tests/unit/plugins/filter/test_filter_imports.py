# -*- coding: utf-8 -*-
# Copyright: gpuhost.sglang contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""What a task's worker process imports when it resolves one of the collection's filters.

ansible-core imports every filter file of the collection for one name (plugins/plugin_utils/lazy_import.py says
where), in every worker: the filter files must not import their implementations at the top. Measured before the
lazy imports, on the development machine: 90 ms for filter/fleet.py (ansible.module_utils.urls with ssl and
cryptography), 28 ms for filter/tune.py, ~140 ms for all, in each of the ~30 workers of a no-op deploy.

Run as a script (``python test_filter_imports.py COLLECTIONS_PATH FILTER [ARGS_JSON]``) it is that worker: a
fresh interpreter that resolves FILTER through ansible-core's filter loader, optionally calls it with ARGS_JSON,
and prints what it imported as JSON."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import json
import os
import subprocess
import sys

OURS = "ansible_collections.gpuhost.sglang.plugins."


def resolve(collections_path, name, args_json=None):
    """The worker's side: resolve ``name``, call it with ``args_json`` if given; what got imported."""
    from ansible.plugins.loader import filter_loader, init_plugin_loader
    init_plugin_loader([collections_path])
    before = set(sys.modules)
    plugin = filter_loader.get(name)
    resolved = sorted(set(sys.modules) - before)
    out = {"found": plugin is not None, "resolved": resolved}
    if args_json is not None:
        before = set(sys.modules)
        out["result"] = plugin.j2_function(*json.loads(args_json))
        out["called"] = sorted(set(sys.modules) - before)
    return out


def worker(name, *args):
    import ansible_collections.gpuhost.sglang.plugins.filter as filters
    # .../collections/ansible_collections/gpuhost/sglang/plugins/filter -> .../collections
    path = list(filters.__path__)[0]
    for dummy in range(5):
        path = os.path.dirname(path)
    cmd = [sys.executable, os.path.abspath(__file__), path, name] + ([json.dumps(list(args))] if args else [])
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=120, check=False)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


def test_resolving_a_filter_imports_the_filter_files_and_not_their_implementations():
    got = worker("gpuhost.sglang.systemd_exec")
    assert got["found"]
    ours = [m for m in got["resolved"] if m.startswith(OURS)]
    filter_files = [m for m in ours if m.startswith(OURS + "filter.")]
    # every filter file was imported (the loader walks them all), so the check below covers each one of them
    assert len(filter_files) == len([f for f in os.listdir(os.path.join(os.path.dirname(__file__), "..", "..", "..",
                                                                        "..", "plugins", "filter"))
                                     if f.endswith(".py") and f != "__init__.py"]), filter_files
    others = set(m for m in ours if m not in filter_files) - set([OURS + "filter", OURS + "plugin_utils"])
    assert others == set([OURS + "plugin_utils.lazy_import"]), sorted(others)
    assert "ansible.module_utils.urls" not in got["resolved"]


def test_a_filter_imports_its_implementation_when_called():
    got = worker("gpuhost.sglang.systemd_exec", ["/opt/sglang/bin/python", "a b"])
    assert got["result"] == '/opt/sglang/bin/python "a b"'
    assert OURS + "module_utils.serving.server_args" in got["called"]
    assert not [m for m in got["called"] if m.startswith(OURS + "plugin_utils.profiles")]


if __name__ == "__main__":
    print(json.dumps(resolve(*sys.argv[1:4])))

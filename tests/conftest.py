# Make `ansible_collections.gpuhost.sglang` importable when pytest runs from a plain clone:
# collections/ansible_collections/gpuhost/sglang is a committed symlink to the repository root.
# The harness itself (paths, module runs, in-process calls, stand-ins) is tests/harness/.
import os
import re
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
COLLECTIONS = os.path.join(ROOT, "collections")
if os.path.isdir(COLLECTIONS) and COLLECTIONS not in sys.path:
    sys.path.insert(0, COLLECTIONS)

# Parallel runs (CI stage 30: pytest-xdist `-n N --dist loadgroup`): this scheduler keeps each test file whole in
# one worker, in file order, so its module-scoped fixtures (an engine, a fake server, a test host) start once and
# its fixed host names are never used twice at once. Every file that uses real test hosts (`pytest.mark.testhosts`)
# is in ONE group, run one after the other as without xdist: they use fixed tags and host names (the "im" files
# share theirs), check the controller for leaks and kill creates mid-way. Why not xdist_group markers: pytest 9
# keeps the node id in Node._id, and xdist 3.8.0's loadgroup appends the group to Node._nodeid, so the marker is
# silently ignored and a file's tests are spread over workers (measured 2026-12-01: two module fixtures created
# host sgunit at once, each create destroying the other's "stale" host).
TESTHOSTS = re.compile(r"pytest\.mark\.testhosts\b")
_groups = {}


def file_group(rootpath, path):
    if path not in _groups:
        try:
            with open(os.path.join(str(rootpath), path), encoding="utf-8") as fh:
                _groups[path] = "testhosts" if TESTHOSTS.search(fh.read()) else path
        except OSError:
            _groups[path] = path
    return _groups[path]


@pytest.hookimpl(optionalhook=True)  # a venv without pytest-xdist has no such hook
def pytest_xdist_make_scheduler(config, log):
    if config.getoption("dist") != "loadgroup":
        return None  # xdist's own scheduler for the other --dist modes
    from xdist.scheduler import LoadScopeScheduling  # pylint: disable=import-error

    class FileGroupScheduling(LoadScopeScheduling):
        def _split_scope(self, nodeid):
            return file_group(config.rootpath, nodeid.split("::", 1)[0])

    return FileGroupScheduling(config, log)

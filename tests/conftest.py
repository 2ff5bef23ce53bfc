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
# its fixed host names are never used twice at once. Files that use real test hosts (`pytest.mark.testhosts`) are
# grouped by the testhost tag they use (GPUHOST_TESTHOST_TAG="xx" or TAG = "xx" in the file; the caller's
# GPUHOST_TESTHOST_TAG for a file that reads it from the environment): the files of one tag
# run one after the other as without xdist (the "im" files share their hosts; test_testhosts.py kills creates
# mid-way and checks its tag for leaks), files of different tags side by side (every object, lock-protected index
# and leak check of testhost.py is per tag; stage 40 runs scenarios' hosts side by side the same way). A file with
# a testhosts mark but no such tag joins the one group "testhosts". A file that says `XDIST_SCOPE = "test"` (no
# module-scoped state, fresh ports and tmp_path per test) is split into one unit per test.
# Why not xdist_group markers: pytest 9 keeps the node id in Node._id, and xdist 3.8.0's loadgroup appends the group
# to Node._nodeid, so the marker is silently ignored and a file's tests are spread over workers (measured
# 2026-12-01: two module fixtures created host sgunit at once, each create destroying the other's "stale" host).
# Order: xdist hands out the units with the most tests first, so a long file with one test (the accuracy gate on
# the real engine, 413 s) started twelve minutes into a 19-minute run and ran alone at the end (2026-12-03). Units
# are handed out longest first by tests/stages/pytest-seconds (measured seconds per file or group); units without
# a figure follow in xdist's order.
TESTHOSTS = re.compile(r"pytest\.mark\.testhosts\b")
TESTHOST_TAG = re.compile(r'(?:GPUHOST_TESTHOST_TAG\W[^\n]*?|\bTAG = )"([a-z]{2})"')
TAG_FROM_ENV = 'environ.get("GPUHOST_TESTHOST_TAG"'  # such a file uses the caller's tag when one is set
PER_TEST = re.compile(r'(?m)^XDIST_SCOPE = "test"$')
SECONDS = os.path.join(ROOT, "tests", "stages", "pytest-seconds")
_groups = {}


def file_group(rootpath, path):
    """(group, per_test) of test file ``path``."""
    if path not in _groups:
        try:
            with open(os.path.join(str(rootpath), path), encoding="utf-8") as fh:
                text = fh.read()
        except OSError:
            text = ""
        if TESTHOSTS.search(text):
            tag = TESTHOST_TAG.search(text)
            tag = tag.group(1) if tag else None
            if tag and TAG_FROM_ENV in text and os.environ.get("GPUHOST_TESTHOST_TAG"):
                tag = os.environ["GPUHOST_TESTHOST_TAG"]
            _groups[path] = ("testhosts:" + tag if tag else "testhosts", False)
        else:
            _groups[path] = (path, bool(PER_TEST.search(text)))
    return _groups[path]


def scope_seconds(path=None):
    """{file or group: seconds} from ``path`` (default SECONDS: "NAME SECONDS" lines, # comments); {} without it."""
    out = {}
    try:
        with open(path or SECONDS, encoding="utf-8") as fh:
            for line in fh:
                parts = line.split("#", 1)[0].split()
                if len(parts) == 2 and parts[1].isdigit():
                    out[parts[0]] = int(parts[1])
    except OSError:
        pass
    return out


@pytest.hookimpl(optionalhook=True)  # a venv without pytest-xdist has no such hook
def pytest_xdist_make_scheduler(config, log):
    if config.getoption("dist") != "loadgroup":
        return None  # xdist's own scheduler for the other --dist modes
    from xdist.scheduler import LoadScopeScheduling  # pylint: disable=import-error

    seconds = scope_seconds()

    class FileGroupScheduling(LoadScopeScheduling):
        _ordered = False

        def _split_scope(self, nodeid):
            path = nodeid.split("::", 1)[0]
            group, per_test = file_group(config.rootpath, path)
            return nodeid if per_test else group

        def _assign_work_unit(self, node):
            if not self._ordered:  # the first call: the whole work queue is known
                self._ordered = True
                # a file split per test: its figure shared among its tests
                files = [scope.split("::", 1)[0] for scope in self.workqueue]
                weight = {scope: seconds.get(name, 0) / files.count(name)
                          for scope, name in zip(self.workqueue, files)}
                units = sorted(self.workqueue.items(), key=lambda unit: -weight[unit[0]])  # stable
                self.workqueue.clear()
                self.workqueue.update(units)
            super()._assign_work_unit(node)

    return FileGroupScheduling(config, log)

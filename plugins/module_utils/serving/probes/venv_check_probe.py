# -*- coding: utf-8 -*-
# Copyright: gpuhost.sglang contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Venv check probe (module_utils/serving/venv_check.py): run by the venv's interpreter as ``python -c SOURCE MOD...``.

Prints one JSON object: ``dists`` with installed files missing (RECORD, PEP 376/627, against the disk), the
``modules`` of the argument list that cannot be found, and the ``versions`` of every installed distribution (by its
normalised name, PEP 503), so that the role reads the engine's version from the same run. Needs importlib.metadata (Python >= 3.8). Byte-code caches
may be absent legitimately; files outside site-packages ("../../bin/x") are scripts, not modules.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import importlib.util
import json
import os
import re
import sys


def normalize(name):
    """PEP 503: runs of -, _ and . are one -, lower case."""
    return re.sub(r"[-_.]+", "-", name).lower()


def record_files(dist):
    """The paths of ``dist``'s RECORD as written there (relative to its base), read with csv as importlib.metadata
    does, without a PackagePath each (torch alone has ~15,000 rows: the pathlib objects took most of a second);
    importlib.metadata's own list for a distribution without RECORD (egg-info)."""
    import csv
    import io
    text = dist.read_text("RECORD")
    if text is None:
        return [str(f) for f in (dist.files or [])]
    return [row[0] for row in csv.reader(io.StringIO(text)) if row]


def scan(modules):
    """The probe's answer for the module names ``modules``."""
    import importlib.metadata as md
    out, seen, versions = [], set(), {}
    for dist in md.distributions():
        meta = dist.metadata  # parsed once (dist.version parses it again)
        name, version = meta["Name"], meta["Version"]
        if not name or name.lower() in seen:
            continue
        seen.add(name.lower())
        versions[normalize(name)] = version
        base = str(dist.locate_file(""))
        gone = [f for f in record_files(dist) if "__pycache__" not in f.split("/") and not f.endswith(".pyc")
                and not f.startswith("..") and not os.path.exists(os.path.join(base, f))]
        if gone:
            out.append({"dist": name, "version": version, "missing_files": len(gone), "example": gone[0]})
    mods = [m for m in modules if importlib.util.find_spec(m) is None]
    return {"dists": out, "modules": mods, "versions": versions}


def main(argv=None):
    sys.stdout.write(json.dumps(scan(sys.argv[1:] if argv is None else argv)) + "\n")


if __name__ == "__main__":
    main()

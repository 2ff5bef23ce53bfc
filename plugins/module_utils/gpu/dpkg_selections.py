# -*- coding: utf-8 -*-
# Copyright: gpuhost.sglang contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""dpkg selections (hold / install) of several packages in two dpkg calls, where ansible.builtin.dpkg_selections
takes one package per call (a loop over N packages cost N module runs, each a round trip to the host).

The same reading and writing as ansible.builtin.dpkg_selections (ansible-core
lib/ansible/modules/dpkg_selections.py): ``dpkg --get-selections NAME...`` prints ``NAME<tabs>SELECTION`` per known
package (``NAME:ARCH`` for a package of a foreign or "same" Multi-Arch architecture); a name dpkg does not know reads
as "not present" (dpkg 1.21 says "no packages found matching" on stderr, exit 0); ``dpkg --set-selections`` reads
``NAME SELECTION`` lines on stdin. Stdlib only.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

SELECTIONS = ("install", "hold", "deinstall", "purge")
NOT_PRESENT = "not present"


class SelectionError(Exception):
    """A failure with a message for the user."""


def parse_selections(text):
    """``dpkg --get-selections`` output -> {name: selection}; a ``name:arch`` entry is also keyed by its name."""
    out = {}
    for line in (text or "").splitlines():
        fields = line.split()
        if len(fields) != 2:
            continue
        name, selection = fields
        out[name] = selection
        out.setdefault(name.split(":", 1)[0], selection)
    return out


def plan(current, names, selection):
    """The names (in the given order, once each) whose selection differs from ``selection``."""
    if selection not in SELECTIONS:
        raise SelectionError("selection=%r is invalid: allowed values are %s" % (selection, ", ".join(SELECTIONS)))
    todo = []
    for name in names:
        if current.get(name, NOT_PRESENT) != selection and name not in todo:
            todo.append(name)
    return todo


def apply(run_command, names, selection, check_mode=False):
    """Set ``selection`` on every name that lacks it; returns {changed, changed_names, before}.

    ``run_command`` is AnsibleModule.run_command (argv list, data=stdin) -> (rc, stdout, stderr).
    """
    names = [str(n) for n in names or []]
    bad = [n for n in names if not n or n.startswith("-") or any(c.isspace() for c in n)]
    if bad:
        raise SelectionError("names: %r is not a package name" % bad[0])
    if not names:
        return {"changed": False, "changed_names": [], "before": {}}
    _rc, stdout, _stderr = run_command(["dpkg", "--get-selections"] + names)  # an unknown name: stderr only
    current = parse_selections(stdout)
    todo = plan(current, names, selection)
    if todo and not check_mode:
        data = "".join("%s %s\n" % (name, selection) for name in todo)
        rc, stdout, stderr = run_command(["dpkg", "--set-selections"], data=data)
        if rc != 0:
            raise SelectionError("dpkg --set-selections failed (rc=%s) for %s: %s"
                                 % (rc, ", ".join(todo), (stderr or stdout).strip()))
    return {"changed": bool(todo), "changed_names": todo,
            "before": dict((n, current.get(n, NOT_PRESENT)) for n in names)}

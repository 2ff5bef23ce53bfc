#!/usr/bin/env python3
# Copyright: (c) 2026, gpuhost.sglang contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Role tag lint: every task of every role carries ``<role>`` and a ``<role>_<phase>`` tag, as Ansible will see it.

A task's tags are its own plus what it inherits: the tags of the blocks around it, those of an ``import_tasks``
(static: they reach every imported task) and ``apply: {tags: ...}`` of an ``include_tasks`` (dynamic: the include's
own ``tags:`` select the include only, so without ``apply`` ``--tags <role>_<phase>`` runs the include and skips
every task in it). Walks each role from tasks/main.yml; a tasks file no include reaches (an entry point for
``tasks_from``, a file a handler includes) is checked with nothing inherited. Handlers are not checked (they run
when notified, whatever --tags says). Other roles' tasks (include_role/import_role) are their own role's business.

``role_tags.py [--roles DIR]``: exit 1 and one line per untagged task, ``file:task: has [...], needs ...``.
"""
from __future__ import annotations

import argparse
import os
import sys

import yaml

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
BLOCK_KEYS = ("block", "rescue", "always")
IMPORT = ("import_tasks", "ansible.builtin.import_tasks")
INCLUDE = ("include_tasks", "ansible.builtin.include_tasks")


def as_tags(value):
    if value is None:
        return set()
    if isinstance(value, str):
        return {t.strip() for t in value.split(",") if t.strip()}
    return {str(t) for t in value}


def include_target(task, keys):
    for key in keys:
        if key in task:
            arg = task[key]
            if isinstance(arg, dict):
                return arg.get("file") or arg.get("_raw_params"), as_tags((arg.get("apply") or {}).get("tags"))
            return arg, set()
    return None


def missing(role, tags):
    need = []
    if role not in tags:
        need.append(role)
    if not any(t.startswith(role + "_") and len(t) > len(role) + 1 for t in tags):
        need.append(role + "_<phase>")
    return need


class RoleTags(object):
    def __init__(self, role_dir):
        self.role = os.path.basename(role_dir.rstrip(os.sep))
        self.tasks_dir = os.path.join(role_dir, "tasks")
        self.problems = []
        self.seen = set()

    def load(self, name):
        path = os.path.join(self.tasks_dir, name)
        with open(path, encoding="utf-8") as f:
            return yaml.safe_load(f) or []

    def walk_file(self, name, inherited):
        self.seen.add(name)
        self.walk(name, self.load(name), inherited)

    def walk(self, name, tasks, inherited):
        for task in tasks:
            if not isinstance(task, dict):
                continue
            own = inherited | as_tags(task.get("tags"))
            if any(k in task for k in BLOCK_KEYS):
                for key in BLOCK_KEYS:
                    self.walk(name, task.get(key) or [], own)
                continue
            need = missing(self.role, own)
            if need:
                self.problems.append("roles/%s/tasks/%s: task %r: has %s, needs %s"
                                     % (self.role, name, task.get("name", "?"), sorted(own), " and ".join(need)))
            static = include_target(task, IMPORT)
            dynamic = include_target(task, INCLUDE)
            if static and self.local(static[0]):
                self.walk_file(static[0], own)
            elif dynamic and self.local(dynamic[0]):
                self.walk_file(dynamic[0], inherited | dynamic[1])

    def local(self, target):
        return isinstance(target, str) and "{{" not in target and os.path.isfile(os.path.join(self.tasks_dir, target))

    def check(self):
        if not os.path.isdir(self.tasks_dir):
            return self.problems
        if os.path.isfile(os.path.join(self.tasks_dir, "main.yml")):
            self.walk_file("main.yml", set())
        for name in sorted(os.listdir(self.tasks_dir)):
            if name.endswith((".yml", ".yaml")) and name not in self.seen:
                self.walk_file(name, set())
        return self.problems


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--roles", default=os.path.join(ROOT, "roles"))
    args = ap.parse_args(argv)
    problems = []
    for role in sorted(os.listdir(args.roles)):
        if os.path.isdir(os.path.join(args.roles, role, "tasks")):
            problems += RoleTags(os.path.join(args.roles, role)).check()
    for line in problems:
        print(line)
    if problems:
        print("%d task(s) without their role tags (tests/lint/role_tags.py)" % len(problems), file=sys.stderr)
        return 1
    print("role tags: every task of every role has <role> and <role>_<phase>")
    return 0


if __name__ == "__main__":
    sys.exit(main())

# -*- coding: utf-8 -*-
# Copyright: gpuhost.sglang contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Modules imported on first use, for the collection's filter plugins.

Every task that resolves one filter of this collection makes its worker process import every filter file of the
collection: ansible-core's Jinja2Loader walks the collection's whole filter package to find the name
(ansible/plugins/loader.py, ``Jinja2Loader.get_with_context``, the ``pkgutil.iter_modules`` loop), and the
collection loader compiles each module from its source there, without a bytecode cache
(ansible/utils/collection_loader/_collection_finder.py, ``get_code``). Each task runs in a fresh worker forked from
the controller (ansible/executor/process/worker.py), so nothing of that survives to the next task. A filter file
that imports its implementation at the top therefore makes every such task compile all the implementations (and
whatever they import: ansible.module_utils.urls brings ssl, http.client and cryptography). With
:class:`LazyModule` a filter file costs its own few lines, and a task compiles only what the filters it calls use.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import importlib


class LazyModule(object):
    """Stands for the module ``name``; imports it on the first access to one of its attributes."""

    def __init__(self, name):
        self._lazy_name = name
        self._lazy_module = None

    def __getattr__(self, attr):
        # called only for names the proxy itself lacks: the module's
        if attr.startswith("_lazy_"):
            raise AttributeError(attr)
        if self._lazy_module is None:
            self._lazy_module = importlib.import_module(self._lazy_name)
        return getattr(self._lazy_module, attr)

    def __repr__(self):
        return "<LazyModule %s%s>" % (self._lazy_name, "" if self._lazy_module is None else " (imported)")


def lazy_function(module, attr):
    """A function that calls ``module.attr`` (``module`` a :class:`LazyModule`), importing the module on its first
    call: for a filter map that names a function of the implementation directly."""

    def call(*args, **kwargs):
        return getattr(module, attr)(*args, **kwargs)

    call.__name__ = attr
    return call

# -*- coding: utf-8 -*-
# Copyright: gpuhost.sglang contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Programs the modules run with ANOTHER interpreter (the engine's venv), as real files.

Each probe is a module of this package: its caller imports it (so Ansible's module packer ships the file with
the module, as it ships any module_utils it imports) and hands its source to ``python -c`` with
:func:`source`, which reads the file through the package's loader (a directory on the controller, the module's zip
on a target). A probe imports nothing but the standard library at its top and runs only under ``__main__``.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import pkgutil


def source(name):
    """The source text of the probe module ``name`` of this package (``venv_probe`` -> venv_probe.py)."""
    data = pkgutil.get_data(__name__, name + ".py")
    if data is None:
        raise IOError("probe %s.py is not shipped with %s" % (name, __name__))
    return data.decode("utf-8")

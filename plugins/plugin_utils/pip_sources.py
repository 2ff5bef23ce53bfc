# -*- coding: utf-8 -*-
# Copyright: gpuhost.sglang contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Where pip takes packages from, as its command-line options (the serving and router roles' venvs).

pip's own options (pip documentation, "pip install" > Package Index Options): ``--no-index`` ignores the package
index and looks only at ``--find-links`` (a local wheelhouse for air-gapped hosts); ``--index-url`` replaces the
index, ``--extra-index-url`` adds one.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

from ansible.module_utils.parsing.convert_bool import boolean


def source_args(no_index=False, find_links="", index_url="", extra_index_url=""):
    """The options in pip's order of the above; an empty list for pip's defaults."""
    out = ["--no-index"] if boolean(no_index, strict=False) else []
    for option, value in (("--find-links", find_links), ("--index-url", index_url), ("--extra-index-url", extra_index_url)):
        if value:
            out += [option, value]
    return out

# -*- coding: utf-8 -*-
# Copyright: (c) 2026, gpuhost.sglang contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import absolute_import, division, print_function

__metaclass__ = type


class ModuleDocFragment(object):
    """Attribute support values shared by the collection's modules (the descriptions come from
    ansible.builtin.action_common_attributes; ansible-core merges the two per attribute)."""

    # Modules that read or wait and support check mode fully, without a diff, on POSIX targets.
    CHECK_MODE_FULL = r"""
options: {}
attributes:
  check_mode:
    support: full
  diff_mode:
    support: none
  platform:
    platforms: posix
"""

    # Modules that change files on POSIX targets and support check mode and diff mode fully.
    FILES_FULL = r"""
options: {}
attributes:
  check_mode:
    support: full
  diff_mode:
    support: full
  platform:
    platforms: posix
"""

    # Actions that run on the controller and do not support check mode, without a diff, on POSIX targets.
    CHECK_MODE_NONE = r"""
options: {}
attributes:
  check_mode:
    support: none
  diff_mode:
    support: none
  platform:
    platforms: posix
"""

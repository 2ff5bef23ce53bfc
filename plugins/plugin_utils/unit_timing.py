# -*- coding: utf-8 -*-
# Copyright: gpuhost.sglang contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Start-timeout sizing for a unit whose start includes loading a model."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import math


def start_timeout(load_seconds, minimum=300, fallback=1800, factor=3):
    """TimeoutStartSec for a server that took ``load_seconds`` to become ready last time.

    Three times the measured load, rounded up to a whole minute so that normal jitter of a few seconds
    does not rewrite the unit; never below ``minimum``. With no measurement (0 or negative), ``fallback``.
    """
    load = float(load_seconds or 0)
    if load <= 0:
        return int(fallback)
    return int(max(int(minimum), math.ceil(load * factor / 60.0) * 60))

# -*- coding: utf-8 -*-
# Copyright: gpuhost.sglang contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The one error a bad campaign raises: it names the one key that is wrong, its value and what is allowed."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import json


class CampaignError(ValueError):
    """Bad campaign: ``key`` is the one dotted key that is wrong."""

    def __init__(self, key, value, allowed):
        self.key = key
        super(CampaignError, self).__init__("campaign key %s=%s is invalid: %s" % (key, json.dumps(value, default=str), allowed))

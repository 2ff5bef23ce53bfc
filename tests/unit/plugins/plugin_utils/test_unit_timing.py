from __future__ import absolute_import, division, print_function

__metaclass__ = type

import pytest

from ansible_collections.gpuhost.sglang.plugins.plugin_utils.unit_timing import start_timeout


@pytest.mark.parametrize("load,expected", [
    (0, 1800),        # no measurement: the fallback
    (None, 1800),
    (7, 300),         # tiny model: the minimum
    (100, 300),
    (101, 360),       # 303 s rounds up to 360
    (410, 1260),      # 1230 s -> 21 minutes
    (600, 1800),
])
def test_start_timeout(load, expected):
    assert start_timeout(load, 300, 1800) == expected


def test_jitter_does_not_change_the_value():
    assert len({start_timeout(s, 300, 1800) for s in (595, 598, 600)}) == 1

# -*- coding: utf-8 -*-
# Copyright: gpuhost.sglang contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""A stand-in SGLang for the tune loop's tests (plugins/plugin_utils/tune_loop.py): ``srt/server_args.py`` is the
parser the server_args probe reads, ``launch_server.py`` the server the launcher starts. Put this directory on
PYTHONPATH of the engine's interpreter only."""

__version__ = "0.5.17"

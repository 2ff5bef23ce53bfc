# -*- coding: utf-8 -*-
# Copyright: gpuhost.sglang contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Whether a model copied from the controller is on the host as the role's copy would leave it.

ansible.builtin.copy of a directory checks each file on the host in its own round trip; two ansible.builtin.find
calls with checksums (the controller's directory, the host's) answer the same question in one each, and the copy
runs only for what differs. A file differs when it is missing on the host, is not a regular file there, has
another checksum, or another mode, owner or group than the copy sets; a directory when it is missing or not a
directory (copy sets directory_mode only on directories it creates)."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import os.path

from ansible_collections.gpuhost.sglang.plugins.module_utils.serving.host_read import read_tree


class ModelFilesError(ValueError):
    pass


def _by_relpath(find_result, root, what):
    if not isinstance(find_result, dict) or not isinstance(find_result.get("files"), list):
        raise ModelFilesError("%s must be an ansible.builtin.find result with files, got %r" % (what, type(find_result).__name__))
    prefix = os.path.normpath(root) + "/"
    out = {}
    for entry in find_result["files"]:
        path = os.path.normpath(entry.get("path", ""))
        if not path.startswith(prefix):
            raise ModelFilesError("%s lists %s, which is not under %s" % (what, path, root))
        out[path[len(prefix):]] = entry
    return out


def model_files_differ(src_find, dst_find, src_dir, dst_dir, owner="root", group="root", mode="0644"):
    """The relative paths the copy would change on the host, sorted; [] when the host holds the model as copied.
    ``src_find``: a find result of the controller's directory, or None to read ``src_dir`` here (this runs on the
    controller) with the same reader host_read uses for ``dst_find`` (module_utils/serving/host_read.read_tree)."""
    if src_find is None:
        src_find = read_tree("", src_dir)
    src = _by_relpath(src_find, src_dir, "the controller's files")
    dst = _by_relpath(dst_find if isinstance(dst_find, dict) and "files" in dst_find else {"files": []}, dst_dir,
                      "the host's files")
    differ = []
    for rel, s in src.items():
        d = dst.get(rel)
        if d is None:
            differ.append(rel)
        elif s.get("isdir"):
            if not d.get("isdir"):
                differ.append(rel)
        elif not d.get("isreg") or d.get("checksum") != s.get("checksum") or d.get("mode") != mode \
                or d.get("pw_name") != owner or d.get("gr_name") != group:
            differ.append(rel)
    return sorted(differ)

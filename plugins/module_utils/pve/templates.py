# -*- coding: utf-8 -*-
# Copyright: gpuhost.sglang contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Which container template to create the container from, and whether `pveam` must download it first.

pveam(1) (Proxmox VE admin guide, "Container Images"): `pveam update` refreshes the index, `pveam available
--section system` lists "system  <name>" lines, `pveam list <storage>` lists "<storage>:vztmpl/<name>  <size>"
lines under a "NAME SIZE" header, `pveam download <storage> <name>` fetches one. Template names are
<distribution>-<major>-standard_<version>-<release>_<arch>.tar.<zst|gz>, e.g. debian-12-standard_12.7-1_amd64.tar.zst.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import re

_NAME_RE = re.compile(r"^(?P<family>[a-z0-9]+-[0-9.]+-[a-z]+)_(?P<version>[0-9][0-9.]*)-(?P<release>\d+)_(?P<arch>[a-z0-9]+)"
                      r"\.tar\.(?:zst|gz|xz)$")


class TemplateError(ValueError):
    pass


def parse_available(text):
    return [line.split()[1] for line in (text or "").splitlines() if len(line.split()) == 2]


def parse_list(text):
    out = []
    for line in (text or "").splitlines():
        parts = line.split()
        if parts and ":vztmpl/" in parts[0]:
            out.append(parts[0])
    return out


def _key(name):
    m = _NAME_RE.match(name)
    return (tuple(int(x) for x in m.group("version").split(".")), int(m.group("release"))) if m else ((), 0)


def choose(template, storage, family, listed, available, var="proxmox_lxc_gpu_template"):
    """-> {"volid": storage:vztmpl/name, "name": name, "download": bool}.

    template: a volid ("local:vztmpl/NAME"), a bare NAME, or "" = the newest of `family` (e.g. debian-12-standard)
    that `pveam available` offers (or, offline, the newest already in the storage)."""
    if template:
        if ":" in template:
            storage, sep, rest = template.partition(":")
            name = rest.split("/", 1)[-1]
        else:
            name = template
        volid = "%s:vztmpl/%s" % (storage, name)
        if volid in listed:
            return {"volid": volid, "name": name, "download": False}
        if name not in available:
            raise TemplateError("%s=%r is neither in storage %s nor in the pveam index (pveam available --section "
                                "system offers: %s)" % (var, template, storage,
                                                        ", ".join(sorted(a for a in available if a.startswith(
                                                            name.split("_")[0]))) or "no such family"))
        return {"volid": volid, "name": name, "download": True}
    have = [v.split("/", 1)[-1] for v in listed if v.split("/", 1)[-1].startswith(family + "_")]
    offered = [a for a in available if a.startswith(family + "_") and _NAME_RE.match(a)]
    if offered:
        name = max(offered, key=_key)
    elif have:
        name = max(have, key=_key)
    else:
        raise TemplateError("no %s template in storage %s and none in the pveam index; set %s to a template name "
                            "(pveam available --section system)" % (family, storage, var))
    volid = "%s:vztmpl/%s" % (storage, name)
    return {"volid": volid, "name": name, "download": volid not in listed}

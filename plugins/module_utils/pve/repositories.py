# -*- coding: utf-8 -*-
# Copyright: gpuhost.sglang contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Proxmox VE package repositories: which apt sources to disable and which to add, in both formats.

Sources (Proxmox VE admin guide, "Package Repositories", pve.proxmox.com/wiki/Package_Repositories):
- "The pve-enterprise repository is enabled by default ... You need a valid subscription key to access the
  pve-enterprise repository"; without one, apt-get update gets HTTP 401 from it and exits 100.
- Proxmox VE 8 (Debian 12 bookworm): one-line `.list` files, /etc/apt/sources.list.d/pve-enterprise.list and
  ceph.list; "You can disable this repository by commenting out the above line using a #".
- Proxmox VE 9 (Debian 13 trixie): deb822 `.sources` files (pve-enterprise.sources, ceph.sources); a stanza is
  disabled with "Enabled: false"; the no-subscription repository is a stanza in proxmox.sources.
The subscription state is `pvesubscription get`'s "status:" line (pvesubscription(1): "active" with a valid key,
"notfound" without one).
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import re

MODES = ("no-subscription", "mirror", "enterprise", "unmanaged")


class RepoError(ValueError):
    pass


def subscription_active(pvesubscription_output):
    """`pvesubscription get` output -> True when its status line says active."""
    for line in (pvesubscription_output or "").splitlines():
        k, sep, v = line.partition(":")
        if sep and k.strip().lower() == "status":
            return v.strip().lower() == "active"
    return False


def _is_enterprise(uri, components):
    return "enterprise.proxmox.com" in uri or "pve-enterprise" in components or (
        "/ceph" in uri and "enterprise" in components)


def list_entries(text):
    """One-line format -> [{line, enabled, uri, suite, components, enterprise}] (deb lines only)."""
    out = []
    for i, raw in enumerate(text.splitlines()):
        s = raw.strip()
        enabled = True
        if s.startswith("#"):
            enabled = False
            s = s.lstrip("#").strip()
        s = s.split("#", 1)[0].strip()
        m = re.match(r"^(deb|deb-src)\s+(?:\[[^\]]*\]\s+)?(\S+)\s+(\S+)\s*(.*)$", s)
        if not m:
            continue
        rest = [m.group(2), m.group(3)] + m.group(4).split()
        uri, suite, comps = rest[0], rest[1], rest[2:]
        out.append({"line": i, "enabled": enabled, "uri": uri, "suite": suite, "components": comps,
                    "enterprise": _is_enterprise(uri, comps)})
    return out


def _stanzas(text):
    """deb822 text -> list of (start line, end line exclusive, {field: value})."""
    lines = text.splitlines()
    out, start, fields, key = [], None, {}, None
    for i, line in enumerate(lines + [""]):
        if not line.strip():
            if start is not None:
                out.append((start, i, fields))
            start, fields, key = None, {}, None
            continue
        if line.lstrip().startswith("#"):
            continue
        if start is None:
            start = i
        if line[0] in " \t" and key:
            fields[key] += " " + line.strip()
            continue
        k, sep, v = line.partition(":")
        if sep:
            key = k.strip().lower()
            fields[key] = v.strip()
    return out


def sources_entries(text):
    out = []
    for start, end, f in _stanzas(text):
        uris = f.get("uris", "").split()
        comps = f.get("components", "").split()
        enabled = f.get("enabled", "yes").lower() not in ("no", "false", "0")
        for uri in uris:
            out.append({"line": start, "end": end, "enabled": enabled, "uri": uri,
                        "suite": " ".join(f.get("suites", "").split()), "components": comps,
                        "enterprise": _is_enterprise(uri, comps)})
    return out


def entries(path, text):
    return sources_entries(text) if path.endswith(".sources") else list_entries(text)


def disable(path, text, lines):
    """Text with the entries starting at `lines` disabled (comment the line / Enabled: false in the stanza)."""
    out = text.splitlines()
    if path.endswith(".sources"):
        for start, end, dummy in sorted(_stanzas(text), reverse=True):
            if start not in lines:
                continue
            idx = [j for j in range(start, end) if re.match(r"(?i)^enabled\s*:", out[j])]
            if idx:
                out[idx[0]] = "Enabled: false"
            else:
                out.insert(end, "Enabled: false")
    else:
        for j in lines:
            out[j] = "# " + out[j] + "  # disabled: no Proxmox VE subscription (gpuhost.sglang.proxmox_host)"
    return "\n".join(out) + "\n"


def plan(files, release, subscription, mode, mirror="", release_data=None):
    """Decide the repository changes.

    files: {path: text} of /etc/apt/sources.list and sources.list.d/*.list|*.sources; release: Debian codename;
    subscription: True when a subscription is active; mode: one of MODES; mirror: base URI replacing the
    no-subscription repository's (mode mirror); release_data: {codename: {pve, format, path, uri, component,
    signed_by}}. Returns {"disable": {path: new text}, "add": {path: text}, "enterprise": [path],
    "problems": [text]}.
    """
    if mode not in MODES:
        raise RepoError("proxmox_host_pve_repository=%r is invalid: allowed values are %s" % (mode, ", ".join(MODES)))
    if mode == "mirror" and not mirror:
        raise RepoError("proxmox_host_pve_repository=mirror needs proxmox_host_pve_repository_mirror (the base URI of "
                        "your mirror of the Proxmox VE repository), got ''")
    res = {"disable": {}, "add": {}, "enterprise": [], "problems": [], "subscription": subscription}
    rel = (release_data or {}).get(release)
    if rel is None and mode in ("no-subscription", "mirror"):
        res["problems"].append("Debian release %r is not a known Proxmox VE base (known: %s)" % (
            release, ", ".join("%s = PVE %s" % (k, v["pve"]) for k, v in sorted((release_data or {}).items()))))
        return res
    enabled_ent = {}
    have_noentry = False
    rel = rel or {"component": "pve-no-subscription", "uri": ""}
    uri = mirror.rstrip("/") if mode == "mirror" else rel["uri"]
    for path in sorted(files):
        for e in entries(path, files[path]):
            if not e["enabled"]:
                continue
            if e["enterprise"]:
                enabled_ent.setdefault(path, []).append(e["line"])
            elif rel["component"] in e["components"] and e["uri"].rstrip("/") == uri:
                have_noentry = True
    res["enterprise"] = sorted(enabled_ent)
    if mode == "unmanaged" or mode == "enterprise":
        if enabled_ent and not subscription:
            res["problems"].append(
                "the enterprise repositories in %s are enabled but this host has no active subscription (pvesubscription "
                "get), so apt-get update fails with 401; set proxmox_host_pve_repository: no-subscription (or mirror "
                "with proxmox_host_pve_repository_mirror) to let the role disable them and add the no-subscription "
                "repository, or add a subscription key (pvesubscription set KEY)" % ", ".join(sorted(enabled_ent)))
        return res
    if not subscription:
        for path, lines in enabled_ent.items():
            res["disable"][path] = disable(path, files[path], set(lines))
    if not have_noentry:
        if rel["format"] == "deb822":
            text = ("Types: deb\nURIs: %s\nSuites: %s\nComponents: %s\nSigned-By: %s\n"
                    % (uri, release, rel["component"], rel["signed_by"]))
        else:
            text = "deb %s %s %s\n" % (uri, release, rel["component"])
        res["add"][rel["path"]] = text
    return res

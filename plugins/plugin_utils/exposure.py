# -*- coding: utf-8 -*-
# Copyright: gpuhost.sglang contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""What a server's listen address exposes to whoever can reach it, and the warning deploy prints.

SGLang's API key does not cover every path: ``decide_request_auth`` in ``sglang/srt/utils/auth.py``
(sglang 0.5.23) allows any request whose path starts with ``/health``, ``/ready`` or ``/metrics`` without a
key, "to support k8s probes and Prometheus scraping". ``/health_generate`` runs a one-token generation on
the GPUs. The engine's prefixes are data (``sglang_engines.<engine>.public_path_prefixes`` in
roles/sglang/vars/main.yml); this module only decides what they mean for a listen address.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import ipaddress

_LOCAL_NAMES = ("localhost", "localhost.localdomain", "ip6-localhost", "ip6-loopback")
DOCS = "docs/serving.md (Exposure)"


class ExposureError(ValueError):
    """Bad input, naming the variable and what is allowed."""


def is_local(address):
    """True when ``address`` only accepts connections from this host (loopback address or name)."""
    text = address.strip().strip("[]").lower()
    if text in _LOCAL_NAMES:
        return True
    try:
        return ipaddress.ip_address(text).is_loopback
    except ValueError:
        return False   # a host name other than localhost resolves to some interface: treat it as reachable


def exposure(listen_address, port, public_path_prefixes, api_key_set, api_key_supported=True):
    """Return ``{beyond_localhost, open_paths, warning}`` for a server listening on ``listen_address:port``.

    ``open_paths`` lists what answers without a key (``/*`` = everything); ``warning`` is empty when the
    address is loopback-only.
    """
    if not isinstance(listen_address, str) or not listen_address.strip():
        raise ExposureError("sglang_listen_address must be a non-empty string (an address or host name), got %r"
                            % (listen_address,))
    if (not isinstance(public_path_prefixes, (list, tuple))
            or not all(isinstance(p, str) and p.startswith("/") for p in public_path_prefixes)):
        raise ExposureError("public_path_prefixes must be a list of paths starting with / (sglang_engines.<engine>), got %r"
                            % (public_path_prefixes,))
    where = "%s:%s" % (listen_address, port)
    if is_local(listen_address):
        return {"beyond_localhost": False, "open_paths": [], "warning": ""}
    if not api_key_supported:
        return {"beyond_localhost": True, "open_paths": ["/*"],
                "warning": "The server listens on %s and its engine has no API key: every endpoint answers anyone who "
                           "can reach it. Fence it (nftables, a reverse proxy, or listen on 127.0.0.1): %s." % (where, DOCS)}
    if not api_key_set:
        return {"beyond_localhost": True, "open_paths": ["/*"],
                "warning": "The server listens on %s with no sglang_api_key: every endpoint answers anyone who can reach "
                           "it. Set sglang_api_key and fence the rest: %s." % (where, DOCS)}
    open_paths = sorted(p.rstrip("*") + "*" for p in public_path_prefixes)
    health = [p for p in public_path_prefixes if p.startswith("/health")]
    gen = " (%s_generate runs a generation on the GPUs)" % health[0] if health else ""
    return {"beyond_localhost": True, "open_paths": open_paths,
            "warning": "The server listens on %s: %s answer without the API key%s. Fence them from untrusted networks "
                       "(nftables, a reverse proxy that only forwards /v1/*, or listen on 127.0.0.1 behind a router): %s."
                       % (where, ", ".join(open_paths), gen, DOCS)}

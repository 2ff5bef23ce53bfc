# -*- coding: utf-8 -*-
# Copyright: gpuhost.sglang contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The primary key fingerprint of an OpenPGP public key file (ASCII-armored or binary), without gpg.

A Debian 13 host verifies repositories with sqv and need not have gpg; the check that a fetched repository key is
the one the data table names runs before apt trusts it, so it reads the key itself. RFC 4880 (and RFC 9580):
section 4.2 packet headers (old and new format), 5.5.2 the public-key packet (tag 6, version 4), 12.2 the v4
fingerprint = SHA-1 of 0x99, a two-octet length and the public-key packet body; 6.2 ASCII armor (the base64 body
after the header lines' blank line, the "=" CRC-24 line after it). Version 6 keys (RFC 9580 5.5.4) use SHA-256 of
0x9B, a four-octet length and the body.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import base64
import binascii
import hashlib
import struct

PUBLIC_KEY_TAG = 6


class NotAKey(ValueError):
    """The file is not an OpenPGP public key."""


def dearmor(data):
    """Binary packets of ``data`` (bytes): armored text is decoded, binary data is returned as it is."""
    text = data.lstrip()
    if not text.startswith(b"-----BEGIN PGP"):
        return data
    lines = text.decode("ascii", "replace").splitlines()
    body, started, headers_done = [], False, False
    for line in lines:
        line = line.strip()
        if line.startswith("-----BEGIN PGP"):
            started = True
            continue
        if not started:
            continue
        if line.startswith("-----END PGP"):
            break
        if not headers_done:
            if line == "":
                headers_done = True
            elif ":" not in line:  # no header lines at all: this is already base64
                headers_done = True
                body.append(line)
            continue
        if line.startswith("="):  # CRC-24 line
            continue
        body.append(line)
    try:
        return base64.b64decode("".join(body), validate=True)
    except (binascii.Error, ValueError) as exc:
        raise NotAKey("bad ASCII armor: %s" % exc) from exc


def packets(data):
    """(tag, body) of each packet in binary ``data``."""
    pos = 0
    while pos < len(data):
        ctb = data[pos]
        if not ctb & 0x80:
            raise NotAKey("not an OpenPGP packet at offset %d" % pos)
        pos += 1
        if ctb & 0x40:  # new format
            tag = ctb & 0x3F
            first = data[pos]
            if first < 192:
                length, pos = first, pos + 1
            elif first < 224:
                length, pos = ((first - 192) << 8) + data[pos + 1] + 192, pos + 2
            elif first == 255:
                length, pos = struct.unpack(">I", data[pos + 1:pos + 5])[0], pos + 5
            else:
                raise NotAKey("partial body length in a key packet")
        else:  # old format
            tag, ltype = (ctb >> 2) & 0x0F, ctb & 0x03
            if ltype == 3:
                raise NotAKey("indeterminate length in a key packet")
            size = (1, 2, 4)[ltype]
            length = int.from_bytes(data[pos:pos + size], "big")
            pos += size
        if pos + length > len(data):
            raise NotAKey("truncated packet")
        yield tag, data[pos:pos + length]
        pos += length


def primary_fingerprint(data):
    """Upper-case hex fingerprint of the first primary key in ``data`` (bytes, armored or binary)."""
    try:
        for tag, body in packets(dearmor(data)):
            if tag != PUBLIC_KEY_TAG:
                continue
            if body[:1] == b"\x04":
                return hashlib.sha1(b"\x99" + struct.pack(">H", len(body)) + body).hexdigest().upper()
            if body[:1] == b"\x06":
                return hashlib.sha256(b"\x9b" + struct.pack(">I", len(body)) + body).hexdigest().upper()
            raise NotAKey("public key packet version %d is not supported" % body[0])
    except IndexError as exc:
        raise NotAKey("truncated packet") from exc
    raise NotAKey("no public key packet")


def normalise(fingerprint):
    """``fingerprint`` without spaces, upper case ("EB69 3B30 ..." == "eb693b30...")."""
    return "".join(str(fingerprint).split()).upper()

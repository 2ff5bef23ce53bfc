# -*- coding: utf-8 -*-
# Copyright: gpuhost.sglang contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""What DKMS needs to build the NVIDIA kernel module: headers for the running kernel, and on a Secure Boot
machine a signing key the firmware trusts.

* Without headers for the running kernel Debian's DKMS does not fail: its postinst prints "Module build for
  kernel X was skipped since the kernel headers for this kernel does not seem to be installed." and the
  package installs without a module (dell/dkms ``dkms_common.postinst``; seen on Proxmox 5.15.39-3-pve).
  ``header_packages`` picks the packages from the role's data table (roles/nvidia_driver/vars/main.yml
  ``nvidia_driver_kernel_headers``).
* ``secure_boot_state`` reads ``mokutil --sb-state`` as lcp/mokutil ``src/mokutil.c`` prints it (0.6.0 in
  Debian 12: always exit 0; 0.7.x: exit 1 when disabled), ``mok_enrollment_state`` reads
  ``mokutil --test-key CERT`` ("X is already enrolled" exit 1, "X is not enrolled" exit 0, "X is already in the
  enrollment request").

Stdlib only.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import re


def header_packages(release, distribution, table):
    """Header packages for kernel ``release`` on ``distribution``: the first rule of ``table`` that matches.

    A rule: {"kernel": regex on the release (optional), "distribution": name (optional), "packages": [...]},
    "{release}" in a package name is replaced by the release. Raises ValueError naming both inputs.
    """
    release = str(release or "").strip()
    for rule in table or []:
        if rule.get("kernel") and not re.search(rule["kernel"], release):
            continue
        if rule.get("distribution") and rule["distribution"] != distribution:
            continue
        return [p.replace("{release}", release) for p in rule["packages"]]
    raise ValueError("no kernel header packages known for kernel %r on distribution %r (nvidia_driver_kernel_headers "
                     "covers: %s)" % (release, distribution, ", ".join(
                         "%s%s" % (r.get("distribution") or "any distribution", (" kernel ~ " + r["kernel"]) if r.get("kernel") else "")
                         for r in table or [])))


def secure_boot_state(stdout, stderr="", rc=0):
    """Parse ``mokutil --sb-state``.

    Returns {"state", "signing_required", "evidence"}; state is enabled, shim_validation_disabled, disabled,
    not_uefi (BIOS boot, no EFI variables) or unknown. Unknown output counts as signing required: the module
    would be refused at boot, so the role stops rather than guess.
    """
    out, err = stdout or "", stderr or ""
    evidence = (out + err).strip()
    lines = [line.strip() for line in out.splitlines()]
    if "SecureBoot enabled" in lines:
        if "SecureBoot validation is disabled in shim" in lines:
            state, required = "shim_validation_disabled", False
        else:
            state, required = "enabled", True
    elif "SecureBoot disabled" in lines:
        state, required = "disabled", False
    elif "EFI variables are not supported on this system" in err:
        state, required = "not_uefi", False
    else:
        state, required = "unknown", True
    return {"state": state, "signing_required": required, "evidence": evidence}


def mok_enrollment_state(stdout, stderr="", rc=0):
    """Parse ``mokutil --test-key CERT``: enrolled, not_enrolled, pending, invalid or unknown."""
    text = (stdout or "") + (stderr or "")
    if "is already enrolled" in text:
        return "enrolled"
    if "is already in the enrollment request" in text:
        return "pending"
    if "is not enrolled" in text:
        return "not_enrolled"
    if "Not a valid x509 certificate" in text:
        return "invalid"
    return "unknown"


def enrollment_steps(cert_path):
    """What an operator does to let the firmware trust DKMS-built modules (one line each)."""
    return [
        "1. Create a signing key pair once (keep the private key safe): openssl req -new -x509 -newkey rsa:2048 -nodes "
        "-days 36500 -subj '/CN=gpuhost DKMS signing/' -keyout mok.key -outform DER -out mok.der",
        "2. Give both to the role: nvidia_driver_mok_key_src: mok.key, nvidia_driver_mok_cert_src: mok.der (files on the "
        "controller); it installs them for DKMS and the module is signed when it is built.",
        "3. Queue the certificate for enrollment on the host: mokutil --import %s (choose a one-time password)." % cert_path,
        "4. Reboot at the console: in the blue MOK Manager screen choose 'Enroll MOK', 'Continue', 'Yes', type the "
        "password, then 'Reboot'.",
        "5. Check: mokutil --test-key %s says 'is already enrolled'; then rerun the play." % cert_path,
        "Or switch Secure Boot off in the firmware setup.",
    ]

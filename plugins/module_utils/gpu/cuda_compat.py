# -*- coding: utf-8 -*-
# Copyright: gpuhost.sglang contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Does this NVIDIA driver run an engine built for CUDA X.Y? The rule, with the table as data.

The table is ``sglang_cuda_driver_rules`` of ``roles/sglang/vars/cuda_compat.yml`` (evidence there)::

    major_floor:  {"13": "580.65.06", ...}    # minor-version compatibility: any 13.y on a driver >= the 13.0 GA driver
    minor_driver: {"13.0": "580.65.06", ...}  # PTX of CUDA 13.0 is JIT-compiled only by a driver >= 580.65.06

An engine that JIT-compiles kernels (SGLang: Triton, FlashInfer, DeepGEMM) needs both; ``jit=False`` checks the
floor only. The driver's own ``CUDA Version`` (nvidia-smi header, NVML nvmlSystemGetCudaDriverVersion) must cover
the engine's CUDA as well; with no driver version it alone decides. Stdlib only: this runs on the targets.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import re

_DRIVER_RE = re.compile(r"^\s*(\d+)\.(\d+)(?:\.(\d+))?\s*$")
_CUDA_RE = re.compile(r"^\s*(\d+)(?:\.(\d+))?(?:\.\d+)?\s*$")

RULES_FILE = "roles/sglang/vars/cuda_compat.yml"


def parse_driver(text):
    """'580.105.08' -> (580, 105, 8); '570.26' -> (570, 26); anything else -> None."""
    if text is None:
        return None
    match = _DRIVER_RE.match(str(text))
    if not match:
        return None
    return tuple(int(part) for part in match.groups() if part is not None)


def parse_cuda(value):
    """'13.0' / '12' / 13000 (NVML's integer) -> (major, minor); anything else -> None."""
    if value is None or isinstance(value, bool):
        return None
    if isinstance(value, int):
        return (value // 1000, (value % 1000) // 10)
    match = _CUDA_RE.match(str(value))
    if not match:
        return None
    return (int(match.group(1)), int(match.group(2) or 0))


def _cmp_key(version):
    return tuple(version) + (0,) * (3 - len(version))


def _cuda_text(cuda):
    return "%d.%d" % cuda


def validate_rules(rules):
    """Raise ValueError naming the offending key of a malformed table."""
    if not isinstance(rules, dict):
        raise ValueError("%s: sglang_cuda_driver_rules must be a mapping" % RULES_FILE)
    for key in ("major_floor", "minor_driver"):
        table = rules.get(key)
        if not isinstance(table, dict):
            raise ValueError("%s: sglang_cuda_driver_rules.%s must be a mapping of CUDA version -> driver version"
                             % (RULES_FILE, key))
        for cuda, driver in table.items():
            if parse_cuda(str(cuda)) is None or parse_driver(driver) is None:
                raise ValueError("%s: sglang_cuda_driver_rules.%s[%r] = %r is not CUDA version -> driver version"
                                 % (RULES_FILE, key, str(cuda), driver))


def check(engine_cuda, driver_version, driver_cuda, rules, jit=True, what="the engine"):
    """Return {ok, status, required_driver, msg}. status: no-cuda, ok, too-old, unknown-driver, unknown-cuda.

    ``engine_cuda``: the CUDA the engine was built for (torch.version.cuda, e.g. '13.0'; None = a CPU build).
    ``driver_version``/``driver_cuda``: what gpu_facts reported (either may be None)."""
    validate_rules(rules)
    cuda = parse_cuda(engine_cuda)
    if engine_cuda is None or cuda is None:
        return {"ok": True, "status": "no-cuda", "required_driver": None,
                "msg": "%s has no CUDA (built for CPU): no driver needed" % what}
    major = str(cuda[0])
    label = "%s built for CUDA %s" % (what, _cuda_text(cuda))
    floor = rules["major_floor"].get(major)
    minor = rules["minor_driver"].get(_cuda_text(cuda))
    if floor is None or (jit and minor is None):
        missing = ("CUDA %s.x (major_floor)" % major) if floor is None else ("CUDA %s (minor_driver)" % _cuda_text(cuda))
        return {"ok": False, "status": "unknown-cuda", "required_driver": None,
                "msg": "%s: %s is not in %s; add its driver from the CUDA Toolkit Release Notes "
                       "(table 'CUDA Toolkit and Corresponding Driver Versions')" % (label, missing, RULES_FILE)}
    needs = [(floor, "CUDA %s.x needs driver >= %s (minor-version compatibility floor)" % (major, floor))]
    if jit:
        needs.append((minor, "JIT of CUDA %s PTX needs driver >= %s" % (_cuda_text(cuda), minor)))
    required_text = max((need[0] for need in needs), key=lambda d: _cmp_key(parse_driver(d)))
    required = parse_driver(required_text)
    why = " and ".join(need[1] for need in needs)
    need_cuda = cuda if jit else (cuda[0], 0)
    have = parse_driver(driver_version)
    have_cuda = parse_cuda(driver_cuda)
    if have is None and have_cuda is None:
        return {"ok": False, "status": "unknown-driver", "required_driver": required_text,
                "msg": "%s, but the NVIDIA driver's version is unknown (no NVML and no nvidia-smi answer): %s"
                       % (label, why)}
    driver_text = "driver %s" % (driver_version if have is not None else "of unknown version")
    if have_cuda is not None:
        driver_text += " (supports CUDA %s)" % _cuda_text(have_cuda)
    ok = (have is None or _cmp_key(have) >= _cmp_key(required)) and (have_cuda is None or have_cuda >= need_cuda)
    if ok:
        return {"ok": True, "status": "ok", "required_driver": required_text,
                "msg": "%s runs %s (%s)" % (driver_text, label, why)}
    return {"ok": False, "status": "too-old", "required_driver": required_text,
            "msg": "%s is too old for %s: %s" % (driver_text, label, why)}

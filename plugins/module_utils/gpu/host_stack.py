# -*- coding: utf-8 -*-
# Copyright: gpuhost.sglang contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""What compute stack a host needs beyond the driver: the CUDA toolkit and NCCL only where processes on the host
itself use the GPUs.

A Proxmox VE host whose GPUs serve only LXC containers runs no CUDA program: the engine in the container brings
its own CUDA runtime (torch's CUDA wheels, the container's toolchain), and the container shares only the host's
kernel module (the container's userspace is pinned to it). The toolkit (several GB) and a second NCCL on the host
would be unused.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

SERVES = ("host", "containers")


def host_compute_stack(mode, serves, cuda_version, install_nccl, serves_var="nvidia_driver_host_serves"):
    """-> {"cuda_version": str ("" = no toolkit), "nccl": bool, "skipped": [text]}."""
    if serves not in SERVES:
        raise ValueError("%s=%r is invalid: allowed values are %s" % (serves_var, serves, ", ".join(SERVES)))
    cuda_version = cuda_version or ""
    if mode != "host":
        return {"cuda_version": "", "nccl": False, "skipped": []}
    if serves == "containers":
        skipped = []
        if cuda_version:
            skipped.append("CUDA toolkit %s" % cuda_version)
        if install_nccl:
            skipped.append("NCCL")
        return {"cuda_version": "", "nccl": False,
                "skipped": ["%s not installed: this host's GPUs serve only containers (%s=containers), which bring "
                            "their own CUDA userspace" % (s, serves_var) for s in skipped]}
    return {"cuda_version": cuda_version, "nccl": bool(install_nccl), "skipped": []}

# -*- coding: utf-8 -*-
# Copyright: gpuhost.sglang contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
from __future__ import absolute_import, division, print_function

__metaclass__ = type

import pytest

from ansible_collections.gpuhost.sglang.plugins.module_utils.gpu import nccl as gpu_nccl
from ansible_collections.gpuhost.sglang.plugins.module_utils.gpu import nvml_facts as nf
from ansible_collections.gpuhost.sglang.tests.harness import fake_nvml as fake


def as_dict(settings):
    return dict((s["name"], s["value"]) for s in settings)


def test_bare_metal_rtx_box_limits_p2p_to_the_socket():
    facts = nf.collect(fake.rtx_pro_6000_box(), host={})
    s = gpu_nccl.settings(facts, ib=[])
    assert as_dict(s) == {"NCCL_IB_DISABLE": "1", "NCCL_P2P_LEVEL": "PHB"}
    reason = [x for x in s if x["name"] == "NCCL_P2P_LEVEL"][0]["reason"]
    assert "up to PHB" in reason and "0->4 is SYS" in reason


def test_vfio_vm_with_unsupported_pairs_disables_p2p():
    facts = nf.collect(fake.rtx_pro_6000_box(virt=1), host={"hypervisor_flag": True})
    s = as_dict(gpu_nccl.settings(facts, ib=[]))
    assert s == {"NCCL_IB_DISABLE": "1", "NCCL_P2P_DISABLE": "1"}


def test_nvswitch_box_with_infiniband():
    facts = nf.collect(fake.h100_sxm_box(), host={})
    s = gpu_nccl.settings(facts, ib=["mlx5_0", "mlx5_1"])
    assert as_dict(s) == {"NCCL_P2P_LEVEL": "NVL"}
    assert "NV18" in s[0]["reason"]


def test_all_pairs_ok_allows_the_widest_path():
    facts = nf.collect(fake.rtx_pro_6000_box(), host={})
    for cap in ("read", "write"):
        facts["p2p"][cap] = [["X" if i == j else "OK" for j in range(8)] for i in range(8)]
    s = gpu_nccl.settings(facts, ib=[])
    assert as_dict(s)["NCCL_P2P_LEVEL"] == "SYS"
    facts["virtualization"] = "passthrough"
    s = gpu_nccl.settings(facts, ib=[])
    assert as_dict(s) == {"NCCL_IB_DISABLE": "1"}
    assert "without a measured, passing gpu_link_probe" in gpu_nccl.p2p_decision(facts)["evidence"]


def test_single_gpu_and_no_gpu():
    assert as_dict(gpu_nccl.settings({"gpu_count": 0}, ib=[])) == {"NCCL_IB_DISABLE": "1"}
    assert gpu_nccl.settings({"gpu_count": 1}, ib=["mlx5_0"]) == []


def test_overrides_replace_and_add():
    facts = nf.collect(fake.rtx_pro_6000_box(), host={})
    s = gpu_nccl.settings(facts, ib=[], overrides={"NCCL_P2P_LEVEL": "SYS", "NCCL_DEBUG": "WARN"})
    assert as_dict(s) == {"NCCL_IB_DISABLE": "1", "NCCL_P2P_LEVEL": "SYS", "NCCL_DEBUG": "WARN"}
    assert [x["reason"] for x in s if x["name"] == "NCCL_DEBUG"] == ["set explicitly (nccl_overrides)"]


@pytest.mark.parametrize("bad", ["nccl_debug", "NCCL DEBUG", ""])
def test_bad_override_names(bad):
    with pytest.raises(ValueError, match="upper-case NCCL variables"):
        gpu_nccl.settings({"gpu_count": 0}, overrides={bad: "1"})


def test_ib_devices(tmp_path):
    assert gpu_nccl.ib_devices(str(tmp_path)) == []
    (tmp_path / "sys" / "class" / "infiniband" / "mlx5_1").mkdir(parents=True)
    (tmp_path / "sys" / "class" / "infiniband" / "mlx5_0").mkdir()
    assert gpu_nccl.ib_devices(str(tmp_path)) == ["mlx5_0", "mlx5_1"]

"""Shared network links (planner.cost.links): ZeRO-3 gathers and the MoE all-to-all through one NIC."""

from __future__ import annotations

import numpy as np
import pytest
from conftest import run_plan_in_process

from planner.cost import links

QWEN3 = ["--model", "qwen3-235b-a22b", "--seq-len", "4096", "--global-batch", "8192", "--precision", "fp8",
         "--framework", "nemo"]


def _explain(cluster: str, layout: str) -> dict:
    import json

    out = run_plan_in_process("explain", *QWEN3, "--cluster", cluster, "--layout", layout, "--format", "json")
    return json.loads(out.stdout)


def test_contention_is_what_the_busiest_tier_needs_beyond_the_layer() -> None:
    busy = (np.array([9.0, 3.0]), np.array([4.0, 1.0]))
    assert links.contention(busy, np.array([7.0, 7.0])).tolist() == [2.0, 0.0]


def test_zero3_gathers_and_a_cross_node_all_to_all_contend() -> None:
    """Qwen3-235B on 256 H100, ZeRO-3 over all 256 and EP 32 over four nodes with combined 1F1B: each hides
    under the layer alone (its own exposure is small), but the NIC carries both, about 18 ms of traffic per
    layer and micro-batch against 17 ms of layer."""
    doc = _explain("h100x256", "tp=1,pp=1,ep=32,zero=3,recompute=selective,schedule=combined-1f1b")
    b = doc["breakdown"]
    assert b["nic_comm_s"] > 0.02 * doc["metrics"]["step_time_s"]
    assert b["exposed_comm_s"] == pytest.approx(b["ep_comm_s"] + b["fsdp_comm_s"] + b["nic_comm_s"], rel=1e-3)


@pytest.mark.parametrize("layout", [
    "tp=1,pp=8,vpp=12,ep=32,zero=1,recompute=selective,schedule=combined-1f1b",  # EP alone on the NIC
    "tp=1,pp=1,ep=8,zero=3,recompute=selective,schedule=combined-1f1b",  # EP inside the node: ZeRO-3 alone
])
def test_one_dimension_on_the_nic_adds_nothing(layout: str) -> None:
    assert _explain("h100x256", layout)["breakdown"]["nic_comm_s"] == 0.0


def test_a_faster_network_contends_less(tmp_path) -> None:
    """The same layout on a cluster whose NICs are twice as fast: the shared traffic fits the layer again."""
    import yaml

    slow = _explain("h100x256", "tp=1,pp=1,ep=32,zero=3,recompute=selective,schedule=combined-1f1b")
    spec = {"name": "h100x256-fast", "gpu": "h100", "nodes": 32, "gpus_per_node": 8, "network_gbps": 100}
    path = tmp_path / "fast.yaml"
    path.write_text(yaml.safe_dump(spec))
    fast = _explain(str(path), "tp=1,pp=1,ep=32,zero=3,recompute=selective,schedule=combined-1f1b")
    assert fast["breakdown"]["nic_comm_s"] < 0.5 * slow["breakdown"]["nic_comm_s"]

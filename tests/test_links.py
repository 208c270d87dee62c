"""Shared network links (planner.cost.links): ZeRO-2/3 traffic, the MoE all-to-all and CP rings through one NIC."""

from __future__ import annotations

import json

import numpy as np
import pytest
import yaml
from conftest import run_plan_in_process

from planner.cost import links
from planner.cost.step import evaluate
from planner.evidence.cases import case_problem
from planner.inputs.catalog import load_model
from planner.inputs.layout import Layout, Schedule

QWEN3 = ["--model", "qwen3-235b-a22b", "--seq-len", "4096", "--global-batch", "8192", "--precision", "fp8",
         "--framework", "nemo"]


def _explain(cluster: str, layout: str) -> dict:
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
    slow = _explain("h100x256", "tp=1,pp=1,ep=32,zero=3,recompute=selective,schedule=combined-1f1b")
    spec = {"name": "h100x256-fast", "gpu": "h100", "nodes": 32, "gpus_per_node": 8, "network_gbps": 100}
    path = tmp_path / "fast.yaml"
    path.write_text(yaml.safe_dump(spec))
    fast = _explain(str(path), "tp=1,pp=1,ep=32,zero=3,recompute=selective,schedule=combined-1f1b")
    assert fast["breakdown"]["nic_comm_s"] < 0.5 * slow["breakdown"]["nic_comm_s"]


def test_only_two_network_dimensions_contend() -> None:
    """Over a grid of Qwen3-235B layouts on 256 H100: a layout pays for the shared NIC only where ZeRO-3's gathers
    or a CP ring leave the node beside an all-to-all that does (one dimension on the NIC never adds anything), and
    the term only ever adds time."""
    model = load_model("qwen3-235b-a22b").model_dump(exclude_none=True)
    case = {"id": "grid", "model": model, "cluster": "h100x256",
            "training": {"seq_len": 4096, "global_batch": 8192, "precision": "fp8", "framework": "nemo"},
            "layout": {"tp": 1, "pp": 1}, "measured": {}}
    problem = case_problem(case, "grid")
    rows = [dict(tp=1, pp=1, cp=cp, ep=ep, etp=1, vpp=1, mbs=1, zero=zero, recompute=1, sp=0, cp_comm=0,
                 schedule=int(Schedule.COMBINED_1F1B), dp=256 // cp)
            for ep in (8, 16, 32) for zero in (1, 3) for cp in (1, 2)]
    seen = 0
    for row in rows:
        out = evaluate(problem, Layout.from_dict(row).columns())
        nic = float(out["nic_comm_s"][0])
        assert nic >= 0.0
        ep_leaves_node = row["ep"] > 8
        if nic > 0:
            seen += 1
            assert ep_leaves_node and (row["zero"] == 3 or row["cp"] > 1), row
        if row["zero"] == 1 and row["cp"] == 1 or not ep_leaves_node and row["cp"] == 1:
            assert nic == 0.0, row
    assert seen > 0


def test_zero2_reduce_scatter_shares_the_nic_too(tmp_path) -> None:
    """ZeRO-2 reduce-scatters every micro-batch's gradients through the NIC the cross-node all-to-all uses: on a
    100 Gb/s network the two no longer fit the layer, and the shared-NIC term says by how much."""
    spec = {"name": "h100x256-slow", "gpu": "h100", "nodes": 32, "gpus_per_node": 8, "network_gbps": 12.5}
    path = tmp_path / "slow.yaml"
    path.write_text(yaml.safe_dump(spec))
    args = ["--model", "qwen3-235b-a22b", "--cluster", str(path), "--seq-len", "2048", "--global-batch", "8192",
            "--precision", "fp8", "--framework", "nemo", "--format", "json"]
    out = run_plan_in_process("explain", *args, "--layout",
                              "tp=1,pp=1,ep=32,zero=2,recompute=selective,schedule=combined-1f1b")
    assert json.loads(out.stdout)["breakdown"]["nic_comm_s"] > 0.0
    inside = run_plan_in_process("explain", *args, "--layout",
                                 "tp=1,pp=1,ep=8,zero=2,recompute=selective,schedule=combined-1f1b")
    assert json.loads(inside.stdout)["breakdown"]["nic_comm_s"] == 0.0  # the all-to-all stays in the node

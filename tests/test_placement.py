"""Rank placement: the `order` knob, its rules, what it does to each group's span and price on a tiered cluster,
the Llama 3 405B setup on Meta's cluster, and the launch settings that produce it.

Meta's cluster (clusters/meta-24k-roce.yaml; Llama 3 paper §3.3.1): NVLink 8, racks of 16 under one switch, pods of
3,072 with full bisection, pods joined at 1:7; 50 GB/s per GPU. Per-GPU bytes/s the fabric prices: NVLink 450·0.8 =
360e9, rack and pod 50·0.92 = 46e9, across pods 46e9 / 7.
"""

from __future__ import annotations

import numpy as np
import pytest

from cli.options import build_problem
from cli.plan_options import PlanOptions
from planner.cost import fabric
from planner.cost.fabric import Fabric
from planner.cost.placement import group_spans, placement_dict
from planner.errors import PlanInputError
from planner.inputs.layout import Layout, RankOrder, parse_pairs
from planner.report import document
from planner.report.launchers import render as render_launcher
from planner.search.rules import RULES_BY_NAME
from planner.search.search import price_layout, search
from planner.search.space import domains

META = "clusters/meta-24k-roce.yaml"
POD, CROSS_POD, NV = 46e9, 46e9 / 7, 360e9
A, B = "tp-cp-ep-dp-pp", "tp-cp-ep-pp-dp"


def llama3(framework: str = "generic", fix: tuple[str, ...] = (), cluster: str = META):  # noqa: ANN201
    return build_problem(PlanOptions(model="llama405b", cluster=cluster, seq_len=8192, global_batch=2048,
                                     framework=framework, fix=fix))


def meta_layout(order: str, recompute: str = "full") -> Layout:
    """Llama 3 405B as Meta ran it at 8K (paper Table 4): TP 8, CP 1, PP 16, DP 128."""
    return Layout.from_labels(dict(tp=8, pp=16, dp=128, cp=1, ep=1, vpp=8, mbs=1, zero=1, recompute=recompute,
                                   sp=True, schedule="interleaved", cp_comm="ring", order=order))


def test_order_parses_in_every_spelling_and_refuses_others() -> None:
    for text in ("tp-cp-ep-pp-dp", "tp-pp-dp", "tp-cp-pp-dp", "dp-outer"):
        assert parse_pairs([f"order={text}"], "--fix") == {"order": int(RankOrder.DP_OUTER)}
    assert parse_pairs(["rank_order=tp-dp-pp"], "--fix") == {"order": int(RankOrder.PP_OUTER)}
    with pytest.raises(PlanInputError, match="order must be one of") as err:
        parse_pairs(["order=pp-tp-dp"], "--fix")
    assert "\n" not in str(err.value)
    assert Layout.from_dict({"tp": 1, "pp": 1, "dp": 8, "cp": 1, "ep": 1, "vpp": 1, "mbs": 1, "zero": 1,
                             "recompute": 0, "sp": 0, "schedule": 0}).order == RankOrder.PP_OUTER


def test_group_spans_follow_the_order() -> None:
    p = llama3()
    # default: dp 128 strided by 8 fills a pod (2 per rack); pp strided by 1,024 crosses pods, 3 per pod
    assert group_spans(p, meta_layout(A)) == {"tp": (8, 8, 8, 8), "pp": (1, 1, 3, 16), "dp": (1, 2, 128, 128)}
    # dp outermost: pp strided by 8 (2 per rack) stays in a pod; dp strided by 128 crosses pods, 24 per pod
    assert group_spans(p, meta_layout(B)) == {"tp": (8, 8, 8, 8), "pp": (1, 2, 16, 16), "dp": (1, 1, 24, 128)}
    assert {k: v["within"] for k, v in placement_dict(p, meta_layout(B)).items()} == \
        {"tp": "nvlink", "pp": "pod", "dp": "cluster"}


def test_hand_worked_gradient_all_reduce_and_hand_off_per_order() -> None:
    p = llama3()
    fab = Fabric(p.cluster, {}, 3.35e12)
    S = 4e9
    # dp outermost: 24 per pod, k = (1, 1, 24, 5): all inside the pod on S, then across pods on S/24 at 1:7
    lat_b = fabric.BASE_LATENCY_S + 2 * np.log2(24) * fabric.NETWORK_HOP_S + 2 * np.log2(5) * fabric.NETWORK_HOP_S
    want_b = 2 * 23 / 24 * S / POD + 2 * 4 / 5 * (S / 24) / CROSS_POD + lat_b
    got_b = fab.collective("all_reduce", np.array([S]), np.array([128.0]), np.array([128.0]), "dp")
    assert got_b[0] == pytest.approx(want_b, rel=1e-12)
    # default: 2 per rack, 64 racks in a pod, k = (1, 2, 64, 1): all inside one pod
    lat_a = fabric.BASE_LATENCY_S + 2 * 1 * fabric.NETWORK_HOP_S + 2 * 6 * fabric.NETWORK_HOP_S
    want_a = 2 * 1 / 2 * S / POD + 2 * 63 / 64 * (S / 2) / POD + lat_a
    got_a = fab.collective("all_reduce", np.array([S]), np.array([128.0]), np.array([8.0]), "dp")
    assert got_a[0] == pytest.approx(want_a, rel=1e-12)
    assert got_b[0] > got_a[0]  # the price of putting dp across pods...
    # ...and what it buys: the pipeline's hand-off stays in the pod instead of crossing the 1:7 layer
    act = np.array([16384 * 8192 * 2.0])  # one micro-batch's activations, bf16; /tp with sequence parallelism
    one, pp = np.array([8.0]), np.array([16.0])
    from planner.cost.pipeline import hand_off_time
    a = hand_off_time(fab, act, one, np.array([1]), pp, 16384.0, np.array([1024.0]))
    b = hand_off_time(fab, act, one, np.array([1]), pp, 16384.0, np.array([8.0]))
    assert a[0] == pytest.approx(fabric.BASE_LATENCY_S + act[0] / 8 / CROSS_POD, rel=1e-12)
    assert b[0] == pytest.approx(fabric.BASE_LATENCY_S + act[0] / 8 / POD, rel=1e-12)


def test_meta_layout_prices_faster_with_dp_outermost() -> None:
    p = llama3("megatron-core")
    a, b = price_layout(p, meta_layout(A)), price_layout(p, meta_layout(B))
    assert b["step_time_s"] < 0.95 * a["step_time_s"]
    assert b["pp_comm_s"] < a["pp_comm_s"] / 3 and b["dp_comm_s"] > a["dp_comm_s"]
    # the same layout without recompute is within a few points of Meta's ~400 TFLOP/s (38-43 % BF16 MFU, Table 4)
    none = price_layout(p, meta_layout(B, "none"))
    assert 0.37 < none["mfu"] < 0.44


def test_llama3_top_pick_puts_tp_in_the_node_and_dp_across_pods() -> None:
    result = search(llama3(), top=5)
    top = result.plans[0]
    placed = {k: v["within"] for k, v in placement_dict(result.problem, top.layout).items()}
    assert top.layout.order == RankOrder.DP_OUTER
    assert placed["tp"] == "nvlink" and placed["dp"] == "cluster"
    # Megatron-Core with Meta's TP 8 and CP 1: its top pick also lays dp outermost (--use-tp-pp-dp-mapping)
    pinned = search(llama3("megatron-core", ("tp=8,cp=1",)), top=3).plans[0]
    assert pinned.layout.order == RankOrder.DP_OUTER


def test_two_tier_clusters_do_not_enumerate_orders_but_price_a_pinned_one() -> None:
    plain = build_problem(PlanOptions(model="llama70b", cluster="h100x512"))
    assert domains(plain)["order"] == [int(RankOrder.PP_OUTER)]
    assert domains(llama3())["order"] == [0, 1]
    assert domains(llama3("torchtitan"))["order"] == [0]
    # on two tiers an order still moves groups across the NVLink domain when tp x cp leaves room in it
    lay = Layout.from_labels(dict(tp=2, pp=4, dp=64, cp=1, ep=1, vpp=1, mbs=1, zero=1, recompute="full", sp=True,
                                  schedule="1f1b", cp_comm="ring", order=A))
    a, b = price_layout(plain, lay), price_layout(plain, lay.replace(order=RankOrder.DP_OUTER))
    assert a["p2p_s"] > b["p2p_s"] and a["dp_comm_s"] < b["dp_comm_s"]


@pytest.mark.parametrize(("rule", "framework", "knobs", "allowed"), [
    ("framework_rank_order", "torchtitan", {"order": 1}, False),
    ("framework_rank_order", "megatron-core", {"order": 1}, True),
    ("rank_order_zero", "megatron-core", {"order": 1, "zero": 3}, False),
    ("rank_order_zero", "megatron-core", {"order": 1, "zero": 1}, True),
    ("rank_order_zero", "generic", {"order": 1, "zero": 4}, False),
    ("rank_order_expert_data", "megatron-core", {"order": 1, "tp": 8, "cp": 2, "pp": 16}, False),
    ("rank_order_expert_data", "megatron-core", {"order": 1, "tp": 8, "cp": 1, "pp": 16}, True),
    ("rank_order_expert_data", "generic", {"order": 1, "tp": 8, "cp": 2, "pp": 16}, True),
    ("redundant_rank_order", "generic", {"order": 1, "pp": 1, "dp": 64}, False),
    ("redundant_rank_order", "generic", {"order": 1, "pp": 16, "dp": 128}, True),
])
def test_rank_order_rules(rule: str, framework: str, knobs: dict[str, int], allowed: bool) -> None:
    from tests.conftest import cols
    p = llama3(framework)
    c = cols(**{"tp": 8, "pp": 16, "dp": 128, "zero": 1, "sp": 1, **knobs})
    assert bool(RULES_BY_NAME[rule].check(c, p)[0]) is allowed


def _doc(framework: str, fix: str) -> dict:
    p = llama3(framework, (fix,))
    return document.build(search(p, top=1), {"fix": {}, "top": 1, "allow_tp_across_nodes": False})


def test_launchers_write_the_order_or_refuse() -> None:
    doc = _doc("megatron-core", "tp=8,cp=1,pp=16,order=tp-cp-ep-pp-dp")
    assert doc["plans"][0]["layout"]["rank_order"] == B
    assert doc["plans"][0]["placement"] == {"tp": "nvlink", "pp": "pod", "dp": "cluster"}
    megatron = render_launcher(doc, "megatron", 1)
    assert "--use-tp-pp-dp-mapping" in megatron.splitlines()
    assert "# placement (tp-cp-ep-pp-dp): tp within nvlink, pp within pod, dp within cluster" in megatron
    assert "dist.use_tp_pp_dp_mapping=true" in render_launcher(doc, "nemo", 1).splitlines()
    assert "RANK_ORDER=tp-cp-ep-pp-dp" in render_launcher(doc, "env", 1).splitlines()
    with pytest.raises(PlanInputError, match="torchtitan builds its device mesh in one order"):
        render_launcher(doc, "torchtitan", 1)
    default = _doc("megatron-core", "tp=8,cp=1,pp=16,order=tp-cp-ep-dp-pp")
    assert "--use-tp-pp-dp-mapping" not in render_launcher(default, "megatron", 1)


def test_megatron_reader_reads_the_mapping_flag_back() -> None:
    from planner.inputs.launch_readers import megatron as reader
    script = ("torchrun --nproc_per_node 8 --nnodes 2048 pretrain_gpt.py --tensor-model-parallel-size 8 "
              "--pipeline-model-parallel-size 16 --use-tp-pp-dp-mapping --micro-batch-size 1 "
              "--global-batch-size 2048 --seq-length 8192 --num-layers 126 --hidden-size 16384 "
              "--num-attention-heads 128 --bf16\n")
    cfg = reader.read(script, "launch.sh")
    assert cfg.layout["order"] == int(RankOrder.DP_OUTER)

"""Measured before/after pairs outside the case file: one layout run with and without a feature by the same source,
so a feature's effect is measured without the rest of the cost model's error (issue 25, item 2).

Dropless routing: NVIDIA's MoE model zoo (yanring/Megatron-MoE-ModelZoo@e865051, best_practice/qwen3/readme.md)
ran Qwen3-235B-A22B in BF16 on 256 H100 with DeepEP at four context lengths (PP8 VPP4 TP4 EP8, CP 1-8, global batch
256, the command under its "Long Context" table), each with forced load balancing
(`--moe-router-force-load-balancing`) and dropless with the router's own routing: 295 / 237, 335 / 277, 368 / 320 and
389 / 357 TFLOP/s per GPU at 16k, 32k, 64k and 128k tokens. The ratio of each pair is what dropless routing costs that
layout, which the expert imbalance of dropless learned routing (fitted.yaml moe.expert_imbalance) stands for and no
published case constrains.

EP overlap: Megatron-Bridge's controlled pair of one Qwen3-30B-A3B layout run without and with combined 1F1B
(`BRIDGE_OVERLAP_PAIR`), with the overlap arm's measured memory; tests/test_moe_anchors.py holds the zoo's own
overlap pair and layouts.

CUDA graphs: Megatron-Bridge's pair of one gpt-oss-20b layout run eagerly and with Transformer Engine's per-layer
graphs on the attention, the router and the dispatch preprocessing (`BRIDGE_GRAPH_PAIR`): what the graphs remove is
host time, so the pair separates the host model from the GPU model on the one model family whose Blackwell rows
the planner prices 30-55 % fast.
"""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass, replace

from planner.cost import fitted
from planner.evidence import validate
from planner.evidence.cases import case_problem
from planner.evidence.recipes import apply_knobs, case_knobs
from planner.inputs.layout import Layout, Schedule
from planner.search.search import price_layout

ZOO_SOURCE = "yanring/Megatron-MoE-ModelZoo@e865051:best_practice/qwen3/readme.md#L24-L45"
# Qwen3-235B-A22B in Hugging Face config.json keys, as the validation cases state it.
QWEN3_235B = {"name": "Qwen3_235B_a22B", "num_hidden_layers": 94, "hidden_size": 4096, "intermediate_size": 12288,
              "num_attention_heads": 64, "num_key_value_heads": 4, "vocab_size": 151936, "hidden_act": "silu",
              "num_local_experts": 128, "num_experts_per_tok": 8, "moe_intermediate_size": 1536}


@dataclass(frozen=True)
class BalancePair:
    """One long-context layout of the zoo's table: its sequence, context-parallel size and the measured TFLOP/s per
    GPU with forced balancing and dropless."""

    seq_len: int
    cp: int
    forced_tflops: float
    dropless_tflops: float

    @property
    def measured_ratio(self) -> float:
        """Dropless step time over forced-balance step time (same FLOPs per step)."""
        return self.forced_tflops / self.dropless_tflops


ZOO_BALANCE_PAIRS = (BalancePair(16384, 1, 295.0, 237.0), BalancePair(32768, 2, 335.0, 277.0),
                     BalancePair(65536, 4, 368.0, 320.0), BalancePair(131072, 8, 389.0, 357.0))


def zoo_h100_step(tp: int, pp: int, ep: int, vpp: int, recompute: int, schedule: Schedule, *, seq_len: int = 4096,
                  global_batch: int = 2048, cp: int = 1, mbs: int = 1, zero: int = 1, dispatcher: str = "stack",
                  force_balance: bool = False) -> float:
    """Priced step seconds of one of the zoo's Qwen3-235B BF16 layouts on 256 H100 (sequence parallel, whole
    experts, the fused router its benchmarking config sets: model_configs/benchmarking/Qwen3-235B-A22B.yaml#L104)."""
    gpus = 256
    case = {"id": "zoo", "model": QWEN3_235B, "cluster": f"h100x{gpus}",
            "training": {"seq_len": seq_len, "global_batch": global_batch, "precision": "bf16",
                         "framework": "megatron-core", "micro_batch": mbs},
            "layout": {"tp": tp, "pp": pp, "ep": ep, "vpp": vpp, "cp": cp, "sequence_parallel": True, "zero": zero},
            "measured": {}}
    problem = case_problem(case, "anchors")
    problem = replace(problem, training=problem.training.model_copy(
        update={"moe_router_fusion": True, "moe_dispatcher": dispatcher, "moe_force_balance": force_balance}))
    layout = Layout.from_dict({"tp": tp, "pp": pp, "dp": gpus // (tp * pp * cp), "cp": cp, "ep": ep, "etp": 1,
                               "vpp": vpp, "mbs": mbs, "zero": zero, "recompute": recompute, "sp": 1,
                               "schedule": int(schedule), "cp_comm": 0})
    return price_layout(problem, layout)["step_time_s"]


def zoo_long_context_step(pair: BalancePair, force_balance: bool) -> float:
    """Priced step seconds of the zoo's long-context layout (PP8 VPP4 TP4 EP8, DeepEP, global batch 256) at the
    pair's sequence and CP. The run recomputed the norms and the whole MoE block (`--recompute-modules layernorm
    moe`); the planner's selective recompute re-runs the norms and activations, so the MoE share of the priced step,
    and with it the priced dropless penalty, is the smaller."""
    return zoo_h100_step(4, 8, 8, 4, 1, Schedule.INTERLEAVED, seq_len=pair.seq_len, global_batch=256, cp=pair.cp,
                         dispatcher="flex", force_balance=force_balance)


def dropless_penalty(imbalance: float) -> list[tuple[BalancePair, float]]:
    """Each pair with its priced ratio (dropless over forced-balance step) at the given expert imbalance."""
    with fitted.using(replace(fitted.current(), expert_imbalance=imbalance)):
        return [(p, zoo_long_context_step(p, False) / zoo_long_context_step(p, True)) for p in ZOO_BALANCE_PAIRS]


def imbalance_anchor_error(imbalance: float) -> float:
    """Median |ln(priced ratio / measured ratio)| over the zoo's pairs at the given expert imbalance."""
    return statistics.median(abs(math.log(priced / p.measured_ratio)) for p, priced in dropless_penalty(imbalance))


def anchored_imbalance(grid: tuple[float, ...]) -> tuple[float, float]:
    """(value, its anchor error): the grid value (the published range, fitted.yaml) nearest the zoo's measured
    dropless penalty, the lower of equals."""
    scores = [(imbalance_anchor_error(v), v) for v in grid]
    best = min(scores)
    return best[1], round(best[0], 4)


# Megatron-Bridge's controlled EP-overlap pair (NVIDIA-NeMo/Megatron-Bridge@7ded17dae, PR #5094): Qwen3-30B-A3B in
# BF16 on 16 H100 (two nodes), sequence 4096, TP1 PP1 CP1 EP16, micro-batch 1, global batch 1024, forced balancing,
# HybridEP, Transformer Engine CUDA graphs on the router and the dispatch preprocessing, delayed wgrad off; the only
# change between the arms is the EP overlap (combined 1F1B). Steady-state step 24.7138 s without, 20.9920 s with
# (independent validation run), and rank 0's peak allocated memory with it 62.166 GiB.
BRIDGE_OVERLAP_SOURCE = ("NVIDIA-NeMo/Megatron-Bridge@7ded17dae:"
                         "skills/nemo-mbridge-perf-moe-comm-overlap/SKILL.md#L60-L85")
QWEN3_30B = {"name": "Qwen3_30B_a3B", "num_hidden_layers": 48, "hidden_size": 2048, "intermediate_size": 6144,
             "num_attention_heads": 32, "num_key_value_heads": 4, "vocab_size": 151936, "hidden_act": "silu",
             "num_local_experts": 128, "num_experts_per_tok": 8, "moe_intermediate_size": 768}


@dataclass(frozen=True)
class OverlapPair:
    """A layout measured without and with EP overlap: step seconds of each arm, the overlap arm's peak allocated
    memory (GiB) where measured."""

    without_s: float
    with_s: float
    with_allocated_gib: float | None = None

    @property
    def measured_gain(self) -> float:
        return self.without_s / self.with_s


BRIDGE_OVERLAP_PAIR = OverlapPair(24.7138, 20.9920, 62.166)


def bridge_overlap_case(ep_overlap: bool) -> dict:
    """The pair's run as a validation case, with the knobs its SKILL.md states in its `ran` block."""
    said = {"source": BRIDGE_OVERLAP_SOURCE}
    ran = {"cuda_graphs": {"value": "per-layer", "impl": "transformer_engine",
                           "scope": ["moe_router", "moe_preprocess"], **said},
           "ep_overlap": {"value": ep_overlap, **said}, "moe_dispatcher": {"value": "flex-hybridep", **said},
           "moe_force_balance": {"value": True, **said}, "moe_token_drop": {"value": "dropless", **said},
           "recompute": {"value": "none", **said}}
    return {"id": f"bridge-overlap-{'on' if ep_overlap else 'off'}", "model": QWEN3_30B, "cluster": "h100x16",
            "training": {"seq_len": 4096, "global_batch": 1024, "micro_batch": 1, "precision": "bf16",
                         "framework": "nemo"},
            "layout": {"tp": 1, "pp": 1, "dp": 16, "cp": 1, "ep": 16, "zero": 0}, "measured": {}, "ran": ran}


def bridge_overlap_metrics(ep_overlap: bool) -> dict[str, float]:
    """The priced metrics of one arm of the pair, as validate prices a case (its stated layout and knobs)."""
    return priced_case_metrics(bridge_overlap_case(ep_overlap))


def priced_case_metrics(case: dict, recipe: dict | None = None) -> dict[str, float]:
    """A case as validate prices it (its stated layout, the knobs of its `ran` block and of its recipe entry where
    given): the first plan's metrics."""
    bare = case_problem(case, "anchors")
    knobs = case_knobs(case, recipe, bare)
    problem, applied = apply_knobs(bare, knobs)
    found = validate._search_case(problem, bare, applied, knobs)
    if isinstance(found, str):
        raise ValueError(found)
    return found[0].plans[0].metrics


# Megatron-Bridge's CUDA-graph pair (NVIDIA-NeMo/Megatron-Bridge@2f3ecca48, PR #2960, "Additional Validation (GPT-OSS,
# H100, Mar 2026)"): gpt-oss-20b pre-training on 16 H100 (two nodes), TP2 PP4 EP4 CP1, mock data, global batch 4,
# eager against Transformer Engine graphs on attn, moe_router and moe_preprocess: steady-state iteration 467-520 ms
# against 391-399 ms, 37.9-42.2 against 49.4-50.4 model TFLOP/s per GPU (19.7 TFLOP a GPU per step either way, the
# model FLOPs of 4 x 4,096 tokens). Everything else is the recipe that names that layout as its recommended one
# (recipes/gpt_oss/gpt_oss.py gpt_oss_20b_pretrain_config at the same commit): sequence 4,096, micro-batch 1, sequence
# parallel, the alltoall dispatcher, the unfused router, no recompute, the distributed optimizer, natural routing.
BRIDGE_GRAPH_SOURCE = "NVIDIA-NeMo/Megatron-Bridge@2f3ecca48:docs/training/cuda-graphs.md#L168-L182"
_GPT_OSS_RECIPE = "NVIDIA-NeMo/Megatron-Bridge@2f3ecca48:src/megatron/bridge/recipes/gpt_oss/gpt_oss.py"
# openai/gpt-oss-20b's config.json (tests/data/hf_configs/gpt-oss-20b.json), the keys the planner reads.
GPT_OSS_20B = {"name": "gpt-oss-20b", "model_type": "gpt_oss", "num_hidden_layers": 24, "hidden_size": 2880,
               "intermediate_size": 2880, "num_attention_heads": 64, "num_key_value_heads": 8, "head_dim": 64,
               "vocab_size": 201088, "hidden_act": "silu", "attention_bias": True, "swiglu_limit": 7.0,
               "tie_word_embeddings": False, "num_local_experts": 32, "num_experts_per_tok": 4,
               "sliding_window": 128, "layer_types": ["sliding_attention", "full_attention"] * 12}


@dataclass(frozen=True)
class GraphPair:
    """A layout measured eagerly and with per-layer CUDA graphs: the midpoint and range of each arm's steady-state
    step (seconds)."""

    eager_s: tuple[float, float]
    graphs_s: tuple[float, float]

    @staticmethod
    def mid(span: tuple[float, float]) -> float:
        return (span[0] + span[1]) / 2

    @property
    def measured_gain(self) -> float:
        return self.mid(self.eager_s) / self.mid(self.graphs_s)

    @property
    def gain_range(self) -> tuple[float, float]:
        """The smallest and largest gain the two ranges allow."""
        return self.eager_s[0] / self.graphs_s[1], self.eager_s[1] / self.graphs_s[0]


BRIDGE_GRAPH_PAIR = GraphPair((0.467, 0.520), (0.391, 0.399))


def bridge_graph_case(graphs: bool) -> dict:
    """One arm of the graph pair as a validation case, with what the recipe and the doc say it ran."""
    said = {"source": BRIDGE_GRAPH_SOURCE}
    recipe = {"source": f"{_GPT_OSS_RECIPE}#L33-L110"}
    ran = {"cuda_graphs": ({"value": "per-layer", "impl": "transformer_engine",
                            "scope": ["attn", "moe_router", "moe_preprocess"], **said} if graphs
                           else {"value": "none", **said}),
           "ep_overlap": {"value": False, **recipe}, "moe_dispatcher": {"value": "alltoall", **recipe},
           "moe_router_fusion": {"value": False, **recipe}, "moe_force_balance": {"value": False, **recipe},
           "moe_token_drop": {"value": "dropless", **recipe}, "recompute": {"value": "none", **recipe},
           "sequence_parallel": {"value": True, **recipe}, "tp_comm_overlap": {"value": False, **recipe}}
    return {"id": f"bridge-graphs-{'on' if graphs else 'off'}", "model": GPT_OSS_20B, "cluster": "h100x16",
            "training": {"seq_len": 4096, "global_batch": 4, "micro_batch": 1, "precision": "bf16",
                         "framework": "nemo"},
            "layout": {"tp": 2, "pp": 4, "dp": 2, "cp": 1, "ep": 4, "vpp": 1, "zero": 1}, "measured": {}, "ran": ran}


def bridge_graph_metrics(graphs: bool) -> dict[str, float]:
    """The priced metrics of one arm of the graph pair."""
    return priced_case_metrics(bridge_graph_case(graphs))

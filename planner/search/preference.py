"""Ranking: by price (ties within 0.05 % to the simpler layout), and under uncertainty, where among layouts whose
prices the model cannot tell apart the one practitioners launch goes first.

Layouts priced within the tie width of the fastest (planner.cost.bands.tie_width: the error of a predicted ratio of
two layouts of one run, measured on `plan validate`'s ranking groups) are a tie. A tie is ordered by the criteria
below, first to last, each a yes/no (or a count) where less is preferred, and only then by price; the rest of the
table follows by price. `--rank-by time` ranks by price alone. Each criterion says what practitioners do and where
they say so (docs/cost-model.md, "Ranking under uncertainty").
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np

from planner.cost import bands
from planner.cost.memory import distinct_pairs
from planner.inputs.layout import Layout, Recompute, Schedule, chunk_layers
from planner.inputs.problem import Problem

RANK_BY = ("preference", "time")
# Context parallelism splits a sequence over ranks; the published runs that use it keep at least this many tokens
# per rank: Llama 3 405B trains 8K sequences with CP 1 and 131K ones with CP 16 (8,192 per rank; "The Llama 3 Herd of
# Models", arXiv 2407.21783, Table 4); NVIDIA's Llama 3.1 recipes run 8K sequences at CP 2 (4,096 per rank;
# NVIDIA/dgxc-benchmarking llama3.1 tables, validation cases DGXC-013/135/137/148); every 4K-sequence run there
# (Nemotron-4, Qwen3, DeepSeek-V3, GPT-3) runs CP 1.
CP_MIN_TOKENS_PER_RANK = 4096
# The schedules each stack's own recipes run. Megatron-Core / NeMo: 1F1B and interleaved 1F1B
# (pipeline_parallel/schedules.py get_forward_backward_func), and for MoE the EP-overlap combined 1F1B that
# Megatron-Bridge's DeepSeek-V3 and Qwen3 performance recipes switch on (overlap_moe_expert_parallel_comm; the 12
# ep_overlap rows of validation/case_recipes.yaml). torchtitan: 1F1B and Interleaved1F1B (its
# parallelism.pipeline_parallel_schedule default is 1F1B; ZBV and DualPipeV are newer options). Everywhere else
# 1F1B and interleaved, the schedules of the large dense runs published (GPT-3 175B, Llama 3, Nemotron-4).
_COMMON = (Schedule.ONE_F_ONE_B, Schedule.INTERLEAVED)
STANDARD_SCHEDULES: dict[str, tuple[Schedule, ...]] = {
    "megatron-core": (*_COMMON, Schedule.COMBINED_1F1B), "nemo": (*_COMMON, Schedule.COMBINED_1F1B)}


@dataclass(frozen=True)
class Criterion:
    name: str
    prefers: str  # what the preferred layout does, as the table's "why #1" line says it
    source: str


# The order is the order of the tie-break.
CRITERIA = (
    Criterion("offload", "no activation offloading over a PCIe host link",
              "NVIDIA's H100 setups rely on recomputation rather than offloading (arXiv 2603.07685 §9.2.2), which "
              "costs 1.6-2 % even over GB200's NVLink-C2C; the model does not charge the copies' contention with "
              "the network traffic on the same PCIe link. On Grace hosts NVIDIA's own recipes offload "
              "(Megatron-Bridge Llama 3 70B on GB200/GB300), so there it is not held against a layout"),
    Criterion("cp", f"no context parallelism below {CP_MIN_TOKENS_PER_RANK:,} tokens per rank",
              "Llama 3 (arXiv 2407.21783 Table 4: CP 1 at 8K, CP 16 at 131K); NVIDIA's Llama 3.1 recipes (CP 2 at "
              "8K); no published 4K-sequence run uses CP"),
    Criterion("schedule", "the framework's standard pipeline schedule", "STANDARD_SCHEDULES above"),
    Criterion("memory", "memory headroom once the memory model's typical miss is added",
              "a run that runs out of memory costs more than a few per cent of throughput: the peak, raised by the "
              "median miss of the memory model on published runs of the stack (planner.cost.bands.memory_band), "
              "should still leave --memory-headroom free"),
    Criterion("layout", "a stage split the layer count allows without a custom pipeline layout",
              "Megatron-Bridge's recipes state a layout only where no pipeline shape they run divides the layers "
              "(61-layer DeepSeek-V3 and Kimi K2: recipes/deepseek, recipes/kimi); its Llama 3 and Qwen3 recipes "
              "split evenly or count the embedding and the loss as layers (account_for_embedding/loss_in_pipeline_"
              "split), one switch instead of a per-chunk list to keep in step with the model"),
    Criterion("wide", "fewer features that no published run prices",
              "a feature without published cases carries the widest band (planner.cost.bands.wide_features)"),
)


def standard_schedules(framework: str) -> tuple[Schedule, ...]:
    return STANDARD_SCHEDULES.get(framework, _COMMON)


def criteria_columns(problem: Problem, cols: Mapping[str, np.ndarray], memory_gib: np.ndarray,
                     schedules: tuple[Schedule, ...] | None = None) -> dict[str, np.ndarray]:
    """Per row and criterion (CRITERIA), 0 where the row does what practitioners prefer, more where it does not.
    `schedules`: the standard schedules where they are not the stack's (a published run's own codebase)."""
    tr, gpu = problem.training, problem.cluster.gpu
    rc = cols["recompute"]
    offload = (rc == Recompute.OFFLOAD) | (rc == Recompute.OFFLOAD_MODULES)
    cp = cols["cp"]
    typical = float(np.exp(bands.memory_band(tr.framework).median))
    room = gpu.memory_gib * (1.0 - problem.memory_headroom)
    return {
        "offload": (offload & bool(gpu.nic_shares_host_link)).astype(np.int64),
        "cp": ((cp > 1) & (tr.seq_len < CP_MIN_TOKENS_PER_RANK * cp)).astype(np.int64),
        "schedule": (~np.isin(cols["schedule"], np.array(schedules or standard_schedules(tr.framework)))
                     ).astype(np.int64),
        "memory": (memory_gib * typical > room).astype(np.int64),
        "layout": _needs_layout(problem, cols["pp"], cols["vpp"]) if "vpp" in cols else np.zeros(len(cp), np.int64),
        "wide": unpriced_features(problem, cols),
    }


# How far ahead of the fastest evidenced layout a layout priced through a feature no published run prices must be
# before it sets the tie: twice the tie width. A judgement, not a fit: the tie is the measured error of a ratio of
# two evidenced prices, and a feature without published cases is taken to add at most as much error again.
UNPRICED_LEAD_TIES = 2.0


def unpriced_features(problem: Problem, cols: Mapping[str, np.ndarray]) -> np.ndarray:
    """Per row, how many features it uses that no published run prices (the widest band,
    planner.cost.bands.wide_features): the `wide` criterion."""
    tr = problem.training
    feats = bands.feature_columns(cols, bands.shards_experts_as_feature(tr.framework, problem.model.is_moe))
    wide = bands.wide_features(tr.framework)
    return sum((feats[f].astype(np.int64) for f in bands.LAYOUT_FEATURES if f in wide),
               start=np.zeros(len(next(iter(cols.values()))), dtype=np.int64))


def tie_reference(problem: Problem, cols: Mapping[str, np.ndarray], tput: np.ndarray, rows: np.ndarray,
                  tie: float) -> float:
    """The throughput a tie is measured from: the fastest of `rows`, unless it is priced faster than the fastest
    layout whose price rests on published evidence (no feature without published cases) only through such a
    feature and by less than UNPRICED_LEAD_TIES ties; then that evidenced layout's. A lead inside the error of a
    feature nobody measured cannot set the bar the evidenced layouts must meet; the faster layout still ties with
    them (it is priced within the tie of that reference, faster)."""
    if len(rows) == 0:
        return 0.0
    fastest = float(tput[rows].max())
    sub = {k: v[rows] for k, v in cols.items()}
    evidenced = rows[unpriced_features(problem, sub) == 0]
    if not len(evidenced):
        return fastest
    best = float(tput[evidenced].max())
    return best if np.log(fastest / best) <= UNPRICED_LEAD_TIES * tie else fastest


def _needs_layout(problem: Problem, pp: np.ndarray, vpp: np.ndarray) -> np.ndarray:
    """1 where the plan's split is a custom pipeline layout (planner.inputs.layout.chunk_layers) the training does
    not state itself."""
    layers, stated = problem.model.num_hidden_layers, problem.training.pipeline_layout
    pairs, index = distinct_pairs(pp, vpp)
    need = np.array([chunk_layers(layers, p, v) is not None and not (stated and len(stated) == p * v)
                     for p, v in pairs], dtype=np.int64)
    return need[index].reshape(np.shape(pp)) if need.size else np.zeros(np.shape(pp), dtype=np.int64)


def tie_rows(tput: np.ndarray, rows: np.ndarray, width: float, reference: float | None = None) -> np.ndarray:
    """The rows of `rows` priced within `width` (a ln ratio) of `reference` (default: the fastest of them), or
    faster."""
    t = tput[rows]
    if not len(rows):
        return rows
    return rows[np.log((t.max() if reference is None else reference) / t) <= width]


def preference_order(problem: Problem, cols: Mapping[str, np.ndarray], tput: np.ndarray,
                     memory_gib: np.ndarray, tail: list[np.ndarray]) -> np.ndarray:
    """Positions 0..n-1 of the rows `cols` describes, ordered by CRITERIA, then by the keys in `tail` (lexsort keys,
    last most significant: the price order), all of them a tie."""
    crit = criteria_columns(problem, cols, memory_gib)
    return np.lexsort(tail + [crit[c.name] for c in reversed(CRITERIA)])


def deciding_criterion(problem: Problem, first: Layout, first_memory: float,
                       other: Layout, other_memory: float) -> Criterion | None:
    """The first criterion on which `first` is preferred to `other` (None when only the price decided)."""
    a, b = first.as_dict(), other.as_dict()
    cols = {k: np.array([a[k], b[k]]) for k in a}
    crit = criteria_columns(problem, cols, np.array([first_memory, other_memory]))
    for c in CRITERIA:
        a, b = crit[c.name]
        if a != b:
            return c if a < b else None
    return None


# Ties (within 0.05%) prefer the simpler layout: less model parallelism, less recompute, lower ZeRO stage.
_SIMPLICITY = ("cp", "pp", "vpp", "tp", "ep", "recompute", "zero", "sp", "schedule", "mbs")


def price_keys(cols: dict[str, np.ndarray], tput: np.ndarray) -> list[np.ndarray]:
    # Quantise throughput so that numerically equal plans tie, then break ties by simplicity, deterministically.
    key_tput = -np.round(tput / np.maximum(tput.max(), 1e-30) * 2000.0)
    return [cols[k] for k in reversed(_SIMPLICITY)] + [key_tput]


def rank_order(cols: dict[str, np.ndarray], tput: np.ndarray) -> np.ndarray:
    return np.lexsort(price_keys(cols, tput))


def top_rows(rows: np.ndarray, cols: dict[str, np.ndarray], tput: np.ndarray, top: int) -> np.ndarray:
    """The best `top` of `rows` by throughput (ties by simplicity); only rows near the top can tie, so a large
    set ranks those, not a million."""
    if len(rows) > 20 * top:
        t = tput[rows]
        kth = np.partition(t, len(rows) - top)[len(rows) - top]
        rows = rows[t >= kth - 2 * t.max() / 2000.0]  # two quantisation buckets of margin
    if len(rows) == 0:
        return rows
    return rows[rank_order({k: v[rows] for k, v in cols.items()}, tput[rows])[:top]]


def preferred_rows(problem: Problem, rows: np.ndarray, cols: dict[str, np.ndarray], met: dict[str, np.ndarray],
                   top: int, tie: float) -> np.ndarray:
    """The best `top` of `rows`: those priced within `tie` of the fastest evidenced one (tie_reference) in CRITERIA
    order, then the rest by price."""
    if len(rows) == 0:
        return rows
    tput = met["tokens_per_s_per_gpu"]
    tied = tie_rows(tput, rows, tie, tie_reference(problem, cols, tput, rows, tie))
    sub = {k: v[tied] for k, v in cols.items()}
    first = tied[preference_order(problem, sub, tput[tied], met["memory_peak_gib"][tied],
                                  price_keys(sub, tput[tied]))][:top]
    rest = np.setdiff1d(rows, tied, assume_unique=True)
    return np.concatenate([first, top_rows(rest, cols, tput, top - len(first))]) if len(first) < top else first

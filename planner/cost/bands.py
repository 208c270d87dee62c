"""Uncertainty bands: where measured runs land around the cost model's price, by regime, read from bands.yaml.

A price is a point; `plan validate` says how far published runs fall from such points, and the misses depend on the
regime: the stack (its profile, pooled with the profile it borrows its fitted kernel efficiency from), dense or MoE,
the GPU generation, and features few runs exercise (activation offloading, context parallelism and its all-to-all
form, fp8 / fp4, schedules other than 1F1B and interleaved). bench/fit_bands.py writes bands.yaml from validate's
per-case residuals ln(measured / predicted tokens/s per GPU): per regime the split-conformal order statistics of the
residuals at the file's coverage, so a band says "this share of published runs of this regime landed in here", with
no assumption on the residuals' shape (lower and upper bounds are read separately, so a one-sided miss stays
one-sided).

A regime with fewer cases than the coverage needs (`min_cases`, 9 at 80 %) has no band of its own and backs off to
a coarser one (docs/accuracy.md, "Uncertainty bands"); a feature no published run states gets the widest band of the
table. The band of a plan is the envelope of its base regime's band and each of its features' bands: it is at least
as uncertain as its least known part.

The tie width (how close two layouts' prices must be for the model not to tell them apart) is not a band: two
layouts of one problem share most of their error (kernels, clocks, the stack), so what matters is the error of their
ratio, measured by validate's ranking groups (two measured layouts of one run), bands.yaml `tie`.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any

import numpy as np

from planner.cost.profiles import profile_for, sink_attention_all_tiles
from planner.inputs.catalog import read_packaged_yaml
from planner.inputs.layout import CpComm, Recompute, Schedule, Zero

BANDS_FILE = Path(__file__).with_name("bands.yaml")
ANY = "*"

# GPU generations (catalog keys of clusters/gpus.yaml): one kernel library and one interconnect era each. A GPU not
# listed (a cluster YAML's inline GPU) has an unknown generation and backs off to the bands of every generation.
GENERATIONS = {"a100": "ampere", "a100-40g": "ampere", "h100": "hopper", "h100-hbm2e-500w": "hopper", "h800": "hopper",
               "h200": "hopper", "b200": "blackwell", "b300": "blackwell", "gb200": "blackwell", "gb300": "blackwell",
               "mi300x": "cdna3"}
# Schedules every pipelining stack runs; any other is a feature with its own band.
BASE_SCHEDULES = (Schedule.ONE_F_ONE_B, Schedule.INTERLEAVED)
PRECISION_FEATURES = ("fp8", "fp4")
# A MoE model whose data-parallel ranks shard gradients or weights (ZeRO 2, 3 or HSDP: Megatron-FSDP) as well as
# optimizer states, on a stack whose recipes otherwise shard only optimizer states (not FSDP-native,
# FrameworkProfile.fsdp_native): none of Megatron-Bridge's MoE performance recipes does (their tables' FSDP column
# is 0 on every MoE row, docs/performance-summary-archive.md @4ab94dfad; only dense Llama 3 70B runs FSDP there),
# and the one such Megatron-Core run measured (Megatron-MoE-ModelZoo's Qwen3-235B FSDP row) is priced 50 % off
# (tests/test_moe_anchors.py), so the model does not know its error there.
SHARDED_EXPERTS = "sharded-experts"
LAYOUT_FEATURES = ("offload", "offload-modules", "cp", "cp-a2a", SHARDED_EXPERTS,
                   *(s.label for s in Schedule if s not in BASE_SCHEDULES))
FEATURES = (*LAYOUT_FEATURES, *PRECISION_FEATURES)


def generation(gpu_key: str) -> str:
    return GENERATIONS.get(gpu_key, "unknown")


def model_kind(is_moe: bool) -> str:
    return "moe" if is_moe else "dense"


def shards_experts_as_feature(stack: str, is_moe: bool) -> bool:
    """Whether ZeRO 2+ is the SHARDED_EXPERTS feature for a model (MoE where `is_moe`) planned under `stack`."""
    return is_moe and not profile_for(stack).fsdp_native


def feature_columns(cols: Mapping[str, np.ndarray], sharded_experts: bool = False) -> dict[str, np.ndarray]:
    """Per row, whether the layout uses each of LAYOUT_FEATURES (SHARDED_EXPERTS only where `sharded_experts`:
    `shards_experts_as_feature`)."""
    rc, sched = cols["recompute"], cols["schedule"]
    cp = cols["cp"] > 1
    out = {"offload": rc == Recompute.OFFLOAD, "offload-modules": rc == Recompute.OFFLOAD_MODULES, "cp": cp,
           "cp-a2a": cp & (cols.get("cp_comm", np.zeros_like(rc)) != CpComm.RING),
           SHARDED_EXPERTS: (np.asarray(cols["zero"]) >= Zero.GRADIENTS) if sharded_experts
           else np.zeros(np.shape(rc), dtype=bool)}
    for s in Schedule:
        if s not in BASE_SCHEDULES:
            out[s.label] = sched == s
    return out


def layout_features(layout: Mapping[str, int], precision: str, sharded_experts: bool = False) -> tuple[str, ...]:
    """The features (FEATURES, in that order) one layout trained at `precision` uses (`sharded_experts`: see
    feature_columns)."""
    cols = {k: np.array([v]) for k, v in layout.items()}
    used = {name for name, on in feature_columns(cols, sharded_experts).items() if bool(on[0])}
    if precision in PRECISION_FEATURES:
        used.add(precision)
    return tuple(f for f in FEATURES if f in used)


@dataclass(frozen=True)
class Band:
    """ln(measured / predicted) bounds that the file's coverage of published runs of `regime` landed in."""

    lo: float
    hi: float
    regime: str  # its cases, e.g. "megatron-core dense hopper pooled with nemo: 28 cases; cp: 12 cases"
    cases: int  # cases of the base regime
    notes: tuple[str, ...] = ()  # back-offs to a coarser regime
    median: float = 0.0  # the base regime's median residual: the model's typical miss there

    def ratio(self) -> tuple[float, float]:
        """(low, high) multipliers of a predicted throughput (or memory)."""
        return math.exp(self.lo), math.exp(self.hi)

    def inverse(self) -> tuple[float, float]:
        """(low, high) multipliers of a predicted time (the inverse of a throughput)."""
        return math.exp(-self.hi), math.exp(-self.lo)


@dataclass(frozen=True)
class _Entry:
    n: int
    band: tuple[float, float] | None
    pool: tuple[str, ...]
    median: float = 0.0


@dataclass(frozen=True)
class BandTable:
    """bands.yaml, parsed: entries keyed (stack, kind, generation, feature) with ANY as a wildcard."""

    coverage: float
    min_cases: int
    tie_width: float
    throughput: Mapping[tuple[str, str, str, str], _Entry]
    memory: Mapping[str, _Entry]
    widest: tuple[float, float]


def _entry(raw: Mapping[str, Any]) -> _Entry:
    band = raw.get("band")
    return _Entry(int(raw["n"]), (float(band[0]), float(band[1])) if band else None, tuple(raw.get("pool") or ()),
                  float(raw.get("median") or 0.0))


def from_document(doc: Mapping[str, Any]) -> BandTable:
    thr = {(e["stack"], e["kind"], e["generation"], e.get("feature") or ""): _entry(e) for e in doc["throughput"]}
    mem = {e["stack"]: _entry(e) for e in doc["memory"]}
    lo, hi = doc["widest"]
    return BandTable(float(doc["coverage"]), int(doc["min_cases"]), float(doc["tie"]["width"]), thr, mem,
                     (float(lo), float(hi)))


@cache
def table() -> BandTable:
    """The shipped bands.yaml, read on first use."""
    return from_document(read_packaged_yaml(BANDS_FILE))


def tie_width() -> float:
    """Largest ln(fastest / other) throughput gap the model cannot tell from its own error (bands.yaml `tie`)."""
    return table().tie_width


def _pool_text(stack: str, entry: _Entry) -> str:
    others = [s for s in entry.pool if s != stack]
    return f" pooled with {', '.join(others)}" if others else ""


def _base(t: BandTable, stack: str, kind: str, gen: str) -> tuple[tuple[float, float], str, int, tuple[str, ...]]:
    chain = ((stack, kind, gen), (stack, kind, ANY), (ANY, kind, gen), (ANY, kind, ANY), (ANY, ANY, ANY))
    first = t.throughput.get((stack, kind, gen, ""))
    for key in chain:
        entry = t.throughput.get((*key, ""))
        if entry is not None and entry.band is not None:
            words = [w for w in key if w != ANY]
            name = " ".join(words) if words else "every published run"
            if key[0] == stack:
                name += _pool_text(stack, entry)
            notes: tuple[str, ...] = ()
            if key != chain[0]:
                have = 0 if first is None else first.n
                notes = (f"{stack} {kind} {gen}: {have} published case{'s' if have != 1 else ''}, fewer than the "
                         f"{t.min_cases} a band needs; backed off to {name}",)
            return entry.band, name, entry.n, notes
    raise ValueError(f"{BANDS_FILE.name}: no band for every published run")


def _feature(t: BandTable, stack: str, feature: str) -> tuple[tuple[float, float], str, bool]:
    """A feature's band, its label, and whether it is the widest band (too few published cases)."""
    for key in ((stack, ANY, ANY, feature), (ANY, ANY, ANY, feature)):
        entry = t.throughput.get(key)
        if entry is not None and entry.band is not None:
            return entry.band, f"{feature}: {entry.n} cases", False
    n = t.throughput.get((ANY, ANY, ANY, feature), _Entry(0, None, ())).n
    return t.widest, f"{feature}: {n} case{'s' if n != 1 else ''}, so the widest band", True


def band_for(stack: str, is_moe: bool, gpu_key: str, features: tuple[str, ...]) -> Band:
    """The throughput band of a plan of this regime (the envelope of its base regime's and its features' bands)."""
    t = table()
    kind, gen = model_kind(is_moe), generation(gpu_key)
    (lo, hi), name, n, notes = _base(t, stack, kind, gen)
    labels = [f"{name}: {n} cases"]
    for f in features:
        (flo, fhi), label, _ = _feature(t, stack, f)
        lo, hi = min(lo, flo), max(hi, fhi)
        labels.append(label)
    return Band(lo, hi, "; ".join(labels), n, notes)


# Said beside the band of a plan whose price rests on an assumption inferred from measured runs, not read from code.
SINK_TILES_NOTE = ("attention sinks priced as computing every score tile (inferred from Megatron-Bridge's measured "
                   "gpt-oss runs, docs/accuracy.md; --fp8-attention on runs them on cuDNN's unified engine)")


def throughput_band(problem: Any, layout: Mapping[str, int]) -> Band:
    """The band of one plan of `problem` (a planner.inputs.problem.Problem), with a note where its price rests on the
    sink-attention assumption (planner.cost.profiles.sink_attention_all_tiles)."""
    tr = problem.training
    is_moe = problem.model.is_moe
    feats = layout_features(layout, tr.precision, shards_experts_as_feature(tr.framework, is_moe))
    band = band_for(tr.framework, is_moe, problem.cluster.gpu.key, feats)
    if sink_attention_all_tiles(tr, problem.model):
        band = Band(band.lo, band.hi, band.regime, band.cases, (*band.notes, SINK_TILES_NOTE), band.median)
    return band


def memory_band(stack: str) -> Band:
    """The band of a predicted peak memory of `stack`: its own (pooled) cases, else every published memory figure."""
    t = table()
    for key in (stack, ANY):
        entry = t.memory.get(key)
        if entry is not None and entry.band is not None:
            name = (stack + _pool_text(stack, entry)) if key == stack else "every published memory figure"
            notes = () if key == stack else (f"{stack}: fewer than {t.min_cases} published memory figures; "
                                              f"backed off to {name}",)
            return Band(entry.band[0], entry.band[1], name, entry.n, notes, entry.median)
    raise ValueError(f"{BANDS_FILE.name}: no memory band for every published run")


def wide_features(stack: str) -> frozenset[str]:
    """Features priced with the widest band under `stack` (too few published cases to know their error)."""
    t = table()
    return frozenset(f for f in FEATURES if _feature(t, stack, f)[2])

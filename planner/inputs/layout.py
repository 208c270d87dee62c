"""The typed layout: one enum per categorical knob, one table of every knob's allowed values, and the parsing of
`--fix KEY=VALUE` / `--layout "tp=8,pp=4"` into encoded values (one set of keys for both).

Knob columns travel through the search as integer numpy arrays (one entry per candidate); the enums below are
IntEnums, so `cols["recompute"] == Recompute.FULL` compares a whole column and a plan document stores the label.
Rules, cost terms, documents, launchers and `plan check` all read these definitions; nothing else defines a code.

size: over 400 lines because every knob's definition (enum, table row, typed field, parsing) lives here, in one place.
"""

from __future__ import annotations

import dataclasses
import difflib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from enum import IntEnum
from typing import TYPE_CHECKING

from planner.errors import PlanInputError

if TYPE_CHECKING:  # numpy is imported on use: `plan --help` needs none
    import numpy as np


class _Labelled(IntEnum):
    """An IntEnum whose members carry the label users type and documents store."""

    label: str

    def __new__(cls, value: int, label: str) -> _Labelled:
        member = int.__new__(cls, value)
        member._value_ = value
        member.label = label
        return member

    @classmethod
    def labels(cls) -> tuple[str, ...]:
        return tuple(m.label for m in cls)


class Recompute(_Labelled):
    """What the backward pass gets its activations from: kept (none), partly re-run (selective: attention core /
    memory-bound modules), re-run whole (full: each layer's forward again; Korthikanti et al. 2022), or kept in host
    memory (offload: Megatron-Core's layer-level CPU activation offloading, `--cpu-offloading-num-layers`, which runs
    without recomputation; the planner offloads the fewest layers that make the layout fit,
    planner.cost.activation_offload), or every layer kept but a fixed set of modules' saved tensors in host memory
    (offload-modules: Megatron-Core's fine-grained activation offloading, `--fine-grained-activation-offloading
    --offload-modules`, which also runs with pipelining; planner.cost.module_offload)."""

    NONE = 0, "none"
    SELECTIVE = 1, "selective"
    FULL = 2, "full"
    OFFLOAD = 3, "offload"
    OFFLOAD_MODULES = 4, "offload-modules"


class Schedule(_Labelled):
    """Pipeline schedules: 1F1B and interleaved 1F1B (Narayanan et al. 2021), zero-bubble ZB-H1/ZB-H2/ZB-V
    (Qi et al. 2024), Seq1F1B (Sun et al. 2024); for MoE, schedules that run one micro-batch's forward together with
    another's backward so that each hides the other's expert all-to-all: Megatron-Core's combined 1F1B
    (`--overlap-moe-expert-parallel-comm --delay-wgrad-compute`, interleaved when vpp > 1) and DeepSeek's DualPipe /
    DualPipe-V (DeepSeek-V3 report §3.2.1; deepseek-ai/DualPipe)."""

    ONE_F_ONE_B = 0, "1f1b"
    INTERLEAVED = 1, "interleaved"
    ZB_H1 = 2, "zb-h1"
    ZB_H2 = 3, "zb-h2"
    ZB_V = 4, "zb-v"
    SEQ1F1B = 5, "seq1f1b"
    COMBINED_1F1B = 6, "combined-1f1b"
    DUALPIPE = 7, "dualpipe"
    DUALPIPE_V = 8, "dualpipe-v"


class CpComm(_Labelled):
    """Context-parallel exchange, as Megatron's --cp-comm-type names it: p2p ring attention, a2a (DeepSpeed-Ulysses),
    a2a+p2p (Ulysses inside the NVLink domain, ring across domains)."""

    RING = 0, "ring"
    A2A = 1, "a2a"
    HYBRID = 2, "a2a+p2p"


class Zero(_Labelled):
    """What data-parallel ranks shard (Rajbhandari et al. 2020): stage k shards the first k of optimizer states,
    gradients, parameters. HSDP is ZeRO-3 inside the NVLink domain, replicated across domains."""

    NONE = 0, "0"
    OPTIMIZER = 1, "1"
    GRADIENTS = 2, "2"
    PARAMETERS = 3, "3"
    HSDP = 4, "hsdp"


class ExpertTp(_Labelled):
    """Tensor parallelism inside the experts: the attention's tp (Megatron-Core's default when
    --expert-tensor-parallel-size is unset) or 1, the experts whole on each GPU and the expert grid laid out
    independently of the attention grid (MoE parallel folding, Liu et al. 2025, arXiv 2504.14960; the setting the
    Megatron-Bridge and Megatron-MoE-ModelZoo recipes use for fine-grained experts)."""

    TP = 0, "tp"
    ONE = 1, "1"


class RankOrder(_Labelled):
    """The order in which the parallel dimensions take consecutive ranks, innermost first: consecutive ranks fill an
    NVLink domain, then a rack, a pod, a building (planner.inputs.network), so the order decides which dimension's
    groups cross which tier. tp-cp-ep-dp-pp is Megatron-Core's default (parallel_state.initialize_model_parallel) and
    torchtitan's fixed device mesh (pp, dp_replicate, dp_shard, cp, tp outermost first): pipelines cross the outer
    tiers. tp-cp-ep-pp-dp (Megatron --use-tp-pp-dp-mapping; Llama 3's [TP, CP, PP, DP], arXiv 2407.21783 §3.3.2) puts
    data parallelism outermost, where its reduction overlaps the backward pass and tolerates the slow tiers.
    Megatron-Core's docstring: "Now we support tp-dp-pp and tp-pp-dp orders"; no framework launches others."""

    PP_OUTER = 0, "tp-cp-ep-dp-pp"
    DP_OUTER = 1, "tp-cp-ep-pp-dp"


def default_expert_tp(dp: int, cp: int, ep: int) -> int:
    """The encoded `etp` of a layout that does not state it: Megatron's default, tp, where the expert-parallel ranks
    fit the data ranks (ep divides dp x cp); otherwise only folding (etp 1) can launch it."""
    return int(ExpertTp.TP if (dp * cp) % max(ep, 1) == 0 else ExpertTp.ONE)


class Knob:  # (a plain class, not a dataclass: why, beside Layout's methods)
    """One layout knob: its key, what it means, and its enum (None: a positive size, or sp's flag)."""

    __slots__ = ("name", "meaning", "choices")

    def __init__(self, name: str, meaning: str, choices: type[_Labelled] | None = None) -> None:
        self.name, self.meaning, self.choices = name, meaning, choices

    def allowed(self) -> tuple[int, ...] | None:
        """Every allowed encoded value of a categorical knob; None for sizes."""
        return tuple(int(m) for m in self.choices) if self.choices else None


# The one table of knobs, in the order of documents and `--fix` help.
KNOB_TABLE: tuple[Knob, ...] = (
    Knob("tp", "tensor-parallel size"),
    Knob("pp", "pipeline-parallel size"),
    Knob("dp", "data-parallel size"),
    Knob("cp", "context-parallel size"),
    Knob("ep", "expert-parallel size"),
    Knob("etp", "expert tensor-parallel size: tp or 1", ExpertTp),
    Knob("vpp", "model chunks per pipeline rank (virtual pipeline stages)"),
    Knob("mbs", "micro-batch size, sequences"),
    Knob("zero", "ZeRO / FSDP sharding stage", Zero),
    Knob("recompute", "activation recomputation, or offload to host memory", Recompute),
    Knob("sp", "sequence parallelism (0/1)"),
    Knob("schedule", "pipeline schedule", Schedule),
    Knob("cp_comm", "context-parallel exchange", CpComm),
    Knob("order", "rank order: the dimensions from the innermost network tier outwards", RankOrder),
)
KNOBS: tuple[str, ...] = tuple(k.name for k in KNOB_TABLE)
KNOB_BY_NAME = {k.name: k for k in KNOB_TABLE}
# Label tuples indexed by code, for code that formats or parses labels.
RECOMPUTE = Recompute.labels()
SCHEDULES = Schedule.labels()
CP_COMM = CpComm.labels()
EXPERT_TP = ExpertTp.labels()
RANK_ORDERS = RankOrder.labels()
HSDP = Zero.HSDP
# Schedules that overlap one micro-batch's forward with another's backward (the expert all-to-all hides behind it).
EP_OVERLAP_SCHEDULES = (Schedule.COMBINED_1F1B, Schedule.DUALPIPE, Schedule.DUALPIPE_V)
DUALPIPES = (Schedule.DUALPIPE, Schedule.DUALPIPE_V)
SEQ1F1B_SEGMENTS = 4  # Seq1F1B splits each sequence into this many segments (Sun et al. 2024 evaluate 2-8)

_ALIASES = {"micro_batch": "mbs", "micro-batch": "mbs", "sequence_parallel": "sp", "virtual_pipeline": "vpp",
            "expert_tp": "etp", "expert_tensor_parallel": "etp", "rank_order": "order", "placement": "order",
            "recomp": "recompute", "fsdp": "zero"}
# Other spellings of the two orders: Megatron-Core's docstring names them tp-dp-pp and tp-pp-dp, the Llama 3 paper
# [TP, CP, PP, DP]; without context or expert parallelism the shorter strings mean the same layout.
_ORDER_SPELLINGS = {"tp-dp-pp": "tp-cp-ep-dp-pp", "tp-cp-dp-pp": "tp-cp-ep-dp-pp", "default": "tp-cp-ep-dp-pp",
                    "pp-outer": "tp-cp-ep-dp-pp", "tp-pp-dp": "tp-cp-ep-pp-dp", "tp-cp-pp-dp": "tp-cp-ep-pp-dp",
                    "dp-outer": "tp-cp-ep-pp-dp"}
_BOOL = {"1": 1, "true": 1, "yes": 1, "on": 1, "0": 0, "false": 0, "no": 0, "off": 0}
_INT_LIMIT = 10_000_000


def encode(key: str, raw: str, where: str = "--fix") -> tuple[str, int]:
    name = key.strip().lower()
    name = _ALIASES.get(name, name)
    value = str(raw).strip().lower()
    if name not in KNOBS:
        close = difflib.get_close_matches(name, KNOBS, n=1, cutoff=0.5)
        hint = f"did you mean '{close[0]}'?" if close else f"keys are {', '.join(KNOBS)}"
        raise PlanInputError(f"unknown layout key '{key}'; {hint}", field=where, fix=f"use one of {', '.join(KNOBS)}")
    if name == "recompute":
        if value not in RECOMPUTE:
            raise PlanInputError(f"recompute must be one of {', '.join(RECOMPUTE)} (got '{raw}')", field=where,
                                 fix="e.g. recompute=selective")
        return name, RECOMPUTE.index(value)
    if name == "schedule":
        value = {"interleaved-1f1b": "interleaved", "zb1p": "zb-h1", "zb2p": "zb-h2", "zb-1p": "zb-h1",
                 "zb-2p": "zb-h2", "zbv": "zb-v", "zbvzerobubble": "zb-v", "seq-1f1b": "seq1f1b",
                 "combined1f1b": "combined-1f1b", "ep-overlap": "combined-1f1b",
                 "dualpipev": "dualpipe-v"}.get(value, value)
        if value not in SCHEDULES:
            raise PlanInputError(f"schedule must be one of {', '.join(SCHEDULES)} (got '{raw}')", field=where,
                                 fix="e.g. schedule=interleaved")
        return name, SCHEDULES.index(value)
    if name == "cp_comm":
        value = {"p2p": "ring", "ulysses": "a2a", "all-to-all": "a2a", "alltoall": "a2a", "hybrid": "a2a+p2p",
                 "usp": "a2a+p2p"}.get(value, value)
        if value not in CP_COMM:
            raise PlanInputError(f"cp_comm must be one of {', '.join(CP_COMM)} (got '{raw}')", field=where,
                                 fix="e.g. cp_comm=a2a")
        return name, CP_COMM.index(value)
    if name == "order":
        value = _ORDER_SPELLINGS.get(value.replace("_", "-").replace(",", "-"), value)
        if value not in RANK_ORDERS:
            raise PlanInputError(f"order must be one of {', '.join(RANK_ORDERS)} (got '{raw}')", field=where,
                                 fix="e.g. order=tp-cp-ep-pp-dp (data parallelism outermost)")
        return name, RANK_ORDERS.index(value)
    if name == "etp":
        if value not in EXPERT_TP:
            raise PlanInputError(f"etp must be 'tp' (experts split like the attention) or 1 (got '{raw}')",
                                 field=where, fix="e.g. etp=1")
        return name, EXPERT_TP.index(value)
    if name == "sp":
        if value not in _BOOL:
            raise PlanInputError(f"sp must be true or false (got '{raw}')", field=where, fix="e.g. sp=true")
        return name, _BOOL[value]
    if name == "zero" and value in ("hsdp", "hybrid", "3h"):
        return name, 4
    try:
        number = int(value)
    except ValueError:
        raise PlanInputError(f"{name} must be a positive integer (got '{raw}')", field=where,
                             fix=f"e.g. {name}=2") from None
    if name == "zero":
        if number not in (0, 1, 2, 3, 4):
            raise PlanInputError(f"zero must be 0, 1, 2, 3 or 4 (= hsdp) (got {number})", field=where,
                                 fix="e.g. zero=1")
        return name, number
    if number <= 0 or number > _INT_LIMIT:
        raise PlanInputError(f"{name} must be a positive integer up to {_INT_LIMIT} (got {number})", field=where,
                             fix=f"e.g. {name}=2")
    return name, number


def parse_pairs(items: list[str], where: str) -> dict[str, int]:
    fixed: dict[str, int] = {}
    for item in items:
        for part in item.split(","):
            part = part.strip()
            if not part:
                continue
            if "=" not in part:
                raise PlanInputError(f"'{part}' is not KEY=VALUE", field=where, fix="e.g. tp=8")
            key, raw = part.split("=", 1)
            name, value = encode(key, raw, where)
            if name in fixed and fixed[name] != value:
                raise PlanInputError(f"{name} is given twice with different values", field=where,
                                     fix="give each key once")
            fixed[name] = value
    return fixed


def decode(name: str, value: int) -> int | str | bool:
    if name == "recompute":
        return RECOMPUTE[value]
    if name == "schedule":
        return SCHEDULES[value]
    if name == "cp_comm":
        return CP_COMM[value]
    if name == "etp":
        return EXPERT_TP[value]
    if name == "order":
        return RANK_ORDERS[value]
    if name == "sp":
        return bool(value)
    return int(value)


# Some knobs, encoded: a partial layout, as `--fix` pins, `--layout` and a launch file give them (Layout: complete).
Knobs = Mapping[str, int]


@dataclass(init=False, repr=False, eq=False)  # (its methods are written out below: why, beside them)
class Layout:
    """One complete training layout, every knob of KNOB_TABLE (sizes as ints, choices as their enums): how one layout
    travels between modules. The search and the cost model price many at once as columns (numpy arrays keyed by
    KNOBS: `columns()`, `from_columns()`); `as_dict()` / `from_dict()` give the encoded mapping `--fix` uses."""

    tp: int
    """Tensor-parallel size: each layer's weight matrices are split over this many GPUs of one NVLink domain
    (Megatron --tensor-model-parallel-size)."""
    pp: int
    """Pipeline-parallel size: the layers are cut into this many stages, one per rank of a pipeline."""
    dp: int
    """Data-parallel size: model replicas (or ZeRO shards) that each take a share of the global batch."""
    cp: int
    """Context-parallel size: each sequence is split over this many GPUs, which exchange keys and values (cp_comm)."""
    ep: int
    """Expert-parallel size: a mixture-of-experts layer's experts are spread over this many GPUs (1: dense)."""
    etp: ExpertTp
    """Tensor parallelism inside the experts: the attention's tp, or 1 (whole experts per GPU: MoE folding)."""
    vpp: int
    """Model chunks per pipeline rank (virtual pipeline stages; interleaved schedules); 1 without interleaving."""
    mbs: int
    """Micro-batch size in sequences: what one forward/backward pass of one pipeline rank takes."""
    zero: Zero
    """What data-parallel ranks shard: ZeRO stage 0-3, or HSDP (ZeRO-3 inside the NVLink domain)."""
    recompute: Recompute
    """Where the backward pass gets activations: kept, recomputed (selective, full), or offloaded to host memory."""
    sp: bool
    """Sequence parallelism: with tp > 1, the norms and dropout work on a tp-th of the sequence each."""
    schedule: Schedule
    """The pipeline schedule (1F1B, interleaved, zero-bubble, Seq1F1B, combined 1F1B, DualPipe); 1F1B when pp = 1."""
    cp_comm: CpComm
    """How context-parallel ranks exchange keys and values: ring (p2p), all-to-all (Ulysses), or both."""
    order: RankOrder
    """The rank order: which dimension takes consecutive ranks first, so which groups cross which network tier."""

    # Written out rather than generated: a dataclass compiles the methods it generates when its module is imported,
    # a cost every plain `plan` run would pay; these come with the module's bytecode. Frozen, as frozen=True makes it.
    def __init__(self, tp: int, pp: int, dp: int, cp: int, ep: int, etp: int, vpp: int, mbs: int, zero: int,
                 recompute: int, sp: int, schedule: int, cp_comm: int, order: int) -> None:
        values = (tp, pp, dp, cp, ep, etp, vpp, mbs, zero, recompute, sp, schedule, cp_comm, order)
        for knob, value in zip(KNOB_TABLE, values, strict=True):  # numpy ints and codes in, the declared types out
            typed = knob.choices(int(value)) if knob.choices else bool(value) if knob.name == "sp" else int(value)
            object.__setattr__(self, knob.name, typed)

    def __setattr__(self, name: str, value: object) -> None:
        raise dataclasses.FrozenInstanceError(f"cannot assign to field {name!r}")

    def __delattr__(self, name: str) -> None:
        raise dataclasses.FrozenInstanceError(f"cannot delete field {name!r}")

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Layout) and self.as_dict() == other.as_dict()

    def __hash__(self) -> int:
        return hash(tuple(self.as_dict().values()))

    def __repr__(self) -> str:
        return "Layout(" + ", ".join(f"{k}={v!r}" for k, v in self.labels().items()) + ")"

    @classmethod
    def from_dict(cls, knobs: Mapping[str, int]) -> Layout:
        """From encoded values keyed by KNOBS. `etp`, `cp_comm` and `order` (knobs added after the first plan
        documents) may be missing: then Megatron's default expert tp (default_expert_tp), the ring, its rank order."""
        values = {"cp_comm": int(CpComm.RING), "order": int(RankOrder.PP_OUTER), **knobs}
        values.setdefault("etp", default_expert_tp(values["dp"], values["cp"], values["ep"]))
        return cls(**{k: values[k] for k in KNOBS})

    @classmethod
    def from_columns(cls, cols: Mapping[str, Sequence[int]], row: int = 0) -> Layout:
        """Row `row` of the search's knob columns."""
        return cls(**{k: int(cols[k][row]) for k in KNOBS})

    @classmethod
    def from_labels(cls, labels: Mapping[str, object]) -> Layout:
        """From the values users type and `labels()` gives ("selective", "hsdp", True); PlanInputError if bad."""
        return cls.from_dict(dict(encode(k, str(v), "layout") for k, v in labels.items()))

    def as_dict(self) -> dict[str, int]:
        """The encoded values (plain ints, categoricals as their codes), keyed by KNOBS in KNOB_TABLE's order."""
        return {k: int(getattr(self, k)) for k in KNOBS}

    def columns(self) -> dict[str, np.ndarray]:
        """The layout as one-row knob columns (int64), what the cost model prices."""
        import numpy as np

        return {k: np.array([int(getattr(self, k))], dtype=np.int64) for k in KNOBS}

    def labels(self) -> dict[str, int | str | bool]:
        """Each knob as users write it: sizes as ints, choices as labels, sp as a bool."""
        return {k: decode(k, int(getattr(self, k))) for k in KNOBS}

    def text(self) -> str:
        """'tp=8,pp=4,...,recompute=selective,...': every knob, as `--layout` and `--fix` read it (parse_pairs)."""
        return ",".join(f"{k}={str(v).lower()}" for k, v in self.labels().items())

    def replace(self, **changes: int) -> Layout:
        """This layout with some knobs changed (encoded values or enum members)."""
        return dataclasses.replace(self, **changes)


def embedding_loss_split(layers: int, pp: int, vpp: int) -> int | None:
    """Layers on the first and on the last rank when the embedding and the loss each count as one layer of an
    interleaved split (Megatron-Core --account-for-embedding-in-pipeline-split --account-for-loss-in-pipeline-split:
    (L + 2) % (pp x vpp) == 0, transformer_config.py; Megatron-Bridge's Llama 3.1 405B recipe). None when vpp = 1
    (first/last-stage counts state such splits), when the layers already split evenly, or when L + 2 does not."""
    if pp < 2 or vpp < 2 or layers % (pp * vpp) == 0 or (layers + 2) % (pp * vpp):
        return None
    return (layers + 2) // pp - 1


def uneven_stage_layers(layers: int, pp: int, vpp: int, embedding_loss: bool = False) -> tuple[int, int] | None:
    """First/last-stage layer counts for an uneven split (Megatron --decoder-first/last-pipeline-num-layers, or with
    virtual stages and `embedding_loss` the embedding/loss-as-layer split, embedding_loss_split).

    Middle stages get ceil(L/pp) layers, as the cost model assumes for the busiest stage; the rest is shared by the
    first and last stages. None when the split is even or needs virtual stages (then only a pipeline layout fits).
    """
    if vpp > 1 and embedding_loss and pp >= 2:
        edge = embedding_loss_split(layers, pp, vpp)
        return None if edge is None else (edge, edge)
    if pp < 2 or layers % (pp * vpp) == 0 or vpp > 1:
        return None
    cap = -(-layers // pp)
    for middle in (cap, layers // pp):
        rest = layers - (pp - 2) * middle
        first, last = rest // 2, rest - rest // 2
        if 1 <= first <= cap and 1 <= last <= cap:
            return first, last
    return None


def rank_layers(chunks: tuple[int, ...] | list[int], pp: int) -> list[int]:
    """Layers each pipeline rank holds under a layout of model chunks in model order (chunk s on rank s % pp)."""
    return [sum(chunks[rank::pp]) for rank in range(pp)]


def chunk_layers(layers: int, pp: int, vpp: int) -> tuple[int, ...] | None:
    """Decoder layers of each model chunk, in model order (chunk s runs on pipeline rank s % pp as its virtual stage
    s // pp), for an interleaved split that neither divides evenly nor follows from counting the embedding and the
    loss as layers: the split a custom pipeline layout states (Megatron-Core --pipeline-model-parallel-layout,
    Megatron-Bridge pipeline_model_parallel_layout; torchtitan module_fqns_per_model_part).

    Every rank holds ceil(L/pp) layers, the count the cost model prices on the busiest rank, except the last ranks,
    which give up the shortfall (the last also runs the LM head and the loss), and splits them over its vpp chunks
    as evenly as it can, the larger chunks first: the cost model prices a chunk as its rank's layers / vpp. For
    DeepSeek-V3's and Kimi K2's 61 layers on pp 4 x vpp 4 the ranks hold 16, 16, 16 and 13 layers, as in
    Megatron-Bridge's own layouts (recipes/kimi/h100/kimi_k2.py, recipes/deepseek/h100/deepseek_v3.py: fifteen
    chunks of 4 and a last one of 1, where this split gives the last rank 4, 3, 3, 3). None when no layout is
    needed (vpp 1, an even split, or the embedding/loss split fits) or when a chunk would be left without a
    layer."""
    chunks = pp * vpp
    if vpp < 2 or layers % chunks == 0 or embedding_loss_split(layers, pp, vpp) is not None or layers < chunks:
        return None
    per_rank = [-(-layers // pp)] * pp
    short = sum(per_rank) - layers
    for rank in reversed(range(pp)):  # the last ranks give up the shortfall, keeping one layer per chunk
        give = min(short, per_rank[rank] - vpp)
        per_rank[rank] -= give
        short -= give
    if short:
        return None
    split = [[total // vpp + (v < total % vpp) for v in range(vpp)] for total in per_rank]
    return tuple(split[s % pp][s // pp] for s in range(chunks))


def stage_split_launchable(layers: int, pp: int, vpp: int, uneven_allowed: bool,
                           embedding_loss: bool = False, layout: bool = False) -> bool:
    """Whether a launcher can state the layer split the cost model prices: every model chunk of every rank gets the
    same layer count (layers % (pp x vpp) == 0), or, without virtual stages, first/last-stage counts exist and the
    framework can emit them (Megatron --decoder-first/last-pipeline-num-layers; torchtitan per-stage modules), or,
    with virtual stages, the embedding and loss count as layers where the framework has that switch, or the
    framework takes a custom pipeline layout (`layout`, chunk_layers)."""
    if layers % (pp * vpp) == 0:
        return True
    if vpp > 1:
        return ((embedding_loss and embedding_loss_split(layers, pp, vpp) is not None)
                or (layout and chunk_layers(layers, pp, vpp) is not None))
    return uneven_allowed and uneven_stage_layers(layers, pp, vpp) is not None

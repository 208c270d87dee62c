"""Read one plan out of a plan document (docs/plan-schema.md) into a typed, checked view.

Every launcher renders from a `PlanView`, so the document is validated once: a launcher never has to guess at a
missing key or print a layout whose own numbers disagree (world size, batch arithmetic, schedule vs. vpp).

size: over 400 lines because every key a launcher reads from a plan document is read and checked here, once.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, NoReturn

from planner import __version__
from planner.errors import PlanInputError
from planner.inputs.layout import RANK_ORDERS, RECOMPUTE, SCHEDULES, rank_layers
from planner.inputs.specs import ModelSpec
from planner.report.launchers import _training
from planner.report.plan_doc import PlanDocument, get, get_choice, get_int, loose_plan_document

PRECISIONS = ("bf16", "fp8", "fp4")  # what the planner produces (TrainingSpec.precision)


@dataclass(frozen=True)
class ModelShape:
    name: str
    hidden_size: int
    ffn_hidden_size: int
    num_layers: int
    num_heads: int
    num_kv_heads: int
    head_dim: int
    vocab_size: int
    hidden_act: str
    tied_embeddings: bool
    max_position_embeddings: int | None  # None: the model file did not say (then the sequence length is used)
    num_experts: int
    experts_per_token: int
    moe_ffn_hidden_size: int
    shared_experts: int
    first_dense_layers: int
    # Multi-latent attention (DeepSeek); all zero for ordinary attention. Not in schema v1, read when present.
    q_lora_rank: int
    kv_lora_rank: int
    qk_nope_head_dim: int
    qk_rope_head_dim: int
    v_head_dim: int
    # Which layers are MoE (1) or dense (0) when the config interleaves them (Llama 4, MiMo); None: first-k rule.
    moe_layer_pattern: tuple[int, ...] | None = None
    scoring_func: str = "softmax"  # the router's gate over the top-k logits: softmax or sigmoid
    # group-limited routing (DeepSeek-V3 n_group / topk_group): each token's experts come from topk_group groups
    n_group: int = 0
    topk_group: int = 0
    # Each layer's token mixer (HF layer_types: full_attention, sliding_attention, mamba...); None: all full attention.
    layer_kinds: tuple[str, ...] | None = None
    sliding_window: int | None = None  # keys a sliding_attention layer sees (HF sliding_window)
    attention_chunk_size: int | None = None  # chunked_attention layers' chunk (Llama 4)
    mtp_layers: int | None = None  # multi-token-prediction depth (num_nextn_predict_layers); None: not an MTP model
    attention_bias: bool = False  # biases on q/k/v/o (HF attention_bias)
    mlp_bias: bool = False  # biases on the MLP / expert projections
    attention_sinks: bool = False  # a learnable sink logit per head (gpt-oss)
    swiglu_limit: float | None = None  # gpt-oss's clamp of the SwiGLU inputs
    attn_output_gate: bool = False  # a sigmoid gate on the attention output (Qwen3-Next, Qwen3.5)
    # Gated DeltaNet layers: (conv kernel, key head dim, value head dim, key heads, value heads); None: no such layers
    linear_attention: tuple[int, int, int, int, int] | None = None
    # DeepSeek sparse attention's indexer: (heads, head dim, top-k keys); None: dense attention
    indexer: tuple[int, int, int] | None = None
    shared_indexers: bool = False  # some layers reuse another layer's top-k (GLM-5.2 indexer_types "shared")
    # Each layer's MLP (dense, moe, none...); None: the first-k-dense rule. A hybrid's per-layer block type needs it.
    mlp_kinds: tuple[str, ...] | None = None
    # Mamba-2 mixers: (heads, head dim, state size, groups); None where the model has none of the keys
    mamba: tuple[int, int, int, int] | None = None
    conv_kernel: int = 4  # the Mamba mixer's causal convolution width (HF conv_kernel)
    shared_expert_ffn: int = 0  # shared-expert width where the config states it (Nemotron 3: 2 x the expert width)
    moe_latent_size: int = 0  # Nemotron 3 LatentMoE: experts compute in this width (0 = the hidden size)

    @property
    def is_moe(self) -> bool:
        return self.num_experts > 0

    @property
    def is_mla(self) -> bool:
        return self.kv_lora_rank > 0


@dataclass(frozen=True)
class PlanLayout:  # a plan document's plans[i].layout, read back (what each knob means: planner.inputs.layout)
    tp: int
    pp: int
    dp: int
    cp: int
    ep: int
    vpp: int
    micro_batch: int
    num_microbatches: int
    zero: int
    recompute: str
    sequence_parallel: bool
    schedule: str
    first_stage_layers: int | None
    last_stage_layers: int | None
    fsdp_shard_group: int | None = None  # HSDP: ZeRO-3 over this many data ranks, replicated across groups
    cp_comm: str = "ring"  # "a2a" = DeepSpeed-Ulysses style all-to-all; "a2a+p2p" = hybrid
    cp_hierarchy: tuple | None = None  # hybrid CP: (all-to-all size, ring size)
    expert_tp: int | None = None  # expert tensor parallel size (1 with MoE parallel folding), None = tp
    # "embedding_loss": the first/last-stage counts come from counting the embedding and the loss as one layer each
    # (Megatron-Core --account-for-embedding/loss-in-pipeline-split), the split an interleaved plan can then state
    stage_split: str | None = None
    # recompute=offload: the layers whose activations go to host memory (--cpu-offloading-num-layers)
    offload_layers: int | None = None
    rank_order: str = RANK_ORDERS[0]  # planner.inputs.layout.RankOrder; schema 1 documents: the default
    # decoder layers of each model chunk in model order, where an interleaved split needs a custom pipeline layout
    # (planner.inputs.layout.chunk_layers)
    pipeline_layout: tuple[int, ...] | None = None

    @property
    def world_size(self) -> int:
        return self.tp * self.pp * self.cp * self.dp

    @property
    def dp_outermost(self) -> bool:
        """Data parallelism outermost (tp-cp-ep-pp-dp) where that changes the groups: pp > 1 and dp > 1."""
        return self.rank_order != RANK_ORDERS[0] and self.pp > 1 and self.dp > 1

    @property
    def uneven(self) -> bool:
        return self.first_stage_layers is not None or self.last_stage_layers is not None

    @property
    def stated_split(self) -> bool:
        """The plan states its stage split: first/last-stage counts or a pipeline layout."""
        return self.uneven or self.pipeline_layout is not None


@dataclass(frozen=True)
class PlanView:
    planner_version: str
    rank: int
    num_plans: int
    model: ModelShape
    cluster_name: str
    num_gpus: int
    gpus_per_node: int
    seq_len: int
    global_batch: int
    precision: str
    layout: PlanLayout
    optimizer_offload: float = 0.0  # share of optimizer states in CPU memory (inputs.training.optimizer_offload)
    optimizer_moments: str = "fp32"  # dtype of Adam's moments (inputs.training.optimizer_moments)
    optimizer: str = "adam"  # adam | muon (inputs.training.optimizer)
    fp8_recipe: str = "tensorwise"  # fp8 scaling granularity (inputs.training.fp8_recipe)
    moe_capacity_factor: float | None = None  # token dropping (inputs.training.moe_capacity_factor); None: dropless
    moe_pad_to_capacity: bool = False  # experts' inputs padded to capacity (inputs.training.moe_pad_to_capacity)
    # plans[i].placement on a cluster of more than two tiers: (dimension, the innermost tier holding its group)
    placement: tuple[tuple[str, str], ...] = ()
    param_offload: bool = False  # ZeRO-3 parameters in host memory (inputs.training.param_offload)
    tp_comm_overlap: bool = False  # TP collectives overlapped with GEMMs (inputs.training.tp_comm_overlap)
    torch_compile: bool = False  # the model compiled with torch.compile (inputs.training.torch_compile)
    moe_dispatcher: str = "stack"  # MoE token dispatcher (inputs.training.moe_dispatcher): stack | alltoall | flex
    moe_router_fusion: bool = False  # the MoE router as TE's fused kernels (inputs.training.moe_router_fusion)
    cuda_graphs: str = "none"  # CUDA graph capture priced (inputs.training.cuda_graphs)
    cuda_graph_modules: tuple[str, ...] | None = None  # per-layer capture's modules (inputs.training)
    attention_kernel: str = "stack"  # stack | unfused | fp8 (inputs.training.attention_kernel)
    gpu_key: str = ""  # the catalog GPU (inputs.cluster.gpu.key): its generation decides what overlaps run

    def field(self, key: str) -> str:
        """Path of a layout key (or of an `inputs.` path given whole) in the document, for error messages."""
        return key if key.startswith("inputs.") else f"plans[{self.rank - 1}].layout.{key}"

    def stage_layers(self) -> list[int]:
        """Transformer layers held by each pipeline rank (all virtual stages of that rank together).

        Only meaningful once `require_stage_split` has passed."""
        lay, layers = self.layout, self.model.num_layers
        if lay.pipeline_layout is not None:
            return rank_layers(lay.pipeline_layout, lay.pp)
        if not lay.uneven:
            return [layers // lay.pp] * lay.pp
        first, last = lay.first_stage_layers, lay.last_stage_layers
        middle_ranks = lay.pp - (first is not None) - (last is not None)
        rest = layers - (first or 0) - (last or 0)
        middle = [rest // middle_ranks] * middle_ranks if middle_ranks else []
        return ([first] if first is not None else []) + middle + ([last] if last is not None else [])


def header(view: PlanView, target: str) -> str:
    """First comment line of every commented format: who made it, for what, aimed at which launcher release."""
    return (
        f"# plan {view.planner_version} | {view.model.name} on {view.cluster_name} ({view.num_gpus} GPUs)"
        f" | plan rank {view.rank} of {view.num_plans} | target: {target}"
    )


def placement_note(view: PlanView) -> str:
    """On a cluster of more than two tiers: where each group sits, and what the placement needs from the launch that
    no training flag sets: global ranks numbered in topology order (a node's GPUs, then a rack's nodes, then a pod's,
    consecutive), as Slurm's topology plugins with block distribution number them."""
    if not view.placement:
        return ""
    where = ", ".join(f"{dim} within {tier}" for dim, tier in view.placement)
    return (f"# placement ({view.layout.rank_order}): {where}; number ranks in topology order (the nodes of one "
            "rack, then of one pod, consecutive: Slurm topology/tree or topology/block with --distribution=block)")


def require_stage_split(view: PlanView, launcher: str) -> None:
    """Refuse when the plan leaves the pipeline split open: the layers do not divide over pp and no stage sizes
    are given, so any split a launcher picked could differ from the one the plan was costed with."""
    lay, layers = view.layout, view.model.num_layers
    if not lay.stated_split and layers % lay.pp:
        refuse(view, launcher, "pp",
               f"{layers} layers do not split evenly over pp={lay.pp} and the plan gives no "
               "first_stage_layers/last_stage_layers", "re-plan with pp dividing the layer count, or use --format env")


def refuse(view: PlanView, launcher: str, key: str, message: str, fix: str) -> NoReturn:
    """Stop rendering: the launcher has no way to run what the plan says, and a near miss would mislead."""
    raise PlanInputError(f"{launcher} cannot express this plan: {message}", field=view.field(key), fix=fix)


def _model(raw: Any) -> ModelShape:
    p = "inputs.model"
    heads = get_int(raw, "num_attention_heads", p, minimum=1)
    hidden = get_int(raw, "hidden_size", p, minimum=1)
    # Schema v1 spells the expert count num_local_experts; DeepSeek's own config spells it n_routed_experts.
    experts = get_int(raw, "num_local_experts", p, default=0) or get_int(raw, "n_routed_experts", p, default=0)
    return ModelShape(
        name=str(get(raw, "name", p)),
        hidden_size=hidden,
        ffn_hidden_size=get_int(raw, "intermediate_size", p, minimum=1),
        num_layers=get_int(raw, "num_hidden_layers", p, minimum=1),
        num_heads=heads,
        num_kv_heads=get_int(raw, "num_key_value_heads", p, minimum=1, default=heads),
        head_dim=get_int(raw, "head_dim", p, minimum=1, default=hidden // heads),
        vocab_size=get_int(raw, "vocab_size", p, minimum=1),
        hidden_act=str(get(raw, "hidden_act", p)),
        tied_embeddings=bool(get(raw, "tie_word_embeddings", p)),
        max_position_embeddings=(get_int(raw, "max_position_embeddings", p, minimum=1)
                                 if raw.get("max_position_embeddings") is not None else None),
        num_experts=experts,
        experts_per_token=get_int(raw, "num_experts_per_tok", p, default=0),
        moe_ffn_hidden_size=get_int(raw, "moe_intermediate_size", p, default=0),
        shared_experts=get_int(raw, "n_shared_experts", p, default=0),
        first_dense_layers=get_int(raw, "first_k_dense_replace", p, default=0),
        q_lora_rank=get_int(raw, "q_lora_rank", p, default=0),
        kv_lora_rank=get_int(raw, "kv_lora_rank", p, default=0),
        qk_nope_head_dim=get_int(raw, "qk_nope_head_dim", p, default=0),
        qk_rope_head_dim=get_int(raw, "qk_rope_head_dim", p, default=0),
        v_head_dim=get_int(raw, "v_head_dim", p, default=0),
        moe_layer_pattern=_moe_pattern(raw.get("mlp_layer_types")),
        scoring_func=str(raw.get("scoring_func") or "softmax"),
        n_group=get_int(raw, "n_group", p, default=0),
        topk_group=get_int(raw, "topk_group", p, default=0),
        layer_kinds=_kinds(raw.get("layer_types")),
        sliding_window=get_int(raw, "sliding_window", p, minimum=1) if raw.get("sliding_window") else None,
        attention_chunk_size=(get_int(raw, "attention_chunk_size", p, minimum=1)
                              if raw.get("attention_chunk_size") else None),
        mtp_layers=(get_int(raw, "num_nextn_predict_layers", p, minimum=0)
                    if raw.get("num_nextn_predict_layers") is not None else None),
        attention_bias=bool(raw.get("attention_bias", False)),
        mlp_bias=bool(raw.get("mlp_bias", False)),
        attention_sinks=bool(raw.get("attention_sinks", False)),
        swiglu_limit=float(raw["swiglu_limit"]) if raw.get("swiglu_limit") else None,
        attn_output_gate=bool(raw.get("attn_output_gate", False)),
        linear_attention=_ints(raw, ("linear_conv_kernel_dim", "linear_key_head_dim", "linear_value_head_dim",
                                     "linear_num_key_heads", "linear_num_value_heads")),
        indexer=_ints(raw, ("index_n_heads", "index_head_dim", "index_topk")),
        shared_indexers="shared" in (raw.get("indexer_types") or ()),
        mlp_kinds=_kinds(raw.get("mlp_layer_types")),
        mamba=_ints(raw, ("mamba_num_heads", "mamba_head_dim", "ssm_state_size", "n_groups")),
        conv_kernel=get_int(raw, "conv_kernel", p, minimum=1, default=4),
        shared_expert_ffn=get_int(raw, "shared_expert_intermediate_size", p, default=0),
        moe_latent_size=get_int(raw, "moe_latent_size", p, default=0),
    )


def _ints(raw: dict, keys: tuple[str, ...]) -> tuple[int, ...] | None:
    """The keys' values as a tuple of positive ints (a key the document omits at its ModelSpec default takes that
    default), or None where the model lacks any of them."""
    values = tuple(raw.get(k, ModelSpec.model_fields[k].default) for k in keys)
    if not all(isinstance(v, int) and not isinstance(v, bool) and v > 0 for v in values):
        return None
    return values


def _kinds(kinds: Any) -> tuple[str, ...] | None:
    if not isinstance(kinds, list | tuple) or not all(isinstance(k, str) for k in kinds):
        return None
    return tuple(kinds)


def _moe_pattern(kinds: Any) -> tuple[int, ...] | None:
    """mlp_layer_types (planner.inputs.architecture) as Megatron's 0/1 --moe-layer-freq list."""
    if not isinstance(kinds, list | tuple) or not all(isinstance(k, str) for k in kinds):
        return None
    return tuple(int(k == "moe") for k in kinds)


def _layout(raw: Any, path: str) -> PlanLayout:
    if not isinstance(raw, dict):
        raise PlanInputError("layout must be a JSON object", field=path)
    first = get_int(raw, "first_stage_layers", path, minimum=1) if raw.get("first_stage_layers") is not None else None
    last = get_int(raw, "last_stage_layers", path, minimum=1) if raw.get("last_stage_layers") is not None else None
    sp = get(raw, "sequence_parallel", path)
    if not isinstance(sp, bool):
        raise PlanInputError(f"expected true or false, got {sp!r}", field=f"{path}.sequence_parallel")
    tp = get_int(raw, "tp", path, minimum=1)
    return PlanLayout(
        tp=tp,
        pp=get_int(raw, "pp", path, minimum=1),
        dp=get_int(raw, "dp", path, minimum=1),
        cp=get_int(raw, "cp", path, minimum=1),
        ep=get_int(raw, "ep", path, minimum=1),
        vpp=get_int(raw, "vpp", path, minimum=1),
        micro_batch=get_int(raw, "micro_batch", path, minimum=1),
        num_microbatches=get_int(raw, "num_microbatches", path, minimum=1),
        zero=get_int(raw, "zero", path),
        recompute=get_choice(raw, "recompute", path, RECOMPUTE),
        # Sequence parallel only exists inside a TP group; Megatron itself drops it when tp == 1.
        sequence_parallel=sp and tp > 1,
        schedule=get_choice(raw, "schedule", path, SCHEDULES),
        first_stage_layers=first,
        last_stage_layers=last,
        offload_layers=get_int(raw, "offload_layers", path, minimum=1) if raw.get("offload_layers") is not None
        else None,
        cp_comm=get_choice(raw, "cp_comm", path, ("ring", "a2a", "a2a+p2p")) if "cp_comm" in raw else "ring",
        cp_hierarchy=tuple(raw["cp_hierarchy"]) if isinstance(raw.get("cp_hierarchy"), list) else None,
        fsdp_shard_group=get_int(raw, "fsdp_shard_group", path, minimum=1) if "fsdp_shard_group" in raw else None,
        expert_tp=get_int(raw, "expert_tp", path, minimum=1) if "expert_tp" in raw else None,
        stage_split=get_choice(raw, "stage_split", path, ("embedding_loss",)) if "stage_split" in raw else None,
        rank_order=get_choice(raw, "rank_order", path, RANK_ORDERS) if "rank_order" in raw else RANK_ORDERS[0],
        pipeline_layout=_chunks(raw, path),
    )


def _chunks(raw: dict, path: str) -> tuple[int, ...] | None:
    """layout.pipeline_layout: a list of layer counts, one per model chunk."""
    chunks = raw.get("pipeline_layout")
    if chunks is None:
        return None
    if not isinstance(chunks, list) or not chunks or not all(
            isinstance(n, int) and not isinstance(n, bool) and n >= 0 for n in chunks):
        raise PlanInputError("expected a list of layer counts (integers >= 0), one per model chunk",
                             field=f"{path}.pipeline_layout")
    return tuple(chunks)


def _inconsistent(path: str, message: str) -> NoReturn:
    raise PlanInputError(f"plan is inconsistent: {message}", field=path,
                         fix="regenerate the plan with `plan --format json`; do not edit layouts by hand")


def _check(view: PlanView) -> None:
    lay, m = view.layout, view.model
    if lay.zero > 3:
        raise PlanInputError(f"zero must be 0..3, got {lay.zero}", field=view.field("zero"))
    if lay.micro_batch * lay.num_microbatches * lay.dp != view.global_batch:
        _inconsistent(view.field("num_microbatches"),
                      f"micro_batch {lay.micro_batch} x num_microbatches {lay.num_microbatches} x dp {lay.dp}"
                      f" != global_batch {view.global_batch}")
    if lay.pp == 1 and (lay.vpp != 1 or lay.schedule not in ("1f1b", "combined-1f1b") or lay.uneven):
        _inconsistent(view.field("pp"), "pp = 1 needs vpp = 1, schedule 1f1b (or combined-1f1b) and no uneven "
                      "stages")
    if lay.schedule == "interleaved" and lay.vpp < 2:
        _inconsistent(view.field("vpp"), "schedule interleaved needs vpp >= 2")
    if lay.schedule in ("zb-v", "dualpipe-v") and lay.vpp != 2:
        _inconsistent(view.field("vpp"), f"schedule {lay.schedule} needs vpp = 2 (two chunks per rank in a V)")
    if lay.schedule == "1f1b" and lay.vpp != 1:
        _inconsistent(view.field("vpp"), "schedule 1f1b needs vpp = 1")
    if (lay.tp * lay.dp * lay.cp) % lay.ep:
        _inconsistent(view.field("ep"), f"ep {lay.ep} must divide tp x dp x cp = {lay.tp * lay.dp * lay.cp}")
    if lay.ep > 1 and not m.is_moe:
        _inconsistent(view.field("ep"), f"ep {lay.ep} > 1 but {m.name} has no experts")
    if lay.pipeline_layout is not None:
        chunks = lay.pipeline_layout
        if len(chunks) != lay.pp * lay.vpp or sum(chunks) != m.num_layers or lay.uneven:
            _inconsistent(view.field("pipeline_layout"),
                          f"{len(chunks)} chunks holding {sum(chunks)} layers, not pp x vpp = {lay.pp * lay.vpp} "
                          f"chunks holding the model's {m.num_layers} (and no first/last-stage counts beside it)")
    if lay.uneven:
        middle = lay.pp - (lay.first_stage_layers is not None) - (lay.last_stage_layers is not None)
        rest = m.num_layers - (lay.first_stage_layers or 0) - (lay.last_stage_layers or 0)
        if rest < middle or (rest % middle if middle else rest):
            _inconsistent(view.field("first_stage_layers"),
                          f"the {rest} layers left for the {middle} middle stages do not split evenly")


def _placement(plan: dict, cluster: dict) -> tuple[tuple[str, str], ...]:
    """plans[i].placement where the cluster has more than two tiers (where it says something the sizes do not)."""
    tiers, placement = cluster.get("tiers"), plan.get("placement")
    if not isinstance(tiers, list | tuple) or len(tiers) < 3 or not isinstance(placement, dict):
        return ()
    return tuple((str(k), str(v)) for k, v in placement.items())


def refuse_token_drop(view: PlanView, launcher: str) -> None:
    """Refuse a token-dropping MoE plan for a launcher whose stack routes experts dropless."""
    if view.model.is_moe and view.moe_capacity_factor is not None:
        refuse(view, launcher, "inputs.training.moe_capacity_factor", f"{launcher} routes experts dropless: it has no "
               "capacity factor", "re-plan without --moe-capacity-factor, or use --format megatron / nemo")


def load(doc: dict | PlanDocument, rank: int) -> PlanView:
    """The `rank`-th plan (1-based) of `doc`, checked for internal consistency."""
    pd = loose_plan_document(doc)
    plan = pd.plan(rank)
    plans = pd.plans
    inputs = pd.inputs
    cluster, training = get(inputs, "cluster", "inputs"), get(inputs, "training", "inputs")
    precision = get(training, "precision", "inputs.training")
    if precision not in PRECISIONS:
        raise PlanInputError(f"unsupported precision {precision!r}", field="inputs.training.precision",
                             fix=f"use one of {', '.join(PRECISIONS)}")
    doc = pd.raw
    capacity, padded = _training.token_drop(training)
    graphs, graph_modules = _training.graphs(training)
    view = PlanView(
        planner_version=str(doc.get("planner_version") or __version__),
        rank=rank,
        num_plans=len(plans),
        model=_model(get(inputs, "model", "inputs")),
        cluster_name=str(get(cluster, "name", "inputs.cluster")),
        num_gpus=get_int(cluster, "num_gpus", "inputs.cluster", minimum=1),
        gpus_per_node=get_int(cluster, "gpus_per_node", "inputs.cluster", minimum=1),
        seq_len=get_int(training, "seq_len", "inputs.training", minimum=1),
        global_batch=get_int(training, "global_batch", "inputs.training", minimum=1),
        precision=precision,
        layout=_layout(get(plan, "layout", f"plans[{rank - 1}]"), f"plans[{rank - 1}].layout"),
        optimizer_offload=_training.offload(training),
        optimizer_moments=_training.moments(training),
        optimizer=_training.optimizer(training),
        fp8_recipe=_training.fp8_recipe(training),
        moe_capacity_factor=capacity,
        moe_pad_to_capacity=padded,
        placement=_placement(plan, cluster),
        param_offload=_training.switch(training, "param_offload"),
        tp_comm_overlap=_training.switch(training, "tp_comm_overlap"),
        torch_compile=_training.switch(training, "torch_compile"),
        moe_dispatcher=_training.dispatcher(training),
        moe_router_fusion=_training.switch(training, "moe_router_fusion"),
        cuda_graphs=graphs,
        cuda_graph_modules=graph_modules,
        attention_kernel=_training.attention_kernel(training),
        gpu_key=str((cluster.get("gpu") or {}).get("key") or "") if isinstance(cluster.get("gpu"), dict) else "",
    )
    _check(view)
    return view

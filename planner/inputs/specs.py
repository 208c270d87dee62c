"""Typed input specs: the model (Hugging Face config.json keys), the GPU, the cluster, the training run.

Validation lives here so that every caller (CLI, validate, tests) gets the same one-line errors.

size: over 400 lines because every input spec and each field's documented meaning and bounds live in this one module
(the plan options, the schema docs and the one-line errors read them from here); splitting it would scatter them.
"""

from __future__ import annotations

from typing import Any, Literal, get_args

from pydantic import ConfigDict, Field, NonNegativeInt, ValidationInfo, field_validator, model_validator

from planner.inputs.network import Tier, check_tiers, legacy_tiers
from planner.inputs.resilience import ReliabilitySpec, StorageSpec
from planner.inputs.spec_base import (  # noqa: F401 - re-exported: callers import the bounds from here
    MAX_RATE,
    MAX_SIZE,
    MIN_EFFICIENCY,
    MIN_RATE,
    Count,
    Efficiency,
    Rate,
    Size,
    _Spec,
)

# swigluoai: gpt-oss's clamped SwiGLU (vLLM swigluoai_and_mul), still gate, up and down projections.
GATED_ACTS = {"silu", "swiglu", "gelu_gated", "geglu", "swish", "swigluoai"}
# xielu: Apertus's xIELU, an elementwise activation between up_proj and down_proj (no gate: HF/vLLM ApertusMLP).
PLAIN_ACTS = {"gelu", "gelu_new", "gelu_pytorch_tanh", "relu", "relu2", "squared_relu", "gelu_fast", "xielu"}
Precision = Literal["bf16", "fp8", "fp4"]
Fp8Recipe = Literal["tensorwise", "blockwise"]
# Megatron-Core's per-layer CUDA graph capture regions (megatron/core/transformer/enums.py CudaGraphModule)
GraphModule = Literal["attn", "mlp", "moe", "moe_router", "moe_preprocess", "mamba"]
GRAPH_MODULES: tuple[str, ...] = get_args(GraphModule)
FP8_RECIPES: tuple[str, ...] = get_args(Fp8Recipe)
# What mixes tokens in one layer, and what follows it. Values of Hugging Face `layer_types` where HF has one ("conv":
# LFM2's gated short convolution); "mamba" (Mamba-2 SSD), "mamba1" (Mamba-1 selective scan, Jamba), "linear" (a
# block_configs replace_with_linear) and "none" (no-op / MLP-only blocks) are ours.
MixerKind = Literal["full_attention", "sliding_attention", "chunked_attention", "linear_attention", "mamba", "mamba1",
                    "conv", "linear", "none"]
MlpKind = Literal["dense", "moe", "linear", "none"]
# Mixers that are softmax attention (full, sliding-window, chunked): Megatron-Core core attention runs them.
ATTENTION_KINDS = ("full_attention", "sliding_attention", "chunked_attention")


class ModelSpec(_Spec):
    """A decoder-only transformer, described with Hugging Face `config.json` key names."""

    model_config = ConfigDict(extra="ignore", frozen=True)

    name: str = "custom"
    hidden_size: Size
    num_hidden_layers: Size
    num_attention_heads: Size
    num_key_value_heads: Size | None = None
    intermediate_size: Size
    vocab_size: int = Field(gt=1, le=MAX_SIZE)
    head_dim: Size | None = None
    hidden_act: str = "silu"
    tie_word_embeddings: bool = False
    max_position_embeddings: int | None = Field(default=None, gt=0)
    # Mixture of experts (0 = dense). Aliases num_experts / n_routed_experts are folded in by the catalog loader.
    num_local_experts: Count = 0
    num_experts_per_tok: Count = 0
    moe_intermediate_size: Count = 0
    n_shared_experts: Count = 0
    first_k_dense_replace: Count = 0
    # Router gate over the top-k logits: softmax (Mixtral, Qwen3, gpt-oss) or sigmoid (DeepSeek-V3, Kimi K2: their
    # configs say scoring_func; Llama 4 and GLM-4.5 MoE apply it in code). No cost depends on it; Megatron-Core does:
    # top-1 routing needs sigmoid or a softmax before the top-k (transformer_config.py). Other gates (DeepSeek-V4's
    # sqrtsoftplus) are kept as written: they price the same, and the Megatron launchers refuse them.
    scoring_func: str = Field(default="softmax", max_length=40)
    # Group-limited routing (DeepSeek-V3 node-limited routing): experts in n_group groups, each token uses topk_group.
    n_group: Count = 0
    topk_group: Count = 0
    moe_latent_size: Count = 0  # Nemotron-3 LatentMoE: experts run in this width between shared h<->latent projections
    # Multi-head latent attention (DeepSeek-V2/V3); 0 = standard attention.
    kv_lora_rank: Count = 0
    q_lora_rank: Count = 0
    qk_rope_head_dim: Count = 0
    qk_nope_head_dim: Count = 0
    v_head_dim: Count = 0
    # DeepSeek-V3.2 sparse attention: a lightning indexer picks index_topk keys per query (0 = dense attention).
    index_n_heads: Count = 0
    index_head_dim: Count = 0
    index_topk: Count = 0
    # GLM-5.2 IndexCache: a "shared" layer has no indexer of its own and reuses the top-k of the last "full" one.
    indexer_types: tuple[Literal["full", "shared"], ...] | None = None
    # Per-layer structure, derived by planner.inputs.architecture from the HF keys (interleave_moe_layer_step,
    # hybrid_override_pattern, block_configs, full_attention_interval, ...); None = every layer alike.
    layer_types: tuple[MixerKind, ...] | None = None
    mlp_layer_types: tuple[MlpKind, ...] | None = None
    layer_intermediate_sizes: tuple[Count, ...] | None = None  # per-layer dense MLP width (block_configs ffn_mult)
    sliding_window: Count | None = None  # keys a sliding_attention layer sees
    attention_chunk_size: Count | None = None  # Llama 4 chunked attention: keys restart every chunk
    attn_output_gate: bool = False  # Qwen3-Next / Qwen3.5: q_proj also emits a sigmoid output gate
    shared_expert_intermediate_size: Count = 0  # shared-expert width when not a multiple of the expert width
    # Attention shapes that differ by layer kind: MiMo-V2 sliding layers (swa_*), Gemma 4 global layers (global_*,
    # attention_k_eq_v: V reuses the K projection). 0 = same as the other layers.
    swa_num_attention_heads: Count = 0
    swa_num_key_value_heads: Count = 0
    swa_head_dim: Count = 0
    swa_v_head_dim: Count = 0
    num_global_key_value_heads: Count = 0
    global_head_dim: Count = 0
    attention_k_eq_v: bool = False
    # Gated DeltaNet linear attention (Qwen3-Next); HF key names.
    linear_num_key_heads: Count = 0
    linear_num_value_heads: Count = 0
    linear_key_head_dim: Count = 0
    linear_value_head_dim: Count = 0
    linear_conv_kernel_dim: Count = 4
    # Mamba-2 mixer (Nemotron-H); HF key names.
    mamba_num_heads: Count = 0
    mamba_head_dim: Count = 0
    ssm_state_size: Count = 0
    n_groups: Count = 1
    conv_kernel: Count = 4
    chunk_size: Count = 128
    # Mamba-1 mixer (Jamba): inner width = mamba_expand x hidden_size, Δ through a rank-mamba_dt_rank projection.
    mamba_expand: Count = 0
    mamba_dt_rank: Count = 0
    # Multi-token prediction modules trained alongside the model (DeepSeek-V3 §2.2); not in total_params.
    num_nextn_predict_layers: Count = 0
    # Architecture details that cost nothing to speak of but that a launch must reproduce: biases on the attention
    # projections (HF attention_bias) and on the MLP / expert projections (HF mlp_bias; gpt-oss's experts always),
    # a learnable per-head sink logit in the softmax (gpt-oss), and gpt-oss's clamp of its SwiGLU inputs.
    attention_bias: bool = False
    mlp_bias: bool = False
    attention_sinks: bool = False
    swiglu_limit: float | None = Field(default=None, gt=0)
    published_params: float | None = Field(default=None, gt=0)
    source: str | None = None

    @model_validator(mode="after")
    def _check(self) -> ModelSpec:
        kv = self.kv_heads
        if self.num_attention_heads % kv:
            raise ValueError(
                f"num_attention_heads ({self.num_attention_heads}) must be a multiple of num_key_value_heads ({kv})"
            )
        if self.head_dim is None and self.kv_lora_rank == 0 and self.hidden_size % self.num_attention_heads:
            raise ValueError(
                f"hidden_size ({self.hidden_size}) must be divisible by num_attention_heads "
                f"({self.num_attention_heads}), or set head_dim"
            )
        act = self.hidden_act.lower()
        if act not in GATED_ACTS | PLAIN_ACTS:
            raise ValueError(f"hidden_act '{self.hidden_act}' is not one of {sorted(GATED_ACTS | PLAIN_ACTS)}")
        if self.num_local_experts:
            if not 0 < self.num_experts_per_tok <= self.num_local_experts:
                raise ValueError("num_experts_per_tok must be between 1 and num_local_experts for a MoE model")
            if self.first_k_dense_replace > self.num_hidden_layers:
                raise ValueError("first_k_dense_replace cannot exceed num_hidden_layers")
        if self.kv_lora_rank and not (self.qk_nope_head_dim + self.qk_rope_head_dim and self.v_head_dim):
            raise ValueError("multi-head latent attention (kv_lora_rank > 0) needs qk_nope_head_dim or "
                             "qk_rope_head_dim, and v_head_dim")
        self._check_layers()
        return self

    def _check_layers(self) -> None:
        """Per-layer lists match num_hidden_layers, and every layer kind has the keys its formulas need."""
        n = self.num_hidden_layers
        for key in ("layer_types", "mlp_layer_types", "layer_intermediate_sizes", "indexer_types"):
            value = getattr(self, key)
            if value is not None and len(value) != n:
                raise ValueError(f"{key} lists {len(value)} layers but num_hidden_layers is {n}")
        kinds = set(self.mixer_kinds)
        needs = {"sliding_attention": ("sliding_window",), "chunked_attention": ("attention_chunk_size",),
                 "linear_attention": ("linear_num_key_heads", "linear_num_value_heads", "linear_key_head_dim",
                                      "linear_value_head_dim"),
                 "mamba": ("mamba_num_heads", "mamba_head_dim", "ssm_state_size"),
                 "mamba1": ("mamba_expand", "ssm_state_size", "mamba_dt_rank")}
        for kind, keys in needs.items():
            missing = [k for k in keys if kind in kinds and not getattr(self, k)]
            if missing:
                raise ValueError(f"{kind} layers need {', '.join(missing)}")
        if "moe" in self.mlp_kinds and not self.num_local_experts:
            raise ValueError("mlp_layer_types has MoE layers but num_local_experts is 0")

    def dump(self) -> dict[str, Any]:
        """The spec as reports print it: set fields only, and the per-layer / hybrid keys only where they differ
        from their defaults (a dense Llama's block does not list Mamba and linear-attention keys)."""
        out = self.model_dump(exclude_none=True)
        for key in _OPTIONAL_FIELDS:
            if key in out and out[key] == ModelSpec.model_fields[key].default:
                del out[key]
        return out

    # --- derived shapes ---------------------------------------------------------------------------------------
    @property
    def kv_heads(self) -> int:
        return self.num_key_value_heads or self.num_attention_heads

    @property
    def d_head(self) -> int:
        if self.head_dim:
            return self.head_dim
        return self.hidden_size // self.num_attention_heads

    @property
    def gated_mlp(self) -> bool:
        return self.hidden_act.lower() in GATED_ACTS

    @property
    def mlp_matrices(self) -> int:
        """Weight matrices in one MLP: 3 for gated (SwiGLU/GeGLU), 2 otherwise (Megatron ffn_expansion_factor)."""
        return 3 if self.gated_mlp else 2

    @property
    def is_moe(self) -> bool:
        return self.num_local_experts > 0

    @property
    def is_mla(self) -> bool:
        return self.kv_lora_rank > 0

    @property
    def expert_ffn(self) -> int:
        return self.moe_intermediate_size or self.intermediate_size

    @property
    def mixer_kinds(self) -> tuple[str, ...]:
        """Each layer's token mixer (full attention unless the config says otherwise)."""
        return self.layer_types or ("full_attention",) * self.num_hidden_layers

    @property
    def mlp_kinds(self) -> tuple[str, ...]:
        """Each layer's MLP: the first first_k_dense_replace layers of a MoE model dense, the rest MoE."""
        if self.mlp_layer_types is not None:
            return self.mlp_layer_types
        k = self.first_k_dense_replace if self.is_moe else self.num_hidden_layers
        return ("dense",) * k + ("moe",) * (self.num_hidden_layers - k)

    def layer_ffn(self, index: int) -> int:
        """Width of layer `index`'s dense MLP."""
        if self.layer_intermediate_sizes is not None:
            return self.layer_intermediate_sizes[index]
        return self.intermediate_size

    @property
    def shared_ffn(self) -> int:
        """Total width of a MoE layer's shared experts."""
        return self.shared_expert_intermediate_size or self.expert_ffn * self.n_shared_experts

    @property
    def moe_layers(self) -> int:
        return self.mlp_kinds.count("moe") if self.is_moe else 0

    @property
    def dense_layers(self) -> int:
        return self.num_hidden_layers - self.moe_layers


# Keys a report omits while at their defaults: everything from moe_latent_size and the sparse-attention keys on.
_OPTIONAL_FIELDS = ("moe_latent_size", "index_n_heads", "index_head_dim", "index_topk", "indexer_types", "layer_types",
                    "mlp_layer_types", "layer_intermediate_sizes", "sliding_window", "attention_chunk_size",
                    "attn_output_gate", "shared_expert_intermediate_size", "swa_num_attention_heads",
                    "swa_num_key_value_heads", "swa_head_dim", "swa_v_head_dim", "num_global_key_value_heads",
                    "global_head_dim", "attention_k_eq_v", "linear_num_key_heads", "linear_num_value_heads",
                    "linear_key_head_dim", "linear_value_head_dim", "linear_conv_kernel_dim", "mamba_num_heads",
                    "mamba_head_dim", "ssm_state_size", "n_groups", "conv_kernel", "chunk_size", "mamba_expand",
                    "mamba_dt_rank",
                    "num_nextn_predict_layers", "attention_bias", "mlp_bias", "attention_sinks", "swiglu_limit")


class GPUSpec(_Spec):
    """One accelerator. Figures are dense (no sparsity) peaks from datasheets; see clusters/gpus.yaml for sources."""

    model_config = ConfigDict(extra="ignore", frozen=True)

    key: str = "custom"
    name: str = "custom GPU"
    memory_gib: Rate = Field(description="HBM capacity; stacks are binary-sized, so the datasheet's 80 GB is 80 GiB")
    bf16_tflops: Rate
    fp8_tflops: Rate | None = None
    fp4_tflops: Rate | None = None
    hbm_tbps: Rate = Field(description="HBM bandwidth, TB/s")
    nvlink_gbps: Rate = Field(description="NVLink/XGMI bandwidth per GPU per direction, GB/s")
    nvlink_domain: int = Field(default=8, gt=0, le=MAX_SIZE)
    network_gbps: Rate = Field(default=50.0, description="scale-out bandwidth per GPU per direction, GB/s")
    host_link_gbps: Rate = Field(default=64.0, description="GPU <-> CPU bandwidth per GPU per direction, GB/s "
                                 "(PCIe Gen5 x16 unless the catalog says; NVLink-C2C on Grace parts)")
    nic_shares_host_link: bool = Field(default=True, description="the GPU's host link (PCIe) also carries its NIC's "
                                       "GPUDirect traffic; False where the host link is NVLink-C2C")
    host_memory_gib: Rate = Field(default=256.0, description="CPU memory per GPU, GiB, for activations offloaded "
                                  "to the host (a DGX-class node's 2 TB over 8 GPUs unless the catalog says)")
    matmul_efficiency: Efficiency = Field(default=0.8, description="best achievable bf16 GEMM / peak (MAMF)")
    fp8_matmul_efficiency: Efficiency | None = Field(default=None, description="best fp8 GEMM / fp8 peak")
    fp8_blockwise_matmul_efficiency: Efficiency | None = Field(default=None, description=(
        "fp8 GEMMs with 1x128 / 128x128 block scales (DeepSeek-V3 recipe) / fp8 peak, on GPUs whose tensor cores "
        "lack block scaling and promote partial sums on CUDA cores (Hopper); None = block scaling is native"))
    attention_efficiency: Efficiency = Field(default=0.5, description="fused attention kernel / peak")
    host_cpu: Literal["x86", "grace"] = Field(default="x86", description=(
        "host CPU issuing the kernels: x86 (HGX, DGX, MI300X nodes) or grace (GH200, GB200, GB300); planner.cost.host"))
    sm_count: int | None = Field(default=None, gt=0, le=10_000,
                                 description="streaming multiprocessors (AMD: compute units) for GEMM wave "
                                             "quantisation; None = no wave model")

    def peak_tflops(self, precision: str) -> float:
        if precision == "fp8" and self.fp8_tflops:
            return self.fp8_tflops
        if precision == "fp4" and self.fp4_tflops:
            return self.fp4_tflops
        if precision == "fp4" and self.fp8_tflops:
            return self.fp8_tflops
        return self.bf16_tflops


class ClusterSpec(_Spec):
    """The GPUs and their network: `tiers` level by level (planner.inputs.network), or two tiers described by
    nvlink_domain, network_gbps and oversubscription, which a tiered cluster reads off its first two tiers."""

    model_config = ConfigDict(extra="ignore", frozen=True)

    name: str = "custom"
    gpu: GPUSpec
    num_gpus: Size
    gpus_per_node: int = Field(default=8, gt=0, le=MAX_SIZE)
    tiers: tuple[Tier, ...] | None = Field(default=None, description="the network, NVLink first; None: the two below")
    nvlink_domain: int = Field(default=8, gt=0, le=MAX_SIZE, description="GPUs that share one NVLink/NVSwitch fabric")
    network_gbps: Rate = Field(description="scale-out bandwidth per GPU per direction, GB/s")
    # Not priced: collective latencies use NCCL's per-hop figures (planner.cost.fabric); a tiered file sets latency_us
    # per tier. Kept so that older files and plan documents read back unchanged.
    network_latency_us: float = Field(default=5.0, ge=0, le=1e6)
    oversubscription: float = Field(default=1.0, ge=1.0, le=1000.0,
                                    description="fabric oversubscription above a rail group")
    reliability: ReliabilitySpec = Field(default_factory=ReliabilitySpec)  # planner.inputs.resilience
    storage: StorageSpec = Field(default_factory=StorageSpec)

    @model_validator(mode="before")
    @classmethod
    def _legacy_from_tiers(cls, data: Any) -> Any:
        """With `tiers`, the two-tier fields are the first two tiers' (a tier's own errors are reported on it)."""
        tiers = data.get("tiers") if isinstance(data, dict) else None
        if not isinstance(tiers, list | tuple) or len(tiers) < 2:
            return data

        def read(tier: Any, key: str) -> Any:
            return tier.get(key) if isinstance(tier, dict) else getattr(tier, key, None)

        derived = {"nvlink_domain": read(tiers[0], "size"), "network_gbps": read(tiers[1], "gbps"),
                   "oversubscription": read(tiers[1], "oversubscription")}
        return {**data, **{k: v for k, v in derived.items() if v is not None}}

    @field_validator("tiers")
    @classmethod
    def _nested(cls, tiers: tuple[Tier, ...] | None, info: ValidationInfo) -> tuple[Tier, ...] | None:
        if tiers is not None:
            check_tiers(tiers, info.data.get("num_gpus"))
        return tiers

    @model_validator(mode="after")
    def _check(self) -> ClusterSpec:
        if self.num_gpus < self.gpus_per_node:
            object.__setattr__(self, "gpus_per_node", self.num_gpus)
        if self.nvlink_domain > self.num_gpus:
            object.__setattr__(self, "nvlink_domain", self.num_gpus)
        return self

    def network_tiers(self) -> tuple[Tier, ...]:
        """The tiers the cost model prices, innermost first: the file's, or the two a legacy file describes; each
        domain capped at the cluster's GPU count (a job of N GPUs never shares a domain with more)."""
        tiers = self.tiers or legacy_tiers(self.nvlink_domain, self.network_gbps, self.oversubscription,
                                           self.num_gpus)
        return tuple(t if t.size <= self.num_gpus else t.model_copy(update={"size": self.num_gpus}) for t in tiers)

    @property
    def tiered(self) -> bool:
        """More than the two tiers a legacy file describes: the rank order can change what crosses which."""
        return self.tiers is not None and len(self.tiers) > 2


class TrainingSpec(_Spec):
    model_config = ConfigDict(extra="ignore", frozen=True)

    seq_len: int = Field(default=8192, gt=0, le=100_000_000)
    global_batch: int = Field(default=512, gt=0, le=1_000_000_000)
    precision: Precision = "bf16"
    framework: str = "generic"
    optimizer_offload: float = Field(default=0.0, ge=0.0, le=1.0, description=(
        "share of the optimizer states (fp32 master weights, Adam moments) kept and updated in CPU memory "
        "(Megatron --optimizer-offload-fraction; DeepSpeed offload_optimizer moves all of it)"))
    optimizer_moments: Literal["fp32", "bf16"] = Field(default="fp32", description=(
        "dtype of Adam's two moments: bf16 halves them (Megatron-Core precision-aware optimizer, --exp-avg-dtype / "
        "--exp-avg-sq-dtype bf16; DeepSeek-V3 trains with bf16 moments, report §3.3.3); master weights stay fp32"))
    fp8_recipe: Fp8Recipe = Field(default="tensorwise", description=(
        "fp8 scaling granularity: tensorwise = one scale per tensor (Transformer Engine delayed or current scaling; "
        "MXFP8 on Blackwell); blockwise = 1x128 activation tiles and 128x128 weight blocks (DeepSeek-V3 report "
        "§3.3.2, Megatron --fp8-recipe blockwise), which Hopper runs slower"))
    moe_capacity_factor: float | None = Field(default=None, gt=0.0, le=64.0, description=(
        "token dropping: each expert takes at most this many times its even share of a micro-batch's routed tokens "
        "and drops the rest (Megatron-Core --moe-expert-capacity-factor; Switch Transformer's capacity factor); "
        "None = dropless, every routed token is computed"))
    cuda_graphs: Literal["none", "per-layer", "full-iteration"] = Field(default="none", description=(
        "CUDA graph capture: none (eager, Megatron-Core's default); per-layer (each layer, or a dropless MoE layer's "
        "attention + router + dispatch preprocessing); full-iteration (every micro-batch's forward and backward)"))
    cuda_graph_modules: tuple[GraphModule, ...] | None = Field(default=None, description=(
        "with per-layer capture, the modules captured (Megatron-Core --cuda-graph-modules, formerly "
        "--cuda-graph-scope: attn, mlp (dense layers), moe (drop-and-pad MoE layers), moe_router, moe_preprocess "
        "(needs moe_router), mamba); None = the whole layer where its shapes are static, a dropless MoE layer's "
        "attention, router and dispatch preprocessing"))
    moe_dispatcher: Literal["stack", "alltoall", "flex"] = Field(default="stack", description=(
        "MoE token dispatcher: stack (the framework's: DeepEP where it ships it), alltoall, or flex (DeepEP/HybridEP, "
        "node-deduplicated)"))
    moe_pad_to_capacity: bool = Field(default=False, description=(
        "pad every expert's input to its capacity (Megatron-Core --moe-pad-expert-input-to-capacity): static shapes "
        "and the work of a full capacity whatever the routing; needs moe_capacity_factor"))
    moe_force_balance: bool = Field(default=False, description=(
        "the router spreads tokens evenly over the experts (Megatron-Core --moe-router-force-load-balancing, a "
        "benchmarking switch): every expert-parallel rank carries the mean load; off, the router's learned routing "
        "leaves the busiest rank the fitted expert imbalance above it"))
    moe_router_fusion: bool | None = Field(default=None, description=(
        "the MoE router runs as Transformer Engine's fused top-k, score and aux-loss kernels (Megatron-Core "
        "--moe-router-fusion / NeMo model.moe_router_fusion): fewer host-side ops per MoE layer; None = as the "
        "framework's recipes ship it (planner.cost.profiles)"))
    tp_comm_overlap: bool | None = Field(default=None, description=(
        "TP collectives overlapped with the GEMMs beside them (Megatron --tp-comm-overlap / NeMo tp_comm_overlap: TE "
        "userbuffers; torchtitan async TP); None = as the framework's recipes ship it (planner.cost.profiles)"))
    attention_kernel: Literal["stack", "unfused", "fp8"] = Field(default="stack", description=(
        "the attention core's kernel: stack (the framework's fused or flash attention where it has one); unfused "
        "(batched GEMMs over the s x s scores in HBM), which Transformer Engine 2.1-2.4 fell back to for head dims "
        "above 128 on Blackwell (MLA's 192); or fp8 (Transformer Engine's fp8 attention, Megatron-Core "
        "fp8_dot_product_attention, priced at the bf16 rate; with attention sinks it runs cuDNN's unified engine, "
        "planner.cost.profiles.sink_attention_all_tiles)"))
    param_offload: bool = Field(default=False, description="ZeRO-3 parameters in host memory (offload_param)")
    torch_compile: bool | None = Field(default=None, description=(
        "the model compiled with torch.compile (torchtitan [compile]; Hugging Face --torch_compile); None = as the "
        "framework runs by default (planner.cost.profiles)"))
    optimizer: Literal["adam", "muon"] = Field(default="adam", description=(
        "adam (AdamW, the frameworks' default) or muon (Megatron-Core's layer-wise distributed Muon, --optimizer "
        "dist_muon: Newton-Schulz-orthogonalised momentum for the 2-D matrices, Adam for embeddings and norms; one "
        "fp32 momentum, fp32 gradients all-reduced, the updated parameters all-gathered after the step)"))
    pipeline_layout: tuple[NonNegativeInt, ...] | None = Field(default=None, description=(
        "decoder layers of each pipeline model chunk, in model order (chunk s on pipeline rank s % pp), as a run "
        "states them (Megatron-Core --pipeline-model-parallel-layout; a chunk may hold only the embedding, the MTP "
        "block or the loss); priced on the layouts with pp x vpp chunks. "
        "None = the planner's own split (planner.inputs.layout.chunk_layers)"))

    @model_validator(mode="after")
    def _check_capacity(self) -> TrainingSpec:
        if self.optimizer == "muon" and (self.optimizer_moments != "fp32" or self.optimizer_offload > 0):
            # Megatron-Core muon.py: "TODO support precision aware optimizer", which bf16 moments and CPU offload need
            raise ValueError("muon keeps one fp32 momentum and runs on the GPU: bf16 moments and optimizer offload "
                             "are Adam's (Megatron-Core's precision-aware optimizer)")
        if self.attention_kernel == "fp8" and self.precision not in ("fp8", "fp4"):
            # Transformer Engine runs fp8 attention only inside an fp8 autocast (fp8_dpa of the fp8 recipe)
            raise ValueError("attention_kernel fp8 (Transformer Engine's fp8 attention) needs an fp8 or fp4 recipe")
        if self.moe_pad_to_capacity and self.moe_capacity_factor is None:
            # Megatron-Core TransformerConfig.__post_init__ raises the same (transformer_config.py)
            raise ValueError("moe_pad_to_capacity needs moe_capacity_factor (padding is to each expert's capacity)")
        modules = self.cuda_graph_modules
        if modules is not None:
            # Megatron-Core TransformerConfig.__post_init__ asserts these (transformer_config.py cuda_graph_modules)
            if self.cuda_graphs != "per-layer":
                raise ValueError("cuda_graph_modules name what per-layer capture takes; it needs cuda_graphs per-layer")
            if "moe_preprocess" in modules and "moe_router" not in modules:
                raise ValueError("moe_preprocess is captured with the router: add moe_router")
            if "moe" in modules and ({"moe_router", "moe_preprocess"} & set(modules)):
                raise ValueError("moe captures the whole MoE layer: drop moe_router and moe_preprocess")
            if "moe" in modules and not self.moe_pad_to_capacity:
                raise ValueError("moe captures only drop-and-pad MoE layers (static shapes): pad to capacity, or "
                                 "capture moe_router and moe_preprocess")
        return self


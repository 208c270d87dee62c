"""Typed input specs: the model (Hugging Face config.json keys), the GPU, the cluster, the training run.

Validation lives here so that every caller (CLI, validate, tests) gets the same one-line errors.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal, get_args

from pydantic import BaseModel, ConfigDict, Field, ValidationInfo, field_validator, model_validator

GATED_ACTS = {"silu", "swiglu", "gelu_gated", "geglu", "swish"}
PLAIN_ACTS = {"gelu", "gelu_new", "gelu_pytorch_tanh", "relu", "relu2", "squared_relu", "gelu_fast"}
Precision = Literal["bf16", "fp8", "fp4"]
# Bounds on every size and physical figure: far beyond any real model or machine, and tight enough that the cost
# model's float arithmetic stays finite and the divisor enumerations stay short (a hostile 1e30 is an input error).
MAX_SIZE = 10_000_000  # model dimensions, expert counts, GPUs
MIN_RATE, MAX_RATE = 1e-3, 1e9  # TFLOPS, TB/s, GB/s, GiB
MIN_EFFICIENCY = 0.01
Size = Annotated[int, Field(gt=0, le=MAX_SIZE)]
Count = Annotated[int, Field(ge=0, le=MAX_SIZE)]  # 0 = feature off
Rate = Annotated[float, Field(ge=MIN_RATE, le=MAX_RATE)]
Efficiency = Annotated[float, Field(ge=MIN_EFFICIENCY, le=1)]


def _is_number(annotation: Any) -> bool:
    return annotation in (int, float) or any(_is_number(a) for a in get_args(annotation))  # unwraps Optional


class _Spec(BaseModel):
    """Shared validation for every input spec: finite numbers only, and true/false is not a number (pydantic would
    otherwise read `num_gpus: true` as 1)."""

    model_config = ConfigDict(extra="ignore", frozen=True, allow_inf_nan=False)

    @field_validator("*", mode="before")
    @classmethod
    def _no_bool_numbers(cls, value: Any, info: ValidationInfo) -> Any:
        field = cls.model_fields.get(info.field_name or "")
        if isinstance(value, bool) and field is not None and _is_number(field.annotation):
            raise ValueError("expected a number, not true/false")
        return value


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
    # Group-limited routing (DeepSeek-V3 node-limited routing): experts in n_group groups, each token uses topk_group.
    n_group: Count = 0
    topk_group: Count = 0
    # Multi-head latent attention (DeepSeek-V2/V3); 0 = standard attention.
    kv_lora_rank: Count = 0
    q_lora_rank: Count = 0
    qk_rope_head_dim: Count = 0
    qk_nope_head_dim: Count = 0
    v_head_dim: Count = 0
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
        return self

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
    def moe_layers(self) -> int:
        return self.num_hidden_layers - self.first_k_dense_replace if self.is_moe else 0

    @property
    def dense_layers(self) -> int:
        return self.num_hidden_layers - self.moe_layers


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
    matmul_efficiency: Efficiency = Field(default=0.8, description="best achievable bf16 GEMM / peak (MAMF)")
    fp8_matmul_efficiency: Efficiency | None = Field(default=None, description="best fp8 GEMM / fp8 peak")
    attention_efficiency: Efficiency = Field(default=0.5, description="fused attention kernel / peak")
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
    model_config = ConfigDict(extra="ignore", frozen=True)

    name: str = "custom"
    gpu: GPUSpec
    num_gpus: Size
    gpus_per_node: int = Field(default=8, gt=0, le=MAX_SIZE)
    nvlink_domain: int = Field(default=8, gt=0, le=MAX_SIZE, description="GPUs that share one NVLink/NVSwitch fabric")
    network_gbps: Rate = Field(description="scale-out bandwidth per GPU per direction, GB/s")
    network_latency_us: float = Field(default=5.0, ge=0, le=1e6)
    oversubscription: float = Field(default=1.0, ge=1.0, le=1000.0,
                                    description="fabric oversubscription above a rail group")

    @model_validator(mode="after")
    def _check(self) -> ClusterSpec:
        if self.num_gpus < self.gpus_per_node:
            object.__setattr__(self, "gpus_per_node", self.num_gpus)
        if self.nvlink_domain > self.num_gpus:
            object.__setattr__(self, "nvlink_domain", self.num_gpus)
        return self


class TrainingSpec(_Spec):
    model_config = ConfigDict(extra="ignore", frozen=True)

    seq_len: int = Field(default=8192, gt=0, le=100_000_000)
    global_batch: int = Field(default=512, gt=0, le=1_000_000_000)
    precision: Precision = "bf16"
    framework: str = "generic"


class Layout(BaseModel):
    """One point of the search space (what `--fix` and `explain --layout` set)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    tp: int = 1
    pp: int = 1
    dp: int = 1
    cp: int = 1
    ep: int = 1
    vpp: int = 1
    micro_batch: int = 1
    zero: int = 1
    recompute: Literal["none", "selective", "full"] = "none"
    sequence_parallel: bool = False
    schedule: Literal["1f1b", "interleaved", "zb-h1", "zb-h2"] = "1f1b"

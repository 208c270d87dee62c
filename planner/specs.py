"""Typed input specs: the model (Hugging Face config.json keys), the GPU, the cluster, the training run.

Validation lives here so that every caller (CLI, validate, tests) gets the same one-line errors.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

GATED_ACTS = {"silu", "swiglu", "gelu_gated", "geglu", "swish"}
PLAIN_ACTS = {"gelu", "gelu_new", "gelu_pytorch_tanh", "relu", "relu2", "squared_relu", "gelu_fast"}
Precision = Literal["bf16", "fp8", "fp4"]


class ModelSpec(BaseModel):
    """A decoder-only transformer, described with Hugging Face `config.json` key names."""

    model_config = ConfigDict(extra="ignore", frozen=True)

    name: str = "custom"
    hidden_size: int = Field(gt=0)
    num_hidden_layers: int = Field(gt=0)
    num_attention_heads: int = Field(gt=0)
    num_key_value_heads: int | None = Field(default=None, gt=0)
    intermediate_size: int = Field(gt=0)
    vocab_size: int = Field(gt=1)
    head_dim: int | None = Field(default=None, gt=0)
    hidden_act: str = "silu"
    tie_word_embeddings: bool = False
    max_position_embeddings: int | None = Field(default=None, gt=0)
    # Mixture of experts (0 = dense). Aliases num_experts / n_routed_experts are folded in by the catalog loader.
    num_local_experts: int = Field(default=0, ge=0)
    num_experts_per_tok: int = Field(default=0, ge=0)
    moe_intermediate_size: int = Field(default=0, ge=0)
    n_shared_experts: int = Field(default=0, ge=0)
    first_k_dense_replace: int = Field(default=0, ge=0)
    # Multi-head latent attention (DeepSeek-V2/V3); 0 = standard attention.
    kv_lora_rank: int = Field(default=0, ge=0)
    q_lora_rank: int = Field(default=0, ge=0)
    qk_rope_head_dim: int = Field(default=0, ge=0)
    qk_nope_head_dim: int = Field(default=0, ge=0)
    v_head_dim: int = Field(default=0, ge=0)
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


class GPUSpec(BaseModel):
    """One accelerator. Figures are dense (no sparsity) peaks from datasheets; see clusters/gpus.yaml for sources."""

    model_config = ConfigDict(extra="ignore", frozen=True)

    key: str = "custom"
    name: str = "custom GPU"
    memory_gib: float = Field(gt=0, description="HBM capacity; stacks are binary-sized, so the datasheet's 80 GB is 80 GiB")
    bf16_tflops: float = Field(gt=0)
    fp8_tflops: float | None = Field(default=None, gt=0)
    fp4_tflops: float | None = Field(default=None, gt=0)
    hbm_tbps: float = Field(gt=0, description="HBM bandwidth, TB/s")
    nvlink_gbps: float = Field(gt=0, description="NVLink/XGMI bandwidth per GPU per direction, GB/s")
    nvlink_domain: int = Field(default=8, gt=0)
    network_gbps: float = Field(default=50.0, gt=0, description="scale-out bandwidth per GPU per direction, GB/s")
    matmul_efficiency: float = Field(default=0.8, gt=0, le=1, description="best achievable bf16 GEMM / peak (MAMF)")
    fp8_matmul_efficiency: float | None = Field(default=None, gt=0, le=1, description="best fp8 GEMM / fp8 peak")
    attention_efficiency: float = Field(default=0.5, gt=0, le=1, description="fused attention kernel / peak")

    def peak_tflops(self, precision: str) -> float:
        if precision == "fp8" and self.fp8_tflops:
            return self.fp8_tflops
        if precision == "fp4" and self.fp4_tflops:
            return self.fp4_tflops
        if precision == "fp4" and self.fp8_tflops:
            return self.fp8_tflops
        return self.bf16_tflops


class ClusterSpec(BaseModel):
    model_config = ConfigDict(extra="ignore", frozen=True)

    name: str = "custom"
    gpu: GPUSpec
    num_gpus: int = Field(gt=0, le=10_000_000)
    gpus_per_node: int = Field(default=8, gt=0)
    nvlink_domain: int = Field(default=8, gt=0, description="GPUs that share one NVLink/NVSwitch fabric")
    network_gbps: float = Field(gt=0, description="scale-out bandwidth per GPU per direction, GB/s")
    network_latency_us: float = Field(default=5.0, ge=0)
    oversubscription: float = Field(default=1.0, ge=1.0, description="fabric oversubscription above a rail group")

    @model_validator(mode="after")
    def _check(self) -> ClusterSpec:
        if self.num_gpus < self.gpus_per_node:
            object.__setattr__(self, "gpus_per_node", self.num_gpus)
        if self.nvlink_domain > self.num_gpus:
            object.__setattr__(self, "nvlink_domain", self.num_gpus)
        return self


class TrainingSpec(BaseModel):
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

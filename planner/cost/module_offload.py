"""Which saved tensors recompute=offload-modules keeps in host memory, in bytes per token of one average layer.

Megatron-Core's fine-grained activation offloading (TransformerConfig.fine_grained_activation_offloading with
offload_modules; core_v0.16.1 pipeline_parallel/fine_grained_activation_offload.py) wraps each listed module's
forward in saved-tensor hooks: every tensor that module saves for its backward, if it has at least
min_offloaded_tensor_size elements (default 1 Mi), is copied to pinned host memory on a side stream when the module's
group commits, and reloaded one group ahead in the backward. The planner offloads one fixed module set
(planner.inputs.frameworks.offload_modules, which launchers state):
  - core_attn + attn_proj on every attention layer: what fused attention saves (Q, K, V and its output, which is also
    the output projection's input; Megatron-Core refuses attn_proj without core_attn because they share that tensor).
    The fp32 log-sum-exp (a·s values per sequence) stays: at 4k tokens and 128 heads it is under 1 Mi elements;
  - expert_fc1 on MoE layers: the routed experts' fc1 inputs (the permuted tokens, one per routed copy).
These are the two sets Megatron-Bridge's DeepSeek-V3 perf recipes offload (perf_recipes/deepseek/common.py:
["core_attn", "attn_proj"]; gb200/deepseek_v3.py: ["expert_fc1"]), and the modules Megatron-Core's guide
(docs/user-guide/features/fine_grained_activation_offloading.md) says to offload rather than recompute: the cheap
ones (norms, the MoE activation) are better recomputed, and this mode recomputes nothing. The norm and QKV inputs
stay on the GPU, so the layer's input need not be reloaded before its backward starts.
"""

from __future__ import annotations

import numpy as np

from planner.inputs.specs import ATTENTION_KINDS, ModelSpec


def offloaded_bytes_per_token(m: ModelSpec, attention: np.ndarray, tp: np.ndarray, fp8: bool,
                              routed_load: float) -> np.ndarray:
    """Bytes per token an average layer moves to the host, per GPU:
        attention_share x (attention - LSE - MLA's kept K-nope half) + moe_share x routed_load x k x g·h / tp
    `attention`: memory.layer_activation_terms' "attention" term (Q, K, V, output and a 4-byte LSE per head, /tp);
    g: bytes per saved GEMM input (1 in fp8: Transformer Engine saves the fp8 cast). With MLA the kv up-projection's
    K-nope half is kept by the layer outside core attention (memory.layer_activation_terms), so it stays."""
    tp = np.maximum(tp, 1)
    a = m.num_attention_heads
    core = attention - 4.0 * a / tp
    if m.is_mla:
        core = core - 2.0 * a * m.qk_nope_head_dim / tp
    attn_share = sum(kind in ATTENTION_KINDS for kind in m.mixer_kinds) / m.num_hidden_layers
    out = attn_share * core
    if m.is_moe and m.moe_layers:
        gemm_in = 1.0 if fp8 else 2.0
        fc1 = routed_load * m.num_experts_per_tok * gemm_in * m.hidden_size / tp
        out = out + m.moe_layers / m.num_hidden_layers * fc1
    return out

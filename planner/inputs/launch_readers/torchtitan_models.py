"""torchtitan's model flavors as Hugging Face config keys: what a job config's [model] name / flavor builds.

Transcribed from torchtitan @v0.2.2 (torchtitan/models/<name>/__init__.py flavor tables and model/args.py defaults):
llama3 feed-forward widths are torchtitan's 4 x dim -> 2/3 -> x ffn_dim_multiplier -> rounded up to multiple_of
(model.py FeedForward); Llama 4's expert width is the same divided by top_k + shared experts (auto_scale_hidden_dim),
every layer attends causally over the whole sequence (every_n_layers_nope unset), MoE on every
interleave_moe_layer_step-th layer; DeepSeek-V3's 671B flavor has no multi-token-prediction module in torchtitan.
"""

from __future__ import annotations

from typing import Any


def _llama3(layers: int, dim: int, heads: int, ffn: int) -> dict[str, Any]:
    return {"num_hidden_layers": layers, "hidden_size": dim, "num_attention_heads": heads, "num_key_value_heads": 8,
            "intermediate_size": ffn, "vocab_size": 128256, "hidden_act": "silu", "tie_word_embeddings": False}


def _llama4(experts: int, interleave: int) -> dict[str, Any]:
    return {"model_type": "llama4_text", "num_hidden_layers": 48, "hidden_size": 5120, "num_attention_heads": 40,
            "num_key_value_heads": 8, "head_dim": 128, "intermediate_size": 8192, "intermediate_size_mlp": 16384,
            "num_local_experts": experts, "num_experts_per_tok": 1, "interleave_moe_layer_step": interleave,
            "vocab_size": 202048, "hidden_act": "silu", "tie_word_embeddings": False}


def _qwen3(layers: int, dim: int, heads: int, ffn: int, tied: bool) -> dict[str, Any]:
    return {"num_hidden_layers": layers, "hidden_size": dim, "num_attention_heads": heads, "num_key_value_heads": 8,
            "head_dim": 128, "intermediate_size": ffn, "vocab_size": 151936, "hidden_act": "silu",
            "tie_word_embeddings": tied}


def _qwen3_moe(layers: int, dim: int, heads: int, moe_ffn: int) -> dict[str, Any]:
    return {"num_hidden_layers": layers, "hidden_size": dim, "num_attention_heads": heads, "num_key_value_heads": 4,
            "head_dim": 128, "intermediate_size": moe_ffn, "moe_intermediate_size": moe_ffn, "num_local_experts": 128,
            "num_experts_per_tok": 8, "vocab_size": 151936, "hidden_act": "silu", "tie_word_embeddings": False}


_DSV3_MLA = {"kv_lora_rank": 512, "qk_nope_head_dim": 128, "qk_rope_head_dim": 64, "v_head_dim": 128,
             "hidden_act": "silu", "tie_word_embeddings": False}

FLAVORS: dict[tuple[str, str], dict[str, Any]] = {
    ("llama3", "8b"): _llama3(32, 4096, 32, 14336),
    ("llama3", "70b"): _llama3(80, 8192, 64, 28672),
    ("llama3", "405b"): _llama3(126, 16384, 128, 53248),
    ("deepseek_v3", "16b"): {"num_hidden_layers": 27, "hidden_size": 2048, "num_attention_heads": 16,
                             "intermediate_size": 10944, "moe_intermediate_size": 1408, "num_local_experts": 64,
                             "num_experts_per_tok": 6, "n_shared_experts": 2, "first_k_dense_replace": 1,
                             "vocab_size": 102400, "q_lora_rank": 0, **_DSV3_MLA},
    ("deepseek_v3", "671b"): {"num_hidden_layers": 61, "hidden_size": 7168, "num_attention_heads": 128,
                              "num_key_value_heads": 128, "intermediate_size": 18432, "moe_intermediate_size": 2048,
                              "num_local_experts": 256, "num_experts_per_tok": 8, "n_shared_experts": 1,
                              "first_k_dense_replace": 3, "n_group": 8, "topk_group": 4, "scoring_func": "sigmoid",
                              "vocab_size": 129280, "q_lora_rank": 1536, **_DSV3_MLA},
    ("llama4", "17bx16e"): _llama4(16, 1),
    ("llama4", "17bx128e"): _llama4(128, 2),
    ("qwen3", "0.6b"): _qwen3(28, 1024, 16, 3072, True),
    ("qwen3", "1.7b"): _qwen3(28, 2048, 16, 6144, True),
    ("qwen3", "32b"): _qwen3(64, 5120, 64, 25600, False),
    # torchtitan@b5bcd76c torchtitan/models/qwen3/__init__.py (_14b, _30b_a3b, _235b_a22b): Qwen's published shapes.
    ("qwen3", "14b"): _qwen3(40, 5120, 40, 17408, False),
    ("qwen3", "30b-a3b"): _qwen3_moe(48, 2048, 32, 768),
    ("qwen3", "235b-a22b"): _qwen3_moe(94, 4096, 64, 1536),
}

# Flavors that are a catalog model as published (same shape, attention sinks and windows included): torchtitan's
# gpt-oss (torchtitan@b5bcd76c torchtitan/models/gpt_oss/__init__.py: 36 layers of 128 experts, top 4, hidden 2880,
# a 128-token window on the even layers, sinks) is OpenAI's gpt-oss-120b.
CATALOG: dict[tuple[str, str], str] = {("gpt_oss", "120b"): "gpt-oss-120b"}

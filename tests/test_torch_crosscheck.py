"""Cross-check planner/cost/flops.py against real PyTorch modules (tests/torch_reference.py).

FLOPs are counted by torch.utils.flop_counter.FlopCounterMode (2 FLOPs per multiply-accumulate, the convention of
flops.py), on the `meta` device (shapes only, so real catalog sizes cost nothing) and on CPU with tiny tensors (to
run real top-k routing and a real backward pass). The reference attention core is non-causal (full s x s), so the
causal figure of token_flops() is compared with half of what is counted.

Parameter counts: sum(numel) of a reference layer equals dense_layer_params / moe_layer_shared_params +
expert_params except for terms flops.py deliberately ignores, which the tests add back explicitly: Linear biases,
LayerNorm biases, and MLA's q_a/kv_a RMSNorm weights.

The catalog-vs-published check at the bottom needs no torch; everything else is skipped without it.
"""

from __future__ import annotations

import re

import pytest

from planner.cost.flops import (
    active_params,
    attention_core_flops,
    dense_layer_params,
    expert_params,
    lm_head_flops,
    mlp_params,
    model_flops_per_token,
    moe_layer_shared_params,
    mtp_flops,
    token_flops,
    total_params,
)
from planner.inputs.catalog import load_model, model_catalog
from planner.inputs.specs import ModelSpec

TOL = 0.01  # the brief: within 1 %; the formulas are exact, so every measured difference below is 0
CATALOG = sorted(model_catalog())

SMALL = {
    # Llama-style, GQA (8 query heads share 2 K/V heads), SwiGLU
    "llama-gqa": dict(hidden_size=256, num_hidden_layers=2, num_attention_heads=8, num_key_value_heads=2,
                      intermediate_size=688, vocab_size=1000, hidden_act="silu"),
    # GPT-style: MHA, 2-matrix GELU MLP, tied embeddings
    "gpt-mha": dict(hidden_size=256, num_hidden_layers=2, num_attention_heads=8, intermediate_size=1024,
                    vocab_size=1000, hidden_act="gelu", tie_word_embeddings=True),
    # head_dim decoupled from hidden_size / heads (Gemma-style), MQA
    "head-dim-mqa": dict(hidden_size=192, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=1,
                         head_dim=80, intermediate_size=512, vocab_size=1000, hidden_act="silu"),
    # Nemotron-style squared-ReLU plain MLP
    "relu2": dict(hidden_size=128, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
                  intermediate_size=512, vocab_size=500, hidden_act="relu2"),
    # Mixtral-style MoE: E=8, top-2, every layer MoE
    "mixtral-moe": dict(hidden_size=128, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
                        intermediate_size=256, vocab_size=500, hidden_act="silu", num_local_experts=8,
                        num_experts_per_tok=2),
    # fine-grained experts (E=64, top-2, narrow): the router GEMM is ~20 % of the MoE FLOPs, so forgetting it fails
    "fine-grained-moe": dict(hidden_size=128, num_hidden_layers=1, num_attention_heads=4, intermediate_size=256,
                             vocab_size=500, hidden_act="silu", num_local_experts=64, num_experts_per_tok=2,
                             moe_intermediate_size=32),
    # DeepSeek-style: MLA, fine-grained experts + 1 shared expert, first layer dense
    "deepseek-mla": dict(hidden_size=128, num_hidden_layers=2, num_attention_heads=4, intermediate_size=320,
                         vocab_size=500, hidden_act="silu", num_local_experts=8, num_experts_per_tok=3,
                         moe_intermediate_size=64, n_shared_experts=1, first_k_dense_replace=1, kv_lora_rank=32,
                         q_lora_rank=48, qk_rope_head_dim=16, qk_nope_head_dim=32, v_head_dim=24),
    # MLA without a query low-rank (DeepSeek-V2-Lite)
    "mla-no-qlora": dict(hidden_size=128, num_hidden_layers=1, num_attention_heads=4, intermediate_size=320,
                         vocab_size=500, hidden_act="silu", kv_lora_rank=32, qk_rope_head_dim=16,
                         qk_nope_head_dim=32, v_head_dim=32),
}
SMALL_SEQ, SMALL_BATCH = 128, 2
CATALOG_SEQ = 4096

DENSE_SMALL = [n for n, d in SMALL.items() if not d.get("num_local_experts") or d.get("first_k_dense_replace")]
MOE_SMALL = [n for n, d in SMALL.items() if d.get("num_local_experts")]
DENSE_CATALOG = [n for n in CATALOG if load_model(n).dense_layers]
MOE_CATALOG = [n for n in CATALOG if load_model(n).is_moe]


@pytest.fixture(autouse=True, scope="module")
def _single_thread():
    """Tiny CPU tensors: one intra-op thread is ~10x faster than two contending for a busy 2-core machine."""
    try:
        import torch
    except ImportError:
        yield
        return
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


def torch_and_ref():
    """Skip the calling test when torch is missing; else (torch, tests/torch_reference.py)."""
    torch = pytest.importorskip("torch")
    import torch_reference  # tests/ is on sys.path (pytest rootdir/prepend import mode)

    return torch, torch_reference


def rel(got: float, want: float) -> float:
    return abs(got - want) / abs(want)


def check(got: float, want: float, what: str) -> None:
    assert rel(got, want) <= TOL, f"{what}: counted {got:.6g}, flops.py {want:.6g} ({rel(got, want):+.3%})"


def spec(name: str) -> ModelSpec:
    return ModelSpec(name=name, **SMALL[name]) if name in SMALL else load_model(name)


def shape_of(name: str) -> tuple[int, int]:
    return (SMALL_BATCH, SMALL_SEQ) if name in SMALL else (1, CATALOG_SEQ)


# --- FLOPs -------------------------------------------------------------------------------------------------------
def layer_flops(m: ModelSpec, moe: bool, device: str, batch: int, seq: int) -> dict[str, int]:
    torch, ref = torch_and_ref()
    torch.manual_seed(0)
    layer = ref.build_layer(m, moe=moe, device=device)
    x = torch.randn(batch, seq, m.hidden_size, device=device)
    with torch.no_grad():
        return ref.count_flops(lambda: layer(x))


@pytest.mark.parametrize("device", ["meta", "cpu"])
@pytest.mark.parametrize("name", DENSE_SMALL)
def test_dense_layer_flops_small(name, device):
    _check_dense_layer(spec(name), device, *shape_of(name))


@pytest.mark.parametrize("name", DENSE_CATALOG)
def test_dense_layer_flops_catalog(name):
    _check_dense_layer(spec(name), "meta", *shape_of(name))


def _check_dense_layer(m: ModelSpec, device: str, batch: int, seq: int) -> None:
    counts = layer_flops(m, False, device, batch, seq)
    tokens = batch * seq
    core = counts["DecoderLayer.attn.core"]
    tf = token_flops(m, seq)
    check(counts["Global"] - core, tf.dense_gemm * tokens, f"{m.name} dense-layer GEMMs")
    # the reference layer attends fully; models with other layer kinds (gpt-oss sliding windows) average them in
    # tf.attention, checked per kind in tests/test_hf_configs.py
    check(core / 2, attention_core_flops(m, seq) * tokens, f"{m.name} causal attention core")
    if m.layer_types is None:
        check(core / 2, tf.attention * tokens, f"{m.name} mean attention core")
    check(core, attention_core_flops(m, seq, causal=False) * tokens, f"{m.name} full attention core")


@pytest.mark.parametrize("device", ["meta", "cpu"])
@pytest.mark.parametrize("name", MOE_SMALL)
def test_moe_layer_flops_small(name, device):
    _check_moe_layer(spec(name), device, *shape_of(name))


@pytest.mark.parametrize("name", MOE_CATALOG)
def test_moe_layer_flops_catalog(name):
    _check_moe_layer(spec(name), "meta", *shape_of(name))


def _check_moe_layer(m: ModelSpec, device: str, batch: int, seq: int) -> None:
    counts = layer_flops(m, True, device, batch, seq)
    tokens = batch * seq
    core = counts["DecoderLayer.attn.core"]
    tf = token_flops(m, seq)
    check(counts["Global"] - core, tf.moe_gemm * tokens, f"{m.name} MoE-layer GEMMs")
    # the reference layer attends fully; models with other layer kinds (gpt-oss sliding windows) average them in
    # tf.attention, checked per kind in tests/test_hf_configs.py
    check(core / 2, attention_core_flops(m, seq) * tokens, f"{m.name} causal attention core")
    if m.layer_types is None:
        check(core / 2, tf.attention * tokens, f"{m.name} mean attention core")
    # the parts: router h x E per token, exactly k routed experts per token whatever the load balance, shared
    check(counts["DecoderLayer.mlp.router"], 2 * m.hidden_size * m.num_local_experts * tokens, f"{m.name} router")
    routed = sum(v for k, v in counts.items() if re.fullmatch(r"DecoderLayer\.mlp\.experts\.\d+", k))
    check(routed, 2 * m.num_experts_per_tok * mlp_params(m, m.expert_ffn) * tokens, f"{m.name} routed experts")
    if m.n_shared_experts:
        shared = 2 * mlp_params(m, m.expert_ffn * m.n_shared_experts) * tokens
        check(counts["DecoderLayer.mlp.shared"], shared, f"{m.name} shared experts")


@pytest.mark.parametrize("name", ["llama-gqa", "gpt-mha", *CATALOG])
def test_lm_head_flops(name):
    torch, ref = torch_and_ref()
    m = spec(name)
    batch, seq = shape_of(name)
    model = ref.ReferenceModel(m.model_copy(update={"num_hidden_layers": 1, "first_k_dense_replace": 0}))
    x = torch.empty(batch, seq, m.hidden_size, device="meta")
    counts = ref.count_flops(lambda: model.head(x))
    check(counts["Global"], lm_head_flops(m) * batch * seq, f"{name} LM head")
    head = token_flops(m, seq).head - mtp_flops(m, seq)  # MTP modules ride with the head (tests/test_hf_configs.py)
    check(counts["Global"], head * batch * seq, f"{name} token_flops.head")


@pytest.mark.parametrize("device", ["meta", "cpu"])
@pytest.mark.parametrize("name", ["llama-gqa", "gpt-mha", "mixtral-moe", "deepseek-mla"])
def test_model_flops_per_token_forward_backward(name, device):
    """Whole model: forward + backward GEMM FLOPs are exactly 3 x forward (flops.py's convention), and
    model_flops_per_token equals them with the attention core counted causal (half).

    The core's FLOPs are taken from the forward pass: FlopCounterMode's per-module attribution of backward ops is
    approximate (part of the core's backward lands on k_proj/v_proj), only its total is exact.
    """
    torch, ref = torch_and_ref()
    m = spec(name)
    batch, seq = shape_of(name)
    torch.manual_seed(0)
    model = ref.ReferenceModel(m, device=device)
    ids = torch.randint(0, m.vocab_size, (batch, seq)).to(device)
    with torch.no_grad():
        forward = ref.count_flops(lambda: model(ids))
    both = ref.count_flops(lambda: model(ids).float().pow(2).mean().backward())
    core = sum(v for k, v in forward.items() if k.endswith(".attn.core"))
    tokens = batch * seq
    check(both["Global"], 3 * forward["Global"], f"{name} backward = 2 x forward")
    check(forward["Global"] - core / 2, token_flops(m, seq).model_forward(m) * tokens, f"{name} forward")
    check(both["Global"] - 3 * core / 2, model_flops_per_token(m, seq) * tokens, f"{name} fwd+bwd per token")


@pytest.mark.parametrize("name", ["llama3-8b", "mixtral-8x7b"])
def test_model_forward_catalog(name):
    """A whole catalog model's forward pass on the meta device equals TokenFlops.model_forward."""
    torch, ref = torch_and_ref()
    m = spec(name)
    seq = 2048
    model = ref.ReferenceModel(m)
    ids = torch.zeros(1, seq, dtype=torch.long, device="meta")
    with torch.no_grad():
        counts = ref.count_flops(lambda: model(ids))
    core = sum(v for k, v in counts.items() if k.endswith(".attn.core"))
    check(counts["Global"] - core / 2, token_flops(m, seq).model_forward(m) * seq, f"{name} forward")


# --- parameters ----------------------------------------------------------------------------------------------
def ignored_terms(layer) -> int:
    """What flops.py leaves out of a layer on purpose: Linear/LayerNorm biases, MLA's latent RMSNorms."""
    _, ref = torch_and_ref()
    extra = ref.linear_bias_params(layer) + ref.layer_norm_bias_params(layer)
    if isinstance(layer.attn, ref.MLAttention):
        extra += ref.numel(layer.attn.kv_a_layernorm)
        extra += ref.numel(layer.attn.q_a_layernorm) if hasattr(layer.attn, "q_a_layernorm") else 0
    return extra


@pytest.mark.parametrize("bias", [False, True])
@pytest.mark.parametrize("name", [*SMALL, *CATALOG])
def test_layer_params(name, bias):
    _, ref = torch_and_ref()
    m = spec(name)
    if m.dense_layers:
        layer = ref.build_layer(m, moe=False, bias=bias)
        assert ref.numel(layer) == dense_layer_params(m) + ignored_terms(layer)
        if not bias and m.gated_mlp and not m.is_mla:  # Llama-style: exact, nothing ignored
            assert ref.numel(layer) == dense_layer_params(m)
    if m.is_moe:
        layer = ref.build_layer(m, moe=True)
        assert ref.numel(layer.mlp.experts) == expert_params(m)
        assert ref.numel(layer) - ref.numel(layer.mlp.experts) == moe_layer_shared_params(m) + ignored_terms(layer)


@pytest.mark.parametrize("name", [*SMALL, *CATALOG])
def test_total_and_active_params(name):
    """Whole-model sum(numel) (meta prototypes x layer counts) vs total_params / active_params."""
    _, ref = torch_and_ref()
    m = spec(name)
    extra = 0
    if m.dense_layers:
        extra += m.dense_layers * ignored_terms(ref.build_layer(m, moe=False))
    if m.moe_layers:
        extra += m.moe_layers * ignored_terms(ref.build_layer(m, moe=True))
    extra += 0 if m.gated_mlp else m.hidden_size  # final LayerNorm bias (GPT style)
    assert ref.reference_total_params(m) == total_params(m) + extra
    assert ref.reference_active_params(m) == active_params(m) + extra


def test_small_model_params_are_module_numel():
    """reference_total_params (prototype arithmetic) equals numel of a really built small model."""
    _, ref = torch_and_ref()
    for name in SMALL:
        m = spec(name)
        assert ref.numel(ref.ReferenceModel(m)) == ref.reference_total_params(m), name


# --- catalog vs published (no torch) ------------------------------------------------------------------------
# Published totals are rounded and counted by each publisher's convention: Kimi K2's "1.04 trillion" (arXiv
# 2507.20534) is 1.3 % above the sum over its own config.json (1.026e12). Within 2 %, as tests/test_hf_configs.py.
PUBLISHED_TOL = 0.02


@pytest.mark.parametrize("name", CATALOG)
def test_total_params_match_published(name):
    m = load_model(name)
    assert m.published_params, f"models/{name}.yaml has no published_params"
    assert rel(total_params(m), m.published_params) <= PUBLISHED_TOL, (
        f"{name}: total_params {total_params(m) / 1e9:.3f}e9 vs published {m.published_params / 1e9:.3f}e9"
    )


# Active parameters as published (rounded to the stated digits, hence the looser tolerance than total_params).
PUBLISHED_ACTIVE = {"mixtral-8x7b": 12.9e9, "mixtral-8x22b": 39e9, "deepseek-v3": 37e9}


@pytest.mark.parametrize("name", sorted(PUBLISHED_ACTIVE))
def test_active_params_match_published(name):
    m = load_model(name)
    assert rel(active_params(m), PUBLISHED_ACTIVE[name]) <= 0.02

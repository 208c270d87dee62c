"""FLOPs and parameter counts against the papers' closed forms."""

import pytest
from conftest import gpt

from planner.cost import flops
from planner.inputs.catalog import load_model, model_catalog

# Narayanan et al. 2021, Table 1 shapes (layers, hidden, heads) and the paper's parameter counts (billions).
TABLE1 = [(24, 2304, 24, 1.7), (30, 3072, 32, 3.6), (36, 4096, 32, 7.5), (40, 6144, 48, 18.4),
          (48, 8192, 64, 39.1), (60, 10240, 80, 76.1), (96, 12288, 96, 174.6), (105, 20480, 128, 529.6),
          (128, 25600, 160, 1008.0)]


def narayanan_eq2(layers: int, h: int, v: int = 51200, s: int = 2048) -> float:
    return 12 * layers * h * h * (1 + 13 / (12 * h) + (v + s) / (12 * layers * h))


@pytest.mark.parametrize("layers,h,a,published", TABLE1)
def test_parameter_count_matches_narayanan_eq2(layers, h, a, published):
    m = gpt(layers, h, a)
    ours = flops.total_params(m)
    # Eq. 2 also counts biases (11h per layer) and learned position embeddings (s*h), which we leave out.
    assert ours == pytest.approx(narayanan_eq2(layers, h), rel=0.01)
    assert ours / 1e9 == pytest.approx(published, rel=0.04)  # the table rounds (1.65 -> "1.7")


@pytest.mark.parametrize("layers,h,a,published", TABLE1)
def test_recompute_flops_match_narayanan_eq3(layers, h, a, published):
    """Eq. 3: F = 96 B s l h^2 (1 + s/6h + V/16lh) per iteration with full recompute (non-causal attention)."""
    m, s, v, n = gpt(layers, h, a), 2048, 51200, layers
    tf = flops.token_flops(m, s)
    layer_fwd = tf.dense_gemm + flops.attention_core_flops(m, s, causal=False)
    per_token = 4 * n * layer_fwd + 3 * tf.head  # 4 passes through the layers, 3 through the LM head
    eq3 = 96 * n * h * h * (1 + s / (6 * h) + v / (16 * n * h))
    assert per_token == pytest.approx(eq3, rel=1e-9)


def test_causal_attention_is_half():
    m = gpt(24, 2304, 24)
    assert flops.attention_core_flops(m, 4096) == pytest.approx(flops.attention_core_flops(m, 4096, False) / 2)


def test_gqa_shrinks_only_kv():
    m = load_model("llama3-70b")
    h, d = m.hidden_size, m.d_head
    assert flops.attention_params(m) == h * (64 * d) + h * (2 * 8 * d) + 64 * d * h


def test_swiglu_has_three_matrices():
    m = load_model("llama3-8b")
    assert flops.mlp_params(m, m.intermediate_size) == 3 * 4096 * 14336


def test_moe_active_params_count_top_k():
    m = load_model("mixtral-8x7b")
    assert flops.active_params(m) / 1e9 == pytest.approx(12.9, rel=0.01)  # Mistral: 12.9B active
    assert flops.total_params(m) / 1e9 == pytest.approx(46.7, rel=0.01)


def test_mfu_flops_are_six_n_plus_attention():
    m = load_model("llama3-8b")
    s = 8192
    per_token = flops.model_flops_per_token(m, s)
    n_gemm = flops.total_params(m) - flops.embedding_params(m)  # the embedding lookup is not a GEMM
    attention = 3 * m.num_hidden_layers * flops.attention_core_flops(m, s)
    assert per_token == pytest.approx(6 * n_gemm + attention, rel=0.001)


@pytest.mark.parametrize("name", sorted(model_catalog()))
def test_catalog_parameter_counts_match_published(name):
    m = load_model(name)
    assert flops.total_params(m) == pytest.approx(m.published_params, rel=0.02)  # see test_torch_crosscheck

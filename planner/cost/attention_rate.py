"""Attention kernels' rate relative to the catalog's (GPUSpec.attention_efficiency, for ~8k-token kernels at head
size 128): shorter key ranges (sequence, ring step, window, chunk) and narrower heads run slower. Used by
planner.cost.compute.attention_time."""

from __future__ import annotations

import numpy as np

from planner.cost import flops, mixers
from planner.inputs.specs import GPUSpec, ModelSpec

# FlashAttention's rate falls on short sequences: FA3 (Shah et al. 2024, arXiv 2407.08608 §4.1 Fig. 5, H100, d=128)
# runs at about 0.75x of its 16k-token rate at 512 tokens. A saturating curve L / (L + L0) through those two points
# gives L0 ~ 180 tokens; the catalog's attention efficiencies are for ~8k-token kernels (FA3's ablation at 8448).
ATTENTION_HALF_LENGTH = 180.0
ATTENTION_REFERENCE_LENGTH = 8192.0


def attention_length_factor(length: np.ndarray | float) -> np.ndarray:
    """Attention rate at kernels of `length` query/key tokens relative to the catalog's ~8k-token rate:
    (L / (L + L0)) / (L_ref / (L_ref + L0)). Ring context parallelism runs shorter kernels (ring_length_factor)."""
    length = np.asarray(length, dtype=float)
    ref = ATTENTION_REFERENCE_LENGTH / (ATTENTION_REFERENCE_LENGTH + ATTENTION_HALF_LENGTH)
    return length / (length + ATTENTION_HALF_LENGTH) / ref


def ring_length_factor(seq: float, ring: np.ndarray | float) -> np.ndarray:
    """Attention rate of a ring of `ring` steps relative to the catalog's ~8k-token rate. With the load-balanced
    causal split (each rank holds chunks i and 2·cp - 1 - i, Transformer Engine context_parallel.py) the diagonal
    step is causal over the rank's s/r tokens and every other step pairs s/r queries with half a block of keys, or
    half the queries with a whole block: kernels whose inner loop runs over s/(2r) tokens. The r steps do equal
    work, so the ring's rate is their harmonic mean: r / (1/f(s/r) + (r - 1)/f(s/(2r))), f = attention_length_factor."""
    ring = np.asarray(ring, dtype=float)
    diagonal = attention_length_factor(seq / ring)
    halves = attention_length_factor(seq / (2.0 * ring))
    return ring / (1.0 / diagonal + (ring - 1.0) / halves)


# Per attention score, fused attention runs 4·d tensor-core FLOPs (QK^T and PV) but one exponential on the special
# function units, whatever the head dimension d: narrow heads leave the exponentials a larger share of the time
# (FA3, Shah et al. 2024 §3.1: on H100 at d = 128 the matmuls have 512x the exponential throughput). With the
# unhidden exponential time a constant per score, the rate per FLOP is 1 / (1 + D0/d). FA3's measured BF16 forward on
# H100 (arXiv 2407.08608 Fig. 5, 16k tokens) runs d = 64 at 0.77 of d = 128 (causal 473 vs 616 TFLOP/s, non-causal
# 497 vs 648), which gives D0 = 54.5; d = 256 runs at 0.99 of d = 128 (642 vs 648), so wider heads gain nothing:
# the catalog's attention efficiencies are for d = 128 and the factor is capped at 1.
HEAD_DIM_HALF = 54.5
HEAD_DIM_REFERENCE = 128.0


# D0 is the exponential's cost in units of tensor-core work, so it grows with the tensor-core rate per SM at a fixed
# exponential rate per SM: from H100 to B200 "BF16 tensor core throughput increases from 1 to 2.25 PFLOPs, while both
# the SFU count and shared memory bandwidth remains unchanged" (FlashAttention-4, Zadouri et al. 2026, arXiv
# 2603.05451 §1; Together AI blog). Scaled by the BF16 peak per SM over H100's (989/132 TFLOP/s); GPUs below H100's
# per-SM rate keep the measured D0, there being no measurement of theirs.
H100_BF16_PER_SM = 989.0 / 132


def head_dim_factor(m: ModelSpec, gpu: GPUSpec | None = None) -> float:
    """Attention rate at the model's query/key head size relative to the catalog's d = 128 rate:
    min(1, (1 + D0/128) / (1 + D0/d)); d = the MLA query/key width (nope + rope) or head_dim; D0 grows with the GPU's
    tensor rate per SM above H100's. It is applied to the whole mixer core of a hybrid model too (its softmax layers
    set d)."""
    d = float(m.qk_nope_head_dim + m.qk_rope_head_dim) if m.is_mla else float(m.d_head)
    d0 = HEAD_DIM_HALF
    if gpu is not None and gpu.sm_count:
        d0 = HEAD_DIM_HALF * max(1.0, gpu.bf16_tflops / gpu.sm_count / H100_BF16_PER_SM)
    return min(1.0, (1.0 + d0 / HEAD_DIM_REFERENCE) / (1.0 + d0 / max(d, 1.0)))


# Mixers whose core is a FlashAttention-style kernel over a key range: full causal attention runs over the sequence
# (or its ring steps), a sliding window or a chunk over at most that many keys. Linear attention, Mamba scans and
# short convolutions are chunked GEMM/scan kernels of their own, and DeepSeek sparse attention gathers its top-k keys
# (FlashMLA's sparse kernels): neither is on FlashAttention's length curve, so they keep the catalog rate.
_WINDOWED = {"sliding_attention": "sliding_window", "chunked_attention": "attention_chunk_size"}
_FLASH_KINDS = ("full_attention", *_WINDOWED)


def _core_time(m: ModelSpec, seq_len: int, full: np.ndarray) -> tuple[float, np.ndarray]:
    """(sum F_k, sum F_k / f_k) over the layer kinds, the kernels skipping the tiles their masks leave empty: each
    kind's core FLOPs F_k at the rate f_k of the key range its kernel loops over (full attention: `full`, the
    sequence or its ring steps; a window or chunk w: attention_length_factor(min(w, s)); other mixers: 1)."""
    by_kind = flops.core_flops_by_kind(m, seq_len)
    time = 0.0 * full
    for kind, core in by_kind:
        if m.index_topk or kind not in _FLASH_KINDS:
            time = time + core
        elif kind in _WINDOWED:
            keys = getattr(m, _WINDOWED[kind]) or seq_len
            time = time + core / attention_length_factor(float(min(keys, seq_len)))
        else:
            time = time + core / full
    return sum(core for _, core in by_kind), time


def kernel_length_factor(m: ModelSpec, seq_len: int, ring: np.ndarray | float = 1.0) -> np.ndarray:
    """The mixer cores' rate relative to the catalog's ~8k-token rate, time-weighted over the layer kinds:
    sum F_k / sum (F_k / f_k) (`_core_time`)."""
    full = ring_length_factor(float(seq_len), ring)
    total, time = _core_time(m, seq_len, full)
    return full if total <= 0 else total / time


def all_tiles_factor(m: ModelSpec, seq_len: int, ring: np.ndarray | float = 1.0) -> np.ndarray:
    """Time of the softmax layers' cores computing every tile of the s x s scores (masks applied to the scores, no
    tile skipped) over their time with the masked tiles skipped (`_core_time`). Every tile is the non-causal core
    (mixers.attention_core_flops, causal=False: twice the causal one, and sequence / window times a sliding one) at
    the rate of a kernel looping over the whole sequence; other mixers are unchanged. For gpt-oss at 4,096 tokens,
    half its layers full and half 128-token windows, this is about 3.5x (planner.cost.profiles
    sink_attention_all_tiles)."""
    full = ring_length_factor(float(seq_len), ring)
    total, skipped = _core_time(m, seq_len, full)
    if total <= 0:
        return 1.0 + 0.0 * full
    every = 0.0 * full
    for i, kind in enumerate(m.mixer_kinds):
        if m.index_topk or kind not in _FLASH_KINDS:
            every = every + mixers.layer_core_flops(m, seq_len, i)
        else:
            every = every + mixers.attention_core_flops(m, seq_len, kind, causal=False) / full
    return every / skipped

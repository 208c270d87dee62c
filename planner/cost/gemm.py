"""GEMM time from its shape (M, N, K): tile/wave quantisation and the memory roofline, one function per term.

A GEMM C[M,N] = A[M,K]·B[K,N] takes

  t = max(2·M·N·K / (peak·eff·wave_factor), elt·(M·K + K·N + M·N) / HBM)

- wave_factor (tile and wave quantisation, stas00/ml-engineering training/performance/README.md "Tile and wave
  quantization"): the output is cut into TILE_M x TILE_N tiles, each tile is one thread block, and blocks run in waves
  of one block per SM; a partly filled last wave costs nearly a full wave, so time ∝ ceil(blocks / SMs). The GPU's
  MAMF `matmul_efficiency` is measured at a shape that fills whole waves with whole tiles, so the factor is 1 there:
  wave_factor = useful work / work paid for = M·N / (waves·SMs·TILE_M·TILE_N).
- the roofline: a skinny GEMM cannot reach the tensor-core rate because its operands and result must cross HBM once
  each (Williams et al., "Roofline", CACM 2009).

Backward of Y = X·W (X: M x K, W: K x N): dgrad dX = dY·W^T is an M x K output reducing over N; wgrad dW = X^T·dY is a
K x N output reducing over M. Same FLOPs as the forward, different tiles.

All arguments may be numpy arrays over candidate layouts; the functions are elementwise.
"""

from __future__ import annotations

import numpy as np

# Output tile of one thread block: 128 x 256 is the tile of ml-engineering's worked example (8192 x 14336 output ->
# 3584 blocks) and a common CUTLASS/cuBLAS tile for large bf16 GEMMs on Ampere/Hopper (training/performance/README.md
# "Tile and wave quantization"). M is cut in 128s, N in 256s.
TILE_M = 128
TILE_N = 256


def tiles(m: np.ndarray | float, n: np.ndarray | float, groups: np.ndarray | float = 1.0) -> np.ndarray:
    """Thread blocks of a (grouped) GEMM: groups·ceil(M/TILE_M)·ceil(N/TILE_N) (one block per output tile)."""
    return groups * np.ceil(np.asarray(m, dtype=float) / TILE_M) * np.ceil(np.asarray(n, dtype=float) / TILE_N)


def wave_factor(m: np.ndarray | float, n: np.ndarray | float, sms: int | None,
                groups: np.ndarray | float = 1.0) -> np.ndarray:
    """Useful share of the tensor-core work paid for: groups·M·N / (ceil(blocks/SMs)·SMs·TILE_M·TILE_N).

    1 for a shape that fills whole tiles and whole waves (the MAMF shape); e.g. H100 (132 SMs), M = N = 1024:
    8·4 = 32 blocks in one wave -> 32/132. `sms=None` (SM count unknown) turns the wave model off: factor 1.
    A grouped GEMM (MoE experts) launches all groups' tiles in one grid, so the waves are counted over all of them.
    """
    m = np.maximum(np.asarray(m, dtype=float), 1.0)
    n = np.maximum(np.asarray(n, dtype=float), 1.0)
    if sms is None:
        return np.ones(np.broadcast(m, n, groups).shape)
    blocks = tiles(m, n, groups)
    waves = np.ceil(blocks / sms)
    return groups * m * n / (waves * sms * TILE_M * TILE_N)


def gemm_bytes(m: np.ndarray | float, n: np.ndarray | float, k: np.ndarray | float,
               elt: float = 2.0) -> np.ndarray:
    """Minimum HBM traffic: read A (M·K) and B (K·N), write C (M·N), `elt` bytes per element (2 for bf16)."""
    return elt * (np.asarray(m, dtype=float) * k + np.asarray(k, dtype=float) * n + np.asarray(m, dtype=float) * n)


def gemm_seconds(m: np.ndarray | float, n: np.ndarray | float, k: np.ndarray | float, rate: float, hbm: float,
                 sms: int | None, elt: float = 2.0, groups: np.ndarray | float = 1.0) -> np.ndarray:
    """One (grouped) GEMM: max(groups·2MNK / (rate·wave_factor), groups·bytes / hbm); rate = peak·eff (FLOP/s),
    hbm = achievable bytes/s."""
    compute = groups * 2.0 * np.asarray(m, dtype=float) * n * k / (rate * wave_factor(m, n, sms, groups))
    memory = groups * gemm_bytes(m, n, k, elt) / hbm
    return np.maximum(compute, memory)


def linear_seconds(m: np.ndarray | float, n: np.ndarray | float, k: np.ndarray | float, rate: float, hbm: float,
                   sms: int | None, elt: float = 2.0,
                   groups: np.ndarray | float = 1.0) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(forward, dgrad, wgrad) of a linear layer Y[M,N] = X[M,K]·W[K,N]: shapes (M,N,K), (M,K,N), (K,N,M)."""
    fwd = gemm_seconds(m, n, k, rate, hbm, sms, elt, groups)
    dgrad = gemm_seconds(m, k, n, rate, hbm, sms, elt, groups)
    wgrad = gemm_seconds(k, n, m, rate, hbm, sms, elt, groups)
    return fwd, dgrad, wgrad

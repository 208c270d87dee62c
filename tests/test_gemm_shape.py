"""GEMM efficiency from its shape: wave quantisation, the HBM roofline, and what they do to a whole plan."""

import numpy as np
import pytest

from planner.cost import gemm
from planner.inputs.catalog import load_cluster

H100_SMS = 132  # NVIDIA H100 whitepaper (SXM5)


def test_wave_factor_hand_worked() -> None:
    # 1024 x 1024 output in 128 x 256 tiles: 8 x 4 = 32 blocks, one wave of 132 SMs, 100 SMs idle.
    assert gemm.tiles(1024, 1024) == 32
    assert gemm.wave_factor(1024, 1024, H100_SMS) == pytest.approx(32 / 132)
    # Padding: M = 1000 still needs 8 row tiles; useful area 1000·1024 of 32 tiles' 128·256 each, in one wave.
    assert gemm.wave_factor(1000, 1024, H100_SMS) == pytest.approx(1000 * 1024 / (132 * 128 * 256))
    # 133 blocks = 2 waves: 133 / 264 of the paid work is useful.
    assert gemm.wave_factor(128 * 133, 256, H100_SMS) == pytest.approx(133 / 264)
    # Whole waves of whole tiles: factor 1 (the MAMF shape).
    assert gemm.wave_factor(128 * 132, 256 * 4, H100_SMS) == pytest.approx(1.0)
    # Unknown SM count: no wave model.
    assert gemm.wave_factor(1024, 1024, None) == pytest.approx(1.0)


def test_grouped_gemm_counts_waves_over_all_groups() -> None:
    # 8 experts of 128 x 256 each: 8 blocks in one launch, one wave -> 8/132, not 8 x (1/132) waves.
    assert gemm.wave_factor(128, 256, H100_SMS, groups=8) == pytest.approx(8 / 132)


def test_roofline_skinny_gemm_is_memory_bound() -> None:
    # M = 16 tokens through an 8192 x 8192 bf16 weight on H100: the weight alone is 128 MiB.
    m, n, k = 16, 8192, 8192
    rate, hbm = 989e12 * 0.803, 3.35e12
    bytes_ = 2 * (m * k + k * n + m * n)
    assert gemm.gemm_bytes(m, n, k) == bytes_
    t = gemm.gemm_seconds(m, n, k, rate, hbm, None)  # no wave model: 2.1 GFLOP at 794 TFLOP/s = 2.7 us
    assert t == pytest.approx(bytes_ / hbm)  # 134.7 MB / 3.35 TB/s = 40.2 us: memory-bound
    assert t == pytest.approx(40.2e-6, rel=0.01)
    # With 128-row tiles the 16 rows pad to 128 and 32 blocks fill 32 of 132 SMs: the padded compute now dominates.
    padded = gemm.gemm_seconds(m, n, k, rate, hbm, H100_SMS)
    assert padded == pytest.approx(2 * m * n * k / (rate * m * n / (132 * 128 * 256)))
    # A big square GEMM is compute-bound at peak·eff (full waves: 64 x 32 = 2048 blocks, not a multiple of 132).
    big = gemm.gemm_seconds(8192, 8192, 8192, rate, hbm, H100_SMS)
    waves = np.ceil(2048 / 132)
    assert big == pytest.approx(2 * 8192**3 / rate * waves * 132 / 2048)


def test_backward_shapes() -> None:
    # dgrad is (M, K, N), wgrad (K, N, M): the same FLOPs, other tiles.
    f, d, w = gemm.linear_seconds(1024, 4096, 8192, 1e15, 1e30, H100_SMS)
    assert f == pytest.approx(gemm.gemm_seconds(1024, 4096, 8192, 1e15, 1e30, H100_SMS))
    assert d == pytest.approx(gemm.gemm_seconds(1024, 8192, 4096, 1e15, 1e30, H100_SMS))
    assert w == pytest.approx(gemm.gemm_seconds(8192, 4096, 1024, 1e15, 1e30, H100_SMS))


def test_efficiency_never_drops_much_with_more_rows() -> None:
    """Achieved FLOP/s rises with M up to wave-quantisation ripple (one extra partial wave at most)."""
    rate, hbm = 989e12 * 0.803, 3.35e12
    ms = np.arange(16, 65536, 16, dtype=float)
    for n, k in ((1024, 8192), (8192 // 8 * 3, 8192), (28672 // 8, 8192)):
        eff = 2 * ms * n * k / gemm.gemm_seconds(ms, n, k, rate, hbm, H100_SMS) / rate
        assert np.all(eff <= 1 + 1e-9)
        best_so_far = np.maximum.accumulate(eff)
        assert np.all(eff >= 0.5 * best_so_far)  # ripple: at worst one nearly empty extra wave after a full one
        assert eff[-1] > 0.95  # large M: back to the MAMF rate


def test_catalog_sm_counts() -> None:
    counts = {"a100": 108, "h100": 132, "h800": 132, "h200": 132, "b200": 148, "b300": 160, "gb200": 148,
              "gb300": 160, "mi300x": 304}
    for key, sms in counts.items():
        assert load_cluster(f"{key}x8").gpu.sm_count == sms

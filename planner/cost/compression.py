"""Compressed collectives, as a what-if (`--compress dp=4,tp=1.5`).

Each parallel dimension's traffic shrinks by its compression ratio, and the codec adds its own time: encoding reads
the full tensor and writes the compressed one, decoding reads the compressed one and writes the full tensor. GPU
codecs for collectives are memory-bound kernels (hybrid GPU-based compression for LLM training, e.g. Wang et al.
2023 "ZeRO++" quantised weights/gradients at 2-4x, and the error-feedback gradient compressors it builds on), so the
codec costs HBM traffic 2·S·(1 + 1/r) per collective of uncompressed size S, on the critical path.
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np

DIMENSIONS = ("tp", "cp", "ep", "dp", "pp")


class Squeezer:
    """Applies per-dimension compression ratios to collective sizes and prices the codec."""

    def __init__(self, ratios: Mapping[str, float], hbm_bytes_per_s: float) -> None:
        self.ratios = {k: float(v) for k, v in ratios.items() if float(v) != 1.0}
        self.hbm = hbm_bytes_per_s

    def wire(self, dim: str, nbytes: np.ndarray | float) -> np.ndarray | float:
        """Bytes that actually cross the link."""
        return nbytes / self.ratios.get(dim, 1.0)

    def codec(self, dim: str, nbytes: np.ndarray | float) -> np.ndarray | float:
        """Encode + decode time for one collective of uncompressed size `nbytes` (0 without compression)."""
        r = self.ratios.get(dim)
        if r is None:
            return 0.0
        return 2.0 * nbytes * (1.0 + 1.0 / r) / self.hbm

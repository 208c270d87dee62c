"""Achievable fractions of datasheet rates: what real kernels reach of a GPU's peak HBM bandwidth and FP8 rate,
and the fixed cost of a kernel launch. GPU-specific figures (MAMF, attention efficiency) live in clusters/gpus.yaml;
these apply to every GPU unless a measured profile (`plan calibrate`) replaces them."""

# Each CUDA kernel launch and its tail cost a few microseconds that small GEMMs cannot hide (NVIDIA CUDA C++ Best
# Practices Guide: launch overhead of a few us); a transformer layer runs ~24 kernels forward and ~2x that backward
# (2 norms, 2 residual adds, RoPE, activation, 4-5 GEMMs, attention, casts; counted in Megatron-Core's layer).
KERNEL_OVERHEAD_S = 4e-6
KERNELS_PER_LAYER_FWD = 24
HBM_EFFICIENCY = 0.85  # Calculon systems/*.json: HBM efficiency 0.9 for >=100 MB transfers, 0.75 at 10 MB
# Fallback when a GPU lists no FP8 MAMF: H100's FP8/BF16 ratio, 70.9% vs 80.3% of peak (stas00/ml-engineering).
FP8_GEMM_EFFICIENCY = 0.88

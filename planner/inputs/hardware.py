"""Achievable fractions of datasheet rates: what real kernels reach of a GPU's peak HBM bandwidth and FP8 rate,
and the fixed cost of a kernel launch. GPU-specific figures (MAMF, attention efficiency) live in clusters/gpus.yaml;
these apply to every GPU unless a measured profile (`plan calibrate`) replaces them."""

# Each CUDA kernel launch and its tail cost a few microseconds that small GEMMs cannot hide (NVIDIA CUDA C++ Best
# Practices Guide: launch overhead of a few us); a transformer layer runs ~24 kernels forward and ~2x that backward
# (2 norms, 2 residual adds, RoPE, activation, 4-5 GEMMs, attention, casts; counted in Megatron-Core's layer).
KERNEL_OVERHEAD_S = 4e-6
KERNELS_PER_LAYER_FWD = 24
# A running NCCL collective occupies one thread block (CTA) per channel, each on its own SM: a GEMM's CTAs fill an
# SM's shared memory and registers, so the two do not share one. Nsight Systems trace of an FSDP-style all-gather
# overlapped with a cuBLAS GEMM on an 8-NIC H100 node: the ncclAllGather kernel holds 24 CTAs while the GEMM runs
# (NVIDIA developer forum, "Compute-Communication Overlap Causes Severe GEMM Performance Degradation because of Tail
# Effect", 2025); DGX A100 has the same 8-NIC NVSwitch topology, from which NCCL derives its channel count.
# DeepSeek-V3 (report §3.2.2) needed 20 of 132 SMs for its own tuned all-to-all kernels: the same order.
COLLECTIVE_SMS = 24
HBM_EFFICIENCY = 0.85  # Calculon systems/*.json: HBM efficiency 0.9 for >=100 MB transfers, 0.75 at 10 MB
# Copy-engine transfers between pinned host memory and the GPU reach part of the link's rate (PCIe packet and
# flow-control overheads): NVIDIA's NVbandwidth host_to_device_memcpy_ce measures 55.63 GB/s on a PCIe Gen5 x16
# link of 64 GB/s per direction (NVIDIA technical blog on NVbandwidth, example output). Applied to NVLink-C2C too.
HOST_COPY_EFFICIENCY = 55.63 / 64.0
# Fallback when a GPU lists no FP8 MAMF: H100's FP8/BF16 ratio, 70.9% vs 80.3% of peak (stas00/ml-engineering).
FP8_GEMM_EFFICIENCY = 0.88

# Low-precision GEMMs as Transformer Engine runs them, from its GEMM profiling tutorial on a B300
# (docs/examples/gemm_profiling/gemm_profiling.rst: hidden 4096, FFN 16384, 15,872 tokens; per layer, fprop + dgrad +
# wgrad). Kernels alone ("--pre-quantize"): BF16 13.102 ms, MXFP8 7.161 ms, NVFP4 3.764 ms for 19.2 TFLOP: the NVFP4
# kernels run 7.161 / 3.764 = 1.90x as fast as the FP8 ones, not the 3x of B300's datasheet peaks (13.5 vs 4.5 PF).
# Read as a cap on the FP4 rate relative to the FP8 one, the non-Ultra parts (FP4 peak only 2x FP8) keep 1.9x of
# their 2x; NVIDIA's own end-to-end NVFP4 / FP8 gains on GB200 (Megatron-Bridge performance tables, Llama 3.1 405B
# 1.43x) exceed what a proportional reading would allow (2 x 0.634 = 1.27x for the GEMMs alone).
FP4_OVER_FP8_KERNEL_RATE = 7.161 / 3.764
# Quantisation as training runs it (autocast - pre-quantised, same tutorial): MXFP8 1.823 ms, NVFP4 2.689 ms per
# layer. NVFP4 quantises each operand from the high-precision copy twice (row-wise, and column-wise through the 16x16
# random Hadamard transform for wgrad; TE recipe NVFP4BlockScaling) after a per-tensor amax pass, and pays 1.475x
# the FP8 casting traffic: FP8_CAST_BYTES (read 2 B, write 1 B, plus the 1 B transpose) x 1.475.
FP8_CAST_BYTES = 4.0
NVFP4_CAST_BYTES = FP8_CAST_BYTES * 2.689 / 1.823

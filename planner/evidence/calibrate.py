"""`plan calibrate`: microbenchmarks on the local CUDA GPU, written as an efficiency profile.

Importable without PyTorch: torch is imported only inside run_calibration, so the planner keeps running on machines
that have no GPU stack. What is measured, and why:
- GEMMs with the shapes the cost model prices: each layer's QKV, output projection, fc1 and fc2 of a few catalog
  models, M = tokens per micro-batch, N or K split by tensor parallelism (the column- or row-parallel dimension).
  bf16, and fp8 through torch._scaled_mm where the device supports it.
- Causal scaled_dot_product_attention forward + backward (FlashAttention backend where available), head_dim 128.
- HBM bandwidth from a large device-to-device copy (the elementwise kernels the cost model charges are copies in
  all but name: read a tensor, write a tensor).
Timing uses CUDA events around each call after warm-up calls, and keeps the median of the repeats (robust to the
occasional clock dip or stray kernel from another process).
"""

from __future__ import annotations

import datetime
import platform
import statistics
import sys
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from planner.errors import PlanInputError
from planner.inputs.catalog import gpu_catalog, load_gpu, load_model
from planner.inputs.profile import (
    AttentionMeasurement,
    BandwidthMeasurement,
    EfficiencyProfile,
    GemmMeasurement,
    attention_flops,
    dump_profile,
    profile_from_measurements,
)
from planner.inputs.specs import ModelSpec

# Catalog models whose layer shapes span the dense range the planner is used for (8B to 405B hidden sizes).
FULL_MODELS = ("llama3-8b", "llama3-70b", "llama3-405b")
QUICK_MODELS = ("llama3-8b",)
FULL_TOKENS = (4096, 8192)  # tokens per micro-batch per GPU: mbs x seq / cp of typical layouts
QUICK_TOKENS = (4096,)
FULL_TP = (1, 2, 4, 8)
QUICK_TP = (1, 8)
ATTENTION_SEQS = (2048, 4096, 8192)
QUICK_ATTENTION_SEQS = (4096,)
ATTENTION_HEADS = 32
ATTENTION_HEAD_DIM = 128
ATTENTION_TOKENS = 16384  # batch = tokens / seq, so every sequence length does comparable work
COPY_BYTES = (256 * 2**20, 2**30, 4 * 2**30)  # well past the L2 (50 MB on H100), so HBM is what is measured
QUICK_COPY_BYTES = (2**30,)
WARMUP, REPEATS = 5, 10
QUICK_WARMUP, QUICK_REPEATS = 2, 5
# Each timing covers BURST back-to-back calls queued behind a GPU sleep of SLEEP_CYCLES (about 2.5 ms at H100's
# 1.98 GHz), long enough for the host to issue the whole burst first. An event pair around one call started from an
# idle GPU adds the host's launch latency to the kernel: on two H100 machines (bench/results/h100-2026-11-27*)
# that put a fixed 23-39 us on every GEMM timed so (a least-squares fit of t = FLOPs / rate + t0 over the 96 shapes),
# tracking each host's CPU time per eager call (20.9 and 28.4 us for a Linear forward), and understated the small
# shapes' rates by up to half.
BURST = 4
SLEEP_CYCLES = 5_000_000
FP8_ALIGN = 16  # torch._scaled_mm needs every dimension divisible by 16

# Substrings of torch.cuda.get_device_name() -> catalog key, most specific first. PCIe/NVL H100 parts have other
# peaks than the SXM part in the catalog, so they are not matched: the user names the key (--gpu) knowingly.
_NAME_TO_KEY = (
    ("gb300", "gb300"), ("gb200", "gb200"), ("b300", "b300"), ("b200", "b200"),
    ("h200", "h200"), ("h800", "h800"), ("h100 80gb hbm3", "h100"), ("h100 sxm", "h100"),
    ("a100-sxm4-40gb", "a100-40g"), ("a100-sxm4-80gb", "a100"), ("a100 80gb", "a100"), ("mi300x", "mi300x"),
)


@dataclass(frozen=True)
class GemmShape:
    m: int
    n: int
    k: int

    @property
    def flops(self) -> float:
        return 2.0 * self.m * self.n * self.k


def layer_gemm_shapes(model: ModelSpec, tokens: int, tp: int) -> list[GemmShape]:
    """The forward GEMMs of one dense layer on one TP rank: C[M, N] = A[M, K] @ W[K, N].

    Column-parallel layers (QKV, fc1) split N by tp; row-parallel ones (out-proj, fc2) split K (Megatron-LM,
    Shoeybi et al. 2019 §3). A gated MLP's fc1 computes gate and up together (2 x ffn columns).
    """
    h, q = model.hidden_size, model.num_attention_heads * model.d_head
    kv = 2 * model.kv_heads * model.d_head
    up = (2 if model.gated_mlp else 1) * model.intermediate_size
    return [
        GemmShape(tokens, max(1, (q + kv) // tp), h),  # QKV
        GemmShape(tokens, h, max(1, q // tp)),  # attention output projection
        GemmShape(tokens, max(1, up // tp), h),  # fc1 (gate + up)
        GemmShape(tokens, h, max(1, model.intermediate_size // tp)),  # fc2
    ]


def gemm_shapes(models: Iterable[ModelSpec], tokens: Iterable[int], tps: Iterable[int]) -> list[GemmShape]:
    """Distinct shapes over models x tokens x TP degrees, in a stable order (the profile diffs cleanly)."""
    seen: dict[GemmShape, None] = {}
    for model in models:
        for t in tokens:
            for tp in tps:
                for shape in layer_gemm_shapes(model, t, tp):
                    seen.setdefault(shape, None)
    return list(seen)


def detect_gpu_key(device_name: str) -> str | None:
    """The catalog key for a torch device name, or None when it is not one the catalog describes exactly."""
    name = device_name.lower().replace("nvidia ", "")
    for needle, key in _NAME_TO_KEY:
        if needle in name and key in gpu_catalog():
            return key
    return None


def median_ms(torch: Any, fn: Callable[[], object], warmup: int, repeats: int, burst: int = BURST) -> float:
    """Median milliseconds per fn() call over `repeats` timings of `burst` back-to-back calls, after `warmup` calls.
    Each timing is queued behind a GPU sleep (torch.cuda._sleep where this torch has it), so the GPU runs the calls
    as a training step does, kernel after kernel, not each after the host's launch latency (see BURST)."""
    for _ in range(warmup):
        fn()
    torch.cuda.synchronize()
    sleep = getattr(torch.cuda, "_sleep", None)
    times = []
    for _ in range(repeats):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        if sleep is not None:
            sleep(SLEEP_CYCLES)
        start.record()
        for _ in range(burst):
            fn()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end) / burst)
    return statistics.median(times)


def _progress(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


def _bench_gemm_bf16(torch: Any, shape: GemmShape, warmup: int, repeats: int) -> float:
    a = torch.randn(shape.m, shape.k, device="cuda", dtype=torch.bfloat16)
    b = torch.randn(shape.k, shape.n, device="cuda", dtype=torch.bfloat16)
    out = torch.empty(shape.m, shape.n, device="cuda", dtype=torch.bfloat16)
    ms = median_ms(torch, lambda: torch.matmul(a, b, out=out), warmup, repeats)
    return shape.flops / (ms * 1e-3) / 1e12


def training_mix_rate(fast: float, full: float) -> float:
    """The fp8 GEMM rate of a training step: each weight's forward GEMM with fast accumulation and its two backward
    GEMMs (input and weight gradients) at full-precision accumulation, as Transformer Engine's fp8 recipes run them
    (use_split_accumulator in backward), equal FLOPs each: the harmonic mean 3 / (1/fast + 2/full)."""
    return 3.0 / (1.0 / fast + 2.0 / full)


def _bench_gemm_fp8(torch: Any, shape: GemmShape, warmup: int, repeats: int) -> float | None:
    """fp8 e4m3 GEMM with per-tensor scales and bf16 output, at a training step's mix of fast and full-precision
    accumulation (`training_mix_rate`; on one H100 the two differ by 6 %, bench/fp8_accum.py). None when the device
    or this torch build has no fp8 GEMM, or the shape is not 16-aligned."""
    if not hasattr(torch, "_scaled_mm") or not hasattr(torch, "float8_e4m3fn"):
        return None
    if any(d % FP8_ALIGN for d in (shape.m, shape.n, shape.k)):
        return None
    a = torch.randn(shape.m, shape.k, device="cuda").to(torch.float8_e4m3fn)
    # _scaled_mm wants the second operand column-major: the transpose of a row-major [N, K] weight.
    b = torch.randn(shape.n, shape.k, device="cuda").to(torch.float8_e4m3fn).t()
    one = torch.ones((), device="cuda", dtype=torch.float32)

    def call(fast: bool) -> object:
        return torch._scaled_mm(a, b, scale_a=one, scale_b=one, out_dtype=torch.bfloat16, use_fast_accum=fast)

    try:
        call(True)
    except (RuntimeError, TypeError):  # pre-Hopper/Ada devices and older signatures refuse: skip fp8, keep going
        return None
    rate = {fast: shape.flops / (median_ms(torch, lambda f=fast: call(f), warmup, repeats) * 1e-3) / 1e12
            for fast in (True, False)}
    return training_mix_rate(rate[True], rate[False])


def _sdpa_context(torch: Any) -> tuple[Any, str]:
    """Prefer the FlashAttention backend (what the catalog's attention_efficiency describes); fall back to the
    default dispatch where this torch has no backend selector."""
    try:
        from torch.nn.attention import SDPBackend, sdpa_kernel

        return sdpa_kernel([SDPBackend.FLASH_ATTENTION]), "flash"
    except ImportError:
        import contextlib

        return contextlib.nullcontext(), "default"


def _bench_attention(torch: Any, batch: int, seq: int, warmup: int, repeats: int) -> tuple[float, str]:
    f = torch.nn.functional
    shape = (batch, ATTENTION_HEADS, seq, ATTENTION_HEAD_DIM)
    q, k, v = (torch.randn(shape, device="cuda", dtype=torch.bfloat16, requires_grad=True) for _ in range(3))
    grad = torch.randn(shape, device="cuda", dtype=torch.bfloat16)
    ctx, backend = _sdpa_context(torch)

    def step() -> None:
        out = f.scaled_dot_product_attention(q, k, v, is_causal=True)
        out.backward(grad)
        q.grad = k.grad = v.grad = None  # no gradient accumulation kernels in the timing

    try:
        with ctx:
            ms = median_ms(torch, step, warmup, repeats)
    except RuntimeError:  # the flash backend refused this device/shape: measure what the default dispatch picks
        backend = "default"
        ms = median_ms(torch, step, warmup, repeats)
    flops = attention_flops(batch, ATTENTION_HEADS, seq, ATTENTION_HEAD_DIM)
    return flops / (ms * 1e-3) / 1e12, backend


def _bench_copy(torch: Any, nbytes: int, warmup: int, repeats: int) -> float:
    src = torch.empty(nbytes, device="cuda", dtype=torch.uint8)
    dst = torch.empty_like(src)
    ms = median_ms(torch, lambda: dst.copy_(src), warmup, repeats)
    return 2.0 * nbytes / (ms * 1e-3) / 1e12  # a copy reads and writes every byte


def _check_out_path(out_path: Path) -> None:
    """Fail before minutes of benchmarking, not after."""
    if out_path.is_dir():
        raise PlanInputError("is a directory", field="--out", source=str(out_path), fix="name a .yaml file")
    if not out_path.parent.is_dir():
        raise PlanInputError("its folder does not exist", field="--out", source=str(out_path),
                             fix="create the folder or choose another path")


def import_cuda_torch(who: str = "plan calibrate") -> Any:
    """PyTorch, where it can be imported and sees a CUDA device; else a PlanInputError naming the fix."""
    fail = PlanInputError(f"{who} needs PyTorch with CUDA", field="device",
                          fix="run it on a GPU machine with torch installed")
    try:
        import torch
    except (ImportError, OSError):  # OSError: a torch whose CUDA libraries cannot be loaded
        raise fail from None
    if not torch.cuda.is_available():
        raise fail
    return torch


def run_calibration(out_path: str | Path, quick: bool = False, gpu: str | None = None) -> EfficiencyProfile:
    """Measure the local GPU, write the profile YAML to out_path, return it.

    `gpu` names the catalog key whose peaks the efficiencies are relative to; by default it is detected from the
    device name. `quick` measures a subset (one model, two TP degrees, one sequence length) with fewer repeats.
    """
    out = Path(out_path).expanduser()
    _check_out_path(out)
    torch = import_cuda_torch()
    device_name = torch.cuda.get_device_name(0)
    key = gpu.strip().lower() if gpu else detect_gpu_key(device_name)
    if key is None:
        raise PlanInputError(f"'{device_name}' is not a GPU of the catalog", field="gpu",
                             fix=f"pass --gpu with the closest of: {', '.join(gpu_catalog())}")
    spec = load_gpu(key, "--gpu")
    warmup, repeats = (QUICK_WARMUP, QUICK_REPEATS) if quick else (WARMUP, REPEATS)
    models = [load_model(name) for name in (QUICK_MODELS if quick else FULL_MODELS)]
    shapes = gemm_shapes(models, QUICK_TOKENS if quick else FULL_TOKENS, QUICK_TP if quick else FULL_TP)
    # Reduced-precision reductions are PyTorch's default for bf16 GEMMs; stated so a changed default cannot skew it.
    torch.backends.cuda.matmul.allow_bf16_reduced_precision_reduction = True

    gemm: list[GemmMeasurement] = []
    fp8_ok = spec.fp8_tflops is not None
    for i, shape in enumerate(shapes, 1):
        _progress(f"gemm {i}/{len(shapes)}: m={shape.m} n={shape.n} k={shape.k}")
        tf = _bench_gemm_bf16(torch, shape, warmup, repeats)
        gemm.append(GemmMeasurement(m=shape.m, n=shape.n, k=shape.k, dtype="bf16", tflops=round(tf, 2)))
        if fp8_ok:
            tf8 = _bench_gemm_fp8(torch, shape, warmup, repeats)
            if tf8 is not None:
                gemm.append(GemmMeasurement(m=shape.m, n=shape.n, k=shape.k, dtype="fp8", tflops=round(tf8, 2)))
        torch.cuda.empty_cache()  # the largest shapes take GiBs; do not let the cache crowd out the next one
    if fp8_ok and not any(g.dtype == "fp8" for g in gemm):
        _progress("fp8 GEMM unavailable on this device/torch; the profile keeps the catalog fp8 efficiency")

    attention: list[AttentionMeasurement] = []
    backends = set()
    for seq in QUICK_ATTENTION_SEQS if quick else ATTENTION_SEQS:
        batch = max(1, ATTENTION_TOKENS // seq)
        _progress(f"attention: batch={batch} heads={ATTENTION_HEADS} seq={seq} head_dim={ATTENTION_HEAD_DIM}")
        tf, backend = _bench_attention(torch, batch, seq, warmup, repeats)
        backends.add(backend)
        attention.append(AttentionMeasurement(batch=batch, heads=ATTENTION_HEADS, seq=seq,
                                              head_dim=ATTENTION_HEAD_DIM, tflops=round(tf, 2)))
        torch.cuda.empty_cache()

    bandwidth: list[BandwidthMeasurement] = []
    for nbytes in QUICK_COPY_BYTES if quick else COPY_BYTES:
        _progress(f"copy: {nbytes / 2**20:.0f} MiB")
        bandwidth.append(BandwidthMeasurement(bytes=nbytes, tbps=round(_bench_copy(torch, nbytes, warmup, repeats),
                                                                        4)))
        torch.cuda.empty_cache()

    measured_on = "; ".join([
        device_name,
        f"driver {_driver_version()}",
        f"torch {torch.__version__}",
        f"cuda {torch.version.cuda or torch.version.hip or '?'}",
        f"sdpa backend {'/'.join(sorted(backends))}",
        f"{'quick' if quick else 'full'} run, median of {repeats} after {warmup} warm-up",
        f"host {platform.node() or '?'}",
        datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
    ])
    profile = profile_from_measurements(spec, measured_on, gemm, attention, bandwidth)
    dump_profile(profile, out)
    return profile


def _driver_version() -> str:
    """The NVIDIA driver version (Linux exposes it under /proc); free text, so a miss is '?', never an error."""
    try:
        first = Path("/proc/driver/nvidia/version").read_text(encoding="utf-8", errors="replace").splitlines()[0]
    except (OSError, IndexError):
        return "?"
    words = [w for w in first.split() if w[:1].isdigit() and "." in w]  # "NVRM version: ... Kernel Module  550.54.15"
    return words[0] if words else "?"

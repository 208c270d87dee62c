"""fp8 GEMM rates by accumulation and scaling on this GPU, beside bf16: what one fp8 efficiency per GPU stands for.

Not a CI test (needs a CUDA GPU with fp8 tensor cores; about a minute). For the layer GEMMs of Llama 3 8B and 70B at
TP 1, 4 and 8 and 4,096 / 8,192 tokens (planner.evidence.calibrate.gemm_shapes) it times, with calibrate's timing
(bursts queued behind a GPU sleep):
- bf16 torch.matmul;
- fp8 e4m3 with one scale per tensor and fast accumulation (Transformer Engine's forward GEMMs);
- the same without fast accumulation (Transformer Engine accumulates the input- and weight-gradient GEMMs of its fp8
  recipes at full precision: its backward GEMMs pass use_split_accumulator);
- fp8 with one scale per row of A and column of B (rowwise scaling, torchao's and torchtitan's float8 rowwise),
  fast accumulation.
A training step runs one forward and two backward GEMMs per weight, so the step's fp8 GEMM rate is the harmonic mean
of one fast and two full-precision passes. Usage:

    python bench/fp8_accum.py [--out fp8_accum.json] [--repeats 10]
"""

from __future__ import annotations

import json
import statistics
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:  # run as `python bench/fp8_accum.py` from a checkout without installing
    sys.path.insert(0, str(ROOT))

from gpu_bench import cuda_torch_or_exit, report_parser, write_report  # noqa: E402

from planner.evidence.calibrate import GemmShape, gemm_shapes, median_ms, training_mix_rate  # noqa: E402
from planner.inputs.catalog import load_model  # noqa: E402

MODELS = ("llama3-8b", "llama3-70b")
TOKENS = (4096, 8192)
TPS = (1, 4, 8)
VARIANTS = ("bf16", "fp8_fast", "fp8_full", "fp8_rowwise")


def time_shape(torch: Any, shape: GemmShape, repeats: int) -> dict[str, float | None]:
    """TFLOP/s of one (m, k) @ (k, n) GEMM in each of VARIANTS (None where this device or torch refuses it)."""
    a16 = torch.randn(shape.m, shape.k, device="cuda", dtype=torch.bfloat16)
    b16 = torch.randn(shape.k, shape.n, device="cuda", dtype=torch.bfloat16)
    a8 = a16.to(torch.float8_e4m3fn)
    b8 = torch.randn(shape.n, shape.k, device="cuda").to(torch.float8_e4m3fn).t()  # column-major, as _scaled_mm wants
    one = torch.ones((), device="cuda", dtype=torch.float32)
    rows = torch.ones(shape.m, 1, device="cuda", dtype=torch.float32)
    cols = torch.ones(1, shape.n, device="cuda", dtype=torch.float32)
    calls = {
        "bf16": lambda: torch.matmul(a16, b16),
        "fp8_fast": lambda: torch._scaled_mm(a8, b8, scale_a=one, scale_b=one, out_dtype=torch.bfloat16,
                                             use_fast_accum=True),
        "fp8_full": lambda: torch._scaled_mm(a8, b8, scale_a=one, scale_b=one, out_dtype=torch.bfloat16,
                                             use_fast_accum=False),
        "fp8_rowwise": lambda: torch._scaled_mm(a8, b8, scale_a=rows, scale_b=cols, out_dtype=torch.bfloat16,
                                                use_fast_accum=True),
    }
    out: dict[str, float | None] = {}
    for name in VARIANTS:
        try:
            calls[name]()
        except (RuntimeError, TypeError):  # not on this device, or not in this torch
            out[name] = None
            continue
        out[name] = round(shape.flops / (median_ms(torch, calls[name], 3, repeats) * 1e-3) / 1e12, 2)
    return out


def summary(rows: list[dict[str, Any]]) -> dict[str, float]:
    """Median ratio of each fp8 variant to bf16, and of a training step's fp8 passes (one fast, two full) to bf16."""
    out: dict[str, float] = {}
    for name in VARIANTS[1:]:
        ratios = [r[name] / r["bf16"] for r in rows if r.get(name) and r.get("bf16")]
        if ratios:
            out[f"{name}_over_bf16_median"] = round(statistics.median(ratios), 3)
    step = [training_mix_rate(r["fp8_fast"], r["fp8_full"]) / r["bf16"] for r in rows
            if r.get("fp8_fast") and r.get("fp8_full") and r.get("bf16")]
    if step:
        out["fp8_step_over_bf16_median"] = round(statistics.median(step), 3)
    return out


def main(argv: list[str] | None = None) -> None:
    args = report_parser(__doc__, "fp8_accum.json", 10,
                         "timed bursts per shape and variant (the median is kept)").parse_args(argv)
    torch = cuda_torch_or_exit("bench/fp8_accum.py")
    rows = []
    for shape in gemm_shapes([load_model(m) for m in MODELS], TOKENS, TPS):
        r = {"m": shape.m, "n": shape.n, "k": shape.k, **time_shape(torch, shape, args.repeats)}
        rows.append(r)
        print(f"m={shape.m:5d} n={shape.n:6d} k={shape.k:6d}: " + ", ".join(f"{v} {r[v]}" for v in VARIANTS),
              flush=True)
        torch.cuda.empty_cache()
    doc = {"schema_version": 1, "device": torch.cuda.get_device_name(0), "torch": torch.__version__,
           "repeats": args.repeats, "summary": summary(rows), "rows": rows}
    print(json.dumps(doc["summary"]))
    write_report(doc, args.out)


if __name__ == "__main__":
    main()

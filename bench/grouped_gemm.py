"""Routed-expert GEMM rates on this GPU: what planner.cost.expert's grouped-GEMM curves describe, measured.

Not a CI test (needs a CUDA GPU; under a minute). For the expert shapes of a few catalog MoE models it times the
forward GEMMs of one rank's local experts at a range of tokens per expert: fc1 (tokens x hidden -> 2 x expert width,
gate and up together) and fc2 (tokens x expert width -> hidden), bf16, two ways:
- grouped: one torch._grouped_mm call over all local experts (CUTLASS grouped GEMM, what torchtitan's MoE runs);
- looped: one torch.mm per expert, back to back on one stream (Transformer Engine's GroupedLinear issues one cuBLAS
  GEMM per expert).
It reports TFLOP/s per call and writes them as JSON; docs/accuracy.md compares them with the model's
M / (M + M0) and K / (K + K0) curves. Usage:

    python bench/grouped_gemm.py [--out grouped_gemm.json] [--repeats 20]
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:  # run as `python bench/grouped_gemm.py` from a checkout without installing
    sys.path.insert(0, str(ROOT))

from gpu_bench import cuda_torch_or_exit, report_parser, write_report  # noqa: E402

from planner.evidence.calibrate import median_ms  # noqa: E402

# name: (hidden, expert width, local experts timed together). Local experts: one EP rank's share in a typical
# layout (Qwen3-30B-A3B EP 8: 16; gpt-oss-120b EP 8: 16; DeepSeek-V3 EP 32: 8; Mixtral 8x22B, no EP: 8).
SHAPES = {
    "qwen3-30b-a3b": (2048, 768, 16),
    "gpt-oss-120b": (2880, 2880, 16),
    "deepseek-v3": (7168, 2048, 8),
    "mixtral-8x22b": (6144, 16384, 8),
}
TOKENS_PER_EXPERT = (32, 64, 128, 256, 512, 1024, 2048, 4096, 8192)


def time_gemms(torch: Any, experts: int, m: int, k: int, n: int, repeats: int) -> dict[str, float | None]:
    """TFLOP/s of [experts x (m, k)] @ [experts x (k, n)]: grouped (one call) and looped (one torch.mm each)."""
    x = torch.randn(experts * m, k, device="cuda", dtype=torch.bfloat16)
    w = torch.randn(experts, n, k, device="cuda", dtype=torch.bfloat16)  # stored [out, in] like nn.Linear
    flops = 2.0 * experts * m * k * n
    out: dict[str, float | None] = {}
    offs = torch.arange(m, experts * m + 1, m, device="cuda", dtype=torch.int32)
    try:
        ms = median_ms(torch, lambda: torch._grouped_mm(x, w.transpose(-2, -1), offs=offs), 5, repeats)
        out["grouped_tflops"] = round(flops / (ms * 1e-3) / 1e12, 2)
    except (AttributeError, RuntimeError, TypeError) as exc:  # no grouped GEMM in this torch / on this device
        print(f"  grouped GEMM unavailable: {str(exc).splitlines()[0][:120]}", file=sys.stderr)
        out["grouped_tflops"] = None
    chunks, weights = x.split(m), [w[e].t() for e in range(experts)]

    def looped() -> None:
        for e in range(experts):
            torch.mm(chunks[e], weights[e])

    ms = median_ms(torch, looped, 5, repeats)
    out["looped_tflops"] = round(flops / (ms * 1e-3) / 1e12, 2)
    return out


def main(argv: list[str] | None = None) -> None:
    args = report_parser(__doc__, "grouped_gemm.json", 20,
                         "timed calls per shape (the median is kept)").parse_args(argv)
    torch = cuda_torch_or_exit("bench/grouped_gemm.py")
    rows = []
    for name, (hidden, width, experts) in SHAPES.items():
        for tokens in TOKENS_PER_EXPERT:
            for gemm, k, n in (("fc1", hidden, 2 * width), ("fc2", width, hidden)):
                r = {"model": name, "gemm": gemm, "experts": experts, "tokens_per_expert": tokens, "k": k, "n": n,
                     **time_gemms(torch, experts, tokens, k, n, args.repeats)}
                rows.append(r)
                print(f"{name:14s} {gemm} M={tokens:5d} K={k:5d} N={n:5d} x{experts}: grouped "
                      f"{r['grouped_tflops']} TFLOP/s, looped {r['looped_tflops']} TFLOP/s", flush=True)
            torch.cuda.empty_cache()
    doc = {"schema_version": 1, "device": torch.cuda.get_device_name(0), "torch": torch.__version__,
           "dtype": "bf16", "repeats": args.repeats, "rows": rows}
    write_report(doc, args.out)


if __name__ == "__main__":
    main()

"""Host (CPU) time per eager PyTorch call on this machine's CPU, the figure planner.cost.host scales.

Not a CI test (needs a CUDA GPU; a few seconds). Each probe issues the same call many times with tensors so small
that the GPU finishes each kernel before the host has issued the next one, times the host side with
time.perf_counter, and reports microseconds per call (median of several rounds). The probes are the ones the cost
model's sources measured (TransformerEngine issue #2053 timed a bare torch.nn.Linear forward at 13.48 us of CPU on a
DGX H100's Xeon Platinum 8480C): an elementwise add, a torch.nn.Linear forward, the same Linear forward and backward
through autograd; and the host work a MoE layer does once per local expert (expert_probes), reported as the slope
over 4-32 local experts so that each probe's fixed cost cancels. Usage:

    python bench/host_overhead.py [--calls 2000] [--rounds 7] [--out host_overhead.json]
"""

from __future__ import annotations

import argparse
import platform
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:  # run as `python bench/host_overhead.py` from a checkout without installing
    sys.path.insert(0, str(ROOT))

from gpu_bench import cuda_torch_or_exit, write_report  # noqa: E402


def cpu_model() -> str:
    """The CPU's model name from /proc/cpuinfo (Linux), else what platform reports."""
    try:
        for line in Path("/proc/cpuinfo").read_text(encoding="utf-8", errors="replace").splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "?"


def host_us_per_call(torch: Any, fn: Callable[[], object], calls: int, rounds: int) -> float:
    """Median over rounds of host microseconds per call; the GPU is drained before each round starts."""
    for _ in range(50):
        fn()
    per_call = []
    for _ in range(rounds):
        torch.cuda.synchronize()
        start = time.perf_counter()
        for _ in range(calls):
            fn()
        per_call.append((time.perf_counter() - start) / calls * 1e6)
    torch.cuda.synchronize()
    return statistics.median(per_call)


EXPERT_COUNTS = (4, 16, 32)  # local experts per rank: the per-expert cost is the slope between the ends
EXPERT_CALLS = 16


def expert_probes(torch: Any, device: str = "cuda") -> dict[str, Callable[[int], Callable[[], object]]]:
    """The host work a MoE layer does once per local expert in the code the validation runs ran, each as a factory
    of one call for n local experts (planner.cost.host prices the slope):
    - Transformer Engine 2.x GroupedLinear, bf16 forward (transformer_engine/pytorch/module/grouped_linear.py at
      NVIDIA/TransformerEngine@v2.12, L157-L210): torch.split of the input by tokens per expert, cast_if_needed of
      each weight, one output tensor, then general_grouped_gemm, whose C++ loop issues one cuBLAS GEMM per expert.
      The loop is run here in TorchScript (a C++ interpreter loop through ATen's dispatcher, which TE's direct
      cublasLt calls skip, so this slightly overstates it);
    - Megatron-Core TEGroupedMLP._apply_bias (megatron/core/transformer/moe/experts.py L609-L626 at
      NVIDIA/Megatron-LM@3bec9aa97), the biased experts' per-expert `t + b * p` on split views, recorded by
      autograd, and their concatenation."""
    bf16 = torch.bfloat16
    rows, width = 8, 128

    @torch.jit.script
    def gemm_loop(a: list[torch.Tensor], b: list[torch.Tensor], c: list[torch.Tensor]) -> None:
        for i in range(len(a)):
            torch.mm(a[i], b[i], out=c[i])

    def grouped_linear(n: int) -> Callable[[], object]:
        x = torch.randn(rows * n, width, device=device, dtype=bf16)
        weights = [torch.randn(width, width, device=device, dtype=bf16) for _ in range(n)]
        splits = [rows] * n

        def call() -> object:
            inputs = torch.split(x, splits)
            cast = [w if w.dtype == bf16 else w.to(bf16) for w in weights]
            out = torch.empty(rows * n, width, device=device, dtype=bf16)
            gemm_loop(list(inputs), cast, list(torch.split(out, splits)))
            return out
        return call

    def expert_bias(n: int) -> Callable[[], object]:
        h = torch.randn(rows * n, width, device=device, dtype=bf16, requires_grad=True)
        probs = torch.rand(rows * n, 1, device=device, dtype=bf16)
        biases = [torch.randn(width, device=device, dtype=bf16, requires_grad=True) for _ in range(n)]
        splits = [rows] * n
        return lambda: torch.cat([t + b * p for t, b, p in zip(torch.split(h, splits), biases,
                                                                 torch.split(probs, splits), strict=True)]).to(bf16)

    return {"TE GroupedLinear forward (bf16)": grouped_linear, "Megatron-Core expert bias (autograd)": expert_bias}


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--calls", type=int, default=2000, help="calls per timed round")
    ap.add_argument("--rounds", type=int, default=7, help="timed rounds (the median is kept)")
    ap.add_argument("--out", default="host_overhead.json", help="JSON report path")
    args = ap.parse_args(argv)
    torch = cuda_torch_or_exit("bench/host_overhead.py")

    x = torch.randn(16, 256, device="cuda", dtype=torch.bfloat16)
    lin = torch.nn.Linear(256, 256, device="cuda", dtype=torch.bfloat16)
    xg = x.clone().requires_grad_(True)

    def fwd_bwd() -> None:
        lin(xg).sum().backward()

    @torch.no_grad()
    def fwd_no_grad() -> None:
        lin(x)

    # What one call of a Megatron-Core combined-1F1B schedule node adds around its module (pipeline_parallel/utils.py
    # ScheduleNode._forward at NVIDIA/Megatron-LM@3bec9aa97, planner.cost.host.COMBINED_NODE_OPS): the stream-acquire
    # event wait and record, the NVTX range, the switch to the node's stream, the detached input that keeps its
    # requires_grad, and record_stream of the freed input.
    side, event = torch.cuda.Stream(), torch.cuda.Event()

    def schedule_node() -> None:
        event.wait(side)
        torch.cuda.nvtx.range_push("node forward")
        with torch.cuda.stream(side):
            held = xg.detach()
            held.requires_grad = xg.requires_grad
        torch.cuda.nvtx.range_pop()
        event.record(side)
        xg.record_stream(side)

    probes = {
        "add (elementwise, no autograd)": lambda: torch.add(x, x),
        "combined-1F1B schedule node, its own calls": schedule_node,
        "torch.nn.Linear forward, no grad": fwd_no_grad,
        "torch.nn.Linear forward (autograd recording)": lambda: lin(xg),
        "torch.nn.Linear forward + sum + backward": fwd_bwd,
    }
    results = {name: round(host_us_per_call(torch, fn, args.calls, args.rounds), 2) for name, fn in probes.items()}
    per_expert = {}
    for name, make in expert_probes(torch).items():  # the slope over local experts, fixed costs cancelled
        # few calls a round: n x calls kernel launches stay inside the GPU's launch queue, so the host never waits
        at = {n: host_us_per_call(torch, make(n), EXPERT_CALLS, 3 * args.rounds) for n in EXPERT_COUNTS}
        lo, hi = EXPERT_COUNTS[0], EXPERT_COUNTS[-1]
        per_expert[name] = {"us_per_call": {str(n): round(v, 2) for n, v in at.items()},
                            "us_per_expert": round((at[hi] - at[lo]) / (hi - lo), 2)}
    doc = {"schema_version": 1, "device": torch.cuda.get_device_name(0), "cpu": cpu_model(),
           "torch": torch.__version__, "python": platform.python_version(), "calls": args.calls,
           "rounds": args.rounds, "host_us_per_call": results, "per_expert": per_expert}
    print(f"{doc['device']}; host CPU {doc['cpu']}; torch {doc['torch']}")
    for name, us in results.items():
        print(f"  {name:46s} {us:8.2f} us of CPU per call")
    for name, row in per_expert.items():
        print(f"  {name:46s} {row['us_per_expert']:8.2f} us of CPU per local expert  {row['us_per_call']}")
    write_report(doc, args.out)


if __name__ == "__main__":
    main()

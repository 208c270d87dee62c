"""Host (CPU) time per eager PyTorch call on this machine's CPU, the figure planner.cost.host scales.

Not a CI test (needs a CUDA GPU; a few seconds). Each probe issues the same call many times with tensors so small
that the GPU finishes each kernel before the host has issued the next one, times the host side with
time.perf_counter, and reports microseconds per call (median of several rounds). The probes are the ones the cost
model's sources measured (TransformerEngine issue #2053 timed a bare torch.nn.Linear forward at 13.48 us of CPU on a
DGX H100's Xeon Platinum 8480C): an elementwise add, a torch.nn.Linear forward, the same Linear forward and backward
through autograd. Usage:

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
    doc = {"schema_version": 1, "device": torch.cuda.get_device_name(0), "cpu": cpu_model(),
           "torch": torch.__version__, "python": platform.python_version(), "calls": args.calls,
           "rounds": args.rounds, "host_us_per_call": results}
    print(f"{doc['device']}; host CPU {doc['cpu']}; torch {doc['torch']}")
    for name, us in results.items():
        print(f"  {name:46s} {us:8.2f} us of CPU per call")
    write_report(doc, args.out)


if __name__ == "__main__":
    main()

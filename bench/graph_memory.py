"""What per-layer CUDA graphs cost in memory on this GPU: the same stack of dense blocks run eagerly and with each
block captured by torch.cuda.make_graphed_callables, which Transformer Engine's make_graphed_callables (what
Megatron-Core's per-layer graphs use) is modelled on.

Not a CI test (needs a CUDA GPU; about a minute). A captured block keeps static surfaces for replay: its input, its
output and both of their gradients; planner.cost.host.graph_buffer_bytes prices those four hidden-sized tensors per
layer and micro-batch in flight. The graphs' intermediates live in one private memory pool shared by the captured
blocks (they are captured together) instead of the caching allocator's. This script measures the peak allocated and
reserved memory of a forward and backward pass both ways and reports the difference per layer beside the planner's
figure. Usage:

    python bench/graph_memory.py [--layers 16] [--seq 4096] [--mbs 1 2] [--out graph_memory.json]
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:  # run as `python bench/graph_memory.py` from a checkout without installing
    sys.path.insert(0, str(ROOT))

from gpu_bench import cuda_torch_or_exit, write_report  # noqa: E402
from real_step import SHAPES  # noqa: E402

# Llama 3.2 1B's block shapes, as bench/real_step.py trains them; bf16 weights and activations.
_SHAPE = SHAPES["llama-1b"]
HIDDEN, HEADS = _SHAPE["hidden_size"], _SHAPE["num_attention_heads"]
KV_HEADS, FFN = _SHAPE["num_key_value_heads"], _SHAPE["intermediate_size"]
GIB = 2.0**30


def make_blocks(torch: Any, layers: int) -> list[Any]:
    nn, F = torch.nn, torch.nn.functional
    d = HIDDEN // HEADS

    class Block(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.n1 = nn.Parameter(torch.ones(HIDDEN))
            self.n2 = nn.Parameter(torch.ones(HIDDEN))
            self.qkv = nn.Linear(HIDDEN, (HEADS + 2 * KV_HEADS) * d, bias=False)
            self.out = nn.Linear(HIDDEN, HIDDEN, bias=False)
            self.fc1 = nn.Linear(HIDDEN, 2 * FFN, bias=False)
            self.fc2 = nn.Linear(FFN, HIDDEN, bias=False)

        def forward(self, x: Any) -> Any:
            b, s, _ = x.shape
            q, k, v = self.qkv(F.rms_norm(x, (HIDDEN,), self.n1)).split([HEADS * d, KV_HEADS * d, KV_HEADS * d], -1)
            q, k, v = (t.view(b, s, -1, d).transpose(1, 2) for t in (q, k, v))
            o = F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True)
            x = x + self.out(o.transpose(1, 2).reshape(b, s, HIDDEN))
            gate, up = self.fc1(F.rms_norm(x, (HIDDEN,), self.n2)).chunk(2, dim=-1)
            return x + self.fc2(F.silu(gate) * up)

    return [Block().to(device="cuda", dtype=torch.bfloat16) for _ in range(layers)]


def step_peak(torch: Any, blocks: Any, mbs: int, seq: int, repeats: int = 3) -> dict[str, float]:
    """Peak allocated / reserved GiB over `repeats` forward + backward passes through the blocks."""
    torch.cuda.synchronize()
    torch.cuda.reset_peak_memory_stats()
    for _ in range(repeats):
        x = torch.randn(mbs, seq, HIDDEN, device="cuda", dtype=torch.bfloat16, requires_grad=True)
        y = x
        for block in blocks:
            y = block(y)
        y.float().square().mean().backward()
        for block in blocks:  # what an optimizer step would consume; frees the gradients like zero_grad
            for p in block.parameters():  # make_graphed_callables hands modules back as modules
                p.grad = None
    torch.cuda.synchronize()
    return {"allocated_gib": torch.cuda.max_memory_allocated() / GIB,
            "reserved_gib": torch.cuda.max_memory_reserved() / GIB}


def planner_bytes_per_layer(mbs: int, seq: int) -> float:
    """planner.cost.host.graph_buffer_bytes for a dense layer under per-layer graphs, one micro-batch in flight."""
    import numpy as np

    from planner.cost.host import graph_buffer_bytes
    from planner.inputs.catalog import load_cluster, load_model
    from planner.inputs.problem import Problem
    from planner.inputs.specs import TrainingSpec

    model = load_model("llama3-8b").model_copy(update={"hidden_size": HIDDEN})  # only the width counts here
    problem = Problem(model, load_cluster("h100x8"), TrainingSpec(seq_len=seq, global_batch=8, cuda_graphs="per-layer"))
    one = np.array([1.0])
    return float(graph_buffer_bytes(problem, np.array([float(mbs * seq)]), one, np.array([0.0]))[0])


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--layers", type=int, default=16)
    ap.add_argument("--seq", type=int, default=4096)
    ap.add_argument("--mbs", type=int, nargs="+", default=[1, 2])
    ap.add_argument("--out", default="graph_memory.json", help="JSON report path")
    args = ap.parse_args(argv)
    torch = cuda_torch_or_exit("bench/graph_memory.py")
    rows = []
    for mbs in args.mbs:
        torch.manual_seed(0)
        blocks = make_blocks(torch, args.layers)
        eager = step_peak(torch, blocks, mbs, args.seq)
        samples = tuple((torch.randn(mbs, args.seq, HIDDEN, device="cuda", dtype=torch.bfloat16,
                                     requires_grad=True),) for _ in blocks)
        graphed = torch.cuda.make_graphed_callables(tuple(blocks), samples)
        captured = step_peak(torch, graphed, mbs, args.seq)
        del graphed, blocks, samples
        torch.cuda.empty_cache()
        priced = planner_bytes_per_layer(mbs, args.seq) / GIB
        row = {"mbs": mbs, "layers": args.layers, "seq": args.seq, "eager": eager, "graphed": captured,
               "extra_allocated_gib_per_layer": (captured["allocated_gib"] - eager["allocated_gib"]) / args.layers,
               "extra_reserved_gib_per_layer": (captured["reserved_gib"] - eager["reserved_gib"]) / args.layers,
               "priced_gib_per_layer": priced}
        rows.append(row)
        print(f"mbs {mbs}: eager {eager['allocated_gib']:.2f} / {eager['reserved_gib']:.2f} GiB, graphed "
              f"{captured['allocated_gib']:.2f} / {captured['reserved_gib']:.2f} GiB (allocated / reserved); "
              f"per layer +{row['extra_allocated_gib_per_layer']:.3f} / +{row['extra_reserved_gib_per_layer']:.3f}"
              f" GiB, priced +{priced:.3f}")
    doc = {"schema_version": 1, "device": torch.cuda.get_device_name(0), "torch": torch.__version__, "rows": rows}
    write_report(doc, args.out)


if __name__ == "__main__":
    main()

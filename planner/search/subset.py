"""Fewer GPUs than the cluster has, where the global batch does not spread over all of them.

Every layout uses every GPU (tp x pp x cp x dp = GPUs) and the data ranks must divide the global batch, so an odd
factor of the GPU count that the batch lacks (an NVL72 rack's 9 = 72 / 8 against a batch of 512) has to go to
tensor, context or pipeline parallelism, often a pipeline with a large bubble. Leaving whole nodes idle can then
train faster in all: the largest count that keeps only the batch's own odd factors is searched too, and the
comparison is reported as a note, never as the plan (the user asked for the cluster they have).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

from planner.errors import NoFeasiblePlan
from planner.inputs.problem import Problem
from planner.search.search import search

# A smaller job is named only when it trains this much faster in all, a margin well above the cost model's error
# between two layouts of one problem (docs/accuracy.md, Ranking: Kendall tau over ranking groups).
MIN_GAIN = 1.10


@dataclass(frozen=True)
class SubsetNote:
    gpus: int
    cluster: str
    gain: float  # tokens/s of the whole job on `gpus` over tokens/s on all GPUs
    how: str = ""  # how to plan it: a `--cluster` shorthand, or for a tiered cluster file the nodes to set there

    def text(self, total: int, batch: int) -> str:
        return (f"{self.gpus} of these {total} GPUs ({self.cluster}) train {self.gain:.2f}x faster in all: the "
                f"global batch {batch:,} does not spread over {total} GPUs' data ranks "
                f"({self.how or 'plan --cluster ' + self.cluster})")


def _odd(n: int) -> int:
    while n % 2 == 0:
        n //= 2
    return n


def subset_size(problem: Problem) -> int | None:
    """The largest GPU count below the cluster's, in whole nodes, whose odd factor divides the global batch's;
    None where the cluster's own odd factor already does (nothing to gain) or no smaller count exists."""
    n, node = problem.num_gpus, problem.cluster.gpus_per_node
    batch_odd = _odd(problem.training.global_batch)
    if batch_odd % _odd(n) == 0 or "dp" in problem.fixed:
        return None
    for m in range(n - node, 0, -node):
        if batch_odd % _odd(m) == 0:
            return m
    return None


def smaller_job(problem: Problem, best_tokens_per_s_per_gpu: float) -> SubsetNote | None:
    """A subset of whole nodes that trains at least MIN_GAIN faster in all than the best plan on every GPU."""
    m = subset_size(problem)
    if m is None:
        return None
    gpu, tiered = problem.cluster.gpu.key, problem.cluster.tiers is not None
    name = f"{problem.cluster.name}, {m // problem.cluster.gpus_per_node} nodes" if tiered else f"{gpu}x{m}"
    cluster = problem.cluster.model_copy(update={"num_gpus": m, "name": name})
    try:
        plan = search(replace(problem, cluster=cluster), top=1).plans[0]
    except NoFeasiblePlan:
        return None
    gain = float(plan.metrics["tokens_per_s_per_gpu"]) * m / (best_tokens_per_s_per_gpu * problem.num_gpus)
    how = f"set nodes: {m // problem.cluster.gpus_per_node} in the cluster file, its tiers kept" if tiered else ""
    return SubsetNote(m, cluster.name, gain, how) if gain >= MIN_GAIN and math.isfinite(gain) else None

"""The nearest problem that has a plan, when the one asked has none because of its shape: the global batch nearest to
the one asked, and the most GPUs up to the count asked, each checked by the search itself (planner.search.search.
has_plan: every rule and the memory fit).

Candidates come from the shape rules alone (planner.search.core), so that few searches run: a global batch must be a
multiple of some dp that the GPU count can take (tp x pp x cp x dp = GPUs under the rules on those knobs), and a GPU
count must be a product tp x pp x cp x dp of sizes that pass the rules on each of them, with dp dividing the batch
(every layout has mbs x dp dividing it). Both lists are tried nearest first and cut after a fixed number of
searches, so the answer is the same on every machine.
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np

from planner.inputs.catalog import cluster_from_gpu
from planner.inputs.problem import Problem
from planner.search.core import knob_domains, rule_matrix
from planner.search.search import has_plan
from planner.search.space import divisors

MAX_SEARCHES = 24  # per list; a rule-infeasible candidate costs a few ms, a feasible one ~0.05 s on 100k GPUs
MIN_SHARE = 0.5  # GPU counts below half the asked one are no longer "near"
MAX_PRODUCTS = 4_000_000  # tp x pp x cp x dp combinations multiplied out (tens of MB); beyond, no count is named


def with_batch(problem: Problem, batch: int) -> Problem:
    return replace(problem, training=problem.training.model_copy(update={"global_batch": batch}))


def with_gpus(problem: Problem, count: int) -> Problem:
    """The same GPUs, `count` of them, as `{gpu}x{count}` would build them (NVLink domain, node size)."""
    cluster = cluster_from_gpu(problem.cluster.gpu, count, f"{problem.cluster.gpu.key}x{count}")
    keep = {"reliability": problem.cluster.reliability, "storage": problem.cluster.storage,
            "network_gbps": problem.cluster.network_gbps, "network_latency_us": problem.cluster.network_latency_us,
            "oversubscription": problem.cluster.oversubscription}
    return replace(problem, cluster=cluster.model_copy(update=keep))


def data_sizes(problem: Problem) -> list[int]:
    """The dp values some tp x pp x cp completes to the GPU count under the rules on those four knobs (those that
    read the micro-batch, and with it the batch, left out)."""
    dom = knob_domains(problem)
    _, allowed = rule_matrix(problem, ("tp", "pp", "cp", "dp"), dom, without=("mbs",))
    sizes = (len(dom["tp"]), len(dom["pp"]), len(dom["cp"]), len(dom["dp"]))
    ok = allowed.all(axis=0).reshape(sizes).any(axis=(0, 1, 2))
    return [d for d, keep in zip(dom["dp"], ok, strict=True) if keep]


def batch_candidates(problem: Problem) -> list[int]:
    """Global batches the shape rules allow, nearest to the asked one first (ties: the smaller first)."""
    gbs = problem.training.global_batch
    found = {m for d in data_sizes(problem) for m in (gbs - gbs % d, gbs - gbs % d + d) if m > 0}
    found.discard(gbs)
    return sorted(found, key=lambda b: (abs(b - gbs), b))


def nearest_batch(problem: Problem) -> int | None:
    """The global batch nearest to the asked one with a plan (None when none of the nearest candidates has one)."""
    for batch in batch_candidates(problem)[:MAX_SEARCHES]:
        if has_plan(with_batch(problem, batch)):
            return batch
    return None


def _sizes(problem: Problem, knob: str, dom: dict[str, list[int]]) -> list[int]:
    """The values of `knob` in `dom` that pass every rule reading it, projected over the other knobs (rules that read
    dp, whose range depends on the GPU count, left out)."""
    _, allowed = rule_matrix(problem, (knob,), dom, without=("dp",))
    return [v for v, keep in zip(dom[knob], allowed.all(axis=0), strict=True) if keep]


def count_candidates(problem: Problem) -> list[int]:
    """GPU counts below the asked one, in whole nodes and at least MIN_SHARE of it, that sizes passing the rules on
    tp, pp and cp multiply to with a dp dividing the batch; the largest first. The sizes range over every value the
    search could give them on any GPU count (not the divisors of this one)."""
    m, tr, n = problem.model, problem.training, problem.num_gpus
    tp_cap = n if problem.allow_tp_across_nodes else problem.cluster.nvlink_domain
    ranges = {"tp": list(range(1, min(tp_cap, m.num_attention_heads) + 1)),
              "pp": list(range(1, m.num_hidden_layers + 3)),
              "cp": divisors(tr.seq_len // 2) if tr.seq_len % 2 == 0 else [1]}  # seq % (2 cp) == 0
    dom = {**knob_domains(problem), **{k: [problem.fixed[k]] if k in problem.fixed else v for k, v in ranges.items()}}
    tp, pp, cp = (_sizes(problem, k, dom) for k in ("tp", "pp", "cp"))
    dp = [problem.fixed["dp"]] if "dp" in problem.fixed else divisors(tr.global_batch)
    if len(tp) * len(pp) * len(cp) * len(dp) > MAX_PRODUCTS:
        return []
    products = np.unique(np.multiply.outer(np.multiply.outer(np.multiply.outer(tp, pp), cp), dp).ravel())
    node = problem.cluster.gpus_per_node
    near = products[(products < n) & (products >= n * MIN_SHARE) & (products % node == 0)]
    return [int(x) for x in near[::-1]]


def nearest_count(problem: Problem) -> int | None:
    """The most GPUs below the asked count (whole nodes, at least half of it) with a plan, or None."""
    for count in count_candidates(problem)[:MAX_SEARCHES]:
        if has_plan(with_gpus(problem, count)):
            return count
    return None

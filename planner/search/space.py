"""The search space: a domain per knob, and a staged enumeration that applies each rule as soon as its knobs exist.

Staging keeps the candidate table small (a rule on tp/pp/cp never sees the micro-batch axis) while the prune counts
still refer to the full cross product, so `candidates == feasible + sum(pruned)` holds.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from planner.inputs.frameworks import capabilities_for
from planner.inputs.layout import KNOB_BY_NAME, KNOBS
from planner.inputs.problem import Problem
from planner.search.rules import DOMINANCE, RULES

MAX_MICRO_BATCH = 32  # larger micro-batches never pay off once GEMMs are saturated (Narayanan et al. 2021 Fig. 7)


def divisors(n: int) -> list[int]:
    small, large = [], []
    i = 1
    while i * i <= n:
        if n % i == 0:
            small.append(i)
            if i * i != n:
                large.append(n // i)
        i += 1
    return small + large[::-1]


def _choices(knob: str) -> list[int]:
    allowed = KNOB_BY_NAME[knob].allowed()
    assert allowed is not None, knob
    return list(allowed)


def _schedules(problem: Problem) -> list[int]:
    """Schedules worth enumerating: those the problem allows (validation narrows them) and, unless pins are trusted,
    those the framework ships (the framework_schedule rule would refuse the rest after the cross product)."""
    choices = list(problem.schedule_choices) if problem.schedule_choices else _choices("schedule")
    if problem.trust_pins:
        return choices
    shipped = {int(s) for s in capabilities_for(problem.training.framework).schedules}
    return [s for s in choices if s in shipped] or choices


def domains(problem: Problem) -> dict[str, list[int]]:
    """Candidate values per knob; a pinned knob gets exactly its value (so a bad pin is reported by the rules)."""
    m, n = problem.model, problem.num_gpus
    world = divisors(n)
    tp_cap = n if problem.allow_tp_across_nodes else problem.cluster.nvlink_domain
    dom = {
        "tp": [d for d in world if d <= tp_cap and d <= m.num_attention_heads],
        "pp": [d for d in world if d <= m.num_hidden_layers + 2],  # as wide as layers_fill_stages allows
        "cp": [d for d in world if d == 1 or problem.training.seq_len % (2 * d) == 0],
        "ep": [d for d in divisors(m.num_local_experts) if d <= n] if m.is_moe else [1],
        # chunks per rank: divisors of the layers, or of layers + 2 when embedding and loss count as layers
        "vpp": sorted({d for n in (m.num_hidden_layers, m.num_hidden_layers + 2) for d in divisors(n) if d <= 16}),
        "mbs": [d for d in divisors(problem.training.global_batch) if d <= MAX_MICRO_BATCH],
        "zero": _choices("zero"),
        "recompute": _choices("recompute"),
        "sp": [0, 1],
        "schedule": _schedules(problem),
        "cp_comm": _choices("cp_comm"),
        "etp": _choices("etp") if m.is_moe else [0],
    }
    for knob, value in problem.fixed.items():
        if knob != "dp":
            dom[knob] = [value]
    return dom


@dataclass
class Enumeration:
    cols: dict[str, np.ndarray]
    candidates: int
    pruned: dict[str, int]


# Knobs in the order they enter the cross product; dp is derived from the world size right after cp. Each rule is
# applied as soon as every knob it reads exists, so the table never holds rows an earlier rule already refuses.
_ORDER: tuple[str, ...] = ("tp", "sp", "pp", "cp", "cp_comm", "ep", "etp", "vpp", "schedule", "mbs", "zero",
                           "recompute")


def _cross(cols: dict[str, np.ndarray], knob: str, values: list[int]) -> dict[str, np.ndarray]:
    size = len(next(iter(cols.values()))) if cols else 1
    vals = np.asarray(values, dtype=np.int32)  # sizes stay below 2**31 (specs cap counts at 10,000,000)
    out = {k: np.repeat(v, len(vals)) for k, v in cols.items()}
    out[knob] = np.tile(vals, size)
    return out


def enumerate_layouts(problem: Problem) -> Enumeration:
    dom = domains(problem)
    sizes = [len(dom[k]) for k in _ORDER]
    candidates = int(np.prod(sizes))
    pruned = {r.name: 0 for r in (*RULES, *DOMINANCE)}
    cols: dict[str, np.ndarray] = {}
    known: set[str] = set()
    pending = [*RULES, *DOMINANCE]  # framework rules first: a row they refuse is charged to them
    for i, knob in enumerate(_ORDER):
        cols = _cross(cols, knob, dom[knob])
        known.add(knob)
        if knob == "cp":
            denom = cols["tp"].astype(np.int64) * cols["pp"] * cols["cp"]  # int64: the product can pass 2**31
            cols["dp"] = np.where(problem.num_gpus % denom == 0, problem.num_gpus // denom, 0).astype(np.int32)
            if "dp" in problem.fixed:
                cols["dp"] = np.where(cols["dp"] == problem.fixed["dp"], cols["dp"], -cols["dp"] - 1)
            known.add("dp")
        later = int(np.prod(sizes[i + 1:])) if i + 1 < len(sizes) else 1
        ready = [r for r in pending if set(r.knobs) <= known]
        if not ready:
            continue
        keep = np.ones(len(cols["tp"]), dtype=bool)
        for rule in ready:  # a row is charged to the first rule (in RULES order) that refuses it
            pending.remove(rule)
            ok = rule.check(cols, problem)
            if rule.name == "world_size":
                ok &= cols["dp"] > 0
            pruned[rule.name] += int((keep & ~ok).sum()) * later
            keep &= ok
        cols = {k: v[keep] for k, v in cols.items()}
    assert not pending and set(KNOBS) <= set(cols), (pending, set(KNOBS) - set(cols))
    return Enumeration(cols=cols, candidates=candidates, pruned=pruned)

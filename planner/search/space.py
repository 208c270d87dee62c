"""The search space: a domain per knob, and a staged enumeration that applies each rule as soon as its knobs exist.

Staging keeps the candidate table small (a rule on tp/pp/cp never sees the micro-batch axis) while the prune counts
still refer to the full cross product, so `candidates == feasible + sum(pruned)` holds.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field

import numpy as np

from planner.cost.step import Shared
from planner.inputs.frameworks import capabilities_for
from planner.inputs.layout import KNOB_BY_NAME, KNOBS
from planner.inputs.problem import Problem
from planner.search.lazy import LazyRows
from planner.search.rules import DOMINANCE, RULES, Rule

MAX_MICRO_BATCH = 32  # larger micro-batches never pay off once GEMMs are saturated (Narayanan et al. 2021 Fig. 7)
RUNS_PER_ROW = 8  # _Crossed.grouped checks a rule per run when a run averages at least this many rows


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


def _orders(problem: Problem) -> list[int]:
    """Rank orders worth enumerating: on a cluster of more than two tiers (planner.inputs.network), those the
    framework lays out (the framework_rank_order rule would refuse the rest); on two tiers only the default, so
    that plain problems do not grow. (An order can still move a group across the NVLink domain there when tp x cp
    leaves room in it; `--fix order=...` prices that.)"""
    choices = _choices("order")
    if not problem.cluster.tiered:
        return choices[:1]
    if problem.trust_pins:
        return choices
    return [o for o in choices if o in {int(x) for x in capabilities_for(problem.training.framework).rank_orders}]


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
        "recompute": list(problem.recompute_choices) if problem.recompute_choices else _choices("recompute"),
        "sp": [0, 1],
        "schedule": _schedules(problem),
        "cp_comm": _choices("cp_comm"),
        "etp": _choices("etp") if m.is_moe else [0],
        "order": _orders(problem),
    }
    for knob, value in problem.fixed.items():
        if knob != "dp":
            dom[knob] = [value]
    return dom


@dataclass
class Enumeration:
    """The rule-feasible layouts (`cols`), or, built with `lazy_last`, the table before the last knob (`cols`) and
    `last` = (that knob, its values, which rows of cols x values the rules keep), so that a search can check the
    (largest) table part by part (`grouped_parts`) instead of building it."""

    cols: Mapping[str, np.ndarray]  # with lazy_last a LazyRows: columns built when read
    candidates: int
    pruned: dict[str, int]
    last: tuple[str, np.ndarray, np.ndarray] | None = None
    _base_runs: dict[int, np.ndarray] | None = field(default=None, repr=False, compare=False)

    def grouped_parts(self, rows: int, *frees: tuple[str, ...]) -> Iterator[tuple[np.ndarray, np.ndarray,
                                                                                   list[Shared]]]:
        """The table of a lazy enumeration in consecutive parts of about `rows` rows (whole parent groups: rows of
        one parent differ only in the last knob), without building them: each part's rows as (their parent in
        `cols`, the index of their value of the last knob) and, for each set of `frees`, the groups of those rows (those
        `shared_rows` of the part would give, up to which row represents a group).

        The groups are found on the part's parents (a slice of `cols`, a third the rows; a row's group is its
        parent's, and also its last knob's value when that knob is not free), and the part's columns are never
        taken: a search takes only the rows it keeps (`take`). Terms priced per group are elementwise, so every row
        gets the same bits whichever grouping spreads them (tests/test_search_speed.py)."""
        assert self.last is not None, "grouped_parts needs enumerate_layouts(lazy_last=True)"
        knob, vals, kept = self.last
        width = len(vals)
        per = max(rows // width, 1)
        for first in range(0, len(kept) // width, per):
            local = np.flatnonzero(kept[first * width:(first + per) * width])
            own, pos = np.divmod(local, width)  # parent within the slice, index in vals (one pass)
            block = self.cols.block(first, first + per) if isinstance(self.cols, LazyRows) else \
                {k: v[first:first + per] for k, v in self.cols.items()}
            sets = [tuple(dict.fromkeys((*free, knob))) for free in frees]
            found = row_groups(block, *sets, runs=self._block_runs(sets, first, first + per))
            groups = [_part_groups(block, rep, index.take(own), knob, vals, None if knob in free else pos)
                      for free, (rep, index) in zip(frees, found, strict=True)]
            yield own + first, pos, groups

    def _block_runs(self, sets: list[tuple[str, ...]], lo: int, hi: int) -> dict[int, np.ndarray] | None:
        """row_groups' runs of the table's rows lo to hi, read off the table its rows were crossed from (a LazyRows'
        base, a quarter the rows): rows agree on the knobs before the one crossed last exactly when their parents
        there do. None when a set's first free knob is that last one, or the table was built whole."""
        if not isinstance(self.cols, LazyRows):
            return None
        firsts = [min(_ORDER.index(k) for k in free) for free in sets]
        if max(firsts) > _ORDER.index(self.cols.knob):
            return None
        if self._base_runs is None:
            self._base_runs = {}
        if missing := [f for f in firsts if f not in self._base_runs]:
            self._base_runs.update(run_ids(self.cols.base, missing))
        parent = self.cols.parent[lo:hi]
        return {f: self._base_runs[f].take(parent) - self._base_runs[f][parent[0]] for f in firsts} \
            if len(parent) else None

    def groups_free_in(self, free: tuple[str, ...], parent: np.ndarray,
                       pos: np.ndarray) -> tuple[np.ndarray, np.ndarray] | None:
        """row_groups(rows, free) of the rows (parent, index of the last knob's value) of a lazy enumeration, found
        from the indices alone when `free` is the knob crossed before the last (the table before the last knob is a
        LazyRows): rows agree on every other knob when their parents share a row of the table before that knob and
        their last knob's value is the same. None otherwise."""
        if not isinstance(self.cols, LazyRows) or free != (self.cols.knob,):
            return None
        assert self.last is not None
        key = self.cols.parent.take(parent) * len(self.last[1]) + pos
        slot = np.full(len(self.cols.base["tp"]) * len(self.last[1]), -1, dtype=np.int64)
        slot[key] = np.arange(len(key))  # any row of a group represents it
        present = slot >= 0
        return slot[present], (np.cumsum(present, dtype=np.int64) - 1).take(key)

    def kept(self, parent: np.ndarray, pos: np.ndarray) -> Mapping[str, np.ndarray]:
        """The rows (parent, index of the last knob's value) of a lazy enumeration as a table whose columns are built
        when read (take_rows builds only the rows asked for): a search reads a few hundred thousand of its rows'
        ZeRO-free representatives and a few thousand rows in full, never every column of every row."""
        if not isinstance(self.cols, LazyRows):
            return self.take(parent, pos)
        assert self.last is not None
        return LazyRows(self.cols, self.last[0], self.last[1], parent, pos)

    def take(self, parent: np.ndarray, pos: np.ndarray) -> dict[str, np.ndarray]:
        """The rows (parent, index of the last knob's value) of a lazy enumeration, as columns."""
        assert self.last is not None
        knob, vals, _ = self.last
        if isinstance(self.cols, LazyRows):
            return {**self.cols.take(parent), knob: vals.take(pos)}
        return {**{k: v.take(parent) for k, v in self.cols.items()}, knob: vals.take(pos)}


def _part_groups(block: Mapping[str, np.ndarray], rep: np.ndarray, ids: np.ndarray, knob: str, vals: np.ndarray,
                 pos: np.ndarray | None) -> Shared:
    """The groups of a part's rows whose parents fall in groups `ids` of `block` (`rep`: a row of each), only those
    present; with `pos` (each row's index in `vals`: the last knob is not free) a group is an (id, pos) pair."""
    width = 1 if pos is None else len(vals)
    key = ids if pos is None else ids * width + pos
    present = np.zeros(len(rep) * width, dtype=bool)
    present[key] = True
    cell = np.flatnonzero(present)
    rows = rep.take(cell // width)
    table = block.take(rows) if isinstance(block, LazyRows) else {k: v.take(rows) for k, v in block.items()}
    # a free last knob: any value represents the group
    table[knob] = np.repeat(vals[:1], len(cell)) if pos is None else vals.take(cell % width)
    return Shared(table, (np.cumsum(present, dtype=np.int64) - 1).take(key))


# Knobs in the order they enter the cross product; dp is derived from the world size right after cp. Each rule is
# applied as soon as every knob it reads exists, so the table never holds rows an earlier rule already refuses.
_ORDER: tuple[str, ...] = ("tp", "sp", "pp", "cp", "cp_comm", "ep", "etp", "order", "vpp", "schedule", "mbs",
                           "zero", "recompute")


class _Crossed(Mapping[str, np.ndarray]):
    """The table crossed with one more knob (each row repeated once per value), materialising only the columns a
    rule reads; `rows` then builds the kept rows straight from the smaller table (one take per column instead of a
    repeat and a take)."""

    def __init__(self, cols: Mapping[str, np.ndarray], knob: str, values: list[int]) -> None:
        self.cols, self.knob = cols, knob
        self.vals = np.asarray(values, dtype=np.int32)  # sizes stay below 2**31 (specs cap counts at 10,000,000)
        self.size = _row_count(cols) * len(self.vals)
        self._made: dict[str, np.ndarray] = {}

    def __getitem__(self, key: str) -> np.ndarray:
        if key not in self._made:
            if key == self.knob:
                self._made[key] = np.tile(self.vals, self.size // len(self.vals))
            else:
                self._made[key] = np.repeat(self.cols[key], len(self.vals))
        return self._made[key]

    def __iter__(self) -> Iterator[str]:
        return iter((*self.cols, self.knob))

    def __len__(self) -> int:
        return len(self.cols) + 1

    def by_value(self, rule: Rule, problem: Problem) -> np.ndarray:
        """A rule that reads only the new knob, checked once per value and repeated for every row: a predicate is
        elementwise, so each row gets what checking the crossed column would give (the recompute rule alone took
        ~75 ms on DeepSeek-V3 fp8's 3.2 million rows)."""
        ok = np.broadcast_to(rule.check({self.knob: self.vals}, problem), self.vals.shape)
        return np.tile(ok, self.size // len(self.vals))

    def per_value(self, rule: Rule, problem: Problem) -> np.ndarray:
        """A rule checked on the smaller table once per value of the new knob (a constant column): the same answer
        per row as on the crossed table, without building crossed copies of the columns it reads (a lazy last knob's
        crossed table is never built)."""
        n = self.size // len(self.vals)
        cols = {k: self.cols[k] for k in rule.knobs if k != self.knob}
        ok = np.empty((n, len(self.vals)), dtype=bool)
        for j, value in enumerate(self.vals):
            ok[:, j] = np.broadcast_to(rule.check({**cols, self.knob: np.full(n, value, dtype=self.vals.dtype)},
                                                  problem), (n,))
        return ok.reshape(-1)

    def grouped(self, rule: Rule, problem: Problem) -> np.ndarray | None:
        """A rule checked once per run of adjacent rows of the smaller table that agree on every other knob it reads
        (and per value of the new knob), each run's answers repeated over its rows: a predicate is elementwise, so
        every row gets what checking the crossed columns would give, without building them. The table is in
        enumeration order, so knobs crossed early change rarely: the ZeRO stage's rules read ~1.3 million crossed
        rows on DeepSeek-V3 fp8 from a few thousand runs. None (check it row by row) when the runs are not few."""
        read = [k for k in rule.knobs if k != self.knob]
        n = self.size // len(self.vals)
        if not read or n < 2:
            return None
        start = np.zeros(n, dtype=bool)
        start[0] = True
        for k in read:
            col = self.cols[k]
            start[1:] |= col[1:] != col[:-1]
        first = np.flatnonzero(start)
        if len(first) * RUNS_PER_ROW > n:
            return None
        width = len(self.vals)
        small = {k: np.repeat(self.cols[k].take(first), width) for k in read}
        small[self.knob] = np.tile(self.vals, len(first))
        ok = np.broadcast_to(rule.check(small, problem), (len(first) * width,)).reshape(len(first), width)
        return np.repeat(ok, np.diff(first, append=n), axis=0).reshape(-1)

    def rows(self, keep: np.ndarray | None = None) -> dict[str, np.ndarray]:
        if keep is None:
            return {k: self[k] for k in self}
        rows = np.flatnonzero(keep)
        parent = rows // len(self.vals)
        return {**{k: v.take(parent) for k, v in self.cols.items()}, self.knob: self.vals.take(rows % len(self.vals))}

    def lazy_rows(self, keep: np.ndarray | None = None) -> LazyRows:
        """`rows`, with each column built only when read (LazyRows)."""
        rows = np.flatnonzero(keep) if keep is not None else np.arange(self.size)
        parent, pos = np.divmod(rows, len(self.vals))
        return LazyRows(self.cols, self.knob, self.vals, parent, pos)


def _row_count(cols: Mapping[str, np.ndarray]) -> int:
    if isinstance(cols, LazyRows):
        return len(cols.parent)
    return len(next(iter(cols.values()))) if cols else 1


def enumerate_layouts(problem: Problem, lazy_last: bool = False) -> Enumeration:
    dom = domains(problem)
    sizes = [len(dom[k]) for k in _ORDER]
    candidates = int(np.prod(sizes))
    pruned = {r.name: 0 for r in (*RULES, *DOMINANCE)}
    cols: Mapping[str, np.ndarray] = {}
    known: set[str] = set()
    pending = [*RULES, *DOMINANCE]  # framework rules first: a row they refuse is charged to them
    for i, knob in enumerate(_ORDER):
        table: Mapping[str, np.ndarray] = _Crossed(cols, knob, dom[knob])
        known.add(knob)
        if knob == "cp":
            table = table.rows()
            denom = table["tp"].astype(np.int64) * table["pp"] * table["cp"]  # int64: the product can pass 2**31
            table["dp"] = np.where(problem.num_gpus % denom == 0, problem.num_gpus // denom, 0).astype(np.int32)
            if "dp" in problem.fixed:
                table["dp"] = np.where(table["dp"] == problem.fixed["dp"], table["dp"], -table["dp"] - 1)
            known.add("dp")
        later = int(np.prod(sizes[i + 1:])) if i + 1 < len(sizes) else 1
        ready = [r for r in pending if set(r.knobs) <= known]
        keep = np.ones(table.size if isinstance(table, _Crossed) else len(table["tp"]), dtype=bool)
        for rule in ready:  # a row is charged to the first rule (in RULES order) that refuses it
            pending.remove(rule)
            grouped = None
            if isinstance(table, _Crossed) and rule.knobs == (knob,):
                ok = table.by_value(rule, problem)
            elif isinstance(table, _Crossed) and (grouped := table.grouped(rule, problem)) is not None:
                ok = grouped
            elif isinstance(table, _Crossed) and lazy_last and i == len(_ORDER) - 1:
                ok = table.per_value(rule, problem)
            else:
                ok = rule.check(table, problem)
            if rule.name == "world_size":
                ok &= table["dp"] > 0
            pruned[rule.name] += int(np.count_nonzero(keep & ~ok)) * later
            keep &= ok
        if lazy_last and i == len(_ORDER) - 1 and isinstance(table, _Crossed):
            assert not pending, pending
            if isinstance(table.cols, LazyRows):
                table.cols.forget()  # the whole columns its rules read: a search reads the table part by part
            return Enumeration(table.cols, candidates, pruned, (knob, table.vals, keep))
        if isinstance(table, _Crossed) and lazy_last and i == len(_ORDER) - 2:
            cols = table.lazy_rows(keep if ready else None)
        elif isinstance(table, _Crossed):
            cols = table.rows(keep if ready else None)
        else:
            cols = select(table, keep) if ready else dict(table)
    assert not pending and set(KNOBS) <= set(cols), (pending, set(KNOBS) - set(cols))
    return Enumeration(cols=cols, candidates=candidates, pruned=pruned)


def shared_rows(cols: dict[str, np.ndarray], *frees: tuple[str, ...]) -> list[Shared]:
    """For each set of `frees`, the groups of rows of an enumerated table (or of a subset, in its order) that agree
    on every knob but those (planner.cost.step.Shared: a representative table and each row's group)."""
    return [Shared({k: v.take(rep) for k, v in cols.items()}, index) for rep, index in row_groups(cols, *frees)]


def row_groups(cols: Mapping[str, np.ndarray], *frees: tuple[str, ...],
               runs: dict[int, np.ndarray] | None = None) -> list[tuple[np.ndarray, np.ndarray]]:
    """For each set of `frees`, (a representative row per group, each row's group) of the rows that agree on every
    knob but those.

    Rows agreeing on every knob enumerated before the first free one are adjacent, so those knobs group by runs
    (no sort, and the runs are shared between the sets; `runs`: each run's id from 0, per index in _ORDER of a first
    free knob, when already known); the knobs after it that are not free (small codes) refine the run ids as a
    mixed-radix key. A table in another order only groups less, never wrongly: a run never joins rows that
    differ."""
    firsts = [min(_ORDER.index(k) for k in free) for free in frees]
    runs = runs or run_ids(cols, firsts)
    n = len(next(iter(runs.values()))) if runs else len(cols["tp"])
    out = []
    for free, first in zip(frees, firsts, strict=True):
        key = runs[first]
        rest = [k for k in _ORDER[first:] if k not in free]
        for knob in rest:
            code = cols[knob].astype(np.int64)
            key = key * (int(code.max(initial=0)) + 1) + code
        if not rest:
            start = np.ones(n, dtype=bool)
            start[1:] = key[1:] != key[:-1]
            out.append((np.flatnonzero(start), key))
            continue
        slot = np.full(int(key.max(initial=-1)) + 1, -1, dtype=np.int64)
        slot[key] = np.arange(n)  # any row of a group represents it
        present = slot >= 0
        out.append((slot[present], (np.cumsum(present, dtype=np.int64) - 1)[key]))
    return out


def run_ids(cols: Mapping[str, np.ndarray], firsts: list[int]) -> dict[int, np.ndarray]:
    """For each index in _ORDER, each row's run (from 0) of adjacent rows that agree on dp and every knob before it."""
    n = len(cols["tp"])
    start = np.zeros(n, dtype=bool)
    start[:1] = True
    start[1:] |= cols["dp"][1:] != cols["dp"][:-1]
    runs: dict[int, np.ndarray] = {}
    for i, knob in enumerate(_ORDER[:max(firsts, default=-1) + 1]):
        if i in firsts:
            runs[i] = np.cumsum(start, dtype=np.int64) - 1
        start[1:] |= cols[knob][1:] != cols[knob][:-1]
    return runs


def select(cols: dict[str, np.ndarray], mask: np.ndarray) -> dict[str, np.ndarray]:
    """The rows of a table where `mask` holds: one flatnonzero, then a take per column (several times faster than
    boolean indexing each column)."""
    rows = np.flatnonzero(mask)
    return {k: v.take(rows) for k, v in cols.items()}

"""A table's rows given as indices into the table they were crossed from, each column built only when read.

The search's largest tables (the layouts before the last knob, and the layouts that fit and can rank) are read
part by part or a few rows at a time; built whole they cost ~35-55 MB each and the page faults of first touching
them.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping

import numpy as np


class LazyRows(Mapping[str, np.ndarray]):
    """The rows (`parent` in `base`, `pos` in the new knob's `vals`) of a table crossed with one more knob, each
    column built only when read: a search reads a few whole columns (the last knob's rules) and the rest part by part
    (`block`, `take`), so the table before a lazy last knob, the largest one built, never exists whole (~55 MB and
    its page faults on DeepSeek-V3 fp8 at global batch 15360)."""

    def __init__(self, base: Mapping[str, np.ndarray], knob: str, vals: np.ndarray, parent: np.ndarray,
                 pos: np.ndarray) -> None:
        self.base, self.knob, self.vals, self.parent, self.pos = base, knob, vals, parent, pos
        self._made: dict[str, np.ndarray] = {}

    def __getitem__(self, key: str) -> np.ndarray:
        if key not in self._made:
            if key == self.knob:
                self._made[key] = self.vals.take(self.pos)
            elif isinstance(self.base, LazyRows):
                self._made[key] = self.base.take_column(key, self.parent)
            else:
                self._made[key] = self.base[key].take(self.parent)
        return self._made[key]

    def forget(self) -> None:
        """Let go of the whole columns built so far (they are built again if read again)."""
        self._made.clear()

    def take_column(self, key: str, rows: np.ndarray) -> np.ndarray:
        """Column `key` of the rows `rows` alone."""
        if key in self._made:
            return self._made[key].take(rows)
        if key == self.knob:
            return self.vals.take(self.pos.take(rows))
        parent = self.parent.take(rows)
        return self.base.take_column(key, parent) if isinstance(self.base, LazyRows) else self.base[key].take(parent)

    def __iter__(self) -> Iterator[str]:
        return iter((*self.base, self.knob))

    def __len__(self) -> int:
        return len(self.base) + 1

    def take(self, rows: np.ndarray) -> dict[str, np.ndarray]:
        """The rows `rows`, as columns."""
        parent = self.parent.take(rows)
        base = self.base.take(parent) if isinstance(self.base, LazyRows) else {k: v.take(parent)
                                                                             for k, v in self.base.items()}
        return {**base, self.knob: self.vals.take(self.pos.take(rows))}

    def block(self, lo: int, hi: int) -> LazyRows:
        """Rows lo to hi, their columns also built only when read."""
        return LazyRows(self.base, self.knob, self.vals, self.parent[lo:hi], self.pos[lo:hi])


def take_rows(cols: Mapping[str, np.ndarray], rows: np.ndarray) -> dict[str, np.ndarray]:
    """The rows `rows` of a table, as columns (of a lazy one, Enumeration.kept, only those rows are built)."""
    return cols.take(rows) if isinstance(cols, LazyRows) else {k: v.take(rows) for k, v in cols.items()}

"""What every layout rule is (Rule: a named, vectorised predicate over candidate columns, with its message, fix and
source) and the small helpers the rule tables share (planner.search.rules, planner.search.framework_rules)."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass

import numpy as np

from planner.inputs.frameworks import Capabilities, capabilities_for
from planner.inputs.layout import ExpertTp
from planner.inputs.problem import Problem

Cols = Mapping[str, np.ndarray]


@dataclass(frozen=True)
class Rule:
    name: str
    knobs: tuple[str, ...]
    allowed: Callable[[Cols, Problem], np.ndarray]
    message: str  # what breaks, phrased for a person
    fix: str  # what would help
    source: str

    def check(self, cols: Cols, problem: Problem) -> np.ndarray:
        return np.asarray(self.allowed(cols, problem), dtype=bool)


def _among(col: np.ndarray, values: list[int]) -> np.ndarray:
    """np.isin for a handful of integer codes, as one comparison per code: the same booleans, several times faster
    than np.isin's sort or lookup table on the million-row columns the zero and recompute stages check."""
    out = np.zeros(np.shape(col), dtype=bool)
    for v in values:
        out |= np.asarray(col) == v
    return out


def _caps(p: Problem) -> Capabilities:
    return capabilities_for(p.training.framework)


def _trusted(knob: str, p: Problem) -> bool:
    """Framework capability rules judge searched knobs; a knob pinned for a published run (validation) is taken as
    what that run's stack did."""
    return p.trust_pins and knob in p.fixed


def _same_expert_dp(c: Cols, p: Problem) -> np.ndarray:
    """Expert data-parallel size equal to the dense one: world/(etp·ep·pp) = world/(tp·cp·pp), i.e. etp x ep = tp x cp
    (etp = tp unless the knob folds the experts to 1)."""
    etp = np.where(c["etp"] == ExpertTp.ONE, 1, c["tp"])
    return etp * c["ep"] == c["tp"] * c["cp"]

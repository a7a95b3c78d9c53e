"""Claims: a paper's statements, checked against a run's own measurements.

A claim is never written in. Its expected value comes from theory functions of the run's task
parameters, its measured values from the run's metrics, one per ensemble member, and its verdict
from comparing the two under a stated tolerance.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from typing import Literal

__all__ = ["Claim", "check"]

Relation = Literal["close", "le", "ge"]

_SYMBOL = {"close": "≈", "le": "≤", "ge": "≥"}


@dataclass
class Claim:
    """A checked claim.

    Attributes:
        id: short stable identifier (``sec2/standard/ends-at-marginal-entropy``).
        statement: the paper's statement in words, with its source (figure, theorem).
        relation: ``close`` (|m - expected| <= tolerance), ``le`` (m <= expected + tolerance) or
            ``ge`` (m >= expected - tolerance), applied to each member's measurement.
        expected, tolerance: from theory and the experiment's config.
        measured: one value per ensemble member.
        min_fraction: fraction of members that must satisfy the relation for the claim to hold.
    """

    id: str
    statement: str
    relation: Relation
    expected: float
    tolerance: float
    measured: list[float]
    min_fraction: float = 1.0
    unit: str = ""
    per_member: list[bool] = field(default_factory=list)
    holds: bool = False

    def __post_init__(self) -> None:
        self.per_member = [_satisfies(self.relation, m, self.expected, self.tolerance) for m in self.measured]
        n = len(self.per_member)
        self.holds = n > 0 and sum(self.per_member) >= math.ceil(self.min_fraction * n - 1e-9)

    @property
    def mean(self) -> float:
        return statistics.fmean(self.measured) if self.measured else float("nan")

    @property
    def std(self) -> float:
        if len(self.measured) < 2:
            return 0.0
        if not all(math.isfinite(m) for m in self.measured):
            return float("nan")  # statistics.pstdev raises on non-finite floats
        return statistics.pstdev(self.measured)

    @property
    def n_hold(self) -> int:
        return sum(self.per_member)

    @property
    def verdict(self) -> str:
        return "holds" if self.holds else "fails"

    def describe(self) -> str:
        """One line: verdict, expectation, measurement (mean ± std over members)."""
        sym = _SYMBOL[self.relation]
        return (
            f"[{self.verdict.upper():5}] {self.id}: measured {self.mean:.4f} ± {self.std:.4f}{self.unit} "
            f"{sym} expected {self.expected:.4f} (tol {self.tolerance:g}); {self.n_hold}/{len(self.measured)} members"
        )

    def to_dict(self) -> dict:
        d = asdict(self)
        d.update(mean=self.mean, std=self.std, min=min(self.measured, default=float("nan")),
                 max=max(self.measured, default=float("nan")), n_hold=self.n_hold, verdict=self.verdict)
        return d


def _satisfies(relation: Relation, m: float, expected: float, tol: float) -> bool:
    if not math.isfinite(m):
        return False
    if relation == "close":
        return abs(m - expected) <= tol
    if relation == "le":
        return m <= expected + tol
    return m >= expected - tol


def check(
    id: str,
    statement: str,
    measured: Sequence[float],
    expected: float,
    tolerance: float,
    relation: Relation = "close",
    min_fraction: float = 1.0,
    unit: str = "",
) -> Claim:
    """Build a :class:`Claim` (the verdict is computed, never passed in)."""
    return Claim(id, statement, relation, float(expected), float(tolerance), [float(m) for m in measured], min_fraction, unit)

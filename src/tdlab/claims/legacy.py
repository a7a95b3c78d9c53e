"""TRANSITIONAL: the builder API experiments used before claims were declared; removed once every
experiment measures and declares.

Claims: a paper's statements, decided on a run's own measurements with their seed-to-seed spread.

A claim is never written in. Its expected value comes from theory functions of the parameters of the
setting that ran, its measurements from the run's metrics (one value per ensemble member), and its
verdict from both, with the spread of the members taken into account:

``holds``
    the whole confidence interval of the measurement lies inside the region the claim allows;
``fails``
    the whole interval lies outside it;
``not resolved``
    the interval straddles the boundary (the seeds disagree, or too few were run), or the run's end
    is still moving (an end-state claim on a loss that is still falling), or only one member ran;
``not evaluable``
    an arm the claim needs did not train (:class:`ArmHealth`): no verdict is computed on it.

Three tests cover every claim of the reproduced papers:

* :meth:`ClaimGroup.value` — a per-member quantity against a theory value: ``close``
  (|m − expected| ≤ tol), ``le`` (m ≤ expected + tol) or ``ge`` (m ≥ expected − tol), decided on the
  member mean's t-interval. The declared tolerance is the *scientific* one; the interval adds the
  measured seed-to-seed spread on top of it.
* :meth:`ClaimGroup.every` — the same relation required of *every* member (the statement says so),
  each member decided on its own value ± its own standard error where one is known.
* :meth:`ClaimGroup.compare` — a direction between two arms ("earlier", "faster", "lower"): the
  t-interval of the mean difference (paired over members that share a seed, Welch otherwise)
  against ``margin``.

A paper statement is one :class:`ClaimGroup` with its per-arm / per-depth results as rows. Claims that
are true by construction or that compare two methods on the same objective are ``sanity`` groups,
listed apart; held/total counts are over ``paper`` groups only.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from scipy import stats

from tdlab.claims.health import ArmHealth
from tdlab.claims.stats import Interval, _floats as _finite, difference_interval, mean_interval, proportion_interval

__all__ = ["Claim", "ClaimGroup"]

Verdict = Literal["holds", "fails", "not resolved", "not evaluable"]
Kind = Literal["paper", "sanity"]
Relation = Literal["close", "le", "ge"]
Direction = Literal["lt", "gt"]
Test = Literal["value", "every", "compare"]

VERDICTS: tuple[str, ...] = ("holds", "fails", "not resolved", "not evaluable")
_SYMBOL = {"close": "≈", "le": "≤", "ge": "≥", "lt": "<", "gt": ">"}


# --------------------------------------------------------------------------------------------------
# Claims


@dataclass
class Claim:
    """One row of a claim group: one arm's (or depth's, or cell's) result. Built through
    :class:`ClaimGroup`; the verdict is computed in ``__post_init__``, never passed in.

    Attributes:
        id: ``GROUP/ROW``, stable across runs (sweeps and the atlas key on it).
        test: ``value`` (member mean vs theory), ``every`` (each member vs theory) or ``compare``
            (arm ``measured`` vs arm ``reference``).
        relation: ``close``/``le``/``ge`` for value tests, ``lt``/``gt`` for comparisons
            (``mean(measured) − mean(reference)`` below ``−margin`` / above ``margin``).
        expected: the theory value (value tests) or the margin (comparisons).
        tolerance: the declared scientific tolerance (value tests).
        measured: one value per member; reference: the other arm's values (comparisons).
        member_se: per-member standard errors (``every`` tests), e.g. of a finite evaluation set.
        arms: the trained arms the row depends on (the health gate reads them).
        learning_required: False for claims *about* failing to learn (the gate then only asks that the
            arm took steps and stayed finite, not that it beat the trivial predictor).
        drift: for end-state claims, how much the measurement still moves at the end
            (:func:`end_drift`); above ``drift_tolerance`` (default: ``tolerance``) the row is
            ``not resolved``. One-sided threshold rows (tolerance 0) name the scale at which a
            still-moving end matters with ``drift_tolerance``.
        proportion: ``measured`` are 0/1 indicators (one per trial, e.g. per initial point): the
            interval is Wilson's score interval of the proportion.
    """

    id: str
    statement: str
    test: Test
    relation: str
    expected: float
    tolerance: float
    measured: list[float]
    reference: list[float] | None = None
    member_se: list[float] | None = None
    paired: bool = False
    deterministic: bool = False
    proportion: bool = False
    confidence: float = 0.95
    unit: str = ""
    arms: list[str] = field(default_factory=list)
    learning_required: bool = True
    drift: float | None = None
    drift_tolerance: float | None = None
    min_fraction: float = 1.0
    kind: Kind = "paper"
    # computed
    interval: Interval | None = None
    per_member: list[str] = field(default_factory=list)
    verdict: Verdict = "not resolved"
    reason: str = ""

    def __post_init__(self) -> None:
        self.measured = _finite(self.measured)
        if self.reference is not None:
            self.reference = _finite(self.reference)
        self.verdict, self.reason = self._decide()

    # ---- decision ---------------------------------------------------------------------------
    def _decide(self) -> tuple[Verdict, str]:
        if not self.measured:
            return "not evaluable", "no measurement"
        if self.test == "compare":
            return self._decide_compare()
        if self.test == "every":
            verdict, reason = self._decide_every()
        else:
            verdict, reason = self._decide_value()
        drift_tol = self.tolerance if self.drift_tolerance is None else self.drift_tolerance
        if verdict != "not evaluable" and self.drift is not None and math.isfinite(self.drift) and abs(self.drift) > drift_tol:
            return "not resolved", (f"still moving: {self.drift:+.4g}{self.unit} over the last 10% of training "
                                    f"(tolerance {drift_tol:g}); {reason or verdict + ' at the end'}")
        return verdict, reason

    def _region(self) -> tuple[float, float]:
        e, t = self.expected, self.tolerance
        return {"close": (e - t, e + t), "le": (-math.inf, e + t), "ge": (e - t, math.inf)}[self.relation]

    def _decide_value(self) -> tuple[Verdict, str]:
        iv = self.interval = (proportion_interval(self.measured, self.confidence) if self.proportion
                              else mean_interval(self.measured, self.confidence, self.deterministic))
        if math.isnan(iv.center):
            return "fails", "non-finite measurement"
        lo, hi = self._region()
        if lo <= iv.lo and iv.hi <= hi:
            return "holds", ""
        if iv.hi < lo or iv.lo > hi:
            return "fails", ""
        if iv.n < 2 and not self.deterministic:
            return "not resolved", "one member: the seed-to-seed spread is unknown"
        return "not resolved", "the members' interval straddles the boundary"

    def _decide_every(self) -> tuple[Verdict, str]:
        lo, hi = self._region()
        se = self.member_se or [0.0] * len(self.measured)
        z = float(stats.norm.ppf(0.5 + self.confidence / 2))
        marks = []
        for m, s in zip(self.measured, se):
            if not math.isfinite(m):
                marks.append("fails")
            elif lo <= m - z * s and m + z * s <= hi:
                marks.append("holds")
            elif m + z * s < lo or m - z * s > hi:
                marks.append("fails")
            else:
                marks.append("not resolved")
        self.per_member = marks
        self.interval = mean_interval(self.measured, self.confidence, deterministic=True)
        n = len(marks)
        need = math.ceil(self.min_fraction * n - 1e-9)
        held, failed = marks.count("holds"), marks.count("fails")
        if held >= need:
            return "holds", ""
        if n - failed < need:
            return "fails", f"{failed}/{n} members outside"
        return "not resolved", f"{marks.count('not resolved')}/{n} members within their own error of the boundary"

    def _decide_compare(self) -> tuple[Verdict, str]:
        if not self.reference:
            return "not evaluable", "no reference arm"
        iv = self.interval = difference_interval(self.measured, self.reference, self.paired, self.confidence)
        if math.isnan(iv.center):
            return "fails", "non-finite measurement"
        m = self.expected  # margin
        if self.relation == "lt":
            if iv.hi < -m:
                return "holds", ""
            if iv.lo >= -m:
                return "fails", ""
        else:
            if iv.lo > m:
                return "holds", ""
            if iv.hi <= m:
                return "fails", ""
        if iv.n < 2:
            return "not resolved", "one member: the seed-to-seed spread is unknown"
        return "not resolved", "the difference's interval includes the margin"

    # ---- gate ---------------------------------------------------------------------------------
    def gate(self, health: Mapping[str, ArmHealth]) -> None:
        """Mark the row ``not evaluable`` when an arm it needs did not train."""
        bad = []
        for arm in self.arms:
            h = health.get(arm)
            if h is None:
                continue
            ok = h.trained if self.learning_required else h.moved
            if not ok:
                bad.append(f"{arm} not trained ({'; '.join(h.reasons)})")
        if bad:
            self.verdict, self.reason = "not evaluable", "; ".join(bad)

    # ---- reading ------------------------------------------------------------------------------
    @property
    def mean(self) -> float:
        return statistics.fmean(self.measured) if self.measured else float("nan")

    @property
    def std(self) -> float:
        v = self.measured
        if len(v) < 2 or not all(math.isfinite(x) for x in v):
            return 0.0 if len(v) < 2 else float("nan")
        return statistics.stdev(v)

    @property
    def holds(self) -> bool:
        return self.verdict == "holds"

    @property
    def n_hold(self) -> int:
        """Members that satisfy the relation on their own (``every`` tests; transitional)."""
        return self.per_member.count("holds")

    def describe(self) -> str:
        """One line: verdict, measurement with its interval, expectation."""
        iv = self.interval
        ci = f" [{iv.lo:.4g}, {iv.hi:.4g}]" if iv is not None and math.isfinite(iv.lo) and math.isfinite(iv.hi) else ""
        if self.test == "compare":
            body = (f"mean difference {iv.center if iv else float('nan'):+.4g}{ci}{self.unit} "
                    f"{_SYMBOL[self.relation]} {'-' if self.relation == 'lt' else '+'}{self.expected:g} "
                    f"({self.mean:.4g} vs {statistics.fmean(self.reference or [float('nan')]):.4g})")
        else:
            body = (f"measured {self.mean:.4f} ± {self.std:.4f}{ci}{self.unit} {_SYMBOL[self.relation]} "
                    f"expected {self.expected:.4f} (tol {self.tolerance:g})")
            if self.test == "every":
                body += f"; {self.per_member.count('holds')}/{len(self.measured)} members hold"
        return f"[{self.verdict.upper()}] {self.id}: {body}" + (f" — {self.reason}" if self.reason else "")

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready row. A proportion stores its count (``successes`` of ``trials``), not every
        indicator."""
        iv = self.interval
        extra = {"successes": int(sum(self.measured)), "trials": len(self.measured)} if self.proportion else {}
        return {
            "id": self.id, "statement": self.statement, "kind": self.kind, "test": self.test,
            "relation": self.relation, "expected": self.expected, "tolerance": self.tolerance, **extra,
            "measured": [self.mean] if self.proportion else self.measured, "reference": self.reference, "member_se": self.member_se,
            "paired": self.paired, "unit": self.unit, "arms": self.arms, "learning_required": self.learning_required,
            "drift": self.drift, "drift_tolerance": self.drift_tolerance, "mean": self.mean, "std": self.std,
            "interval": [iv.lo, iv.hi] if iv is not None else None, "confidence": self.confidence,
            "per_member": self.per_member, "verdict": self.verdict, "holds": self.holds, "reason": self.reason,
            "n": len(self.measured),
            # comparisons: the mean difference the interval is about (measured − reference)
            "difference": iv.center if self.test == "compare" and iv is not None else None,
        }


def _group_verdict(rows: Sequence[Claim]) -> Verdict:
    vs = [r.verdict for r in rows]
    if not vs:
        return "not evaluable"
    if "fails" in vs:
        return "fails"
    if "not resolved" in vs:
        return "not resolved"
    if "holds" in vs:
        return "holds"
    return "not evaluable"


@dataclass
class ClaimGroup:
    """One paper statement (or one sanity check) and its rows.

    The group holds when every evaluable row holds; fails when any row fails; is not resolved when
    no row fails but some row is not resolved; is not evaluable when no row is evaluable.
    """

    id: str
    statement: str
    kind: Kind = "paper"
    rows: list[Claim] = field(default_factory=list)

    # ---- building rows ------------------------------------------------------------------------
    def _add(self, row: str, **kw: Any) -> Claim:
        rid = f"{self.id}/{row}" if row else self.id
        if any(r.id == rid for r in self.rows):
            raise ValueError(f"claim row {rid!r} added twice")
        kw.setdefault("statement", self.statement)
        claim = Claim(id=rid, kind=self.kind, **kw)
        self.rows.append(claim)
        return claim

    def value(
        self, row: str, measured: Sequence[float], expected: float, tolerance: float, relation: Relation = "close", *,
        arms: Sequence[str] = (), drift: float | None = None, drift_tolerance: float | None = None,
        deterministic: bool = False, proportion: bool = False, learning_required: bool = True, unit: str = "", statement: str | None = None, confidence: float = 0.95,
    ) -> Claim:
        """The members' mean, with its t-interval, against ``expected`` ± ``tolerance``
        (``proportion=True``: 0/1 indicators, Wilson's interval of the proportion)."""
        return self._add(row, test="value", relation=relation, expected=float(expected), tolerance=float(tolerance),
                         measured=list(measured), arms=list(arms), drift=drift, drift_tolerance=drift_tolerance,
                         deterministic=deterministic, proportion=proportion,
                         learning_required=learning_required, unit=unit, confidence=confidence,
                         **({"statement": statement} if statement else {}))

    def every(
        self, row: str, measured: Sequence[float], expected: float, tolerance: float, relation: Relation = "close", *,
        member_se: Sequence[float] | None = None, min_fraction: float = 1.0, arms: Sequence[str] = (),
        drift: float | None = None, drift_tolerance: float | None = None, learning_required: bool = True, unit: str = "", statement: str | None = None,
        confidence: float = 0.95,
    ) -> Claim:
        """Each member (± its own standard error) against ``expected`` ± ``tolerance``; holds when at
        least ``min_fraction`` of the members do. For statements about every member."""
        return self._add(row, test="every", relation=relation, expected=float(expected), tolerance=float(tolerance),
                         measured=list(measured), member_se=list(member_se) if member_se is not None else None,
                         min_fraction=min_fraction, arms=list(arms), drift=drift, drift_tolerance=drift_tolerance,
                         learning_required=learning_required,
                         unit=unit, confidence=confidence, **({"statement": statement} if statement else {}))

    def compare(
        self, row: str, measured: Sequence[float], reference: Sequence[float], direction: Direction, *,
        margin: float = 0.0, paired: bool = False, arms: Sequence[str] = (), learning_required: bool = True,
        unit: str = "", statement: str | None = None, confidence: float = 0.95,
    ) -> Claim:
        """``mean(measured) − mean(reference)`` below ``−margin`` (``lt``) or above ``margin`` (``gt``),
        decided on the difference's interval (paired when both arms' members share seeds)."""
        return self._add(row, test="compare", relation=direction, expected=float(margin), tolerance=0.0,
                         measured=list(measured), reference=list(reference), paired=paired, arms=list(arms),
                         learning_required=learning_required, unit=unit, confidence=confidence,
                         **({"statement": statement} if statement else {}))

    # ---- reading ------------------------------------------------------------------------------
    @property
    def verdict(self) -> Verdict:
        return _group_verdict(self.rows)

    @property
    def counts(self) -> dict[str, int]:
        return {v: sum(r.verdict == v for r in self.rows) for v in VERDICTS}

    def describe(self) -> str:
        c = self.counts
        n = len(self.rows)
        tally = ", ".join(f"{k} {c[k]}" for k in VERDICTS if c[k])
        if n == 1:
            return self.rows[0].describe()
        return f"[{self.verdict.upper()}] {self.id}: {self.statement} — {n} rows: {tally}"

    def to_dict(self) -> dict[str, Any]:
        return {"id": self.id, "statement": self.statement, "kind": self.kind, "verdict": self.verdict,
                "counts": self.counts, "rows": [r.to_dict() for r in self.rows]}



"""Claims as data: what an experiment declares, and what its ``measure()`` hands the judge.

An experiment states each paper statement (or sanity check) once, as a :class:`ClaimSpec`: its id,
the statement with the seed's figure or equation, the test and relation, where the expected value
comes from (a number, a config field or a theory function of the setting that ran), the tolerance
field, the horizon, the training stage an arm must pass before the claim can fail, and how its group
of rows is combined. Its ``measure()`` returns :class:`Measurements`: per claim, one :class:`Row` per
arm / depth / cell, each a :class:`Sample` of per-member values that carries its own resolution
(discrete, censored, Monte-Carlo error), and per arm the :class:`StageCheck` values the stage gates
read. Nothing here decides anything: :mod:`tdlab.claims.judge` does.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal, overload

import numpy as np

__all__ = [
    "Calibration",
    "ClaimSpec",
    "Form",
    "Horizon",
    "Hypothesis",
    "Kind",
    "Measurements",
    "Provenance",
    "Relation",
    "Row",
    "Sample",
    "Stage",
    "StageCheck",
    "Test",
    "Threshold",
    "ThresholdSource",
    "resolve",
]

Kind = Literal["paper", "sanity"]
Test = Literal["value", "every", "compare"]
Relation = Literal["close", "le", "ge", "lt", "gt"]
# The horizon a claim speaks of: the seed's training budget (a statement about step N, never judged
# by convergence and never extended), convergence (judged where the learning rate still moves the
# model: a row still drifting is not resolved), or static (no training: closed forms, enumerations,
# untrained models, gradient flows to a stated time).
Horizon = Literal["budget", "convergence", "static"]
# A row's setting: the seed's own (decides a paper group) or ours (an extension: judged and shown,
# never deciding a paper group).
Provenance = Literal["paper", "ours"]
# What kind of statement the paper makes: at its stated settings (a figure's run, a theorem for every
# parameter its hypotheses cover), a limit (n, γ, L → ∞: judged where the dropped terms are measured small,
# or against the theory of the finite setting that ran, never by a tolerance that assumes them small), or an
# existence ("with certain settings": holds when some setting of a declared grid shows it, fails only when
# every one of them is evaluable and none does).
Form = Literal["settings", "limit", "existence"]
# Where a threshold (a tolerance, a margin, a significance level) comes from: the paper's own words, a closed
# form of the setting (the gap between two predictions, a numerical-precision bound of an exact computation),
# or ours, which must be calibrated (against a known null or planted cases) before it can make a claim fail.
ThresholdSource = Literal["paper", "closed form", "ours"]

# A value a spec names: a number, a dotted config path ("claims.tol_nats"), or a function of the
# validated config and the row (its ``context``), e.g. a theory function of the row's parameters.
Value = float | str | Callable[[Any, "Row"], float]


@overload
def resolve(value: Value, cfg: Any, row: Row | None = None) -> float: ...


@overload
def resolve(value: Value | None, cfg: Any, row: Row | None = None) -> float | None: ...


def resolve(value: Value | None, cfg: Any, row: Row | None = None) -> float | None:
    """The number a spec's ``expected`` / ``tolerance`` / ``margin`` stands for, for ``row``."""
    if value is None:
        return None
    if isinstance(value, str):
        obj = cfg
        for part in value.split("."):
            obj = obj[part] if isinstance(obj, Mapping) else getattr(obj, part)
        return float(obj)
    if callable(value):
        if row is None:
            raise ValueError(f"{value!r} reads the row: resolve it for a row")
        return float(value(cfg, row))
    return float(value)


@dataclass(frozen=True)
class Stage:
    """A training stage an arm must have passed before a claim about reaching something can fail:
    "past the order-(k−1) in-context estimator", "above the label marginal", "above chance".

    Its check is measured per arm and member (:meth:`Measurements.stage`); the gate is the judge's.
    """

    id: str
    description: str


@dataclass(frozen=True)
class Hypothesis:
    """A hypothesis the paper's statement needs, as a checkable predicate (``N_Z = d_m``, ``p + q > 1``, "only
    memory and reasoning anchors", "the bound is a lower bound of the run's losses").

    ``on="config"``: ``test(cfg)`` reads the validated config alone; ``on="row"``: ``test(cfg, row)`` reads the
    row too (its ``context``: the row's parameters and, for a hypothesis about the measured run, the measured
    quantity the statement assumes, e.g. the size of the terms a limit drops). A row outside any hypothesis is
    not the paper's: the judge makes it ``ours`` (shown, never deciding a paper group)."""

    text: str
    test: Callable[..., bool]
    on: Literal["config", "row"] = "config"

    def met(self, cfg: Any, row: Row | None = None) -> bool | None:
        """Whether ``cfg`` (and ``row``) meet the hypothesis; ``None`` for a row hypothesis asked without a row."""
        if self.on == "config":
            return bool(self.test(cfg))
        return None if row is None else bool(self.test(cfg, row))


@dataclass(frozen=True)
class Calibration:
    """How a threshold of ours was calibrated, so that it may make a claim fail.

    ``method="null"``: the decision is a test statistic with a known null distribution (a permutation test,
    an exact sign test) at a declared level; ``method="planted"``: planted cases at the run's own shapes, one
    that satisfies the paper's statement and one that does not, are judged holds and fails. ``plant``, where
    given, builds those two samples for a config and row context (``plant(cfg, context) -> (satisfies,
    violates)``), which the declared-claims test judges; ``test`` names the test that shows the calibration."""

    method: Literal["null", "planted"]
    note: str
    plant: Callable[[Any, Mapping[str, Any]], tuple[Sample, Sample]] | None = None
    test: str = ""


@dataclass(frozen=True)
class Threshold:
    """Where a claim's threshold comes from (:data:`ThresholdSource`), in words (``note``), and, for ours,
    its :class:`Calibration`. An uncalibrated threshold of ours decides ``holds`` but never ``fails``."""

    source: ThresholdSource
    note: str
    calibration: Calibration | None = None

    @property
    def calibrated(self) -> bool:
        return self.source != "ours" or self.calibration is not None

    def describe(self) -> str:
        cal = f"; calibrated ({self.calibration.method}): {self.calibration.note}" if self.calibration else ""
        unc = "; uncalibrated: it cannot make the claim fail" if not self.calibrated else ""
        return f"{self.source}: {self.note}{cal}{unc}"


@dataclass(frozen=True)
class ClaimSpec:
    """One declared paper statement or sanity check (a claim group).

    Attributes:
        id: stable across runs (sweeps, the atlas and findings key on it).
        statement: the statement, with the seed's figure / equation / theorem.
        kind: ``paper`` (counted) or ``sanity`` (consistency checks, statements true by construction).
        test: ``value`` (the members' mean against the expected value), ``every`` (each member against
            it; for statements about every member) or ``compare`` (a direction between two arms).
        relation: ``close`` / ``le`` / ``ge`` for value and every tests (within ``tolerance`` of,
            at most, at least the expected value); ``lt`` / ``gt`` for comparisons (the difference
            measured − reference below ``−margin`` / above ``margin``).
        expected: the theory value: a number, a config path, or ``f(cfg, row)`` (a theory function of
            the row's parameters); ``None`` when each row carries a measured reference (a finite-setting
            reference drawn by Monte Carlo, with its error).
        tolerance: the declared scientific tolerance (number or config path).
        margin: the margin of a comparison (number or config path).
        horizon: ``budget`` / ``convergence`` / ``static`` (see :data:`Horizon`).
        stage: the :class:`Stage` every arm of a row must have passed (every member) before the row
            can be decided; otherwise it is not evaluable, with the stage named. A function of the
            config where the setting decides whether the claim is about reaching something.
        learning_required: the health gate asks that the arms *trained* (test error below the trivial
            predictor's); ``False`` for claims about failing to learn (the arms need only have moved).
        drift_tolerance: the change over the end of training above which a ``convergence`` row is not
            resolved (default: ``tolerance``; one-sided thresholds name it).
        min_fraction: ``every`` tests: the share of members that must satisfy the relation.
        paired: ``compare`` tests: both arms' members share seeds.
        unit: printed after numbers.
        needs: what rows the claim needs, for the message when a run has none.
        quantity: what each row's measurement is (documentation: the report and the docs print it).
        example: a row context at which the spec's theory functions can be evaluated (the planted-
            measurement test over every declared claim resolves ``expected`` there).
        scope: the settings the statement covers (a theorem's hypotheses, or a figure's exact setting), as
            ``f(cfg, row) -> bool``: where declared, a row's provenance is derived from it (``seed`` inside
            the scope, deciding the paper group; ``ours`` outside), overriding what ``measure()`` marked.
            A theorem true for every parameter of its model decides at any setting its hypotheses cover,
            not only at the figure's.
        stays: the statement is that something *stays* (on a plateau, unlearned, unchanged) over the seed's
            training (a bool, or a function of the config): a row cannot hold from a run whose training
            length (``length``, a config path) is shorter than ``paper_length`` (the seed's, a number or
            config path), since what stays at step N may still leave before the seed's horizon. It can fail.
    """

    id: str
    statement: str
    test: Test
    relation: Relation
    quantity: str
    kind: Kind = "paper"
    expected: Value | None = 0.0
    tolerance: Value = 0.0
    margin: Value = 0.0
    horizon: Horizon = "convergence"
    stage: Stage | Callable[[Any], Stage | None] | None = None
    learning_required: bool = True
    drift_tolerance: Value | None = None
    min_fraction: float = 1.0
    paired: bool = True
    unit: str = ""
    needs: str = ""
    example: Mapping[str, Any] = field(default_factory=dict)
    scope: Callable[[Any, Row], bool] | None = None
    stays: bool | Callable[[Any], bool] = False
    length: str | None = None
    paper_length: Value | None = None
    quote: str = ""
    where: str = ""
    form: Form = "settings"
    hypotheses: tuple[Hypothesis, ...] = ()
    threshold: Threshold | None = None
    limit: str = ""
    all_rows: bool = False
    grid: str = ""

    @property
    def calibrated(self) -> bool:
        """Whether the claim's threshold may make it fail (a paper's, a closed form's, or ours calibrated)."""
        return self.threshold is not None and self.threshold.calibrated

    def outside(self, cfg: Any, row: Row) -> list[str]:
        """The hypotheses ``row`` (in the setting ``cfg``) does not meet."""
        return [h.text for h in self.hypotheses if not h.met(cfg, row)]

    def stays_for(self, cfg: Any) -> bool:
        """Whether, in the setting ``cfg``, the statement is about something staying (see ``stays``)."""
        return bool(self.stays(cfg)) if callable(self.stays) else bool(self.stays)

    def stage_for(self, cfg: Any) -> Stage | None:
        """The stage the rows must pass in the setting ``cfg``."""
        return self.stage if self.stage is None or isinstance(self.stage, Stage) else self.stage(cfg)

    def __post_init__(self) -> None:
        if self.test == "compare" and self.relation not in ("lt", "gt"):
            raise ValueError(f"{self.id}: a compare test takes relation lt or gt, not {self.relation!r}")
        if self.test != "compare" and self.relation not in ("close", "le", "ge"):
            raise ValueError(f"{self.id}: a {self.test} test takes relation close, le or ge, not {self.relation!r}")
        if not 0.0 < self.min_fraction <= 1.0:
            raise ValueError(f"{self.id}: min_fraction must lie in (0, 1]")
        if self.stays is not False and (self.length is None or self.paper_length is None):
            raise ValueError(f"{self.id}: a claim that something stays names the run's length and the seed's")
        if self.form == "existence" and self.all_rows:
            raise ValueError(f"{self.id}: an existence statement is shown by some row, not by every row")


@dataclass(frozen=True)
class Sample:
    """Per-member values of one quantity, with what limits how well they are known.

    Attributes:
        values: one value per member (or per trial, for a proportion).
        se: per-member standard errors (a finite evaluation set), read by ``every`` tests.
        censored: per member, whether the value is only a bound (a time never reached within the
            horizon is stored as the horizon).
        censor: ``above`` — a censored value's true value is at least the stored one; ``below`` — at most.
        resolution: the measurement's discretisation: an evaluation interval, a grid cell. Each value
            is known to ± resolution / 2, so it never gives a zero-width interval.
        mc_se: the standard error of the values from Monte-Carlo sampling (replicate draws or a
            bootstrap), added in quadrature to the members' spread.
        deterministic: no seed noise (closed forms, exact enumerations): the interval is the range
            of the values (plus ``mc_se`` and ``resolution``).
        proportion: 0/1 indicators, decided on Wilson's interval.
        drift: how much the quantity still moves at the end of training (:func:`tdlab.claims.end_drift`);
            read for ``convergence`` claims.
    """

    values: tuple[float, ...]
    se: tuple[float, ...] | None = None
    censored: tuple[bool, ...] | None = None
    censor: Literal["above", "below"] = "above"
    resolution: float = 0.0
    mc_se: float = 0.0
    deterministic: bool = False
    proportion: bool = False
    drift: float | None = None

    if TYPE_CHECKING:
        # What the constructor accepts: any sequence or array, made a tuple of floats (bools) by __post_init__.
        def __init__(
            self,
            values: Iterable[float] | np.ndarray,
            se: Iterable[float] | np.ndarray | None = None,
            censored: Iterable[bool] | np.ndarray | None = None,
            censor: Literal["above", "below"] = "above",
            resolution: float = 0.0,
            mc_se: float = 0.0,
            deterministic: bool = False,
            proportion: bool = False,
            drift: float | None = None,
        ) -> None: ...

    def __post_init__(self) -> None:
        object.__setattr__(self, "values", tuple(float(v) for v in np.asarray(self.values, dtype=float).ravel()))
        if self.se is not None:
            object.__setattr__(self, "se", tuple(float(s) for s in np.asarray(self.se, dtype=float).ravel()))
            if len(self.se) != len(self.values):
                raise ValueError(f"se has {len(self.se)} entries for {len(self.values)} values")
        if self.censored is not None:
            object.__setattr__(self, "censored", tuple(bool(c) for c in np.asarray(self.censored).ravel()))
            if len(self.censored) != len(self.values):
                raise ValueError(f"censored has {len(self.censored)} entries for {len(self.values)} values")
        if self.resolution < 0 or self.mc_se < 0 or not math.isfinite(self.resolution):
            raise ValueError("resolution and mc_se must be finite and ≥ 0")
        if self.drift is not None:
            object.__setattr__(self, "drift", float(self.drift))

    @property
    def n(self) -> int:
        return len(self.values)

    @property
    def n_censored(self) -> int:
        return sum(self.censored) if self.censored else 0

    @property
    def mean(self) -> float:
        return float(np.mean(self.values)) if self.values else math.nan


@dataclass(frozen=True)
class Row:
    """One row of a claim group: one arm's (or depth's, cell's) measurement.

    Attributes:
        key: the row's name within the group ("sec2", "k2/relative").
        measured: the measurement.
        reference: ``compare`` tests: the other arm's values (paired by member when the spec says
            so); ``value``/``every`` tests with ``expected=None``: a measured reference the values are
            compared with (its spread and Monte-Carlo error enter the interval).
        arms: the trained arms the row depends on (the health and stage gates read them).
        provenance: ``paper`` (a setting the paper runs) or ``ours`` (an extension: never decides a
            paper group).
        context: the row's parameters (k, depth, T, …) for the spec's theory functions and the report.
        label: the row's own statement (printed under the group's).
    """

    key: str
    measured: Sample
    reference: Sample | None = None
    arms: tuple[str, ...] = ()
    provenance: Provenance = "paper"
    context: Mapping[str, Any] = field(default_factory=dict)
    label: str = ""


@dataclass(frozen=True)
class StageCheck:
    """Whether one arm's members passed a :class:`Stage`: member ``i`` passed when ``value[i]``
    is below (``relation="lt"``) or above (``"gt"``) ``bound[i]``. ``evidence`` names the quantities
    ("test loss vs the order-0 estimator's loss, nats")."""

    stage: str
    value: tuple[float, ...]
    bound: tuple[float, ...]
    relation: Literal["lt", "gt"] = "lt"
    evidence: str = ""

    @property
    def passed(self) -> list[bool]:
        if self.relation == "lt":
            return [bool(v < b) for v, b in zip(self.value, self.bound, strict=True)]
        return [bool(v > b) for v, b in zip(self.value, self.bound, strict=True)]


def _tuple(x: Iterable[float] | float, n: int | None = None) -> tuple[float, ...]:
    arr = np.asarray(x, dtype=float).ravel()
    if arr.size == 1 and n is not None:
        arr = np.full(n, float(arr[0]))
    return tuple(float(v) for v in arr)


class Measurements:
    """What ``measure()`` returns: claim rows, stage checks, and everything else the report shows.

    ``values`` is the summary's ``measurements`` section (JSON-ready numbers, lists, tables).
    """

    def __init__(self, values: dict[str, Any] | None = None) -> None:
        self.rows: dict[str, list[Row]] = {}
        self.stages: dict[str, dict[str, StageCheck]] = {}
        self.values: dict[str, Any] = dict(values or {})

    def row(
        self,
        claim: str,
        key: str,
        measured: Sample | Iterable[float] | np.ndarray,
        reference: Sample | Iterable[float] | np.ndarray | None = None,
        *,
        arms: Sequence[str] = (),
        provenance: Provenance = "paper",
        context: Mapping[str, Any] | None = None,
        label: str = "",
    ) -> Row:
        """Add row ``key`` of claim ``claim`` (plain sequences become plain :class:`Sample` s)."""
        if not isinstance(measured, Sample):
            measured = Sample(tuple(measured))
        if reference is not None and not isinstance(reference, Sample):
            reference = Sample(tuple(reference))
        rows = self.rows.setdefault(claim, [])
        if any(r.key == key for r in rows):
            raise ValueError(f"claim row {claim}/{key} measured twice")
        r = Row(key, measured, reference, tuple(str(a) for a in arms), provenance, dict(context or {}), label)
        rows.append(r)
        return r

    def stage(
        self,
        arm: str,
        stage: Stage | str,
        value: Iterable[float] | float,
        bound: Iterable[float] | float,
        relation: Literal["lt", "gt"] = "lt",
        evidence: str = "",
    ) -> StageCheck:
        """Record whether ``arm``'s members passed ``stage`` (``value`` vs ``bound``, per member)."""
        sid = stage.id if isinstance(stage, Stage) else stage
        v = _tuple(value)
        check = StageCheck(sid, v, _tuple(bound, len(v)), relation, evidence)
        if len(check.bound) != len(v):
            raise ValueError(f"stage {sid} of {arm}: {len(check.bound)} bounds for {len(v)} values")
        self.stages.setdefault(str(arm), {})[sid] = check
        return check

"""The one place verdicts are made: declared claims (:class:`~tdlab.claims.declare.ClaimSpec`) judged
on an experiment's measurements (:class:`~tdlab.claims.declare.Measurements`).

A row's verdict, in order:

1. **Decision** on the row's interval against the region its relation allows (``holds`` inside,
   ``fails`` outside, ``not resolved`` straddling), with what limits the measurement's resolution:
   a discrete value is known to ± half its resolution and a Monte-Carlo value to its sampling error,
   so neither gives a zero-width interval; a censored value is a bound, so the interval is open on
   that side, and a row whose every member is censored is not resolved; a paired direction on
   discrete or censored values is decided by an exact sign test, not a t-interval.
2. **Convergence**: a ``holds`` on a ``convergence`` claim whose measurement still drifts at the end of
   training (in learning-rate time) by more than its drift tolerance is not resolved. A ``fails`` at
   convergence needs the measurement to have stopped moving *towards* the claim: one still approaching it
   at a pace that, over as much training again (:data:`AGAIN` end windows), would reach the claim's
   boundary is not resolved; one moving away, or too slowly to reach it, fails (a slow creep far from the
   claim is not training too short). A row not
   resolved by its spread whose measurement still moves by more than the interval's half-width names
   the training length as its limit (``still moving``), not the spread.
   **Budget**: a ``budget`` claim is a statement about the seed's training length, so it fails only
   there: a row that fails in a run shorter than the seed's (``lengths``) is not resolved ("shorter
   than the seed's length"), unless it reads event times every member reached (an order already seen);
   one that holds stands, except for a claim that something *stays*
   (``ClaimSpec.stays``), which cannot hold from a shorter run and can fail from one.
3. **Health gate**: a row needing an arm that did not train (moved, for claims about failing to
   learn) is not evaluable.
4. **Stage gate**: a row whose arms have not passed the claim's declared stage in every member is not
   evaluable, with the stage named: training too short is never a finding.
5. **Calibration**: a paper row that fails against a threshold of ours that no null or planted case
   calibrates (:class:`~tdlab.claims.declare.Threshold`) is not resolved: an uncalibrated threshold
   cannot refute a paper.
6. **Multiplicity**: within a group, failing rows are confirmed by Holm's step-down procedure over
   the group's evaluable rows (family-wise error at 1 − confidence); a row that fails alone but not
   after the correction is not resolved. A group holds only when every deciding row holds (an
   intersection–union test, which needs no correction).

A group's verdict is decided by its ``seed`` rows (for paper groups; every row for sanity groups):
``ours`` rows are judged and shown but never decide a paper statement. A claim that declares its scope
(``ClaimSpec.scope``: the settings its statement covers) has each row's provenance derived from it, and a
row outside any of the statement's hypotheses (``ClaimSpec.hypotheses``) is ours whatever ``measure()``
marked. No deciding row, or none evaluable: not evaluable. A statement over every row (``all_rows``) holds
only when each deciding row is evaluable and holds; an existence statement (``form="existence"``) holds when
some deciding row holds and fails only when every one is evaluable and fails (no Holm correction: no row
fails it alone).
"""

from __future__ import annotations

import math
import statistics
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from scipy import stats

from tdlab.claims.declare import ClaimSpec, Measurements, Row, Sample, Stage, resolve
from tdlab.claims.health import ArmHealth
from tdlab.claims.stats import (
    NAN_INTERVAL,
    Interval,
    difference_interval,
    holm,
    mean_interval,
    min_sign_members,
    p_outside,
    proportion_interval,
    proportion_p_outside,
    region,
    sign_test,
)

__all__ = [
    "VERDICTS",
    "Cause",
    "GroupResult",
    "RowResult",
    "Verdict",
    "group_verdict",
    "ids_declared_twice",
    "judge",
    "judge_row",
]

# End-drift windows in as much training again: the drift is measured over the last tenth of training
# (tdlab.claims.health.end_drift's fraction), so ten windows make the whole of it once more.
AGAIN = 10

Verdict = Literal["holds", "fails", "not resolved", "not evaluable"]
VERDICTS: tuple[str, ...] = ("holds", "fails", "not resolved", "not evaluable")
# What set a verdict: the findings table groups failing and undecided claims by it.
Cause = Literal[
    "decided",
    "spread",
    "one member",
    "members",
    "censored",
    "resolution",
    "still moving",
    "shorter than the seed's length",
    "multiplicity",
    "not trained",
    "stage not reached",
    "no rows",
    "no paper rows",
    "outside hypotheses",
    "uncalibrated threshold",
    "rows not evaluable",
    "grid not covered",
    "non-finite",
]
_SYMBOL = {"close": "≈", "le": "≤", "ge": "≥", "lt": "<", "gt": ">"}


@dataclass
class RowResult:
    """A judged row. Built by :func:`judge`; nothing else sets ``verdict``."""

    id: str
    statement: str
    kind: str
    test: str
    relation: str
    expected: float
    tolerance: float
    measured: Sample
    reference: Sample | None
    provenance: str
    horizon: str
    arms: tuple[str, ...]
    unit: str = ""
    context: Mapping[str, Any] = field(default_factory=dict)
    learning_required: bool = True
    paired: bool = False
    confidence: float = 0.95
    drift_tolerance: float | None = None
    stage: str | None = None
    interval: Interval = NAN_INTERVAL
    p_fail: float = 1.0
    p_hold: float = 1.0
    per_member: list[str] = field(default_factory=list)
    verdict: Verdict = "not resolved"
    cause: Cause = "spread"
    reason: str = ""
    alone: Verdict | None = None  # the verdict before the multiplicity correction, when it changed it
    outside: list[str] = field(default_factory=list)  # the statement's hypotheses this row does not meet

    def set(self, verdict: Verdict, cause: Cause, reason: str = "") -> None:
        self.verdict, self.cause, self.reason = verdict, cause, reason

    # ---- reading ------------------------------------------------------------------------------
    @property
    def mean(self) -> float:
        return self.measured.mean

    @property
    def std(self) -> float:
        v = self.measured.values
        if len(v) < 2 or not all(math.isfinite(x) for x in v):
            return 0.0 if len(v) < 2 else math.nan
        return statistics.stdev(v)

    @property
    def holds(self) -> bool:
        return self.verdict == "holds"

    def describe(self) -> str:
        """One line: verdict, measurement with its interval, expectation."""
        iv = self.interval
        ci = f" [{iv.lo:.4g}, {iv.hi:.4g}]" if math.isfinite(iv.lo) or math.isfinite(iv.hi) else ""
        if self.test == "compare":
            ref = self.reference.mean if self.reference is not None else math.nan
            body = (
                f"difference {iv.center:+.4g}{ci}{self.unit} {_SYMBOL[self.relation]} "
                f"{'-' if self.relation == 'lt' else '+'}{self.expected:g} ({self.mean:.4g} vs {ref:.4g})"
            )
        else:
            body = (
                f"measured {self.mean:.4f} ± {self.std:.4f}{ci}{self.unit} {_SYMBOL[self.relation]} "
                f"expected {self.expected:.4f} (tol {self.tolerance:g})"
            )
            if self.test == "every":
                body += f"; {self.per_member.count('holds')}/{self.measured.n} members hold"
        tag = "" if self.provenance == "paper" else " [ours]"
        return f"[{self.verdict.upper()}] {self.id}{tag}: {body}" + (f" — {self.reason}" if self.reason else "")

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready row (the summary's and the report's). A proportion stores its count."""
        m, iv = self.measured, self.interval
        extra: dict[str, Any] = {}
        if m.proportion:
            extra = {"successes": int(sum(m.values)), "trials": m.n}
        finite = [x if math.isfinite(x) else None for x in (iv.lo, iv.hi)]
        return {
            "id": self.id,
            "statement": self.statement,
            "kind": self.kind,
            "test": self.test,
            "relation": self.relation,
            "expected": self.expected,
            "tolerance": self.tolerance,
            **extra,
            "measured": [m.mean] if m.proportion else list(m.values),
            "reference": list(self.reference.values) if self.reference is not None else None,
            "member_se": list(m.se) if m.se is not None else None,
            "paired": self.paired,
            "unit": self.unit,
            "arms": list(self.arms),
            "learning_required": self.learning_required,
            "drift": m.drift,
            "drift_tolerance": self.drift_tolerance,
            "mean": self.mean,
            "std": self.std,
            "interval": finite if not math.isnan(iv.center) else None,
            "confidence": self.confidence,
            "per_member": self.per_member,
            "verdict": self.verdict,
            "holds": self.holds,
            "reason": self.reason,
            "n": m.n,
            "difference": iv.center if self.test == "compare" and not math.isnan(iv.center) else None,
            "provenance": self.provenance,
            "horizon": self.horizon,
            "stage": self.stage,
            "cause": self.cause,
            "resolution": m.resolution,
            "mc_se": m.mc_se,
            "censored": list(m.censored) if m.censored else None,
            "p_fail": self.p_fail,
            "p_hold": self.p_hold,
            "alone": self.alone,
            "outside": list(self.outside),
            # a measured reference's own standard error and resolution bound (value / every tests)
            "reference_se": _ref_error(self.reference)[0]
            if self.reference is not None and self.test != "compare"
            else None,
            "context": {k: v for k, v in self.context.items() if isinstance(v, (int, float, str, bool)) or v is None},
        }


@dataclass
class GroupResult:
    """A judged claim group: one paper statement (or sanity check) and its rows."""

    spec: ClaimSpec
    rows: list[RowResult]
    verdict: Verdict
    cause: Cause
    reason: str = ""
    stage: Stage | None = None  # the stage its rows had to pass, in the setting that ran

    @property
    def id(self) -> str:
        return self.spec.id

    @property
    def statement(self) -> str:
        return self.spec.statement

    @property
    def kind(self) -> str:
        return self.spec.kind

    @property
    def deciding(self) -> list[RowResult]:
        """The rows that decide the group (its seed rows, for a paper group)."""
        return _deciding(self.spec, self.rows)

    @property
    def counts(self) -> dict[str, int]:
        return {v: sum(r.verdict == v for r in self.rows) for v in VERDICTS}

    def row(self, key: str) -> RowResult:
        rid = f"{self.id}/{key}"
        for r in self.rows:
            if r.id == rid:
                return r
        raise KeyError(rid)

    def describe(self) -> str:
        if len(self.rows) == 1 and not self.reason:
            return self.rows[0].describe()
        c = self.counts
        tally = ", ".join(f"{k} {c[k]}" for k in VERDICTS if c[k])
        why = f" — {self.reason}" if self.reason else ""
        return f"[{self.verdict.upper()}] {self.id}: {self.statement} — {len(self.rows)} rows: {tally or 'none'}{why}"

    def to_dict(self) -> dict[str, Any]:
        s = self.spec
        return {
            "id": s.id,
            "statement": s.statement,
            "kind": s.kind,
            "verdict": self.verdict,
            "cause": self.cause,
            "reason": self.reason,
            "horizon": s.horizon,
            "stage": self.stage.id if self.stage else None,
            "stage_description": self.stage.description if self.stage else None,
            "test": s.test,
            "quantity": s.quantity,
            "quote": s.quote,
            "where": s.where,
            "form": s.form,
            "hypotheses": [h.text for h in s.hypotheses],
            "threshold_source": s.threshold.source if s.threshold else None,
            "threshold": s.threshold.describe() if s.threshold else None,
            "calibrated": s.calibrated,
            "counts": self.counts,
            "rows": [r.to_dict() for r in self.rows],
        }


# --------------------------------------------------------------------------------------------------
# Judging


def ids_declared_twice(specs: Sequence[ClaimSpec]) -> list[str]:
    """The ids more than one of ``specs`` declares, sorted (a group is keyed by its id)."""
    counts = Counter(s.id for s in specs)
    return sorted(i for i, n in counts.items() if n > 1)


def judge(
    specs: Sequence[ClaimSpec],
    measured: Measurements,
    cfg: Any,
    health: Mapping[str, ArmHealth] | None = None,
    confidence: float = 0.95,
    lengths: tuple[float, float] | None = None,
) -> list[GroupResult]:
    """Every declared claim judged on ``measured`` (rows of undeclared claims are an error).

    ``lengths``: the run's training length and the seed's (the experiment's length field under the run's
    config and under the paper profile), read by the budget rule; ``None`` where the experiment has none."""
    twice = ids_declared_twice(specs)
    if twice:
        raise ValueError(f"claim ids declared twice: {twice}")
    unknown = set(measured.rows) - {s.id for s in specs}
    if unknown:
        raise ValueError(f"measurements for undeclared claims: {sorted(unknown)}")
    health = health or {}
    return [judge_group(s, measured.rows.get(s.id, []), measured, cfg, health, confidence, lengths) for s in specs]


def judge_group(
    spec: ClaimSpec,
    rows: Sequence[Row],
    measured: Measurements,
    cfg: Any,
    health: Mapping[str, ArmHealth],
    confidence: float = 0.95,
    lengths: tuple[float, float] | None = None,
) -> GroupResult:
    stage = spec.stage_for(cfg)
    results = [judge_row(spec, r, cfg, confidence, lengths) for r in rows]
    for res, row in zip(results, rows, strict=True):
        _gate(spec, stage, res, row, measured, health)
        _calibrated(spec, res)
    if spec.form != "existence":  # an existence fails only when every row fails: no row fails alone
        for prov in ("paper", "ours"):
            _multiplicity([r for r in results if r.provenance == prov], 1 - confidence)
    verdict, cause, reason = group_verdict(spec, results)
    return GroupResult(spec, results, verdict, cause, reason, stage)


def _deciding(spec: ClaimSpec, rows: Sequence[RowResult]) -> list[RowResult]:
    return list(rows) if spec.kind == "sanity" else [r for r in rows if r.provenance == "paper"]


def _calibrated(spec: ClaimSpec, res: RowResult) -> None:
    """An uncalibrated threshold of ours cannot refute a paper: a row it decides as failing is not resolved."""
    if spec.kind == "paper" and res.verdict == "fails" and res.cause == "decided" and not spec.calibrated:
        src = spec.threshold.note if spec.threshold else "not declared"
        res.set(
            "not resolved",
            "uncalibrated threshold",
            f"fails against a threshold of ours that no null or planted case calibrates ({src}): it cannot "
            "make a paper claim fail",
        )


def group_verdict(spec: ClaimSpec, rows: Sequence[RowResult]) -> tuple[Verdict, Cause, str]:
    """The group rule: decided by the deciding rows; fails if one fails (after Holm), not resolved if
    one is, holds if every evaluable one holds; not evaluable when none is evaluable. A statement over
    every row (``all_rows``) holds only when every deciding row is evaluable and holds; an existence
    statement holds when some deciding row holds and fails only when every one is evaluable and fails."""
    if not rows:
        return "not evaluable", "no rows", f"no row ran{f': needs {spec.needs}' if spec.needs else ''}"
    deciding = _deciding(spec, rows)
    if not deciding:
        out = sorted({h for r in rows for h in r.outside})
        if out:
            return (
                "not evaluable",
                "outside hypotheses",
                f"every row lies outside the statement's hypotheses ({'; '.join(out)}): {len(rows)} row(s) of ours, "
                "which never decide a paper statement",
            )
        return (
            "not evaluable",
            "no paper rows",
            f"no row in the seed's own setting ran ({len(rows)} row(s) of ours){f'; needs {spec.needs}' if spec.needs else ''}",
        )
    if spec.form == "existence":
        return _existence_verdict(deciding)
    if spec.all_rows:
        missing = [r for r in deciding if r.verdict == "not evaluable"]
        if missing and all(r.verdict in ("holds", "not evaluable") for r in deciding) and len(missing) < len(deciding):
            return (
                "not resolved",
                "rows not evaluable",
                f"holds on {len(deciding) - len(missing)} of {len(deciding)} rows; the statement covers every row and "
                f"{len(missing)} are not evaluable ({missing[0].cause}: {missing[0].reason})",
            )
    for v in ("fails", "not resolved"):
        hit = [r for r in deciding if r.verdict == v]
        if hit:
            return v, hit[0].cause, ""
    if any(r.verdict == "holds" for r in deciding):
        return "holds", "decided", ""
    first = deciding[0]
    return "not evaluable", first.cause, first.reason


def _existence_verdict(deciding: Sequence[RowResult]) -> tuple[Verdict, Cause, str]:
    """Some setting of the grid shows it: holds; every setting evaluable and none shows it: fails."""
    held = [r for r in deciding if r.verdict == "holds"]
    if held:
        return "holds", "decided", f"shown at {len(held)} of {len(deciding)} settings of the grid ({held[0].id})"
    evaluable = [r for r in deciding if r.verdict != "not evaluable"]
    if not evaluable:
        return "not evaluable", deciding[0].cause, deciding[0].reason
    open_ = [r for r in evaluable if r.verdict == "not resolved"]
    if open_:
        return "not resolved", open_[0].cause, f"{len(open_)} of {len(deciding)} settings not resolved; none holds"
    if len(evaluable) < len(deciding):
        return (
            "not resolved",
            "grid not covered",
            f"fails at the {len(evaluable)} evaluable settings of {len(deciding)}; an existence fails only when every "
            "setting of the grid is evaluable and none shows it",
        )
    return "fails", "decided", f"no setting of the grid's {len(deciding)} shows it"


def _multiplicity(rows: Sequence[RowResult], alpha: float) -> None:
    family = [r for r in rows if r.verdict != "not evaluable"]
    if len(family) < 2:
        return
    rejected = holm([r.p_fail for r in family], alpha)
    for r, rej in zip(family, rejected, strict=True):
        if r.verdict == "fails" and not rej:
            r.alone = "fails"
            r.set(
                "not resolved",
                "multiplicity",
                f"fails alone (p = {r.p_fail:.3g}) but not after Holm's correction over {len(family)} rows",
            )


def _gate(
    spec: ClaimSpec,
    stage: Stage | None,
    res: RowResult,
    row: Row,
    measured: Measurements,
    health: Mapping[str, ArmHealth],
) -> None:
    if res.verdict == "not evaluable":
        return
    bad = []
    for arm in row.arms:
        h = health.get(arm)
        if h is None:
            continue
        ok = h.trained if spec.learning_required else h.moved
        if not ok:
            bad.append(f"{arm} {h.status} ({'; '.join(h.reasons)})")
    if bad:
        res.set("not evaluable", "not trained", "; ".join(bad))
        return
    if stage is None:
        return
    res.stage = stage.id
    missing = []
    for arm in row.arms:
        check = measured.stages.get(arm, {}).get(stage.id)
        if check is None:
            raise ValueError(f"{res.id}: stage {stage.id!r} is declared but not measured for arm {arm!r}")
        below = [i for i, ok in enumerate(check.passed) if not ok]
        if below:
            rel = "<" if check.relation == "lt" else ">"
            shown = ", ".join(f"{check.value[i]:.4g} vs {check.bound[i]:.4g}" for i in below[:4])
            missing.append(
                f"{arm} members {below} not {rel} bound ({check.evidence + ': ' if check.evidence else ''}{shown})"
            )
    if missing:
        res.set("not evaluable", "stage not reached", f"stage not reached — {stage.description}: " + "; ".join(missing))


def judge_row(
    spec: ClaimSpec, row: Row, cfg: Any, confidence: float = 0.95, lengths: tuple[float, float] | None = None
) -> RowResult:
    """The decision, convergence and budget steps of one row (the gates need the whole run: :func:`judge`).
    ``lengths``: ``(the run's training length, the seed's)`` for the budget rule (see :func:`judge`)."""
    expected = resolve(spec.expected, cfg, row)
    tol = resolve(spec.tolerance, cfg, row) if spec.test != "compare" else 0.0
    margin = resolve(spec.margin, cfg, row) if spec.test == "compare" else None
    drift_tol = resolve(spec.drift_tolerance, cfg, row) if spec.drift_tolerance is not None else tol
    if spec.test != "compare" and expected is None:
        if row.reference is None:
            raise ValueError(f"{spec.id}/{row.key}: no expected value declared and no measured reference given")
        expected = row.reference.mean
    target = margin if spec.test == "compare" else expected
    assert target is not None  # a compare test's margin (a Value, never None), else the expected value set above
    provenance = row.provenance if spec.scope is None else ("paper" if spec.scope(cfg, row) else "ours")
    outside = spec.outside(cfg, row)
    if outside:
        provenance = "ours"
    res = RowResult(
        id=f"{spec.id}/{row.key}" if row.key else spec.id,
        statement=row.label or spec.statement,
        kind=spec.kind,
        test=spec.test,
        relation=spec.relation,
        expected=float(target),
        tolerance=float(tol or 0.0),
        measured=row.measured,
        reference=row.reference,
        provenance=provenance,
        horizon=spec.horizon,
        arms=row.arms,
        unit=spec.unit,
        context=row.context,
        learning_required=spec.learning_required,
        paired=spec.paired,
        confidence=confidence,
        drift_tolerance=drift_tol,
        outside=outside,
    )
    m = row.measured
    if m.n == 0:
        # the row's label says what it would have read (e.g. "(0 diagonal members)"): the reader learns why
        res.set("not evaluable", "no rows", f"no measurement: {row.label}" if row.label else "no measurement")
        return res
    if not all(math.isfinite(v) for v in m.values) or (
        row.reference is not None and not all(math.isfinite(v) for v in row.reference.values)
    ):
        res.p_fail, res.p_hold = 0.0, 1.0
        res.set("fails", "non-finite", "non-finite measurement")
        return res
    if spec.test == "compare":
        _decide_compare(spec, res, row, float(margin or 0.0), confidence)
        _at_paper_budget(spec, res, row, cfg, lengths)
        return res
    assert expected is not None  # not a compare test: declared, or the reference's mean (above)
    lo, hi = region(spec.relation, expected, tol)
    if spec.test == "every":
        _decide_every(spec, res, row, lo, hi, confidence)
    else:
        _decide_value(res, row, lo, hi, confidence)
    if (
        spec.horizon == "convergence"
        and res.verdict == "holds"
        and m.drift is not None
        and math.isfinite(m.drift)
        and drift_tol is not None
        and abs(m.drift) > drift_tol
    ):
        res.set(
            "not resolved",
            "still moving",
            f"still moving: {m.drift:+.4g}{spec.unit} over the last tenth of training (learning-rate time), "
            f"tolerance {drift_tol:g}; {res.verdict} at the end",
        )
    elif res.verdict == "holds" and spec.stays_for(cfg) and _short_of_paper(spec, cfg, row):
        run_len, paper_len = resolve(spec.length, cfg, row), resolve(spec.paper_length, cfg, row)
        res.set(
            "not resolved",
            "shorter than the seed's length",
            f"it stays through {run_len:g} of training ({spec.length}), shorter than the seed's {paper_len:g}: "
            f"what stays at {run_len:g} may still leave before {paper_len:g}",
        )
    elif (
        spec.horizon == "convergence"
        and res.verdict == "fails"
        and m.drift is not None
        and math.isfinite(m.drift)
        and drift_tol is not None
    ):
        centre = statistics.fmean(m.values)
        toward = (centre < lo and m.drift > 0) or (centre > hi and m.drift < 0)
        # as much training again at the end's pace would bring the measurement to the claim's boundary
        distance = lo - centre if centre < lo else centre - hi
        if toward and abs(m.drift) * AGAIN >= distance:
            res.set(
                "not resolved",
                "still moving",
                f"still moving towards the claim: {m.drift:+.4g}{spec.unit} over the last tenth of training "
                f"(learning-rate time), so as much training again at that pace moves it by "
                f"{abs(m.drift) * AGAIN:.4g}, at least its distance {distance:.4g} to the claim's boundary; fails at "
                "the end, not at convergence",
            )
    if (
        spec.horizon == "convergence"
        and res.verdict == "not resolved"
        and res.cause == "spread"
        and m.drift is not None
        and math.isfinite(m.drift)
        and math.isfinite(res.interval.hi - res.interval.lo)
        and abs(m.drift) > (res.interval.hi - res.interval.lo) / 2
    ):
        # More members would narrow the interval, but its centre still moves by more than its half-width
        # over the last tenth of training: the binding limit is the training length, not the seed spread.
        res.set(
            "not resolved",
            "still moving",
            f"the interval straddles the boundary and the measurement still moves {m.drift:+.4g}{spec.unit} over "
            f"the last tenth of training (learning-rate time), more than the interval's half-width "
            f"{(res.interval.hi - res.interval.lo) / 2:.4g}: training too short, not the spread",
        )
    _at_paper_budget(spec, res, row, cfg, lengths)
    return res


def _at_paper_budget(spec: ClaimSpec, res: RowResult, row: Row, cfg: Any, lengths: tuple[float, float] | None) -> None:
    """The budget rule: a statement about the seed's budget fails only there. What has not happened by a
    shorter run's end may still happen before the seed's (a curve still rising is training too short, not a
    finding). A holds from a shorter run stands (what has happened stays happened), except for a claim that
    something stays (its own rule); so does a fail read off event times every member reached (an order of
    events already seen is not undone by more training)."""
    if (
        spec.horizon == "budget"
        and res.verdict == "fails"
        and not spec.stays_for(cfg)
        and lengths is not None
        and lengths[0] < lengths[1]
        and not _events_happened(row)
    ):
        res.set(
            "not resolved",
            "shorter than the seed's length",
            f"fails at {lengths[0]:g} of training, shorter than the seed's budget {lengths[1]:g}: "
            f"a statement about the seed's budget fails only there",
        )


def _events_happened(row: Row) -> bool:
    """Whether the row reads event times (a sample that carries censoring) that every member of the
    measurement and of its reference reached within the run."""
    samples = [x for x in (row.measured, row.reference) if x is not None]
    return all(x.censored is not None and not any(x.censored) for x in samples)


def _short_of_paper(spec: ClaimSpec, cfg: Any, row: Row) -> bool:
    """Whether the run trained for less than the seed's length (a claim that something stays)."""
    run_len, paper_len = resolve(spec.length, cfg, row), resolve(spec.paper_length, cfg, row)
    assert run_len is not None and paper_len is not None  # a claim that stays names both (ClaimSpec checks it)
    return run_len < paper_len


def _ref_error(ref: Sample | None) -> tuple[float, float]:
    """A measured reference's standard error and resolution bound."""
    if ref is None:
        return 0.0, 0.0
    se = ref.mc_se
    if not ref.deterministic and ref.n >= 2:
        se = math.sqrt(se**2 + statistics.variance(ref.values) / ref.n)
    return se, ref.resolution / 2


def _decide_value(res: RowResult, row: Row, lo: float, hi: float, confidence: float) -> None:
    m = row.measured
    if m.censored and all(m.censored):
        res.interval = mean_interval(m.values, confidence, deterministic=True)
        res.set(
            "not resolved",
            "censored",
            f"every member censored at its bound ({m.mean:.4g}): never reached within the horizon",
        )
        return
    if m.proportion:
        iv = res.interval = proportion_interval(m.values, confidence)
        if math.isnan(iv.center):
            raise ValueError(f"{res.id}: a proportion's values must be 0/1 indicators")
        res.p_fail = proportion_p_outside(int(sum(m.values)), m.n, lo, hi)
        res.p_hold = _p_inside_proportion(int(sum(m.values)), m.n, lo, hi)
    else:
        ref_se, ref_w = _ref_error(row.reference)
        iv = mean_interval(
            m.values, confidence, m.deterministic, extra_se=math.hypot(m.mc_se, ref_se), widen=m.resolution / 2 + ref_w
        )
        can_fail_low = can_fail_high = True
        if m.censored and any(m.censored):  # a bound: the interval is open on the censored side
            if m.censor == "above":
                iv, can_fail_low = Interval(iv.center, iv.lo, math.inf, iv.n, iv.se, iv.df, iv.widen), False
            else:
                iv, can_fail_high = Interval(iv.center, -math.inf, iv.hi, iv.n, iv.se, iv.df, iv.widen), False
        res.interval = iv
        p = p_outside(iv, lo, hi)
        if (iv.center < lo and not can_fail_low) or (iv.center > hi and not can_fail_high):
            p = 1.0
        res.p_fail = p
        res.p_hold = max(
            p_outside(iv, -math.inf, lo) if lo > -math.inf else 0.0,
            p_outside(iv, hi, math.inf) if hi < math.inf else 0.0,
        )
    if lo <= iv.lo and iv.hi <= hi:
        res.set("holds", "decided")
    elif iv.hi < lo or iv.lo > hi:
        res.set("fails", "decided")
    elif iv.n < 2 and not m.deterministic and not m.proportion:
        res.set("not resolved", "one member", "one member: the seed-to-seed spread is unknown")
    elif 2 * iv.widen > hi - lo:
        res.set(
            "not resolved",
            "resolution",
            f"the tolerance ({(hi - lo) / 2:g}) is finer than the measurement's resolution (± {iv.widen:g})",
        )
    elif m.censored and any(m.censored):
        res.set("not resolved", "censored", f"{m.n_censored}/{m.n} members censored: only a bound is known")
    else:
        res.set("not resolved", "spread", "the members' interval straddles the boundary")


def _p_inside_proportion(k: int, n: int, lo: float, hi: float) -> float:
    ps = []
    if lo > 0:
        ps.append(proportion_p_outside(k, n, 0.0, lo))
    if hi < 1:
        ps.append(proportion_p_outside(k, n, hi, 1.0))
    return max(ps) if ps else 0.0


def _decide_every(spec: ClaimSpec, res: RowResult, row: Row, lo: float, hi: float, confidence: float) -> None:
    m = row.measured
    se = m.se or (0.0,) * m.n
    z = float(stats.norm.ppf(0.5 + confidence / 2))
    w = m.resolution / 2
    censored = m.censored or (False,) * m.n
    marks, ps = [], []
    for v, s, c in zip(m.values, se, censored, strict=True):
        h = z * s + w
        vlo, vhi = v - h, v + h
        if c:
            vlo, vhi = (vlo, math.inf) if m.censor == "above" else (-math.inf, vhi)
        d = max(lo - v if not (c and m.censor == "above") else 0.0, v - hi if not (c and m.censor == "below") else 0.0)
        ps.append(1.0 if d - w <= 0 else (0.0 if s == 0 else float(2 * (1 - stats.norm.cdf((d - w) / s)))))
        if lo <= vlo and vhi <= hi:
            marks.append("holds")
        elif vhi < lo or vlo > hi:
            marks.append("fails")
        else:
            marks.append("not resolved")
    res.per_member = marks
    res.interval = mean_interval(m.values, confidence, deterministic=True, widen=w)
    n = m.n
    need = math.ceil(spec.min_fraction * n - 1e-9)
    held, failed = marks.count("holds"), marks.count("fails")
    f = n - need + 1  # members that must fail for the row to fail
    res.p_fail = sorted(ps)[f - 1] if 0 < f <= n else 1.0
    if all(censored):
        res.set("not resolved", "censored", "every member censored at its bound: never reached within the horizon")
    elif held >= need:
        res.set("holds", "decided")
    elif n - failed < need:
        res.set("fails", "decided", f"{failed}/{n} members outside")
    else:
        res.set(
            "not resolved",
            "spread",
            f"{marks.count('not resolved')}/{n} members within their own error of the boundary",
        )


def _decide_compare(spec: ClaimSpec, res: RowResult, row: Row, margin: float, confidence: float) -> None:
    a, b = row.measured, row.reference
    if b is None or b.n == 0:
        res.set("not evaluable", "no rows", "no reference arm")
        return
    ca, cb = a.censored or (False,) * a.n, b.censored or (False,) * b.n
    w = (a.resolution + b.resolution) / 2
    if all(ca) and all(cb):
        res.interval = Interval(a.mean - b.mean, -math.inf, math.inf, min(a.n, b.n))
        res.set("not resolved", "censored", "every member of both arms censored: neither reached within the horizon")
        return
    discrete = w > 0 or any(ca) or any(cb)
    if spec.paired and discrete:
        if a.n != b.n:
            raise ValueError(f"{res.id}: paired comparison needs equal member counts, got {a.n} and {b.n}")
        lower, upper = [], []
        for x, y, cx, cy in zip(a.values, b.values, ca, cb, strict=True):
            d_lo, d_hi = x - y - w, x - y + w
            if cx:
                d_lo, d_hi = (d_lo, math.inf) if a.censor == "above" else (-math.inf, d_hi)
            if cy:
                d_lo, d_hi = (-math.inf, d_hi) if b.censor == "above" else (d_lo, math.inf)
            lower.append(d_lo)
            upper.append(d_hi)
        t = sign_test(lower, upper, margin, spec.relation)
        fin_lo = [x for x in lower if math.isfinite(x)]
        fin_hi = [x for x in upper if math.isfinite(x)]
        res.interval = Interval(
            statistics.fmean(x - y for x, y in zip(a.values, b.values, strict=True)),
            statistics.fmean(lower) if len(fin_lo) == len(lower) else -math.inf,
            statistics.fmean(upper) if len(fin_hi) == len(upper) else math.inf,
            t.n,
            widen=w,
        )
        res.p_fail, res.p_hold = t.p_fail, t.p_hold
        alpha = 1 - confidence
        what = (
            f"exact sign test over {t.n} members: {t.n_for} beyond the margin, {t.n_against} not, "
            f"{t.n - t.n_for - t.n_against} undetermined (resolution ± {w:g}"
            f"{', censored values' if any(ca) or any(cb) else ''})"
        )
        need = min_sign_members(alpha)
        if t.p_hold < alpha:
            res.set("holds", "decided", f"{what}; p = {t.p_hold:.3g}")
        elif t.p_fail < alpha:
            res.set("fails", "decided", f"{what}; p = {t.p_fail:.3g}")
        elif t.n < need:  # no data could decide it: the member count is the limit, not the measurement
            res.set(
                "not resolved",
                "members",
                f"{what}: on {t.n} members the test's p is at least {2 * 0.5**t.n:.3g} whatever the data; "
                f"members: needs ≥ {need} at {confidence:.4g}",
            )
        else:
            res.set(
                "not resolved",
                "censored" if any(ca) or any(cb) else "resolution",
                f"{what}: p = {min(t.p_hold, t.p_fail):.3g}, not below {alpha:g}",
            )
        return
    iv = difference_interval(a.values, b.values, spec.paired, confidence, widen=w)
    if any(ca) or any(cb):  # unpaired with censored values: the difference is a bound on that side
        up_open = (any(ca) and a.censor == "above") or (any(cb) and b.censor == "below")
        down_open = (any(ca) and a.censor == "below") or (any(cb) and b.censor == "above")
        iv = Interval(
            iv.center, -math.inf if down_open else iv.lo, math.inf if up_open else iv.hi, iv.n, iv.se, iv.df, iv.widen
        )
    res.interval = iv
    if spec.relation == "lt":
        hold_region, fail_side = (-math.inf, -margin), (-margin, math.inf)
        holds, fails = iv.hi < -margin, iv.lo >= -margin
    else:
        hold_region, fail_side = (margin, math.inf), (-math.inf, margin)
        holds, fails = iv.lo > margin, iv.hi <= margin
    res.p_fail = p_outside(iv, *hold_region) if math.isfinite(iv.se) else 1.0
    res.p_hold = p_outside(iv, *fail_side) if math.isfinite(iv.se) else 1.0
    if holds:
        res.set("holds", "decided")
    elif fails:
        res.set("fails", "decided")
        if iv.se == 0.0:  # a zero-spread difference at or beyond the margin: certain
            res.p_fail = 0.0
    elif iv.n < 2:
        res.set("not resolved", "one member", "one member: the seed-to-seed spread is unknown")
    else:
        res.set("not resolved", "spread", "the difference's interval includes the margin")

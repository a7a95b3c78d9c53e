"""Every declared claim of every experiment can hold, fail and stay unresolved, and says what the paper says.

For each :class:`~tdlab.claims.ClaimSpec` an experiment declares, measurements are planted at the
spec's own expected value, tolerance and margin (resolved from the experiment's quick config at the
spec's ``example`` row): a faithful one must hold, a violated one fail (or, against a threshold of ours
that nothing calibrates, stay not resolved: it cannot refute the paper), one straddling the boundary
stay not resolved. A claim that cannot fail (or cannot hold) is a declaration defect. A calibrated
threshold's own planted cases (``Calibration.plant``) are judged at the quick and paper configs, and
every paper claim declares its quote, place, kind and the source of its threshold.
"""

from __future__ import annotations

import dataclasses
import math

import numpy as np
import pytest

from tdlab.claims import ClaimSpec, Measurements, Row, Sample, judge, resolve
from tdlab.claims.declare import Threshold
from tdlab.experiments.base import registry

MEMBERS = 8


def _declared() -> list[tuple[str, ClaimSpec]]:
    return [(name, spec) for name, exp in sorted(registry().items()) for spec in exp.claims]


DECLARED = _declared()


def _spread(center: float, width: float) -> list[float]:
    return (center + width * np.linspace(-1, 1, MEMBERS)).tolist()


def _plants(spec: ClaimSpec, cfg) -> dict[str, tuple[list[float], list[float] | None]]:
    """``{kind: (measured, reference)}`` for the faithful, violated and boundary plants."""
    probe = Row("planted", Sample((0.0,)), context=dict(spec.example))
    if spec.test == "compare":
        m = resolve(spec.margin, cfg, probe)
        s = max(abs(m), 1.0)
        sign = 1.0 if spec.relation == "gt" else -1.0
        ref = [0.0] * MEMBERS
        return {
            "holds": (_spread(sign * (m + 2 * s), s / 10), ref),
            "fails": (_spread(-sign * (m + 2 * s), s / 10), ref),
            "not resolved": (_spread(sign * m, s), ref),
        }
    e = resolve(spec.expected, cfg, probe) if spec.expected is not None else 0.0
    t = resolve(spec.tolerance, cfg, probe)
    s = max(t, 0.05 * abs(e), 1e-2)
    ref = [e] * MEMBERS if spec.expected is None else None
    edge = {"close": e + t, "le": e + t, "ge": e - t}[spec.relation]
    inside = {"close": e, "le": e + t - 2 * s, "ge": e - t + 2 * s}[spec.relation]
    outside = {"close": e + t + 2 * s, "le": e + t + 2 * s, "ge": e - t - 2 * s}[spec.relation]
    narrow = (t / 10) if spec.relation == "close" else s / 10
    return {
        "holds": (_spread(inside, narrow), ref),
        "fails": (_spread(outside, narrow), ref),
        "not resolved": (_spread(edge, s), ref),
    }


def _judge_planted(spec: ClaimSpec, cfg, kind: str):
    # the plants test the decision; the hypotheses (which make rows ours) are tested on their own below
    spec = dataclasses.replace(spec, hypotheses=())
    measured, reference = _plants(spec, cfg)[kind]
    # an `every` claim decides each member on its own value ± its own error: a boundary member is one
    # whose error straddles the boundary
    se = None
    if spec.test == "every":
        width = max(measured) - min(measured)
        se = [width if kind == "not resolved" else 0.0] * MEMBERS
        if kind == "not resolved":
            measured = [float(np.mean(measured))] * MEMBERS
    m = Measurements()
    m.row(
        spec.id,
        "planted",
        Sample(measured, se=se),
        Sample(reference) if reference is not None else None,
        context=dict(spec.example),
    )
    (group,) = judge([spec], m, cfg)
    return group


@pytest.mark.parametrize("name, spec", DECLARED, ids=[f"{n}:{s.id}" for n, s in DECLARED])
@pytest.mark.parametrize("kind", ["holds", "fails", "not resolved"])
def test_a_planted_measurement_gives_its_verdict(name: str, spec: ClaimSpec, kind: str) -> None:
    cfg = registry()[name].make_config("quick")
    if spec.stays_for(cfg):  # a claim that something stays is judged at the seed's length (tested apart below)
        cfg = registry()[name].make_config("quick", [f"{spec.length}={int(resolve(spec.paper_length, cfg))}"])
    group = _judge_planted(spec, cfg, kind)
    row = group.rows[0]
    if kind == "fails" and spec.kind == "paper" and not spec.calibrated:
        assert (row.verdict, row.cause) == ("not resolved", "uncalibrated threshold"), row.describe()
        return
    assert row.verdict == kind, f"{name}:{spec.id}: planted {kind} judged {row.verdict} ({row.describe()})"
    assert group.verdict == kind


PLANTED = [
    (n, s)
    for n, s in DECLARED
    if s.threshold is not None and s.threshold.calibration is not None and s.threshold.calibration.plant is not None
]


@pytest.mark.parametrize("name, spec", PLANTED, ids=[f"{n}:{s.id}" for n, s in PLANTED])
@pytest.mark.parametrize("profile", ["quick", "paper"])
def test_a_calibrated_threshold_separates_its_planted_cases(name: str, spec: ClaimSpec, profile: str) -> None:
    """The threshold's own planted cases at the run's shapes: the one the paper's statement covers holds,
    the one it excludes fails (built, not made: the paper config need not fit this machine)."""
    from tdlab.config import build_config

    exp = registry()[name]
    cfg = build_config(exp.Config, exp.profiles[profile])
    assert spec.threshold is not None and spec.threshold.calibration is not None
    plant = spec.threshold.calibration.plant
    assert plant is not None
    satisfies, violates = plant(cfg, dict(spec.example))
    # the decision alone: the hypotheses, the stage and the stays rule are the run's, tested on their own
    bare = dataclasses.replace(spec, hypotheses=(), stage=None, stays=False)
    for sample, verdict in ((satisfies, "holds"), (violates, "fails")):
        m = Measurements()
        m.row(spec.id, "planted", sample, context=dict(spec.example))
        (group,) = judge([bare], m, cfg)
        assert group.rows[0].verdict == verdict, f"{profile}: planted {verdict}: {group.rows[0].describe()}"


@pytest.mark.parametrize("name, spec", DECLARED, ids=[f"{n}:{s.id}" for n, s in DECLARED])
def test_a_paper_claim_says_what_the_paper_says(name: str, spec: ClaimSpec) -> None:
    if spec.kind != "paper":
        return
    assert spec.quote.strip() and spec.where.strip(), f"{name}:{spec.id}: the paper's words and their place"
    assert spec.threshold is not None and spec.threshold.note.strip(), (
        f"{name}:{spec.id}: where the threshold comes from"
    )
    if spec.form == "limit":
        assert spec.limit.strip(), f"{name}:{spec.id}: a limit statement says how the limit is judged"
    if spec.form == "existence":
        assert spec.grid.strip(), f"{name}:{spec.id}: an existence statement declares its grid"
    if spec.threshold.calibration is not None:
        assert spec.threshold.calibration.note.strip()


@pytest.mark.parametrize(
    "name, spec",
    [(n, s) for n, s in DECLARED if s.stays is not False],
    ids=[f"{n}:{s.id}" for n, s in DECLARED if s.stays is not False],
)
def test_a_planted_stay_in_a_run_shorter_than_the_seeds_is_not_resolved(name: str, spec: ClaimSpec) -> None:
    cfg = registry()[name].make_config("quick")
    if not spec.stays_for(cfg):
        pytest.skip("not a claim that something stays in the quick setting")
    assert resolve(spec.length, cfg) < resolve(spec.paper_length, cfg)
    row = _judge_planted(spec, cfg, "holds").rows[0]
    assert row.verdict == "not resolved" and row.cause == "shorter than the seed's length"
    assert _judge_planted(spec, cfg, "fails").rows[0].verdict == "fails"


@pytest.mark.parametrize("relation", ["close", "le", "ge"])
@pytest.mark.parametrize("kind", ["holds", "fails", "not resolved"])
def test_the_plants_cover_every_member_claims(relation: str, kind: str) -> None:
    spec = ClaimSpec(
        "every-member",
        "each member at the limit (Fig. 1)",
        test="every",
        relation=relation,
        quantity="a gap",
        expected=0.5,
        tolerance=0.01,
        threshold=Threshold("paper", "a tolerance the paper states"),
    )
    assert _judge_planted(spec, registry()["markov-init"].make_config("quick"), kind).verdict == kind


@pytest.mark.parametrize("name, spec", DECLARED, ids=[f"{n}:{s.id}" for n, s in DECLARED])
def test_a_declaration_is_complete(name: str, spec: ClaimSpec) -> None:
    assert spec.statement and spec.quantity, f"{name}:{spec.id} states no statement or quantity"
    cfg = registry()[name].make_config("quick")
    probe = Row("planted", Sample((0.0,)), context=dict(spec.example))
    for value in (spec.tolerance, spec.margin, spec.drift_tolerance):
        v = resolve(value, cfg, probe)
        assert v is None or (math.isfinite(v) and v >= 0), f"{name}:{spec.id}: a tolerance or margin below 0"
    if spec.kind == "paper":
        assert any(ch.isdigit() for ch in spec.statement), f"{name}:{spec.id}: cite the seed's figure/equation"


def test_every_experiment_declares_unique_claim_ids() -> None:
    for name, exp in registry().items():
        ids = [s.id for s in exp.claims]
        assert len(ids) == len(set(ids)), name

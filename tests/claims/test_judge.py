"""The one layer that decides: every rule of :mod:`tdlab.claims.judge` at its boundary — decision,
resolution, censoring, Monte-Carlo references, convergence, the health and stage gates,
provenance, multiplicity and the group rule — each shown able to hold, fail and stay unresolved."""

from __future__ import annotations

import math

import numpy as np
import pytest

from tdlab.claims import ArmHealth, ClaimSpec, Measurements, Sample, Stage, judge
from tdlab.claims.declare import Calibration, Hypothesis, Threshold
from tdlab.config import Config


class _Claims(Config):
    tol: float = 0.01


class _Cfg(Config):
    claims: _Claims = _Claims()
    k: int = 2


CFG = _Cfg()


# The rules below are shown on a claim whose threshold may make it fail (the calibration rule is tested apart).
PLANTED = Threshold("ours", "a test tolerance", Calibration("planted", "planted rows at this test's shapes"))


def spec(test="value", relation="close", **kw) -> ClaimSpec:
    kw.setdefault("quantity", "a number")
    kw.setdefault("threshold", PLANTED)
    return ClaimSpec(kw.pop("id", "c"), "a statement (Fig. 1)", test=test, relation=relation, **kw)


def one(
    s: ClaimSpec,
    measured,
    reference=None,
    *,
    health=None,
    stages=(),
    arms=(),
    provenance="paper",
    context=None,
    confidence=0.95,
):
    """Judge a one-row group; returns (group, row)."""
    m = Measurements()
    m.row(
        s.id,
        "r",
        measured if isinstance(measured, Sample) else Sample(measured),
        reference if reference is None or isinstance(reference, Sample) else Sample(reference),
        arms=arms,
        provenance=provenance,
        context=context,
    )
    for arm, st, value, bound in stages:
        m.stage(arm, st, value, bound)
    (g,) = judge([s], m, CFG, health, confidence)
    return g, g.rows[0]


# --------------------------------------------------------------------------------------------------
# Decision


@pytest.mark.parametrize(
    "values, verdict, cause",
    [
        ([0.001, -0.002, 0.002, 0.000], "holds", "decided"),
        ([0.05, 0.052, 0.049, 0.051], "fails", "decided"),
        ([0.002, 0.018, 0.006, 0.014], "not resolved", "spread"),
        ([0.003], "not resolved", "one member"),
        ([0.0, float("nan"), 0.0], "fails", "non-finite"),
    ],
)
def test_value_close(values, verdict, cause):
    _, r = one(spec(tolerance=0.01), values)
    assert (r.verdict, r.cause) == (verdict, cause)


def test_every_relation_can_hold_and_fail():
    assert one(spec(relation="le", expected=0.5), [0.4, 0.41, 0.39])[1].verdict == "holds"
    assert one(spec(relation="le", expected=0.5), [1.0, 1.01, 0.99])[1].verdict == "fails"
    assert one(spec(relation="ge", expected=0.5), [0.6, 0.61, 0.59])[1].verdict == "holds"
    assert one(spec(relation="ge", expected=0.5), [0.0, 0.01, -0.01])[1].verdict == "fails"


def test_expected_and_tolerance_from_config_paths_and_theory_functions():
    s = spec(expected=lambda cfg, row: 0.1 * row.context["k"] + cfg.k, tolerance="claims.tol")
    _, r = one(s, [2.3, 2.301, 2.299], context={"k": 3})
    assert r.expected == pytest.approx(2.3) and r.tolerance == 0.01 and r.verdict == "holds"
    assert one(s, [2.4, 2.401, 2.399], context={"k": 3})[1].verdict == "fails"


def test_a_deterministic_value_is_decided_from_one_member():
    assert one(spec(tolerance=0.01), Sample([0.0], deterministic=True))[1].verdict == "holds"
    assert one(spec(tolerance=0.01), Sample([0.5], deterministic=True))[1].verdict == "fails"


def test_a_proportion_is_decided_on_wilsons_interval():
    s = spec(relation="ge", expected=1.0, tolerance=0.01)
    assert one(s, Sample([1.0] * 10_000, proportion=True))[1].verdict == "holds"
    assert one(s, Sample([1.0] * 90 + [0.0] * 10, proportion=True))[1].verdict == "fails"
    assert one(s, Sample([1.0] * 100, proportion=True))[1].verdict == "not resolved"  # [0.963, 1]


# --------------------------------------------------------------------------------------------------
# Resolution, censoring, Monte-Carlo references


def test_a_discrete_value_never_gives_a_zero_width_interval():
    s = spec(relation="le", expected=250.0)
    _, r = one(s, Sample([300.0] * 3, resolution=100.0))  # known to ±50: [250, 350] touches the bound
    assert r.verdict == "not resolved" and r.interval.lo == 250.0
    assert one(s, Sample([300.0] * 3))[1].verdict == "fails"  # the same values read as exact would fail


def test_a_tolerance_finer_than_the_resolution_cannot_hold():
    _, r = one(spec(tolerance=0.01), Sample([0.0, 0.001, -0.001], resolution=0.043))
    assert r.verdict == "not resolved" and r.cause == "resolution" and "finer than" in r.reason
    assert one(spec(tolerance=0.05), Sample([0.0, 0.001, -0.001], resolution=0.043))[1].verdict == "holds"


def test_every_member_censored_is_never_a_verdict():
    _, r = one(spec(relation="ge", expected=100.0), Sample([2000.0] * 3, censored=[True] * 3))
    assert r.verdict == "not resolved" and r.cause == "censored" and "never reached" in r.reason


def test_a_censored_member_opens_its_side_of_the_interval():
    # true values ≥ stored: "at least 100" can hold on the bound, "at most 100" cannot be decided
    data = Sample([400.0, 420.0, 450.0], censored=[False, False, True])
    assert one(spec(relation="ge", expected=100.0), data)[1].verdict == "holds"
    assert one(spec(relation="le", expected=100.0), data)[1].verdict == "fails"  # the lower bound already exceeds it
    _, r = one(spec(relation="le", expected=5000.0), data)
    assert r.verdict == "not resolved" and r.cause == "censored" and math.isinf(r.interval.hi)


def test_a_measured_reference_carries_its_sampling_error():
    s = spec(expected=None, tolerance=0.01)
    values = [0.100, 0.101, 0.099, 0.100]
    assert one(s, values, Sample([0.1], deterministic=True))[1].verdict == "holds"
    _, r = one(s, values, Sample([0.1], deterministic=True, mc_se=0.01))  # the reference known to ±0.02
    assert r.verdict == "not resolved" and r.expected == pytest.approx(0.1)
    assert one(s, values, Sample([0.2], deterministic=True, mc_se=0.001))[1].verdict == "fails"
    with pytest.raises(ValueError, match="no expected value"):
        one(s, values)


# --------------------------------------------------------------------------------------------------
# Comparisons


def test_compare_lt_margin_and_ties_at_the_boundary():
    s = spec(test="compare", relation="lt", margin=0.1, paired=True)
    ref = [1.0, 1.0, 1.0]
    assert one(s, [0.8, 0.81, 0.79], ref)[1].verdict == "holds"  # Δ = −0.2 < −0.1
    tie = spec(test="compare", relation="lt", margin=0.25, paired=True)
    assert (
        one(tie, [0.5, 0.5, 0.5], [0.75, 0.75, 0.75])[1].verdict == "fails"
    )  # Δ = −0.25 exactly (binary-exact): not below −margin
    assert (
        one(spec(test="compare", relation="gt", margin=0.25, paired=True), [0.75] * 3, [0.5] * 3)[1].verdict == "fails"
    )
    assert one(s, [0.95, 0.96, 0.94], ref)[1].verdict == "fails"  # below 0 but not by the margin
    assert one(s, [0.89999, 0.89999, 0.89999], ref)[1].verdict == "holds"
    assert one(s, [0.7, 1.05, 0.9], ref)[1].verdict == "not resolved"


def test_compare_gt_margin_and_ties():
    s = spec(test="compare", relation="gt", margin=0.0, paired=True)
    assert one(s, [1.0, 1.2, 0.9], [0.4, 0.4, 0.3])[1].verdict == "holds"
    assert one(s, [0.4, 0.4, 0.3], [1.0, 1.2, 0.9])[1].verdict == "fails"
    assert one(s, [1.0] * 3, [1.0] * 3)[1].verdict == "fails"  # equal exactly: not greater


def test_paired_discrete_directions_use_the_exact_sign_test():
    s = spec(test="compare", relation="gt", paired=True)
    later = Sample([1000.0, 1200.0, 900.0], resolution=100.0)
    earlier = Sample([400.0, 400.0, 300.0], resolution=100.0)
    _, r = one(s, later, earlier)
    assert r.verdict == "not resolved" and r.p_hold == pytest.approx(0.25) and "sign test" in r.reason
    _, r6 = one(s, Sample([1000.0] * 6, resolution=100.0), Sample([400.0] * 6, resolution=100.0))
    assert r6.verdict == "holds" and r6.p_hold == pytest.approx(2 / 64)
    _, wrong = one(s, Sample([300.0] * 6, resolution=100.0), Sample([400.0] * 6, resolution=100.0))
    assert wrong.verdict == "fails"


@pytest.mark.parametrize("confidence", [0.95, 0.9875])
def test_a_sign_test_on_too_few_members_says_the_member_count_is_the_limit(confidence):
    """At N − 1 members an exact sign test cannot decide whatever the data: not resolved, cause "members",
    naming N; at N members the same data decide it."""
    from tdlab.claims.stats import min_sign_members

    s = spec(test="compare", relation="gt", paired=True)
    need = min_sign_members(1 - confidence)
    _, short = one(
        s,
        Sample([1000.0] * (need - 1), resolution=100.0),
        Sample([400.0] * (need - 1), resolution=100.0),
        confidence=confidence,
    )
    assert short.verdict == "not resolved" and short.cause == "members"
    assert f"needs ≥ {need}" in short.reason and short.p_hold >= 1 - confidence
    _, enough = one(
        s, Sample([1000.0] * need, resolution=100.0), Sample([400.0] * need, resolution=100.0), confidence=confidence
    )
    assert enough.verdict == "holds" and enough.cause == "decided"
    # Enough members that disagree: not resolved by the data, not by the count.
    _, mixed = one(
        s,
        Sample([1000.0, 300.0] * need, resolution=100.0),
        Sample([400.0] * (2 * need), resolution=100.0),
        confidence=confidence,
    )
    assert mixed.verdict == "not resolved" and mixed.cause == "resolution"


def test_censored_directions():
    s = spec(test="compare", relation="gt", paired=True)
    never = Sample([1500.0] * 6, censored=[True] * 6, resolution=100.0)
    _, r = one(s, never, Sample([300.0] * 6, resolution=100.0))
    assert r.verdict == "holds"  # never left vs left at 300: later in 6/6, exact p = 1/32
    _, both = one(s, never, Sample([1500.0] * 6, censored=[True] * 6, resolution=100.0))
    assert both.verdict == "not resolved" and both.cause == "censored"


def test_unpaired_comparison_is_welch():
    s = spec(test="compare", relation="gt", paired=False)
    assert one(s, [1.0, 1.1, 0.9, 1.05], [0.2, 0.3])[1].verdict == "holds"
    assert one(s, [1.0, 1.1, 0.9], [1.0])[1].verdict == "not resolved"  # one reference member


# --------------------------------------------------------------------------------------------------
# Convergence


def test_still_moving_is_not_resolved_only_for_convergence_claims():
    values = [0.0, 0.001, -0.001]
    _, r = one(spec(tolerance=0.01, horizon="convergence"), Sample(values, drift=-0.03))
    assert r.verdict == "not resolved" and r.cause == "still moving"
    assert one(spec(tolerance=0.01, horizon="convergence"), Sample(values, drift=-0.003))[1].verdict == "holds"
    assert one(spec(tolerance=0.01, horizon="budget"), Sample(values, drift=-0.03))[1].verdict == "holds"
    threshold = spec(relation="ge", expected=0.5, tolerance=0.0, drift_tolerance=0.01, horizon="convergence")
    assert one(threshold, Sample([0.6, 0.61, 0.6], drift=0.02))[1].verdict == "not resolved"


def test_a_fail_at_convergence_needs_the_measurement_to_have_stopped_moving_towards_the_claim():
    """A measurement still approaching the claim at a pace that, over as much training again, reaches the
    claim's boundary is training too short; one whose pace would not reach it in that time fails. The
    topics-wv case: W^V's block-sum gap 0.357 against c3 = 1.156 ± 0.116 (boundary 1.040, 0.684 away)."""
    far = [0.35, 0.36, 0.35]
    claim = spec(expected=1.156, tolerance=0.1156, horizon="convergence")
    _, creeping = one(claim, Sample(far, drift=0.07))  # 10 x 0.07 = 0.7 ≥ 0.684: it could still get there
    assert (
        creeping.verdict == "not resolved"
        and creeping.cause == "still moving"
        and "towards the claim" in creeping.reason
    )
    # 10 x 0.021 = 0.21: at that pace as much training again leaves it 0.47 short of the boundary
    assert one(claim, Sample(far, drift=0.021))[1].verdict == "fails"
    assert one(claim, Sample(far, drift=0.005))[1].verdict == "fails"
    assert one(claim, Sample(far, drift=-0.021))[1].verdict == "fails"  # moving away from the claim
    assert one(spec(expected=1.156, tolerance=0.1156, horizon="budget"), Sample(far, drift=0.021))[1].verdict == "fails"
    above = spec(relation="le", expected=0.0, tolerance=0.01, horizon="convergence")  # a bound from above
    assert one(above, Sample([0.2, 0.21, 0.2], drift=-0.02))[1].verdict == "not resolved"  # falling towards it
    assert one(above, Sample([0.2, 0.21, 0.2], drift=-0.002))[1].verdict == "fails"  # too slowly to reach 0.01
    assert one(above, Sample([0.2, 0.21, 0.2], drift=+0.002))[1].verdict == "fails"
    assert one(claim, Sample([1.15, 1.16, 1.15], drift=0.005))[1].verdict == "holds"  # holds are untouched
    # a fail moving away from the claim fast stays a fail (the drift rule is for holds)
    assert one(claim, Sample(far, drift=-0.5))[1].verdict == "fails"


# --------------------------------------------------------------------------------------------------
# Gates


TRAINED = ArmHealth("a", moved=True, trained=True)
PLATEAU = ArmHealth("a", moved=True, trained=False, reasons=["test error not below the trivial predictor's"])
STUCK = ArmHealth("a", moved=False, trained=False, reasons=["no accepted step"])


def test_health_gate_learned_versus_moved():
    ok = [0.0, 0.001, -0.001]
    assert one(spec(tolerance=0.01), ok, arms=["a"], health={"a": TRAINED})[1].verdict == "holds"
    _, r = one(spec(tolerance=0.01), ok, arms=["a"], health={"a": PLATEAU})
    assert r.verdict == "not evaluable" and r.cause == "not trained" and "moved, not learned" in r.reason
    about_not_learning = spec(tolerance=0.01, learning_required=False)
    assert one(about_not_learning, ok, arms=["a"], health={"a": PLATEAU})[1].verdict == "holds"
    assert one(about_not_learning, ok, arms=["a"], health={"a": STUCK})[1].verdict == "not evaluable"


PAST = Stage("past-order-0", "below the order-0 estimator's loss")


def test_stage_gate_names_the_stage_and_the_members():
    s = spec(relation="le", expected=0.0, tolerance=0.01, stage=PAST)
    wrong = [0.06, 0.064, 0.065]  # would fail: far from the estimator
    _, r = one(s, wrong, arms=["a"], stages=[("a", PAST, [0.50, 0.59, 0.50], [0.594, 0.594, 0.594])])
    assert r.verdict == "fails"  # every member passed the stage: a finding
    g, r = one(s, wrong, arms=["a"], stages=[("a", PAST, [0.50, 0.60, 0.50], 0.594)])
    assert r.verdict == "not evaluable" and r.cause == "stage not reached"
    assert "members [1]" in r.reason and "order-0" in r.reason and "0.6 vs 0.594" in r.reason
    assert g.verdict == "not evaluable" and g.cause == "stage not reached"
    with pytest.raises(ValueError, match="not measured"):
        one(s, wrong, arms=["a"])


def test_a_stage_may_depend_on_the_setting():
    s = spec(tolerance=0.01, stage=lambda cfg: PAST if cfg.k > 5 else None)
    assert one(s, [0.0, 0.001, -0.001], arms=["a"])[1].verdict == "holds"  # k = 2: no stage to pass


# --------------------------------------------------------------------------------------------------
# Provenance, multiplicity, the group rule


def _group(s: ClaimSpec, rows: list[tuple[str, list[float], str]]):
    m = Measurements()
    for key, values, prov in rows:
        m.row(s.id, key, values, provenance=prov)
    return judge([s], m, CFG)[0]


OK, BAD, WIDE = [0.0, 0.001, -0.001], [0.5, 0.51, 0.49], [0.002, 0.018, 0.006, 0.014]


def test_ours_rows_never_decide_a_paper_group():
    g = _group(spec(tolerance=0.01), [("paper", OK, "paper"), ("ours", BAD, "ours")])
    assert g.verdict == "holds" and g.row("ours").verdict == "fails" and g.row("ours").provenance == "ours"
    only_ours = _group(spec(tolerance=0.01), [("ours", BAD, "ours")])
    assert only_ours.verdict == "not evaluable" and only_ours.cause == "no paper rows"
    sanity = _group(spec(tolerance=0.01, kind="sanity"), [("paper", OK, "paper"), ("ours", BAD, "ours")])
    assert sanity.verdict == "fails"  # a sanity check is ours by nature: every row counts


def test_group_rule_and_not_evaluable_rows():
    s = spec(tolerance=0.01)
    assert _group(s, [("a", OK, "paper"), ("b", WIDE, "paper")]).verdict == "not resolved"
    assert _group(s, [("a", OK, "paper"), ("b", WIDE, "paper"), ("c", BAD, "paper")]).verdict == "fails"
    empty = judge([spec(needs="cells (k ≥ 2, depth 3)")], Measurements(), CFG)[0]
    assert empty.verdict == "not evaluable" and empty.cause == "no rows" and "k ≥ 2" in empty.reason


def test_holm_keeps_a_lone_marginal_failure_from_failing_a_large_group():
    s = spec(relation="le", expected=0.0, tolerance=0.0)
    marginal = [0.02, 0.0, 0.04, 0.01, 0.03]  # fails alone: t-interval just above 0
    rows = [(f"r{i}", [-0.05, -0.06, -0.04, -0.05, -0.055], "paper") for i in range(9)] + [("m", marginal, "paper")]
    alone = _group(s, rows[-1:])
    assert alone.verdict == "fails" and 0.01 < alone.rows[0].p_fail < 0.05
    g = _group(s, rows)
    m = g.row("m")
    assert m.verdict == "not resolved" and m.cause == "multiplicity" and m.alone == "fails" and "Holm" in m.reason
    assert g.verdict == "not resolved"
    certain = _group(s, [*rows[:-1], ("m", [0.5, 0.51, 0.49, 0.5, 0.5], "paper")])
    assert certain.verdict == "fails"


def test_every_member_test():
    s = spec(test="every", tolerance=0.01)
    _, r = one(s, [0.0, 0.005, -0.004])
    assert r.verdict == "holds" and r.per_member == ["holds"] * 3
    _, r = one(s, [0.0, 0.05, -0.004])
    assert r.verdict == "fails" and r.per_member == ["holds", "fails", "holds"] and r.p_fail == 0.0
    assert one(s, Sample([0.0, 0.009], se=[0.001, 0.002]))[1].verdict == "not resolved"
    assert one(spec(test="every", tolerance=0.01, min_fraction=0.6), [0.0, 0.05, 0.0])[1].verdict == "holds"


# --------------------------------------------------------------------------------------------------
# Declarations and the summary


def test_bad_declarations_and_measurements_are_refused():
    with pytest.raises(ValueError, match="compare test"):
        spec(test="compare", relation="close")
    with pytest.raises(ValueError, match="value test"):
        spec(test="value", relation="gt")
    with pytest.raises(ValueError, match="undeclared"):
        m = Measurements()
        m.row("other", "r", [1.0])
        judge([spec()], m, CFG)
    with pytest.raises(ValueError, match="declared twice"):
        judge([spec(), spec()], Measurements(), CFG)
    with pytest.raises(ValueError, match="measured twice"):
        m = Measurements()
        m.row("c", "r", [1.0])
        m.row("c", "r", [1.0])


def test_row_and_group_dicts_say_what_decided_them():
    g, r = one(
        spec(relation="ge", expected=100.0, horizon="budget"),
        Sample([400.0, 420.0, 450.0], censored=[False, False, True], resolution=10.0),
        arms=["a"],
    )
    d = r.to_dict()
    assert d["interval"][1] is None and np.isfinite(d["interval"][0])  # JSON has no infinity
    assert d["provenance"] == "paper" and d["horizon"] == "budget" and d["resolution"] == 10.0
    assert d["censored"] == [False, False, True] and d["cause"] == "decided" and d["verdict"] == "holds"
    gd = g.to_dict()
    assert gd["verdict"] == "holds" and gd["horizon"] == "budget" and gd["rows"][0]["id"] == "c/r"
    assert "[HOLDS] c/r" in r.describe()


def test_a_claim_that_something_stays_cannot_hold_from_a_run_shorter_than_the_seeds():
    """Planted: the measurement sits at the plateau (it holds as a value). At 2,000 of the seed's 8,000 steps it
    is not resolved, naming both lengths; at 8,000 it holds; a row that already left still fails."""
    from types import SimpleNamespace

    s = spec(stays=True, length="train.steps", paper_length=8000.0, tolerance=0.01)
    m = Measurements()
    m.row(s.id, "r", Sample([0.001, -0.001, 0.0005, 0.0]))
    short, full = (SimpleNamespace(train=SimpleNamespace(steps=n)) for n in (2000, 8000))
    (g,) = judge([s], m, short)
    assert g.rows[0].verdict == "not resolved" and g.rows[0].cause == "shorter than the seed's length"
    assert "2000" in g.rows[0].reason and "8000" in g.rows[0].reason
    assert judge([s], m, full)[0].rows[0].verdict == "holds"
    left = Measurements()
    left.row(s.id, "r", Sample([0.2, 0.21, 0.19, 0.2]))
    assert judge([s], left, short)[0].rows[0].verdict == "fails"
    # stays can depend on the setting; a spec that says so must name both lengths
    cond = spec(stays=lambda cfg: cfg.train.steps > 5000, length="train.steps", paper_length=8000.0, tolerance=0.01)
    assert judge([cond], m, short)[0].rows[0].verdict == "holds"  # not a "stays" claim in that setting
    with pytest.raises(ValueError, match="names the run's length"):
        spec(stays=True)


def test_markov_init_standard_claim_stays_only_beyond_p_plus_q_one():
    from tdlab.experiments.base import get

    exp = get("markov-init")
    c = next(c for c in exp.claims if c.id == "standard-init-ends-at-theory-limit")
    assert c.stays_for(exp.make_config("quick", ["task.p=0.5", "task.q=0.8"]))
    assert not c.stays_for(exp.make_config("quick", ["task.p=0.2", "task.q=0.3"]))


def test_a_budget_claim_fails_only_at_the_seeds_length():
    """Planted: masked-tuple accuracy 0.70 (still rising) against a claim of ≥ 0.9 at the seed's budget. From a
    run of 12 of the seed's 1000 epochs it is not resolved, naming both lengths; at 1000 it fails; a holds from
    the short run stands (what has happened stays happened); a convergence claim ignores the lengths."""
    rising = Sample([0.69, 0.70, 0.71], drift=0.05)
    claim = spec(relation="ge", expected=0.9, tolerance=0.0, horizon="budget")
    m = Measurements()
    m.row(claim.id, "r", rising)
    (g,) = judge([claim], m, CFG, lengths=(12.0, 1000.0))
    assert (g.verdict, g.cause) == ("not resolved", "shorter than the seed's length")
    assert "12" in g.rows[0].reason and "1000" in g.rows[0].reason
    assert judge([claim], m, CFG, lengths=(1000.0, 1000.0))[0].verdict == "fails"
    assert judge([claim], m, CFG)[0].verdict == "fails"  # an experiment with no length field
    high = Measurements()
    high.row(claim.id, "r", Sample([0.95, 0.96, 0.97]))
    assert judge([claim], high, CFG, lengths=(12.0, 1000.0))[0].verdict == "holds"
    conv = spec(relation="ge", expected=0.9, tolerance=0.0, horizon="convergence")
    flat = Measurements()
    flat.row(conv.id, "r", Sample([0.69, 0.70, 0.71], drift=0.0))
    assert judge([conv], flat, CFG, lengths=(12.0, 1000.0))[0].verdict == "fails"


def test_an_undecided_row_still_moving_by_more_than_its_half_width_names_training_not_spread():
    """Planted: a distance straddling its tolerance (0.05) whose end drift (0.021) exceeds the interval's
    half-width: the binding limit is the training length ("still moving"); with a small drift it is the
    spread; a budget claim has no convergence rule."""
    values = [0.045, 0.05, 0.055, 0.048, 0.052, 0.05]
    claim = spec(relation="le", expected=0.0, tolerance=0.05, drift_tolerance=0.05, horizon="convergence")
    _, r = one(claim, Sample(values, drift=-0.021))
    half = (r.interval.hi - r.interval.lo) / 2
    assert half < 0.021 and (r.verdict, r.cause) == ("not resolved", "still moving")
    assert "half-width" in r.reason
    _, still = one(claim, Sample(values, drift=-0.2 * half))
    assert (still.verdict, still.cause) == ("not resolved", "spread")
    budget = spec(relation="le", expected=0.0, tolerance=0.05, horizon="budget")
    assert one(budget, Sample(values, drift=-0.021))[1].cause == "spread"


def test_a_claim_with_a_declared_scope_derives_each_rows_provenance_from_it():
    """Planted: a theorem true for every parameter, measured at a setting off the figure's (the row marked
    ``ours`` by measure()): inside the declared scope it decides the paper group; outside it does not."""
    m = Measurements()
    m.row("c", "off-figure", Sample([0.21, 0.2094, 0.208]), provenance="ours", context={"k": 3})
    inside = spec(relation="ge", expected=0.206, tolerance=0.021, horizon="budget", scope=lambda cfg, row: True)
    (g,) = judge([inside], m, CFG)
    assert g.rows[0].provenance == "paper" and g.verdict == "holds"
    outside = spec(relation="ge", expected=0.206, tolerance=0.021, scope=lambda cfg, row: row.context["k"] == 2)
    (g,) = judge([outside], m, CFG)
    assert g.rows[0].provenance == "ours" and (g.verdict, g.cause) == ("not evaluable", "no paper rows")
    assert judge([spec(relation="ge", expected=0.206, tolerance=0.021)], m, CFG)[0].cause == "no paper rows"


def test_lsa_bounded_away_is_scoped_by_thm_4_1_not_by_the_figures_context():
    from tdlab.claims import Row
    from tdlab.experiments.base import get

    exp = get("icl-lsa-vs-lca")
    c = next(c for c in exp.claims if c.id == "lsa-bounded-away-from-bayes")
    cfg = exp.make_config("quick")
    assert c.scope is not None and c.scope(cfg, Row("lsa", Sample([0.2]), provenance="ours"))


def test_a_row_with_no_members_says_what_it_would_have_read():
    m = Measurements()
    m.row("c", "adam-0.01", Sample([]), label="adam-0.01: a_st / a_sw < λ5 (0 diagonal members)")
    (g,) = judge([spec()], m, CFG)
    assert (g.verdict, g.cause) == ("not evaluable", "no rows") and "(0 diagonal members)" in g.rows[0].reason


def test_a_fail_read_off_events_every_member_reached_stands_in_a_shorter_run():
    """Planted: the standard init left the plateau *before* the proposed one in every member (both uncensored):
    that order is seen, so the direction claim fails even at 2,000 of the seed's 8,000 steps; with one member
    that never left (censored), the fail waits for the seed's length."""
    claim = spec(test="compare", relation="gt", margin=0.0, horizon="budget")
    seen = Measurements()
    seen.row(
        claim.id,
        "r",
        Sample([100, 200, 150, 120, 90, 110], censored=[False] * 6),
        Sample([900, 800, 950, 700, 880, 910], censored=[False] * 6),
    )
    (g,) = judge([claim], seen, CFG, lengths=(2000.0, 8000.0))
    assert g.verdict == "fails"
    open_ = Measurements()
    open_.row(
        claim.id,
        "r",
        Sample([100, 200, 150, 120, 90, 110], censored=[False] * 6),
        Sample([900, 800, 950, 700, 880, 2000], censored=[False] * 5 + [True]),
    )
    (g,) = judge([claim], open_, CFG, lengths=(2000.0, 8000.0))
    assert g.verdict != "fails"


# --------------------------------------------------------------------------------------------------
# What the paper says: hypotheses, thresholds, the kind of statement


def _rows(s: ClaimSpec, rows: dict[str, list[float]], contexts: dict[str, dict] | None = None, cfg=CFG):
    m = Measurements()
    for key, values in rows.items():
        m.row(s.id, key, Sample(values), context=(contexts or {}).get(key, {}))
    (g,) = judge([s], m, cfg)
    return g


WRONG, RIGHT = [0.5, 0.51, 0.49], [0.0, 0.001, -0.001]


def test_a_row_outside_a_hypothesis_is_ours_and_cannot_refute_the_paper():
    needs_k3 = Hypothesis("k = 3 (the theorem's order)", lambda cfg: cfg.k == 3)
    g = _rows(spec(tolerance=0.01, hypotheses=(needs_k3,)), {"a": WRONG})
    assert g.rows[0].provenance == "ours" and g.rows[0].verdict == "fails"  # judged and shown
    assert g.rows[0].outside == ["k = 3 (the theorem's order)"]
    assert (g.verdict, g.cause) == ("not evaluable", "outside hypotheses") and "k = 3" in g.reason
    inside = _rows(spec(tolerance=0.01, hypotheses=(needs_k3,)), {"a": WRONG}, cfg=_Cfg(k=3))
    assert inside.verdict == "fails" and inside.rows[0].provenance == "paper"


def test_a_row_hypothesis_reads_the_rows_context():
    anchors = Hypothesis("anchors only", lambda cfg, row: row.context["cls"] != "key", on="row")
    s = spec(tolerance=0.01, hypotheses=(anchors,))
    g = _rows(s, {"key": WRONG, "memory": RIGHT}, {"key": {"cls": "key"}, "memory": {"cls": "memory"}})
    assert [r.provenance for r in g.rows] == ["ours", "paper"]
    assert g.verdict == "holds"  # the key row fails, but keys are outside the statement
    assert anchors.met(CFG) is None  # a row hypothesis needs a row


def test_an_uncalibrated_threshold_of_ours_cannot_make_a_paper_claim_fail():
    ours = Threshold("ours", "a tolerance we chose")
    _, r = one(spec(tolerance=0.01, threshold=ours), WRONG)
    assert (r.verdict, r.cause) == ("not resolved", "uncalibrated threshold") and "a tolerance we chose" in r.reason
    assert one(spec(tolerance=0.01, threshold=ours), RIGHT)[1].verdict == "holds"  # it can still hold
    assert one(spec(tolerance=0.01, threshold=None), WRONG)[1].cause == "uncalibrated threshold"  # undeclared
    for calibrated in (PLANTED, Threshold("paper", "§4: within 1%"), Threshold("closed form", "half the gap")):
        assert one(spec(tolerance=0.01, threshold=calibrated), WRONG)[1].verdict == "fails"
    sanity = spec(tolerance=0.01, threshold=ours, kind="sanity")
    assert one(sanity, WRONG)[1].verdict == "fails"  # a consistency check refutes no paper
    assert not Threshold("ours", "x").calibrated and "cannot make the claim fail" in Threshold("ours", "x").describe()


def test_an_existence_holds_when_some_setting_shows_it_and_fails_only_when_none_does():
    s = spec(tolerance=0.01, form="existence", grid="batch ∈ {16, 40}")
    assert _rows(s, {"b16": RIGHT, "b40": WRONG}).verdict == "holds"
    assert _rows(s, {"b16": WRONG, "b40": WRONG}).verdict == "fails"
    g = _rows(s, {"b16": WRONG, "b40": [0.0, 0.5]})  # one setting not resolved, none holds
    assert g.verdict == "not resolved"
    m = Measurements()
    m.row(s.id, "b16", Sample(WRONG))
    m.row(s.id, "b40", Sample(RIGHT), arms=["b40"])
    (g,) = judge([s], m, CFG, {"b40": STUCK})
    assert (g.verdict, g.cause) == ("not resolved", "grid not covered")  # b40 could have shown it
    with pytest.raises(ValueError, match="existence"):
        spec(form="existence", all_rows=True)


def test_a_statement_over_every_row_does_not_hold_from_the_rows_that_trained():
    s = spec(tolerance=0.01, all_rows=True)
    m = Measurements()
    m.row(s.id, "adam", Sample(RIGHT), arms=["adam"])
    m.row(s.id, "sgd", Sample(RIGHT), arms=["sgd"])
    (g,) = judge([s], m, CFG, {"adam": TRAINED, "sgd": STUCK})
    assert (g.verdict, g.cause) == ("not resolved", "rows not evaluable") and "1 of 2" in g.reason
    (g,) = judge([spec(tolerance=0.01)], m, CFG, {"adam": TRAINED, "sgd": STUCK})
    assert g.verdict == "holds"  # a statement of some rows holds from those that trained
    (g,) = judge([s], m, CFG, {"adam": TRAINED, "sgd": TRAINED})
    assert g.verdict == "holds"

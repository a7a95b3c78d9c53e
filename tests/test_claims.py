"""The claim machinery: intervals against closed forms, every claim kind shown able to hold, fail and
stay unresolved, the group rule, the end-drift rule and the training-health gate."""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy import stats

from tdlab.claims import (
    ArmHealth, Claim, ClaimGroup, assess_arm, difference_interval, end_drift, mean_interval, proportion_interval,
)
from tdlab.experiments.base import Analysis


# ------------------------------------------------------------------------------------------------
# Intervals


def test_mean_interval_is_the_student_t_interval():
    x = [0.61, 0.62, 0.64, 0.60]
    iv = mean_interval(x, 0.95)
    m, se = np.mean(x), np.std(x, ddof=1) / 2
    h = stats.t.ppf(0.975, 3) * se
    assert iv.center == pytest.approx(m)
    assert (iv.lo, iv.hi) == pytest.approx((m - h, m + h))
    assert iv.n == 4


def test_mean_interval_one_member_is_unbounded_unless_deterministic():
    assert mean_interval([0.5]).lo == -math.inf and mean_interval([0.5]).hi == math.inf
    det = mean_interval([0.5], deterministic=True)
    assert (det.lo, det.hi) == (0.5, 0.5)


def test_mean_interval_non_finite_is_nan():
    assert math.isnan(mean_interval([0.1, float("nan")]).center)


def test_interval_covers_the_true_mean_at_its_nominal_rate():
    rng = np.random.default_rng(0)
    covered = sum(
        (iv := mean_interval(rng.normal(1.0, 0.3, size=5).tolist(), 0.9)).lo <= 1.0 <= iv.hi for _ in range(4000)
    )
    assert covered / 4000 == pytest.approx(0.9, abs=0.015)  # binomial sd ≈ 0.005


@pytest.mark.parametrize("k, n", [(10_000, 10_000), (0, 50), (37, 120), (1, 1)])
def test_proportion_interval_is_wilsons(k, n):
    iv = proportion_interval([1.0] * k + [0.0] * (n - k), 0.95)
    ref = stats.binomtest(k, n).proportion_ci(0.95, method="wilson")
    assert (iv.lo, iv.hi) == pytest.approx((ref.low, ref.high), abs=1e-12)
    assert iv.center == pytest.approx(k / n)
    assert math.isnan(proportion_interval([0.5, 1.0]).center)  # not indicators


def test_proportion_rows_resolve_at_full_agreement_and_fail_below():
    g = ClaimGroup("basins", "every point ends in the predicted basin")
    assert g.value("all", [1.0] * 10_000, 1.0, 0.01, "ge", proportion=True).verdict == "holds"
    assert g.value("few", [1.0] * 50, 1.0, 0.01, "ge", proportion=True).verdict == "not resolved"  # [0.929, 1]
    wrong = g.value("wrong", [1.0] * 9_000 + [0.0] * 1_000, 1.0, 0.01, "ge", proportion=True)
    assert wrong.verdict == "fails"
    d = wrong.to_dict()
    assert (d["successes"], d["trials"], d["measured"]) == (9_000, 10_000, [0.9])


def test_difference_interval_paired_and_welch():
    a, b = [1.0, 2.0, 3.0, 4.0], [0.5, 1.4, 2.6, 3.3]
    paired = difference_interval(a, b, paired=True)
    d = np.subtract(a, b)
    h = stats.t.ppf(0.975, 3) * d.std(ddof=1) / 2
    assert (paired.lo, paired.hi) == pytest.approx((d.mean() - h, d.mean() + h))
    welch = difference_interval(a, b)
    ref = stats.ttest_ind(a, b, equal_var=False).confidence_interval(0.95)
    assert (welch.lo, welch.hi) == pytest.approx((ref.low, ref.high))
    with pytest.raises(ValueError):
        difference_interval([1.0, 2.0], [1.0], paired=True)


def test_difference_interval_zero_spread_is_a_point():
    iv = difference_interval([3.0, 3.0, 3.0], [3.0, 3.0, 3.0])
    assert (iv.lo, iv.hi) == (0.0, 0.0)


def test_end_drift_is_the_fitted_change_over_the_last_tenth():
    steps = np.arange(0, 1001, 50)
    flat = np.full((3, steps.size), 0.6)
    assert end_drift(steps, flat) == pytest.approx(0.0)
    falling = np.vstack([0.7 - 1e-4 * steps] * 2)  # slope -1e-4 per step, window 100 steps
    assert end_drift(steps, falling) == pytest.approx(-1e-2)


# ------------------------------------------------------------------------------------------------
# Value claims (members' mean with its interval)


def _value(measured, expected=0.0, tol=0.01, relation="close", **kw):
    g = ClaimGroup("g", "statement")
    return g.value("r", measured, expected, tol, relation, **kw)


@pytest.mark.parametrize(
    "measured, verdict",
    [
        ([0.001, -0.002, 0.002, 0.000], "holds"),  # interval well inside ±0.01
        ([0.05, 0.052, 0.049, 0.051], "fails"),  # interval well outside
        ([0.002, 0.018, 0.006, 0.014], "not resolved"),  # interval straddles +0.01
        ([0.003], "not resolved"),  # one member: spread unknown
        ([0.0, float("nan"), 0.0], "fails"),  # non-finite
    ],
)
def test_value_close(measured, verdict):
    assert _value(measured).verdict == verdict


def test_value_wrong_measurement_fails_for_every_relation():
    assert _value([1.0, 1.01, 0.99], expected=0.5, relation="close").verdict == "fails"
    assert _value([1.0, 1.01, 0.99], expected=0.5, relation="le").verdict == "fails"
    assert _value([0.0, 0.01, -0.01], expected=0.5, relation="ge").verdict == "fails"
    assert _value([0.4, 0.41, 0.39], expected=0.5, relation="le").verdict == "holds"
    assert _value([0.6, 0.61, 0.59], expected=0.5, relation="ge").verdict == "holds"


def test_value_deterministic_single_point_is_decided():
    assert _value([0.0], deterministic=True).verdict == "holds"
    assert _value([0.5], deterministic=True).verdict == "fails"


def test_value_drift_above_tolerance_is_not_resolved():
    c = _value([0.0, 0.001, -0.001], drift=-0.03)
    assert c.verdict == "not resolved" and "still moving" in c.reason
    assert _value([0.0, 0.001, -0.001], drift=-0.003).verdict == "holds"


# ------------------------------------------------------------------------------------------------
# Every-member claims


def test_every_member():
    g = ClaimGroup("g", "every member ends at the rate")
    assert g.every("a", [0.0, 0.005, -0.004], 0.0, 0.01).verdict == "holds"
    wrong = g.every("b", [0.0, 0.05, -0.004], 0.0, 0.01)
    assert wrong.verdict == "fails" and wrong.per_member == ["holds", "fails", "holds"]
    # a member whose own standard error straddles the boundary leaves the claim unresolved
    assert g.every("c", [0.0, 0.009], 0.0, 0.01, member_se=[0.001, 0.002]).verdict == "not resolved"
    assert g.every("d", [0.0, 0.05, 0.0], 0.0, 0.01, min_fraction=0.6).verdict == "holds"


# ------------------------------------------------------------------------------------------------
# Direction claims


def test_compare_direction():
    g = ClaimGroup("later", "standard init leaves the plateau later")
    late, early = [1000.0, 1200.0, 900.0], [400.0, 400.0, 300.0]
    assert g.compare("holds", late, early, "gt", paired=True).verdict == "holds"
    assert g.compare("wrong", early, late, "gt", paired=True).verdict == "fails"
    assert g.compare("lt", early, late, "lt", paired=True).verdict == "holds"
    noisy = g.compare("noisy", [500.0, 300.0, 420.0], [400.0, 400.0, 400.0], "gt", paired=True)
    assert noisy.verdict == "not resolved"
    # both never leave: equal (censored) values, no difference -> the direction fails
    assert g.compare("tied", [2100.0] * 3, [2100.0] * 3, "gt", paired=True).verdict == "fails"
    # a margin the difference does not clear
    assert g.compare("margin", late, early, "gt", paired=True, margin=5000.0).verdict == "fails"


# ------------------------------------------------------------------------------------------------
# Groups


def test_group_verdict_rule():
    g = ClaimGroup("g", "s")
    g.value("a", [0.0, 0.001, -0.001], 0.0, 0.01)
    assert g.verdict == "holds"
    g.value("b", [0.002, 0.018, 0.006, 0.014], 0.0, 0.01)
    assert g.verdict == "not resolved"
    g.value("c", [0.5, 0.51, 0.49], 0.0, 0.01)
    assert g.verdict == "fails"
    assert g.counts == {"holds": 1, "fails": 1, "not resolved": 1, "not evaluable": 0}
    assert [r.id for r in g.rows] == ["g/a", "g/b", "g/c"]
    with pytest.raises(ValueError):
        g.value("a", [0.0], 0.0, 0.01)


def test_group_not_evaluable_when_no_row_is():
    g = ClaimGroup("g", "s")
    g.value("a", [], 0.0, 0.01)
    assert g.verdict == "not evaluable"


def test_analysis_groups_and_duplicates():
    a = Analysis()
    a.group("x", "paper statement")
    a.sanity("y", "by construction")
    assert [g.id for g in a.paper] == ["x"] and [g.id for g in a.sanity_groups] == ["y"]
    with pytest.raises(ValueError):
        a.group("x", "again")


# ------------------------------------------------------------------------------------------------
# Training-health gate


def test_assess_arm_reasons():
    ok = assess_arm("a", [0.69, 0.69], [0.62, 0.63], accepted_steps=[100, 100], test_error=[0.62, 0.63],
                    trivial_error=0.6931)
    assert ok.trained and ok.moved and ok.status == "trained"
    stuck = assess_arm("b", [3e11, 3e11], [3e11, 3e11], accepted_steps=[0, 0])  # icl-unrestricted, σ=0.1
    assert not stuck.moved and any("no accepted step" in r for r in stuck.reasons)
    assert any("not below the initial" in r for r in stuck.reasons)
    nan = assess_arm("c", [0.7], [float("nan")])
    assert not nan.moved and "non-finite values" in nan.reasons
    plateau = assess_arm("d", [0.70, 0.70], [0.69, 0.695], test_error=[0.69, 0.695], trivial_error=0.6931)
    assert plateau.moved and not plateau.trained and plateau.status == "moved, not learned"


def test_gate_marks_rows_of_untrained_arms_not_evaluable():
    a = Analysis()
    g = a.group("g", "s")
    row = g.value("r", [0.0, 0.001, -0.001], 0.0, 0.01, arms=["bad"])
    moved_row = g.value("m", [0.0, 0.001, -0.001], 0.0, 0.01, arms=["plateau"], learning_required=False)
    free = g.value("f", [0.0, 0.001, -0.001], 0.0, 0.01)
    a.gate({
        "bad": ArmHealth("bad", moved=False, trained=False, reasons=["no accepted step"]),
        "plateau": ArmHealth("plateau", moved=True, trained=False, reasons=["test error not below trivial"]),
    })
    assert row.verdict == "not evaluable" and "bad not trained" in row.reason
    assert moved_row.verdict == "holds"  # a claim about not learning only needs the arm to have moved
    assert free.verdict == "holds"
    assert g.verdict == "holds"  # the evaluable rows hold
    a2 = Analysis()
    only = a2.group("g", "s")
    only.value("r", [0.0, 0.001], 0.0, 0.01, arms=["bad"])
    a2.gate({"bad": ArmHealth("bad", False, False, ["x"])})
    assert only.verdict == "not evaluable"


def test_claim_to_dict_round_trip_fields():
    c = _value([0.0, 0.001, -0.001], unit=" nats", arms=["a"])
    d = c.to_dict()
    assert d["verdict"] == "holds" and d["holds"] is True and d["arms"] == ["a"] and d["n"] == 3
    assert d["interval"][0] < 0 < d["interval"][1]
    assert isinstance(Claim, type)

"""The statistics behind every verdict, against scipy and against their own definitions: Student-t,
Welch and paired intervals, Wilson's interval, the p-value that ranks a failing row (it must agree
with the interval's decision at every confidence), the exact sign test, Holm's procedure."""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy import stats

from tdlab.claims.stats import (
    Interval,
    difference_interval,
    holm,
    mean_interval,
    p_outside,
    proportion_interval,
    proportion_p_outside,
    sign_test,
)


def test_mean_interval_is_the_student_t_interval():
    x = [0.61, 0.62, 0.64, 0.60]
    iv = mean_interval(x, 0.95)
    m, se = np.mean(x), np.std(x, ddof=1) / 2
    h = stats.t.ppf(0.975, 3) * se
    assert iv.center == pytest.approx(m) and (iv.lo, iv.hi) == pytest.approx((m - h, m + h))
    assert iv.n == 4 and iv.df == 3 and iv.se == pytest.approx(se)


def test_mean_interval_one_member_is_unbounded_unless_deterministic():
    assert mean_interval([0.5]).lo == -math.inf and mean_interval([0.5]).hi == math.inf
    assert (mean_interval([0.5], deterministic=True).lo, mean_interval([0.5], deterministic=True).hi) == (0.5, 0.5)
    assert math.isnan(mean_interval([0.1, float("nan")]).center)


def test_extra_error_and_resolution_widen_the_interval():
    x = [1.0, 1.2, 0.9, 1.1]
    base = mean_interval(x)
    mc = mean_interval(x, extra_se=0.05)
    se = math.sqrt(np.var(x, ddof=1) / 4 + 0.05**2)
    assert mc.half_width == pytest.approx(stats.t.ppf(0.975, 3) * se)
    res = mean_interval(x, widen=0.5)
    assert res.half_width == pytest.approx(base.half_width + 0.5)
    # a deterministic value with a resolution is an interval, never a point
    det = mean_interval([3.0], deterministic=True, widen=0.25)
    assert (det.lo, det.hi) == (2.75, 3.25)
    mcd = mean_interval([3.0], deterministic=True, extra_se=0.1)
    assert mcd.half_width == pytest.approx(stats.norm.ppf(0.975) * 0.1)


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


def test_difference_interval_paired_and_welch():
    a, b = [1.0, 1.2, 0.9, 1.1], [0.5, 0.8, 0.45, 0.55]
    paired = difference_interval(a, b, paired=True)
    d = np.subtract(a, b)
    h = stats.t.ppf(0.975, 3) * np.std(d, ddof=1) / 2
    assert (paired.lo, paired.hi) == pytest.approx((d.mean() - h, d.mean() + h))
    welch = difference_interval(a, b)
    ref = stats.ttest_ind(a, b, equal_var=False).confidence_interval(0.95)
    assert (welch.lo, welch.hi) == pytest.approx((ref.low, ref.high))
    with pytest.raises(ValueError):
        difference_interval([1.0], [1.0, 2.0], paired=True)


def test_zero_spread_difference_is_its_resolution_bound():
    iv = difference_interval([300.0] * 3, [400.0] * 3, paired=True, widen=100.0)
    assert (iv.lo, iv.hi) == (-200.0, 0.0) and iv.se == 0.0


@pytest.mark.parametrize("confidence", [0.8, 0.9, 0.95, 0.99])
def test_p_outside_agrees_with_the_interval_decision(confidence):
    """A row fails at confidence c exactly when p_outside < 1 − c, for every kind of interval."""
    rng = np.random.default_rng(1)
    for _ in range(400):
        n = int(rng.integers(2, 9))
        x = rng.normal(rng.normal(0, 1), rng.uniform(0.01, 1), size=n).tolist()
        widen = float(rng.choice([0.0, 0.1]))
        extra = float(rng.choice([0.0, 0.05]))
        lo, hi = sorted(rng.normal(0, 1, size=2))
        iv = mean_interval(x, confidence, extra_se=extra, widen=widen)
        outside = iv.hi < lo or iv.lo > hi
        p = p_outside(mean_interval(x, 0.95, extra_se=extra, widen=widen), lo, hi)
        if not math.isclose(p, 1 - confidence, rel_tol=1e-9):
            assert outside == (p < 1 - confidence), (x, lo, hi, p)


def test_p_outside_edge_cases():
    det = Interval(2.0, 2.0, 2.0, 1)
    assert p_outside(det, 0.0, 1.0) == 0.0 and p_outside(det, 0.0, 3.0) == 1.0
    assert p_outside(Interval(1.4, 0.9, 1.9, 1, widen=0.5), 0.0, 1.0) == 1.0  # within its resolution of the region
    assert p_outside(Interval(2.0, 1.5, 2.5, 1, widen=0.5), 0.0, 1.0) == 0.0  # beyond it
    assert p_outside(Interval(math.nan, math.nan, math.nan, 0), 0.0, 1.0) == 0.0


def test_proportion_p_outside_inverts_wilson():
    for k, n in [(40, 50), (45, 50), (50, 50), (10, 200)]:
        iv = proportion_interval([1.0] * k + [0.0] * (n - k))
        for lo in (0.85, 0.9, 0.95):
            p = proportion_p_outside(k, n, lo, 1.0)
            assert (iv.hi < lo) == (p < 0.05), (k, n, lo, p)


def test_min_sign_members_is_the_first_count_whose_best_p_is_below_alpha():
    from tdlab.claims.stats import min_sign_members

    assert [min_sign_members(a) for a in (0.5, 0.25, 0.05, 0.0125)] == [3, 4, 6, 8]
    for a in (0.05, 0.0125, 0.001):
        n = min_sign_members(a)
        assert (
            sign_test([1.0] * n, [2.0] * n, 0.0, "gt").p_hold
            < a
            <= sign_test([1.0] * (n - 1), [2.0] * (n - 1), 0.0, "gt").p_hold
        )


def test_sign_test_is_the_exact_binomial_tail():
    t = sign_test([1.0, 2.0, 3.0], [5.0, 6.0, 7.0], 0.0, "gt")
    assert (t.n_for, t.n_against) == (3, 0) and t.p_hold == pytest.approx(0.25)  # 2 · (1/2)^3
    assert t.p_hold == pytest.approx(stats.binomtest(3, 3, 0.5).pvalue)
    six = sign_test([1.0] * 6, [2.0] * 6, 0.0, "gt")
    assert six.p_hold == pytest.approx(2 / 64)
    # members whose bounds straddle the margin count for neither side
    mixed = sign_test([-1.0, 1.0, -1.0, 2.0], [1.0, 3.0, 0.0, 4.0], 0.0, "gt")
    assert (mixed.n_for, mixed.n_against) == (2, 1)
    lt = sign_test([-5.0, -4.0], [-1.0, 0.5], 0.5, "lt")  # below −0.5: member 0 for; member 1 straddles
    assert (lt.n_for, lt.n_against) == (1, 0)
    nothing = sign_test([-math.inf] * 3, [math.inf] * 3, 0.0, "gt")
    assert nothing.p_hold == 1.0 and nothing.p_fail == 1.0


def test_holm_against_its_definition():
    p = [0.01, 0.04, 0.03, 0.005]
    assert holm(p, 0.05) == [True, False, False, True]  # 0.005 < .0125, 0.01 < .0167, 0.03 ≥ .025 stops
    assert holm([0.001, 0.001, 0.001], 0.05) == [True] * 3
    assert holm([], 0.05) == []
    assert holm([0.049], 0.05) == [True]

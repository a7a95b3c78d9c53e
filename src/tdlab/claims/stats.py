"""The statistics the claims layer decides with: intervals of a mean, a proportion and a difference,
exact tests for paired directions on discrete or censored values, and Holm's step-down correction.

Every decision is two-sided at ``confidence`` (95 % by default): an interval that lies wholly inside
the region a claim allows *holds*, wholly outside *fails*. Each interval comes with the p-value of the
same decision (:func:`p_outside`), so a group of many rows can control its family-wise error
(:func:`holm`) without changing what one row means.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from scipy import stats

__all__ = [
    "Interval",
    "SignTest",
    "difference_interval",
    "holm",
    "mean_interval",
    "min_sign_members",
    "p_outside",
    "proportion_interval",
    "proportion_p_outside",
    "region",
    "sign_test",
    "t_quantile",
]


@dataclass(frozen=True)
class Interval:
    """A two-sided confidence interval ``[lo, hi]`` around ``center`` from ``n`` values.

    ``se`` and ``df`` are the standard error and degrees of freedom behind it (``se = 0`` for a
    deterministic value; ``df = inf`` for a normal interval); ``widen`` is the part of the half-width
    that comes from the measurement's resolution (a bound, not a standard error).
    """

    center: float
    lo: float
    hi: float
    n: int
    se: float = 0.0
    df: float = math.inf
    widen: float = 0.0

    @property
    def half_width(self) -> float:
        return (self.hi - self.lo) / 2


NAN_INTERVAL = Interval(math.nan, math.nan, math.nan, 0)


def _floats(values: Iterable[float]) -> list[float]:
    return [float(v) for v in values]


def region(relation: str, expected: float, tol: float) -> tuple[float, float]:
    """The values a value claim accepts: ``(lo, hi)`` for ``close`` (expected ± tol), ``le`` and ``ge``."""
    return {
        "close": (expected - tol, expected + tol),
        "le": (-math.inf, expected + tol),
        "ge": (expected - tol, math.inf),
    }[relation]


def t_quantile(confidence: float, df: float) -> float:
    """The two-sided Student-t quantile of a ``confidence`` interval with ``df`` degrees of freedom (the
    normal's for ``df = inf``): the half-width of a mean's interval in standard errors."""
    q = 0.5 + confidence / 2
    return float(stats.norm.ppf(q)) if math.isinf(df) else float(stats.t.ppf(q, df))


def mean_interval(
    values: Sequence[float],
    confidence: float = 0.95,
    deterministic: bool = False,
    *,
    extra_se: float = 0.0,
    widen: float = 0.0,
) -> Interval:
    """Student-t interval of the mean of ``values`` (members are independent seeds).

    Args:
        deterministic: the values carry no seed noise (closed forms, exact enumerations): the interval
            is their min–max range (a point for one value), plus ``extra_se`` and ``widen``.
        extra_se: a standard error added in quadrature to the members' (a Monte-Carlo reference's,
            a random map's); the degrees of freedom stay the members' (conservative).
        widen: added to both ends: the measurement's resolution bound (half an evaluation interval,
            half a grid cell), so a discrete value never gives a zero-width interval.

    One value with ``deterministic=False`` has no known spread: the interval is infinite. Non-finite
    values give NaNs, which no relation accepts.
    """
    v = _floats(values)
    n = len(v)
    if n == 0 or not all(math.isfinite(x) for x in v) or not math.isfinite(extra_se):
        return Interval(math.nan, math.nan, math.nan, n)
    m = statistics.fmean(v)
    if deterministic:
        h = t_quantile(confidence, math.inf) * extra_se
        return Interval(m, min(v) - h - widen, max(v) + h + widen, n, extra_se, math.inf, widen)
    if n < 2:
        return Interval(m, -math.inf, math.inf, n, math.inf, 0.0, widen)
    se = math.sqrt(statistics.variance(v) / n + extra_se**2)
    h = t_quantile(confidence, n - 1) * se
    return Interval(m, m - h - widen, m + h + widen, n, se, n - 1, widen)


def proportion_interval(indicators: Sequence[float], confidence: float = 0.95) -> Interval:
    """Wilson score interval of a proportion from 0/1 ``indicators`` (e.g. "this initial point ends in
    the predicted basin"). It does not collapse to a point when every indicator agrees: 10⁴ successes
    out of 10⁴ give [0.9996, 1] at 95 %."""
    v = _floats(indicators)
    n = len(v)
    if n == 0 or not all(x in (0.0, 1.0) for x in v):
        return Interval(math.nan, math.nan, math.nan, n)
    p = sum(v) / n
    z = t_quantile(confidence, math.inf)
    denom = 1 + z * z / n
    center = (p + z * z / (2 * n)) / denom
    h = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / denom
    return Interval(p, max(0.0, center - h), min(1.0, center + h), n, math.sqrt(max(p * (1 - p), 0.0) / n))


def difference_interval(
    a: Sequence[float], b: Sequence[float], paired: bool = False, confidence: float = 0.95, *, widen: float = 0.0
) -> Interval:
    """Interval of ``mean(a) − mean(b)``: paired t over members (same seeds in both arms), or Welch.

    Identical samples with zero spread give a zero-width interval at the observed difference, widened
    by ``widen`` (the difference's resolution bound).
    """
    a, b = _floats(a), _floats(b)
    if not a or not b or not all(math.isfinite(x) for x in a + b):
        return Interval(math.nan, math.nan, math.nan, min(len(a), len(b)))
    if paired:
        if len(a) != len(b):
            raise ValueError(f"paired comparison needs equal member counts, got {len(a)} and {len(b)}")
        d = [x - y for x, y in zip(a, b, strict=True)]
        if statistics.pvariance(d) == 0.0:
            c = statistics.fmean(d)
            return Interval(c, c - widen, c + widen, len(d), 0.0, math.inf, widen)
        return mean_interval(d, confidence, widen=widen)
    na, nb = len(a), len(b)
    gap = statistics.fmean(a) - statistics.fmean(b)
    if na < 2 or nb < 2:
        return Interval(gap, -math.inf, math.inf, min(na, nb), math.inf, 0.0, widen)
    va, vb = statistics.variance(a) / na, statistics.variance(b) / nb
    se = math.sqrt(va + vb)
    if se == 0.0:
        return Interval(gap, gap - widen, gap + widen, min(na, nb), 0.0, math.inf, widen)
    df = (va + vb) ** 2 / (va**2 / (na - 1) + vb**2 / (nb - 1))  # Welch–Satterthwaite
    h = t_quantile(confidence, df) * se
    return Interval(gap, gap - h - widen, gap + h + widen, min(na, nb), se, df, widen)


def p_outside(iv: Interval, lo: float, hi: float) -> float:
    """The p-value of "the true value lies in ``[lo, hi]``" behind interval ``iv``: the smallest
    ``1 − confidence`` at which ``iv`` (same centre, se, df and resolution bound) lies wholly outside.

    An interval at confidence ``c`` lies outside exactly when this p is below ``1 − c``, so it ranks
    failing rows on the scale the row was decided on. 1 when the centre lies inside; 0 for a
    deterministic value outside (beyond its resolution bound).
    """
    if math.isnan(iv.center):
        return 0.0
    dist = max(lo - iv.center, iv.center - hi, 0.0) - iv.widen
    if dist <= 0:
        return 1.0
    if iv.se == 0.0:
        return 0.0
    if math.isinf(iv.se) or iv.df <= 0:
        return 1.0
    cdf = stats.norm.cdf(dist / iv.se) if math.isinf(iv.df) else stats.t.cdf(dist / iv.se, iv.df)
    return float(min(1.0, 2 * (1 - cdf)))


def proportion_p_outside(successes: int, n: int, lo: float, hi: float) -> float:
    """Score-test p-value of "the proportion lies in ``[lo, hi]``" (the test Wilson's interval
    inverts): 2·(1 − Φ(|p̂ − p₀| / √(p₀(1 − p₀)/n))) at the nearer edge p₀; 1 when p̂ lies inside."""
    if n == 0:
        return 0.0
    p = successes / n
    if lo <= p <= hi:
        return 1.0
    p0 = lo if p < lo else hi
    if p0 <= 0.0 or p0 >= 1.0:
        return 0.0
    z = abs(p - p0) / math.sqrt(p0 * (1 - p0) / n)
    return float(2 * (1 - stats.norm.cdf(z)))


@dataclass(frozen=True)
class SignTest:
    """An exact sign test of a paired direction on members whose differences are known only within
    bounds (discrete or censored measurements).

    ``n`` members; ``n_for`` whose difference lies beyond the margin on the claimed side for every value
    its bounds allow, ``n_against`` on the other side (or at the margin) for every such value; the rest
    are undetermined and count for neither. ``p_hold`` and ``p_fail`` are two-sided-equivalent
    (twice the one-sided binomial tail), on the same scale as :func:`p_outside`.
    """

    n: int
    n_for: int
    n_against: int
    p_hold: float
    p_fail: float


def sign_test(lower: Sequence[float], upper: Sequence[float], margin: float, direction: str) -> SignTest:
    """Exact sign test of ``difference > margin`` (``direction="gt"``) or ``< −margin`` (``"lt"``), each
    member's difference known to lie in ``[lower_i, upper_i]`` (±inf for a censored side)."""
    n = len(lower)
    if direction == "gt":
        n_for = sum(lo > margin for lo in lower)
        n_against = sum(up <= margin for up in upper)
    else:
        n_for = sum(up < -margin for up in upper)
        n_against = sum(lo >= -margin for lo in lower)

    def tail(k: int) -> float:
        return 1.0 if k == 0 else float(min(1.0, 2 * stats.binom.sf(k - 1, n, 0.5)))

    return SignTest(n, n_for, n_against, tail(n_for), tail(n_against))


def min_sign_members(alpha: float) -> int:
    """The fewest members on which an exact sign test (:func:`sign_test`) can reach ``p < alpha`` at all:
    with every member on one side, ``p = 2 · 0.5^n`` (3 members: 0.25; 5: 0.0625; 6: 0.031)."""
    n = 1
    while 2 * 0.5**n >= alpha:
        n += 1
    return n


def holm(p_values: Sequence[float], alpha: float) -> list[bool]:
    """Holm's step-down procedure: which of the hypotheses are rejected with the family-wise error
    kept at ``alpha`` (sorted p₍ᵢ₎ rejected while p₍ᵢ₎ < α / (m − i + 1))."""
    m = len(p_values)
    order = sorted(range(m), key=lambda i: p_values[i])
    rejected = [False] * m
    for rank, i in enumerate(order):
        if p_values[i] < alpha / (m - rank):
            rejected[i] = True
        else:
            break
    return rejected

"""Claims: the verdict is computed from measured vs expected under the stated relation."""

from __future__ import annotations

import math
import statistics

import pytest

from tdlab.claims import check


@pytest.mark.parametrize(
    "relation, measured, per_member",
    [
        ("close", [1.0, 1.05, 0.95, 1.11, 0.89], [True, True, True, False, False]),
        ("le", [0.5, 1.15, 1.09, 1.2], [True, False, True, False]),
        ("ge", [1.5, 0.85, 0.91, 0.8], [True, False, True, False]),
    ],
)
def test_relations_per_member(relation, measured, per_member):
    c = check("x", "s", measured, expected=1.0, tolerance=0.1, relation=relation)
    assert c.per_member == per_member
    assert c.n_hold == sum(per_member)
    assert c.holds is all(per_member)


def test_tolerance_boundary_is_inclusive():
    assert check("x", "s", [1.5], 1.0, 0.5).holds
    assert check("x", "s", [0.5], 1.0, 0.5, "ge").holds
    assert check("x", "s", [1.5], 1.0, 0.5, "le").holds
    assert not check("x", "s", [1.5000001], 1.0, 0.5).holds


@pytest.mark.parametrize(
    "n_ok, n, frac, holds",
    [(3, 3, 1.0, True), (2, 3, 1.0, False), (2, 3, 2 / 3, True), (2, 3, 0.67, False),
     (1, 3, 0.33, True), (1, 3, 0.34, False), (1, 2, 0.5, True), (0, 2, 0.5, False), (3, 5, 0.6, True), (2, 5, 0.6, False)],
)
def test_min_fraction(n_ok, n, frac, holds):
    measured = [0.0] * n_ok + [10.0] * (n - n_ok)
    c = check("x", "s", measured, 0.0, 0.1, "close", min_fraction=frac)
    assert c.n_hold == n_ok
    assert c.holds is holds
    assert c.verdict == ("holds" if holds else "fails")


@pytest.mark.parametrize("bad", [math.nan, math.inf, -math.inf])
@pytest.mark.parametrize("relation", ["close", "le", "ge"])
def test_non_finite_measurement_never_satisfies(bad, relation):
    c = check("x", "s", [1.0, bad], 1.0, 0.5, relation, min_fraction=1.0)
    assert c.per_member == [True, False]
    assert not c.holds
    # Even a lenient min_fraction only counts the finite member.
    assert check("x", "s", [bad, bad], 1.0, 0.5, relation, min_fraction=0.5).holds is False


@pytest.mark.parametrize("bad", [math.nan, math.inf])
def test_claim_with_a_non_finite_member_still_reports(bad):
    # A diverged member's NaN/inf must give a failing verdict with a readable summary, not a crash.
    c = check("x", "s", [0.6, bad, 0.7], 0.65, 0.1)
    assert c.per_member == [True, False, True] and not c.holds
    assert not math.isfinite(c.mean) and not math.isfinite(c.std)
    d = c.to_dict()
    assert d["verdict"] == "fails" and d["n_hold"] == 2
    assert c.describe().startswith("[FAILS] x")


def test_no_measurement_fails():
    c = check("x", "s", [], 1.0, 0.5)
    assert not c.holds and c.verdict == "fails" and math.isnan(c.mean)


def test_summary_statistics_and_dict():
    vals = [0.62, 0.64, 0.70]
    c = check("sec2/x", "statement", vals, 0.65, 0.04, "close", unit=" nats")
    assert c.mean == pytest.approx(statistics.fmean(vals))
    assert c.std == pytest.approx(statistics.pstdev(vals))
    d = c.to_dict()
    assert d["expected"] == 0.65 and d["measured"] == vals and d["per_member"] == [True, True, False]
    assert d["holds"] is False and d["verdict"] == "fails" and d["n_hold"] == 2
    assert (d["min"], d["max"]) == (0.62, 0.70)
    line = c.describe()
    assert line.startswith("[FAILS] sec2/x") and "≈ expected 0.6500" in line and "2/3 members" in line


def test_verdict_is_computed_not_passed():
    # Inputs are coerced to float and the verdict follows them, whatever the caller believes.
    c = check("x", "s", ["0.5"], "0.4", "0.2")
    assert c.measured == [0.5] and c.expected == 0.4 and c.holds

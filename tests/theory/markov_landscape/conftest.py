"""The chains the landscape checks run on: two on each side of p + q = 1, where Thms. 1, 2 and 8 differ."""

from __future__ import annotations

import pytest

SIDES = [(0.2, 0.3), (0.7, 0.8), (0.1, 0.6), (0.85, 0.4)]  # p+q < 1, > 1, < 1, > 1


@pytest.fixture
def sides() -> list[tuple[float, float]]:
    """All four chains ``(p, q)``, for checks that loop over them."""
    return SIDES


@pytest.fixture(params=SIDES, ids=[f"{p}-{q}" for p, q in SIDES])
def side(request: pytest.FixtureRequest) -> tuple[float, float]:
    """One chain ``(p, q)`` per test instance."""
    return request.param

"""Fixtures shared by the experiments' tests."""

from __future__ import annotations

import pytest


@pytest.fixture
def at_seed_length(monkeypatch):
    """``at_seed_length(cls)``: read the planted runs of experiment class ``cls`` as runs of the seed's own
    training length. A planted run that violates a claim at the seed's budget is short (a few steps), and the
    budget rule lets a fail from a shorter run wait for the seed's length; a test that shows a claim *can*
    fail reads the run as the seed's."""

    def patch(cls: type) -> None:
        monkeypatch.setattr(cls, "lengths", lambda self, cfg: (1.0, 1.0))

    return patch

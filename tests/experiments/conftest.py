"""Fixtures shared by the experiments' tests."""

from __future__ import annotations

import pytest


@pytest.fixture
def at_paper_length(monkeypatch):
    """``at_paper_length(cls)``: read the planted runs of experiment class ``cls`` as runs of the seed's own
    training length. A planted run that violates a claim at the seed's budget is short (a few steps), and the
    budget rule lets a fail from a shorter run wait for the seed's length; a test that shows a claim *can*
    fail reads the run as the seed's."""

    import tdlab.experiments.base as base

    def patch(cls: type) -> None:
        real = base.lengths
        monkeypatch.setattr(base, "lengths", lambda exp, cfg: (1.0, 1.0) if isinstance(exp, cls) else real(exp, cfg))

    return patch


@pytest.fixture
def stored_fits():
    """``stored_fits(run)``: the arms a run stored final parameters for (``arrays/ARM.safetensors``, ``/`` stored
    as ``__``), as the stored names; what ``Experiment.fit_arms`` declares is compared with it, so that a stopped
    run's progress (``tdlab.runs.staged_done``) counts the fits it trains."""

    def arms(run) -> set[str]:
        return {f.stem for f in (run.path / "arrays").glob("*.safetensors") if "@" not in f.stem}

    return arms

"""The training-health gate's facts and end drift, measured in learning-rate time."""

from __future__ import annotations

import numpy as np
import pytest

from tdlab.claims import assess_arm, end_drift


def test_assess_arm_reasons():
    ok = assess_arm(
        "a", [0.69, 0.69], [0.62, 0.63], accepted_steps=[100, 100], test_error=[0.62, 0.63], trivial_error=0.6931
    )
    assert ok.trained and ok.moved and ok.status == "trained"
    stuck = assess_arm("b", [3e11, 3e11], [3e11, 3e11], accepted_steps=[0, 0])  # a full-matrix arm at σ = 0.1
    assert not stuck.moved and any("no accepted step" in r for r in stuck.reasons)
    assert any("not below the initial" in r for r in stuck.reasons)
    nan = assess_arm("c", [0.7], [float("nan")])
    assert not nan.moved and "non-finite values" in nan.reasons
    plateau = assess_arm("d", [0.70, 0.70], [0.69, 0.695], test_error=[0.69, 0.695], trivial_error=0.6931)
    assert plateau.moved and not plateau.trained and plateau.status == "moved, not learned"
    assert plateau.to_dict()["status"] == "moved, not learned"


def test_end_drift_is_the_fitted_change_over_the_last_tenth_of_steps():
    steps = np.arange(0, 1001, 10)
    values = np.vstack([1.0 - 1e-4 * steps, 2.0 - 3e-4 * steps])  # slopes −1e-4, −3e-4
    assert end_drift(steps, values) == pytest.approx(-2e-4 * 100)
    assert np.isnan(end_drift([0], [[1.0]]))


def test_end_drift_in_learning_rate_time_sees_a_curve_the_annealed_tail_hides():
    """Under a cosine schedule a loss that follows the learning-rate integral looks flat over the last
    tenth of the steps but not over the last tenth of the rate's integral."""
    T = 1000
    steps = np.arange(0, T + 1, 10)
    lr = 0.5 * (1 + np.cos(np.pi * steps / T))
    clock = np.concatenate([[0.0], np.cumsum(np.diff(steps) * (lr[1:] + lr[:-1]) / 2)])
    loss = 1.0 - 0.5 * clock / clock[-1]  # falls in proportion to how far the optimiser has moved
    in_steps = end_drift(steps, loss[None, :])
    in_lr = end_drift(steps, loss[None, :], lr_steps=steps, lr=lr)
    assert abs(in_steps) < 0.005  # the last 10 % of steps: ≤ 2.5 % of the peak rate
    assert in_lr < -0.04 and abs(in_lr) > 8 * abs(in_steps)
    # a constant schedule gives the step-time window back
    flat = np.ones_like(steps, dtype=float)
    assert end_drift(steps, loss[None, :], lr_steps=steps, lr=flat) == pytest.approx(in_steps)

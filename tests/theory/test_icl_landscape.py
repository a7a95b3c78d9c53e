"""Reading seed 002's Monte-Carlo loss maps: the delete-a-group jackknife of a mean is its textbook standard
error; the valley of a parabolic log-loss is its vertex."""

from __future__ import annotations

import numpy as np
import pytest

from tdlab.theory.icl_landscape import jackknife_se, leave_out, pooled, valley


def test_the_jackknife_of_a_mean_is_its_standard_error():
    rng = np.random.default_rng(0)
    groups = rng.normal(size=(8, 3, 4))
    sizes = np.full(8, 25.0)
    assert pooled(groups, sizes) == pytest.approx(groups.mean(0))
    assert leave_out(groups, sizes)[2] == pytest.approx(np.delete(groups, 2, 0).mean(0))
    se = jackknife_se(lambda m: float(m[1, 2]), groups, sizes)
    assert se == pytest.approx(groups[:, 1, 2].std(ddof=1) / np.sqrt(8), rel=1e-12)


def test_the_valley_of_a_parabolic_log_loss_is_its_vertex():
    a_ax, b_ax = np.linspace(-1.0, 1.0, 21), np.linspace(-0.5, 0.5, 5)
    centre = 0.3 - 0.4 * b_ax  # off the grid points: the parabola refines it exactly
    loss = np.exp((a_ax[:, None] - centre[None]) ** 2)
    np.testing.assert_allclose(valley(a_ax, b_ax, loss, b_ax), centre, atol=1e-12)

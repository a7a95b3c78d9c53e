"""Reading seed 002's Monte-Carlo loss maps: the prompts' groups are contiguous and near-equal, their means those
of a slow loop; the delete-a-group jackknife of a mean is its textbook standard error; the valley of a parabolic
log-loss is its vertex."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from tdlab.theory.icl_landscape import (
    grid_simplex,
    group_means,
    jackknife_se,
    jackknife_spread,
    leave_out,
    polish_minimum,
    pooled,
    prompt_groups,
    valley,
    valley_rms_between,
)


@pytest.mark.parametrize(("n", "G"), [(1000, 8), (997, 16), (5, 5)])
def test_prompt_groups_are_contiguous_and_near_equal_and_their_means_are_a_loops(n, G):
    gid, sizes = prompt_groups(n, G)
    assert gid.shape == (n,) and sizes.dtype == torch.float64 and float(sizes.sum()) == n
    assert torch.all(gid[1:] >= gid[:-1]) and set(gid.tolist()) == set(range(G))  # contiguous blocks, none empty
    assert float(sizes.max() - sizes.min()) <= 1.0
    values = torch.as_tensor(np.random.default_rng(n).standard_exponential((3, n)))
    got = group_means(values, gid, sizes)
    assert got.shape == (G, 3)
    for g in range(G):
        members = [i for i in range(n) if i * G // n == g]
        assert got[g] == pytest.approx(values[:, members].mean(1).numpy(), rel=1e-12)
    # the size-weighted mean of the group means is the mean over every prompt
    assert pooled(got, sizes.numpy()) == pytest.approx(values.mean(1).numpy(), rel=1e-12)


def test_the_jackknife_spread_of_leave_one_out_means_is_the_standard_error():
    x = np.random.default_rng(1).normal(size=10)
    loo = (x.sum() - x) / (x.size - 1)
    assert jackknife_spread(loo) == pytest.approx(x.std(ddof=1) / np.sqrt(x.size), rel=1e-12)
    assert jackknife_spread(list(loo)) == jackknife_spread(loo)
    assert jackknife_spread([2.0, 2.0, 2.0]) == 0.0


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


def test_grid_simplex_is_the_argmin_cell_and_its_upper_neighbours():
    a_ax, b_ax = np.linspace(-1.0, 1.0, 11), np.linspace(0.0, 3.0, 7)
    loss = (a_ax[:, None] - 0.4) ** 2 + (b_ax[None, :] - 2.0) ** 2
    loss[0, 0] = np.nan  # NaN cells are skipped
    i, j, start = grid_simplex(a_ax, b_ax, loss)
    assert (i, j) == (7, 4) and np.isclose(a_ax[i], 0.4) and np.isclose(b_ax[j], 2.0)
    np.testing.assert_allclose(start, [[0.4, 2.0], [0.6, 2.0], [0.4, 2.5]], atol=1e-12)


def test_polish_minimum_finds_a_quadratics_vertex_off_the_grid():
    """A tilted quadratic valley (long along alpha = -beta, like Fig. 4's): Nelder-Mead from the grid simplex ends
    at the vertex, far below the grid's resolution, and reports the loss there."""

    def f(v: np.ndarray) -> float:
        x, y = v[0] - 0.123, v[1] + 0.456
        return float((x + y) ** 2 / 100 + (x - y) ** 2 + 0.5)

    a_ax, b_ax = np.linspace(-1.0, 1.0, 9), np.linspace(-1.0, 1.0, 9)
    grid = np.array([[f(np.array([a, b])) for b in b_ax] for a in a_ax])
    _, _, start = grid_simplex(a_ax, b_ax, grid)
    got = polish_minimum(f, start, 2000)
    assert got.shape == (3,)
    np.testing.assert_allclose(got[:2], [0.123, -0.456], atol=1e-5)
    assert abs(got[2] - 0.5) < 1e-10


def test_valley_rms_between_two_planted_valleys_and_its_jackknife_by_a_loop():
    """Two maps whose group valleys are the lines alpha = c - beta + d_g: the RMS between the pooled valleys is the
    offset of their lines, and the standard error is the two maps' delete-a-group jackknives (by a slow loop over
    groups) in quadrature."""
    rng = np.random.default_rng(3)
    a_ax, b_ax = np.linspace(-0.5, 0.5, 41), np.linspace(-0.4, 0.0, 21)
    betas = np.linspace(-0.3, -0.05, 9)

    def planted(c: float, G: int) -> dict:
        shifts = rng.normal(0.0, 0.004, G)
        groups = np.stack([np.exp(50.0 * (a_ax[:, None] + b_ax[None, :] - c - d) ** 2) for d in shifts])
        sizes = rng.integers(80, 120, G).astype(float)
        return {
            "a_ax": a_ax,
            "b_ax": b_ax,
            "beta": betas,
            "valley": valley(a_ax, b_ax, pooled(groups, sizes), betas),
            "groups": groups,
            "sizes": sizes,
        }

    v, o = planted(0.03, 6), planted(0.0, 8)
    rms, se = valley_rms_between(v, o)
    assert abs(rms - 0.03) < 0.005

    def loop_se(vary: dict, fixed: dict, moving_is_v: bool) -> float:
        thetas = []
        G = vary["sizes"].size
        for g in range(G):
            keep = [h for h in range(G) if h != g]
            mp = sum(vary["sizes"][h] * vary["groups"][h] for h in keep) / vary["sizes"][keep].sum()
            val = valley(vary["a_ax"], vary["b_ax"], mp, vary["beta"])
            if moving_is_v:
                ref = np.interp(vary["beta"], fixed["beta"], fixed["valley"])
                thetas.append(np.sqrt(np.mean((val - ref) ** 2)))
            else:
                ref = np.interp(fixed["beta"], vary["beta"], val)
                thetas.append(np.sqrt(np.mean((fixed["valley"] - ref) ** 2)))
        t = np.array(thetas)
        return float(np.sqrt((G - 1) / G * np.sum((t - t.mean()) ** 2)))

    want = np.hypot(loop_se(v, o, True), loop_se(o, v, False))
    assert se > 0 and np.isclose(se, want, rtol=1e-9)

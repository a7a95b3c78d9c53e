"""Reading seed 002's Monte-Carlo loss maps: the prompts' groups are contiguous and near-equal, their means those
of a slow loop; the delete-a-group jackknife of a mean is its textbook standard error; the valley of a parabolic
log-loss is its vertex."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from tdlab.theory.icl_landscape import (
    group_means,
    jackknife_se,
    jackknife_spread,
    leave_out,
    pooled,
    prompt_groups,
    valley,
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

"""Checks of the generic batched gradient-flow integrator (tdlab.theory.gradient_flow) against exact solutions."""

from __future__ import annotations

import math

import pytest
import torch

from tdlab.theory.gradient_flow import autograd_gradient, check_gradients, gradient_flow

F64 = torch.float64


def _quad_grad(x: torch.Tensor, lam: torch.Tensor) -> torch.Tensor:
    """Gradient of L(x) = 1/2 sum_j lam_j x_j^2 with per-row curvatures lam (N, D)."""
    return lam * x


def _quad_loss(x: torch.Tensor, lam: torch.Tensor) -> torch.Tensor:
    return 0.5 * (lam * x * x).sum(dim=-1)


def _rotated_problem(n: int, g: torch.Generator):
    """Per-row SPD Hessians H = R diag(lam) R^T (coupled coordinates), exact flow x(t) = expm(-tH) x0."""
    ang = 2 * math.pi * torch.rand(n, generator=g, dtype=F64)
    c, s = torch.cos(ang), torch.sin(ang)
    R = torch.stack([torch.stack([c, -s], -1), torch.stack([s, c], -1)], -2)  # (n, 2, 2)
    lam = torch.exp(torch.empty(n, 2, dtype=F64).uniform_(math.log(0.05), math.log(5.0), generator=g))
    H = R @ torch.diag_embed(lam) @ R.transpose(-1, -2)
    x0 = torch.randn(n, 2, generator=g, dtype=F64)

    def grad(x: torch.Tensor, Hm: torch.Tensor) -> torch.Tensor:
        return torch.einsum("nij,nj->ni", Hm, x)

    def exact(t: float) -> torch.Tensor:
        return torch.einsum("nij,nj->ni", torch.linalg.matrix_exp(-t * H), x0)

    return grad, H, x0, exact


@pytest.mark.parametrize(
    "method,opts,tol",
    [
        ("rk4", {"dt": 0.01}, 1e-7),
        ("dopri5", {"rtol": 1e-9, "atol": 1e-12}, 1e-7),
        ("rosenbrock23", {"rtol": 1e-6, "atol": 1e-9}, 1e-4),
    ],
)
def test_linear_flow_matches_matrix_exponential(method, opts, tol):
    g = torch.Generator().manual_seed(0)
    grad, H, x0, exact = _rotated_problem(300, g)
    t_eval = [0.0, 0.5, 2.0, 2.0, 7.0]  # includes t = 0 and a repeated save time
    res = gradient_flow(grad, x0, t_eval, args=(H,), method=method, **opts)
    assert res.trajectory.shape == (5, 300, 2)
    assert torch.equal(res.trajectory[0], x0)
    assert bool(res.finished.all())
    for k, t in enumerate(t_eval):
        err = (res.trajectory[k] - exact(t)).abs().max().item()
        assert err < tol, (method, t, err)
    assert torch.equal(res.final, res.trajectory[-1])
    assert res.final_grad_norm.shape == (300,)


def test_per_row_args_follow_rows_through_compaction():
    """Rows with very different rates finish at different iterations; the working set is compacted
    while per-row args are sliced along. Each row must match its own exact solution, and batching
    must not change a row's result (per-row step control)."""
    n = 64
    lam = torch.logspace(-2, 1, n, dtype=F64).unsqueeze(-1).expand(n, 3).contiguous()
    x0 = torch.ones(n, 3, dtype=F64)
    res = gradient_flow(_quad_grad, x0, [1.0, 4.0], args=(lam,), method="dopri5", rtol=1e-10, atol=1e-13)
    exact = x0 * torch.exp(-lam * 4.0)
    assert (res.final - exact).abs().max().item() < 1e-9
    single = gradient_flow(
        _quad_grad, x0[40:41], [1.0, 4.0], args=(lam[40:41],), method="dopri5", rtol=1e-10, atol=1e-13
    )
    assert torch.allclose(single.final, res.final[40:41], rtol=0, atol=1e-15)
    assert res.n_steps[0] < res.n_steps[-1]  # slow rows took fewer steps than fast ones


def test_stiff_rows_rest_with_rosenbrock_but_not_with_explicit_steps():
    """A stiff quadratic (curvature 1e4) converges in ~1e-3 time units. The L-stable method lets it
    come to rest (g_tol) once the transient is resolved to rtol (a few hundred 2nd-order steps) and
    then costs nothing up to t = 10; dopri5 is held at its stability limit (h ~ 3.3e-4) for good,
    > 600 steps for t in [0, 0.3] alone."""
    lam = torch.tensor([[1e4, 1.0]], dtype=F64)
    x0 = torch.tensor([[1.0, 0.0]], dtype=F64)
    ros = gradient_flow(_quad_grad, x0, [10.0], args=(lam,), method="rosenbrock23", rtol=1e-6, atol=1e-9, g_tol=1e-10)
    assert bool(ros.frozen.all()) and bool(ros.finished.all())
    assert ros.final.abs().max().item() < 1e-12
    assert int(ros.n_steps[0]) < 1000
    dp = gradient_flow(_quad_grad, x0, [0.3], args=(lam,), method="dopri5", rtol=1e-6, atol=1e-9, g_tol=1e-10)
    assert int(dp.n_steps[0]) > 600


def test_rest_rows_are_held_for_remaining_save_times():
    lam = torch.tensor([[5.0, 5.0], [0.01, 0.01]], dtype=F64)
    x0 = torch.ones(2, 2, dtype=F64)
    res = gradient_flow(_quad_grad, x0, [1.0, 5.0, 10.0, 20.0], args=(lam,), method="dopri5", g_tol=1e-6)
    assert res.frozen.tolist() == [True, False]
    k = int((res.trajectory[:, 0].norm(dim=-1) > 0).sum())  # rest reached before t = 5
    held = res.trajectory[1:, 0]
    assert torch.equal(held, held[:1].expand_as(held))
    assert held.norm().item() < 1e-6 / 5.0 * 2
    assert k == 4 and bool(res.finished.all())
    assert res.trajectory[-1, 1, 0].item() == pytest.approx(math.exp(-0.2), rel=1e-6)


def test_iteration_budget_leaves_unfinished_rows_marked():
    lam = torch.tensor([[1.0], [1.0]], dtype=F64)
    res = gradient_flow(_quad_grad, torch.ones(2, 1, dtype=F64), [1.0, 100.0], args=(lam,), max_iters=5)
    assert not bool(res.finished.any())
    assert bool(torch.isnan(res.trajectory[-1]).all())
    assert bool((res.final_t < 100.0).all())


def test_autograd_gradient_and_check_gradients():
    g = torch.Generator().manual_seed(1)
    x = torch.randn(50, 4, generator=g, dtype=F64)
    lam = torch.rand(50, 4, generator=g, dtype=F64) + 0.1
    ga = autograd_gradient(_quad_loss)(x, lam)
    assert torch.allclose(ga, lam * x, rtol=1e-15, atol=0)
    ok = check_gradients(_quad_loss, _quad_grad, x, lam)
    assert ok.max_rel < 1e-15
    bad = check_gradients(_quad_loss, lambda y, lam: 1.01 * lam * y, x, lam)
    assert bad.max_rel == pytest.approx(0.01, rel=1e-9)
    # Autograd-driven flow equals closed-form-driven flow.
    r1 = gradient_flow(autograd_gradient(_quad_loss), x, [1.0], args=(lam,), method="rk4", dt=0.05)
    r2 = gradient_flow(_quad_grad, x, [1.0], args=(lam,), method="rk4", dt=0.05)
    assert torch.allclose(r1.final, r2.final, rtol=1e-14, atol=0)


def test_threads_restored_and_bad_inputs_rejected():
    before = torch.get_num_threads()
    gradient_flow(_quad_grad, torch.ones(3, 2, dtype=F64), [1.0], args=(torch.ones(3, 2, dtype=F64),))
    assert torch.get_num_threads() == before
    x = torch.ones(3, 2, dtype=F64)
    with pytest.raises(ValueError):
        gradient_flow(_quad_grad, x, [2.0, 1.0], args=(torch.ones(3, 2),))
    with pytest.raises(ValueError):
        gradient_flow(_quad_grad, x, [1.0], args=(torch.ones(4, 2),))
    with pytest.raises(ValueError):
        gradient_flow(_quad_grad, x, [1.0], args=(torch.ones(3, 2),), method="euler")
    with pytest.raises(ValueError):
        gradient_flow(_quad_grad, torch.ones(3), [1.0])

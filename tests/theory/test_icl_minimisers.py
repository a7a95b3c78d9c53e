"""Seed 002's finite-context minimisers on prompt statistics: the tied and untied predictions against Eq. C.2
written independently in numpy and, bit for bit, against the trainer's prediction path of the LCA model; the
power sum's Taylor branch against the sum itself; descent stays in its basin; the tied minimisers are minima of
the Monte-Carlo l_(L) and tend to alpha*_T at long contexts; the untied optimum is a stationary point of its
loss."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from tdlab.models.linear_attention import LCA
from tdlab.tasks.multimodal import MultiModalPrompts
from tdlab.theory.icl import alpha_star, alpha_star_T
from tdlab.theory.icl_minimisers import (
    SMALL_X,
    descend,
    tied_excess,
    tied_minimisers,
    tied_power_sum,
    tied_predict,
    tied_predict_unit,
    untied_minimiser,
    untied_predict,
)
from tdlab.theory.icl_stats import sample_stats
from tdlab.train.regression import predict

TASK = MultiModalPrompts(dims=(3, 2))
pytestmark = pytest.mark.usefixtures("one_thread")


def _stats(n: int, L: int, seed: int):
    return sample_stats(TASK, [torch.Generator().manual_seed(seed)], n, L)


def _spectral(st) -> tuple[np.ndarray, np.ndarray]:
    """Eigenvalues of Lambda_hat and a_k = (u_k . c)(u_k . x_q), from numpy's eigh."""
    lam, U = np.linalg.eigh(st.gram[0].numpy())
    a = np.einsum("nkd,nd->nk", U.transpose(0, 2, 1), st.c[0].numpy()) * np.einsum(
        "nkd,nd->nk", U.transpose(0, 2, 1), st.x_query[0].numpy()
    )
    return lam, a


def _closed_form(st, T: int, alpha: float, beta: float) -> np.ndarray:
    """Per-prompt (y_hat - y^Bayes)^2 of the tied LCA_T from F_0 = 0, written from Eq. C.2 directly:
    y_hat = sum_k a_k alpha sum_{j<T} (1 + beta lambda_k)^j on the eigen-decomposition of Lambda_hat."""
    lam, a = _spectral(st)
    s = sum((1 + beta * lam) ** j for j in range(T))
    return ((a * alpha * s).sum(-1) - st.bayes[0].numpy()) ** 2


def test_the_tied_excess_is_the_closed_form_of_eq_c2():
    st = _stats(200, 20, 0)
    got = tied_excess(st, 4, [0.1, 0.2], [-0.05, -0.1]).numpy()
    assert got.shape == (2, 200)
    assert got[0] == pytest.approx(_closed_form(st, 4, 0.1, -0.05), rel=1e-9)
    assert tied_excess(st, 4, [0.2])[0].numpy() == pytest.approx(_closed_form(st, 4, 0.2, -0.2), rel=1e-9)
    assert tied_predict_unit(st, 4, [-0.1])[0].numpy() == pytest.approx(
        tied_predict(st, 4, [0.999999999], [-0.1])[0].numpy() / 0.999999999, rel=1e-8
    )


def test_the_tied_power_sum_is_the_sum_on_both_sides_of_its_taylor_switch():
    x = torch.tensor([0.0, 1e-9, -3e-5, 0.5 * SMALL_X, 2 * SMALL_X, -0.01, 0.3], dtype=torch.float64)
    for T in (1, 4, 17):
        want = sum((1 + x) ** j for j in range(T))
        torch.testing.assert_close(tied_power_sum(1 + x, x, T), want, rtol=1e-9, atol=0.0)


def test_the_predictions_are_the_trainers_bit_for_bit():
    """The trainer's prediction path (tdlab.train.regression.predict) of the LCA models with these weights: the
    same numbers, bit for bit, so a minimiser here minimises the objective the arms train on."""
    st = _stats(150, 12, 3)
    alpha, beta = [0.02, 0.1, 3e-5], [-0.05, -1e-6, 0.01]
    for param, b in (("one", None), ("two", beta)):
        model = LCA(TASK.d, 6, [0, 1, 2], param=param, dtype=torch.float64)
        with torch.no_grad():
            model.alpha.copy_(torch.tensor(alpha, dtype=torch.float64))
            if b is not None:
                model.beta.copy_(torch.tensor(b, dtype=torch.float64))
            assert torch.equal(tied_predict(st, 6, alpha, b), predict(model, st))
    untied = LCA(TASK.d, 5, [0, 1], param="untied", alpha0=0.05, dtype=torch.float64)
    with torch.no_grad():
        assert torch.equal(untied_predict(st, untied.alpha, untied.beta), predict(untied, st))


def test_the_untied_prediction_is_eq_c2s_recursion():
    st = _stats(100, 15, 4)
    a_t, b_t = np.array([0.03, 0.05, -0.01]), np.array([-0.04, -0.02, -0.06])
    lam, a = _spectral(st)
    p = np.zeros_like(lam)
    for t in range(3):
        p = p * (1 + b_t[t] * lam) + a_t[t]
    got = untied_predict(st, torch.tensor(a_t)[None], torch.tensor(b_t)[None])
    assert got.shape == (1, 100)
    assert got[0].numpy() == pytest.approx((a * p).sum(-1), rel=1e-9)
    # equal layers: the tied closed form
    same = untied_predict(
        st, torch.full((1, 4), 0.03, dtype=torch.float64), torch.full((1, 4), -0.02, dtype=torch.float64)
    )
    torch.testing.assert_close(same, tied_predict(st, 4, [0.03], [-0.02]), rtol=1e-12, atol=1e-15)


def test_descent_stays_in_the_basin_it_starts_in():
    def f(xs):  # minima near -1 (the global one) and +1
        xs = np.asarray(xs, dtype=float)
        return (xs**2 - 1) ** 2 + 0.3 * xs

    right, left = descend(f, -2.0, 2.0, 1.5), descend(f, -2.0, 2.0, -1.5)
    # the stationary points solve 4x^3 - 4x + 0.3 = 0
    roots = np.sort(np.roots([4.0, 0.0, -4.0, 0.3]).real)
    assert right == pytest.approx(roots[2], abs=1e-7) and left == pytest.approx(roots[0], abs=1e-7)
    assert descend(lambda xs: (np.asarray(xs) - 0.7) ** 2, 0.0, 1.0, 0.0) == pytest.approx(0.7, abs=1e-8)


def test_the_tied_minimisers_minimise_the_monte_carlo_loss_and_tend_to_alpha_star_T():
    T = 4
    start = {T: (alpha_star_T(T, TASK), -alpha_star_T(T, TASK))}
    r = tied_minimisers(TASK, (1, T), 30, n_prompts=3000, seed=1, one_param_start=0.1, two_param_starts=start)
    assert set(r["one"]) == {1, T} and set(r["two"]) == {T}  # T = 1 has no two-parameter profile
    st = _stats(3000, 30, 1)

    def f(al: float, be: float) -> float:  # the same Monte-Carlo loss, from the closed form
        return float(_closed_form(st, T, al, be).mean())

    al = r["one"][T]
    assert f(al, -al) <= min(f(al * 1.01, -al * 1.01), f(al * 0.99, -al * 0.99))
    a2, b2 = r["two"][T]
    assert f(a2, b2) <= min(f(a2 * 1.01, b2), f(a2, b2 * 1.01), f(a2 * 0.99, b2), f(a2, b2 * 0.99))

    # replicate draws: a long context approaches alpha*_T while L = 30 is resolvably not the limit
    def draws(L, n):
        return np.array(
            [tied_minimisers(TASK, (T,), L, n_prompts=n, seed=s, one_param_start=0.1)["one"][T] for s in range(4)]
        )

    far, near = draws(1000, 1000), draws(30, 3000)
    se = lambda x: x.std(ddof=1) / np.sqrt(x.size)  # noqa: E731
    assert abs(far.mean() - alpha_star_T(T, TASK)) < 4 * se(far) + 0.01 * alpha_star_T(T, TASK)
    assert abs(near.mean() - alpha_star_T(T, TASK)) > 4 * se(near)


def test_the_untied_optimum_is_a_stationary_point_of_its_loss():
    opt = untied_minimiser(TASK, 3, 30, n_prompts=2000, seed=2)
    assert opt["grad_norm"] < 1e-6 and len(opt["alpha"]) == 3 and opt["iterations"] >= 1
    assert opt["beta"][0] == pytest.approx(-alpha_star(TASK))  # beta_0 multiplies F_0 = 0: no gradient
    st = _stats(2000, 30, 2)
    alpha, beta = torch.tensor([opt["alpha"]]), torch.tensor([opt["beta"]])

    def loss(shift: float) -> float:
        shifted = alpha.clone()
        shifted[0, 1] += shift
        return float(((untied_predict(st, shifted, beta) - st.bayes) ** 2).mean())

    assert loss(0.0) <= min(loss(1e-3), loss(-1e-3))

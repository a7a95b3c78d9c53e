"""The whole landscape on a fresh (p, q) pair on each side of p + q = 1 (issue 38), against numpy/scipy
code written from seed 000's equations only."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from scipy.optimize import minimize_scalar

from tdlab.theory import markov_landscape as ml
from tdlab.theory.markov_landscape import CriticalKind as CK

F64 = torch.float64


# A fresh (p, q) pair on each side of p + q = 1 (issue 38), against numpy/scipy code written from the paper's
# equations only: Eq. (3) with Lemma 5's optimal bias, Eq. (4)'s energy, Thm. 1's loss values, Thm. 2 / Thm. 8's
# basins and the GF limit by direct integration of the flow.

FRESH_000 = [(0.15, 0.45), (0.75, 0.6)]  # p + q = 0.6 and 1.35
_E_SAD = -(1 + math.log(2)) / 2  # E(0, -1/sqrt2), Sec. 4


def _ind_logits(e, w, p, q, b=None):
    """Eq. (3): logit(x) = e^2 (1 + 2 w|w|) x + b - e^2/2, with b = b*(theta) from Lemma 5, Eq. (33)."""
    D = e * e * (1 + 2 * w * np.abs(w))
    if b is None:
        A = np.exp(D)
        r = p / q
        S = np.sqrt((r - 1) ** 2 + 4 * r * A)
        # Eq. (33) as printed for r >= 1; for r < 1 rationalised, (r-1+S)/(2A) = 2r/(S-(r-1)), to avoid cancellation
        z0 = np.log(r - 1 + S) - np.log(2 * A) if r >= 1 else np.log(2 * r) - np.log(S - (r - 1))  # b* - e^2/2
    else:
        z0 = b - e * e / 2
    return z0, z0 + D


def _ind_loss(e, w, p, q, b=None):
    """E over the stationary pair (X, Y) ~ (pi, P) of l_log((2Y - 1) logit(X)) (Eq. 3 / Lemma 6)."""
    pi1 = p / (p + q)
    pi0 = 1 - pi1
    z0, z1 = _ind_logits(e, w, p, q, b)
    sp = np.logaddexp  # softplus(z) = log(1 + e^z) = logaddexp(0, z)
    return pi0 * (p * sp(0, -z0) + (1 - p) * sp(0, z0)) + pi1 * ((1 - q) * sp(0, -z1) + q * sp(0, z1))


def _ind_grad(e, w, p, q):
    """Danskin: dL/dD at b* is pi1 (sigma(z1) - (1 - q)); dD/de = 2e(1 + 2w|w|), dD/dw = 4 e^2 |w|."""
    pi1 = p / (p + q)
    _, z1 = _ind_logits(e, w, p, q)
    dD = pi1 * (1 / (1 + np.exp(-z1)) - (1 - q))
    return np.stack([dD * 2 * e * (1 + 2 * w * np.abs(w)), dD * 4 * e * e * np.abs(w)], axis=-1)


def _ind_basin(e, w, p, q):
    """Thm. 2 (p + q > 1) / Thm. 8 (p + q < 1) for points off the measure-zero boundaries (w != 0, E != E_sad)."""
    E = e * e - (w * w + np.sign(w) * np.log(np.abs(w)))
    s = -1 / math.sqrt(2)
    big = (w >= 0) | ((w > s) & (w < 0) & (E < _E_SAD))  # Thm. 2's I_min
    local = big if p + q > 1 else (w < s) & (E < _E_SAD)  # Thm. 8's I_min
    return np.where(local, int(CK.LOCAL_MIN), int(CK.GLOBAL_MIN))


@pytest.mark.parametrize("p,q", FRESH_000)
def test_fresh_pq_loss_bias_and_gradient_against_independent_numpy(p, q):
    rng = np.random.default_rng(38)
    th = rng.normal(0.0, 1.2, size=(400, 2))
    e, w = th[:, 0], th[:, 1]
    # Lemma 5's closed form is the argmin over b (scipy), and tdlab's b* / L agree with both
    for i in range(0, 400, 40):
        ei, wi = e[i], w[i]
        res = minimize_scalar(lambda b, ei=ei, wi=wi: _ind_loss(ei, wi, p, q, b), bracket=(-3, 3), tol=1e-12)
        assert abs(res.fun - _ind_loss(ei, wi, p, q)) < 1e-12
    z0, _ = _ind_logits(e, w, p, q)
    assert np.max(np.abs(ml.optimal_bias(torch.tensor(th), p, q).numpy() - (z0 + e * e / 2))) < 1e-12
    assert np.max(np.abs(ml.loss(torch.tensor(th), p, q).numpy() - _ind_loss(e, w, p, q))) < 1e-13
    # gradient: Danskin form vs central differences of the independent loss, then vs tdlab
    h = 1e-6
    fd = np.stack(
        [
            (_ind_loss(e + h, w, p, q) - _ind_loss(e - h, w, p, q)) / (2 * h),
            (_ind_loss(e, w + h, p, q) - _ind_loss(e, w - h, p, q)) / (2 * h),
        ],
        axis=-1,
    )
    g = _ind_grad(e, w, p, q)
    assert np.max(np.abs(g - fd)) < 1e-8
    assert np.max(np.abs(ml.grad_loss(torch.tensor(th), p, q).numpy() - g)) < 1e-13


@pytest.mark.parametrize("p,q", FRESH_000)
def test_fresh_pq_critical_values_and_kinds_against_independent_numpy(p, q):
    """Thm. 1: L = H(x_{n+1} | x_n) on Theta_*, = H(x_{n+1}) on the w-axis, gradient zero on both; kinds."""
    pi1 = p / (p + q)
    pi0 = 1 - pi1
    h2 = lambda t: -t * math.log(t) - (1 - t) * math.log(1 - t)  # noqa: E731
    H_cond, H_marg = pi0 * h2(p) + pi1 * h2(q), h2(pi1)
    Dstar = math.log((1 - p) * (1 - q) / (p * q))
    # points of Theta_*: pick w with (1 + 2w|w|) of D*'s sign, e = sqrt(D*/(1 + 2w|w|))
    ws = np.linspace(-3, 3, 61)
    c = 1 + 2 * ws * np.abs(ws)
    ws = ws[(c * Dstar > 0) & (np.abs(c) > 1e-3)]
    c = 1 + 2 * ws * np.abs(ws)
    star = np.stack([np.sqrt(Dstar / c), ws], axis=-1)
    axis = np.stack([np.zeros(61), np.linspace(-3, 3, 61)], axis=-1)
    axis = axis[np.abs(1 + 2 * axis[:, 1] * np.abs(axis[:, 1])) > 1e-3]
    assert np.max(np.abs(_ind_loss(star[:, 0], star[:, 1], p, q) - H_cond)) < 1e-14
    assert np.max(np.abs(_ind_loss(axis[:, 0], axis[:, 1], p, q) - H_marg)) < 1e-14
    assert np.max(np.abs(_ind_grad(star[:, 0], star[:, 1], p, q))) < 1e-14
    assert np.max(np.abs(ml.loss(torch.tensor(star), p, q).numpy() - H_cond)) < 1e-14
    assert np.max(np.abs(ml.loss(torch.tensor(axis), p, q).numpy() - H_marg)) < 1e-14
    assert ml.classify_critical(torch.tensor(star), p, q).tolist() == [int(CK.GLOBAL_MIN)] * len(star)
    sgn = (p + q - 1) * (1 + 2 * axis[:, 1] * np.abs(axis[:, 1]))
    want = np.where(sgn > 0, int(CK.LOCAL_MIN), int(CK.LOCAL_MAX)).tolist()
    assert ml.classify_critical(torch.tensor(axis), p, q).tolist() == want
    assert ml.classify_critical(torch.tensor([0.0, -1 / math.sqrt(2)], dtype=F64), p, q).item() == int(CK.SADDLE)
    # a local min is below its ring, a local max above it (radius 1e-3, independent loss)
    ang = np.linspace(0, 2 * np.pi, 32, endpoint=False)
    for (e0, w0), k in zip(axis[::6], want[::6], strict=True):
        ring = _ind_loss(e0 + 1e-3 * np.cos(ang), w0 + 1e-3 * np.sin(ang), p, q) - H_marg
        assert (ring >= -1e-15).all() if k == int(CK.LOCAL_MIN) else (ring <= 1e-15).all()


@pytest.mark.parametrize("p,q", FRESH_000)
def test_fresh_pq_basins_and_limits_against_an_independent_flow(p, q):
    """Thms. 2 / 8 basins, and tdlab's predicted limit against scipy's integration of the GF of the numpy loss."""
    from scipy.integrate import solve_ivp

    rng = np.random.default_rng(380)
    th = rng.normal(0.0, 1.0, size=(4000, 2))
    e, w = th[:, 0], th[:, 1]
    E = e * e - (w * w + np.sign(w) * np.log(np.abs(w)))
    keep = np.abs(E - _E_SAD) > 1e-6
    got = ml.predict_basin(torch.tensor(th[keep]), p, q).numpy()
    assert (got == _ind_basin(e[keep], w[keep], p, q)).all()
    # GF limits for a few starts well away from the separatrix E = E_sad
    starts = th[np.abs(E - _E_SAD) > 0.1][:8]
    lim = ml.predict_limit(torch.tensor(starts), p, q).numpy()
    for s, want in zip(starts, lim, strict=True):
        sol = solve_ivp(lambda t, x: -_ind_grad(x[0], x[1], p, q), (0, 4000), s, method="LSODA", rtol=1e-11, atol=1e-13)
        assert np.max(np.abs(sol.y[:, -1] - want)) < 1e-6


@pytest.mark.parametrize("p,q", FRESH_000)
def test_fresh_pq_gaussian_basin_probability_against_independent_quadrature(p, q):
    """P(theta0 ~ N(0, s^2 I) in I_min) of Thm. 2 / Thm. 8: the e-integral over |e| < g(w) is 2 Phi(g/s) - 1."""
    from scipy.integrate import quad
    from scipy.stats import norm

    sig = np.array([0.05, 0.3, 1.0, 3.0])
    got = ml.gaussian_basin_probability(sig, p, q)
    s2 = -1 / math.sqrt(2)
    g = lambda w: math.sqrt(max(w * w - math.log(-w) + _E_SAD, 0.0))  # noqa: E731
    for k, s in enumerate(sig):
        lo, hi = (s2, 0.0) if p + q > 1 else (-12 * s - 1, s2)
        f = lambda w, s=s: norm.pdf(w, scale=s) * (2 * norm.cdf(g(w) / s) - 1)  # noqa: E731
        val = quad(f, lo, hi, epsabs=1e-14, epsrel=1e-12, limit=200)[0] + (0.5 if p + q > 1 else 0.0)
        assert abs(got[CK.LOCAL_MIN][k] - val) < 1e-12
        assert abs(got[CK.GLOBAL_MIN][k] - (1 - val)) < 1e-12

"""Checks of tdlab.theory.markov_landscape.flow: energy conservation along GF (Lemma 1, Lemma 14), the
escape rate near the w-axis (Lemma 8, not App. M.5's), long integrations against the predicted basins
and limits (Thms. 2, 8), and Monte-Carlo basin probabilities against the quadrature (App. G, H.4)."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from tdlab.tasks.markov import stationary
from tdlab.theory import markov_landscape as ml
from tdlab.theory.markov_landscape import CriticalKind as CK

F64 = torch.float64


def _random_pq(n: int, g: torch.Generator, margin: float = 0.15) -> tuple[torch.Tensor, torch.Tensor]:
    """n chains with p, q in (0.05, 0.95) and |p + q - 1| >= margin, half on each side."""
    out_p, out_q = [], []
    while len(out_p) < n:
        p, q = (0.05 + 0.9 * torch.rand(2, generator=g, dtype=F64)).tolist()
        if abs(p + q - 1) >= margin and ((p + q > 1) == (len(out_p) % 2 == 0)):
            out_p.append(p)
            out_q.append(q)
    return torch.tensor(out_p, dtype=F64), torch.tensor(out_q, dtype=F64)


def test_energy_is_conserved_along_the_flow():
    """Fine RK4 (dt = 4e-3 and 2e-3, t in [0, 1]): the relative drift shrinks like dt^4, i.e. it is
    discretisation error (measured ratio ~16), and is < 1e-10 at dt = 2e-3 (measured <= 1.1e-11). Under the Eq. (6)
    reading it is not conserved at all (another sign that Eq. (3) is the intended model)."""
    th2 = torch.tensor([[0.8, 0.5], [-1.1, -0.4], [0.6, -1.3], [1.4, 0.9]], dtype=F64)
    th3 = torch.tensor([[0.8, 0.5, 0.3], [-1.1, -0.4, -0.2], [0.6, -1.3, 0.1], [0.9, 0.9, -0.5]], dtype=F64)
    for p, q in ((0.2, 0.3), (0.7, 0.8)):
        for th, bound in ((th2, 1e-10), (th3, 1e-10)):
            drift = {}
            for dt in (4e-3, 2e-3):
                r = ml.run_flow(th, p, q, [0.5, 1.0], method="rk4", dt=dt)
                E0 = ml.energy(th)
                drift[dt] = ((ml.energy(r.trajectory) - E0).abs() / E0.abs()).max().item()
                assert (r.trajectory[-1] - th).norm(dim=-1).min().item() > 1e-3  # the points moved
            assert drift[2e-3] < bound
            assert drift[4e-3] > 8 * drift[2e-3] or drift[4e-3] < 1e-13
        r6 = ml.run_flow(th2, p, q, [1.0], method="rk4", dt=4e-3, form="eq6")
        assert ((ml.energy(r6.final) - ml.energy(th2)).abs()).max().item() > 1e-2


def test_linearised_escape_rate_near_the_w_axis(sides):
    """Near e = 0 the flow is de/dt = -2 pi0 pi1 (p+q-1)(1+2w|w|) e (Lemma 8 / Eq. 36); App. M.5's
    rate misses the factor 2."""
    for p, q in sides:
        pi0, pi1 = stationary(p, q)
        w0 = 0.3
        th = torch.tensor([[1e-5, w0]], dtype=F64)
        r = ml.run_flow(th, p, q, [3.0], method="dopri5", rtol=1e-10, atol=1e-16)
        rate = 2 * pi0 * pi1 * (p + q - 1) * (1 + 2 * w0 * abs(w0))
        assert r.final[0, 0].item() / 1e-5 == pytest.approx(math.exp(-rate * 3.0), rel=1e-6)


def test_basin_predictions_agree_with_long_integrations():
    """Random chains on both sides of p + q = 1 (|p+q-1| >= 0.15), theta0 ~ N(0, I_2), GF to t = 2000
    (rosenbrock23, rtol 1e-6, rest at |grad| <= 1e-10). Excluded margin (where the limit is decided by
    an arbitrarily small perturbation, or convergence takes longer than the horizon): |E0 - E_sad| <
    0.05 and |e0| < 0.02. Required: >= 99% agreement of the endpoint's critical set with Thm. 2 / 8,
    and the endpoint within 1e-3 of predict_limit for >= 99% of rows."""
    g = torch.Generator().manual_seed(9)
    n_chain, per = 16, 250
    p, q = _random_pq(n_chain, g)
    p, q = p.repeat_interleave(per), q.repeat_interleave(per)
    th0 = torch.randn(n_chain * per, 2, generator=g, dtype=F64)
    E0 = ml.energy(th0)
    keep = ((E0 - ml.ENERGY_SADDLE).abs() >= 0.05) & (th0[:, 0].abs() >= 0.02)
    th0, p, q = th0[keep], p[keep], q[keep]
    res = ml.run_flow(th0, p, q, [2000.0])
    got = ml.classify_critical(res.final, p, q, atol=1e-4)
    want = ml.predict_basin(th0, p, q)
    agree = (got == want).double().mean().item()
    assert agree >= 0.99, agree
    both = (want == int(CK.GLOBAL_MIN)) | (want == int(CK.LOCAL_MIN))
    assert both.double().mean().item() > 0.99
    dist = (res.final - ml.predict_limit(th0, p, q)).norm(dim=-1)
    assert (dist < 1e-3).double().mean().item() >= 0.99
    # Both outcomes actually occur on both sides (the test is not vacuous).
    big = p + q > 1
    for side in (big, ~big):
        for c in (CK.GLOBAL_MIN, CK.LOCAL_MIN):
            assert int(((want == int(c)) & side).sum()) > 50


def test_gaussian_basin_probability_quadrature_vs_monte_carlo():
    g = torch.Generator().manual_seed(10)
    for p, q in ((0.7, 0.8), (0.2, 0.3)):
        for sigma in (0.3, 1.5):
            quad = ml.gaussian_basin_probability(sigma, p, q)
            mc = ml.gaussian_basin_probability_mc(sigma, p, q, n=200_000, generator=g)
            for c in (CK.GLOBAL_MIN, CK.LOCAL_MIN):
                P, se = mc[c]
                assert abs(P - float(quad[c])) < 4 * se + 1e-12, (p, q, sigma, c, P, float(quad[c]), se)
            assert float(quad[CK.GLOBAL_MIN] + quad[CK.LOCAL_MIN]) == pytest.approx(1.0, abs=1e-12)


def test_small_gaussian_init_goes_local_for_pq_above_one_and_global_below():
    """Thm. 2 / Thm. 8 "consequently" clauses, and App. H.4 (Thm. 11, informal) for (e, w, a) by flow."""
    sig = np.array([0.02, 0.1])
    hi = ml.gaussian_basin_probability(sig, 0.7, 0.8)
    lo = ml.gaussian_basin_probability(sig, 0.2, 0.3)
    assert np.all(hi[CK.LOCAL_MIN] > 0.999) and np.all(lo[CK.GLOBAL_MIN] > 0.999)
    # Monotone in sigma: larger init leaves the origin's basin more often.
    s = np.array([0.1, 0.5, 1.0, 2.0])
    assert np.all(np.diff(ml.gaussian_basin_probability(s, 0.7, 0.8)[CK.LOCAL_MIN]) < 0)
    for (p, q), code in (((0.7, 0.8), CK.LOCAL_MIN), ((0.2, 0.3), CK.GLOBAL_MIN)):
        mc = ml.gaussian_basin_probability_mc(
            0.05, p, q, n=300, dim=3, method="flow", t_end=2000.0, generator=torch.Generator().manual_seed(11)
        )
        assert mc[code][0] >= 0.99

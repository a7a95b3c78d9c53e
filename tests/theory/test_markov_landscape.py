"""Checks of tdlab.theory.markov_landscape against seed 000 (Local to Global) and independent computations.

Ground truth comes from tdlab.tasks.markov (entropy rate, marginal entropy, sampling), scipy
(optimisation of the bias, quadrature-free Monte Carlo), finite differences and long integrations.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from scipy.optimize import minimize_scalar

from tdlab.tasks.markov import MarkovChain, entropy_rate, marginal_entropy, stationary
from tdlab.theory import markov_landscape as ml
from tdlab.theory.markov_landscape import CriticalKind as CK
from tdlab.train.flow import check_gradients

F64 = torch.float64
SIDES = [(0.2, 0.3), (0.7, 0.8), (0.1, 0.6), (0.85, 0.4)]  # p+q < 1, > 1, < 1, > 1


def _gen(seed: int) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


def _random_pq(n: int, g: torch.Generator, margin: float = 0.15) -> tuple[torch.Tensor, torch.Tensor]:
    """n chains with p, q in (0.05, 0.95) and |p + q - 1| >= margin, half on each side."""
    out_p, out_q = [], []
    while len(out_p) < n:
        p, q = (0.05 + 0.9 * torch.rand(2, generator=g, dtype=F64)).tolist()
        if abs(p + q - 1) >= margin and ((p + q > 1) == (len(out_p) % 2 == 0)):
            out_p.append(p)
            out_q.append(q)
    return torch.tensor(out_p, dtype=F64), torch.tensor(out_q, dtype=F64)


def _direct_loss(logit0: float, logit1: float, p: float, q: float) -> float:
    """Cross-entropy Eq. (1) for one stationary pair, from the kernel and pi of tasks.markov."""
    pi0, pi1 = stationary(p, q)
    P = MarkovChain(p, q).kernel.numpy()
    total = 0.0
    for x, (pix, z) in enumerate(((pi0, logit0), (pi1, logit1))):
        # -log sigma(z) = log(1 + e^-z), -log(1 - sigma(z)) = log(1 + e^z)
        total += pix * (P[x, 1] * math.log1p(math.exp(-z)) + P[x, 0] * math.log1p(math.exp(z)))
    return total


# ----------------------------------------------------------------------------------------------
# The loss


def test_loss_with_bias_equals_direct_cross_entropy_from_the_architecture():
    """Eq. (8) vs the logits of the FF derivation (Eq. 21-22 for (e, w); App. H.1 for (e, w, a))."""
    g = _gen(0)
    for p, q in SIDES:
        for _ in range(5):
            e, w, a, b = (torch.randn(4, generator=g, dtype=F64) * torch.tensor([1.0, 1.0, 0.5, 1.0])).tolist()
            # Eq. (22): logit = e^2 (x - 1/2)(1 + 4 w|w| x) + b
            l0, l1 = [e * e * (x - 0.5) * (1 + 4 * w * abs(w) * x) + b for x in (0, 1)]
            got = ml.loss_with_bias(torch.tensor([e, w], dtype=F64), b, p, q).item()
            assert got == pytest.approx(_direct_loss(l0, l1, p, q), rel=1e-12)
            # App. H.1: z = e[(x-1/2)(1+ae^2)(1+2w|w|) + w|w||1+ae^2|] ("abs" form), weight-tied logit e*z.
            m = 1 + a * e * e
            l0, l1 = [e * e * ((x - 0.5) * m * (1 + 2 * w * abs(w)) + w * abs(w) * abs(m)) + b for x in (0, 1)]
            got = ml.loss_with_bias(torch.tensor([e, w, a], dtype=F64), b, p, q, form="abs").item()
            assert got == pytest.approx(_direct_loss(l0, l1, p, q), rel=1e-12)


def test_population_loss_matches_sampled_sequences():
    """The four-term sum equals the position-averaged loss of Eq. (1) on sampled chains (x_1 ~ pi)."""
    p, q = 0.3, 0.55
    chain = MarkovChain(p, q)
    x = chain.sample([_gen(1)], batch=2000, length=64)[0].double()  # (B, T)
    theta = torch.tensor([0.9, -0.4], dtype=F64)
    b = 0.3
    e, w = theta.tolist()
    logit = e * e * (1 + 2 * w * abs(w)) * x[:, :-1] + b - e * e / 2  # Eq. (3) placement
    y = x[:, 1:]
    ce = torch.nn.functional.binary_cross_entropy_with_logits(logit, y, reduction="none")
    per_seq = ce.mean(dim=1)
    se = per_seq.std().item() / math.sqrt(per_seq.numel())
    assert abs(per_seq.mean().item() - ml.loss_with_bias(theta, b, p, q).item()) < 4 * se


def test_optimal_bias_minimises_loss_numerically():
    """Lemma 5 / Lemma 13: b* from the closed form agrees with scipy's 1-D minimiser."""
    g = _gen(2)
    for p, q in SIDES:
        for dim, forms in ((2, ("eq3", "eq6")), (3, ("eq45", "abs"))):
            for _ in range(4):
                th = 1.2 * torch.randn(dim, generator=g, dtype=F64)
                if dim == 3:
                    th[2] = -1.5 / th[0] ** 2  # 1 + a e^2 < 0: where the two 3-param forms differ
                for form in forms:
                    bstar = ml.optimal_bias(th, p, q, form=form).item()
                    res = minimize_scalar(
                        lambda b, th=th, p=p, q=q, form=form: ml.loss_with_bias(th, b, p, q, form=form).item(),
                        bracket=(bstar - 3, bstar + 3),
                        tol=1e-12,
                    )
                    assert res.x == pytest.approx(bstar, abs=1e-5)
                    assert ml.loss(th, p, q, form=form).item() <= res.fun + 1e-13


def test_optimal_bias_lemma5_formula_and_consequences():
    g = _gen(3)
    for p, q in SIDES:
        e, w = torch.randn(2, generator=g, dtype=F64).tolist()
        A = math.exp(e * e * (1 + 2 * w * abs(w)))
        r = p / q
        eq33 = math.log((r - 1 + math.sqrt((r - 1) ** 2 + 4 * r * A)) / (2 * A)) + e * e / 2
        assert ml.optimal_bias(torch.tensor([e, w], dtype=F64), p, q).item() == pytest.approx(eq33, rel=1e-12)
        # "Consequently": on Theta_* b* - e^2/2 = log(p/(1-p)); at e = 0, b* = log(p/q).
        ds = math.log((1 - p) * (1 - q) / (p * q))
        w_ = 0.3 if ds > 0 else -1.5
        e_ = math.sqrt(ds / (1 + 2 * w_ * abs(w_)))
        assert ml.optimal_bias(torch.tensor([e_, w_], dtype=F64), p, q).item() - e_ * e_ / 2 == pytest.approx(
            math.log(p / (1 - p)), abs=1e-12
        )
        assert ml.optimal_bias(torch.tensor([0.0, w], dtype=F64), p, q).item() == pytest.approx(
            math.log(p / q), abs=1e-14
        )
    # Extreme contrasts stay finite (log-space evaluation), both signs of q - p.
    for D in (-700.0, -50.0, 50.0, 700.0):
        for p, q in ((0.2, 0.3), (0.3, 0.2), (0.4, 0.4)):
            assert math.isfinite(ml.optimal_intercept(D, p, q).item())
            assert math.isfinite(ml.profile_loss(D, p, q).item())


def test_closed_form_gradient_vs_finite_differences_and_autograd():
    g = _gen(4)
    for dim in (2, 3):
        th = torch.randn(200, dim, generator=g, dtype=F64)
        p = 0.05 + 0.9 * torch.rand(200, generator=g, dtype=F64)
        q = 0.05 + 0.9 * torch.rand(200, generator=g, dtype=F64)
        gc = ml.grad_loss(th, p, q)
        # Central differences, step 1e-5: truncation ~1e-10 relative to O(1) curvature.
        h = 1e-5
        fd = torch.empty_like(th)
        for j in range(dim):
            d = torch.zeros(dim, dtype=F64)
            d[j] = h
            fd[:, j] = (ml.loss(th + d, p, q) - ml.loss(th - d, p, q)) / (2 * h)
        scale = gc.abs().amax(dim=-1, keepdim=True).clamp_min(1e-3)
        assert ((gc - fd).abs() / scale).max().item() < 1e-6
        chk = check_gradients(ml.loss, ml.grad_loss, th, p, q)
        assert chk.max_rel < 1e-10


# ----------------------------------------------------------------------------------------------
# Seed ambiguities


def test_eq3_reading_makes_thm1_hold_and_eq6_reading_does_not():
    """Eq. (3) puts (1 + 2w|w|) outside x_n, Eq. (6)/(9) inside. Only Eq. (3) makes the Thm. 1(i) set
    critical with loss H(x_{n+1}|x_n); it is also what the FF derivation Eq. (21)-(24) gives."""
    for p, q in SIDES:
        star = np.concatenate(ml.critical_loci(p, q)["global_min"])
        th = torch.as_tensor(star[::25])
        assert ml.grad_loss(th, p, q, form="eq3").abs().max().item() < 1e-12
        assert torch.allclose(ml.loss(th, p, q, form="eq3"), torch.tensor(entropy_rate(p, q), dtype=F64), atol=1e-13)
        g6 = ml.grad_loss(th, p, q, form="eq6").norm(dim=-1)
        assert (g6 > 1e-3).float().mean().item() > 0.9
    # Contrast and offset of Eq. (3) equal the FF derivation at x_n = 0, 1.
    th = torch.randn(50, 2, generator=_gen(5), dtype=F64)
    e, w = th[:, 0], th[:, 1]
    l0 = e * e * (0 - 0.5) * (1 + 0)
    l1 = e * e * (1 - 0.5) * (1 + 4 * w * w.abs())
    assert torch.allclose(ml.logit_offset(th), l0, atol=1e-14)
    assert torch.allclose(ml.contrast(th), l1 - l0, atol=1e-13)


def test_three_parameter_model_reduces_to_two_parameter_at_a0():
    g = _gen(6)
    th2 = torch.randn(100, 2, generator=g, dtype=F64) * 1.5
    th3 = torch.cat([th2, torch.zeros(100, 1, dtype=F64)], dim=-1)
    for p, q in SIDES:
        assert torch.allclose(ml.loss(th3, p, q), ml.loss(th2, p, q), rtol=1e-14, atol=0)
        assert torch.allclose(ml.optimal_bias(th3, p, q), ml.optimal_bias(th2, p, q), atol=1e-12)
        g3, g2 = ml.grad_loss(th3, p, q), ml.grad_loss(th2, p, q)
        assert torch.allclose(g3[:, :2], g2, rtol=1e-13, atol=1e-15)
        # dL/da = Phi'(D) e^4 (1 + 2w|w|) does not vanish at a = 0 (Lemma 13): a is not frozen.
        e, w = th2[:, 0], th2[:, 1]
        slope = ml.profile_loss_slope(ml.contrast(th2), p, q)
        assert torch.allclose(g3[:, 2], slope * e**4 * (1 + 2 * w * w.abs()), rtol=1e-12, atol=1e-15)
        assert torch.equal(ml.classify_critical(th3, p, q), ml.classify_critical(th2, p, q))
    assert torch.allclose(ml.energy(th3), ml.energy(th2), rtol=0, atol=0, equal_nan=True)


def test_three_parameter_forms_differ_only_in_bias():
    """App. A.2 (|1+ae^2|) vs Eq. (45) ((1+ae^2)): same L(theta) and gradient, different b*."""
    th = torch.tensor([[1.0, 0.5, -2.0], [0.7, -1.2, 0.3]], dtype=F64)
    for p, q in SIDES:
        assert torch.allclose(ml.loss(th, p, q, form="eq45"), ml.loss(th, p, q, form="abs"), rtol=1e-15)
        bd = ml.optimal_bias(th, p, q, form="eq45") - ml.optimal_bias(th, p, q, form="abs")
        assert abs(bd[0].item()) > 0.1 and bd[1].item() == 0.0  # 1 + a e^2 < 0 only in row 0


# ----------------------------------------------------------------------------------------------
# Critical sets (Thm. 1, Thm. 10)


@pytest.mark.parametrize("p,q", SIDES)
def test_thm1_critical_sets_gradient_loss_values_and_codes(p, q):
    loci = ml.critical_loci(p, q)
    H_rate, H_marg = entropy_rate(p, q), marginal_entropy(p, q)
    expect = {
        "global_min": (CK.GLOBAL_MIN, H_rate),
        "local_min": (CK.LOCAL_MIN, H_marg),
        "local_max": (CK.LOCAL_MAX, H_marg),
        "saddle": (CK.SADDLE, H_marg),
    }
    for key, (code, value) in expect.items():
        pts = torch.as_tensor(np.concatenate(loci[key]))
        if key != "saddle":  # keep the segments' interior away from the saddle point
            pts = pts[(1 + 2 * pts[:, 1] * pts[:, 1].abs()).abs() > 1e-3]
        assert ml.autograd_grad_loss(pts, p, q).abs().max().item() < 1e-12
        assert torch.allclose(ml.loss(pts, p, q), torch.tensor(value, dtype=F64), atol=1e-13)
        assert bool((ml.classify_critical(pts, p, q, atol=1e-9) == int(code)).all())
    assert H_rate < H_marg


@pytest.mark.parametrize("p,q", SIDES)
def test_thm1_nature_of_critical_points_by_perturbation(p, q):
    """Local minima / maxima / saddle per Thm. 1 by the loss on a ring of radius 1e-3 (independent of
    the Hessian of Lemma 8): w-axis points are flat along w, so compare with <= / >=."""
    g = _gen(7)
    ang = torch.linspace(0, 2 * math.pi, 64, dtype=F64)
    ring = 1e-3 * torch.stack([torch.cos(ang), torch.sin(ang)], dim=-1)
    ws = torch.tensor([-2.0, -1.0, -0.3, 0.0, 0.4, 1.5], dtype=F64)
    for w in ws:
        c = torch.tensor([0.0, w.item()], dtype=F64)
        code = ml.classify_critical(c, p, q).item()
        d = ml.loss(c + ring, p, q) - ml.loss(c, p, q)
        if code == CK.LOCAL_MIN:
            assert d.min().item() >= -1e-15
        else:
            assert code == CK.LOCAL_MAX and d.max().item() <= 1e-15
    d = ml.loss(torch.tensor([0.0, ml.SADDLE_W], dtype=F64) + ring, p, q) - ml.loss(
        torch.tensor([0.0, ml.SADDLE_W], dtype=F64), p, q
    )
    assert d.min().item() < -1e-12 and d.max().item() > 1e-12
    # Global minima: nothing anywhere is below the entropy rate.
    th = 3 * torch.randn(5000, 2, generator=g, dtype=F64)
    assert ml.loss(th, p, q).min().item() >= entropy_rate(p, q) - 1e-14


@pytest.mark.parametrize("p,q", SIDES)
def test_thm1_no_other_critical_points_on_a_grid(p, q):
    """Every grid point with a vanishing gradient is in one of Thm. 1's sets (loose tolerance)."""
    e, w = torch.meshgrid(torch.linspace(-3, 3, 301, dtype=F64), torch.linspace(-3, 3, 301, dtype=F64), indexing="ij")
    th = torch.stack([e, w], dim=-1).reshape(-1, 2)
    gnorm = ml.grad_loss(th, p, q).norm(dim=-1)
    crit = gnorm < 1e-8
    assert int(crit.sum()) > 0
    assert bool((ml.classify_critical(th[crit], p, q, atol=1e-3) != int(CK.NONE)).all())
    noncrit = ml.classify_critical(th, p, q, atol=0.05) == int(CK.NONE)
    assert gnorm[noncrit].min().item() > 1e-6


@pytest.mark.parametrize("p,q", SIDES)
def test_thm10_critical_sets_with_attention(p, q):
    loci = ml.critical_loci_3(p, q, n=41)
    H_rate, H_marg = entropy_rate(p, q), marginal_entropy(p, q)
    for key, value, code in (
        ("global_min", H_rate, CK.GLOBAL_MIN),
        ("stationary", H_marg, CK.STATIONARY),
        ("saddle", H_marg, CK.SADDLE),
        ("local_min", H_marg, CK.LOCAL_MIN),
        ("local_max", H_marg, CK.LOCAL_MAX),
    ):
        pts = torch.as_tensor(loci[key])
        if key in ("local_min", "local_max"):
            pts = pts[(1 + 2 * pts[:, 1] * pts[:, 1].abs()).abs() > 1e-3]
        assert pts.shape[0] > 0
        g = ml.autograd_grad_loss(pts, p, q).norm(dim=-1)
        assert g.max().item() < 1e-9 * max(1.0, pts.abs().max().item() ** 4)
        assert torch.allclose(ml.loss(pts, p, q), torch.tensor(value, dtype=F64), atol=1e-12)
        assert bool((ml.classify_critical(pts, p, q, atol=1e-8) == int(code)).all())
    # Theta_station points are saddles: the loss goes both ways nearby.
    c = torch.tensor([1.0, ml.SADDLE_W, -1.0], dtype=F64)
    d = ml.loss(c + 1e-3 * torch.randn(500, 3, generator=_gen(8), dtype=F64), p, q) - ml.loss(c, p, q)
    assert d.min().item() < 0 < d.max().item()


# ----------------------------------------------------------------------------------------------
# Energy (Lemma 1, Lemma 14)


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


def test_linearised_escape_rate_near_the_w_axis():
    """Near e = 0 the flow is de/dt = -2 pi0 pi1 (p+q-1)(1+2w|w|) e (Lemma 8 / Eq. 36); App. M.5's
    rate misses the factor 2."""
    for p, q in SIDES:
        pi0, pi1 = stationary(p, q)
        w0 = 0.3
        th = torch.tensor([[1e-5, w0]], dtype=F64)
        r = ml.run_flow(th, p, q, [3.0], method="dopri5", rtol=1e-10, atol=1e-16)
        rate = 2 * pi0 * pi1 * (p + q - 1) * (1 + 2 * w0 * abs(w0))
        assert r.final[0, 0].item() / 1e-5 == pytest.approx(math.exp(-rate * 3.0), rel=1e-6)


# ----------------------------------------------------------------------------------------------
# Basins (Thm. 2, Thm. 8) and Gaussian initialisation (App. G)


def test_predict_basin_on_named_sets():
    s = ml.SADDLE_W
    pts = torch.tensor(
        [
            [0.0, -1.0],
            [0.0, s],
            [0.0, -0.3],
            [0.0, 0.0],
            [0.5, 0.0],
            [0.3, 0.5],
            [math.sqrt(0.09 - math.log(0.3) + ml.ENERGY_SADDLE), -0.3],
            [math.sqrt(4.0 - math.log(2.0) + ml.ENERGY_SADDLE), -2.0],
            [0.1, -0.3],
            [2.0, -0.3],
            [0.1, -2.0],
            [2.0, -2.0],
        ],
        dtype=F64,
    )
    big = [
        CK.LOCAL_MAX,
        CK.SADDLE,
        CK.LOCAL_MIN,
        CK.LOCAL_MIN,
        CK.LOCAL_MIN,
        CK.LOCAL_MIN,
        CK.SADDLE,
        CK.GLOBAL_MIN,
        CK.LOCAL_MIN,
        CK.GLOBAL_MIN,
        CK.GLOBAL_MIN,
        CK.GLOBAL_MIN,
    ]
    small = [
        CK.LOCAL_MIN,
        CK.SADDLE,
        CK.LOCAL_MAX,
        CK.LOCAL_MAX,
        CK.GLOBAL_MIN,
        CK.GLOBAL_MIN,
        CK.GLOBAL_MIN,
        CK.SADDLE,
        CK.GLOBAL_MIN,
        CK.GLOBAL_MIN,
        CK.LOCAL_MIN,
        CK.GLOBAL_MIN,
    ]
    # The separatrix points are built from g(w); exact float equality E == E_sad is not guaranteed,
    # so compare everything else exactly and those two within the construction.
    for (p, q), want in (((0.7, 0.8), big), ((0.2, 0.3), small)):
        got = ml.predict_basin(pts, p, q).tolist()
        for i, (a, b) in enumerate(zip(got, want, strict=True)):
            if i in (6, 7) and b == CK.SADDLE:
                E = ml.energy(pts[i]).item()
                assert abs(E - ml.ENERGY_SADDLE) < 1e-14
            else:
                assert a == int(b), (p, q, i, a, b)
    b = ml.basin_boundaries(0.7, 0.8)["saddle"]
    E = ml.energy(torch.as_tensor(np.concatenate(b)))
    assert (E - ml.ENERGY_SADDLE).abs().max().item() < 1e-12


def test_basin_predictions_agree_with_long_integrations():
    """Random chains on both sides of p + q = 1 (|p+q-1| >= 0.15), theta0 ~ N(0, I_2), GF to t = 2000
    (rosenbrock23, rtol 1e-6, rest at |grad| <= 1e-10). Excluded margin (where the limit is decided by
    an arbitrarily small perturbation, or convergence takes longer than the horizon): |E0 - E_sad| <
    0.05 and |e0| < 0.02. Required: >= 99% agreement of the endpoint's critical set with Thm. 2 / 8,
    and the endpoint within 1e-3 of predict_limit for >= 99% of rows."""
    g = _gen(9)
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
    g = _gen(10)
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
        mc = ml.gaussian_basin_probability_mc(0.05, p, q, n=300, dim=3, method="flow", t_end=2000.0, generator=_gen(11))
        assert mc[code][0] >= 0.99


# ----------------------------------------------------------------------------------------------
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

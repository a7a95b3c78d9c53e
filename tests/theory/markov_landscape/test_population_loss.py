"""Checks of tdlab.theory.markov_landscape.population_loss against seed 000: the loss Eq. (8) against the
architecture's cross-entropy, sampled sequences and scipy, the optimal bias of Lemma 5, the gradient
against finite differences and autograd, and the two readings of the model (Eq. 3 vs Eq. 6, Eq. 45 vs
App. A.2)."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from scipy.optimize import minimize_scalar

from tdlab.tasks.markov import MarkovChain, entropy_rate, stationary
from tdlab.theory import markov_landscape as ml
from tdlab.theory.gradient_flow import check_gradients

F64 = torch.float64


def _direct_loss(logit0: float, logit1: float, p: float, q: float) -> float:
    """Cross-entropy Eq. (1) for one stationary pair, from the kernel and pi of tasks.markov."""
    pi0, pi1 = stationary(p, q)
    P = MarkovChain(p, q).kernel.numpy()
    total = 0.0
    for x, (pix, z) in enumerate(((pi0, logit0), (pi1, logit1))):
        # -log sigma(z) = log(1 + e^-z), -log(1 - sigma(z)) = log(1 + e^z)
        total += pix * (P[x, 1] * math.log1p(math.exp(-z)) + P[x, 0] * math.log1p(math.exp(z)))
    return total


def test_loss_with_bias_equals_direct_cross_entropy_from_the_architecture(sides):
    """Eq. (8) vs the logits of the FF derivation (Eq. 21-22 for (e, w); App. H.1 for (e, w, a))."""
    g = torch.Generator().manual_seed(0)
    for p, q in sides:
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
    x = chain.sample([torch.Generator().manual_seed(1)], batch=2000, length=64)[0].double()  # (B, T)
    theta = torch.tensor([0.9, -0.4], dtype=F64)
    b = 0.3
    e, w = theta.tolist()
    logit = e * e * (1 + 2 * w * abs(w)) * x[:, :-1] + b - e * e / 2  # Eq. (3) placement
    y = x[:, 1:]
    ce = torch.nn.functional.binary_cross_entropy_with_logits(logit, y, reduction="none")
    per_seq = ce.mean(dim=1)
    se = per_seq.std().item() / math.sqrt(per_seq.numel())
    assert abs(per_seq.mean().item() - ml.loss_with_bias(theta, b, p, q).item()) < 4 * se


def test_optimal_bias_minimises_loss_numerically(sides):
    """Lemma 5 / Lemma 13: b* from the closed form agrees with scipy's 1-D minimiser."""
    g = torch.Generator().manual_seed(2)
    for p, q in sides:
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


def test_optimal_bias_lemma5_formula_and_consequences(sides):
    g = torch.Generator().manual_seed(3)
    for p, q in sides:
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
    g = torch.Generator().manual_seed(4)
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


def test_eq3_reading_makes_thm1_hold_and_eq6_reading_does_not(sides):
    """Eq. (3) puts (1 + 2w|w|) outside x_n, Eq. (6)/(9) inside. Only Eq. (3) makes the Thm. 1(i) set
    critical with loss H(x_{n+1}|x_n); it is also what the FF derivation Eq. (21)-(24) gives."""
    for p, q in sides:
        star = np.concatenate(ml.critical_loci(p, q)["global_min"])
        th = torch.as_tensor(star[::25])
        assert ml.grad_loss(th, p, q, form="eq3").abs().max().item() < 1e-12
        assert torch.allclose(ml.loss(th, p, q, form="eq3"), torch.tensor(entropy_rate(p, q), dtype=F64), atol=1e-13)
        g6 = ml.grad_loss(th, p, q, form="eq6").norm(dim=-1)
        assert (g6 > 1e-3).float().mean().item() > 0.9
    # Contrast and offset of Eq. (3) equal the FF derivation at x_n = 0, 1.
    th = torch.randn(50, 2, generator=torch.Generator().manual_seed(5), dtype=F64)
    e, w = th[:, 0], th[:, 1]
    l0 = e * e * (0 - 0.5) * (1 + 0)
    l1 = e * e * (1 - 0.5) * (1 + 4 * w * w.abs())
    assert torch.allclose(ml.logit_offset(th), l0, atol=1e-14)
    assert torch.allclose(ml.contrast(th), l1 - l0, atol=1e-13)


def test_three_parameter_model_reduces_to_two_parameter_at_a0(sides):
    g = torch.Generator().manual_seed(6)
    th2 = torch.randn(100, 2, generator=g, dtype=F64) * 1.5
    th3 = torch.cat([th2, torch.zeros(100, 1, dtype=F64)], dim=-1)
    for p, q in sides:
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


def test_three_parameter_forms_differ_only_in_bias(sides):
    """App. A.2 (|1+ae^2|) vs Eq. (45) ((1+ae^2)): same L(theta) and gradient, different b*."""
    th = torch.tensor([[1.0, 0.5, -2.0], [0.7, -1.2, 0.3]], dtype=F64)
    for p, q in sides:
        assert torch.allclose(ml.loss(th, p, q, form="eq45"), ml.loss(th, p, q, form="abs"), rtol=1e-15)
        bd = ml.optimal_bias(th, p, q, form="eq45") - ml.optimal_bias(th, p, q, form="abs")
        assert abs(bd[0].item()) > 0.1 and bd[1].item() == 0.0  # 1 + a e^2 < 0 only in row 0

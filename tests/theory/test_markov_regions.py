"""I_common (Sec. 4) and the bias step (Sec. 3) of the canonical (e, w) model: the sampler stays in the
region and the region is the intersection of Thm. 2's and Thm. 8's global basins; the free-bias
gradient matches autograd and the profile gradient; one bias step moves a stale-bias point from the
local-minimum basin of the joint flow to the global one (checked by integrating the closed-form flow);
no bias step leaves the local minimum's line e = 0; on given logits s + b the bias step's optimum is
the closed-form logit of the mean target (s = 0) and a stationary point of the direct cross-entropy."""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import pytest
import torch

from tdlab.theory.markov_landscape import (
    ENERGY_SADDLE,
    SADDLE_W,
    CriticalKind,
    grad_loss,
    loss,
    loss_with_bias,
    optimal_bias,
    predict_basin,
)
from tdlab.theory.markov_regions import (
    bias_excess,
    bias_gradient,
    bias_step,
    bias_step_agreement,
    bias_step_basins,
    bias_step_from_logits,
    descend,
    icommon_boundary,
    in_icommon,
    joint_gradient,
    limit_kind,
    run_joint_flow,
    sample_icommon,
)

F64 = torch.float64
GLOBAL, LOCAL = int(CriticalKind.GLOBAL_MIN), int(CriticalKind.LOCAL_MIN)
CELLS = [(0.2, 0.3), (0.1, 0.4), (0.5, 0.8), (0.7, 0.9)]


def _gens(n=3, seed=0):
    return [torch.Generator().manual_seed(seed + i) for i in range(n)]


@dataclass(frozen=True)
class _BiasStep:
    """A :class:`~tdlab.theory.markov_regions.BiasStepSpec` (markov-icommon's defaults, fewer points and steps)."""

    points: int
    e_max: float
    w_max: float
    b0: float
    lr: float
    steps: int
    atol: float


# --- the region ----------------------------------------------------------------------------------


def test_boundary_is_the_seeds_formula_and_vanishes_at_the_saddle():
    w = torch.tensor([-0.05, -0.3, SADDLE_W, -1.0, -2.5], dtype=F64)
    expected = [math.sqrt(x * x - math.log(-x) - (1 + math.log(2)) / 2) for x in w.tolist()]
    assert icommon_boundary(w).tolist() == pytest.approx(expected, abs=1e-7)
    assert float(icommon_boundary(torch.tensor(SADDLE_W))) == pytest.approx(0.0, abs=1e-7)
    assert torch.isnan(icommon_boundary(torch.tensor([0.0, 0.5]))).all()


def test_membership_is_the_inequality_on_e():
    w = torch.linspace(-2.0, -0.02, 50, dtype=F64)
    g = icommon_boundary(w)
    above = torch.stack([g + 1e-6, w], -1)
    below = torch.stack([(g - 1e-6).clamp_min(0), w], -1)
    mirrored = above * torch.tensor([-1.0, 1.0], dtype=F64)  # -e: the region is symmetric in e
    assert in_icommon(above).all() and in_icommon(mirrored).all()
    assert not in_icommon(below[g > 1e-5]).any()
    # w >= 0 is never in the region, whatever e
    assert not in_icommon(torch.tensor([[5.0, 0.0], [5.0, 0.3], [-5.0, 2.0]], dtype=F64)).any()


def test_sampler_stays_in_the_region_and_its_margin():
    pts = sample_icommon(_gens(3), 400, e_max=2.0, w_range=(-1.5, -0.05), energy_margin=0.1)
    assert pts.shape == (3, 400, 2)
    flat = pts.reshape(-1, 2)
    assert in_icommon(flat, 0.1).all()
    assert (flat[:, 0].abs() <= 2.0).all() and (flat[:, 1] >= -1.5).all() and (flat[:, 1] <= -0.05).all()
    # Both signs of e and both sides of w = -1/sqrt 2 are drawn.
    assert (flat[:, 0] > 0).any() and (flat[:, 0] < 0).any()
    assert (flat[:, 1] < SADDLE_W).any() and (flat[:, 1] > SADDLE_W).any()
    # Member i depends on its own generator only.
    again = sample_icommon(_gens(1, seed=1), 400, e_max=2.0, w_range=(-1.5, -0.05), energy_margin=0.1)
    assert torch.equal(again[0], pts[1])


def test_sampler_covers_the_region_uniformly():
    """Against an independent slow estimate: the fraction of the box in the region (by grid counting)
    equals the sampler's acceptance rate, and the sample's mean |e| matches the grid's."""
    e = torch.linspace(-2, 2, 801, dtype=F64)
    w = torch.linspace(-1.5, -0.05, 801, dtype=F64)
    E, W = torch.meshgrid(e, w, indexing="ij")
    grid = torch.stack([E, W], -1).reshape(-1, 2)
    inside = grid[in_icommon(grid)]
    pts = sample_icommon(_gens(1), 20000, e_max=2.0, w_range=(-1.5, -0.05), energy_margin=0.0)[0]
    assert float(pts[:, 0].abs().mean()) == pytest.approx(float(inside[:, 0].abs().mean()), abs=0.02)
    assert float(pts[:, 1].mean()) == pytest.approx(float(inside[:, 1].mean()), abs=0.02)


def test_complement_is_rejected_and_bad_boxes_refused():
    gens = _gens(1)
    with pytest.raises(ValueError, match="w_lo < w_hi < 0"):
        sample_icommon(gens, 5, w_range=(-1.0, 0.5))
    with pytest.raises(ValueError, match="e_max"):
        sample_icommon(gens, 5, e_max=0.0)
    # A box inside the complement (|e| < g(w) everywhere: near w = 0, g is large) holds no point.
    with pytest.raises(ValueError, match="no point of I_common"):
        sample_icommon(gens, 5, e_max=0.5, w_range=(-0.02, -0.01), max_rounds=20)
    with pytest.raises(ValueError, match="energy_margin"):
        in_icommon(torch.zeros(2, dtype=F64), -1.0)


@pytest.mark.parametrize("p,q", CELLS)
def test_region_is_in_the_global_basin_on_both_sides_and_nothing_else_with_w_negative_is(p, q):
    """I_common = I_*(p+q>1) ∩ I_*(p+q<1) within w < 0 (Sec. 4), checked with Thm. 2/8's basins."""
    g = torch.Generator().manual_seed(7)
    pts = torch.stack(
        [6 * torch.rand(20000, generator=g, dtype=F64) - 3, -3 * torch.rand(20000, generator=g, dtype=F64)], -1
    )
    pts = pts[pts[:, 1] < 0]
    inside = in_icommon(pts)
    basin = predict_basin(pts, p, q)
    assert (basin[inside] == GLOBAL).all()
    other = (0.5, 0.8) if p + q < 1 else (0.2, 0.3)  # the other side of p + q = 1
    both_global = (basin == GLOBAL) & (predict_basin(pts, *other) == GLOBAL)
    assert torch.equal(both_global, inside)


# --- the bias --------------------------------------------------------------------------------------


@pytest.mark.parametrize("p,q", [(0.2, 0.3), (0.7, 0.9)])
def test_joint_gradient_matches_autograd_and_the_profile_gradient(p, q):
    g = torch.Generator().manual_seed(3)
    x = (2 * torch.randn((64, 3), generator=g, dtype=F64)).requires_grad_(True)
    (ref,) = torch.autograd.grad(loss_with_bias(x[:, :2], x[:, 2], p, q).sum(), x)
    x = x.detach()
    assert torch.allclose(joint_gradient(x[:, :2], x[:, 2], p, q), ref, atol=1e-12)
    b = optimal_bias(x[:, :2], p, q)
    gj = joint_gradient(x[:, :2], b, p, q)
    assert torch.allclose(gj[:, :2], grad_loss(x[:, :2], p, q), atol=1e-12)
    assert gj[:, 2].abs().max() < 1e-12
    assert torch.equal(bias_gradient(x[:, :2], x[:, 2], p, q), joint_gradient(x[:, :2], x[:, 2], p, q)[:, 2])


def test_no_bias_step_leaves_the_local_minimum_line(one_thread):
    """Issue 19's literal reading ("from the local minimum a bias step moves the model to the global
    basin") fails: on e = 0 the (e, w) gradient is zero for every b, so joint descent with any number
    of bias steps never leaves it."""
    p, q = 0.5, 0.8
    th = torch.tensor([[0.0, -0.3], [0.0, 0.4]], dtype=F64)
    for b in (-3.0, 0.0, math.log(p / q), 2.0):
        assert joint_gradient(th, b, p, q)[:, :2].abs().max() == 0.0
    end, _ = descend(th, -3.0, p, q, lr=0.5, steps=200, extra_bias_steps=5)
    assert end[:, 0].abs().max() == 0.0
    assert (limit_kind(end, p, q) == LOCAL).all()


def test_bias_step_lowers_the_excess_and_descent_variants_agree_at_the_optimal_bias(one_thread):
    p, q = 0.2, 0.3
    th = torch.tensor([[0.8, -0.4], [1.2, 0.5], [0.3, -1.1]], dtype=F64)
    b = torch.zeros(3, dtype=F64)
    ex0 = bias_excess(th, b, p, q)
    assert (ex0 > 0).all()
    # The logistic loss has curvature <= 1/4 in b: a step of 4 is a descent step.
    assert (bias_excess(th, bias_step(th, b, p, q, 4.0), p, q) < ex0).all()
    assert torch.allclose(bias_excess(th, optimal_bias(th, p, q), p, q), torch.zeros(3, dtype=F64), atol=1e-14)
    assert torch.allclose(loss(th, p, q) + ex0, loss_with_bias(th, b, p, q), atol=1e-14)
    # From b0 = b*(theta0), profile descent and descent with many extra bias steps end together.
    t_prof, b_prof = descend(th, 0.0, p, q, lr=0.1, steps=100, extra_bias_steps=None)
    t_many, b_many = descend(th, optimal_bias(th, p, q), p, q, lr=0.1, steps=100, extra_bias_steps=30)
    assert torch.allclose(t_prof, t_many, atol=1e-3) and torch.allclose(b_prof, b_many, atol=1e-3)


def test_one_bias_step_moves_a_stale_point_from_the_local_to_the_global_basin(one_thread):
    """p + q > 1, theta0 in I_* (0.1 above the boundary |e| = g(w) at w = -0.4) with the bias 1 nat below
    b*(theta0). The joint flow of Eq. (26) (closed-form gradient, integrated) ends at the local minimum:
    the stale bias drains the energy below E_sad (dE/dt = 2 e^2 dL/db < 0). After one gradient step on
    the bias (step 4 = 1 / the bias curvature bound) the same flow ends at a global minimum, where Thm. 2
    (profile loss) puts theta0."""
    p, q = 0.5, 0.8
    w0 = -0.4
    th0 = torch.tensor([[float(icommon_boundary(torch.tensor(w0))) + 0.1, w0]], dtype=F64)
    assert int(predict_basin(th0, p, q)) == GLOBAL
    b0 = optimal_bias(th0, p, q) - 1.0
    before = run_joint_flow(th0, b0, p, q, [2000.0]).final
    assert int(limit_kind(before[:, :2], p, q)) == LOCAL
    b1 = bias_step(th0, b0, p, q, 4.0)
    assert float((b1 - optimal_bias(th0, p, q)).abs()) < 0.25  # the step closed most of the 1-nat gap
    after = run_joint_flow(th0, b1, p, q, [2000.0]).final
    assert int(limit_kind(after[:, :2], p, q)) == GLOBAL
    # The profile flow's energy is conserved; the stale flow's fell below the saddle's (why it ended local).
    e, w = before[0, 0], before[0, 1]
    assert float(e * e - w * w + torch.log(-w)) < ENERGY_SADDLE


def test_descend_refuses_bad_arguments():
    th = torch.zeros((1, 2), dtype=F64)
    with pytest.raises(ValueError, match="lr"):
        descend(th, 0.0, 0.2, 0.3, lr=0.0, steps=1)
    with pytest.raises(ValueError, match="extra_bias_steps"):
        descend(th, 0.0, 0.2, 0.3, lr=0.1, steps=1, extra_bias_steps=-1)
    with pytest.raises(ValueError, match="shape"):
        bias_gradient(torch.zeros(3, dtype=F64), 0.0, 0.2, 0.3)
    with pytest.raises(ValueError, match="open interval"):
        bias_gradient(th, 0.0, 1.0, 0.3)


def test_bias_step_basins_codes_and_profile_agrees_with_theory_mostly(one_thread):
    spec = _BiasStep(points=40, e_max=2.0, w_max=2.0, b0=0.0, lr=0.25, steps=400, atol=1e-2)
    res = bias_step_basins(0.2, 0.3, spec, torch.Generator().manual_seed(0))
    assert res["theta0"].shape == (40, 2)
    assert (res["theta0"].abs() <= 2.0).all()
    for k in ("theory", "k0", "k1", "profile"):
        assert res[k].shape == (40,)
    # Profile descent is the discretised flow of Thm. 8: it ends where the theorem says for most points.
    assert float((res["profile"] == res["theory"]).double().mean()) >= 0.9


def test_bias_step_agreement_counts_by_hand():
    """Six points whose codes are written out: the shares and counts are those of a slow loop."""
    G, L, N, S = (
        float(int(k)) for k in (CriticalKind.GLOBAL_MIN, CriticalKind.LOCAL_MIN, CriticalKind.NONE, CriticalKind.SADDLE)
    )
    k0 = np.array([G, L, L, G, S, L])
    k1 = np.array([G, G, L, N, S, G])
    prof = np.array([G, G, L, G, N, L])
    theory = np.array([G, G, G, G, S, L])
    agree1, s = bias_step_agreement(k0, k1, prof, theory)
    assert agree1.tolist() == [1.0, 1.0, 1.0, 0.0, 0.0, 0.0]
    pts = list(zip(k0, k1, prof, theory, strict=True))
    want = {
        "agree_k1_with_profile": sum(b == c for _, b, c, _ in pts) / 6,
        "agree_k0_with_profile": sum(a == c for a, _, c, _ in pts) / 6,
        "profile_agrees_with_flow_theory": sum(c == t for _, _, c, t in pts) / 6,
        "unsettled_fraction": sum(b == N or c == N for _, b, c, _ in pts) / 6,
        "k0_disagreements": sum(a != c for a, _, c, _ in pts),
        "k0_disagreements_fixed_by_one_step": sum(a != c and b == c for a, b, c, _ in pts),
        "k1_local_where_profile_global": sum(b == L and c == G for _, b, c, _ in pts),
        "k0_local_where_profile_global": sum(a == L and c == G for a, _, c, _ in pts),
        "unclassified_k1": sum(b == N for _, b, _, _ in pts),
    }
    assert s.keys() == want.keys()
    for k, v in want.items():
        assert math.isclose(s[k], v), k
    assert want["k0_disagreements"] == 2 and want["k0_disagreements_fixed_by_one_step"] == 1


# --- the bias step on a model's logits s + b (markov-rank's full-model check) ---------------------------


def test_bias_step_from_logits_at_zero_logits_is_the_closed_form_and_matches_a_direct_loss():
    """With s = 0 the optimum is b* = log(ȳ / (1 − ȳ)) per member; with any s, b* zeroes the direct
    cross-entropy's derivative, the excesses are the direct differences, and the step is b − lr·(σ̄ − ȳ)."""
    g = torch.Generator().manual_seed(3)
    y = (torch.rand(2, 16, 9, generator=g) < torch.tensor([0.3, 0.8]).view(2, 1, 1)).long()
    b = torch.tensor([0.4, -1.0], dtype=F64)
    r = bias_step_from_logits(torch.zeros(2, 16, 9, dtype=F64), y, b, 0.5)
    ybar = y.double().mean((1, 2))
    assert torch.allclose(r["b_star"], torch.log(ybar / (1 - ybar)), atol=1e-10)
    s = torch.randn(2, 16, 9, generator=g, dtype=F64)
    r = bias_step_from_logits(s, y, b, 0.5)

    def direct(bb: torch.Tensor) -> torch.Tensor:
        z = s + bb[:, None, None]
        return torch.stack(
            [torch.nn.functional.binary_cross_entropy_with_logits(z[m], y[m].double()) for m in range(2)]
        )

    bs = r["b_star"].clone().requires_grad_(True)
    (grad,) = torch.autograd.grad(direct(bs).sum(), bs)
    assert grad.abs().max() < 1e-10
    low = direct(r["b_star"])
    assert torch.allclose(r["excess_before"], direct(b) - low, atol=1e-12)
    assert torch.allclose(r["excess_after"], direct(r["b_after"]) - low, atol=1e-12)
    mean_sig = torch.sigmoid(s + b[:, None, None]).mean((1, 2))
    assert torch.allclose(r["b_after"], b - 0.5 * (mean_sig - ybar), atol=1e-12)
    assert torch.equal(r["b"], b) and (r["excess_after"] < r["excess_before"]).all() and (r["excess_after"] >= 0).all()

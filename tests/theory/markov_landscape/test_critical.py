"""Checks of tdlab.theory.markov_landscape.critical: Thm. 1's and Thm. 10's critical sets have zero
gradient, the stated loss values and codes, the stated nature by perturbation, and there are no others."""

from __future__ import annotations

import math

import numpy as np
import torch

from tdlab.tasks.markov import entropy_rate, marginal_entropy
from tdlab.theory import markov_landscape as ml
from tdlab.theory.markov_landscape import CriticalKind as CK

F64 = torch.float64


def test_thm1_critical_sets_gradient_loss_values_and_codes(side):
    p, q = side
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


def test_thm1_nature_of_critical_points_by_perturbation(side):
    p, q = side
    """Local minima / maxima / saddle per Thm. 1 by the loss on a ring of radius 1e-3 (independent of
    the Hessian of Lemma 8): w-axis points are flat along w, so compare with <= / >=."""
    g = torch.Generator().manual_seed(7)
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


def test_thm1_no_other_critical_points_on_a_grid(side):
    p, q = side
    """Every grid point with a vanishing gradient is in one of Thm. 1's sets (loose tolerance)."""
    e, w = torch.meshgrid(torch.linspace(-3, 3, 301, dtype=F64), torch.linspace(-3, 3, 301, dtype=F64), indexing="ij")
    th = torch.stack([e, w], dim=-1).reshape(-1, 2)
    gnorm = ml.grad_loss(th, p, q).norm(dim=-1)
    crit = gnorm < 1e-8
    assert int(crit.sum()) > 0
    assert bool((ml.classify_critical(th[crit], p, q, atol=1e-3) != int(CK.NONE)).all())
    noncrit = ml.classify_critical(th, p, q, atol=0.05) == int(CK.NONE)
    assert gnorm[noncrit].min().item() > 1e-6


def test_thm10_critical_sets_with_attention(side):
    p, q = side
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
    d = ml.loss(c + 1e-3 * torch.randn(500, 3, generator=torch.Generator().manual_seed(8), dtype=F64), p, q) - ml.loss(
        c, p, q
    )
    assert d.min().item() < 0 < d.max().item()

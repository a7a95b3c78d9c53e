"""Seed 004 App. F.3–F.5 landscape: the closed-form case terms against an independent enumeration
of the population expectation, against Monte Carlo over sampled documents, Remark 5's dependence on
γ alone, the constants λ1..λ5 (statement and proof versions) at the paper's masking, and the
refined minimisers against dense grids."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from tdlab.theory import topics_landscape as tl

M = tl.Masking(0.15, 0.1, 0.1)


def population_loss(kind: str, alpha: float, beta: float, T: int, v: int, tau: int, m: tl.Masking) -> float:
    """F.21's loss by brute force, written independently of the case analysis: fix the document's
    topics (0..τ−1, by symmetry), enumerate the target word w (uniform over the document's words) and
    the input word s at a masked position (w with p_c, each word of [Tv] with p_r/(Tv); [MASK]
    contributes nothing), build the attention column from the masked-document distribution (F.17)
    with weights β / α / 1 normalised over word keys, apply the value map and sum the squared errors."""
    V = T * v + 1
    topic = [None] + [(i - 1) // v for i in range(1, V)]
    doc = set(range(tau))
    p = np.zeros(V)
    for i in range(1, V):
        p[i] = (1 - (1 - m.p_c) * m.p_m) / (v * tau) * (topic[i] in doc) + m.p_m * m.p_r / (v * T)
    c = 1.0 / (1 - (1 - m.p_c) * m.p_m)
    q = lambda x: c * x - c * m.p_m * m.p_r / (T * v)  # noqa: E731

    def output(s: int) -> np.ndarray:
        wts = np.array([0.0] + [beta if j == s else alpha if topic[j] == topic[s] else 1.0 for j in range(1, V)])
        y = wts * p / (wts * p).sum()
        out = np.zeros(V)
        for i in range(1, V):
            if kind == "block":
                out[i] = q(np.mean([y[j] for j in range(1, V) if topic[j] == topic[i]]))
            else:
                out[i] = q(y[i])
        return out

    outs = {s: output(s) for s in range(1, V)}
    total = 0.0
    for w in range(1, V):
        if topic[w] not in doc:
            continue
        for s, prob in [(w, m.p_c)] + [(u, m.p_r / (T * v)) for u in range(1, V)]:
            e = np.zeros(V)
            e[w] = 1.0
            total += prob / (v * tau) * float(((outs[s] - e) ** 2).sum())
    return total


@pytest.mark.parametrize("kind", ["block", "diagonal"])
@pytest.mark.parametrize("T,v,tau", [(3, 2, 1), (4, 3, 2), (5, 2, 3)])
def test_closed_form_equals_enumerated_population_loss(kind, T, v, tau):
    fn = tl.block_loss if kind == "block" else tl.diagonal_loss
    m = tl.Masking(0.3, 0.2, 0.25)  # p_c ≠ p_r so a swapped case probability would show
    for alpha, beta in [(1.0, 1.0), (0.3, 40.0), (7.0, 2.0), (1e-3, 1e4)]:
        ref = population_loss(kind, alpha, beta, T, v, tau, m)
        assert float(fn(alpha, beta, T, v, tau, m)) == pytest.approx(ref, rel=1e-12, abs=0)


MC_POINTS = [(1.0, 1.0), (0.2, 30.0), (5.0, 3.0)]


@pytest.fixture(scope="module")
def monte_carlo():
    # Small T, v, τ = 3, 2, 2; 1.6e7 sampled words shared by both maps: standard error ≈ 0.2 %.
    return tl.monte_carlo_losses(
        MC_POINTS, 3, 2, 2, N=40_000, docs=400, generator=torch.Generator().manual_seed(7), m=M
    )


@pytest.mark.parametrize("kind", ["block", "diagonal"])
def test_closed_form_matches_monte_carlo_within_one_percent(monte_carlo, kind):
    est, se = monte_carlo[kind]
    fn = tl.block_loss if kind == "block" else tl.diagonal_loss
    for (a, b), x, s in zip(MC_POINTS, est, se, strict=True):
        L = float(fn(a, b, 3, 2, 2, M))
        assert abs(x - L) / L <= 0.01, (kind, a, b, x, L)
        assert abs(x - L) <= 4 * s, (kind, a, b, x, L, s)  # and statistically consistent with its own error
        assert s / L < 0.004


def test_monte_carlo_sees_a_wrong_map():
    # The estimator is sensitive enough to tell the two maps apart where they differ (α ≠ β).
    res = tl.monte_carlo_losses(
        [(0.2, 30.0)], 3, 2, 2, N=10_000, docs=50, generator=torch.Generator().manual_seed(1), m=M
    )
    d = float(tl.diagonal_loss(0.2, 30.0, 3, 2, 2, M))
    b = float(tl.block_loss(0.2, 30.0, 3, 2, 2, M))
    assert abs(d - b) / d > 0.05
    assert abs(res["diagonal"][0][0] - d) < abs(res["diagonal"][0][0] - b)
    assert tl.monte_carlo_loss("block", 0.2, 30.0, 3, 2, 2, 2000, 4, torch.Generator().manual_seed(0), M)[1] > 0


def test_remark5_block_loss_depends_on_gamma_only():
    T, v, tau = 100, 300, 40
    g = torch.Generator().manual_seed(0)
    a = 10 ** (torch.rand(500, generator=g, dtype=torch.float64) * 11 - 4)
    b = 10 ** (torch.rand(500, generator=g, dtype=torch.float64) * 11 - 4)
    L = tl.block_loss(a, b, T, v, tau, M)
    Lg = tl.block_loss_gamma(tl.gamma_of(a, b, v), T, v, tau, M)
    assert float(((L - Lg).abs() / Lg).max()) < 1e-12
    # two (α, β) with the same γ: same loss; the diagonal map does not share this
    a1, b1 = 2.0, 5000.0
    gam = tl.gamma_of(a1, b1, v)
    a2 = 10.0
    b2 = v * gam - (v - 1) * a2
    assert float(tl.block_loss(a1, b1, T, v, tau, M)) == pytest.approx(
        float(tl.block_loss(a2, b2, T, v, tau, M)), rel=1e-13
    )
    assert abs(float(tl.diagonal_loss(a1, b1, T, v, tau, M)) - float(tl.diagonal_loss(a2, b2, T, v, tau, M))) > 1e-4


def test_uniform_attention_maps_agree():
    # α = β = 1: attention uniform over word keys, every present word has the same y: both maps predict the same.
    for tau in (1, 5, 9):
        assert float(tl.block_loss(1.0, 1.0, 10, 7, tau, M)) == pytest.approx(
            float(tl.diagonal_loss(1.0, 1.0, 10, 7, tau, M)), rel=1e-13
        )


def test_lambdas_at_the_paper_masking():
    k = 0.9 * 0.15  # (1 − p_c) p_m
    assert tl.lambda1(M, "statement") == pytest.approx(0.5773, abs=5e-5)
    assert tl.lambda1(M, "proof") == pytest.approx(0.3713, abs=5e-5)
    c4 = 1 / (1 - k)
    assert tl.c4(M) == pytest.approx(1.1561, abs=5e-5)
    assert tl.lambda1(M, "proof") == pytest.approx((1 + c4 * 0.015) * (2 - c4) / (2 * c4), rel=1e-14)
    assert tl.lambda2(M) == pytest.approx(100 * (0.865 / 0.015 + 1), rel=1e-14)  # 5866.67
    assert tl.lambda2(M) == pytest.approx(100 * (1 / c4 + 0.015) / 0.015, rel=1e-14)  # the proof's form
    v = 300
    assert tl.lambda3(v, M) == pytest.approx((1 + c4 * 0.015) * v / (100 * c4), rel=1e-14)  # statement = proof
    s = math.sqrt(v - 1) - 2 + k
    tail = (1 - 0.8 * 0.15) / 0.015 * v
    assert tl.lambda4(v, M, "statement") == pytest.approx(0.865 / s * tail, rel=1e-14)
    c7 = (1 / c4) * (math.sqrt(v - 1) - 1 / c4 - 1)
    assert tl.lambda4(v, M, "proof") == pytest.approx(c7 * (1 / (c4 * 0.015) + 1) * v, rel=1e-13)
    assert tl.lambda4(v, M, "proof") / tl.lambda4(v, M, "statement") == pytest.approx(s * s, rel=1e-13)
    assert tl.lambda5(v, M) == pytest.approx(c4 / (v - 1), rel=1e-14)
    assert tl.thm3_interval(100, 20, M, "proof") == pytest.approx((19 * tl.lambda1(M, "proof"), 100 * tl.lambda2(M)))
    assert tl.thm5_interval(100, v, 20, M, "statement") == pytest.approx(
        (20 * tl.lambda3(v, M), 100 * tl.lambda4(v, M))
    )


def test_gamma_star_and_diagonal_minimum_against_dense_grids():
    T, v, tau = 100, 300, 20
    g, Lg = tl.gamma_star(T, v, tau, M)
    dense = tl.log_grid(g / 1.05, g * 1.05, 20001)
    Ld = tl.block_loss_gamma(dense, T, v, tau, M)
    assert Lg <= float(Ld.min()) + 1e-15
    assert g == pytest.approx(float(dense[int(torch.argmin(Ld))]), rel=2e-5)
    a, b, L = tl.diagonal_minimum(T, v, tau, M)
    assert a == pytest.approx(1e-4)  # flat in α: the box edge
    bb = tl.log_grid(b / 1.1, b * 1.1, 20001)
    Lb = tl.diagonal_loss(1e-4, bb, T, v, tau, M)
    assert float(Lb.min()) + 1e-15 >= L
    assert b == pytest.approx(float(bb[int(torch.argmin(Lb))]), rel=2e-5)
    grid = tl.log_grid(1e-4, 1e7, 60)
    assert float(tl.landscape("diagonal", grid, grid, T, v, tau, M).min()) >= L


def test_landscape_minimisers_read_the_maps_of_one_tau():
    """Against the maps themselves: Remark 5's γ-form equals the block map on the grid; the γ curve is the block
    loss of its grid; the refined minimisers are no worse than the grids' argmins (γ* at the curve's argmin);
    the uniform-attention losses are the maps at α = β = 1."""
    T, v, tau, n = 100, 300, 40, 50
    grid = tl.log_grid(1e-4, 1e7, n)
    block = tl.landscape("block", grid, grid, T, v, tau, M)
    diag = tl.landscape("diagonal", grid, grid, T, v, tau, M)
    r = tl.landscape_minimisers(grid, diag, T, v, tau, M, 1e-4, 1e7, 801)
    assert float(((block - r["block_via_gamma"]).abs() / block.abs()).max()) < 1e-12
    assert r["gamma_curve_g"].shape == (801,) and float(r["gamma_curve_g"][-1]) == pytest.approx(1e7)
    assert r["gamma_curve"].tolist() == pytest.approx(
        [float(tl.block_loss_gamma(x, T, v, tau, M)) for x in r["gamma_curve_g"]]
    )
    curve_min = int(torch.argmin(r["gamma_curve"]))
    assert r["gamma_star"] == pytest.approx(float(r["gamma_curve_g"][curve_min]), rel=0.05)
    assert r["gamma_star_loss"] <= float(r["gamma_curve"].min()) <= float(block.min())
    assert r["diag_star_loss"] <= float(diag.min())
    assert r["diag_star_loss"] == pytest.approx(
        float(tl.diagonal_loss(r["diag_alpha_star"], r["diag_beta_star"], T, v, tau, M))
    )
    assert r["block_uniform"] == float(tl.block_loss(1.0, 1.0, T, v, tau, M))
    assert r["block_uniform"] == pytest.approx(r["diag_uniform"], rel=1e-13)  # both maps agree at uniform attention


def test_landscape_orientation_and_shapes():
    al, be = tl.log_grid(1e-2, 1e2, 5), tl.log_grid(1e-1, 1e3, 7)
    G = tl.landscape("diagonal", al, be, 10, 5, 3, M)
    assert G.shape == (7, 5) and G.dtype == torch.float64
    assert float(G[6, 1]) == pytest.approx(float(tl.diagonal_loss(al[1], be[6], 10, 5, 3, M)), rel=1e-15)


@pytest.mark.parametrize(
    "call,match",
    [
        (lambda: tl.block_loss(1.0, 1.0, 10, 5, 10, M), "tau"),
        (lambda: tl.diagonal_loss(1.0, 1.0, 10, 5, 0, M), "tau"),
        (lambda: tl.Masking(1.2, 0.1, 0.1), "p_m"),
        (lambda: tl.Masking(0.15, 0.6, 0.5), "p_c \\+ p_r"),
        (lambda: tl.lambda1(M, "paper"), "version"),
        (lambda: tl.landscape("full", [1.0], [1.0], 10, 5, 2, M), "kind"),
        (lambda: tl.log_grid(1.0, 0.1, 10), "log grid"),
    ],
)
def test_bad_input_names_the_field(call, match):
    with pytest.raises(ValueError, match=match):
        call()


def test_assumption3_v():
    assert tl.assumption3_v(6, 0.15, 0.1) and not tl.assumption3_v(5, 0.15, 0.1)  # v > (1/0.865 + 1)² + 1 = 5.65


def test_equal_gamma_points_share_their_gamma():
    for a, b in tl.equal_gamma_points(0.7, 10, 0.1):
        assert float(tl.gamma_of(a, b, 10)) == pytest.approx(0.7)


def test_flat_halfwidth_of_a_parabola():
    # f = 1 + (log10 x)^2: f(x 10^±δ) − f(1) = δ² ≤ rel → δ = √rel
    f = lambda x: 1.0 + math.log10(x) ** 2  # noqa: E731
    assert tl.flat_halfwidth(f, 1.0, 1e-8) == pytest.approx(1e-4, rel=1e-3)
    assert tl.flat_halfwidth(lambda x: 1.0, 1.0, 1e-8) == 4.0  # flat everywhere: the search's upper end

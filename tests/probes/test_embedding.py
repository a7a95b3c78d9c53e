"""Embedding probes on built inputs: Gaussian bumps (ordered), random vectors (chance), known spectra; Eq. 14's
member cosines against its closed form, and a measured cosine matrix's agreement with a theory's against scipy."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from scipy.stats import spearmanr

from tdlab.probes.embedding import (
    anchor_cosine_readings,
    cosine_agreement,
    cosine_matrix,
    distance_spearman,
    eq14_member_cosines,
    erank,
    error_by_distance,
    mean_pairwise_cosine,
    nn_order,
    offdiag_mean,
    pair_abs_error,
    pair_indices,
    pair_spearman,
    pca,
    positional_cosine_readings,
    spearman_rows,
)
from tdlab.theory.anchors import eq14_cosine, eq14_vectors

F64 = torch.float64


def _bumps(n: int, d: int = 200, start: int = 30) -> torch.Tensor:
    return eq14_vectors(list(range(start, start + n)), d, kind="key")  # e^{-(i-s)^2/12}


def test_cosine_and_offdiag():
    w = torch.tensor([[1.0, 0.0], [1.0, 1.0], [0.0, 2.0]])
    c = cosine_matrix(w)
    r = 1 / math.sqrt(2)
    assert torch.allclose(c, torch.tensor([[1, r, 0], [r, 1, r], [0, r, 1]], dtype=F64))
    assert float(offdiag_mean(c)) == pytest.approx(4 * r / 6)
    assert float(offdiag_mean(-c, absolute=True)) == pytest.approx(4 * r / 6)


def test_spearman_on_bumps_and_against_scipy():
    w = _bumps(10)
    assert float(distance_spearman(w)) == pytest.approx(-1.0, abs=1e-12)  # cos strictly falls with |i-j|
    rnd = torch.randn(3, 12, 20, generator=torch.Generator().manual_seed(0), dtype=F64)
    ids = torch.arange(11, 23)
    got = distance_spearman(rnd, ids)
    i, j = np.triu_indices(12, 1)
    for e in range(3):
        c = np.round(cosine_matrix(rnd[e]).numpy(), 12)
        want = spearmanr(c[i, j], np.abs(ids.numpy()[i] - ids.numpy()[j])).statistic
        assert float(got[e]) == pytest.approx(want, abs=1e-12)


def test_nn_order_bumps_and_chance():
    assert float(nn_order(_bumps(100))) == 1.0
    # shuffled ids destroy the order
    perm = torch.randperm(100, generator=torch.Generator().manual_seed(1))
    assert float(nn_order(_bumps(100), ids=perm)) < 0.1
    # random vectors: chance 2/n, averaged over 400 members
    n = 20
    rnd = torch.randn(400, n, 50, generator=torch.Generator().manual_seed(2), dtype=F64)
    share = nn_order(rnd)
    assert share.shape == (400,)
    se = math.sqrt((2 / n) * (1 - 2 / n) / (400 * n))  # rough: rows treated as independent
    assert abs(float(share.mean()) - 2 / n) < 4 * se


def test_erank_known_spectra():
    g = torch.Generator().manual_seed(3)
    u, _ = torch.linalg.qr(torch.randn(30, 30, generator=g, dtype=F64))
    v, _ = torch.linalg.qr(torch.randn(20, 20, generator=g, dtype=F64))
    for s in ([1.0] * 20, [5.0] + [0.0] * 19, [3.0, 1.0] + [0.0] * 18, [2.0**-k for k in range(20)]):
        sv = torch.tensor(s, dtype=F64)
        w = u[:, :20] @ torch.diag(sv) @ v.T
        p = sv[sv > 0] / sv.sum()
        want = math.exp(float(-(p * p.log()).sum()))
        assert float(erank(w)) == pytest.approx(want, rel=1e-9)
    assert float(erank(torch.eye(7, dtype=F64))) == pytest.approx(7.0)
    assert erank(torch.randn(4, 6, 5, generator=g)).shape == (4,)


def test_pca_recovers_a_line_and_order():
    # points on a line in R^10 plus small noise: PC1 carries almost everything and keeps the order
    g = torch.Generator().manual_seed(4)
    direction = torch.randn(10, generator=g, dtype=F64)
    direction /= direction.norm()
    t = torch.linspace(-3, 3, 15, dtype=F64)
    w = t[:, None] * direction[None, :] + 0.01 * torch.randn(15, 10, generator=g, dtype=F64) + 5.0
    coords, explained, comps = pca(w, 2)
    assert coords.shape == (15, 2) and explained.shape == (2,) and comps.shape == (2, 10)
    assert float(explained[0]) > 0.999
    assert abs(float(comps[0] @ direction)) > 0.999
    assert bool((coords[1:, 0] > coords[:-1, 0]).all())
    # members carried through
    assert pca(torch.stack([w, w]), 2)[0].shape == (2, 15, 2)


def test_bad_input():
    with pytest.raises(ValueError, match="n >= 3"):
        distance_spearman(torch.randn(2, 4))
    with pytest.raises(ValueError, match="ids"):
        nn_order(torch.randn(5, 4), ids=[1, 2, 3])
    with pytest.raises(ValueError, match="shape"):
        cosine_matrix(torch.randn(5))
    with pytest.raises(ValueError, match="k="):
        pca(torch.randn(3, 4), 5)


def test_spearman_rows_and_pair_indices():
    assert spearman_rows(torch.tensor([[1.0, 2.0, 3.0], [3.0, 2.0, 1.0]]), torch.arange(3)).tolist() == pytest.approx(
        [1.0, -1.0]
    )
    x = torch.randn(3, 7, generator=torch.Generator().manual_seed(0))
    y = torch.randn(7, generator=torch.Generator().manual_seed(1))
    assert spearman_rows(x, y).tolist() == pytest.approx([spearmanr(r.numpy(), y.numpy())[0] for r in x], abs=1e-12)
    i, j = pair_indices(4)
    assert list(zip(i.tolist(), j.tolist(), strict=True)) == [(0, 1), (0, 2), (0, 3), (1, 2), (1, 3), (2, 3)]


def test_pair_spearman_and_pair_error_of_cosine_matrices():
    a = torch.tensor([[1.0, 0.9, 0.1], [0.9, 1.0, 0.5], [0.1, 0.5, 1.0]])
    assert float(pair_spearman(a, a)) == pytest.approx(1.0)
    assert float(pair_spearman(-a, a)) == pytest.approx(-1.0)
    # an order-preserving map keeps the Spearman at 1 while the values move: only the error sees it
    assert float(pair_spearman(a**3, a)) == pytest.approx(1.0)
    assert float(pair_abs_error(a**3, a)) == pytest.approx(np.mean([0.9 - 0.729, 0.1 - 0.001, 0.5 - 0.125]))
    assert pair_abs_error(torch.stack([a, a**3]), a).tolist() == pytest.approx([0.0, float(pair_abs_error(a**3, a))])


def test_mean_pairwise_cosine_on_planted_embeddings():
    d, n, theta = 32, 8, 0.7
    W = torch.zeros(2, 20, d, dtype=torch.float64)
    W[:, :n] = torch.eye(d, dtype=torch.float64)[:n] * torch.tensor([1.0, 3.0], dtype=torch.float64).view(2, 1, 1)
    e0 = torch.eye(d, dtype=torch.float64)[n]
    for i in range(n):  # cos(v_i, v_j) = cos²θ for i ≠ j, whatever the norms
        W[:, 10 + i] = (i + 1) * (math.cos(theta) * e0 + math.sin(theta) * torch.eye(d, dtype=torch.float64)[n + 1 + i])
    assert mean_pairwise_cosine(W, range(n)) == pytest.approx([0.0, 0.0], abs=1e-12)
    assert mean_pairwise_cosine(W, range(10, 10 + n)) == pytest.approx([math.cos(theta) ** 2] * 2, rel=1e-12)
    mixed = [0, 1, 10, 11]  # pairs: 1 orthogonal, 1 at cos²θ, 4 at cos θ · 0 = 0 -> mean over 6 ordered-pair classes
    assert mean_pairwise_cosine(W, mixed) == pytest.approx([math.cos(theta) ** 2 / 6] * 2, rel=1e-12)
    with pytest.raises(ValueError):
        mean_pairwise_cosine(W, [3])


def test_error_by_distance_averages_each_diagonal():
    m = torch.zeros(1, 4, 4, dtype=torch.float64)
    t = torch.zeros(4, 4, dtype=torch.float64)
    m[0, 0, 1], m[0, 1, 2], m[0, 2, 3] = 0.1, 0.3, -0.2  # |Δ| = 1
    m[0, 0, 3] = 0.5  # |Δ| = 3
    e = error_by_distance(m, t)
    assert e[1] == pytest.approx([0.2]) and e[2] == pytest.approx([0.0]) and e[3] == pytest.approx([0.5])


def test_positional_cosine_readings_on_a_table_that_is_assumption4():
    """Rows (cos(πi/L), sin(πi/L)) have cos(w_i, w_j) = cos(π|i − j|/L) exactly (Assumption 4): the rank
    correlation with it is 1, with |i − j| is −1; rows past L − 1 are not read, a second member
    is read apart."""
    L = 8
    i = torch.arange(0, L + 3, dtype=F64)  # row 0 and rows past L − 1 are not read
    table = torch.stack([torch.cos(math.pi * i / L), torch.sin(math.pi * i / L)], -1)
    noise = torch.randn(L + 3, 2, generator=torch.Generator().manual_seed(0), dtype=F64)
    r = positional_cosine_readings(torch.stack([table, noise]), L)
    assert r["pos_vs_assumption4"][0] == pytest.approx(1.0)
    assert r["pos_rho"][0] == pytest.approx(-1.0)
    assert r["pos_rho"][1] == pytest.approx(float(distance_spearman(noise[: L - 1])))
    avg = (cosine_matrix(table[: L - 1]) + cosine_matrix(noise[: L - 1])) / 2
    assert torch.allclose(torch.tensor(r["pos_cos"], dtype=F64), avg)


def test_anchor_cosine_readings_on_a_built_table():
    """Memory rows all equal (cosine 1), reasoning rows Gaussian bumps over their ids (ordered: ρ = −1 with
    distance), read against their own cosines (Spearman 1, error 0) and against the negated ones (Spearman −1)."""
    d, mem, rsn = 200, (3, 7), (10, 19)
    W = torch.zeros(2, 25, d, dtype=F64)
    W[:, mem[0] : mem[1] + 1] = torch.randn(d, generator=torch.Generator().manual_seed(0), dtype=F64)
    W[:, rsn[0] : rsn[1] + 1] = _bumps(10)
    own = cosine_matrix(_bumps(10))
    r = anchor_cosine_readings(W, mem, rsn, own)
    assert r["mem_cos"] == pytest.approx([1.0, 1.0]) and r["mem_abs_cos"] == pytest.approx([1.0, 1.0])
    assert r["rsn_cos"] == pytest.approx([float(offdiag_mean(own))] * 2)
    assert r["rsn_abs_cos"] == pytest.approx(r["rsn_cos"])  # bumps: every cosine ≥ 0
    assert r["rsn_rho"] == pytest.approx([-1.0, -1.0])
    assert r["theory_spearman"] == pytest.approx([1.0, 1.0]) and r["theory_abs_err"] == pytest.approx([0.0, 0.0])
    assert anchor_cosine_readings(W, mem, rsn, -own)["theory_spearman"] == pytest.approx([-1.0, -1.0])
    assert "theory_spearman" not in anchor_cosine_readings(W, mem, rsn)


def test_eq14_member_cosines_without_noise_match_the_closed_form():
    c = eq14_member_cosines([20, 22, 25], 200, gamma=50.0, seeds=[1, 2])  # d^-50: no noise
    assert c.shape == (2, 3, 3)
    for i, j in ((0, 1), (0, 2), (1, 2)):
        d = abs([20, 22, 25][i] - [20, 22, 25][j])
        assert float(c[0, i, j]) == pytest.approx(float(eq14_cosine(d, 200)), abs=1e-6)
    noisy = eq14_member_cosines([20, 22, 25], 200, gamma=0.3, seeds=[1, 2])
    assert not torch.allclose(noisy[0], noisy[1])  # one draw per member


def test_cosine_agreement_against_scipy_and_a_loop_over_pairs():
    g = torch.Generator().manual_seed(4)
    measured = cosine_matrix(torch.randn(3, 6, 5, generator=g, dtype=torch.float64))
    own = cosine_matrix(torch.randn(3, 6, 5, generator=g, dtype=torch.float64))  # one theory per member
    shared = own[0]
    i, j = np.triu_indices(6, 1)
    for theory in (own, shared):
        got = cosine_agreement(measured, theory)
        for m in range(3):
            th = (theory[m] if theory.dim() == 3 else theory).numpy()
            a, b = measured[m].numpy()[i, j], th[i, j]
            assert got["abs_err"][m] == pytest.approx(np.mean(np.abs(a - b)), rel=1e-12)
            assert got["spearman"][m] == pytest.approx(spearmanr(a, b).statistic, rel=1e-9)
            for d in range(1, 6):
                on = (j - i) == d
                assert got["error_by_distance"][d][m] == pytest.approx(np.mean(np.abs(a[on] - b[on])), rel=1e-12)

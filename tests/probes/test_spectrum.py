"""Spectral probes against known matrices (closed forms) and against numpy.linalg.svd."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from tdlab.probes.spectrum import (
    abs_cosine,
    embedding_alignment,
    gpt_weight_matrices,
    hypercube_spread,
    leading_singular_vectors,
    singular_values,
    singular_vector_cosines,
    spectra,
    sv_ratio,
    wv_spectrum,
)


def _unit(x: np.ndarray) -> np.ndarray:
    return x / np.linalg.norm(x, axis=-1, keepdims=True)


def test_exact_rank_one_gives_ratio_zero_and_its_factors_as_singular_vectors():
    rng = np.random.default_rng(0)
    E, m, n = 4, 32, 8
    u, v = rng.normal(size=(E, m)), rng.normal(size=(E, n))
    w = np.einsum("ei,ej->eij", u, v)  # W = u v^T, exactly rank one
    r = sv_ratio(torch.as_tensor(w))
    assert r.shape == (E,) and r.dtype == torch.float64
    assert r.numpy() == pytest.approx(np.zeros(E), abs=1e-12)
    u1, s1, v1 = leading_singular_vectors(w)
    assert s1.numpy() == pytest.approx(np.linalg.norm(u, axis=1) * np.linalg.norm(v, axis=1), rel=1e-12)
    assert abs_cosine(u1, u).numpy() == pytest.approx(np.ones(E), abs=1e-12)
    assert abs_cosine(v1, v).numpy() == pytest.approx(np.ones(E), abs=1e-12)
    # W v_1 = sigma_1 u_1 (one consistent sign per pair)
    wv = np.einsum("eij,ej->ei", w, v1.numpy())
    assert wv == pytest.approx(s1.numpy()[:, None] * u1.numpy(), abs=1e-10)


def test_known_diagonal_spectrum():
    w = torch.zeros(2, 3, 3)
    w[0] = torch.diag(torch.tensor([3.0, -1.5, 0.3]))  # singular values 3, 1.5, 0.3
    w[1] = torch.diag(torch.tensor([2.0, 2.0, 0.0]))
    assert singular_values(w).numpy() == pytest.approx(np.array([[3.0, 1.5, 0.3], [2.0, 2.0, 0.0]]), abs=1e-7)
    assert sv_ratio(w).numpy() == pytest.approx([0.5, 1.0], abs=1e-7)
    _, _, v1 = leading_singular_vectors(w[:1])
    assert np.abs(v1.numpy()[0]) == pytest.approx([1.0, 0.0, 0.0], abs=1e-7)


@pytest.mark.parametrize("shape", [(5, 8, 8), (3, 32, 8), (2, 8, 32), (1, 2, 2)])
def test_random_matrices_agree_with_numpy_svd(shape):
    rng = np.random.default_rng(sum(shape))
    w = rng.normal(size=shape)
    U, S, Vh = np.linalg.svd(w, full_matrices=False)
    assert singular_values(w).numpy() == pytest.approx(S, rel=1e-10, abs=1e-12)
    assert sv_ratio(torch.as_tensor(w, dtype=torch.float32)).numpy() == pytest.approx(S[:, 1] / S[:, 0], rel=1e-5)
    u1, s1, v1 = leading_singular_vectors(w)
    assert s1.numpy() == pytest.approx(S[:, 0], rel=1e-10)
    # same vectors up to a sign per member
    for e in range(shape[0]):
        sign = np.sign(U[e, :, 0] @ u1.numpy()[e])
        assert u1.numpy()[e] == pytest.approx(sign * U[e, :, 0], abs=1e-8)
        assert v1.numpy()[e] == pytest.approx(sign * Vh[e, 0], abs=1e-8)


def test_members_do_not_mix():
    rng = np.random.default_rng(1)
    w = rng.normal(size=(4, 6, 5))
    whole = sv_ratio(w).numpy()
    alone = np.array([float(sv_ratio(w[i : i + 1])[0]) for i in range(4)])
    assert whole == pytest.approx(alone, rel=1e-12)


def test_zero_matrix_has_no_ratio_and_bad_shapes_raise():
    assert math.isnan(float(sv_ratio(torch.zeros(1, 3, 3))[0]))
    with pytest.raises(ValueError, match="leading member axis"):
        sv_ratio(torch.zeros(3, 3))
    with pytest.raises(ValueError, match="min"):
        sv_ratio(torch.zeros(2, 5, 1))
    with pytest.raises(ValueError, match="same shape"):
        abs_cosine(torch.ones(2, 3), torch.ones(2, 4))


def test_abs_cosine_closed_forms():
    x = torch.tensor([[1.0, 0.0], [1.0, 1.0], [3.0, 4.0], [0.0, 0.0]])
    y = torch.tensor([[0.0, 2.0], [-2.0, -2.0], [4.0, 3.0], [1.0, 0.0]])
    c = abs_cosine(x, y).numpy()
    assert c[:3] == pytest.approx([0.0, 1.0, 24.0 / 25.0], abs=1e-12)  # orthogonal, antiparallel, 24/25
    assert math.isnan(c[3])
    rng = np.random.default_rng(2)
    a, b = rng.normal(size=(6, 8)), rng.normal(size=(6, 8))
    assert abs_cosine(a, b).numpy() == pytest.approx(np.abs(np.sum(_unit(a) * _unit(b), axis=1)), rel=1e-12)


def test_hypercube_spread():
    rng = np.random.default_rng(3)
    alpha = rng.choice([-1.0, 1.0], size=(5, 8))
    c = rng.uniform(0.1, 3.0, size=(5, 1))
    assert hypercube_spread(c * alpha).numpy() == pytest.approx(np.zeros(5), abs=1e-12)
    # |e| = (1, 3): mean 2, population std 1 -> 0.5; |e| = (1, 1, 1, 5): mean 2, std sqrt(3) -> sqrt(3)/2
    e = torch.tensor([[1.0, -3.0, 1.0, 3.0], [-1.0, 1.0, -1.0, 5.0]])
    assert hypercube_spread(e).numpy() == pytest.approx([0.5, math.sqrt(3) / 2], abs=1e-12)
    assert math.isnan(float(hypercube_spread(torch.zeros(1, 4))[0]))
    # Gaussian vector: half-normal magnitudes, std/mean = sqrt(pi/2 - 1)
    g = rng.normal(size=(1, 400_000))
    assert float(hypercube_spread(g)[0]) == pytest.approx(math.sqrt(math.pi / 2 - 1), abs=5e-3)


def test_embedding_alignment_reads_the_sides_of_the_embedding_dimension():
    g = np.random.default_rng(0)
    e = g.standard_normal((2, 4))
    v = g.standard_normal((2, 6))
    w = torch.tensor(np.einsum("ei,ej->eij", e, v) + 1e-3 * g.standard_normal((2, 4, 6)))  # ≈ e v^T, (E, d, n)
    a = embedding_alignment(w, torch.tensor(e))
    assert set(a) == {"left", "best"}  # only the left side is d-dimensional
    np.testing.assert_allclose(a["left"].numpy(), 1.0, atol=1e-4)
    np.testing.assert_allclose(a["best"].numpy(), a["left"].numpy())
    sq = torch.tensor(np.einsum("ei,ej->eij", v[:, :4], e))  # (E, d, d): e is the right factor
    b = embedding_alignment(sq, torch.tensor(e))
    assert set(b) == {"left", "right", "best"}
    np.testing.assert_allclose(b["right"].numpy(), 1.0, atol=1e-12)
    np.testing.assert_allclose(b["best"].numpy(), torch.maximum(b["left"], b["right"]).numpy())
    with pytest.raises(ValueError, match="embedding's dimension"):
        embedding_alignment(w, torch.zeros(2, 5))


def test_svd_finds_u_in_u_vT_plus_noise():
    g = torch.Generator().manual_seed(0)
    d_m, d_k = 16, 6
    u = torch.randn(d_m, generator=g, dtype=torch.float64)
    u /= u.norm()
    v = torch.randn(d_k, generator=g, dtype=torch.float64)
    W_paper = 5 * torch.outer(u, v) + 0.05 * torch.randn(d_m, d_k, generator=g, dtype=torch.float64)  # V = X W^V
    emb = torch.randn(1, 30, d_m, generator=g, dtype=torch.float64)
    emb[0, 10:20] = u + 0.05 * torch.randn(10, d_m, generator=g, dtype=torch.float64)  # "reasoning": along u
    emb[0, 0:10] -= (emb[0, 0:10] @ u)[:, None] * u  # "memory": orthogonal to u
    out = wv_spectrum(W_paper.T[None], emb, slice(10, 20), slice(0, 10))  # torch stores (d_k, d_m)
    assert out["sv_ratio"][0] > 20
    assert out["rsn_align"][0] > 0.99 and out["mem_align"][0] < 0.05


def test_spectra_of_built_matrices():
    g = torch.Generator().manual_seed(0)
    u, v = (
        torch.randn(2, 6, 1, generator=g, dtype=torch.float64),
        torch.randn(2, 1, 5, generator=g, dtype=torch.float64),
    )
    rank1 = u @ v
    eye = torch.eye(4, dtype=torch.float64).expand(2, 4, 4)
    s = spectra({"r1": rank1, "eye": eye})
    assert s["r1"]["erank"] == pytest.approx([1.0, 1.0], abs=1e-6)
    assert s["eye"]["erank"] == pytest.approx([4.0, 4.0])
    assert s["eye"]["sv"][0] == pytest.approx([1.0] * 4)
    # two singular values 2 : 1 -> p = (2/3, 1/3), erank = exp(H)
    m = torch.diag(torch.tensor([2.0, 1.0], dtype=torch.float64))[None]
    h = -(2 / 3 * math.log(2 / 3) + 1 / 3 * math.log(1 / 3))
    assert spectra({"m": m})["m"]["erank"] == pytest.approx([math.exp(h)])


def test_gpt_weight_matrices_name_every_matrix_of_the_model(anchors_gpt):
    model = anchors_gpt(0.8, [1, 2])
    st = model.state_dict()
    mats = gpt_weight_matrices(st, 2)
    assert len(mats) == 2 + 2 * 6 + 1  # W^emb, W^pos, six per layer, the untied W^out
    assert mats["W^V (layer 1)"] is st["blocks.0.attn.W_V.weight"] and mats["W^out"] is st["lm_head"]
    assert mats["W^f2 (layer 2)"] is st["blocks.1.mlp.W_2.weight"]
    assert all(v.shape[0] == 2 and v.dim() == 3 for v in mats.values())
    assert "W^out" not in gpt_weight_matrices({k: v for k, v in st.items() if k != "lm_head"}, 2)


def test_singular_vector_cosines_against_numpy():
    rng = np.random.default_rng(3)
    W, emb = rng.normal(size=(4, 12)), rng.normal(size=(30, 12))  # torch's (d_k, d_m) weight; (vocab, d_m)
    groups = [slice(0, 10), slice(10, 25)]
    got = singular_vector_cosines(torch.tensor(W), torch.tensor(emb), groups, k=3).numpy()
    _, _, vt = np.linalg.svd(W, full_matrices=False)  # rows: the right singular vectors, in the d_m space
    for r in range(3):
        for c, g in enumerate(groups):
            m = emb[g].mean(0)
            # a singular vector's sign is arbitrary: compare |cos|
            assert abs(got[r, c]) == pytest.approx(abs(vt[r] @ m) / np.linalg.norm(m), rel=1e-9)
    assert got.shape == (3, 2)

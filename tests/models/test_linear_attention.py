"""LSA (Eq. 4.2) and LCA_T (Eqs. 5.1-5.5) against the paper's formulas, and ensemble semantics."""

import pytest
import torch

from tdlab.models.linear_attention import LCA, LSA, per_prompt_reference
from tdlab.tasks.multimodal import MultiModalPrompts

F64 = torch.float64
VARIANTS = [
    dict(param="one"),
    dict(param="two", beta0=-0.05),
    dict(param="untied"),
    dict(param="diagonal"),
    dict(param="full"),
    dict(param="full", pre_ln=True),
    dict(param="two", attention="self"),
    dict(param="one", injection=False, f0="x"),
    dict(param="diagonal", readout="learned", pre_ln=True, attention="self"),
]


def batch(E=2, N=6, L=9, dims=(2, 3), seed=0):
    gens = [torch.Generator().manual_seed(seed + e) for e in range(E)]
    return MultiModalPrompts(dims=dims).sample(gens, N, L, dtype=F64)


@pytest.mark.parametrize("kw", VARIANTS, ids=lambda kw: "-".join(f"{k}={v}" for k, v in kw.items()))
def test_lca_matches_literal_paper_equations(kw):
    # Vectorised row-layout forward == per-prompt column-layout Eqs. (4.2), (5.2)-(5.5).
    b = batch()
    model = LCA(5, 3, seeds=[1, 2], alpha0=0.04, dtype=F64, **kw)
    y_hat, inter = model(b.X, b.y, b.x_query, return_intermediates=True)
    assert y_hat.shape == (2, 6) and len(inter["F"]) == 4 and inter["F"][-1].shape == (2, 6, 9, 5)
    assert torch.allclose(y_hat, per_prompt_reference(model, b.X, b.y, b.x_query), atol=1e-10)


def test_lsa_matches_literal_eq_4_2_and_c1_readout():
    b = batch()
    lsa = LSA(5, seeds=[1, 2], sigma_init=0.3, dtype=F64)
    assert lsa.W_PV.shape == (2, 6, 6)
    assert torch.allclose(lsa(b.X, b.y, b.x_query), per_prompt_reference(lsa, b.X, b.y, b.x_query), atol=1e-10)
    # Lemma C.1: with the App. C.1 weights the readout is y^T X^T x_q / L
    c1 = LSA(5, seeds=[1, 2], dtype=F64)
    expected = torch.einsum("enl,enld,end->en", b.y, b.X, b.x_query) / b.X.shape[-2]
    assert torch.allclose(c1(b.X, b.y, b.x_query), expected, atol=1e-12)


@pytest.mark.parametrize("param", ["one", "two", "untied", "diagonal", "full"])
def test_lemma_c2_closed_form(param):
    # Tied scalars: F_T = alpha sum_{k<T} M^k X, M = I + beta Lambda_hat, and
    # X F^T / L = (alpha/beta)[(I + beta Lambda_hat)^T - I] (Eqs. C.1, C.2). Untied etc. with
    # sigma_init=0 start at the same point, so the closed form holds for them at init too.
    b, T, alpha, beta = batch(E=1, L=12), 4, 0.07, -0.11
    beta = -alpha if param == "one" else beta
    model = LCA(5, T, seeds=[0], param=param, alpha0=alpha, beta0=beta, sigma_init=0.0, dtype=F64)
    _, inter = model(b.X, b.y, b.x_query, return_intermediates=True)
    X, L = b.X, b.X.shape[-2]
    lam = X.transpose(-1, -2) @ X / L
    M = torch.eye(5, dtype=F64) + beta * lam
    series = sum(torch.linalg.matrix_power(M, k) for k in range(T))
    assert torch.allclose(inter["F"][-1], alpha * X @ series, atol=1e-12)
    lhs = X.transpose(-1, -2) @ inter["F"][-1] / L
    assert torch.allclose(lhs, alpha / beta * (torch.linalg.matrix_power(M, T) - torch.eye(5, dtype=F64)), atol=1e-12)


def test_frozen_readout_is_lemma_c1():
    b = batch()
    model = LCA(5, 2, seeds=[0, 1], param="two", alpha0=0.1, beta0=-0.2, dtype=F64)
    y_hat, inter = model(b.X, b.y, b.x_query, return_intermediates=True)
    expected = torch.einsum("enl,enld,end->en", b.y, inter["F"][-1], b.x_query) / b.X.shape[-2]
    assert torch.allclose(y_hat, expected, atol=1e-12)
    assert [n for n, _ in model.named_parameters()] == ["alpha", "beta"]


@pytest.mark.parametrize("kw", [*VARIANTS, dict(param="full", sigma_init=0.5)], ids=str)
def test_member_i_equals_single_model_with_seed_i(kw):
    seeds = [7, 8, 9]
    ens = LCA(5, 3, seeds=seeds, alpha0=0.04, **kw)
    b = batch(E=3, dims=(2, 3)).to(dtype=torch.float32)
    y_ens = ens(b.X, b.y, b.x_query)
    for i, s in enumerate(seeds):
        single = LCA(5, 3, seeds=[s], alpha0=0.04, **kw)
        for (name, p_ens), (_, p_one) in zip(ens.named_parameters(), single.named_parameters(), strict=True):
            assert torch.equal(p_ens[i], p_one[0]), name
        bi = b.member(i)
        assert torch.allclose(y_ens[i], single(bi.X, bi.y, bi.x_query)[0], atol=1e-6)


def test_lsa_member_i_equals_single_model():
    ens, one = LSA(5, [3, 4], sigma_init=0.1), LSA(5, [4], sigma_init=0.1)
    assert torch.equal(ens.W_PV[1], one.W_PV[0]) and torch.equal(ens.W_KQ[1], one.W_KQ[0])
    assert not torch.equal(ens.W_PV[0], ens.W_PV[1])


def test_app_h_initialisation_statistics():
    # App. H: W^S_t = alpha* I + sigma G, W^V_t = -alpha* I + sigma G, sigma_init = 0.1 by default.
    a = 1 / 26
    full = LCA(32, 10, seeds=list(range(4)), param="full", alpha0=a)
    assert full.alpha.shape == (4, 10, 32, 32) and full.beta.shape == (4, 10, 32, 32)
    eye = torch.eye(32)
    assert abs((full.alpha - a * eye).std().item() - 0.1) < 0.002
    assert abs((full.beta + a * eye).mean().item()) < 0.002
    s_hat, v_hat = full.scalar_projections()
    assert s_hat.shape == (4, 10) and abs(s_hat.mean().item() - a) < 0.01 and abs(v_hat.mean().item() + a) < 0.01
    assert LCA(8, 5, seeds=[0], param="diagonal").alpha.shape == (1, 5, 8)
    assert LCA(8, 5, seeds=[0], param="untied").beta.shape == (1, 5)
    assert LCA(8, 5, seeds=[0, 1], param="one").alpha.shape == (2,)


def test_no_injection_from_zero_state_predicts_zero():
    # Eq. (G.1) with F_0 = 0: F_t = 0 for all t, the degenerate ablation documented in LCA.
    b = batch()
    model = LCA(5, 4, seeds=[0, 1], param="two", injection=False, alpha0=0.1, beta0=-0.1, dtype=F64)
    assert torch.count_nonzero(model(b.X, b.y, b.x_query)) == 0


def test_shared_data_broadcasts_over_members_and_backward_works():
    b = batch(E=1)
    model = LCA(5, 3, seeds=[0, 1, 2], param="untied", alpha0=0.05, dtype=F64)
    y_shared = model(b.X[0], b.y[0], b.x_query[0])
    assert y_shared.shape == (3, 6)
    assert torch.allclose(y_shared, model(b.X, b.y, b.x_query))
    ((y_shared - b.y_query) ** 2).mean().backward()
    assert model.alpha.grad.shape == (3, 3) and torch.isfinite(model.alpha.grad).all()

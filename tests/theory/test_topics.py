"""Seed 004's optimal value matrices (Lemma 1, Thms. 1, 2, 4, Def. 2) against an independent
least-squares solve of the exact population objective (every τ-subset document enumerated)."""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest
import torch
from scipy.special import digamma

from tdlab.tasks.topics import TopicsConfig, population
from tdlab.theory.topics import (
    block_sums,
    c1,
    c2,
    c3,
    dv,
    family_member,
    family_residual,
    in_optimal_family,
    min_population_loss,
    moment_loss,
    optimum_masked_loss,
    population_loss,
    population_moments,
    ridge_wv,
    thm1_bias,
    thm1_embedding,
    trivial_masked_error,
    wv_star,
    wv_star_entries,
)

PAPER = (0.15, 0.1, 0.1)  # p_m, p_c, p_r of §6.1
SMALL = [(3, 2, 1), (4, 3, 2), (5, 2, 3), (6, 3, 2), (4, 2, 3)]  # (T, v, τ) with 1 <= τ < T
PROBS = [PAPER, (0.3, 0.2, 0.25), (0.5, 0.05, 0.4)]


def _min_norm_lstsq(T: int, v: int, tau: int, p_m: float, p_c: float, p_r: float) -> torch.Tensor:
    """argmin ‖W‖_F over argmin Σ_S ‖W q_S − p_S‖², by SVD (gelsd): an implementation that shares
    nothing with the closed form but the population's p and q."""
    pop = population(T, v, tau, p_m, p_c, p_r)
    return torch.linalg.lstsq(pop["q"], pop["p"], driver="gelsd").solution.T


def test_paper_values():
    """The issue's evaluation at T = v = 10 and §6.1's probabilities. Thm. 2 does not involve τ."""
    e = wv_star_entries(10, 10, *PAPER)
    assert e["same"] == pytest.approx(0.1080, abs=5e-5)
    assert e["diff"] == pytest.approx(-0.0076, abs=5e-5)
    assert e["i0"] == pytest.approx(0.0542, abs=5e-5)
    assert e["c3"] == pytest.approx(1.156, abs=5e-4) and e["c3"] == c3(0.15, 0.1) == 1 / (1 - 0.9 * 0.15)
    assert c1(10, 10, *PAPER) == pytest.approx(0.1 / (0.8 * 0.865 * 100), rel=1e-15)
    assert c2(*PAPER) == pytest.approx(1 / 0.12 - 1, rel=1e-15)
    W = wv_star(10, 10, *PAPER)
    assert torch.all(W[0] == 0)
    # The same matrix is the least-squares optimum for every τ in 1..T − 1 (C(10, τ) documents).
    for tau in (1, 3, 5, 9):
        assert (W - _min_norm_lstsq(10, 10, tau, *PAPER)).abs().max() < 1e-12


@pytest.mark.parametrize("probs", PROBS)
@pytest.mark.parametrize("T,v,tau", SMALL)
def test_thm2_is_the_min_norm_least_squares_optimum(T, v, tau, probs):
    W = wv_star(T, v, *probs)
    assert (W - _min_norm_lstsq(T, v, tau, *probs)).abs().max() < 1e-12
    assert population_loss(W, T, v, tau, *probs).item() == pytest.approx(min_population_loss(v, tau), abs=1e-13)


@pytest.mark.parametrize("T,v,tau", [(4, 3, 2), (5, 2, 3)])
def test_ridge_solutions_tend_to_thm2(T, v, tau):
    """Thm. 2 is a limit: argmin L + λ‖W‖² = P Qᵀ(QQᵀ + Kλ I)⁻¹ → W^{V*} as λ → 0, at rate O(λ)."""
    pop = population(T, v, tau, *PAPER)
    Q, P, K = pop["q"].T, pop["p"].T, pop["q"].shape[0]
    W = wv_star(T, v, *PAPER)
    errs = []
    for lam in (1e-3, 1e-4, 1e-5, 1e-6):
        W_lam = P @ Q.T @ torch.linalg.inv(Q @ Q.T + K * lam * torch.eye(Q.shape[0], dtype=torch.float64))
        errs.append((W_lam - W).norm().item())
    assert all(b < a / 5 for a, b in itertools.pairwise(errs)) and errs[-1] < 1e-3


def test_moment_form_equals_the_enumerated_population_loss_and_ridge_tends_to_thm2():
    m = population_moments(4, 3, 2, 0.15, 0.1, 0.1)
    W = torch.randn(3, 13, 13, dtype=torch.float64, generator=torch.Generator().manual_seed(0))
    torch.testing.assert_close(moment_loss(W, m), population_loss(W, 4, 3, 2, 0.15, 0.1, 0.1), rtol=1e-12, atol=1e-12)
    star = wv_star(4, 3, 0.15, 0.1, 0.1)
    d = [float((ridge_wv(m, lam) - star).norm() / star.norm()) for lam in (1e-3, 1e-4, 1e-5)]
    assert d[0] > d[1] > d[2] and d[1] / d[2] == pytest.approx(10, rel=0.05)  # O(λ) approach to the λ → 0 limit
    W = ridge_wv(m, 1e-4).requires_grad_()  # stationary for the penalised objective
    (moment_loss(W[None], m) + 1e-4 * W.pow(2).sum()).sum().backward()
    assert float(W.grad.abs().max()) < 1e-12


@pytest.mark.parametrize("T,v,tau", [(4, 3, 2), (5, 2, 3)])
def test_gradient_descent_from_zero_reaches_thm2(T, v, tau):
    """Plain GD on the exact population loss (autograd) from W = 0 stays in the row space of the
    q_S and so converges to the least-norm minimiser."""
    pop = population(T, v, tau, *PAPER)
    lr = 1.0 / (2 * torch.linalg.matrix_norm(pop["q"], ord=2).item() ** 2 / pop["q"].shape[0])  # 1/L
    V = T * v + 1
    W = torch.zeros(V, V, dtype=torch.float64, requires_grad=True)
    for _ in range(2000):
        (g,) = torch.autograd.grad(population_loss(W, T, v, tau, *PAPER), W)
        with torch.no_grad():
            W -= lr * g
    assert (W.detach() - wv_star(T, v, *PAPER)).abs().max() < 1e-10


@pytest.mark.parametrize("T,v,tau", SMALL)
def test_thm4_family_members_attain_the_minimum(T, v, tau):
    gen = torch.Generator().manual_seed(T * 100 + v * 10 + tau)
    best = min_population_loss(v, tau)
    for probs in PROBS:
        for scale in (0.1, 1.0, 10.0):
            W = family_member(T, v, *probs, gen=gen, scale=scale)
            assert family_residual(W, T, v, *probs) < 1e-12 * max(1.0, scale)
            assert population_loss(W, T, v, tau, *probs).item() == pytest.approx(best, abs=1e-12 * max(1.0, scale**2))
            # Leaving the family (a block sum changed by δ) fails the predicate and costs exactly
            # δ² E_S q_S(1)² (the prediction of word 1 moves by δ q_S(1)).
            bad, delta = W.clone(), 0.01
            bad[1, 1] += delta
            assert not in_optimal_family(bad, T, v, *probs)
            excess = delta**2 * population(T, v, tau, *probs)["q"][:, 1].pow(2).mean().item()
            assert population_loss(bad, T, v, tau, *probs).item() - best == pytest.approx(excess, rel=1e-6)
    W = wv_star(T, v, *PAPER)
    assert in_optimal_family(W, T, v, *PAPER)
    # Row block sums of W^{V*}: c3 on the own topic above the others (the gap g of the issue).
    sums = block_sums(W, T, v)[1:]
    own = sums.gather(-1, ((torch.arange(T * v) // v)[:, None]))
    gap = own.squeeze(-1) - sums.sort(-1).values[:, 0]
    assert torch.allclose(gap, torch.tensor(c3(0.15, 0.1), dtype=torch.float64), rtol=0, atol=1e-14)


@pytest.mark.parametrize("T,v,tau", SMALL)
def test_family_is_the_whole_argmin(T, v, tau):
    """The family's dimension equals the least-squares null space's: per row Tv + 1 − rank(Q) free
    directions, rank(Q) = T for 1 <= τ < T (one u_i plus T(v − 1) within-block directions)."""
    pop = population(T, v, tau, *PAPER)
    rank = torch.linalg.matrix_rank(pop["q"]).item()
    assert rank == T
    assert (T * v + 1) - rank == 1 + T * (v - 1)
    # Every least-squares optimum W* + Z (Z q_S = 0 for all S, Z random in the null space) is a member.
    null = torch.linalg.svd(pop["q"]).Vh[rank:]  # (Tv + 1 − T, Tv + 1) basis of {z: z·q_S = 0}
    Z = torch.randn(T * v + 1, null.shape[0], dtype=torch.float64, generator=torch.Generator().manual_seed(0)) @ null
    assert in_optimal_family(wv_star(T, v, *PAPER) + Z, T, v, *PAPER)


@pytest.mark.parametrize("T,v,tau", SMALL)
def test_dv_is_the_diagonal_optimum(T, v, tau):
    for u0 in (0.0, 0.7):
        D = dv(T, v, *PAPER, u0=u0)
        words = D[1:, 1:]
        assert torch.equal(words, torch.diag(torch.diagonal(words)))  # Def. 2: no off-diagonal word entries
        c3_ = torch.tensor(c3(0.15, 0.1), dtype=torch.float64)
        assert torch.allclose(torch.diagonal(words), c3_, rtol=1e-15, atol=0)
        assert torch.allclose(D[1:, 0], torch.tensor(-c1(T, v, *PAPER), dtype=torch.float64), rtol=1e-15, atol=0)
        assert in_optimal_family(D, T, v, *PAPER)
        assert population_loss(D, T, v, tau, *PAPER).item() == pytest.approx(min_population_loss(v, tau), abs=1e-13)
    # Least norm among the diagonal optima: row 0 = 0.
    assert dv(T, v, *PAPER).norm() < dv(T, v, *PAPER, u0=0.01).norm()


def test_at_tau_equal_T_thm2_is_optimal_but_not_least_norm():
    """One document when τ = T: W^{V*} still fits it, but the argmin is larger (rank(Q) = 1) and its
    least-norm member differs — Thm. 2's "unique limit" needs τ < T."""
    T, v = 4, 2
    W = wv_star(T, v, *PAPER)
    assert population_loss(W, T, v, T, *PAPER).item() == pytest.approx(min_population_loss(v, T), abs=1e-14)
    assert (W - _min_norm_lstsq(T, v, T, *PAPER)).abs().max() > 0.1


def test_family_fits_every_topic_uniform_distribution():
    """Lemma 1's members satisfy W q(p) = p for every p uniform within topics (LDA θ included)."""
    from tdlab.tasks.topics import masked_distribution, word_distribution

    T, v = 5, 3
    gen = torch.Generator().manual_seed(1)
    theta = torch.distributions.Dirichlet(torch.full((T,), 0.3, dtype=torch.float64)).sample((50,))
    p = word_distribution(theta, v)
    q = masked_distribution(p, *PAPER)
    for W in (wv_star(T, v, *PAPER), dv(T, v, *PAPER), family_member(T, v, *PAPER, gen=gen)):
        assert (q @ W.T - p).abs().max() < 1e-12


@pytest.mark.parametrize("probs", PROBS)
@pytest.mark.parametrize("T,v,tau", [(3, 2, 1), (4, 3, 2), (10, 10, 2)])
def test_thm1_embedding_stationarity(T, v, tau, probs):
    """Thm. 1: W^V = I, uniform attention, b^pred as stated; the squared loss as a function of W^E
    (f = W^EᵀW^E q + b).

    The issue asks that App. D's W^E = I/√(1 − (1 − p_c)p_m) be stationary. It is not: E = c3 I has
    E_00 = c3, against Thm. 1 1(a) (E_00 = −c2 u_0 = 0 at u_0 = 0), so the [MASK] output is
    c3 p_m(1 − p_c − p_r) ≠ 0; the loss is above the minimum by exactly its square and the gradient
    lives on row and column 0 of W^E. With a zero [MASK] embedding the same construction is a global
    optimum, hence stationary."""
    p_m, p_c, p_r = probs
    b = thm1_bias(T, v, *probs)
    best = min_population_loss(v, tau)
    # The literal App. D embedding.
    WE = thm1_embedding(T, v, p_m, p_c, mask="paper").requires_grad_(True)
    assert torch.allclose(
        WE.detach().T @ WE.detach(), c3(p_m, p_c) * torch.eye(T * v + 1, dtype=torch.float64), rtol=1e-15, atol=0
    )
    loss = population_loss(WE.T @ WE, T, v, tau, *probs, b=b)
    (g,) = torch.autograd.grad(loss, WE)
    assert loss.item() - best == pytest.approx((c3(p_m, p_c) * p_m * (1 - p_c - p_r)) ** 2, rel=1e-10)
    assert g[0].abs().max() > 1e-3 and g[1:, 1:].abs().max() < 1e-13
    # The corrected one: zero [MASK] embedding.
    WE = thm1_embedding(T, v, p_m, p_c).requires_grad_(True)
    E = WE.T @ WE
    assert in_optimal_family(E.detach() - _thm1_shift(T, v, *probs), T, v, *probs)  # D.16: E' is a Lemma 1 member
    loss = population_loss(E, T, v, tau, *probs, b=b)
    (g,) = torch.autograd.grad(loss, WE)
    assert g.abs().max() < 1e-13
    assert loss.item() == pytest.approx(best, abs=1e-13)
    # The bias is needed: without it the prediction is p − b, the loss is above the minimum by
    # exactly ‖b‖², and the corrected W^E is not stationary either.
    WE0 = thm1_embedding(T, v, p_m, p_c).requires_grad_(True)
    loss0 = population_loss(WE0.T @ WE0, T, v, tau, *probs)
    (g0,) = torch.autograd.grad(loss0, WE0)
    assert loss0.item() - best == pytest.approx(b.pow(2).sum().item(), rel=1e-8)
    assert g0.abs().max() > 1e-6


def _thm1_shift(T: int, v: int, p_m: float, p_c: float, p_r: float) -> torch.Tensor:
    """App. D's E' − E: the bias moved into column 0 of the word rows (−c1 there)."""
    S = torch.zeros(T * v + 1, T * v + 1, dtype=torch.float64)
    S[1:, 0] = c1(T, v, p_m, p_c, p_r)
    return S


def test_population_loss_is_the_expected_squared_loss():
    """‖W q + b − p‖² + 1 − ‖p‖² = E_{w ~ p} ‖W q + b − e_w‖², checked by summing over w."""
    T, v, tau = 4, 2, 2
    gen = torch.Generator().manual_seed(3)
    W = torch.randn(T * v + 1, T * v + 1, dtype=torch.float64, generator=gen)
    b = torch.randn(T * v + 1, dtype=torch.float64, generator=gen)
    pop = population(T, v, tau, *PAPER)
    eye = torch.eye(T * v + 1, dtype=torch.float64)
    direct = 0.0
    for p, q in zip(pop["p"], pop["q"], strict=True):
        f = W @ q + b
        direct += sum(p[w] * (f - eye[w]).pow(2).sum() for w in range(T * v + 1)).item()
    direct /= pop["p"].shape[0]
    assert population_loss(W, T, v, tau, *PAPER, b=b).item() == pytest.approx(direct, rel=1e-13)
    # Batched over leading axes.
    batched = population_loss(torch.stack([W, 2 * W]), T, v, tau, *PAPER)
    assert batched.shape == (2,)
    assert batched[1].item() == pytest.approx(population_loss(2 * W, T, v, tau, *PAPER).item(), rel=1e-15)


def test_theory_refuses_degenerate_probabilities():
    with pytest.raises(ValueError, match="p_m > 0"):
        c2(0.0, 0.1, 0.1)
    with pytest.raises(ValueError, match="p_c \\+ p_r < 1"):
        c1(10, 10, 0.15, 0.5, 0.5)
    with pytest.raises(ValueError, match="p_r"):
        wv_star(10, 10, 0.15, 0.1, 1.5)
    assert math.isfinite(c3(0.15, 0.1))


# ----------------------------------------------------------------------------------------------
# Fresh settings (issue 38): Thm. 2's W^{V*} against numpy written from Sec. 3.1 / Assumption 1 only. With
# uniform attention over an infinitely long masked document whose topic set is S (|S| = tau, words uniform
# within the document's topics), the attention output is the deterministic masked-token histogram
#   xbar_0 = p_m (1 - p_c - p_r),  xbar_l = (1 - p_m + p_m p_c) 1[l in S] / (tau v) + p_m p_r / (T v),
# the target at a masked position is the document's word law y_l = 1[l in S] / (tau v), so the squared loss
# is E_S |W xbar_S - y_S|^2 + const and its lambda -> 0 ridge limit is the min-norm solution Y X^+ over all
# C(T, tau) equally likely topic sets.


def _ind_wv_star(T, v, tau, p_m, p_c, p_r):
    Tv = T * v
    X, Y = [], []
    for S in itertools.combinations(range(T), tau):
        on = np.zeros(Tv + 1)
        for t in S:
            on[1 + t * v : 1 + (t + 1) * v] = 1.0
        x = (1 - p_m + p_m * p_c) * on / (tau * v) + p_m * p_r / Tv
        x[0] = p_m * (1 - p_c - p_r)
        X.append(x)
        Y.append(on / (tau * v))
    X, Y = np.array(X).T, np.array(Y).T
    return Y @ np.linalg.pinv(X, rcond=1e-13)


@pytest.mark.parametrize(
    "T,v,tau,probs",
    [
        (5, 3, 2, (0.25, 0.1, 0.2)),
        (5, 3, 3, (0.25, 0.1, 0.2)),
        (6, 2, 4, (0.6, 0.05, 0.05)),
        (4, 5, 1, (0.1, 0.3, 0.3)),
    ],
)
def test_fresh_wv_star_against_an_independent_min_norm_solve(T, v, tau, probs):
    W = _ind_wv_star(T, v, tau, *probs)
    got = wv_star(T, v, *probs).numpy()
    assert np.max(np.abs(got - W)) < 1e-10


# ----------------------------------------------------------------------------------------------
# Lower bounds of the masked loss: the Bayes risk with the masked position's own token, and the position-blind one


def _oracle_risks(task, replace_from_all: bool, docs: int = 6000, seed: int = 0) -> dict[str, np.ndarray]:
    """Per document (|M| ≥ 1), by Monte Carlo with the real sampler and §3.2 masking (tdlab.tasks.topics), the mean
    over M of the oracle risks: the Bayes predictor that knows θ and w̃_j, scored on the realised w_j (squared
    ‖π − e_w‖², cross-entropy −log π(w)), and the position-blind predictor that knows θ and M (the mean over M of
    the π_j, the same at every position), scored on the realised words. Shares nothing with the closed forms."""
    from tdlab.tasks.topics import MASK_ID, Topics, TopicsConfig
    from tdlab.train.objectives import mask_tokens

    assert isinstance(task, TopicsConfig)
    gen = torch.Generator().manual_seed(seed)
    out = Topics(task).sample_latent([gen], docs, task.n_max)
    tok, vis, theta = out["tokens"], out["key_mask"], out["theta"][0]  # (1, B, W), (B, T)
    n = task.T * task.v
    words = (0, n + 1) if replace_from_all else (1, n + 1)
    cor, sel = mask_tokens(tok, vis, [gen], task.p_m, task.p_c, task.p_r, mask_id=MASK_ID, words=words)
    tok, cor, sel = tok[0], cor[0], sel[0]
    p = theta.repeat_interleave(task.v, dim=1) / task.v  # (B, Tv): p_i = θ_topic(i)/v
    p = torch.cat([torch.zeros(docs, 1, dtype=p.dtype), p], dim=1)  # id 0 = [MASK]: never a target
    R = n + 1 if replace_from_all else n
    r = task.p_r / R
    B, W = tok.shape
    # posterior of w_j given θ and w̃_j: [MASK] -> p; word i -> p_k (p_c δ_ik + r) / P_i
    shown = cor.clamp_min(0)
    lik = torch.full((B, W, n + 1), r, dtype=p.dtype)
    lik.scatter_add_(-1, shown[..., None], torch.full((B, W, 1), task.p_c, dtype=p.dtype))
    post = p[:, None, :] * lik
    post = torch.where((cor == MASK_ID)[..., None], p[:, None, :].expand(B, W, n + 1), post)
    post = post / post.sum(-1, keepdim=True)
    target = torch.nn.functional.one_hot(tok, n + 1).to(p.dtype)
    keep = sel.sum(-1) > 0
    m = sel.to(p.dtype) / sel.sum(-1, keepdim=True).clamp_min(1)
    sq = ((post - target) ** 2).sum(-1)
    ce = -torch.log(post.gather(-1, tok[..., None]).squeeze(-1).clamp_min(1e-300))
    shared = (post * m[..., None]).sum(1, keepdim=True)  # the position-blind oracle's one output per document
    blind = ((shared - target) ** 2).sum(-1)
    per_doc = {k: (x * m).sum(-1)[keep].numpy() for k, x in (("squared", sq), ("ce", ce), ("blind", blind))}
    return per_doc


@pytest.mark.parametrize("replace_from_all", [False, True], ids=["section-3.2", "authors-code"])
@pytest.mark.parametrize(
    "task",
    [dict(), dict(T=5, v=4, alpha=0.5, n_min=20, n_max=40), dict(generator="uniform-tau", T=6, v=3, tau=2)],
    ids=["s6.1", "lda", "tau"],
)
def test_the_masked_loss_bounds_are_the_oracle_risks(task, replace_from_all):
    """bayes_masked_loss is the Bayes risk with θ and the masked position's own token, blind_masked_loss_bound the
    position-blind oracle's (θ and M known): both match Monte Carlo of those oracles on the real sampler and
    masking, within 4 standard errors."""
    from tdlab.tasks.topics import TopicsConfig
    from tdlab.theory.topics import bayes_masked_loss, blind_masked_loss_bound

    t = TopicsConfig(**task)
    mc = _oracle_risks(t, replace_from_all)
    closed = {
        "squared": bayes_masked_loss(t, "squared", replace_from_all),
        "ce": bayes_masked_loss(t, "ce", replace_from_all),
        "blind": blind_masked_loss_bound(t, replace_from_all),
    }
    for k, x in mc.items():
        assert closed[k] == pytest.approx(x.mean(), abs=4 * x.std() / math.sqrt(x.size)), k


def test_the_leak_takes_the_bounds_below_the_loss_of_predicting_p():
    """§6.1's settings: the Bayes bound (0.8713 squared, 2.8960 nats) and the position-blind bound (0.9408) lie below
    1 − E‖p‖² = 0.9450 and E H(p) = 3.1491; without kept or replaced words (p_c = p_r = 0) they are those losses."""
    from tdlab.tasks.topics import TopicsConfig
    from tdlab.theory.topics import bayes_masked_loss, blind_masked_loss_bound, mean_inverse_masked

    t = TopicsConfig()
    lp, hp = 1 - 1.1 / 2 / 10, math.log(10) + float(digamma(2.0) - digamma(1.1))
    assert bayes_masked_loss(t, "squared") == pytest.approx(0.87131, abs=1e-5)
    assert bayes_masked_loss(t, "ce") == pytest.approx(2.89599, abs=1e-5)
    assert blind_masked_loss_bound(t) == pytest.approx(0.94081, abs=1e-5)
    assert bayes_masked_loss(t, "squared") < blind_masked_loss_bound(t) < lp
    assert bayes_masked_loss(t, "ce") < hp
    none = TopicsConfig(p_c=0.0, p_r=0.0)
    assert bayes_masked_loss(none, "squared") == pytest.approx(lp, abs=1e-9)
    assert bayes_masked_loss(none, "ce") == pytest.approx(hp, abs=1e-12)
    assert blind_masked_loss_bound(none) == pytest.approx(lp, abs=1e-9)
    # E[1/|M|] against a direct sum: N uniform on {100..150}, |M| ~ Bin(N, 0.15) given |M| ≥ 1
    rng = np.random.default_rng(0)
    n = rng.integers(100, 151, 400_000)
    k = rng.binomial(n, 0.15)
    assert mean_inverse_masked(t) == pytest.approx(np.mean(1.0 / k[k > 0]), rel=2e-3)


def _mc_optimum(task: TopicsConfig, n: int = 400_000, seed: int = 0) -> tuple[float, float]:
    """Monte Carlo of ``(1 − E‖p‖², E[H(p)])`` over documents (p_i = θ_topic(i)/v), independent of the closed form."""
    rng = np.random.default_rng(seed)
    if task.generator == "lda":
        theta = rng.dirichlet(np.full(task.T, task.alpha), size=n)
    else:
        theta = np.zeros((n, task.T))
        idx = np.argsort(rng.random((n, task.T)), axis=1)[:, : task.tau]
        np.put_along_axis(theta, idx, 1.0 / task.tau, axis=1)
    p = np.repeat(theta / task.v, task.v, axis=1)  # (n, Tv)
    with np.errstate(divide="ignore", invalid="ignore"):
        h = -np.where(p > 0, p * np.log(p), 0.0).sum(1)
    return float(1 - (p**2).sum(1).mean()), float(h.mean())


@pytest.mark.parametrize(
    "task",
    [TopicsConfig(), TopicsConfig(T=5, v=4, alpha=0.5), TopicsConfig(generator="uniform-tau", T=6, v=3, tau=2)],
    ids=["s6.1", "lda", "tau"],
)
def test_optimum_masked_loss_matches_monte_carlo(task):
    sq, ce = _mc_optimum(task)
    assert optimum_masked_loss(task, "squared") == pytest.approx(sq, abs=3e-4)
    assert optimum_masked_loss(task, "ce") == pytest.approx(ce, abs=3e-3)
    # the optimum lies below the uniform predictor's loss, by §6.1's gap (0.045 squared, 1.46 nats CE)
    assert optimum_masked_loss(task, "squared") < trivial_masked_error(task, "squared")
    assert optimum_masked_loss(task, "ce") < trivial_masked_error(task, "ce")


def test_section_6_1_values():
    t = TopicsConfig()
    assert optimum_masked_loss(t, "squared") == pytest.approx(1 - 0.055)  # E Σθ² = 1.1/2 over v = 10
    assert trivial_masked_error(t, "ce") == pytest.approx(math.log(100))

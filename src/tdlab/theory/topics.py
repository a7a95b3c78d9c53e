"""Optimal value matrices of seed 004 (Li, Li & Risteski, ICML 2023) under uniform attention.

Setting (Lemma 1, Thms. 1, 2, 4; Def. 2): one-hot embeddings (Eq. 7), ``W^K = W^Q = 0`` so that
``A = [1/N]`` and every column of ``X̃ A`` is the masked document's token distribution ``q`` (F.17),
squared loss (Eq. 3) summed over the ``V = Tv + 1`` outputs, documents as in Assumption 1. Then
Eq. (1) is exactly (:func:`population_loss`)::

    L(W) = E_S ‖W q_S + b − p_S‖² + 1 − E_S ‖p_S‖²,

because a masked position's original word has law ``p_S`` and
``E‖f − e_w‖² = ‖f − p‖² + 1 − ‖p‖²``.
The minimum is ``1 − 1/(τv)`` (:func:`min_population_loss`), reached exactly when ``W q = p``.

Constants of Thm. 2 (functions of p_m, p_c, p_r and Tv only)::

    c1 = p_r / ((1 − p_c − p_r)(1 − (1 − p_c)p_m) Tv),  c2 = 1/((1 − p_c − p_r)p_m) − 1,
    c3 = 1/(1 − (1 − p_c)p_m).

Lemma 1 / Thm. 4: argmin L is the affine family, with free ``u_0..u_Tv``: row 0 has equal block sums
``u_0 v`` and ``W_00 = −c2 u_0``; a word row i has block sums ``c3 + u_i v`` on topic(i) and ``u_i v``
elsewhere, and ``W_i0 = −c1 − c2 u_i``; entries inside a block are otherwise free.
Thm. 2: the λ → 0 limit of the L2-regularised argmin is the family's least-norm member W^{V*}
(row 0 = 0, uniform blocks). Def. 2: D^V is the member with no off-diagonal word-word entries.

Scope and choices (checked in ``tests/theory/test_topics.py``):

* **τ.** Nothing here depends on τ, and the family is the whole argmin for every ``1 <= τ < T``: the
  ``q_S`` then span a T-dimensional space, one dimension short of span{e_0, topic blocks}, which is
  where the free ``u_i`` lives. At the paper's T = v = 10 the issue's numbers (W_same = 0.1080,
  W_diff = −0.0076, W_i0 = 0.0542, c3 = 1.156) hold for every τ in 1..9. At ``τ = T`` there is one
  document; the family still attains the minimum (it fits *every* topic-uniform p, LDA mixtures
  included), but the argmin is larger and its least-norm member is not W^{V*}: Thm. 2 needs τ < T.
* **Lemma 1 for a general (LDA) θ.** Every family member satisfies ``W q(p) = p`` for every ``p``
  uniform within topics (q affine in p), so it is also optimal for Assumption-1 LDA documents.
* **D^V's row 0.** Def. 2 calls D^V "the only matrix" in argmin L with zero off-diagonal word-word
  entries, but its condition leaves row 0 free (any block-sum-equal row with ``W_00 = −c2 u_0``).
  :func:`dv` takes row 0 = 0 (the least-norm choice, as in W^{V*}); ``u0`` offers the other rows
  ``W_0l = u0`` (l >= 1), ``W_00 = −c2 u0``.
* **Thm. 1's example optimum is not one.** App. D ends with ``W^E = I/√(1 − (1 − p_c)p_m)``
  (``E = c3 I``) as "the simplest" realisable optimum, but ``E_00 = c3`` breaks its own condition 1(a)
  (``E_00 = −c2 u_0 = 0`` with u_0 = 0): the [MASK] output is not 0. Zeroing the [MASK] embedding
  fixes it (:func:`thm1_embedding`, ``mask="zero"``, the default; ``mask="paper"`` is the literal one).
* **Thm. 1's bias.** The statement says ``b_i^pred = −p_m p_r/((1 − (1 − p_c)p_m)Tv)`` "∀i"; its proof
  (App. D) shifts word rows only, so :func:`thm1_bias` has ``b_0 = 0`` and ``b_i`` as stated for i >= 1.

Lower bounds of the masked loss (:func:`bayes_masked_loss`, :func:`blind_masked_loss_bound`). The loss of
predicting each masked word with its document's distribution ``p`` (``1 − E‖p‖²``, §6.1's "optimum"
0.945) is **not** a lower bound: a masked position keeps its word with probability p_c and shows a random
word with p_r (§3.2), and a model whose attention reads the query's own token uses it (the all-trained
squared/Adam model of Fig. 1 reaches 0.900). What bounds every model is the Bayes risk of a predictor that
knows θ exactly and sees the masked position's own token: given θ the other positions carry nothing more
about ``w_j`` (words are i.i.d. given θ, masks independent), so no predictor of the masked document does
better. A uniform-attention model gives every position the same output (position-blind): its bound adds
only what knowing M and averaging over it can gain, ``E[1/|M|]`` of the leak.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Literal, Protocol

import numpy as np
import torch
from scipy.special import digamma, roots_jacobi
from scipy.stats import binom
from torch import Tensor

from tdlab.theory.topic_population import population, topic_of

__all__ = [
    "TopicsSpec",
    "bayes_masked_loss",
    "blind_masked_loss_bound",
    "block_sums",
    "c1",
    "c2",
    "c3",
    "dv",
    "family_member",
    "family_residual",
    "in_optimal_family",
    "mean_inverse_masked",
    "min_population_loss",
    "population_loss",
    "thm1_bias",
    "thm1_embedding",
    "wv_star",
    "wv_star_entries",
]


class TopicsSpec(Protocol):
    """What the masked-loss bounds read of a seed 004 task config (``TopicsConfig``): sizes, generator, masking."""

    @property
    def T(self) -> int: ...  # topics

    @property
    def v(self) -> int: ...  # words per topic

    @property
    def generator(self) -> str: ...  # "lda" or "uniform-tau"

    @property
    def tau(self) -> int: ...  # topics per document (uniform-tau)

    @property
    def alpha(self) -> float: ...  # Dirichlet concentration (lda)

    @property
    def n_min(self) -> int: ...  # document length N ~ U{n_min..n_max}

    @property
    def n_max(self) -> int: ...

    @property
    def p_m(self) -> float: ...  # P(position joins M)

    @property
    def p_c(self) -> float: ...  # P(kept | in M)

    @property
    def p_r(self) -> float: ...  # P(replaced by a uniform word | in M)


def _check(p_m: float, p_c: float, p_r: float) -> None:
    # The constants divide by p_m (1 − p_c − p_r): §3.2 takes the probabilities in (0, 1).
    for name, p in (("p_m", p_m), ("p_c", p_c), ("p_r", p_r)):
        if not 0.0 <= p <= 1.0:
            raise ValueError(f"{name} must be in [0, 1], got {p}")
    if p_m <= 0.0 or p_c + p_r >= 1.0:
        raise ValueError(f"the theory needs p_m > 0 and p_c + p_r < 1, got p_m={p_m}, p_c={p_c}, p_r={p_r}")


def c1(T: int, v: int, p_m: float, p_c: float, p_r: float) -> float:
    """Thm. 2: ``c1 = p_r / ((1 − p_c − p_r)(1 − (1 − p_c)p_m) Tv)``."""
    _check(p_m, p_c, p_r)
    return p_r / ((1 - p_c - p_r) * (1 - (1 - p_c) * p_m) * T * v)


def c2(p_m: float, p_c: float, p_r: float) -> float:
    """Thm. 2: ``c2 = 1/((1 − p_c − p_r) p_m) − 1``."""
    _check(p_m, p_c, p_r)
    return 1.0 / ((1 - p_c - p_r) * p_m) - 1.0


def c3(p_m: float, p_c: float) -> float:
    """Thm. 2: ``c3 = 1/(1 − (1 − p_c) p_m)``; also the same-topic block sum of every optimum
    (Lemma 1 3(a) minus 3(b)) and Thm. 1's ``E* = c3 I``."""
    _check(p_m, p_c, 0.0)
    return 1.0 / (1 - (1 - p_c) * p_m)


def wv_star_entries(T: int, v: int, p_m: float, p_c: float, p_r: float) -> dict[str, float]:
    """The distinct entries of W^{V*} (Thm. 2): ``same`` (same topic), ``diff`` (different topics),
    ``i0`` (column 0 of word rows), ``row0`` (= 0), and ``c1``, ``c2``, ``c3``."""
    a, b, c = c1(T, v, p_m, p_c, p_r), c2(p_m, p_c, p_r), c3(p_m, p_c)
    den = b * b + T * v
    diff = -(a * b + c) / den
    return {"same": diff + c / v, "diff": diff, "i0": (b * c - a * T * v) / den, "row0": 0.0, "c1": a, "c2": b, "c3": c}


def _same_topic(T: int, v: int, device: str | torch.device = "cpu") -> Tensor:
    """``(Tv, Tv)`` bool: words i, j share a topic."""
    t = topic_of(torch.arange(1, T * v + 1, device=device), v)
    return t[:, None] == t[None, :]


def wv_star(T: int, v: int, p_m: float, p_c: float, p_r: float, dtype: torch.dtype = torch.float64) -> Tensor:
    """W^{V*} of Thm. 2, ``(Tv + 1, Tv + 1)``: row 0 zero; ``W_i0`` = ``i0``; word-word entries
    ``same`` within a topic block and ``diff`` across blocks."""
    e = wv_star_entries(T, v, p_m, p_c, p_r)
    V = T * v + 1
    W = torch.zeros(V, V, dtype=dtype)
    W[1:, 0] = e["i0"]
    same, diff = (torch.tensor(e[k], dtype=dtype) for k in ("same", "diff"))
    W[1:, 1:] = torch.where(_same_topic(T, v), same, diff)  # tensors: Python scalars would make float32
    return W


def family_member(
    T: int,
    v: int,
    p_m: float,
    p_c: float,
    p_r: float,
    gen: torch.Generator,
    scale: float = 1.0,
    dtype: torch.dtype = torch.float64,
) -> Tensor:
    """A random member of the Lemma 1 / Thm. 4 family of minimisers, ``(Tv + 1, Tv + 1)``.

    ``u_0..u_Tv ~ N(0, scale²)``; each row's block sums are then the ones Lemma 1 prescribes, spread
    over the block with Gaussian noise of zero sum within every block (the free within-block
    directions); ``W_00 = −c2 u_0`` and ``W_i0 = −c1 − c2 u_i``.
    """
    a, b, c = c1(T, v, p_m, p_c, p_r), c2(p_m, p_c, p_r), c3(p_m, p_c)
    V = T * v + 1
    u = scale * torch.randn(V, generator=gen, dtype=dtype)
    noise = scale * torch.randn(V, T, v, generator=gen, dtype=dtype)
    noise = noise - noise.mean(-1, keepdim=True)  # zero sum inside every block
    sums = (u * v)[:, None].expand(V, T).clone()  # (V, T) block sums u_i v
    word_topic = topic_of(torch.arange(1, V), v) - 1
    sums[torch.arange(1, V), word_topic] += c  # Lemma 1 3(a): + c3 on the word's own topic
    W = torch.empty(V, V, dtype=dtype)
    W[:, 1:] = (sums[:, :, None] / v + noise).reshape(V, T * v)
    W[0, 0] = -b * u[0]
    W[1:, 0] = -a - b * u[1:]
    return W


def block_sums(W: Tensor, T: int, v: int) -> Tensor:
    """``(..., Tv + 1, T)``: ``Σ_{l ∈ t} W_il`` for every row i and topic t (column 0 left out)."""
    return W[..., 1:].reshape(*W.shape[:-1], T, v).sum(-1)


def family_residual(W: Tensor, T: int, v: int, p_m: float, p_c: float, p_r: float) -> float:
    """Largest violation of Lemma 1's conditions by ``W`` (``(Tv + 1, Tv + 1)``); 0 exactly for the
    family's members. ``u_i`` is read off as the mean off-topic block sum over v (all blocks for row
    0); the conditions checked: equal off-topic block sums, the own-topic block sum ``c3 + u_i v``, and
    column 0 (``W_00 = −c2 u_0``, ``W_i0 = −c1 − c2 u_i``). Needs T >= 2 (with one topic u_i is free
    and no condition ties the own block)."""
    if T < 2:
        raise ValueError(f"family_residual needs T >= 2, got T={T}")
    a, b, c = c1(T, v, p_m, p_c, p_r), c2(p_m, p_c, p_r), c3(p_m, p_c)
    W = W.to(torch.float64)
    V = T * v + 1
    sums = block_sums(W, T, v)
    own = torch.zeros(V, T, dtype=torch.bool, device=W.device)
    own[torch.arange(1, V), topic_of(torch.arange(1, V), v) - 1] = True
    off_mean = sums.masked_fill(own, 0.0).sum(-1) / (~own).sum(-1)  # u_i v
    u = off_mean / v
    r_off = (sums - off_mean[:, None]).masked_fill(own, 0.0).abs().max()
    r_own = (sums[own] - (c + off_mean[1:])).abs().max()
    r_col = torch.cat([(W[:1, 0] + b * u[:1]), (W[1:, 0] + a + b * u[1:])]).abs().max()
    return float(torch.stack([r_off, r_own, r_col]).max())


def in_optimal_family(W: Tensor, T: int, v: int, p_m: float, p_c: float, p_r: float, atol: float = 1e-9) -> bool:
    """Whether ``W`` satisfies Lemma 1 / Thm. 4 to ``atol`` (:func:`family_residual`)."""
    return family_residual(W, T, v, p_m, p_c, p_r) <= atol


def dv(
    T: int, v: int, p_m: float, p_c: float, p_r: float, u0: float = 0.0, dtype: torch.dtype = torch.float64
) -> Tensor:
    """D^V of Def. 2, ``(Tv + 1, Tv + 1)``: the family member with zero off-diagonal word-word entries,
    which forces ``u_i = 0``: ``W_ii = c3``, ``W_i0 = −c1``. Row 0 is not fixed by Def. 2; it is
    ``W_0l = u0`` (l >= 1), ``W_00 = −c2 u0`` (default u0 = 0: row 0 zero, the least-norm choice)."""
    a, b, c = c1(T, v, p_m, p_c, p_r), c2(p_m, p_c, p_r), c3(p_m, p_c)
    V = T * v + 1
    W = torch.zeros(V, V, dtype=dtype)
    W[1:, 1:] = c * torch.eye(V - 1, dtype=dtype)
    W[1:, 0] = -a
    W[0, 1:] = u0
    W[0, 0] = -b * u0
    return W


def thm1_bias(T: int, v: int, p_m: float, p_c: float, p_r: float, dtype: torch.dtype = torch.float64) -> Tensor:
    """Thm. 1's fixed ``b^pred``, ``(Tv + 1,)``: ``−p_m p_r/((1 − (1 − p_c)p_m) Tv)`` on words and 0 on
    [MASK] (App. D shifts the word rows only; the statement's "∀i" is read as i = 1..Tv)."""
    _check(p_m, p_c, p_r)
    b = torch.full((T * v + 1,), -p_m * p_r / ((1 - (1 - p_c) * p_m) * T * v), dtype=dtype)
    b[0] = 0.0
    return b


def thm1_embedding(
    T: int, v: int, p_m: float, p_c: float, mask: Literal["zero", "paper"] = "zero", dtype: torch.dtype = torch.float64
) -> Tensor:
    """A realisable optimum of Thm. 1 (d = Tv + 1, with W^V = I, uniform attention, :func:`thm1_bias`).

    ``mask="paper"``: App. D's "simplest example" ``W^E = I/√(1 − (1 − p_c)p_m)``, ``E = c3 I``. It is
    **not** an optimum: Thm. 1 1(a) with u_0 = 0 needs ``E_00 = 0``, but ``E_00 = c3``, so the [MASK]
    output is ``c3 p_m(1 − p_c − p_r)`` instead of 0 and the loss exceeds the minimum by exactly
    ``(c3 p_m (1 − p_c − p_r))²`` (0.0192 at §6.1's probabilities); the gradient in W^E is nonzero on
    row and column 0. ``mask="zero"`` (default): the same with a zero [MASK] embedding,
    ``W^E = √c3 · diag(0, 1, …, 1)``, ``E = c3 (I − e_0 e_0ᵀ)``: a Lemma 1 member with all u_i = 0,
    hence a global optimum and stationary."""
    WE = torch.eye(T * v + 1, dtype=dtype) * math.sqrt(c3(p_m, p_c))
    if mask == "zero":
        WE[0, 0] = 0.0
    elif mask != "paper":
        raise ValueError(f"mask must be 'zero' or 'paper', got {mask!r}")
    return WE


def population_loss(
    W: Tensor, T: int, v: int, tau: int, p_m: float, p_c: float, p_r: float, b: Tensor | None = None
) -> Tensor:
    """Eq. (1) with the squared loss (Eq. 3) under Assumption 1, one-hot embeddings and uniform
    attention (Eq. 7 / C.8, ``f = W q + b``), exactly: the mean over every τ-subset document of
    ``‖W q_S + b − p_S‖² + 1 − ‖p_S‖²``. Differentiable in ``W`` and ``b``.

    Args:
        W: ``(..., Tv + 1, Tv + 1)``; b: ``(..., Tv + 1)`` or None (Thm. 2: b^pred = 0).
    Returns:
        ``(...)`` loss (dtype of ``W``; use float64 for closed-form checks).
    """
    pop = population(T, v, tau, p_m, p_c, p_r)
    p, q = pop["p"].to(W), pop["q"].to(W)  # (K, V)
    f = torch.einsum("...ij,kj->...ki", W, q)
    if b is not None:
        f = f + b.unsqueeze(-2)
    return ((f - p).pow(2).sum(-1) + 1.0 - p.pow(2).sum(-1)).mean(-1)


def population_moments(T: int, v: int, tau: int, p_m: float, p_c: float, p_r: float) -> dict[str, Tensor]:
    """:func:`population_loss` without ``b`` as a quadratic form in ``W``:
    ``L(W) = tr(W Σ_qq Wᵀ) − 2 tr(W Σ_qp) + c`` with ``Σ_qq = E[q qᵀ]``, ``Σ_qp = E[q pᵀ]`` over the τ-subset
    documents and ``c = 1`` (``E[1 − ‖p‖² + ‖p‖²]``). Returns ``{"qq": (V, V), "qp": (V, V), "const": ()}``
    float64."""
    pop = population(T, v, tau, p_m, p_c, p_r)
    p, q = pop["p"].double(), pop["q"].double()
    K = q.shape[0]
    return {"qq": q.T @ q / K, "qp": q.T @ p / K, "const": torch.tensor(1.0, dtype=torch.float64)}


def moment_loss(W: Tensor, m: dict[str, Tensor]) -> Tensor:
    """``(E,)``: :func:`population_loss` of every ``W (E, V, V)`` from its :func:`population_moments` ``m``."""
    return ((W @ m["qq"]) * W).sum((1, 2)) - 2 * (W * m["qp"].T).sum((1, 2)) + m["const"]


def ridge_wv(m: dict[str, Tensor], l2: float) -> Tensor:
    """The exact minimiser of ``L(W) + λ‖W‖_F²`` (Thm. 2's ``L_l2reg`` at a finite λ):
    ``W = Σ_pq (Σ_qq + λ I)^{-1}`` (row-wise normal equations), ``(V, V)``."""
    V = m["qq"].shape[0]
    return torch.linalg.solve(m["qq"] + l2 * torch.eye(V, dtype=torch.float64), m["qp"]).T


def min_population_loss(v: int, tau: int) -> float:
    """``1 − 1/(τv)``: the minimum of :func:`population_loss` (Bayes risk of predicting ``p_S``; every
    Lemma 1 member reaches it), for any T >= τ."""
    return 1.0 - 1.0 / (tau * v)


# ----------------------------------------------------------------------------------------------
# Reference levels and lower bounds of the masked-token loss (§3.2 masking, §6.1 LDA or §3.1 uniform-τ documents)


def trivial_masked_error(task: TopicsSpec, loss: str) -> float:
    """The test loss of the trivial predictor of a masked word: uniform over the Tv words. Cross-entropy:
    log(Tv); squared (Eq. 3, summed over V): E‖u − e_x‖² = 1 − 1/(Tv)."""
    n = task.T * task.v
    return math.log(n) if loss == "ce" else 1.0 - 1.0 / n


def optimum_masked_loss(task: TopicsSpec, loss: str) -> float:
    """The loss of predicting every masked word with its document's word distribution ``p`` (``p_i =
    θ_topic(i)/v``): the optimum of a uniform-attention model under Assumption 1 (infinitely long documents),
    which reads ``p`` off the masked document exactly (Lemma 1's family reaches it, §4-§5).

    **Not a lower bound** of the masked loss: a model whose attention reads the masked position's own token
    (kept with probability p_c, a random word with p_r, §3.2) goes below it (0.900 against 0.945 for the
    all-trained squared/Adam model of Fig. 1). The bounds are :func:`bayes_masked_loss` and
    :func:`blind_masked_loss_bound`.

    Squared loss (Eq. 3): ``1 − E‖p‖² = 1 − E[Σ_t θ_t²]/v``; cross-entropy (Eq. 4): ``E[H(p)] = log v + E[H(θ)]``.
    LDA (§6.1, θ ~ Dir(α·1_T)): ``E[Σ θ_t²] = (α + 1)/(Tα + 1)``, ``E[H(θ)] = ψ(Tα + 1) − ψ(α + 1)``;
    uniform-τ (§3.1, θ = 1_S/τ): ``1/τ`` and ``log τ``. Finite documents sit a little above it (θ is then
    not known exactly).
    """
    if task.generator == "lda":
        a, T = task.alpha, task.T
        sum_sq = (a + 1.0) / (T * a + 1.0)
        h_theta = float(digamma(T * a + 1.0) - digamma(a + 1.0))
    else:
        sum_sq, h_theta = 1.0 / task.tau, math.log(task.tau)
    return 1.0 - sum_sq / task.v if loss == "squared" else math.log(task.v) + h_theta


def _topic_mean(task: TopicsSpec, g: Callable[[np.ndarray, np.ndarray], np.ndarray], nodes: int = 96) -> float:
    """``E[g(θ_1, Σ_t θ_t²)]`` over one document's topic proportions, ``g`` vectorised.

    LDA (θ ~ Dir(α 1_T)): ``θ_1 ~ Beta(α, (T − 1)α)`` by Gauss–Jacobi quadrature (exact for polynomials of
    degree < 2·nodes; the integrands here are smooth on [0, 1]), and ``Σ_t θ_t²`` enters through its
    conditional mean ``θ_1² + (1 − θ_1)² (α + 1)/((T − 1)α + 1)`` (the rest is ``(1 − θ_1)·Dir(α 1_{T−1})``),
    so ``g`` must be affine in its second argument. Uniform-τ (θ = 1_S/τ): exact, over θ_1 ∈ {1/τ, 0}.
    """
    T = task.T
    if task.generator == "uniform-tau":
        on, off = np.array([1.0 / task.tau]), np.array([0.0])
        s = np.array([1.0 / task.tau])
        share = task.tau / T  # P(topic 1 is one of the document's τ)
        return float(share * g(on, s)[0] + (1 - share) * g(off, s)[0])
    if T == 1:
        return float(g(np.ones(1), np.ones(1))[0])
    a, b = task.alpha, (T - 1) * task.alpha
    y, w = roots_jacobi(nodes, b - 1.0, a - 1.0)  # weight (1 − y)^(b−1) (1 + y)^(a−1) on [−1, 1]
    x = (1.0 + y) / 2.0
    rest = (a + 1.0) / (b + 1.0) if T > 1 else 0.0  # E Σ y_s² of Dir(α 1_{T−1})
    s = x**2 + (1.0 - x) ** 2 * rest
    return float(np.sum(w * g(x, s)) / np.sum(w))


def _replacement(task: TopicsSpec, replace_from_all: bool) -> tuple[float, float]:
    """``(r, m)``: the probability that a masked position shows a given word by replacement, ``p_r/R``, and that
    it shows [MASK], ``1 − p_c − p_r`` plus ``p_r/R`` when the replacement draws from every id (``R = Tv + 1``,
    the authors' code) rather than the Tv words (§3.2)."""
    n = task.T * task.v
    R = n + 1 if replace_from_all else n
    r = task.p_r / R
    return r, 1.0 - task.p_c - task.p_r + (r if replace_from_all else 0.0)


def bayes_masked_loss(task: TopicsSpec, loss: Literal["squared", "ce"], replace_from_all: bool = False) -> float:
    """A lower bound of the expected masked-token loss (Eq. 1) of every model: the Bayes risk of predicting a
    masked word ``w_j`` knowing the document's θ and the position's own observed token ``w̃_j``.

    Given θ and ``j ∈ M``: ``w_j ~ p`` (``p_i = θ_topic(i)/v``) and ``w̃_j`` is [MASK] with probability ``m``,
    word ``i`` with ``P_i = p_c p_i + r`` (kept, or replaced by ``i``: ``r = p_r/R``), and then the posterior is
    ``π_i(k) = p_k (p_c δ_ik + r)/P_i``; [MASK] leaves ``p``. Given θ nothing else in the masked document bears
    on ``w_j`` (the words are i.i.d. given θ and the masks independent), and the loss weighs each document's M
    by 1/|M| (independent of θ), so the bound is ``E_θ[m R(p) + Σ_i P_i R(π_i)]`` with ``R(q) = 1 − ‖q‖²``
    (squared loss, Eq. 3) or ``H(q)`` (cross-entropy, Eq. 4). At §6.1's settings: 0.8713 (squared) and 2.8955
    nats (cross-entropy), against ``1 − E‖p‖² = 0.9450`` and ``E H(p) = 3.1486`` without the leak.
    """
    r, m = _replacement(task, replace_from_all)
    pc, v, n = task.p_c, task.v, task.T * task.v
    if loss == "squared":
        # Σ_i P_i ‖π_i‖² = Σ_i [p_i² (p_c² + 2 p_c r) + r² ‖p‖²] / P_i, words i grouped by topic (v each)
        def sq(x: np.ndarray, s: np.ndarray) -> np.ndarray:
            pi, den = x / v, pc * x / v + r
            num = pi**2 * (pc**2 + 2 * pc * r) + r**2 * s / v
            return v * np.divide(num, den, out=np.zeros_like(num), where=den > 0)  # P_i = 0: never shown

        norm_p = _topic_mean(task, lambda x, s: s) / v  # E‖p‖² = E Σθ²/v
        return float(1.0 - m * norm_p - task.T * _topic_mean(task, sq))
    if loss == "ce":
        # Σ_i P_i H(π_i) = (p_c + rTv) H(p) − Σ_i [C_i − P_i log P_i], C_i = Σ_k p_k (p_c δ_ik + r) log(p_c δ_ik + r),
        # and m + p_c + rTv = 1 (a masked position's law sums to one): the bound is E H(p) − E Σ_i [C_i − P_i log P_i].
        if task.generator == "uniform-tau":
            h_p = math.log(task.tau * v)
        else:  # E H(p) = log v + E H(θ), E H(θ) = ψ(Tα + 1) − ψ(α + 1) (Dirichlet)
            h_p = math.log(v) + float(digamma(task.T * task.alpha + 1.0) - digamma(task.alpha + 1.0))
        if r == 0.0:  # no replacement: C_i − P_i log P_i = −p_c p_i log p_i, the kept share p_c of H(p)
            return float((1.0 - pc) * h_p)

        def xlogx(x: np.ndarray) -> np.ndarray:
            return np.where(x > 0, x * np.log(np.where(x > 0, x, 1.0)), 0.0)

        def c_term(x: np.ndarray, s: np.ndarray) -> np.ndarray:  # Σ over topic 1's v words (smooth: P_i ≥ r > 0)
            pi = x / v
            return v * ((1 - pi) * r * math.log(r) + pi * xlogx(np.asarray(pc + r)) - xlogx(pc * pi + r))

        assert abs(m + pc + r * n - 1.0) < 1e-12
        return float(h_p - task.T * _topic_mean(task, c_term))
    raise ValueError(f"loss must be 'squared' or 'ce', got {loss!r}")


def mean_inverse_masked(task: TopicsSpec, at_least_one: bool = False) -> float:
    """``E[1/|M|]`` over the documents whose M is not empty (the loss weighs those alone): N uniform on
    ``{n_min..n_max}``, ``|M| ~ Bin(N, p_m)``; ``at_least_one`` (the authors' code) gives an empty M one
    position instead."""
    total = 0.0
    for N in range(task.n_min, task.n_max + 1):
        k = np.arange(1, N + 1)
        pmf = binom.pmf(k, N, task.p_m)
        p0 = float(binom.pmf(0, N, task.p_m))
        total += (float(np.sum(pmf / k)) + p0) if at_least_one else float(np.sum(pmf / k)) / (1.0 - p0)
    return total / (task.n_max - task.n_min + 1)


def blind_masked_loss_bound(task: TopicsSpec, replace_from_all: bool = False, at_least_one: bool = False) -> float:
    """A lower bound of the expected squared masked loss (Eq. 3) of every *position-blind* model, one whose output
    is the same at every position of a document: uniform attention (``W^K = W^Q = 0``, Thms. 1, 2) makes Eq. 6's
    columns equal. Give it θ and even M: its best shared output is the mean over M of the posteriors ``φ_j``
    (:func:`bayes_masked_loss`), i.i.d. given θ with mean ``p``, so its risk is ``1 − E‖p‖² − E[1/|M|]·(E‖φ‖² −
    E‖p‖²)``, i.e. ``L_p − E[1/|M|] (L_p − B)`` with ``L_p = 1 − E‖p‖²`` (the loss of predicting p, which it
    approaches only as N → ∞) and ``B`` the Bayes bound. At §6.1's settings: 0.9410 (L_p = 0.9450)."""
    B = bayes_masked_loss(task, "squared", replace_from_all)
    lp = 1.0 - _topic_mean(task, lambda x, s: s) / task.v
    return float(lp - mean_inverse_masked(task, at_least_one) * (lp - B))

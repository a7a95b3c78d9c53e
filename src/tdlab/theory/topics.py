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
"""

from __future__ import annotations

import math
from typing import Literal

import torch
from torch import Tensor

from tdlab.tasks.topics import population, topic_of

__all__ = [
    "block_sums",
    "c1",
    "c2",
    "c3",
    "dv",
    "family_member",
    "family_residual",
    "in_optimal_family",
    "min_population_loss",
    "population_loss",
    "thm1_bias",
    "thm1_embedding",
    "wv_star",
    "wv_star_entries",
]


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


def min_population_loss(v: int, tau: int) -> float:
    """``1 − 1/(τv)``: the minimum of :func:`population_loss` (Bayes risk of predicting ``p_S``; every
    Lemma 1 member reaches it), for any T >= τ."""
    return 1.0 - 1.0 / (tau * v)

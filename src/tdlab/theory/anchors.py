"""Label laws and embedding-flow closed forms of seed 001 (anchor functions), as plain functions.

Each token ``s`` sees the labels of the sequences that contain it (once per occurrence); ``P^s`` is
the law of that label, ``Y^s`` (Prop. 1). Under small initialisation the embedding ``w^{emb,s}`` first
moves along ``P^s - 1/d (1)`` (Eqs. 5, 20; Props. 2–3, Eq. 28), so tokens with equal laws (memory
anchors, Eq. 7) stay alike and tokens with shifted laws (reasoning anchors, Eqs. 8/22) spread out.

Two kinds of law are offered:

* the seed's formulas — :func:`eq7_memory_law`, :func:`eq22_reasoning_law` (the extended-binomial
  form), :func:`trapezoid_law` (its q = 2 piecewise form), :func:`b2_key_law` (App. B.2, keys with
  noise, mapping types mixed 1:1). They ignore the masked tuples ``M`` and the 100 : 98 memory :
  reasoning-train tuple ratio;
* :func:`token_label_law` — the exact law on the *training population* of a task (equal weight per
  training tuple, keys and noise uniform, every occurrence counted), with the memory part either
  averaged over the label-table draw (``table=None``) or conditional on a drawn table. It is what a
  histogram of generated data converges to.

Also: the exact accuracy ceiling of an order-blind (sum-pooling) model on memory data
(:func:`order_blind_memory_ceiling`), the Eq. 14 vectors and their cosine closed form, and the
gradient-flow right-hand sides of Eq. 20 (Emb-MLP) and Eq. 28 (Def. 2 model).

Matrices in the flow functions are in the paper's row-vector convention (``y = x W``): torch's
``Linear.weight`` is their transpose.
"""

from __future__ import annotations

import functools
import math
from collections import Counter
from typing import Protocol

import numpy as np
import torch
from torch import Tensor

__all__ = [
    "AnchorsSpec",
    "AnchorsTask",
    "b2_key_law",
    "eq7_memory_law",
    "eq14_cosine",
    "eq14_vectors",
    "eq20_embedding_flow",
    "eq22_reasoning_law",
    "eq28_embedding_flow",
    "expected_order_blind_memory_ceiling",
    "extended_binomial",
    "label_law_cosines",
    "memory_law_spread",
    "order_blind_memory_ceiling",
    "order_blind_sample_ceiling",
    "reasoning_theory_cosines",
    "sigma_p",
    "token_label_law",
    "trapezoid_law",
]

F64 = torch.float64


class AnchorsSpec(Protocol):
    """What the closed forms read of a seed 001 task config (``AnchorsConfig``): the token ranges, q, L, the labels."""

    @property
    def key_min(self) -> int: ...  # keys Z = {key_min..key_max}

    @property
    def key_max(self) -> int: ...

    @property
    def mem_min(self) -> int: ...  # memory anchors A_mem = {mem_min..mem_max}

    @property
    def mem_max(self) -> int: ...

    @property
    def rsn_min(self) -> int: ...  # reasoning anchors A_rsn = {rsn_min..rsn_max}

    @property
    def rsn_max(self) -> int: ...

    @property
    def q(self) -> int: ...  # anchors per sequence

    @property
    def L(self) -> int: ...  # sequence length

    @property
    def d_vob(self) -> int: ...  # vocabulary

    @property
    def p_min(self) -> int: ...  # key positions p_min..p_hi (1-based)

    @property
    def p_hi(self) -> int: ...

    @property
    def memory_labels(self) -> str: ...  # "uniform" (F_mem,1) or "window" (F_mem,2)

    @property
    def memory_groups(self) -> int: ...  # 0, or the number of memory-anchor groups (Fig. 7a)


class AnchorsTask(Protocol):
    """What the closed forms read of a seed 001 task (``Anchors``): its config, keys, memory tuples and splits."""

    @property
    def cfg(self) -> AnchorsSpec: ...

    @property
    def keys(self) -> Tensor: ...  # (N_Z,) the key ids

    @property
    def mem_tuples(self) -> Tensor: ...  # (#memory tuples, q), the train split lists them first, in this order

    @property
    def mem_groups(self) -> Tensor: ...  # (#memory tuples,) each one's group (Fig. 7a)

    def split_tuples(self, split: str) -> tuple[Tensor, Tensor]: ...  # tuples (k, q) and kinds (k,), 0 = memory

    def group_range(self, g: int) -> tuple[int, int]: ...  # inclusive label range of memory group g


# ----------------------------------------------------------------------------------------------
# The seed's formulas (App. B.2)


def extended_binomial(n: int, j: int, k: int) -> int:
    """``binom(n, j)_k``: the coefficient of ``x^j`` in ``(1 + x + .. + x^{k-1})^n`` (App. B.2, [3]).

    The number of ways ``n`` values in ``{0..k-1}`` sum to ``j``; 0 outside ``0..n(k-1)``.
    """
    if j < 0 or j > n * (k - 1):
        return 0
    return _repeated_ones_poly(n, k)[j]


@functools.lru_cache(maxsize=64)
def _repeated_ones_poly(n: int, k: int) -> tuple[int, ...]:
    """Integer coefficients of ``(1 + x + .. + x^{k-1})^n``."""
    poly = [1]
    for _ in range(n):
        new = [0] * (len(poly) + k - 1)
        for i, c in enumerate(poly):
            for t in range(k):
                new[i + t] += c
        poly = new
    return tuple(poly)


def eq7_memory_law(cfg: AnchorsSpec) -> Tensor:
    """Eq. 7 / 21: ``P(Y^s = i) = δ_{i in Z} / N_Z`` for every memory anchor (F_mem,1).

    Returns:
        ``(d_vob,)`` float64.
    """
    p = torch.zeros(cfg.d_vob, dtype=F64)
    p[cfg.key_min : cfg.key_max + 1] = 1.0 / (cfg.key_max - cfg.key_min + 1)
    return p


def eq22_reasoning_law(cfg: AnchorsSpec, s: int) -> Tensor:
    """Eq. 22: ``P(Y^s = i) = 1/(N_Z N_A^{q-1}) sum_ζ binom(q-1, i - s - ζ - (q-1) α_min)_{N_A}``, the law
    of ``s + Z + A_1 + .. + A_{q-1}`` with ``Z ~ U(Z)``, ``A_j ~ U(A_rsn)`` (Eq. 8; ``M`` ignored).

    Returns:
        ``(d_vob,)`` float64.
    """
    nz, na, q = cfg.key_max - cfg.key_min + 1, cfg.rsn_max - cfg.rsn_min + 1, cfg.q
    p = torch.zeros(cfg.d_vob, dtype=F64)
    for i in range(cfg.d_vob):
        tot = sum(
            extended_binomial(q - 1, i - s - z - (q - 1) * cfg.rsn_min, na) for z in range(cfg.key_min, cfg.key_max + 1)
        )
        p[i] = tot / (nz * na ** (q - 1))
    return p


def trapezoid_law(cfg: AnchorsSpec, s: int) -> Tensor:
    """The q = 2 case of Eq. 22 (App. B.2, piecewise): a trapezoid rising over
    ``ζ_min + α_min + s .. ζ_min + α_max + s``, flat at ``1/N_Z``, falling over
    ``ζ_max + α_min + 1 + s .. ζ_max + α_max + s`` (assumes ``N_A <= N_Z``).

    Returns:
        ``(d_vob,)`` float64.
    """
    if cfg.q != 2:
        raise ValueError(f"the trapezoid is the q = 2 law, got q={cfg.q}")
    zmin, zmax, amin, amax = cfg.key_min, cfg.key_max, cfg.rsn_min, cfg.rsn_max
    nz, na = zmax - zmin + 1, amax - amin + 1
    if na > nz:
        raise ValueError("trapezoid_law assumes N_A <= N_Z")
    p = torch.zeros(cfg.d_vob, dtype=F64)
    for i in range(cfg.d_vob):
        if zmin + amin + s <= i <= zmin + amax + s:
            p[i] = (i - s - amin - zmin + 1) / (nz * na)
        elif zmin + amax + 1 + s <= i <= zmax + amin + s:
            p[i] = 1.0 / nz
        elif zmax + amin + 1 + s <= i <= zmax + amax + s:
            p[i] = (zmax + amax - i + s + 1) / (nz * na)
    return p


def b2_key_law(cfg: AnchorsSpec, s: int) -> Tensor:
    """App. B.2, keys in the general setting ``X^(q, L)`` (with noise), memory and reasoning mixed 1:1::

        P(Y^s = i) = 1/(2(L-q)) (δ_Z/N_Z + P(s + ΣA = i)) + (L-q-1)/(2(L-q)) (δ_Z/N_Z + P(Z + ΣA = i))

    with ``A_1..A_q ~ U(A_rsn)`` (``M`` ignored). The seed prints ``1/N_Z`` for the memory part; it is
    ``δ_{i in Z}/N_Z`` (memory labels lie in ``Z``), as in its Eq. 7.

    Returns:
        ``(d_vob,)`` float64.
    """
    V, q, L = cfg.d_vob, cfg.q, cfg.L
    sum_a = _uniform_sum_law(cfg.rsn_min, cfg.rsn_max, q)  # law of ΣA on offsets q*α_min..
    off = q * cfg.rsn_min
    mem = eq7_memory_law(cfg)
    as_key = torch.zeros(V, dtype=F64)
    as_key[s + off : s + off + len(sum_a)] = sum_a[: max(0, V - s - off)]
    z_law = eq7_memory_law(cfg)
    as_noise = torch.from_numpy(np.convolve(z_law.numpy(), np.concatenate([np.zeros(off), sum_a.numpy()]))[:V].copy())
    w = 1.0 / (L - q)
    return 0.5 * w * (mem + as_key) + 0.5 * (1 - w) * (mem + as_noise)


def _uniform_sum_law(lo: int, hi: int, n: int) -> Tensor:
    """Law of the sum of ``n`` iid ``U{lo..hi}`` on the offsets ``n*lo, n*lo + 1, ..`` (float64)."""
    k = hi - lo + 1
    law = np.array([1.0])
    for _ in range(n):
        law = np.convolve(law, np.full(k, 1.0 / k))
    return torch.from_numpy(law)


def sigma_p(cfg: AnchorsSpec) -> float:
    """Thm. 1's ``σ_P``: the standard deviation of ``Z + A_1 + .. + A_{q-1}`` (about 29 at the defaults;
    Eq. 14's width 12 = 2 σ^2, i.e. σ = √6, does not follow from it)."""
    nz, na = cfg.key_max - cfg.key_min + 1, cfg.rsn_max - cfg.rsn_min + 1
    return math.sqrt((nz**2 - 1) / 12 + (cfg.q - 1) * (na**2 - 1) / 12)


# ----------------------------------------------------------------------------------------------
# Exact laws on a task's training population


def _conditional_laws(task: AnchorsTask, table: Tensor | None) -> tuple[Tensor, Tensor, Tensor]:
    """Label law given ``(z, tuple)`` for every training tuple.

    Returns:
        ``tuples (k, q)``, ``kinds (k,)`` and ``law (N_Z, k, d_vob)`` float64: the law of the label of
        a sequence with key ``z`` and anchor tuple ``t`` (a point mass for reasoning and for memory given
        a table; the label-draw law for memory without one).
    """
    c = task.cfg
    tuples, kinds = task.split_tuples("train")
    nz, k, V = len(task.keys), len(tuples), c.d_vob
    law = torch.zeros(nz, k, V, dtype=F64)
    z = task.keys
    for j in range(k):
        t = tuples[j]
        if int(kinds[j]) != 0:  # reasoning: y = z + Σa
            law[torch.arange(nz), j, z + int(t.sum())] = 1.0
            continue
        col = j  # memory tuples come first in the train list, in mem_tuples order
        if table is not None:
            law[torch.arange(nz), j, table[:, col]] = 1.0
        elif c.memory_groups:
            lo, hi = task.group_range(int(task.mem_groups[col]))
            law[:, j, lo : hi + 1] = 1.0 / (hi - lo + 1)
        elif c.memory_labels == "uniform":
            law[:, j, c.key_min : c.key_max + 1] = 1.0 / nz
        else:  # window: U{z - S .. z + S}
            S = int(t.sum())
            for zi in range(nz):
                zz = int(z[zi])
                law[zi, j, zz - S : zz + S + 1] = 1.0 / (2 * S + 1)
    return tuples, kinds, law


def token_label_law(task: AnchorsTask, s: int, table: Tensor | None = None) -> Tensor:
    """Exact ``P^s`` on the training population of ``task`` (every occurrence of ``s`` counted).

    The population: every training tuple equally often, ``z_p`` and the noise keys iid ``U(Z)``, the
    key position anywhere (the law does not depend on it). For an anchor ``s``, each tuple counts as
    often as ``s`` occurs in it. For a key ``s``, each sequence has ``L - q`` key-set positions, one of
    them the key, so ``P^s = (law(y | z_p = s) + (L - q - 1) law(y)) / (L - q)`` (App. B.2 with the
    task's own memory : reasoning mix and without the masked tuples).

    Args:
        task: the task.
        s: a token id (key, memory or reasoning anchor).
        table: memory labels (:meth:`Anchors.memory_table`); ``None`` averages over their draw.
    Returns:
        ``(d_vob,)`` float64 probability vector.
    Raises:
        ValueError: ``s`` occurs in no training sequence.
    """
    c = task.cfg
    tuples, _, law = _conditional_laws(task, table)
    if c.key_min <= s <= c.key_max:
        given_key = law[s - c.key_min].mean(0)  # (V,): average over tuples with z = s
        overall = law.mean((0, 1))
        return (given_key + (c.L - c.q - 1) * overall) / (c.L - c.q)
    mult = (tuples == s).sum(1).to(F64)  # occurrences of s per tuple
    if float(mult.sum()) == 0:
        raise ValueError(f"token {s} occurs in no training sequence")
    p = torch.einsum("k,zkv->v", mult, law) / (mult.sum() * law.shape[0])
    return p


def memory_law_spread(task: AnchorsTask) -> float:
    """Eq. 7 checked on a task: ``max |P^s − P^{s_0}|`` over the memory anchors ``s`` (``s_0`` the first,
    :func:`token_label_law`), 0 when every memory anchor has one label law."""
    c = task.cfg
    laws = torch.stack([token_label_law(task, s) for s in range(c.mem_min, c.mem_max + 1)])
    return float((laws - laws[0]).abs().max())


def label_law_cosines(laws: Tensor, d_vob: int | None = None) -> Tensor:
    """Cosines of ``P^{s_i} - 1/d_vob`` and ``P^{s_j} - 1/d_vob`` (Fig. 3C).

    Args:
        laws: ``(n, d_vob)`` probability vectors.
        d_vob: the centring width (default ``laws.shape[-1]``).
    Returns:
        ``(n, n)`` float64.
    """
    x = laws.to(F64) - 1.0 / (d_vob or laws.shape[-1])
    x = x / x.norm(dim=-1, keepdim=True)
    return x @ x.T


def reasoning_theory_cosines(task: AnchorsTask) -> tuple[Tensor, Tensor]:
    """Fig. 3B–C: the laws ``P^s`` of the reasoning anchors on the task's training population and the
    cosines of ``P^s − 1/d_vob``. Returns ``(laws (n, d_vob), cosines (n, n))`` float64."""
    c = task.cfg
    laws = torch.stack([token_label_law(task, s) for s in range(c.rsn_min, c.rsn_max + 1)])
    return laws, label_law_cosines(laws, c.d_vob)


# ----------------------------------------------------------------------------------------------
# Order-blind (sum-pooling) memory ceiling


def order_blind_memory_ceiling(task: AnchorsTask, table: Tensor) -> float:
    """Best memory accuracy of any model that sees only the multiset ``{z_p, a_1, .., a_q}`` (the
    Emb-MLP sums embeddings, Def. 1), on the memory population (tuples equal, keys uniform).

    Orderings of one anchor multiset share an input but carry their own labels ``y^(z, a)``; the best
    prediction for a class is its most frequent label, so the ceiling is
    ``sum_classes max_label count / number of (z, tuple) pairs``.

    Returns:
        a float in ``(0, 1]``.
    """
    tuples = task.mem_tuples
    if len(tuples) == 0:
        raise ValueError("the task has no memory tuples")
    cls = torch.sort(tuples, dim=1).values
    _, inv = torch.unique(cls, dim=0, return_inverse=True)
    nz, k = table.shape
    n_cls = int(inv.max()) + 1
    V = int(table.max()) + 1
    counts = torch.zeros(nz, n_cls, V, dtype=torch.long)
    zi = torch.arange(nz)[:, None].expand(nz, k)
    counts.index_put_((zi, inv[None, :].expand(nz, k), table), torch.ones(nz, k, dtype=torch.long), accumulate=True)
    return float(counts.max(-1).values.sum()) / (nz * k)


def order_blind_sample_ceiling(key: Tensor, anchors: Tensor, label: Tensor) -> float:
    """Best accuracy of any order-blind model (one that sees only the multiset ``{z_p, a_1, .., a_q}``) on a
    given set of memory sequences, e.g. a training set: every class (key, sorted anchors) predicted as its most
    frequent label in the set, ``sum_classes max_label count / n``.

    On a training set the two orderings of an anchor pair occur a random number of times each (keys are drawn
    per sequence), so this exceeds :func:`order_blind_memory_ceiling`'s population value; any one predictor's
    expected accuracy on a random subset of the set is its accuracy on the set, so it bounds that too.

    Args:
        key: ``(n,)`` the keys ``z_p``; anchors: ``(n, q)`` the anchor tuples; label: ``(n,)`` the labels.
    Returns:
        a float in ``(0, 1]``.
    """
    k = torch.cat([key[:, None], torch.sort(anchors, dim=1).values, label[:, None]], 1)  # (class, label) per sequence
    groups, counts = torch.unique(k, dim=0, return_counts=True)  # (class, label) -> count
    _, cls = torch.unique(groups[:, :-1], dim=0, return_inverse=True)
    best = torch.zeros(int(cls.max()) + 1, dtype=torch.long).scatter_reduce(0, cls, counts, "amax")
    return float(best.sum()) / key.shape[0]


def _expected_max_occupancy(m: int, bins: int) -> float:
    """E[max bin count] of ``m`` balls thrown uniformly into ``bins`` bins (exact, by
    ``P(max <= j) = m!/bins^m [x^m] (sum_{i<=j} x^i/i!)^bins``)."""
    if m <= 1:
        return float(m)
    e = 0.0
    for j in range(m):  # E[max] = sum_{j>=0} P(max > j)
        poly = np.array([1.0 / math.factorial(i) for i in range(j + 1)])
        acc = np.array([1.0])
        for _ in range(bins):
            acc = np.convolve(acc, poly)[: m + 1]
        coef = acc[m] if len(acc) > m else 0.0
        e += 1.0 - math.factorial(m) * coef / bins**m
    return e


def expected_order_blind_memory_ceiling(task: AnchorsTask) -> float:
    """:func:`order_blind_memory_ceiling` averaged over the label-table draw (exact): a class of ``m``
    orderings whose labels are iid uniform over ``b`` values contributes ``E[max occupancy]``. For
    F_mem,1 at the defaults: ``(10 + 90 (1 + 1/100)/2)/100 = 0.5545``."""
    c = task.cfg
    classes = Counter(tuple(sorted(t.tolist())) for t in task.mem_tuples)
    groups = {tuple(sorted(t.tolist())): int(g) for t, g in zip(task.mem_tuples, task.mem_groups, strict=True)}
    tot = 0.0
    for cl, m in classes.items():
        if c.memory_groups:
            lo, hi = task.group_range(groups[cl])
            bins = hi - lo + 1
        elif c.memory_labels == "uniform":
            bins = c.key_max - c.key_min + 1
        else:
            bins = 2 * sum(cl) + 1
        tot += _expected_max_occupancy(m, bins)
    return tot / len(task.mem_tuples)


# ----------------------------------------------------------------------------------------------
# Eq. 14 and the embedding flows


def eq14_vectors(
    tokens: Tensor | list[int],
    d_m: int,
    kind: str = "rsn",
    noise_std: float = 0.0,
    generator: torch.Generator | None = None,
) -> Tensor:
    """Eq. 14: ``w̃_i^s = e^{-(i-s)^2/12} - 1/d_m + ε`` (reasoning anchors) or without ``-1/d_m`` (keys),
    ``i = 1..d_m``, ``ε ~ N(0, noise_std^2)`` (the seed: ``noise_std = d_m^{-γ}``).

    Returns:
        ``(n, d_m)`` float64.
    """
    if kind not in ("rsn", "key"):
        raise ValueError(f"kind must be 'rsn' or 'key', got {kind!r}")
    s = torch.as_tensor(tokens, dtype=F64)[:, None]
    i = torch.arange(1, d_m + 1, dtype=F64)[None, :]
    w = torch.exp(-((i - s) ** 2) / 12.0)
    if kind == "rsn":
        w = w - 1.0 / d_m
    if noise_std > 0:
        w = w + noise_std * torch.randn(w.shape, generator=generator, dtype=F64)
    return w


def eq14_cosine(delta: Tensor | float, d_m: int, kind: str = "rsn") -> Tensor:
    """Closed form of the Eq. 14 cosines without noise, for tokens ``|s_i - s_j| = Δ`` far from the
    ends of ``1..d_m`` (sums over ``i`` as Gaussian integrals)::

        cos = (√(6π) e^{-Δ²/24} - κ) / (√(6π) - κ),   κ = (2√(12π) - 1)/d_m   (reasoning; κ = 0 for keys)
    """
    d = torch.as_tensor(delta, dtype=F64)
    kappa = (2 * math.sqrt(12 * math.pi) - 1) / d_m if kind == "rsn" else 0.0
    r = math.sqrt(6 * math.pi)
    return (r * torch.exp(-(d**2) / 24) - kappa) / (r - kappa)


def eq20_embedding_flow(label_counts: Tensor, n_s: int, n: int, W1: Tensor, W2: Tensor) -> Tensor:
    """Eq. 20 (Emb-MLP, small init): ``dw^{emb,s}/dt = (1/n) sum_{i: s in X^i} (y^i - 1/d_vob) W2^T W1^T``.

    Args:
        label_counts: ``(d_vob,)`` sum of the one-hot labels of the sequences containing ``s``
            (with multiplicity).
        n_s: their number (with multiplicity).
        n: number of sequences in the loss average.
        W1: ``W^(1)`` ``(d_m, d_f)`` (paper convention; torch's ``W_1.weight.T``).
        W2: ``W^(2)`` ``(d_f, d_vob)``.
    Returns:
        ``(d_m,)``: minus the loss gradient of ``w^{emb,s}`` in the limit.
    """
    V = W2.shape[1]
    centred = label_counts.to(W1.dtype) - n_s / V
    return centred @ W2.T @ W1.T / n


def eq28_embedding_flow(
    counts_all: Tensor,
    n_all: int | Tensor,
    counts_last: Tensor,
    n_last: int | Tensor,
    n: int,
    L: int,
    W_VO: Tensor,
    W_f: Tensor,
) -> Tensor:
    """Eq. 28 (Def. 2 model, small init)::

        dw^{emb,s}/dt = (1/n) [ sum_{i in n_s} (1/L)(y^i - 1/d_m)(W^VO W^f + W^VO)^T
                              + sum_{i in ñ_s} (y^i - 1/d_m)(W^{f,T} + I) ]

    Args:
        counts_all: label counts ``(d_m,)`` of ``s`` at any position.
        n_all: number of occurrences of ``s`` at any position (or a column of them, ``(k, 1)``, with
            ``counts_all`` ``(k, d_m)``: ``k`` tokens at once, the formula broadcasts).
        counts_last: the label counts over sequences whose last token is ``s``.
        n_last: the number of those sequences.
        n: number of sequences in the loss average; L: sequence length.
        W_VO: ``W^V W^O`` ``(d_m, d_m)``; W_f: ``W^{f1} W^{f2}`` ``(d_m, d_m)`` (paper convention).
    Returns:
        ``(d_m,)``.
    """
    d_m = W_VO.shape[0]
    a = counts_all.to(W_VO.dtype) - n_all / d_m
    b = counts_last.to(W_VO.dtype) - n_last / d_m
    eye = torch.eye(d_m, dtype=W_VO.dtype)
    return (a @ (W_VO @ W_f + W_VO).T / L + b @ (W_f.T + eye)) / n

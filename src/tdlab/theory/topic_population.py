"""Seed 004's ground truth of topic documents (Li, Li & Risteski, ICML 2023), as plain functions.

Vocabulary (§3.1–3.2): ``[MASK] = 0`` plus ``T·v`` words ``1..Tv``; word ``i`` belongs to topic
``topic(i) = ⌈i/v⌉`` (Def. 1). Under Assumption 1 a document *is* its word distribution
``p(i) = θ_{topic(i)}/v``, and after masking its token distribution is F.17 (Prop. 1). :func:`population`
lists every uniform-τ document once, which makes Eq. (1)'s squared loss an exact finite sum
(:mod:`tdlab.theory.topics`). The sampler of such documents is :class:`tdlab.tasks.topics.Topics`.
"""

from __future__ import annotations

import itertools
import math
from typing import overload

import torch
from torch import Tensor

__all__ = ["masked_distribution", "population", "tau_subsets", "topic_of", "topic_words", "word_distribution"]


@overload
def topic_of(i: int, v: int) -> int: ...


@overload
def topic_of(i: Tensor, v: int) -> Tensor: ...


def topic_of(i: int | Tensor, v: int) -> int | Tensor:
    """``topic(i) = ⌈i/v⌉`` (Def. 1) for word ids ``1..Tv``; 0 for [MASK] = 0. Works on ints and
    integer tensors (elementwise)."""
    return (i + v - 1) // v


def topic_words(t: int, v: int) -> range:
    """The words of topic ``t`` (1-based): ``{(t − 1)v + 1, …, tv}`` (Def. 1)."""
    return range((t - 1) * v + 1, t * v + 1)


def word_distribution(theta: Tensor, v: int) -> Tensor:
    """A document's word distribution under Assumption 1: ``p(i) = θ_{topic(i)} / v``, ``p(0) = 0``.

    Args:
        theta: ``(..., T)`` topic proportions (rows sum to 1); for uniform-τ, ``1_S / τ``.
    Returns:
        ``(..., Tv + 1)`` (index 0 is [MASK], which no original document contains).
    """
    words = (theta / v).repeat_interleave(v, dim=-1)
    return torch.cat([torch.zeros_like(words[..., :1]), words], dim=-1)


def masked_distribution(p: Tensor, p_m: float, p_c: float, p_r: float) -> Tensor:
    """Token distribution of the masked document (Prop. 1, F.17), for any word distribution ``p``.

    Args:
        p: ``(..., Tv + 1)`` word distribution with ``p[..., 0] = 0``.
    Returns:
        ``(..., Tv + 1)``: ``q(i) = (1 − (1 − p_c)p_m) p(i) + p_m p_r/(Tv)`` on words,
        ``q(0) = p_m (1 − p_c − p_r)``.
    """
    n_words = p.shape[-1] - 1
    q = (1.0 - (1.0 - p_c) * p_m) * p + p_m * p_r / n_words
    q[..., 0] = p_m * (1.0 - p_c - p_r)
    return q


def tau_subsets(T: int, tau: int, dtype: torch.dtype = torch.float64) -> Tensor:
    """Every uniform-τ document's topic proportions ``θ = 1_S / τ``, one row per τ-subset S of
    ``[T]`` in lexicographic order: ``(C(T, τ), T)``."""
    if not 1 <= tau <= T:
        raise ValueError(f"tau must satisfy 1 <= tau <= T, got tau={tau}, T={T}")
    combos = list(itertools.combinations(range(T), tau))
    theta = torch.zeros(len(combos), T, dtype=dtype)
    for k, S in enumerate(combos):
        theta[k, list(S)] = 1.0 / tau
    return theta


def population(
    T: int, v: int, tau: int, p_m: float, p_c: float, p_r: float, max_docs: int = 200_000
) -> dict[str, Tensor]:
    """Assumption 1's population of uniform-τ documents, exactly: every τ-subset once (all equally
    likely under §3.1's step 1).

    Returns:
        ``theta`` ``(K, T)``, ``p`` ``(K, Tv + 1)`` word distributions (the targets' law at masked
        positions) and ``q`` ``(K, Tv + 1)`` masked-token distributions (F.17, what uniform attention
        reads), ``K = C(T, τ)``, float64.
    """
    if math.comb(T, tau) > max_docs:
        raise ValueError(f"C(T={T}, tau={tau}) = {math.comb(T, tau)} documents exceed max_docs={max_docs}")
    theta = tau_subsets(T, tau)
    p = word_distribution(theta, v)
    return {"theta": theta, "p": p, "q": masked_distribution(p, p_m, p_c, p_r)}

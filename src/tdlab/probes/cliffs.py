"""Cliff sequences of seed 001 (App. D–E.3, Def. 3, Thm. 3): the shape of the second attention layer's
pre-softmax last row that sends the last token's attention to the key and the anchors.

Def. 3 (positions 1-based, ``l in R^L``, key at ``p``, anchors at ``p+1..p+q``): ``l`` is a
``(p, q)``-cliff when

1. (increasing) ``l_{i+1} > l_i`` for all ``i < p``;
2. (plateau) ``(l_{p-1} + l_p)/2 <= l_{p+1}, .., l_{p+q} <= l_p``;
3. (descending) ``l_i < l_1`` for all ``p + q < i <= L``.

For ``p = 1`` there is no ``l_0``: the plateau's lower bound is dropped (our reading; the seed's
definition needs ``p >= 2`` there). Thm. 3: ``softmax(C l)`` puts mass 1 on ``[p, p+q]`` as ``C → ∞``
(its proof: ``l_j <= l_{p-1}`` outside the window, ``l_j > l_{p-1}`` inside it).

Plain functions on tensors with any leading axes (``l`` is named ``scores`` in the code); positions passed 1-based
as in the seed.
"""

from __future__ import annotations

import torch
from torch import Tensor

__all__ = ["is_cliff", "window_mass"]


def _check(scores: Tensor, p: Tensor | int, q: int) -> tuple[Tensor, Tensor]:
    scores = torch.as_tensor(scores)
    if scores.dim() < 1:
        raise ValueError(f"scores must have a last axis of positions, got shape {tuple(scores.shape)}")
    L = scores.shape[-1]
    p = torch.as_tensor(p, dtype=torch.long).expand(scores.shape[:-1])
    if q < 1:
        raise ValueError(f"q must be >= 1, got {q}")
    if bool(((p < 1) | (p + q > L)).any()):
        raise ValueError(f"key positions p must satisfy 1 <= p <= L - q = {L - q} (1-based)")
    return scores, p


def is_cliff(scores: Tensor, p: Tensor | int, q: int) -> Tensor:
    """Def. 3: whether each row of ``scores`` is a ``(p, q)``-cliff.

    Args:
        scores: ``(..., L)``, Def. 3's ``l`` (e.g. the pre-softmax last attention row).
        p: ``(...)`` or an int, the key position, 1-based; anchors at ``p+1..p+q``.
        q: number of anchors.
    Returns:
        ``(...)`` bool.
    """
    scores, p = _check(scores, p, q)
    L = scores.shape[-1]
    pos = torch.arange(1, L + 1)  # 1-based
    pe = p[..., None]
    lv = scores.double()
    # 1. increasing over 1..p: l_{i+1} > l_i for i < p
    inc_ok = torch.ones(scores.shape[:-1], dtype=torch.bool)
    if L > 1:
        steps = lv[..., 1:] > lv[..., :-1]  # (..., L-1): index i-1 holds l_{i+1} > l_i
        need = pos[:-1] < pe  # i < p
        inc_ok = (steps | ~need).all(-1)
    # 2. plateau: l_{p+1..p+q} <= l_p and >= (l_{p-1} + l_p)/2 (when p >= 2)
    l_p = torch.gather(lv, -1, pe - 1)  # (..., 1)
    l_pm1 = torch.gather(lv, -1, (pe - 2).clamp(min=0))
    lower = torch.where(pe >= 2, (l_pm1 + l_p) / 2, torch.full_like(l_p, -torch.inf))
    in_win = (pos > pe) & (pos <= pe + q)
    plat_ok = (((lv <= l_p) & (lv >= lower)) | ~in_win).all(-1)
    # 3. descending tail: l_i < l_1 for i > p + q
    tail = pos > pe + q
    desc_ok = ((lv < lv[..., :1]) | ~tail).all(-1)
    return inc_ok & plat_ok & desc_ok


def window_mass(scores: Tensor, p: Tensor | int, q: int) -> Tensor:
    """``Σ_{i=p}^{p+q} softmax(scores)_i``: the attention mass on the key and its anchors (Thm. 3's window).

    Args:
        scores: ``(..., L)``, Def. 3's ``l``; p: key position, 1-based; q: anchors.
    Returns:
        ``(...)`` float64.
    """
    scores, p = _check(scores, p, q)
    pos = torch.arange(1, scores.shape[-1] + 1)
    pe = p[..., None]
    w = torch.softmax(scores.double(), -1)
    return (w * ((pos >= pe) & (pos <= pe + q))).sum(-1)

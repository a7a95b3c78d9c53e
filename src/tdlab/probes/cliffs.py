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
as in the seed. Read from a trained one-head :class:`~tdlab.models.gpt.GPT`: layer 2's pre-softmax last row and
positional scores (:func:`layer2_rows`, App. D), and layer 1's value path on the word embeddings, the tags of
App. E.2 (:func:`value_tags`, Eqs. 41–43), with the share of their variance an anchor pair explains
(:func:`pair_share`); layer 2's readings on a probe set (:func:`layer2_readings`) and App. E.2's four readings of those tags on a probe set (:func:`value_tag_readings`).
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any

import torch
from torch import Tensor

from tdlab.probes.embedding import spearman_rows

if TYPE_CHECKING:
    from tdlab.models.gpt import GPT

__all__ = [
    "is_cliff",
    "layer2_readings",
    "layer2_rows",
    "pair_share",
    "value_tag_readings",
    "value_tags",
    "window_mass",
]


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


# ------------------------------------------------------------------------------------------------
# Reading a trained model: layer 2's last row (App. D) and layer 1's value tags (App. E.2)


def layer2_rows(model: GPT, tokens: torch.Tensor) -> dict[str, torch.Tensor]:
    """Layer 2's pre-softmax last row and positional scores (App. D).

    Args:
        model: a one-head GPT with ``>= 2`` layers; tokens: ``(E, B, L)``.
    Returns:
        ``scores (E, B, L)`` = ``q_L K^T/√d_k``; ``pattern (E, B, L)`` the cached softmaxed last row (a
        check); ``pos_scores (E, B, L−1)`` = ``q_L (W^pos_{1..L−1} W^K)^T/√d_k``; ``pattern1 (E, B, L, L)``
        layer 1's attention.
    """
    if model.wpe is None:
        raise ValueError("the positional scores need learned absolute positions (model.wpe)")
    L = tokens.shape[-1]
    names = ["blocks.0.out", "blocks.0.attn.pattern", "blocks.1.attn.pattern"]
    _, cache = model.run_with_cache(tokens, names=names)
    x = cache["blocks.0.out"]  # (E, B, L, d): layer 2's input (post-LN)
    attn = model.blocks[1].attn
    Wq, Wk = attn.W_Q.weight, attn.W_K.weight  # (E, d_k, d)
    with torch.no_grad():
        q = torch.einsum("ebd,ekd->ebk", x[:, :, -1], Wq)
        k = torch.einsum("ebtd,ekd->ebtk", x, Wk)
        dk = Wq.shape[1]
        scores = torch.einsum("ebk,ebtk->ebt", q, k) / math.sqrt(dk)
        kp = torch.einsum("etd,ekd->etk", model.wpe[:, : L - 1], Wk)
        pos = torch.einsum("ebk,etk->ebt", q, kp) / math.sqrt(dk)
    return {
        "scores": scores,
        "pattern": cache["blocks.1.attn.pattern"][:, :, 0, -1],
        "pos_scores": pos,
        "pattern1": cache["blocks.0.attn.pattern"][:, :, 0],
    }


def layer2_readings(rows: dict[str, torch.Tensor], key_pos: torch.Tensor, q: int) -> dict[str, Any]:
    """Layer 2 read on a probe set (App. D, Def. 3, Thm. 3), from :func:`layer2_rows`'s ``rows`` and the key's
    0-based index ``key_pos (E, B)``, ``q`` anchors.

    Returns:
        per member: ``cliff_share`` the share of last rows that are ``(p, q)``-cliffs (:func:`is_cliff`),
        ``window_mass`` the mean mass on the key and its anchors (:func:`window_mass`), ``pos_score_mean``
        ``(E, L−1)`` the positional scores averaged over sequences, ``pos_score_spearman`` their Spearman
        with the position 1..L−1; and ``pattern_check``, ``max |softmax(scores) − cached pattern|`` (a float).
    """
    p1 = key_pos + 1  # 1-based key position
    pos = rows["pos_scores"].double().mean(1)
    return {
        "cliff_share": is_cliff(rows["scores"], p1, q).double().mean(-1).tolist(),
        "window_mass": window_mass(rows["scores"], p1, q).mean(-1).tolist(),
        "pattern_check": float((torch.softmax(rows["scores"].double(), -1) - rows["pattern"].double()).abs().max()),
        "pos_score_mean": pos.tolist(),
        "pos_score_spearman": spearman_rows(pos, torch.arange(1, pos.shape[-1] + 1)).tolist(),
    }


def value_tags(model: GPT, tokens: torch.Tensor) -> dict[str, torch.Tensor]:
    """Layer 1's value path on the word embeddings (App. E.2, Eqs. 41–43; Assumption 3 leaves the positions
    out): ``O = Attn^(1) W^{emb,X} W^V`` (paper layout) and its coordinate on ``W^V``'s top right singular
    vector ``v`` (the ``d_k`` side of Eq. 40's rank-one ``W^V``; its sign is arbitrary).

    Returns:
        ``norm (E, B, L)`` ``‖O_j‖`` and ``coord (E, B, L)`` ``⟨O_j, v⟩``.
    """
    _, cache = model.run_with_cache(tokens, names=["blocks.0.attn.pattern"])
    A = cache["blocks.0.attn.pattern"][:, :, 0].double()  # (E, B, L, L)
    W = model.blocks[0].attn.W_V.weight.detach().double()  # (E, d_k, d_m): torch's, the paper's transposed
    word = torch.stack([model.wte[e].detach().double()[tokens[e]] for e in range(tokens.shape[0])])  # (E, B, L, d_m)
    out = torch.einsum("ebjk,ebkd,ecd->ebjc", A, word, W)
    v = torch.linalg.svd(W, full_matrices=False)[0][:, :, 0]  # (E, d_k)
    return {"norm": out.norm(dim=-1), "coord": torch.einsum("ebjc,ec->ebj", out, v)}


def pair_share(x: torch.Tensor, pairs: torch.Tensor) -> torch.Tensor:
    """The share of the variance of ``x (E, B)`` that the group ``pairs (E, B)`` (an id per sequence) explains
    (η² = 1 − within-group / total sum of squares), per member: ``(E,)`` float64."""
    out = []
    for e in range(x.shape[0]):
        xe, g = x[e].double(), pairs[e]
        _, inv = torch.unique(g, return_inverse=True)
        k = int(inv.max()) + 1
        means = torch.zeros(k, dtype=torch.float64).index_add_(0, inv, xe) / torch.bincount(inv, minlength=k)
        out.append(1.0 - float(((xe - means[inv]) ** 2).sum() / ((xe - xe.mean()) ** 2).sum()))
    return torch.tensor(out, dtype=torch.float64)


def value_tag_readings(
    model: GPT, tokens: torch.Tensor, key_pos: torch.Tensor, kind: torch.Tensor, q: int, d_vob: int
) -> dict[str, list[float]]:
    """App. E.2's tags read per member on a probe set (:func:`value_tags`; reasoning sequences ``kind == 1``,
    memory ``kind == 0``): ``untagged_ratio`` (memory / reasoning medians of ‖O_L‖), ``before_ratio`` (median over
    reasoning sequences of the mean ‖O_j‖ on rows ``j <= p`` over rows ``j >= p+q``), ``pair_share`` (η² of
    ``⟨O_L, v⟩`` by anchor pair) and ``shift_spearman`` (|Spearman| of ``⟨O_L, v⟩`` with ``Σa``).

    Args:
        model: the trained transformer, E members.
        tokens: ``(E, B, L)``.
        key_pos: ``(E, B)``, the 0-based index of the key (anchors follow it).
        kind: ``(E, B)``, the sequence kind.
        q: anchors per sequence.
        d_vob: the anchor vocabulary's size (the pair's id is ``Σ_i a_i d_vob^i``).
    Returns:
        the four readings, one float per member each.
    """
    L = tokens.shape[-1]
    tags = value_tags(model, tokens)
    p1 = key_pos + 1  # 1-based p
    j = torch.arange(1, L + 1)[None, None, :]
    before, after = j <= p1[..., None], j >= (p1 + q)[..., None]
    n = tags["norm"]
    ratio = ((n * before).sum(-1) / before.sum(-1)) / ((n * after).sum(-1) / after.sum(-1))
    pos = p1[..., None] + torch.arange(q)  # 0-based positions of the anchors
    anchors = torch.gather(tokens, 2, pos)  # (E, B, q)
    pid = (anchors * (d_vob ** torch.arange(q))).sum(-1)
    out: dict[str, list[float]] = {k: [] for k in ("untagged_ratio", "before_ratio", "pair_share", "shift_spearman")}
    for e in range(n.shape[0]):
        is_mem, is_rsn = kind[e] == 0, kind[e] == 1
        nl = n[e, :, -1]
        out["untagged_ratio"].append(float(nl[is_mem].median() / nl[is_rsn].median()))
        out["before_ratio"].append(float(ratio[e, is_rsn].median()))
        c = tags["coord"][e, is_rsn, -1]
        out["pair_share"].append(float(pair_share(c[None], pid[e, is_rsn][None])[0]))
        out["shift_spearman"].append(abs(float(spearman_rows(c[None], anchors[e, is_rsn].sum(-1).double())[0])))
    return out

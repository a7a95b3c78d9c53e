"""Probes of an embedding space (seed 001 Figs. 3, 4, 6, 9–11, 13): cosine matrices, distance order,
nearest-neighbour order, effective rank and PCA.

Plain functions on ``(..., n, d)`` tensors: ``n`` vectors (rows, e.g. the embeddings of tokens
``ids[0..n-1]``), any leading axes (a member axis ``E``) carried through. Computations run in float64
on the CPU; results are float64 tensors.

* ``cosine_matrix``: ``cos(w_i, w_j)``.
* ``distance_spearman`` (ρ): Spearman correlation of ``cos(w_i, w_j)`` with ``|id_i - id_j|`` over the
  pairs ``i < j`` (ties get average ranks; cosines are rounded to 1e-12 first). Ordered ("hierarchical") embeddings give
  ρ near -1.
* ``nn_order``: share of vectors whose cosine-nearest other vector has id ``id ± 1``; chance is exactly
  ``2/n`` for ids ``0..n-1`` (interior ids have 2 neighbours, the ends 1, among ``n - 1`` others).
* ``pair_spearman`` / ``pair_abs_error``: Spearman correlation / mean absolute difference of the pairs ``i < j``
  of two cosine matrices (a measured one against its theory); ``spearman_rows`` the rank correlation they use.
* ``erank``: ``exp(H(p))``, ``p = σ / Σσ`` the normalised singular values.
* ``pca``: projections on the top principal components of the centred rows.
* ``mean_pairwise_cosine``: the mean off-diagonal cosine of chosen rows of an embedding table (Fig. 6's number).
* ``anchor_cosine_readings``: seed 001's memory and reasoning anchors' cosine structure read off a token table
  (Figs. 3A, 4A, 10: mean off-diagonal cosines, ρ with distance, agreement with a theory's cosines).
* ``positional_cosine_readings``: a positional table's cosines over positions ``1..L−1`` read against their
  distance and against seed 001's Assumption 4, ``cos(π|i − j|/L)`` (Fig. 14D).
* ``error_by_distance``: the mean ``|measured − theory|`` of two cosine matrices along each diagonal ``|i − j|``
  (Fig. 4C: Eq. 14's cosines against the trained ones, by distance).
* ``cosine_agreement``: a measured cosine matrix against a theory's (one per member or one for all): their pairs'
  mean absolute difference, Spearman correlation and the difference by distance.
* ``eq14_member_cosines``: the cosines of seed 001's Eq. 14 vectors (:func:`tdlab.theory.anchors.eq14_vectors`),
  one noise draw per member seed: the theory the trained cosines are read against (Fig. 4C).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np
import torch
from scipy.stats import rankdata
from torch import Tensor

from tdlab.seeding import generators
from tdlab.theory.anchors import eq14_vectors

__all__ = [
    "anchor_cosine_readings",
    "cosine_agreement",
    "cosine_matrix",
    "distance_spearman",
    "eq14_member_cosines",
    "erank",
    "error_by_distance",
    "mean_pairwise_cosine",
    "nn_order",
    "offdiag_mean",
    "pair_abs_error",
    "pair_indices",
    "pair_spearman",
    "pca",
    "positional_cosine_readings",
    "spearman_rows",
]

F64 = torch.float64


def _rows(w: Tensor | np.ndarray) -> Tensor:
    t = torch.as_tensor(w).detach().to("cpu", F64)
    if t.dim() < 2:
        raise ValueError(f"expected (..., n, d) vectors, got shape {tuple(t.shape)}")
    return t


def _ids(ids, n: int) -> Tensor:
    out = torch.arange(n, dtype=F64) if ids is None else torch.as_tensor(ids, dtype=F64)
    if out.shape != (n,):
        raise ValueError(f"ids must have shape ({n},), got {tuple(out.shape)}")
    return out


def cosine_matrix(w: Tensor | np.ndarray) -> Tensor:
    """``(..., n, d) -> (..., n, n)`` cosines between rows (a zero row gives NaN cosines)."""
    x = _rows(w)
    x = x / x.norm(dim=-1, keepdim=True)
    return x @ x.transpose(-1, -2)


def pair_indices(n: int) -> tuple[Tensor, Tensor]:
    """``(i, j)``: the pairs ``i < j`` of ``n`` items (the upper triangle of an ``(n, n)`` matrix), ``(n(n−1)/2,)`` each."""
    i, j = torch.triu_indices(n, n, 1)
    return i, j


def spearman_rows(x: Tensor, y: Tensor) -> Tensor:
    """Spearman correlation along the last axis of ``x (..., n)`` with ``y (n,)`` (ties get average ranks): ``(...)``
    float64."""
    rx = torch.from_numpy(rankdata(x.double().numpy(), axis=-1))
    ry = torch.from_numpy(rankdata(y.double().numpy())).expand_as(rx)
    rx, ry = rx - rx.mean(-1, keepdim=True), ry - ry.mean(-1, keepdim=True)
    return (rx * ry).sum(-1) / (rx.norm(dim=-1) * ry.norm(dim=-1))


def pair_spearman(a: Tensor, b: Tensor) -> Tensor:
    """Spearman correlation of the off-diagonal upper-triangle entries of ``a (..., n, n)`` with those of
    ``b (n, n)``: ``(...)`` float64."""
    i, j = pair_indices(b.shape[-1])
    return spearman_rows(a[..., i, j], b[i, j])


def pair_abs_error(a: Tensor, b: Tensor) -> Tensor:
    """Mean ``|a_ij − b_ij|`` over the pairs ``i < j`` of matrices ``a (..., n, n)`` and ``b`` (the same shape or
    ``(n, n)``): ``(...)`` float64."""
    i, j = pair_indices(a.shape[-1])
    return (a.double() - b.double())[..., i, j].abs().mean(-1)


def offdiag_mean(c: Tensor, absolute: bool = False) -> Tensor:
    """Mean off-diagonal entry of ``(..., n, n)`` matrices (of ``|c|`` when ``absolute``): ``(...)``."""
    n = c.shape[-1]
    mask = ~torch.eye(n, dtype=torch.bool)
    x = c.abs() if absolute else c
    return x[..., mask].mean(-1)


def distance_spearman(w: Tensor | np.ndarray, ids=None) -> Tensor:
    """ρ: Spearman correlation of ``cos(w_i, w_j)`` with ``|id_i - id_j|`` over pairs ``i < j``.

    Args:
        w: ``(..., n, d)``, ``n >= 3``.
        ids (Sequence[int] | None): ``(n,)`` the integer each row stands for (default ``0..n-1``).
    Returns:
        ``(...)`` float64.
    """
    c = cosine_matrix(w)
    n = c.shape[-1]
    if n < 3:
        raise ValueError(f"distance_spearman needs n >= 3 vectors, got {n}")
    i, j = torch.triu_indices(n, n, 1)
    idv = _ids(ids, n)
    dist = (idv[i] - idv[j]).abs()
    # Cosines equal up to float noise (translation-invariant embeddings give many) are ties, not an
    # arbitrary order: round to 1e-12 before ranking.
    cos = torch.round(c[..., i, j], decimals=12)
    rc = torch.from_numpy(rankdata(cos.numpy(), axis=-1)).to(F64)
    rd = torch.from_numpy(rankdata(dist.numpy())).to(F64).expand_as(rc)
    rc, rd = rc - rc.mean(-1, keepdim=True), rd - rd.mean(-1, keepdim=True)
    return (rc * rd).sum(-1) / (rc.norm(dim=-1) * rd.norm(dim=-1))


def nn_order(w: Tensor | np.ndarray, ids=None) -> Tensor:
    """Share of rows whose cosine-nearest other row has id ``id ± 1`` (chance ``2/n`` for ids 0..n-1).

    Args:
        w: ``(..., n, d)``, ``n >= 2``.
        ids (Sequence[int] | None): ``(n,)`` integers (default ``0..n-1``).
    Returns:
        ``(...)`` float64 in ``[0, 1]``.
    """
    c = cosine_matrix(w)
    n = c.shape[-1]
    if n < 2:
        raise ValueError(f"nn_order needs n >= 2 vectors, got {n}")
    c = c.masked_fill(torch.eye(n, dtype=torch.bool), float("-inf"))
    nearest = c.argmax(-1)  # (..., n)
    idv = _ids(ids, n)
    return ((idv[nearest] - idv).abs() == 1).to(F64).mean(-1)


def erank(w: Tensor | np.ndarray) -> Tensor:
    """Effective rank ``exp(-Σ p_k log p_k)``, ``p = σ/Σσ`` over the singular values of each matrix.

    Args:
        w: ``(..., m, n)``.
    Returns:
        ``(...)`` float64 in ``[1, min(m, n)]`` (NaN for a zero matrix).
    """
    s = torch.linalg.svdvals(_rows(w))
    p = s / s.sum(-1, keepdim=True)
    h = -(p * torch.log(torch.where(p > 0, p, torch.ones_like(p)))).sum(-1)
    return torch.exp(h)


def pca(w: Tensor | np.ndarray, k: int = 2) -> tuple[Tensor, Tensor, Tensor]:
    """Projections of the centred rows on their top ``k`` principal components.

    The sign of each component is fixed so that the last row's coordinate is >= the first row's
    (for ordered tokens the first axis then increases with the id where it tracks it).

    Args:
        w: ``(..., n, d)``.
        k: number of components (``<= min(n, d)``).
    Returns:
        ``coords (..., n, k)``, ``explained (..., k)`` (share of the total variance) and
        ``components (..., k, d)`` (unit rows).
    """
    x = _rows(w)
    x = x - x.mean(-2, keepdim=True)
    u, s, vh = torch.linalg.svd(x, full_matrices=False)
    if k > s.shape[-1]:
        raise ValueError(f"k={k} exceeds min(n, d)={s.shape[-1]}")
    coords = u[..., :, :k] * s[..., None, :k]
    sign = torch.where(coords[..., -1, :] >= coords[..., 0, :], 1.0, -1.0).to(F64)
    coords = coords * sign[..., None, :]
    comps = vh[..., :k, :] * sign[..., :, None]
    var = s**2
    explained = var[..., :k] / var.sum(-1, keepdim=True)
    return coords, explained, comps


def mean_pairwise_cosine(wte: torch.Tensor, ids: Sequence[int]) -> list[float]:
    """Mean cosine over the pairs ``i ≠ j`` of the embeddings of ``ids`` (Fig. 6's number), per member.

    Args:
        wte: ``(E, V, d)`` token embeddings; ids: ``n >= 2`` token ids.
    Returns:
        ``E`` floats.
    """
    if len(ids) < 2:
        raise ValueError(f"mean pairwise cosine needs at least 2 tokens, got {len(ids)}")
    return offdiag_mean(cosine_matrix(wte[:, list(ids)])).tolist()


def error_by_distance(measured: torch.Tensor, theory: torch.Tensor) -> dict[int, list[float]]:
    """Mean ``|measured − theory|`` over pairs ``i < j`` at each distance ``|i − j|``, per member.

    Args:
        measured: ``(E, n, n)`` cosine matrices.
        theory: ``(E, n, n)`` or ``(n, n)`` cosine matrices.
    Returns:
        ``{Δ: [per member]}`` for ``Δ = 1..n-1``.
    """
    n = measured.shape[-1]
    err = (measured - theory).abs()
    out = {}
    for d in range(1, n):
        i = torch.arange(n - d)
        out[d] = err[..., i, i + d].mean(-1).tolist()
    return out


def positional_cosine_readings(wpe: Tensor, L: int) -> dict[str, list]:
    """Seed 001's positional cosines (App. D, Fig. 14D; App. E.1, Assumption 4) of the rows ``1..L−1`` (the
    positions before the last) of a positional table ``wpe (E, ≥ L−1, d)``, in float64.

    Returns:
        ``pos_rho`` ``(E,)``: :func:`distance_spearman` of the rows with their position; ``pos_vs_assumption4``
        ``(E,)``: :func:`pair_spearman` of the cosines (rounded to 1e-6: equal up to float32 noise, as equal
        ``|i − j|`` give under Assumption 4, they are ties, not an order) with ``cos(π|i − j|/L)``, empty when
        fewer than 3 rows; ``pos_cos`` ``(L−1, L−1)``: the cosine matrix averaged over members.
    """
    ids = torch.arange(1, L)
    wpe = wpe.double()[:, : L - 1]
    pc = cosine_matrix(wpe)
    d = (ids[:, None] - ids[None, :]).abs().double()
    assumption = torch.cos(math.pi * d / L)
    return {
        "pos_rho": distance_spearman(wpe, ids).tolist(),
        "pos_vs_assumption4": pair_spearman(torch.round(pc, decimals=6), assumption).tolist() if L - 1 >= 3 else [],
        "pos_cos": pc.mean(0).tolist(),
    }


def anchor_cosine_readings(
    W: Tensor, mem: tuple[int, int], rsn: tuple[int, int], theory_cos: Tensor | None = None
) -> dict[str, list[float]]:
    """Per member, seed 001's anchors' cosine readings of a token table ``W (E, vocab, d)`` (Figs. 3A, 4A, 10):
    the memory (token ids ``mem = (lo, hi)``, inclusive) and reasoning (``rsn``) anchors' mean and mean absolute
    off-diagonal cosines, the reasoning anchors' ρ with distance (:func:`distance_spearman` on their ids) and,
    given ``theory_cos (n_rsn, n_rsn)``, their cosines' :func:`pair_spearman` and :func:`pair_abs_error` against it.

    Returns:
        ``mem_cos``, ``rsn_cos``, ``mem_abs_cos``, ``rsn_abs_cos``, ``rsn_rho`` (and ``theory_spearman``,
        ``theory_abs_err`` with ``theory_cos``), one float per member each.
    """
    mem_c = cosine_matrix(W[:, mem[0] : mem[1] + 1])
    rsn_w = W[:, rsn[0] : rsn[1] + 1]
    rsn_c = cosine_matrix(rsn_w)
    out = {
        "mem_cos": offdiag_mean(mem_c).tolist(),
        "rsn_cos": offdiag_mean(rsn_c).tolist(),
        "mem_abs_cos": offdiag_mean(mem_c, absolute=True).tolist(),
        "rsn_abs_cos": offdiag_mean(rsn_c, absolute=True).tolist(),
        "rsn_rho": distance_spearman(rsn_w, torch.arange(rsn[0], rsn[1] + 1)).tolist(),
    }
    if theory_cos is not None:
        out["theory_spearman"] = pair_spearman(rsn_c, theory_cos).tolist()
        out["theory_abs_err"] = pair_abs_error(rsn_c, theory_cos).tolist()
    return out


def eq14_member_cosines(ids: list[int], d_m: int, gamma: float, seeds: list[int], kind: str = "rsn") -> torch.Tensor:
    """Cosines of Eq. 14's vectors for tokens ``ids``, one noise draw ``ε ~ N(0, d_m^{-2γ})`` per member
    seed: ``(E, n, n)`` float64."""
    out = []
    for g in generators(seeds, "eq14-noise"):
        out.append(cosine_matrix(eq14_vectors(ids, d_m, kind, d_m**-gamma, g)))
    return torch.stack(out)


def cosine_agreement(measured: Tensor, theory: Tensor) -> dict[str, Any]:
    """A measured cosine matrix per member against a theory's, over the pairs ``i < j`` (Fig. 4C, Fig. 9).

    Args:
        measured: ``(E, n, n)`` cosine matrices.
        theory: ``(E, n, n)`` (one per member: each member is read against its own) or ``(n, n)``.
    Returns:
        ``abs_err`` (:func:`pair_abs_error`), ``spearman`` (:func:`pair_spearman`) per member, and
        ``error_by_distance`` (:func:`error_by_distance`), as lists.
    """
    if theory.dim() == 3:
        spearman = [float(pair_spearman(measured[m], theory[m])) for m in range(measured.shape[0])]
    else:
        spearman = pair_spearman(measured, theory).tolist()
    return {
        "abs_err": pair_abs_error(measured, theory).tolist(),
        "spearman": spearman,
        "error_by_distance": error_by_distance(measured, theory),
    }

"""Spectral probes of weight matrices: how close to rank one, and along which direction.

Seed 000 (Local to Global), App. A.3.1 (Figs. 3 and 6) and App. C: after training (and, from a
rank-one start, throughout training) the single-layer transformer's weight matrices are
approximately rank one, with the token embedding ``e = e * alpha``, ``alpha in {±1}^d``, as one of
their factors (``W_1 = w * w alpha^T``, ``W_O W_V = alpha v^T``, Eqs. (12)-(15)). These functions
measure exactly those three things — rank-one-ness, alignment of a singular vector with the
embedding, and closeness of the embedding to a scaled hypercube vertex — on ensemble parameters.

Seed 001 (Reasoning Bias), §4.3 and Fig. 5C–D (Thm. 2): at small initialisation the first layer's ``W^V`` is
nearly rank one, its top left singular vector along the reasoning anchors' mean embedding and nearly
orthogonal to the memory anchors' (:func:`wv_spectrum`); Fig. 13's normalised spectra and effective ranks
of every weight matrix (:func:`spectra`).

Every function takes tensors with a leading member axis ``E`` (as stored in a run's
``arrays/ARM.safetensors``) and works per member; nothing mixes members. Matrices follow the model's
``(out, in)`` convention (``y = W x``): a left singular vector lives in the output space, a right
one in the input space. Computations run in float64; results are float64 tensors on the CPU.
"""

from __future__ import annotations

import numpy as np
import torch

from tdlab.probes.embedding import erank

__all__ = [
    "abs_cosine",
    "embedding_alignment",
    "gpt_weight_matrices",
    "hypercube_spread",
    "leading_singular_vectors",
    "singular_values",
    "singular_vector_cosines",
    "spectra",
    "sv_ratio",
    "wv_spectrum",
]


def _as_batch(w: torch.Tensor | np.ndarray, ndim: int, what: str) -> torch.Tensor:
    t = torch.as_tensor(w).detach().to("cpu", torch.float64)
    if t.dim() != ndim:
        raise ValueError(
            f"{what} must have shape {'(E, m, n)' if ndim == 3 else '(E, n)'} (leading member axis), got {tuple(t.shape)}"
        )
    return t


def singular_values(w: torch.Tensor | np.ndarray) -> torch.Tensor:
    """Singular values of each member's matrix.

    Args:
        w: ``(E, m, n)``.
    Returns:
        ``(E, min(m, n))``, descending per member.
    """
    return torch.linalg.svdvals(_as_batch(w, 3, "w"))


def sv_ratio(w: torch.Tensor | np.ndarray) -> torch.Tensor:
    """``sigma_2 / sigma_1`` of each member's matrix: 0 for an exact rank-one matrix, near 1 for an
    isotropic one. A zero matrix (``sigma_1 = 0``) gives NaN: it is not rank one.

    Args:
        w: ``(E, m, n)`` with ``min(m, n) >= 2``.
    Returns:
        ``(E,)``.
    """
    s = singular_values(w)
    if s.shape[1] < 2:
        raise ValueError(f"sigma_2/sigma_1 needs min(m, n) >= 2, got matrices of shape {tuple(w.shape[1:])}")
    s1, s2 = s[:, 0], s[:, 1]
    return torch.where(s1 > 0, s2 / torch.where(s1 > 0, s1, torch.ones_like(s1)), torch.full_like(s1, float("nan")))


def leading_singular_vectors(w: torch.Tensor | np.ndarray) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Leading singular triple ``(u_1, sigma_1, v_1)`` of each member's matrix, ``W v_1 = sigma_1 u_1``.

    The sign of a singular pair is arbitrary (``(-u_1, -v_1)`` is as good); compare directions with
    :func:`abs_cosine`.

    Args:
        w: ``(E, m, n)``.
    Returns:
        ``u_1 (E, m)`` (left, output space), ``sigma_1 (E,)``, ``v_1 (E, n)`` (right, input space),
        unit vectors.
    """
    u, s, vh = torch.linalg.svd(_as_batch(w, 3, "w"), full_matrices=False)
    return u[:, :, 0], s[:, 0], vh[:, 0, :]


def abs_cosine(x: torch.Tensor | np.ndarray, y: torch.Tensor | np.ndarray) -> torch.Tensor:
    """``|<x, y>| / (|x| |y|)`` per member: 1 when the two are parallel or antiparallel (the sign of a
    singular vector is arbitrary), 0 when orthogonal; NaN when either vector is zero.

    Args:
        x: ``(E, n)``.
        y: ``(E, n)``.
    Returns:
        ``(E,)``.
    """
    a, b = _as_batch(x, 2, "x"), _as_batch(y, 2, "y")
    if a.shape != b.shape:
        raise ValueError(f"x and y must have the same shape, got {tuple(a.shape)} and {tuple(b.shape)}")
    den = a.norm(dim=1) * b.norm(dim=1)
    num = (a * b).sum(1).abs()
    return torch.where(
        den > 0, num / torch.where(den > 0, den, torch.ones_like(den)), torch.full_like(den, float("nan"))
    )


def hypercube_spread(e: torch.Tensor | np.ndarray) -> torch.Tensor:
    """How far a vector is from a scaled hypercube vertex ``c * alpha``, ``alpha in {±1}^n``: the
    relative spread ``std(|e_i|) / mean(|e_i|)`` of its entries' magnitudes (population std).

    0 exactly when every entry is ``±c`` for one ``c > 0`` (App. C: ``e = e * alpha``); about
    ``sqrt(pi/2 - 1) = 0.756`` for a large Gaussian vector (half-normal magnitudes); NaN for the
    zero vector.

    Args:
        e: ``(E, n)``.
    Returns:
        ``(E,)``.
    """
    mag = _as_batch(e, 2, "e").abs()
    mean = mag.mean(1)
    std = mag.std(1, correction=0)
    return torch.where(
        mean > 0, std / torch.where(mean > 0, mean, torch.ones_like(mean)), torch.full_like(mean, float("nan"))
    )


def embedding_alignment(w: torch.Tensor, e: torch.Tensor) -> dict[str, torch.Tensor]:
    """``|cos|`` of each member's leading left/right singular vector with the embedding ``e``, for
    whichever sides are ``d``-dimensional, and ``best``, the larger of the two (seed 000's measure:
    "one of their components being same as the embedding vector", App. A.3.1).

    Args:
        w: ``(E, m, n)``; e: ``(E, d)``.
    Returns:
        dict with ``left`` and/or ``right`` and ``best``, each ``(E,)``.
    """
    u1, _, v1 = leading_singular_vectors(w)
    out: dict[str, torch.Tensor] = {}
    if u1.shape[1] == e.shape[1]:
        out["left"] = abs_cosine(u1, e)
    if v1.shape[1] == e.shape[1]:
        out["right"] = abs_cosine(v1, e)
    if not out:
        raise ValueError(f"no side of the {tuple(w.shape[1:])} matrices has the embedding's dimension {e.shape[1]}")
    out["best"] = torch.stack(list(out.values())).max(0).values
    return out


def wv_spectrum(W_V: torch.Tensor, emb: torch.Tensor, rsn: slice, mem: slice) -> dict[str, list[float]]:
    """``W^V``'s singular values and the alignment of its top left singular vector (paper layout
    ``V = X W^V``, ``W^V in R^{d_m x d_k}``: torch's ``(E, d_k, d_m)`` weight is its transpose, so the
    paper's left singular vectors are torch's right ones, in the embedding space).

    Args:
        W_V: ``(E, d_k, d_m)`` torch's weights (or flows) of ``W^V``; emb: ``(E, vocab, d_m)`` the word
            embeddings; rsn / mem: the reasoning / memory anchors' token ids (rows of ``emb``).

    Returns:
        ``sv_ratio`` (σ1/σ2), ``rsn_align`` / ``mem_align`` (|cos(u1, mean anchor embedding)|) per member,
        and ``sv`` (E, r) normalised by σ1.
    """
    _, s, vh = torch.linalg.svd(W_V.double(), full_matrices=False)
    u1 = vh[:, 0, :]  # (E, d_m)

    def align(rows: torch.Tensor) -> torch.Tensor:
        m = rows.double().mean(1)
        return ((u1 * m).sum(-1) / (u1.norm(dim=-1) * m.norm(dim=-1))).abs()

    return {
        "sv_ratio": (s[:, 0] / s[:, 1]).tolist(),
        "rsn_align": align(emb[:, rsn]).tolist(),
        "mem_align": align(emb[:, mem]).tolist(),
        "sv": (s / s[:, :1]).tolist(),
    }


def spectra(mats: dict[str, torch.Tensor]) -> dict[str, dict[str, list]]:
    """Seed 001 Fig. 13: per matrix ``(E, m, n)`` of ``mats``, ``sv`` ``(E, min(m, n))`` its singular values over
    the largest and ``erank`` ``(E,)`` its effective rank (:func:`~tdlab.probes.embedding.erank`), as lists."""
    out = {}
    for k, W in mats.items():
        s = torch.linalg.svdvals(W.double())
        out[k] = {"sv": (s / s[:, :1]).tolist(), "erank": erank(W).tolist()}
    return out


def gpt_weight_matrices(arrays: dict[str, torch.Tensor], layers: int) -> dict[str, torch.Tensor]:
    """``{paper name: (E, m, n)}`` of the matrices of seed 001's Fig. 13, read from stored GPT arrays (the
    embeddings, each layer's ``W^Q, W^K, W^V, W^O, W^f1, W^f2`` and an untied output layer's ``W^out``)."""
    out = {"W^emb": arrays["wte"], "W^pos": arrays["wpe"]}
    for layer in range(layers):
        for k in ("Q", "K", "V", "O"):
            out[f"W^{k} (layer {layer + 1})"] = arrays[f"blocks.{layer}.attn.W_{k}.weight"]
        out[f"W^f1 (layer {layer + 1})"] = arrays[f"blocks.{layer}.mlp.W_1.weight"]
        out[f"W^f2 (layer {layer + 1})"] = arrays[f"blocks.{layer}.mlp.W_2.weight"]
    if "lm_head" in arrays:
        out["W^out"] = arrays["lm_head"]
    return out


def singular_vector_cosines(W_V: torch.Tensor, emb: torch.Tensor, groups: list[slice], k: int = 5) -> torch.Tensor:
    """Seed 001 Fig. 5D for one member: the cosines of ``W^V``'s top ``k`` left singular vectors (paper layout, in
    the embedding space: torch's ``(d_k, d_m)`` weight's right ones, as :func:`wv_spectrum`) with the mean
    embedding of each group of token ids.

    Args:
        W_V: ``(d_k, d_m)`` torch's weight of ``W^V``; emb: ``(vocab, d_m)`` word embeddings; groups: token-id
            ranges (rows of ``emb``).
    Returns:
        ``(k, len(groups))`` float64, signed.
    """
    _, _, vh = torch.linalg.svd(W_V.double(), full_matrices=False)
    e = emb.double()
    means = torch.stack([e[g].mean(0) for g in groups])
    return (vh[:k] @ means.T) / (vh[:k].norm(dim=1)[:, None] * means.norm(dim=1)[None, :])

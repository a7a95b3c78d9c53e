"""Attention probes: where a head looks, and how much of it is "context matching".

Seed 003 ("Attention with Markov", talk), Part II: the in-context k-gram estimator predicts
``x_{t+1}`` from the tokens that followed earlier occurrences of the current ``k``-context
("Match contexts & count"); a transformer that implements it (a k-th order induction head) must put
its last layer's attention on exactly those positions. :func:`context_matching_score` measures
that mass against what uniform causal attention would put there (chance).

Conventions (0-based, as in :mod:`tdlab.theory.kgram`): a query at position ``t`` predicts
``x_{t+1}``; its current context is ``x_{t-k+1..t}``. Key ``i`` *matches* when the ``k`` tokens
before it equal the current context, ``x_{i-k..i-1} = x_{t-k+1..t}``, with ``k <= i <= t`` (causal):
then ``x_i`` is one of the tokens the estimator counts.

Patterns come from ``GPT.run_with_cache(tokens, names=["blocks.{l}.attn.pattern"])``, shape
``(E, B, H, T, T)``, rows = queries, columns = keys.

Also read here: seed 001's first attention layer of the anchors' transformer, its distance to the average
operator (:func:`average_operator_error`, Lemma 1) and the spectrum of its ``W^V`` flow (:func:`wv_flow`,
Thm. 2); seed 004's Fig. 5 trainer probe of the attention weights' norms and ``W^V``'s rotation
(:class:`AttentionWeightProbe`).
"""

from __future__ import annotations

from collections import deque
from collections.abc import Sequence
from typing import TYPE_CHECKING

import numpy as np
import torch
import torch.nn.functional as F

from tdlab.models.gpt import GPT
from tdlab.probes.spectrum import wv_spectrum
from tdlab.theory.kgram import context_states

if TYPE_CHECKING:  # matplotlib is imported where a figure is drawn, not with the module
    from matplotlib.figure import Figure

__all__ = [
    "WEIGHT_NORMS",
    "WV_ROTATION",
    "AttentionWeightProbe",
    "attention_patterns",
    "average_operator_error",
    "context_match_mask",
    "context_matching_score",
    "median_average_operator_error",
    "plot_attention_maps",
    "wv_flow",
]


def context_match_mask(tokens: torch.Tensor, k: int, vocab: int = 2) -> torch.Tensor:
    """Which keys share the query's ``k``-context.

    Args:
        tokens: ``(..., T)`` integer tokens.
        k: context length ``>= 1``.
        vocab: alphabet size.
    Returns:
        ``(..., T, T)`` bool; entry ``[t, i]`` is true iff ``k <= i <= t`` and
        ``x_{i-k..i-1} = x_{t-k+1..t}``.
    """
    if k < 1:
        raise ValueError(f"k must be >= 1, got {k}")
    s = context_states(tokens, k, vocab)  # s[j] = state of x_{j-k+1..j}, -1 for j < k-1
    T = s.shape[-1]
    prev = torch.full_like(s, -2)  # context *before* key i: state s[i-1]; none for i = 0
    prev[..., 1:] = s[..., :-1]
    idx = torch.arange(T, device=s.device)
    causal = (idx[None, :] <= idx[:, None]) & (idx[None, :] >= k)  # (T, T): k <= i <= t
    same = (s[..., :, None] == prev[..., None, :]) & (s[..., :, None] >= 0)
    return same & causal


def context_matching_score(
    pattern: torch.Tensor, tokens: torch.Tensor, k: int, vocab: int = 2, keep_dims: int = 0
) -> tuple[torch.Tensor, torch.Tensor]:
    """Attention mass on context-matching keys, and its value under uniform causal attention.

    Averaged over every query row that has at least one matching key (other rows carry no
    information about matching) and over all dims but the first ``keep_dims``.

    Args:
        pattern: ``(..., T, T)`` attention weights (rows sum to 1 over keys ``i <= t``).
        tokens: ``(..., T)``, broadcastable to ``pattern.shape[:-1]`` (e.g. ``(E, B, 1, T)`` for an
            ``(E, B, H, T, T)`` pattern).
        k: context length of the matching.
        keep_dims: leading dims kept in the result (``1`` gives one value per ensemble member).
    Returns:
        ``(score, chance)``, each of shape ``pattern.shape[:keep_dims]`` (float64): ``score`` the mean
        of ``sum_{i matches t} att[t, i]``, ``chance`` the mean of ``#matches(t) / (t + 1)``.
    """
    T = pattern.shape[-1]
    match = context_match_mask(tokens, k, vocab)  # (..., T, T)
    match = torch.broadcast_to(match, pattern.shape)
    mass = (pattern.double() * match).sum(-1)  # (..., T)
    count = match.sum(-1).double()
    chance = count / torch.arange(1, T + 1, dtype=torch.float64, device=pattern.device)
    valid = (count > 0).double()
    dims = tuple(range(keep_dims, mass.dim()))
    n = valid.sum(dims) if dims else valid
    if bool((n == 0).any()):
        raise ValueError("no query position has a matching context; use longer sequences")
    score = (mass * valid).sum(dims) / n if dims else mass
    base = (chance * valid).sum(dims) / n if dims else chance
    return score, base


def attention_patterns(model, tokens: torch.Tensor) -> list[torch.Tensor]:
    """Every layer's attention pattern for ``tokens (E, B, T)``: a list of ``(E, B, H, T, T)``."""
    names = [f"blocks.{i}.attn.pattern" for i in range(model.cfg.layers)]
    _, cache = model.run_with_cache(tokens, names=names)
    return [cache[n] for n in names]


def plot_attention_maps(
    patterns: Sequence[torch.Tensor | np.ndarray],
    tokens: Sequence[int],
    titles: Sequence[str],
    match: torch.Tensor | np.ndarray | None = None,
    suptitle: str = "",
) -> Figure:
    """One heat map per pattern (``(T, T)``, rows = queries), side by side.

    Args:
        patterns: one ``(T, T)`` map per panel (e.g. each layer of one member and head).
        tokens: the ``T`` tokens, written along both axes when ``T <= 64``.
        titles: one per panel.
        match: optional ``(T, T)`` bool context-match mask (:func:`context_match_mask`), drawn as
            dots on the last panel.
    Returns:
        the figure (save it with :func:`tdlab.report.figures.save_figure`).
    """
    # a bare Figure needs no pyplot backend (nor the report's plotting helpers): a probe only draws
    from matplotlib.figure import Figure

    n = len(patterns)
    fig = Figure(figsize=(4.2 * n, 4.2))
    axes = fig.subplots(1, n, squeeze=False)
    T = len(tokens)
    for j, (ax, att, title) in enumerate(zip(axes[0], patterns, titles, strict=True)):
        a = att.detach().cpu().numpy() if isinstance(att, torch.Tensor) else np.asarray(att)
        im = ax.imshow(a, cmap="viridis", vmin=0.0, vmax=max(float(a.max()), 1e-9), interpolation="nearest")
        if match is not None and j == n - 1:
            m = match.cpu().numpy() if isinstance(match, torch.Tensor) else np.asarray(match)
            rows, cols = np.nonzero(m)
            ax.scatter(cols, rows, s=4, c="red", marker="o", lw=0, label="context match")
            ax.legend(fontsize=7, loc="upper right")
        if T <= 64:
            ticks = np.arange(T)
            labels = [str(int(t)) for t in tokens]
            ax.set_xticks(ticks, labels, fontsize=5)
            ax.set_yticks(ticks, labels, fontsize=5)
        ax.set_xlabel("key (token)")
        ax.set_ylabel("query (token)")
        ax.set_title(title, fontsize=9)
        fig.colorbar(im, ax=ax, fraction=0.046, pad=0.04)
    if suptitle:
        fig.suptitle(suptitle, fontsize=10)
    return fig


# ------------------------------------------------------------------------------------------------
# Seed 001 (§4.3, Lemma 1, Thm. 2): the first attention layer of the anchors' transformer


def average_operator_error(pattern: torch.Tensor) -> torch.Tensor:
    """``|A_jk − 1/j|·j`` over the causal entries ``k <= j`` of rows ``j >= 2`` (1-based).

    Args:
        pattern: ``(..., T, T)`` row-softmax attention.
    Returns:
        ``(..., M)`` float64, ``M = Σ_{j=2}^{T} j`` entries per matrix.
    """
    T = pattern.shape[-1]
    j = torch.arange(1, T + 1, dtype=torch.float64)[:, None]
    keep = torch.ones(T, T, dtype=torch.bool).tril()
    keep[0] = False
    err = (pattern.double() - 1.0 / j).abs() * j
    return err[..., keep]


def median_average_operator_error(pattern: torch.Tensor) -> torch.Tensor:
    """Each member's median :func:`average_operator_error` over all its matrices' entries (Fig. 5B's number).

    Args:
        pattern: ``(E, ..., T, T)`` row-softmax attention, member first.
    Returns:
        ``(E,)`` float64.
    """
    return average_operator_error(pattern).reshape(pattern.shape[0], -1).median(-1).values


def wv_flow(
    model: GPT, tokens: torch.Tensor, labels: torch.Tensor, emb: torch.Tensor, rsn: slice, mem: slice
) -> dict[str, list]:
    """Thm. 2 on the post-LN model: :func:`~tdlab.probes.spectrum.wv_spectrum` of ``−∇_{W^V}`` (layer 1) of the last-position
    cross-entropy, mean over the sequences of each member (the flow's right-hand side at these parameters).

    Args:
        tokens: ``(E, B, L)``; labels ``(E, B)``; emb: ``(E, vocab, d_m)`` the word embeddings.
    """
    model.zero_grad()
    logits = model(tokens)[:, :, -1]
    F.cross_entropy(logits.flatten(0, 1), labels.flatten(), reduction="none").view(labels.shape).mean(
        1
    ).sum().backward()
    grad = model.blocks[0].attn.W_V.weight.grad
    assert grad is not None  # backward() above reaches W^V
    flow = -grad.detach()
    model.zero_grad()
    return wv_spectrum(flow, emb, rsn, mem)


# ------------------------------------------------------------------------------------------------
# Seed 004 (Fig. 5): the attention weights' norms and W^V's rotation along training

WEIGHT_NORMS = ("norm_K", "norm_Q", "norm_V")  # metric names of ‖W^K‖_F, ‖W^Q‖_F, ‖W^V‖_F (per layer: ".../L{l}")
WV_ROTATION = "rotation_V"  # metric name of W^V's rotation (per layer: ".../L{l}")


class AttentionWeightProbe:
    """Trainer probe of a :class:`~tdlab.models.gpt.GPT`'s attention weights (seed 004 Fig. 5): per layer ``l`` the
    Frobenius norms ``norm_K/L{l}``, ``norm_Q/L{l}``, ``norm_V/L{l}`` (heads concatenated, ``(E,)``) and, once
    ``lag`` steps of history exist, ``rotation_V/L{l}`` = (1 − cos(W^V_t, W^V_{t−lag}))/2. Called every step
    (``probe_every=1``); the history restarts with each new model (chunk)."""

    def __init__(self, lag: int = 10) -> None:
        self.lag = lag
        self._model: int | None = None
        self._hist: dict[int, deque] = {}

    def __call__(self, model: torch.nn.Module) -> dict[str, torch.Tensor]:
        if not isinstance(model, GPT):
            raise TypeError(f"AttentionWeightProbe reads a GPT's attention weights, got {type(model).__name__}")
        if id(model) != self._model:
            self._model, self._hist = id(model), {}
        out = {}
        for layer, blk in enumerate(model.blocks):
            a = blk.attn
            for name, lin in zip(WEIGHT_NORMS, (a.W_K, a.W_Q, a.W_V), strict=True):
                out[f"{name}/L{layer}"] = lin.weight.detach().flatten(1).norm(dim=1)
            wv = a.W_V.weight.detach().flatten(1).double().clone()
            h = self._hist.setdefault(layer, deque(maxlen=self.lag + 1))
            h.append(wv)
            if len(h) == self.lag + 1:
                cs = torch.nn.functional.cosine_similarity(h[0], h[-1], dim=1)
                out[f"{WV_ROTATION}/L{layer}"] = (1.0 - cs) / 2.0
        return out

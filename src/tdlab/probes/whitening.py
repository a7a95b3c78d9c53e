"""The whitening diagnostic of seed 002's unrestricted linear cross-attention stacks (Barnfield, Sen & Sur,
Fig. 3, Sec. 7, App. H), and how far training moved them from their init.

Layer ``t`` of an LCA_T stack maps the context to ``F_t``; the stack whitens the covariates when
``X F_t^T / L`` approaches the identity (:func:`tdlab.theory.icl.whitening_error`, whose infinite-context limit
is :func:`tdlab.theory.icl.whitening_error_limit`). :func:`whitening_by_layer` reads it from the model's own
intermediates on raw prompts, :func:`whitening_from_stats` from prompt statistics at any context length,
:func:`whitening_noise` gives its layer-to-layer bootstrap noise, :func:`relative_move` the distance trained
weights moved relative to their init's offset.
"""

from __future__ import annotations

import math

import numpy as np
import torch

from tdlab.models.linear_attention import LCA
from tdlab.theory.icl import whitening_error
from tdlab.theory.icl_stats import PromptStats

__all__ = ["relative_move", "whitening_by_layer", "whitening_from_stats", "whitening_noise"]


def whitening_by_layer(model: LCA, X: torch.Tensor, y: torch.Tensor, x_query: torch.Tensor) -> torch.Tensor:
    """``||X F_t^T / L - I||_F / sqrt(d)`` for t = 0..T on raw prompts, from the model's own
    intermediates (:func:`tdlab.theory.icl.whitening_error`).

    Args:
        X: ``(E, N, L, d)`` contexts; y: ``(E, N, L)``; x_query: ``(E, N, d)``.
    Returns:
        ``(E, T+1, N)``.
    """
    with torch.no_grad():
        _, inter = model(X, y, x_query, return_intermediates=True)
        return torch.stack([whitening_error(X, F) for F in inter["F"]], 1)


def whitening_from_stats(model: LCA, stats: PromptStats) -> torch.Tensor:
    """:func:`whitening_by_layer` for prompts given by their statistics, at any ``L``.

    Without LayerNorm ``F_t = X P_t`` with ``P_t`` a function of ``Lambda_hat`` only, and the diagnostic
    is ``||Lambda_hat P_t - I||_F / sqrt(d)``. The model is run on the d-token context
    ``X' = sqrt(d) Lambda_hat^(1/2)``, which has ``X'^T X' / d = Lambda_hat`` exactly, so it returns
    ``F'_t = X' P_t`` and ``whitening_error(X', F'_t)`` is the diagnostic of the original prompts."""
    if model.pre_ln:
        raise ValueError("pre-LN models are not functions of Lambda_hat; use whitening_by_layer on raw prompts")
    d = stats.shape[-1]
    lam, U = torch.linalg.eigh(stats.gram)
    Xc = math.sqrt(d) * (U * lam.clamp_min(0.0).sqrt()[..., None, :]) @ U.transpose(-1, -2)
    return whitening_by_layer(model, Xc, torch.zeros_like(Xc[..., 0]), stats.x_query)


def whitening_noise(w: torch.Tensor, n_boot: int, seed: int) -> torch.Tensor:
    """Layer-to-layer noise of the median whitening error: the bootstrap (over prompts) standard error of
    ``(w_{t+1} - w_t) / w_t`` for the medians, median over layers ``t >= 1``.

    Args:
        w: ``(E, T+1, N)`` whitening errors (:func:`whitening_by_layer`).
        n_boot: bootstrap resamples of the ``N`` prompts, drawn from ``seed``.
    Returns:
        ``(E,)`` (zeros when there are fewer than two layers ``t >= 1``).
    """
    E, _, N = w.shape
    g = torch.Generator().manual_seed(int(seed) % (2**63))
    idx = torch.randint(0, N, (n_boot, N), generator=g)
    med = torch.stack([w[..., i].median(-1).values for i in idx], -1)  # (E, T+1, B)
    rel = (med[:, 2:] - med[:, 1:-1]) / med[:, 1:-1]
    if rel.shape[1] == 0:
        return torch.zeros(E, dtype=w.dtype)
    return rel.std(-1).median(-1).values


def relative_move(
    final: dict[str, np.ndarray], init: dict[str, np.ndarray], centre: dict[str, np.ndarray]
) -> np.ndarray:
    """Per member: ``|theta_final - theta_init| / |theta_init - centre|`` over the trained weights (App. H centres
    the init on the tied optimum: a member that stayed there shows the init, not what training found).

    Args:
        final, init: ``{name: (E, ...)}`` the weights after and before training.
        centre: ``{name: (E, ...)}`` (or broadcastable) the point the init was drawn around; its keys are the
            weights compared.
    Returns:
        ``(E,)``.
    """
    num = sum(((final[k] - init[k]) ** 2).reshape(final[k].shape[0], -1).sum(1) for k in centre)
    den = sum(((init[k] - centre[k]) ** 2).reshape(init[k].shape[0], -1).sum(1) for k in centre)
    return np.sqrt(num) / np.maximum(np.sqrt(den), 1e-300)

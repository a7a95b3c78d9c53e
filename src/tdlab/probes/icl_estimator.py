"""How far a next-token law is from the order-k in-context estimator (seed 003, "Attention with Markov",
talk, Part II, slide "Intuition").

The talk's 3-layer construction (:func:`tdlab.models.normalised_attention.construction`, attention weights
``att_{T,n} ∝ exp(κ cos(v_n, u_T))``) realises a k-th order induction head: as κ grows its next-token law
tends to the add-β order-k estimator (:func:`tdlab.theory.kgram.kgram_probs`). :func:`construction_gaps`
measures that on given sequences, for a grid of κ: an exact computation, no training and no seed noise.
"""

from __future__ import annotations

import torch

from tdlab.models.normalised_attention import construction
from tdlab.theory.kgram import cross_entropy, kgram_probs

__all__ = ["construction_gaps"]


@torch.no_grad()
def construction_gaps(
    tokens: torch.Tensor, k: int, kappas: list[float], beta: float
) -> list[tuple[float, float, float]]:
    """For each κ: ``(gap, max_kl, loss_gap)`` on ``tokens (N, T)``, in nats: the mean over positions of
    KL(estimator || construction) (≥ 0, zero iff they agree), its largest value, and the mean per-token
    loss of the construction minus the add-β order-k estimator's on the realised tokens (either sign:
    on a finite sample the construction may beat the estimator)."""
    ref = kgram_probs(tokens, k, 2, beta)
    ref_loss = cross_entropy(ref, tokens)
    out = []
    for kap in kappas:
        model = construction(k, kap, beta)
        p = model(tokens[None]).exp()[0]
        loss = cross_entropy(p, tokens)
        kl = (ref * (ref.log() - p.clamp_min(1e-300).log())).sum(-1)
        out.append((float(kl.mean()), float(kl.max()), float((loss - ref_loss).mean())))
    return out

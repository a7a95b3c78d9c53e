"""How much arithmetic one optimiser step of a configuration does, estimated from the config alone.

The batch's cost model (:func:`tdlab.batch._prior`) scales a measured quick run to another profile by what a
step's work grows with. The activations a step keeps (:func:`tdlab.train.memory.estimate`) grow with the width
``d``; the matrix products grow with ``d²``, so a profile that widens the model (seed 004's real-text runs:
d 64 -> 512; seed 001's labels: 64 -> 200) is slower by the extra factor the activations miss (measured: 7.5x
and ~5x over a prior read from activations). Next-token (and masked-token) training of a transformer only:
the sizes are read from the config tree as the memory estimate reads them; ``None`` where the config is not
one.

Per token, the forward pass multiplies and adds, per layer, ``4 d d_attn`` for the query, key, value and output
maps (3 without an output map), ``2 d d_ff`` for the MLP (none without one) and ``T d_attn`` for the scores and
the weighted values over the ``T / 2`` keys a causal position sees on average (``T`` of them for an encoder:
``2 T d_attn``); then ``d V`` for the unembedding. The backward pass does about twice the forward's: a step is
three forward passes' worth, over every member's batch of sequences.
"""

from __future__ import annotations

from pydantic import BaseModel

from tdlab.train.memory import model_vocab, subconfig_with

__all__ = ["step_flops"]


def step_flops(cfg: BaseModel) -> float | None:
    """Multiply-adds of one optimiser step of ``cfg`` (every member's), or ``None`` where ``cfg`` is not
    transformer training on sequences (a sub-config with ``batch`` and ``seq_len``, a model with ``d`` and
    ``layers``; its vocabulary from :func:`~tdlab.train.memory.model_vocab`)."""
    found, model = subconfig_with(cfg, "batch", "seq_len"), subconfig_with(cfg, "d", "layers")
    if found is None or model is None:
        return None
    train, m = found[1], model[1]
    T, d = int(train.seq_len), int(m.d)
    da = int(getattr(m, "attn_width", d))
    dff = int(getattr(m, "ff_width", getattr(m, "mlp_ratio", 4) * d)) if getattr(m, "mlp", True) else 0
    maps = 4 if getattr(m, "out_proj", True) else 3
    keys = T / 2 if getattr(m, "causal", True) else T
    per_layer = maps * d * da + 2 * d * dff + 2 * keys * da
    per_token = int(m.layers) * per_layer + d * model_vocab(cfg, m)
    members = int(getattr(cfg, "members", 1))
    return 3.0 * members * int(train.batch) * T * per_token

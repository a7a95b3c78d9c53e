"""The Emb-MLP of seed 001 (Def. 1, §4.2) and the one-layer transformer of Def. 2 (§4.3), ensemble-first.

Emb-MLP (Def. 1), on ``X = [z, a_1, .., a_q]`` (``L = q + 1``)::

    G(X) = σ( sum_{s in X} w^{emb,s} W^(1) ) W^(2),   W^emb (d_vob x d_m), W^(1) (d_m x d_f), W^(2) (d_f x d_vob)

no biases; ``σ`` is unstated — Assumption 1 needs ``σ(0) = 0, σ'(0) = 1``: the default ``tanh`` (and
``identity``) satisfy it, ``relu``/``gelu`` are offered but do not (σ'(0) is 0/undefined and 1/2).
Sum-pooling is order-blind: ``(z, a_1, a_2)`` and ``(z, a_2, a_1)`` get one output (see
:func:`tdlab.theory.anchors.order_blind_memory_ceiling`).

Def. 2 model, for the theory tests (Props. 2–3, Eq. 28): no LayerNorm, no positions, output in
``R^{d_m}`` (softmax over ``d_m >= d_vob`` classes)::

    A = softmax(mask(X W^Q W^{K,T} X^T / √d_k)),  X = W^{emb,X}
    u = A_{L,:} X W^V W^O + X_{L,:}
    f(X) = σ(u W^{f1}) W^{f2} + u                                              (Eq. 9)

Parameters carry a leading member axis ``E`` and are γ-initialised (§3.4, :mod:`tdlab.models.init`)
per member from ``generators(seeds, Purpose.INIT)``, one γ per member allowed (a γ-sweep trains as one
ensemble). Linear maps are stored torch-style ``(E, out, in)``; the paper's row-vector matrices are
their transposes.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Literal

import torch
import torch.nn.functional as F
from pydantic import Field, model_validator
from torch import nn

from tdlab.config import Config
from tdlab.models.ensemble import EnsembleLinear, EnsembleModel
from tdlab.models.hooks import HookPoint
from tdlab.models.init import gamma_normal_

__all__ = ["ACTIVATIONS", "Def2Config", "Def2Transformer", "EmbMLP", "EmbMLPConfig", "def2_paper_matrices"]

ACTIVATIONS = {
    "tanh": torch.tanh,
    "identity": lambda x: x,
    "relu": F.relu,
    "gelu": F.gelu,
}


class EmbMLPConfig(Config):
    """Architecture and γ-init of :class:`EmbMLP` (A.3 defaults)."""

    vocab: int = Field(200, ge=2, le=65536)  # d_vob (A.3)
    d_m: int = Field(200, ge=1, le=8192)  # embedding width (A.3)
    d_f: int = Field(512, ge=1, le=16384)  # hidden width (A.3)
    activation: Literal["tanh", "identity", "relu", "gelu"] = "tanh"  # σ unstated; Assumption 1 -> tanh
    gamma: float = Field(0.8, ge=0.0, le=10.0)  # initialisation rate (§3.4); A.3 sweeps 0.3, 0.5, 0.8
    fan: Literal["out", "in"] = "out"  # §3.4: output width (the paper); "in": the group's code


class _HiddenPoints(nn.Module):
    """The hidden layer's hook points (no parameters), so that their names read ``hidden.hook_pre``."""

    def __init__(self) -> None:
        super().__init__()
        self.hook_pre = HookPoint("hidden.pre")
        self.hook_post = HookPoint("hidden")


class _AttentionPoints(nn.Module):
    """The attention pattern's hook point (no parameters): ``attn.hook_pattern``."""

    def __init__(self) -> None:
        super().__init__()
        self.hook_pattern = HookPoint("attn.pattern")


class _GammaEnsemble(EnsembleModel):
    """The per-member γ of a γ-initialised ensemble (both models below)."""

    W_emb: nn.Parameter  # the token table (E, vocab, d_m), set by each model

    def _members(self, cfg, seeds: Sequence[int], gammas: Sequence[float] | None) -> int:
        """Set ``cfg``, ``seeds`` and ``gammas`` (one per member; ``cfg.gamma`` when None); returns ``E``."""
        E = self._set_members(seeds)
        self.cfg = cfg
        self.gammas = [cfg.gamma] * E if gammas is None else [float(g) for g in gammas]
        if len(self.gammas) != E:
            raise ValueError(f"gammas has {len(self.gammas)} values for {E} members")
        return E

    def _embed(self, tokens: torch.Tensor) -> torch.Tensor:
        """``W_emb`` rows of ``tokens (E, B, L)``: ``(E, B, L, d_m)``."""
        if tokens.dim() != 3:
            raise ValueError(f"tokens must be (E, B, L), got shape {tuple(tokens.shape)}")
        E, B, L = tokens.shape
        self.check_members(E)
        W = self.W_emb
        return torch.gather(W, 1, tokens.reshape(E, B * L, 1).expand(E, B * L, W.shape[-1])).reshape(E, B, L, -1)


class EmbMLP(_GammaEnsemble):
    """``E`` independent Emb-MLPs (Def. 1).

    Args:
        cfg: architecture and init.
        seeds: one seed per member; member ``e`` equals ``EmbMLP(cfg, [seeds[e]], [gammas[e]])``.
        gammas: one γ per member (default ``cfg.gamma`` for all).

    ``forward(tokens (E, B, L) long) -> logits (E, B, vocab)``. Hook points (short names of :meth:`cache` in
    brackets): ``hook_embed`` [``embed``] ``(E, B, L, d_m)``, ``hook_pooled`` [``pooled``] ``(E, B, d_m)``
    (Σ_s w^{emb,s}), ``hidden.hook_pre`` [``hidden.pre``] / ``hidden.hook_post`` [``hidden``] ``(E, B, d_f)``,
    ``hook_logits`` ``(E, B, vocab)``. Parameters: ``W_emb (E, vocab, d_m)``, ``W_1.weight (E, d_f, d_m)`` (= W^(1)ᵀ),
    ``W_2.weight (E, vocab, d_f)`` (= W^(2)ᵀ).
    """

    def __init__(self, cfg: EmbMLPConfig, seeds: Sequence[int], gammas: Sequence[float] | None = None) -> None:
        super().__init__()
        E = self._members(cfg, seeds, gammas)
        self.W_emb = nn.Parameter(torch.empty(E, cfg.vocab, cfg.d_m))
        self.W_1 = EnsembleLinear(E, cfg.d_m, cfg.d_f)
        self.W_2 = EnsembleLinear(E, cfg.d_f, cfg.vocab)
        self.act = ACTIVATIONS[cfg.activation]
        self.hook_embed = HookPoint("embed")
        self.hook_pooled = HookPoint("pooled")
        self.hidden = _HiddenPoints()
        self.hook_logits = HookPoint()
        self.reset_parameters()

    def reset_parameters(self) -> None:
        """γ-init (§3.4) per member, in the order W_emb, W_1, W_2 from the member's INIT stream."""
        gens = self.member_generators()
        fan = self.cfg.fan
        gamma_normal_(self.W_emb.data, self.gammas, fan, gens, layout="in_out")  # W^emb: vocab -> d_m
        gamma_normal_(self.W_1.weight.data, self.gammas, fan, gens)
        gamma_normal_(self.W_2.weight.data, self.gammas, fan, gens)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        x = self.hook_embed(self._embed(tokens))
        pooled = self.hook_pooled(x.sum(2))  # Σ_{s in X} w^{emb,s} (Def. 1): order-blind
        h = self.hidden.hook_post(self.act(self.hidden.hook_pre(self.W_1(pooled))))
        return self.hook_logits(self.W_2(h))


class Def2Config(Config):
    """The Def. 2 one-layer model (theory tests)."""

    vocab: int = Field(200, ge=2, le=65536)
    d_m: int = Field(200, ge=1, le=8192)  # output in R^{d_m}: labels are classes, so d_m >= vocab
    d_k: int = Field(64, ge=1, le=8192)
    d_f: int = Field(512, ge=1, le=16384)
    activation: Literal["tanh", "identity", "relu", "gelu"] = "tanh"
    gamma: float = Field(0.8, ge=0.0, le=10.0)
    fan: Literal["out", "in"] = "out"

    @model_validator(mode="after")
    def _check(self) -> Def2Config:
        if self.d_m < self.vocab:
            raise ValueError(
                f"d_m={self.d_m} must be >= vocab={self.vocab}: Def. 2 outputs in R^d_m, one class per token"
            )
        return self


class Def2Transformer(_GammaEnsemble):
    """``E`` independent Def. 2 models (Eq. 9): one attention layer read at the last position, a
    residual FFN, no LayerNorm, logits ``f(X) in R^{d_m}``.

    ``forward(tokens (E, B, L) long) -> (E, B, d_m)``. Hook points (short names in brackets): ``hook_embed``
    [``embed``] ``(E, B, L, d_m)``, ``attn.hook_pattern`` [``attn.pattern``] ``(E, B, L, L)``, ``hook_attn_out``
    ``(E, B, d_m)`` (``W^O W^V`` of the last position's attention), ``hook_u`` [``u``] ``(E, B, d_m)`` (the
    residual sum), ``hook_logits`` ``(E, B, d_m)``. Parameters: ``W_emb (E, vocab, d_m)``,
    ``W_Q, W_K, W_V`` (d_m -> d_k), ``W_O`` (d_k -> d_m), ``W_f1`` (d_m -> d_f), ``W_f2`` (d_f -> d_m).
    """

    def __init__(self, cfg: Def2Config, seeds: Sequence[int], gammas: Sequence[float] | None = None) -> None:
        super().__init__()
        E = self._members(cfg, seeds, gammas)
        self.W_emb = nn.Parameter(torch.empty(E, cfg.vocab, cfg.d_m))
        self.W_Q = EnsembleLinear(E, cfg.d_m, cfg.d_k)
        self.W_K = EnsembleLinear(E, cfg.d_m, cfg.d_k)
        self.W_V = EnsembleLinear(E, cfg.d_m, cfg.d_k)
        self.W_O = EnsembleLinear(E, cfg.d_k, cfg.d_m)
        self.W_f1 = EnsembleLinear(E, cfg.d_m, cfg.d_f)
        self.W_f2 = EnsembleLinear(E, cfg.d_f, cfg.d_m)
        self.act = ACTIVATIONS[cfg.activation]
        self.hook_embed = HookPoint("embed")
        self.attn = _AttentionPoints()
        self.hook_attn_out = HookPoint()
        self.hook_u = HookPoint("u")
        self.hook_logits = HookPoint()
        self.reset_parameters()

    def reset_parameters(self) -> None:
        gens = self.member_generators()
        fan = self.cfg.fan
        gamma_normal_(self.W_emb.data, self.gammas, fan, gens, layout="in_out")
        for lin in (self.W_Q, self.W_K, self.W_V, self.W_O, self.W_f1, self.W_f2):
            gamma_normal_(lin.weight.data, self.gammas, fan, gens)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        x = self.hook_embed(self._embed(tokens))
        L = x.shape[2]
        q, k = self.W_Q(x), self.W_K(x)
        scores = q @ k.transpose(-1, -2) / math.sqrt(self.cfg.d_k)  # Eq. 2
        causal = torch.ones(L, L, dtype=torch.bool, device=x.device).tril()
        att = self.attn.hook_pattern(scores.masked_fill(~causal, float("-inf")).softmax(-1))
        mixed = torch.einsum("ebj,ebjd->ebd", att[:, :, -1, :], x)  # A_{L,:} W^{emb,X}
        u = self.hook_u(self.hook_attn_out(self.W_O(self.W_V(mixed))) + x[:, :, -1, :])
        return self.hook_logits(self.W_f2(self.act(self.W_f1(u))) + u)  # Eq. 9


def def2_paper_matrices(state: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """One member's Def. 2 parameters (:meth:`Def2Transformer.member_state`) in the paper's layout (float64):
    ``W_emb (vocab, d_m)``, ``W_V (d_m, d_k)``, ``W_O (d_k, d_m)``, ``W_f = W^{f1} W^{f2} (d_m, d_m)``,
    ``W_VO = W^V W^O (d_m, d_m)``, ``W2 = (W^O W^f + W^O)ᵀ (d_m, d_k)`` (B.8)."""
    s = {k: v.double() for k, v in state.items()}
    W_V, W_O = s["W_V.weight"].T, s["W_O.weight"].T
    W_f = s["W_f1.weight"].T @ s["W_f2.weight"].T
    return {"W_emb": s["W_emb"], "W_V": W_V, "W_O": W_O, "W_f": W_f, "W_VO": W_V @ W_O, "W2": (W_O @ W_f + W_O).T}

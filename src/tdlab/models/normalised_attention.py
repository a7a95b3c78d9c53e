"""Normalised (cosine) attention, and the talk's 3-layer construction of the order-k in-context estimator.

Seed 003 ("Attention with Markov", talk), Part II, slide "Intuition" (under "Constant depth
suffices" / "Without non-linearities, you need logarithmic depth"):

    att_{T,n}  ∝  exp( κ <v_n, u_T> / (||v_n||_2 ||u_T||_2) )          (realises a k-th order induction head)

with the embedding of position n stacked as ``[Emb(x_n); u_n/||u_n||; v_n/||v_n||]``: ``u`` describes
the *current* k-context ("capture context"), ``v`` the k-context *before* the token, and the cosine
match of ``u_T`` against every ``v_n`` picks the positions whose preceding context equals the current
one ("match contexts & count"); averaging their ``Emb(x_n)`` gives the in-context count ratio.

The model (one file, nanoGPT style, ensemble-first; member ``e`` initialised from ``seeds[e]`` alone):

    h_n   = wte[x_n]                                                   (no absolute positions)
    s_ni  = κ_l cos(W_Q h_n, W_K h_i + a^K_{n-i})    i <= n           (cosine score, relative keys)
    s_n∅  = κ_l + b_l                                                  (null slot: cosine 1 by definition)
    att   = softmax over {i <= n} ∪ {∅}
    h_n  += W_O ( Σ_i att_ni (W_V h_i + a^V_{n-i}) + att_n∅ v∅_l )     (attention-only, no MLP, no LN)
    logits = h W_U^T  (readout "linear")   or   log h[prob slots]  (readout "prob", the construction)

Relative key/value embeddings ``a^K_j, a^V_j`` (Shaw et al. 2018, distance clipped at ``rel_clip``) are
the "relative positional encodings" of the talk's theorem. The talk gives no weights; what it leaves
open is derived here (ours), :func:`construction`:

* **Layer 1** (positional attention, "capture context"): the query is a constant, the keys are the
  relative embeddings only, with ``cos = 1 - j ln2/κ`` at distance ``j < k`` and ``-1`` beyond, so
  ``att_{n,n-j} ∝ 2^{-j}`` on the last k tokens (up to ``e^{-2κ}`` leakage). Its values write
  ``u_n = Σ_j 2^{-j} x_{n-j} / Σ_j 2^{-j}`` (a binary code of the context, injective on {0,1}^k)
  and ``m_n = Σ_j att j`` (mean distance attended: it tells a full context, ``n >= k - 1``, from the
  shorter ones at the start of the sequence, which the estimator does not count).
* **Layer 2** (positional attention): attends to distance 1 and copies ``(u_{n-1}, m_{n-1})`` into the
  ``v`` slots (the context *before* token n); at n = 0 only distance 0 exists and the value embedding
  ``a^V_0`` sets a first-position flag instead.
* **Layer 3** (induction head, "match contexts & count"): query ``(u_T - 1/2, m_T - m_k, 0, 1/2)``, key
  ``(u'_n - 1/2, m'_n - m_k, flag_n, 1/2)``: the cosine is 1 exactly when the key's preceding context
  is a full k-context equal to the query's, and at most ``1 - δ_k`` otherwise. The value is the
  one-hot ``Emb(x_n)``. The null slot (value uniform, logit ``κ + ln(V β)``) carries the smoothing:
  as κ → ∞ the output tends to ``(N(s→v) + β) / (N(s) + V β)``, the add-β estimator of
  :func:`tdlab.theory.kgram.kgram_probs` (β = 1: Laplace), and to the uniform law where the context has
  no earlier occurrence (or is not yet complete) — exactly the estimator's conventions.

Named activations: ``embed``, ``blocks.{l}.attn.pattern`` ``(E, B, 1, T, T)`` (the weights on real keys;
rows sum to ``1 - null``), ``blocks.{l}.attn.null`` ``(E, B, 1, T)``, ``blocks.{l}.out``, ``final``.
"""

from __future__ import annotations

import math
from typing import Literal

import torch
import torch.nn.functional as F
from pydantic import Field, model_validator
from torch import nn

from tdlab.config import Config
from tdlab.models.ensemble import EnsembleLinear, EnsembleModel, Modules
from tdlab.models.hooks import HookPoint

__all__ = [
    "CONSTRUCTION_D",
    "SLOTS",
    "NormAttnConfig",
    "NormalisedAttention",
    "code_weights",
    "construction",
    "construction_probs",
    "full_mean_distance",
]

# Residual-stream coordinates of the construction (d = 10): one-hot token, a constant 1, the context
# code u and mean distance m (layer 1), their copies from the previous position u', m' and the
# first-position flag g (layer 2), and the predicted law (layer 3).
SLOTS = {"x0": 0, "x1": 1, "one": 2, "u": 3, "m": 4, "u_prev": 5, "m_prev": 6, "flag": 7, "p0": 8, "p1": 9}
CONSTRUCTION_D = len(SLOTS)


class NormAttnConfig(Config):
    """Architecture of :class:`NormalisedAttention` (binary tokens; one head per layer, as the talk)."""

    vocab: int = Field(2, ge=2, le=2)  # the construction's value slots are binary (talk: binary Markov)
    d: int = Field(16, ge=2, le=1024)  # residual width (construction: CONSTRUCTION_D)
    layers: int = Field(3, ge=1, le=16)  # talk: 3 layers
    rel_clip: int = Field(8, ge=1, le=4096)  # distances >= rel_clip share one embedding (construction: max(k, 2))
    kappa: float = Field(8.0, gt=0.0, le=1e6)  # initial κ of every layer (our choice; the talk gives none)
    learn_kappa: bool = True  # κ trained (per layer) or fixed
    null_slot: bool = True  # the always-matching null key (the smoothing / "no match" mass)
    readout: Literal["linear", "prob"] = "linear"  # "prob": log of the p-slots (the construction)
    init_std: float = Field(0.2, gt=0.0, le=10.0)  # N(0, std^2) for every matrix and embedding (ours)

    @model_validator(mode="after")
    def _check(self) -> NormAttnConfig:
        if self.readout == "prob" and self.d < CONSTRUCTION_D:
            raise ValueError(
                f"readout='prob' reads the construction's slots: d must be >= {CONSTRUCTION_D}, got {self.d}"
            )
        return self


class CosineAttention(nn.Module):
    """One head of causal cosine attention with relative key/value embeddings and a null slot.

    Input and output ``(E, B, T, d)``. Parameters: ``W_Q, W_K, W_V, W_O`` ``(E, d, d)``, ``rel_k,
    rel_v`` ``(E, rel_clip + 1, d)``, ``log_kappa`` ``(E,)``, ``null_bias`` ``(E,)``, ``null_v`` ``(E, d)``.
    """

    W_Q: EnsembleLinear
    W_K: EnsembleLinear
    W_V: EnsembleLinear
    W_O: EnsembleLinear
    rel_k: nn.Parameter
    rel_v: nn.Parameter
    log_kappa: nn.Parameter
    null_bias: nn.Parameter | None  # None without a null slot
    null_v: nn.Parameter | None

    def __init__(self, cfg: NormAttnConfig, E: int, index: int) -> None:
        super().__init__()
        d = cfg.d
        self.cfg, self.index = cfg, index
        self.W_Q, self.W_K, self.W_V, self.W_O = (EnsembleLinear(E, d, d) for _ in range(4))
        self.rel_k = nn.Parameter(torch.empty(E, cfg.rel_clip + 1, d))
        self.rel_v = nn.Parameter(torch.empty(E, cfg.rel_clip + 1, d))
        # κ = exp(log κ) stays positive; fixed unless learn_kappa
        self.log_kappa = nn.Parameter(torch.full((E,), math.log(cfg.kappa)), requires_grad=cfg.learn_kappa)
        if cfg.null_slot:
            self.null_bias = nn.Parameter(torch.zeros(E))
            self.null_v = nn.Parameter(torch.empty(E, d))
        else:
            self.null_bias = self.null_v = None
        self.hook_pattern = HookPoint(f"blocks.{index}.attn.pattern")  # (E, B, 1, T, T): one head
        self.hook_null = HookPoint(f"blocks.{index}.attn.null") if cfg.null_slot else None  # (E, B, 1, T)
        self.hook_attn_out = HookPoint()  # (E, B, T, d): the layer's output before the residual sum
        self.hook_resid_post = HookPoint(f"blocks.{index}.out")  # (E, B, T, d), called by the model

    def forward(self, h: torch.Tensor) -> torch.Tensor:
        E, B, T, _d = h.shape
        n = torch.arange(T, device=h.device)
        causal = n[None, :] <= n[:, None]  # (T, T): key i <= query n
        dist = (n[:, None] - n[None, :]).clamp(min=0, max=self.cfg.rel_clip)
        q, k = F.normalize(self.W_Q(h), dim=-1, eps=1e-12), self.W_K(h)  # (E, B, T, d)
        # cos(q_n, k_i + a_j), j = min(n - i, clip), without the (E, B, T, T, d) tensor of shifted keys:
        # <q, k + a> = <q, k> + <q, a_j> and |k + a|^2 = |k|^2 + 2 <k, a_j> + |a_j|^2, each (E, B, T, T).
        rk = self.rel_k[:, None]  # (E, 1, R, d)
        qa = torch.gather(q @ rk.transpose(-1, -2), -1, dist.expand(E, B, T, T))  # <q_n, a_{n-i}>
        ka = k @ rk.transpose(-1, -2)  # (E, B, T_i, R): <k_i, a_j>
        ka = torch.gather(ka.transpose(-1, -2), -2, dist.expand(E, B, T, T))  # [n, i] = <k_i, a_{n-i}>
        a2 = (self.rel_k * self.rel_k).sum(-1)[:, dist][:, None]  # (E, 1, T, T): |a_{n-i}|^2
        norm2 = (k * k).sum(-1)[:, :, None, :] + 2 * ka + a2
        cos = (q @ k.transpose(-1, -2) + qa) / norm2.clamp_min(0).sqrt().clamp_min(1e-12)
        kappa = self.log_kappa.exp()[:, None, None, None]
        scores = (kappa * cos).masked_fill(~causal, float("-inf"))
        if self.null_bias is not None and self.null_v is not None:
            null = (kappa[..., 0] + self.null_bias[:, None, None]).expand(E, B, T)[..., None]  # cos = 1 by definition
            scores = torch.cat([scores, null], dim=-1)
        att = scores.softmax(-1)
        real = self.hook_pattern(att[..., :T].unsqueeze(2)).squeeze(2)
        # Σ_i att_ni a^V_{n-i} = Σ_j (attention mass at distance j) a^V_j
        by_dist = torch.zeros(E, B, T, self.cfg.rel_clip + 1, dtype=real.dtype, device=real.device)
        by_dist.scatter_add_(-1, dist.expand(E, B, T, T), real)
        out = real @ self.W_V(h) + by_dist @ self.rel_v[:, None]
        if self.null_v is not None:
            assert self.hook_null is not None  # built with the null slot
            null = self.hook_null(att[..., T].unsqueeze(2)).squeeze(2)  # (E, B, T)
            out = out + null[..., None] * self.null_v[:, None, None, :]
        return self.hook_attn_out(self.W_O(out))


class NormalisedAttention(EnsembleModel):
    """``E`` attention-only transformers with cosine attention (module docstring).

    Args:
        cfg: architecture.
        seeds: one seed per member; member ``e`` equals ``NormalisedAttention(cfg, [seeds[e]])``.

    ``forward(tokens (E, B, T) int64) -> logits (E, B, T, V)``. Hook points (short names in brackets):
    ``hook_embed`` [``embed``] ``(E, B, T, d)``; per layer ``l`` (each block is one attention layer)
    ``blocks.{l}.hook_pattern`` [``blocks.{l}.attn.pattern``] ``(E, B, 1, T, T)``, ``blocks.{l}.hook_null``
    [``blocks.{l}.attn.null``] ``(E, B, 1, T)`` (the null slot's weight), ``blocks.{l}.hook_attn_out``
    ``(E, B, T, d)``, ``blocks.{l}.hook_resid_post`` [``blocks.{l}.out``]; ``hook_final`` [``final``] and
    ``hook_logits``.
    """

    def __init__(self, cfg: NormAttnConfig, seeds: list[int]) -> None:
        super().__init__()
        E = self._set_members(seeds)
        self.cfg = cfg
        self.wte = nn.Parameter(torch.empty(E, cfg.vocab, cfg.d))
        self.blocks: Modules[CosineAttention] = Modules(CosineAttention(cfg, E, i) for i in range(cfg.layers))
        self.lm_head = nn.Parameter(torch.empty(E, cfg.vocab, cfg.d)) if cfg.readout == "linear" else None
        self.hook_embed = HookPoint("embed")
        self.hook_final = HookPoint("final")
        self.hook_logits = HookPoint()
        self.reset_parameters()

    def reset_parameters(self) -> None:
        """Every matrix and embedding ~ N(0, init_std²) in registration order, member ``e`` from its own
        ``Purpose.INIT`` generator; κ = ``cfg.kappa``, null biases 0."""
        gens = self.member_generators()
        with torch.no_grad():
            for name, prm in self.named_parameters():
                if name.endswith(("log_kappa", "null_bias")):
                    continue
                for e, g in enumerate(gens):
                    prm[e].normal_(0.0, self.cfg.init_std, generator=g)

    def kappas(self) -> torch.Tensor:
        """``(E, layers)`` the κ of every layer."""
        return torch.stack([b.log_kappa.exp() for b in self.blocks], dim=1)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        E, B, T = tokens.shape
        self.check_members(E)
        h = torch.gather(self.wte, 1, tokens.reshape(E, B * T, 1).expand(E, B * T, self.cfg.d)).reshape(E, B, T, -1)
        h = self.hook_embed(h)
        for blk in self.blocks:
            h = blk.hook_resid_post(h + blk(h))
        h = self.hook_final(h)
        if self.lm_head is None:  # the construction's readout: the p-slots hold the predicted law
            p = h[..., SLOTS["p0"] : SLOTS["p1"] + 1]
            return self.hook_logits(torch.log(p.clamp_min(1e-30)))
        return self.hook_logits(torch.einsum("ebtd,evd->ebtv", h, self.lm_head))


# ----------------------------------------------------------------------------------------------
# The hand-set construction


def code_weights(k: int) -> torch.Tensor:
    """``(k,)`` layer-1 weights on distances ``0..k-1``, ``2^{-j}`` normalised (binary context code)."""
    w = 2.0 ** -torch.arange(k, dtype=torch.float64)
    return w / w.sum()


def full_mean_distance(k: int) -> float:
    """``m_k = Σ_j j w_j``: the mean distance layer 1 attends to at a complete k-context."""
    return float((code_weights(k) * torch.arange(k, dtype=torch.float64)).sum())


@torch.no_grad()
def construction(
    k: int, kappa: float, beta: float = 1.0, members: int = 1, dtype: torch.dtype = torch.float64
) -> NormalisedAttention:
    """The 3-layer normalised-attention model that computes the order-``k`` add-``beta`` in-context
    estimator as ``kappa`` → ∞ (module docstring for the derivation; weights set by hand, ours where
    the talk is silent).

    Args:
        k: context order ``>= 1``.
        kappa: κ of every layer (``> (k - 1) ln 2 / 2`` so that layer 1's cosines stay in [-1, 1]).
        beta: smoothing ``> 0`` (the null slot's logit is ``κ + ln(2 beta)``); 1 = Laplace.
        members: copies (all identical; ``E``); any sequence length works.
    Returns:
        ``NormalisedAttention`` with ``d = CONSTRUCTION_D``, ``readout="prob"``, in ``dtype``: its
        ``exp(logits)[..., t, :]`` approximates ``kgram_probs(tokens, k, 2, beta)[..., t, :]``.
    """
    if k < 1:
        raise ValueError(f"k must be >= 1, got {k}")
    if beta <= 0:
        raise ValueError(f"beta must be > 0 (the null slot carries the smoothing), got {beta}")
    if kappa <= (k - 1) * math.log(2) / 2:
        raise ValueError(
            f"kappa must exceed (k - 1) ln2 / 2 = {(k - 1) * math.log(2) / 2:.3g} for k = {k}, got {kappa}"
        )
    S = SLOTS
    clip = max(k, 2)
    cfg = NormAttnConfig(d=CONSTRUCTION_D, layers=3, rel_clip=clip, kappa=kappa, learn_kappa=False, readout="prob")
    model = NormalisedAttention(cfg, list(range(members))).to(dtype)
    for prm in model.parameters():
        prm.zero_()
    model.wte[:, 0, S["x0"]] = 1.0
    model.wte[:, 1, S["x1"]] = 1.0
    model.wte[:, :, S["one"]] = 1.0
    l1, l2, l3 = model.blocks
    for blk in model.blocks:
        assert blk.null_bias is not None  # cfg.null_slot is on (the default)
        blk.log_kappa.fill_(math.log(kappa))
        blk.null_bias.fill_(-math.inf)  # no null slot in layers 1-2 (weight exactly 0)

    # Layer 1: att ∝ 2^{-j} on distances j < k: cos_j = 1 - j ln2 / κ (a unit vector at that angle
    # from the constant query e_0), cos = -1 at distances >= k (all clipped to index k).
    l1.W_Q.weight[:, 0, S["one"]] = 1.0
    for j in range(clip + 1):
        c = 1.0 - j * math.log(2) / kappa if j < k else -1.0
        l1.rel_k[:, j, 0] = c
        l1.rel_k[:, j, 1] = math.sqrt(max(0.0, 1.0 - c * c))
        l1.rel_v[:, j, 1] = float(min(j, k))  # attended distance -> m
    l1.W_V.weight[:, 0, S["x1"]] = 1.0  # token value -> u
    l1.W_O.weight[:, S["u"], 0] = 1.0
    l1.W_O.weight[:, S["m"], 1] = 1.0

    # Layer 2: attend to distance 1 (cos 1) and nothing else (cos -1); copy (u, m); flag at n = 0.
    l2.W_Q.weight[:, 0, S["one"]] = 1.0
    l2.rel_k[:, :, 0] = -1.0
    l2.rel_k[:, 1, 0] = 1.0
    l2.W_V.weight[:, 0, S["u"]] = 1.0
    l2.W_V.weight[:, 1, S["m"]] = 1.0
    l2.rel_v[:, 0, 2] = 1.0  # only a query with no previous position attends to distance 0 (fully)
    l2.W_O.weight[:, S["u_prev"], 0] = 1.0
    l2.W_O.weight[:, S["m_prev"], 1] = 1.0
    l2.W_O.weight[:, S["flag"], 2] = 1.0

    # Layer 3: query (u - 1/2, m - m_k, 0, 1/2), key (u' - 1/2, m' - m_k, flag, 1/2); value one-hot x.
    mk = full_mean_distance(k)
    l3.W_Q.weight[:, 0, S["u"]] = 1.0
    l3.W_Q.weight[:, 0, S["one"]] = -0.5
    l3.W_Q.weight[:, 1, S["m"]] = 1.0
    l3.W_Q.weight[:, 1, S["one"]] = -mk
    l3.W_Q.weight[:, 3, S["one"]] = 0.5
    l3.W_K.weight[:, 0, S["u_prev"]] = 1.0
    l3.W_K.weight[:, 0, S["one"]] = -0.5
    l3.W_K.weight[:, 1, S["m_prev"]] = 1.0
    l3.W_K.weight[:, 1, S["one"]] = -mk
    l3.W_K.weight[:, 2, S["flag"]] = 1.0
    l3.W_K.weight[:, 3, S["one"]] = 0.5
    l3.W_V.weight[:, 4, S["x0"]] = 1.0
    l3.W_V.weight[:, 5, S["x1"]] = 1.0
    assert l3.null_bias is not None and l3.null_v is not None
    l3.null_bias.fill_(math.log(2 * beta))  # weight 2β against one match: (N(s→v) + β) / (N(s) + 2β)
    l3.null_v[:, 4] = 0.5
    l3.null_v[:, 5] = 0.5
    l3.W_O.weight[:, S["p0"], 4] = 1.0
    l3.W_O.weight[:, S["p1"], 5] = 1.0
    return model


def construction_probs(tokens: torch.Tensor, k: int, kappa: float, beta: float = 1.0) -> torch.Tensor:
    """``(..., T, 2)`` float64: the construction's next-token law for ``tokens (..., T)``."""
    lead, T = tokens.shape[:-1], tokens.shape[-1]
    model = construction(k, kappa, beta)
    with torch.no_grad():
        logits = model(tokens.reshape(1, -1, T))
    return logits.exp().reshape(*lead, T, 2)

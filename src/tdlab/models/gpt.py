"""An ensemble of small GPT-style transformers, in the notation of seed 000 (Local to Global), Sec. 2.

Two architectures are options of this one model:

* ``arch="sec2"`` — the single-layer transformer of the seed's Sec. 2 equations, with scalar
  tokens ``x_n in {0, 1}``::

      x_n  = x_n e + p_n                                   (Embedding)
      y_n  = x_n + W_O sum_{i<=n} att_{n,i} W_V x_i        (Attention; W_O: output projection)
      z_n  = y_n + W_2 ReLU(W_1 y_n)                       (FF, W_1 in R^{4d x d}, W_2 in R^{d x 4d})
      logit_n = <a, z_n> + b,  a = e (weight tying)        (Linear)
      P(x_{n+1} = 1 | x_1^n) = sigmoid(logit_n)            (Prediction)

  no LayerNorm. The output projection ``W_O`` is not in the seed's equations but is in the GPT-2
  code the seed trains (Table 1, ``attn.c_proj``); ``out_proj=False`` removes it.
* ``arch="gpt2"`` — the GPT-2 variant of the seed's Table 1: token table ``wte (V x d)``, learned
  positions ``wpe (N x d)``, pre-LN blocks, GELU MLP, final LayerNorm, output head tied to ``wte``.

Positions (``positions``): learned absolute ``p_n`` (the seed-000 model), relative, or both. Two
relative encodings exist (``rel_encoding``), because tdlab's original one is *not* what the seed-003
authors' RPE code does: ``"bias"`` adds one learned scalar per head and causal distance ``n - i`` to
the attention score (it can only re-weight keys by distance); ``"kv"`` is Shaw et al. (2018): learned
relative key and value embeddings ``a^K_{n-i}, a^V_{n-i} in R^{d_h}`` (distance clipped at
``rel_clip``), so the score is ``<q_n, k_i + a^K_{n-i}>/sqrt(d_h)`` (content-dependent distance
terms) and the output ``sum_i att_{n,i} (v_i + a^V_{n-i})`` carries where a key is, not only what
it is.

Options for other seeds (defaults keep the seed-000 models above exactly, parameter draws included):

* seed 001 (Reasoning bias under small initialisation), App. A.2 Eqs. (15)-(18): ``norm="post"``
  blocks ``X^ao = LN(X + Attn V W^O)``, ``X' = LN(MLP(X^ao) + X^ao)`` with no final LayerNorm, an
  attention width ``d_attn = d_k`` different from ``d = d_m`` (``W^Q, W^K, W^V in R^{d_m x d_k}``,
  ``W^O in R^{d_k x d_m}``, Sec. 3.3), ``d_ff``, ReLU, an untied output layer with bias, and the
  γ-initialisation of Sec. 3.4 (``init="gamma"``). The seed's model: ``GPTConfig(arch="gpt2",
  vocab=200, d=200, d_attn=64, d_ff=512, layers=2, heads=1, max_len=9, norm="post",
  activation="relu", tie_weights=False, head_bias=True, init="gamma", init_gamma=0.8)``.
* seed 003 (Attention with Markov, Part II), "depth without non-linearities": attention-only models,
  ``mlp=False, norm="none"`` (no MLP, no LayerNorm anywhere).
* seed 004 (real text, Sec. 6 / App. G.3): a BERT-shaped *encoder*, ``causal=False``: every position
  attends to every position (bidirectional attention), keys masked out by ``key_mask`` (padding), and
  the masked-token objective's ``queries`` (the output layer applied at the masked positions only).
  ``GPTConfig(arch="gpt2", causal=False, norm="post", tie_weights=True)`` is BERT's layout (post-LN,
  learned positions, output tied to the token table).

Both emit ``(E, B, T, V)`` logits so one cross-entropy objective serves both: for the scalar head
the logits are ``(0, logit_n)``, whose softmax is ``(1 - sigmoid, sigmoid)`` — Eq. (1) exactly.

Every parameter has a leading member axis ``E``; member ``e`` is initialised from its own seed and
never sees another member's weights (see :mod:`tdlab.models.ensemble`).
"""

from __future__ import annotations

import math
from typing import Literal

import torch
import torch.nn.functional as F
from pydantic import Field, model_validator
from torch import nn

from tdlab.config import Config
from tdlab.models.ensemble import EnsembleLayerNorm, EnsembleLinear, EnsembleModel, Modules
from tdlab.models.hooks import HookPoint
from tdlab.models.init import gamma_std

__all__ = ["GPT", "GPTConfig"]


class GPTConfig(Config):
    """Architecture and initialisation of :class:`GPT`."""

    arch: Literal["sec2", "gpt2"] = "sec2"  # seed 000: Sec. 2 equations, or Table 1 (GPT-2)
    vocab: int = Field(2, ge=2, le=1 << 20)  # binary Markov chains (Sec. 2); word-level corpora need ~10^4-10^5
    d: int = Field(8, ge=1, le=4096)  # embedding dimension; Table 2 grid {4, 8, 16, 32, 64}, A.3.1 uses 8
    layers: int = Field(1, ge=1, le=64)  # Table 2: 1 transformer layer
    heads: int = Field(1, ge=1, le=64)  # Table 2: 1 attention head
    max_len: int = Field(256, ge=1, le=65536)  # N, number of learned positions p_n
    mlp_ratio: int = Field(4, ge=1, le=16)  # W_1 in R^{4d x d} (Sec. 2)
    out_proj: bool = True  # attention output projection (Table 1 attn.c_proj)
    tie_weights: bool = True  # a = e (Sec. 2, "weight tying")
    # Learned absolute p_n ("absolute"), relative positions ("relative", kind: rel_encoding), or both.
    positions: Literal["absolute", "relative", "both", "none"] = "absolute"
    # Kind of relative encoding (used when positions is "relative" or "both"); neither seed states one:
    # "bias": one learned scalar per head and causal distance n - i added to the attention score
    #   (ALiBi/T5-style, distances up to max_len - 1, no clipping) -- tdlab's original encoding;
    # "kv": learned relative *key and value* embeddings a^K_{n-i}, a^V_{n-i} in R^{d_h} (Shaw et al.
    #   2018, shared across heads), distance clipped at rel_clip -- the kind of the seed-003 authors'
    #   RPE code: score_{n,i} = <q_n, k_i + a^K_{n-i}>/sqrt(d_h), out_n = sum_i att_{n,i} (v_i + a^V_{n-i}).
    rel_encoding: Literal["bias", "kv"] = "bias"
    # "kv" only: distances n - i >= rel_clip share one embedding (Shaw et al. 2018 clip at k = 16 and
    # report no gain beyond k = 2; not stated by either seed).
    rel_clip: int = Field(16, ge=1, le=65536)
    # "standard", "local-to-global": seed 000 App. A.3.2, the two initialisations compared;
    # "gamma": seed 001 Sec. 3.4, W_ij ~ N(0, (width^-init_gamma)^2) per matrix (see GPT.reset_parameters).
    init: Literal["standard", "local-to-global", "gamma"] = "standard"
    init_std: float = Field(0.02, gt=0.0, le=10.0)  # App. A.3.2: sigma = 0.02 for every parameter
    # App. A.3.2 proposed init: every coordinate of e equal to 0.5, W_1 = 1, W_2 = -1 (I_* of Fig. 1d).
    init_e: float = 0.5
    init_w1: float = 1.0
    init_w2: float = -1.0
    # Seed 001 Sec. 3.4: the initialisation rate γ, {0.3, 0.5, 0.8} in the seed's experiments (A.3);
    # larger γ = smaller init. Used when init is "gamma".
    init_gamma: float = Field(0.5, ge=0.0, le=10.0)
    # Seed 004 (real text): False = bidirectional attention (a BERT-style encoder for masked-token
    # training); True = causal (every other seed). Needs absolute or no positions: the relative
    # encodings are defined on causal distances n - i >= 0.
    causal: bool = True
    # Which width d2 sets a matrix's std d2^-γ: "out" (Sec. 3.4: "d_2 the output dimension"; B.4 agrees,
    # W^Q std d_k^-γ) or "in" (the seed-001 group's public code, for linear layers). Embedding tables
    # use d^-γ either way (B.4: W^emb std d_m^-γ).
    init_fan: Literal["out", "in"] = "out"

    # --- block layout ------------------------------------------------------------------------------
    # LayerNorm placement: "pre" (GPT-2, seed 000 Table 1), "post" (seed 001 Eq. 18), "none" (seed 000
    # Sec. 2; seed 003's attention-only models); "auto": "pre" for gpt2, "none" for sec2.
    norm: Literal["auto", "pre", "post", "none"] = "auto"
    # Final LayerNorm before the output layer; None: only for pre-LN blocks (GPT-2's ln_f; seed 001's
    # post-LN blocks already end in an LN and A.2 projects X^do(L) directly).
    final_norm: bool | None = None
    mlp: bool = True  # False: attention-only blocks (seed 003, "depth without non-linearities")
    # Attention width d_attn (seed 001: d_k = 64 with d_m = 200, A.3): W^Q, W^K, W^V in R^{d x d_attn},
    # W^O in R^{d_attn x d}; heads split d_attn. None: d (seed 000).
    d_attn: int | None = Field(None, ge=1, le=4096)
    d_ff: int | None = Field(None, ge=1, le=65536)  # MLP width; None: mlp_ratio * d. Seed 001: d_f = 512 (A.3)
    # MLP non-linearity; "auto": ReLU for sec2 (Sec. 2), GELU for gpt2 (GPT-2). Seed 001: ReLU (the
    # authors' code; the seed does not name one).
    activation: Literal["auto", "relu", "gelu"] = "auto"
    bias: bool = False  # biases on W_Q, W_K, W_V, W_O, W_1, W_2 (none in seeds 000 and 001's code)
    # Output-layer bias; None: b of Sec. 2 for sec2 (seed 000), none for gpt2 (GPT-2's tied head).
    # Seed 001: an untied output layer with bias (the authors' code).
    head_bias: bool | None = None

    @model_validator(mode="after")
    def _check(self) -> GPTConfig:
        if self.arch == "sec2" and self.vocab != 2:
            raise ValueError("arch 'sec2' embeds scalar binary tokens: vocab must be 2 (use arch 'gpt2' for V > 2)")
        if self.d_attn is None and self.d % self.heads:
            raise ValueError(f"d={self.d} must be divisible by heads={self.heads}")
        if self.d_attn is not None and self.d_attn % self.heads:
            raise ValueError(f"d_attn={self.d_attn} must be divisible by heads={self.heads}")
        if not self.out_proj and self.attn_width != self.d:
            raise ValueError(
                f"d_attn={self.d_attn} differs from d={self.d}: needs out_proj=True "
                "(W_O maps the attention width back to d)"
            )
        if self.init == "local-to-global" and not self.mlp:
            raise ValueError("init='local-to-global' sets the MLP weights W_1, W_2: needs mlp=True")
        if not self.causal and self.positions in ("relative", "both"):
            raise ValueError(
                "causal=False (bidirectional attention) needs positions 'absolute' or 'none': the "
                "relative encodings are defined on causal distances n - i >= 0"
            )
        if self.init == "gamma" and self.positions in ("relative", "both") and self.rel_encoding == "bias":
            raise ValueError(
                "init='gamma' scales each matrix by its width; rel_encoding='bias' (one scalar "
                "per distance) has none: use rel_encoding='kv' or init='standard'"
            )
        return self

    # Resolved options ("auto" / None made concrete); the model reads these, never the raw fields.
    @property
    def norm_placement(self) -> Literal["pre", "post", "none"]:
        if self.norm == "auto":
            return "pre" if self.arch == "gpt2" else "none"
        return self.norm

    @property
    def has_final_norm(self) -> bool:
        return self.norm_placement == "pre" if self.final_norm is None else self.final_norm

    @property
    def attn_width(self) -> int:
        return self.d if self.d_attn is None else self.d_attn

    @property
    def ff_width(self) -> int:
        return self.mlp_ratio * self.d if self.d_ff is None else self.d_ff

    @property
    def act(self) -> Literal["relu", "gelu"]:
        if self.activation == "auto":
            return "relu" if self.arch == "sec2" else "gelu"
        return self.activation

    @property
    def has_head_bias(self) -> bool:
        return self.arch == "sec2" if self.head_bias is None else self.head_bias


class Attention(nn.Module):
    """Causal softmax attention of every member, ``att_{n,i} ∝ exp(<q_n, k_i> / sqrt(d_h))`` over ``i <= n``
    (``causal=False``: over every ``i`` whose ``key_mask`` is True).

    ``W_Q, W_K, W_V``: ``d -> d_attn``, ``W_O``: ``d_attn -> d`` (seed 001 Sec. 3.3: ``W^Q, W^K, W^V in
    R^{d_m x d_k}``, ``W^O in R^{d_k x d_m}``); ``d_h = d_attn / heads``. Input and output ``(E, B, T, d)``.
    """

    def __init__(self, cfg: GPTConfig, E: int, index: int) -> None:
        super().__init__()
        d, da = cfg.d, cfg.attn_width
        self.cfg, self.index = cfg, index
        self.W_Q = EnsembleLinear(E, d, da, bias=cfg.bias)
        self.W_K = EnsembleLinear(E, d, da, bias=cfg.bias)
        self.W_V = EnsembleLinear(E, d, da, bias=cfg.bias)
        self.W_O = EnsembleLinear(E, da, d, bias=cfg.bias) if cfg.out_proj else None
        self.rel_bias = self.rel_k = self.rel_v = None
        if cfg.positions in ("relative", "both") and cfg.rel_encoding == "bias":
            # One learned bias per head and causal distance n - i (a scalar, not an embedding).
            self.rel_bias = nn.Parameter(torch.empty(E, cfg.heads, cfg.max_len))
        elif cfg.positions in ("relative", "both"):
            # Shaw et al. (2018): relative key and value embeddings for distances 0..rel_clip (clipped),
            # shared across heads; causal attention only sees n - i >= 0.
            dh = da // cfg.heads
            self.rel_k = nn.Parameter(torch.empty(E, cfg.rel_clip + 1, dh))
            self.rel_v = nn.Parameter(torch.empty(E, cfg.rel_clip + 1, dh))
        self.hook_pattern = HookPoint(f"blocks.{index}.attn.pattern")  # (E, B, H, T, T)
        self.hook_z = HookPoint()  # (E, B, T, H, d_h): every head's output, before W_O

    def _split(self, t: torch.Tensor) -> torch.Tensor:
        E, B, T, d = t.shape
        return t.reshape(E, B, T, self.cfg.heads, d // self.cfg.heads).permute(0, 1, 3, 2, 4)

    def forward(self, x: torch.Tensor, key_mask: torch.Tensor | None = None) -> torch.Tensor:
        E, B, T, _ = x.shape
        q, k, v = self._split(self.W_Q(x)), self._split(self.W_K(x)), self._split(self.W_V(x))  # (E,B,H,T,dh)
        if not self.cfg.causal:
            return self._attend_bidirectional(q, k, v, key_mask)
        if self.rel_k is not None:
            return self._heads_out(self._attend_kv(q, k, v))
        mask = None
        if self.rel_bias is not None:
            n = torch.arange(T, device=x.device)
            dist = (n[:, None] - n[None, :]).clamp(min=0)  # (T, T), n - i
            causal = n[None, :] <= n[:, None]
            bias = self.rel_bias[:, :, dist]  # (E, H, T, T)
            mask = bias.masked_fill(~causal, float("-inf")).unsqueeze(1)  # (E, 1, H, T, T)
        out = None
        if self.hook_pattern.active:
            scores = (q @ k.transpose(-1, -2)) / math.sqrt(q.shape[-1])
            if mask is None:
                causal = torch.ones(T, T, dtype=torch.bool, device=x.device).tril()
                scores = scores.masked_fill(~causal, float("-inf"))
            else:
                scores = scores + mask
            att = scores.softmax(-1)
            out = self._pattern_out(att, v)
        if out is None:
            flat = lambda t: t.reshape(E * B, *t.shape[2:])  # noqa: E731
            m = None if mask is None else mask.expand(E, B, *mask.shape[2:]).reshape(E * B, *mask.shape[2:])
            out = F.scaled_dot_product_attention(flat(q), flat(k), flat(v), attn_mask=m, is_causal=m is None)
            out = out.reshape(E, B, *out.shape[1:])
        return self._heads_out(out)

    def _pattern_out(self, att: torch.Tensor, v: torch.Tensor) -> torch.Tensor | None:
        """``att (E, B, H, T, T)`` through ``hook_pattern``; ``pattern @ v`` when a cache reads it or a hook
        replaced it (a cached run computes every later activation from the very pattern it stores, as
        probes have always read them), ``None`` when the fused kernel's output can stand unchanged."""
        seen = self.hook_pattern(att)
        return seen @ v if seen is not att or self.hook_pattern.readers else None

    def _heads_out(self, out: torch.Tensor) -> torch.Tensor:
        """Heads ``(E, B, H, T, d_h)`` -> ``hook_z`` ``(E, B, T, H, d_h)`` -> the sublayer's output ``(E, B, T, d)``."""
        E, B, _H, T, _dh = out.shape
        z = self.hook_z(out.permute(0, 1, 3, 2, 4))
        out = z.reshape(E, B, T, self.cfg.attn_width)
        return self.W_O(out) if self.W_O is not None else out

    def _attend_bidirectional(
        self,
        q: torch.Tensor,
        k: torch.Tensor,
        v: torch.Tensor,
        key_mask: torch.Tensor | None,
    ) -> torch.Tensor:
        """Encoder attention (``causal=False``): ``att_{n,i} ∝ exp(<q_n, k_i>/sqrt(d_h))`` over every key ``i``
        with ``key_mask[e, b, i]`` True (all keys when ``key_mask`` is None). ``q, k, v``: ``(E, B, H, T, dh)``;
        returns the block's attention output ``(E, B, T, d)``."""
        E, B, H, T, dh = q.shape
        keep = None if key_mask is None else key_mask.to(torch.bool)[:, :, None, None, :]  # (E, B, 1, 1, T)
        out = None
        if self.hook_pattern.active:
            scores = (q @ k.transpose(-1, -2)) / math.sqrt(dh)
            if keep is not None:
                scores = scores.masked_fill(~keep, float("-inf"))
            out = self._pattern_out(scores.softmax(-1), v)
        if out is None:
            flat = lambda t: t.reshape(E * B, *t.shape[2:])  # noqa: E731
            m = None if keep is None else keep.reshape(E * B, 1, 1, T)
            out = F.scaled_dot_product_attention(flat(q), flat(k), flat(v), attn_mask=m).reshape(E, B, H, T, dh)
        return self._heads_out(out)

    def _attend_kv(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        """Attention with relative key/value embeddings (Shaw et al. 2018), explicit softmax.

        ``q, k, v``: ``(E, B, H, T, dh)``. The relative terms are gathered per (n, i) pair:
        ``rk[e, n, i] = rel_k[e, min(n - i, rel_clip)]`` (``(E, T, T, dh)``), the same for values.
        """
        _E, _B, _H, T, dh = q.shape
        n = torch.arange(T, device=q.device)
        causal = n[None, :] <= n[:, None]
        dist = (n[:, None] - n[None, :]).clamp(min=0, max=self.cfg.rel_clip)  # (T, T)
        assert self.rel_k is not None and self.rel_v is not None  # the "kv" kind, which has them
        rk, rv = self.rel_k[:, dist], self.rel_v[:, dist]  # (E, T, T, dh)
        scores = (q @ k.transpose(-1, -2) + torch.einsum("ebhnd,enid->ebhni", q, rk)) / math.sqrt(dh)
        att = self.hook_pattern(scores.masked_fill(~causal, float("-inf")).softmax(-1))  # (E, B, H, T, T)
        return att @ v + torch.einsum("ebhni,enid->ebhnd", att, rv)


class MLP(nn.Module):
    """``W_2 act(W_1 y)``, ``W_1: d -> d_ff``, ``W_2: d_ff -> d``: ReLU in Sec. 2 and seed 001, GELU in GPT-2."""

    def __init__(self, cfg: GPTConfig, E: int, index: int) -> None:
        super().__init__()
        self.W_1 = EnsembleLinear(E, cfg.d, cfg.ff_width, bias=cfg.bias)
        self.W_2 = EnsembleLinear(E, cfg.ff_width, cfg.d, bias=cfg.bias)
        self.act = F.relu if cfg.act == "relu" else F.gelu
        self.index = index
        self.hook_pre = HookPoint(f"blocks.{index}.mlp.pre")  # (E, B, T, d_ff)
        self.hook_post = HookPoint()  # (E, B, T, d_ff), after the non-linearity

    def forward(self, y: torch.Tensor) -> torch.Tensor:
        return self.W_2(self.hook_post(self.act(self.hook_pre(self.W_1(y)))))


class Block(nn.Module):
    """One transformer block, ``(E, B, T, d) -> (E, B, T, d)``; LayerNorm placement per ``cfg.norm``:

    * pre (GPT-2) and none (Sec. 2): ``y = x + Attn(LN_1(x))``, ``x' = y + MLP(LN_2(y))`` (LN = identity for none);
    * post (seed 001 Eq. 18): ``y = LN_1(x + Attn(x))`` (``X^ao``), ``x' = LN_2(MLP(y) + y)`` (``X^do``).

    Without the MLP (``mlp=False``) the block ends at ``y`` (``hook_resid_mid``, short name ``blocks.{l}.mid``).
    Hook points, TransformerLens's names, each ``(E, B, T, d)``: ``hook_resid_pre`` (``x``), ``hook_attn_out``
    (the attention sublayer's output, before the residual sum), ``hook_resid_mid``, ``hook_mlp_out``,
    ``hook_resid_post`` (``x'``, short name ``blocks.{l}.out``).
    """

    def __init__(self, cfg: GPTConfig, E: int, index: int) -> None:
        super().__init__()
        self.post = cfg.norm_placement == "post"
        norm = cfg.norm_placement != "none"
        self.ln_1 = EnsembleLayerNorm(E, cfg.d) if norm else None
        self.attn = Attention(cfg, E, index)
        self.ln_2 = EnsembleLayerNorm(E, cfg.d) if norm and cfg.mlp else None
        self.mlp = MLP(cfg, E, index) if cfg.mlp else None
        self.index = index
        self.hook_resid_pre = HookPoint("embed" if index == 0 else None)
        self.hook_attn_out = HookPoint()
        self.hook_resid_mid = HookPoint(f"blocks.{index}.mid")
        self.hook_mlp_out = HookPoint() if cfg.mlp else None
        self.hook_resid_post = HookPoint(f"blocks.{index}.out")

    def forward(self, x: torch.Tensor, key_mask: torch.Tensor | None = None) -> torch.Tensor:
        x = self.hook_resid_pre(x)
        if self.post:
            assert self.ln_1 is not None  # post placement: the block has its LayerNorms
            y = self.ln_1(x + self.hook_attn_out(self.attn(x, key_mask)))  # X^ao = LN(X + Attn V W^O)  (Eq. 18)
        else:
            a = self.attn(self.ln_1(x) if self.ln_1 is not None else x, key_mask)
            y = x + self.hook_attn_out(a)  # (Attention) + residual
        y = self.hook_resid_mid(y)
        if self.mlp is None:
            return self.hook_resid_post(y)
        assert self.hook_mlp_out is not None  # built with the MLP
        if self.post:
            assert self.ln_2 is not None  # post placement with an MLP: LN_2 exists
            out = self.ln_2(self.hook_mlp_out(self.mlp(y)) + y)  # X^do = LN(MLP(X^ao) + X^ao)  (Eq. 18)
        else:
            out = y + self.hook_mlp_out(self.mlp(self.ln_2(y) if self.ln_2 is not None else y))  # (FF) + residual
        return self.hook_resid_post(out)


class GPT(EnsembleModel):
    """``E`` independent transformers trained side by side.

    Args:
        cfg: architecture and initialisation.
        seeds: one seed per member (``E = len(seeds)``); member ``e`` is initialised from
            ``seeds[e]`` alone, so it equals ``GPT(cfg, [seeds[e]])``.

    ``forward(tokens (E, B, T) int64) -> logits (E, B, T, V)``; ``T <= cfg.max_len``. Encoder options
    (``causal=False``, seed 004's masked-token training): ``key_mask (E, B, T)`` bool hides the keys where it
    is False (padding); ``queries (E, B, Q)`` long returns logits ``(E, B, Q, V)`` at those positions only.

    Hook points (:mod:`tdlab.models.hooks`; TransformerLens's names, short names of :meth:`cache` in
    brackets): ``hook_embed`` (E, B, T, d: the token embedding, ``x_n e`` or ``wte[x_n]``),
    ``hook_pos_embed`` (E, B, T, d; absolute positions only), per block ``l`` the points of :class:`Block`
    (``blocks.{l}.hook_resid_pre`` [``embed`` for l = 0], ``hook_attn_out``, ``hook_resid_mid``
    [``blocks.{l}.mid``: ``X^ao`` of seed 001 Eq. 18 for post-LN], ``hook_mlp_out``, ``hook_resid_post``
    [``blocks.{l}.out``]), ``blocks.{l}.attn.hook_pattern`` [``blocks.{l}.attn.pattern``] (E, B, H, T, T),
    ``blocks.{l}.attn.hook_z`` (E, B, T, H, d_h), ``blocks.{l}.mlp.hook_pre`` [``blocks.{l}.mlp.pre``] and
    ``hook_post`` (E, B, T, d_ff; with the MLP only), ``hook_final`` [``final``] (E, B, T, d: after ``ln_f``)
    and ``hook_logits`` (the output).
    """

    def __init__(self, cfg: GPTConfig, seeds: list[int]) -> None:
        super().__init__()
        E, d = self._set_members(seeds), cfg.d
        self.cfg = cfg
        # Registration order is the order of the init draws (reset_parameters): new parameters only
        # exist under new options, so the seed-000 models draw exactly as before.
        if cfg.arch == "sec2":
            self.e = nn.Parameter(torch.empty(E, d))  # token embedding vector e
            self.b = nn.Parameter(torch.empty(E)) if cfg.has_head_bias else None  # output bias b
            self.a = None if cfg.tie_weights else nn.Parameter(torch.empty(E, d))
        else:
            self.wte = nn.Parameter(torch.empty(E, cfg.vocab, d))
            self.lm_head = None if cfg.tie_weights else nn.Parameter(torch.empty(E, cfg.vocab, d))
            self.lm_bias = nn.Parameter(torch.empty(E, cfg.vocab)) if cfg.has_head_bias else None
        self.wpe = nn.Parameter(torch.empty(E, cfg.max_len, d)) if cfg.positions in ("absolute", "both") else None
        self.blocks: Modules[Block] = Modules(Block(cfg, E, i) for i in range(cfg.layers))
        self.ln_f = EnsembleLayerNorm(E, d) if cfg.has_final_norm else None
        self.hook_embed = HookPoint()
        self.hook_pos_embed = HookPoint() if self.wpe is not None else None
        self.hook_final = HookPoint("final")
        self.hook_logits = HookPoint()
        self.reset_parameters()

    # ------------------------------------------------------------------------------------------
    def reset_parameters(self) -> None:
        """Initialise every member from its own seed (seed 000 App. A.3.2; seed 001 Sec. 3.4).

        ``standard``: every parameter ~ N(0, init_std^2) (LayerNorm gains 1 and shifts 0, as GPT-2).
        ``local-to-global``: as standard, then e = init_e (every coordinate), W_1 = init_w1,
        W_2 = init_w2 in every block. For ``gpt2`` the seed's scalar e is the embedding of token 1
        relative to token 0, so ``wte[1] = wte[0] + init_e`` (our reading; the seed does not say).
        ``gamma`` (seed 001 Sec. 3.4): every weight matrix ~ N(0, (d2^-γ)^2) with d2 its output width
        (``init_fan="out"``) or input width (``"in"``), see :meth:`gamma_std`; LayerNorm (1, 0); biases 0.

        Draws: parameters in registration order, members in order, each from member ``e``'s own
        ``Purpose.INIT`` generator, so member ``e`` equals the model built from ``seeds[e]`` alone.
        """
        cfg = self.cfg
        gens = self.member_generators()
        with torch.no_grad():
            for name, prm in self.named_parameters():
                if ".ln_" in f".{name}" or name.startswith("ln_f"):
                    continue  # LayerNorm keeps (1, 0)
                std = cfg.init_std if cfg.init != "gamma" else self.gamma_std(name)
                if std == 0.0:
                    prm.zero_()  # a bias under the γ-init: no draw
                    continue
                for e, g in enumerate(gens):
                    prm[e].normal_(0.0, std, generator=g)
            if cfg.init == "local-to-global":
                if cfg.arch == "sec2":
                    self.e.fill_(cfg.init_e)
                else:
                    self.wte[:, 1] = self.wte[:, 0] + cfg.init_e
                for blk in self.blocks:
                    assert blk.mlp is not None  # GPTConfig: local-to-global needs mlp=True
                    blk.mlp.W_1.weight.fill_(cfg.init_w1)
                    blk.mlp.W_2.weight.fill_(cfg.init_w2)

    def gamma_std(self, name: str) -> float:
        """Std of parameter ``name`` under the γ-init (seed 001 Sec. 3.4): ``W in R^{d1 x d2}`` (input
        ``d1``, output ``d2``), ``W_ij ~ N(0, (d2^-γ)^2)``; ``init_fan="in"`` uses ``d1^-γ`` instead.

        * linear maps (``W_Q ... W_2``, stored ``(E, out, in)``), the untied output layer (``lm_head``
          ``(E, V, d)``: d -> V; sec2's ``a``: d -> 1): the fan's width;
        * embedding tables (``wte``, ``wpe``, sec2's ``e``, relative ``rel_k``/``rel_v``): their row
          width, either fan: B.4 gives ``W^emb`` std ``d_m^-γ`` (the one-hot input width is no fan);
        * biases (``*.bias``, ``lm_bias``, sec2's ``b``): 0 (our choice: Sec. 3.4 initialises
          matrices; a zero bias adds no scale of its own, so γ alone sets the init's size).

        Returns:
            the standard deviation (0.0 for a bias).
        """
        cfg, prm = self.cfg, self.get_parameter(name)
        if name in ("b", "lm_bias") or name.endswith(".bias"):
            return 0.0
        if name in ("e", "wte", "wpe") or name.endswith(("rel_k", "rel_v")):
            # A table (rows, width) maps a one-hot of `rows` to `width`: output width, whatever the fan.
            return gamma_std(prm.shape[-1], prm.shape[-2] if prm.dim() > 2 else 1, cfg.init_gamma, "out")
        if name == "a":
            d_out, d_in = 1, cfg.d
        elif name == "lm_head" or name.endswith(".weight"):
            d_out, d_in = prm.shape[1], prm.shape[2]
        else:
            raise RuntimeError(f"no γ-init rule for parameter {name!r}")  # a new parameter needs one
        return gamma_std(d_out, d_in, cfg.init_gamma, cfg.init_fan)

    # ------------------------------------------------------------------------------------------
    def forward(
        self, tokens: torch.Tensor, key_mask: torch.Tensor | None = None, queries: torch.Tensor | None = None
    ) -> torch.Tensor:
        E, B, T = tokens.shape
        if key_mask is not None and self.cfg.causal:
            raise ValueError("key_mask is an encoder option: set causal=False")
        if queries is not None and self.cfg.arch == "sec2":
            raise ValueError("queries need the token-table head of arch 'gpt2'")
        self.check_members(E)
        if self.cfg.max_len < T:
            raise ValueError(f"sequence length {T} exceeds max_len={self.cfg.max_len}")
        if self.cfg.arch == "sec2":
            x = tokens.unsqueeze(-1).to(self.e.dtype) * self.e[:, None, None, :]  # x_n e
        else:
            x = torch.gather(self.wte, 1, tokens.reshape(E, B * T, 1).expand(E, B * T, self.cfg.d))
            x = x.reshape(E, B, T, self.cfg.d)  # wte[x_n]
        x = self.hook_embed(x)
        if self.wpe is not None:
            assert self.hook_pos_embed is not None  # built with wpe
            pos = self.wpe[:, None, :T, :]
            if self.hook_pos_embed.active:  # the hooks see one copy per input, as TransformerLens's
                pos = self.hook_pos_embed(pos.expand(E, B, T, self.cfg.d))
            x = x + pos  # + p_n
        for blk in self.blocks:
            x = blk(x, key_mask)
        if self.ln_f is not None:
            x = self.ln_f(x)
        x = self.hook_final(x)
        return self.hook_logits(self._head(x, queries))

    def _head(self, x: torch.Tensor, queries: torch.Tensor | None) -> torch.Tensor:
        """The output layer: ``x (E, B, T, d)`` -> logits ``(E, B, T, V)`` (``(E, B, Q, V)`` with ``queries``)."""
        E, B, T, _ = x.shape
        if self.cfg.arch == "sec2":
            a = self.e if self.a is None else self.a  # a = e under weight tying
            logit = torch.einsum("ebtd,ed->ebt", x, a)  # (Linear)
            if self.b is not None:
                logit = logit + self.b[:, None, None]
            return torch.stack([torch.zeros_like(logit), logit], dim=-1)  # softmax = (1 - sigma, sigma)
        head = self.wte if self.lm_head is None else self.lm_head
        if queries is not None:  # the output layer at the asked positions only (masked-token training)
            x = torch.gather(x, 2, queries.unsqueeze(-1).expand(*queries.shape, x.shape[-1]))
            T = queries.shape[-1]
        logits = torch.bmm(x.reshape(E, B * T, -1), head.transpose(1, 2)).reshape(E, B, T, -1)
        return logits if self.lm_bias is None else logits + self.lm_bias[:, None, None, :]

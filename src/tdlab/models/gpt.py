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
from tdlab.models.ensemble import CachingModule, EnsembleLayerNorm, EnsembleLinear
from tdlab.seeding import Purpose, generators

__all__ = ["GPTConfig", "GPT"]


class GPTConfig(Config):
    """Architecture and initialisation of :class:`GPT`."""

    arch: Literal["sec2", "gpt2"] = "sec2"  # seed 000: Sec. 2 equations, or Table 1 (GPT-2)
    vocab: int = Field(2, ge=2, le=4096)  # binary Markov chains (Sec. 2)
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
    init: Literal["standard", "local-to-global"] = "standard"  # App. A.3.2: the two initialisations compared
    init_std: float = Field(0.02, gt=0.0, le=10.0)  # App. A.3.2: sigma = 0.02 for every parameter
    # App. A.3.2 proposed init: every coordinate of e equal to 0.5, W_1 = 1, W_2 = -1 (I_* of Fig. 1d).
    init_e: float = 0.5
    init_w1: float = 1.0
    init_w2: float = -1.0

    @model_validator(mode="after")
    def _check(self) -> GPTConfig:
        if self.arch == "sec2" and self.vocab != 2:
            raise ValueError("arch 'sec2' embeds scalar binary tokens: vocab must be 2 (use arch 'gpt2' for V > 2)")
        if self.d % self.heads:
            raise ValueError(f"d={self.d} must be divisible by heads={self.heads}")
        return self

    @property
    def norm(self) -> bool:
        return self.arch == "gpt2"


class Attention(nn.Module):
    """Causal softmax attention of every member, ``att_{n,i} ∝ exp(<q_n, k_i> / sqrt(d_h))``."""

    def __init__(self, cfg: GPTConfig, E: int, index: int, owner: CachingModule) -> None:
        super().__init__()
        d = cfg.d
        self.cfg, self.index = cfg, index
        self.W_Q = EnsembleLinear(E, d, d)
        self.W_K = EnsembleLinear(E, d, d)
        self.W_V = EnsembleLinear(E, d, d)
        self.W_O = EnsembleLinear(E, d, d) if cfg.out_proj else None
        self.rel_bias = self.rel_k = self.rel_v = None
        if cfg.positions in ("relative", "both") and cfg.rel_encoding == "bias":
            # One learned bias per head and causal distance n - i (a scalar, not an embedding).
            self.rel_bias = nn.Parameter(torch.empty(E, cfg.heads, cfg.max_len))
        elif cfg.positions in ("relative", "both"):
            # Shaw et al. (2018): relative key and value embeddings for distances 0..rel_clip (clipped),
            # shared across heads; causal attention only sees n - i >= 0.
            dh = d // cfg.heads
            self.rel_k = nn.Parameter(torch.empty(E, cfg.rel_clip + 1, dh))
            self.rel_v = nn.Parameter(torch.empty(E, cfg.rel_clip + 1, dh))
        self._owner = [owner]  # a list, so the owner is not registered as a submodule

    def _split(self, t: torch.Tensor) -> torch.Tensor:
        E, B, T, d = t.shape
        return t.reshape(E, B, T, self.cfg.heads, d // self.cfg.heads).permute(0, 1, 3, 2, 4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        E, B, T, d = x.shape
        owner, name = self._owner[0], f"blocks.{self.index}.attn"
        q, k, v = self._split(self.W_Q(x)), self._split(self.W_K(x)), self._split(self.W_V(x))  # (E,B,H,T,dh)
        if self.rel_k is not None:
            out = self._attend_kv(q, k, v, owner, name)
            out = out.permute(0, 1, 3, 2, 4).reshape(E, B, T, d)
            return self.W_O(out) if self.W_O is not None else out
        mask = None
        if self.rel_bias is not None:
            n = torch.arange(T, device=x.device)
            dist = (n[:, None] - n[None, :]).clamp(min=0)  # (T, T), n - i
            causal = n[None, :] <= n[:, None]
            bias = self.rel_bias[:, :, dist]  # (E, H, T, T)
            mask = bias.masked_fill(~causal, float("-inf")).unsqueeze(1)  # (E, 1, H, T, T)
        if owner.caching(f"{name}.pattern"):
            scores = (q @ k.transpose(-1, -2)) / math.sqrt(q.shape[-1])
            if mask is None:
                causal = torch.ones(T, T, dtype=torch.bool, device=x.device).tril()
                scores = scores.masked_fill(~causal, float("-inf"))
            else:
                scores = scores + mask
            att = scores.softmax(-1)
            owner.record(f"{name}.pattern", att)  # (E, B, H, T, T)
            out = att @ v
        else:
            flat = lambda t: t.reshape(E * B, *t.shape[2:])  # noqa: E731
            m = None if mask is None else mask.expand(E, B, *mask.shape[2:]).reshape(E * B, *mask.shape[2:])
            out = F.scaled_dot_product_attention(flat(q), flat(k), flat(v), attn_mask=m, is_causal=m is None)
            out = out.reshape(E, B, *out.shape[1:])
        out = out.permute(0, 1, 3, 2, 4).reshape(E, B, T, d)
        return self.W_O(out) if self.W_O is not None else out


    def _attend_kv(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, owner: CachingModule, name: str) -> torch.Tensor:
        """Attention with relative key/value embeddings (Shaw et al. 2018), explicit softmax.

        ``q, k, v``: ``(E, B, H, T, dh)``. The relative terms are gathered per (n, i) pair:
        ``rk[e, n, i] = rel_k[e, min(n - i, rel_clip)]`` (``(E, T, T, dh)``), the same for values.
        """
        E, B, H, T, dh = q.shape
        n = torch.arange(T, device=q.device)
        causal = n[None, :] <= n[:, None]
        dist = (n[:, None] - n[None, :]).clamp(min=0, max=self.cfg.rel_clip)  # (T, T)
        rk, rv = self.rel_k[:, dist], self.rel_v[:, dist]  # (E, T, T, dh)
        scores = (q @ k.transpose(-1, -2) + torch.einsum("ebhnd,enid->ebhni", q, rk)) / math.sqrt(dh)
        att = scores.masked_fill(~causal, float("-inf")).softmax(-1)  # (E, B, H, T, T)
        if owner.caching(f"{name}.pattern"):
            owner.record(f"{name}.pattern", att)
        return att @ v + torch.einsum("ebhni,enid->ebhnd", att, rv)


class MLP(nn.Module):
    """``W_2 act(W_1 y)``: ReLU in Sec. 2, GELU in GPT-2."""

    def __init__(self, cfg: GPTConfig, E: int, index: int, owner: CachingModule) -> None:
        super().__init__()
        self.W_1 = EnsembleLinear(E, cfg.d, cfg.mlp_ratio * cfg.d)
        self.W_2 = EnsembleLinear(E, cfg.mlp_ratio * cfg.d, cfg.d)
        self.act = F.relu if cfg.arch == "sec2" else F.gelu
        self.index = index
        self._owner = [owner]

    def forward(self, y: torch.Tensor) -> torch.Tensor:
        pre = self.W_1(y)
        self._owner[0].record(f"blocks.{self.index}.mlp.pre", pre)
        return self.W_2(self.act(pre))


class Block(nn.Module):
    def __init__(self, cfg: GPTConfig, E: int, index: int, owner: CachingModule) -> None:
        super().__init__()
        self.ln_1 = EnsembleLayerNorm(E, cfg.d) if cfg.norm else None
        self.attn = Attention(cfg, E, index, owner)
        self.ln_2 = EnsembleLayerNorm(E, cfg.d) if cfg.norm else None
        self.mlp = MLP(cfg, E, index, owner)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = x + self.attn(self.ln_1(x) if self.ln_1 is not None else x)  # (Attention) + residual
        return y + self.mlp(self.ln_2(y) if self.ln_2 is not None else y)  # (FF) + residual


class GPT(CachingModule):
    """``E`` independent transformers trained side by side.

    Args:
        cfg: architecture and initialisation.
        seeds: one seed per member (``E = len(seeds)``); member ``e`` is initialised from
            ``seeds[e]`` alone, so it equals ``GPT(cfg, [seeds[e]])``.

    ``forward(tokens (E, B, T) int64) -> logits (E, B, T, V)``; ``T <= cfg.max_len``.
    Named activations (:meth:`cache`): ``embed``, ``blocks.{l}.attn.pattern`` (E, B, H, T, T),
    ``blocks.{l}.mlp.pre`` (E, B, T, 4d), ``blocks.{l}.out`` and ``final`` (E, B, T, d).
    """

    def __init__(self, cfg: GPTConfig, seeds: list[int]) -> None:
        super().__init__()
        if not seeds:
            raise ValueError("an ensemble needs at least one member seed")
        self.cfg, self.seeds = cfg, list(seeds)
        E, d = len(seeds), cfg.d
        if cfg.arch == "sec2":
            self.e = nn.Parameter(torch.empty(E, d))  # token embedding vector e
            self.b = nn.Parameter(torch.empty(E))  # output bias b
            self.a = None if cfg.tie_weights else nn.Parameter(torch.empty(E, d))
        else:
            self.wte = nn.Parameter(torch.empty(E, cfg.vocab, d))
            self.lm_head = None if cfg.tie_weights else nn.Parameter(torch.empty(E, cfg.vocab, d))
        self.wpe = nn.Parameter(torch.empty(E, cfg.max_len, d)) if cfg.positions in ("absolute", "both") else None
        self.blocks = nn.ModuleList(Block(cfg, E, i, self) for i in range(cfg.layers))
        self.ln_f = EnsembleLayerNorm(E, d) if cfg.norm else None
        self.reset_parameters()

    @property
    def members(self) -> int:
        return len(self.seeds)

    # ------------------------------------------------------------------------------------------
    def reset_parameters(self) -> None:
        """Initialise every member from its own seed (App. A.3.2).

        ``standard``: every parameter ~ N(0, init_std^2) (LayerNorm gains 1 and shifts 0, as GPT-2).
        ``local-to-global``: as standard, then e = init_e (every coordinate), W_1 = init_w1,
        W_2 = init_w2 in every block. For ``gpt2`` the seed's scalar e is the embedding of token 1
        relative to token 0, so ``wte[1] = wte[0] + init_e`` (our reading; the seed does not say).
        """
        cfg = self.cfg
        gens = generators(self.seeds, Purpose.INIT)
        with torch.no_grad():
            for name, prm in self.named_parameters():
                if ".ln_" in f".{name}" or name.startswith("ln_f"):
                    continue  # LayerNorm keeps (1, 0)
                for e, g in enumerate(gens):
                    prm[e].normal_(0.0, cfg.init_std, generator=g)
            if cfg.init == "local-to-global":
                if cfg.arch == "sec2":
                    self.e.fill_(cfg.init_e)
                else:
                    self.wte[:, 1] = self.wte[:, 0] + cfg.init_e
                for blk in self.blocks:
                    blk.mlp.W_1.weight.fill_(cfg.init_w1)
                    blk.mlp.W_2.weight.fill_(cfg.init_w2)

    # ------------------------------------------------------------------------------------------
    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        E, B, T = tokens.shape
        if E != self.members:
            raise ValueError(f"tokens have {E} members, the model has {self.members}")
        if T > self.cfg.max_len:
            raise ValueError(f"sequence length {T} exceeds max_len={self.cfg.max_len}")
        if self.cfg.arch == "sec2":
            x = tokens.unsqueeze(-1).to(self.e.dtype) * self.e[:, None, None, :]  # x_n e
        else:
            x = torch.gather(self.wte, 1, tokens.reshape(E, B * T, 1).expand(E, B * T, self.cfg.d))
            x = x.reshape(E, B, T, self.cfg.d)  # wte[x_n]
        if self.wpe is not None:
            x = x + self.wpe[:, None, :T, :]  # + p_n
        self.record("embed", x)
        for i, blk in enumerate(self.blocks):
            x = blk(x)
            self.record(f"blocks.{i}.out", x)
        if self.ln_f is not None:
            x = self.ln_f(x)
        self.record("final", x)
        if self.cfg.arch == "sec2":
            a = self.e if self.a is None else self.a  # a = e under weight tying
            logit = torch.einsum("ebtd,ed->ebt", x, a) + self.b[:, None, None]  # (Linear)
            return torch.stack([torch.zeros_like(logit), logit], dim=-1)  # softmax = (1 - sigma, sigma)
        head = self.wte if self.lm_head is None else self.lm_head
        return torch.bmm(x.reshape(E, B * T, -1), head.transpose(1, 2)).reshape(E, B, T, -1)

    def member_state(self, e: int) -> dict[str, torch.Tensor]:
        """Parameters of member ``e`` (without the member axis), e.g. for saving or probes."""
        return {k: v[e].detach().clone() for k, v in self.state_dict().items()}

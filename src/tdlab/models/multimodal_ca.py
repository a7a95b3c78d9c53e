"""Seed 002's Table 1 models (Section 7, Appendix I), ensemble-first: the paper-inspired cross-attention
(CA) model with its three ablations, and the bidirectional CA baseline.

Common tokenisation (I.2), per example ``(I, A)``, two 28 × 28 maps::

    Φ_m: conv3×3-ReLU, conv3×3-ReLU, maxpool 2, conv3×3-ReLU, conv3×3-ReLU, maxpool 2,
         adaptive avg-pool 4 × 4, flatten -> 16 tokens, LayerNorm            (m = I, A; no weight sharing)
    X_I = Φ_I(I) + P_I + M_I,  X_A = Φ_A(A) + P_A + M_A,  X = concat(c, X_I, X_A)  ∈ R^{L × d}, L = 33

Paper-inspired model (I.3), layers t = 1..T, each with its own weights (the subscripts t of I.3)::

    F_0 = X W_0ᵀ + b_0
    A_{t−1} = MHA_t(LN(F_{t−1}), LN(X), LN(X))           cross=True  (F attends back to X, Eq. 5.3)
            = MHA_t(LN(F_{t−1}), LN(F_{t−1}), LN(F_{t−1}))  cross=False (self-attention of F)
    F̃_t = F_{t−1} + A_{t−1}
    S_{t−1} = σ(F̃_t W^Gᵀ + b^G) ⊙ (X W^Sᵀ + b^S)       inject=True; S ≡ 0 when inject=False
    F̄_t = F̃_t + S_{t−1},  F_t = F̄_t + FFN_t(LN(F̄_t))
    logits = MLP(LN(F_T[CLS]))                             (2-layer GELU head)

Bidirectional CA baseline (I.4): streams ``U_0 = Φ_I(I) + P_I``, ``V_0 = Φ_A(A) + P_A``;
``Ũ_t = U_{t−1} + MHA^I_t(LN(U_{t−1}), LN(V_{t−1}), LN(V_{t−1}))`` and symmetrically for V (both from
the layer's inputs), ``U_t = Ũ_t + FFN^I_t(LN(Ũ_t))``; head on ``concat(mean_j U_T[j], mean_j V_T[j])``.

Choices where Appendix I is silent (each an option unless it is a plain reading):

* ``d_h = 32`` is the FFN hidden width (I.3 says so); the attention head width is ``d / heads = 4``.
* Conv kernels 3 × 3, padding 1, every conv ``16`` channels wide (``conv_width``), the last one ``d``
  wide (the tokens); the encoder LayerNorm acts on each token's ``d`` channels.
* The head's hidden width equals its input width (``d`` for the CA models, ``2d`` for the baseline:
  ``head_hidden=None``). With that, every LN its own module per layer (LN(F) and LN(X) apart in the
  CA models; one LN per stream and layer in the baseline, shared by the query and key/value uses of
  that stream, as I.4's equations write the same ``LN(U_{t−1})`` in both), and torch's MHA layout
  (``3d × d`` in-projection with bias, ``d × d`` out-projection with bias), the counts come out at
  43,610 (full), 38,170 (no injection) and 60,746 (baseline): the seed's 4.36e4, 3.82e4, 6.07e4.
  The seed lists 4.36e4 also for "no cross-attn": its code kept the (then unused) LN(X) of each layer.
  We do not build unused modules, so our no-cross count is 43,290 (4.33e4); the numbers are the same.
* Dropout (0.1): on the attention weights (torch's ``nn.MultiheadAttention(dropout=p)``), after the
  GELU of every FFN and of the head. Drawn from torch's global generator (set from the run's seed by
  the experiment): every element, hence every member, gets its own mask, but a member's masks depend
  on the ensemble it trains in. With dropout off (or in eval mode) member ``e`` equals the model built
  alone from ``seeds[e]``.
* I.5 also lists ``g = 4`` without saying what it is; nothing here uses it.
* Initialisation (unstated; torch's defaults of the layers named): conv and linear weights and biases
  ``U(±1/√fan_in)``; MHA in-projection Xavier-uniform over the stacked ``3d × d`` matrix, its biases
  and the out-projection's bias 0; LayerNorm 1 / 0; CLS, positions, modality embeddings ``N(0, 0.02²)``.
  Every member draws from its own ``generators(seeds, Purpose.INIT)`` stream, in a fixed order.

Ensembles: every parameter has a leading member axis ``E``; inputs are ``(E, B, 2, 28, 28)`` (channel
0 the image, 1 the spectrogram), outputs ``(E, B, classes)``. The two conv encoders of all members run
as one grouped convolution (``groups = 2E``, weights ``(E, 2, out, in, k, k)``: member, modality), which
``bench/bench_avdigits.py`` measured faster than ``torch.func.vmap`` over members.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import torch
import torch.nn.functional as F
from pydantic import Field, model_validator
from torch import nn

from tdlab.config import Config
from tdlab.models.ensemble import EnsembleLayerNorm, EnsembleLinear, EnsembleModel, Modules
from tdlab.models.hooks import HookPoint

__all__ = [
    "TOKENS_PER_MODALITY",
    "BiCAConfig",
    "BidirectionalCA",
    "ClassifierHead",
    "DualConvEncoder",
    "EnsembleConv2d",
    "EnsembleFFN",
    "EnsembleMHA",
    "MultimodalCA",
    "MultimodalCAConfig",
    "activation_bytes",
    "parameter_count",
]

TOKENS_PER_MODALITY = 16  # I.2: adaptive average pooling to a 4 × 4 grid


class _Common(Config):
    """Fields both architectures share (I.5 defaults)."""

    d: int = Field(16, ge=1, le=1024)  # I.5: token / embedding dimension d = 16
    layers: int = Field(10, ge=1, le=256)  # I.5: T = 10 attention layers
    heads: int = Field(4, ge=1, le=64)  # I.5: 4 heads
    d_h: int = Field(32, ge=1, le=8192)  # I.5: d_h = 32, the FFN hidden width (I.3)
    dropout: float = Field(0.1, ge=0.0, lt=1.0)  # I.5: 0.1
    conv_width: int = Field(16, ge=1, le=1024)  # I.2: "hidden convolutional width 16"
    kernel: int = Field(3, ge=1, le=7)  # unstated: 3 × 3, padding kernel // 2 (odd only)
    head_hidden: int | None = Field(None, ge=1, le=8192)  # unstated: None = the head's input width (fits the counts)
    classes: int = Field(10, ge=2, le=1000)  # I.1: ten digits
    image_size: int = Field(28, ge=4, le=512)  # I.1: 28 × 28 maps (pooled twice, then to 4 × 4)

    @model_validator(mode="after")
    def _check(self) -> _Common:
        if self.d % self.heads:
            raise ValueError(f"d={self.d} must be a multiple of heads={self.heads}")
        if self.kernel % 2 == 0:
            raise ValueError(f"kernel={self.kernel} must be odd (padding kernel // 2 keeps the map size)")
        return self


class MultimodalCAConfig(_Common):
    """The paper-inspired model (I.3) and its ablations: ``inject`` (S_t present), ``cross`` (F attends to X)."""

    inject: bool = True  # False: "No injection" (S_t ≡ 0)
    cross: bool = True  # False: "No cross-attn" (self-attention of F_t on itself)


class BiCAConfig(_Common):
    """The bidirectional cross-attention baseline (I.4)."""


def activation_bytes(cfg: _Common, batch: int) -> int:
    """Bytes of one member's largest activation in a step on ``batch`` examples: a full-resolution map of
    the conv tokeniser, ``(B, 2 modalities, conv_width, image_size, image_size)`` in float32 (the CPU
    trainer keeps a chunk's copies of it within a cache, :func:`tdlab.train.trainer.auto_chunk`)."""
    return batch * 2 * cfg.conv_width * cfg.image_size**2 * 4


# --------------------------------------------------------------------------------------------------
# Initialisation helpers: member e's slice from member e's generator.


def _uniform_(p: torch.Tensor, bound: float, gens: Sequence[torch.Generator]) -> None:
    for e, g in enumerate(gens):
        p.data[e].uniform_(-bound, bound, generator=g)


def _normal_(p: torch.Tensor, std: float, gens: Sequence[torch.Generator]) -> None:
    for e, g in enumerate(gens):
        p.data[e].normal_(0.0, std, generator=g)


def _linear_init_(lin: EnsembleLinear, gens: Sequence[torch.Generator]) -> None:
    """torch's ``nn.Linear`` default: weight and bias ``U(±1/√fan_in)``."""
    b = 1.0 / math.sqrt(lin.weight.shape[-1])
    _uniform_(lin.weight, b, gens)
    if lin.bias is not None:
        _uniform_(lin.bias, b, gens)


# --------------------------------------------------------------------------------------------------
# Layers


class EnsembleConv2d(nn.Module):
    """``G`` independent 2-d convolutions run as one grouped convolution.

    Shapes: weight ``(E, M, out, in, k, k)``, bias ``(E, M, out)`` (``G = E·M`` groups: member, modality);
    input ``(B, G·in, H, W)`` -> ``(B, G·out, H, W)`` (padding ``k // 2``). The channel-stacked layout
    ``(B, G·C, H, W)`` is kept through the whole encoder, so pooling needs no reshapes.
    """

    def __init__(self, members: int, modalities: int, c_in: int, c_out: int, kernel: int) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.empty(members, modalities, c_out, c_in, kernel, kernel))
        self.bias = nn.Parameter(torch.empty(members, modalities, c_out))

    def reset_parameters(self, gens: Sequence[torch.Generator]) -> None:
        """torch's ``nn.Conv2d`` default: ``U(±1/√(in·k·k))`` for weight and bias."""
        _, _, _, c_in, k, _ = self.weight.shape
        b = 1.0 / math.sqrt(c_in * k * k)
        _uniform_(self.weight, b, gens)
        _uniform_(self.bias, b, gens)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        E, M, c_out, c_in, k, _ = self.weight.shape
        return F.conv2d(
            x, self.weight.reshape(E * M * c_out, c_in, k, k), self.bias.reshape(-1), padding=k // 2, groups=E * M
        )


class DualConvEncoder(nn.Module):
    """Φ_I and Φ_A of I.2 for every member: ``(E, B, 2, H, W)`` maps -> ``(E, B, 2, 16, d)`` tokens
    (axis 2: image, audio). Weights ``(E, 2, ...)``: the two encoders share the architecture, not weights."""

    def __init__(self, members: int, cfg: _Common) -> None:
        super().__init__()
        w, d, k = cfg.conv_width, cfg.d, cfg.kernel
        self.convs: Modules[EnsembleConv2d] = Modules(
            [
                EnsembleConv2d(members, 2, 1, w, k),
                EnsembleConv2d(members, 2, w, w, k),
                EnsembleConv2d(members, 2, w, w, k),
                EnsembleConv2d(members, 2, w, d, k),
            ]
        )
        self.ln_image = EnsembleLayerNorm(members, d)
        self.ln_audio = EnsembleLayerNorm(members, d)

    def reset_parameters(self, gens: Sequence[torch.Generator]) -> None:
        for c in self.convs:
            c.reset_parameters(gens)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        E, B, M, H, W = x.shape
        h = x.permute(1, 0, 2, 3, 4).reshape(B, E * M, H, W)  # channel g = member·2 + modality
        h = F.relu(self.convs[1](F.relu(self.convs[0](h))))
        h = F.max_pool2d(h, 2)
        h = F.relu(self.convs[3](F.relu(self.convs[2](h))))
        h = F.max_pool2d(h, 2)
        h = F.adaptive_avg_pool2d(h, 4)  # (B, E·2·d, 4, 4)
        d = self.convs[3].weight.shape[2]
        tok = h.reshape(B, E, M, d, TOKENS_PER_MODALITY).permute(1, 0, 2, 4, 3)  # (E, B, 2, 16, d), row-major grid
        return torch.stack([self.ln_image(tok[:, :, 0]), self.ln_audio(tok[:, :, 1])], dim=2)


class EnsembleMHA(nn.Module):
    """Multi-head attention ``MHA(Q_in, K_in, V_in = K_in)`` per member, torch's ``nn.MultiheadAttention``
    layout: ``W_q, W_k, W_v`` (E, d, d) with biases (the stacked in-projection), ``W_o`` (E, d, d) with bias.

    ``forward(q (E, B, Lq, d), kv (E, B, Lk, d)) -> (E, B, Lq, d)``; dropout ``p`` on the attention
    weights in training. Hook points: ``hook_kv`` (the keys' and values' input, ``(E, B, Lk, d)``),
    ``hook_pattern`` ``(E, B, heads, Lq, Lk)`` (built only while hooked; the fused kernel's output stands
    unless a hook replaces it), ``hook_out`` ``(E, B, Lq, d)``. Short names: ``{name}.kv``, ``{name}.pattern``.
    """

    def __init__(self, members: int, d: int, heads: int, dropout: float, name: str = "attn") -> None:
        super().__init__()
        self.heads, self.p, self.name = heads, dropout, name
        self.W_q = EnsembleLinear(members, d, d, bias=True)
        self.W_k = EnsembleLinear(members, d, d, bias=True)
        self.W_v = EnsembleLinear(members, d, d, bias=True)
        self.W_o = EnsembleLinear(members, d, d, bias=True)
        self.hook_kv = HookPoint(f"{name}.kv")
        self.hook_pattern = HookPoint(f"{name}.pattern")
        self.hook_out = HookPoint()

    def reset_parameters(self, gens: Sequence[torch.Generator]) -> None:
        d = self.W_q.weight.shape[-1]
        b = math.sqrt(6.0 / (d + 3 * d))  # Xavier-uniform of torch's stacked (3d, d) in_proj_weight
        for lin in (self.W_q, self.W_k, self.W_v):
            _uniform_(lin.weight, b, gens)
            assert lin.bias is not None  # built with bias=True
            nn.init.zeros_(lin.bias)
        _linear_init_(self.W_o, gens)
        assert self.W_o.bias is not None
        nn.init.zeros_(self.W_o.bias)

    def forward(self, q_in: torch.Tensor, kv_in: torch.Tensor) -> torch.Tensor:
        E, B, Lq, d = q_in.shape
        H = self.heads
        kv_in = self.hook_kv(kv_in)

        def split(t: torch.Tensor) -> torch.Tensor:  # (E, B, L, d) -> (E, B, H, L, d/H)
            return t.reshape(E, B, t.shape[2], H, d // H).transpose(2, 3)

        q, k, v = split(self.W_q(q_in)), split(self.W_k(kv_in)), split(self.W_v(kv_in))
        p = self.p if self.training else 0.0
        o = None
        if self.hook_pattern.active:
            att = torch.softmax(q @ k.transpose(-1, -2) / math.sqrt(d // H), -1)
            seen = self.hook_pattern(att)
            if seen is not att:  # a replaced pattern carries on; an observed one leaves the kernel's output
                o = F.dropout(seen, p) @ v
        if o is None:
            o = F.scaled_dot_product_attention(q, k, v, dropout_p=p)
        return self.hook_out(self.W_o(o.transpose(2, 3).reshape(E, B, Lq, d)))


class EnsembleFFN(nn.Module):
    """``FFN(x) = W_2 Dropout(GELU(W_1 x + b_1)) + b_2``, widths ``d -> d_h -> d_out`` (I.3)."""

    def __init__(self, members: int, d: int, d_h: int, dropout: float, d_out: int | None = None) -> None:
        super().__init__()
        self.fc1 = EnsembleLinear(members, d, d_h, bias=True)
        self.fc2 = EnsembleLinear(members, d_h, d if d_out is None else d_out, bias=True)
        self.drop = nn.Dropout(dropout)

    def reset_parameters(self, gens: Sequence[torch.Generator]) -> None:
        _linear_init_(self.fc1, gens)
        _linear_init_(self.fc2, gens)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc2(self.drop(F.gelu(self.fc1(x))))


class ClassifierHead(nn.Module):
    """``logits = FFN(LN(h))``: LayerNorm, then a 2-layer GELU MLP with dropout (I.3, I.4)."""

    def __init__(self, members: int, d_in: int, hidden: int, classes: int, dropout: float) -> None:
        super().__init__()
        self.ln = EnsembleLayerNorm(members, d_in)
        self.mlp = EnsembleFFN(members, d_in, hidden, dropout, d_out=classes)

    def reset_parameters(self, gens: Sequence[torch.Generator]) -> None:
        self.mlp.reset_parameters(gens)

    def forward(self, h: torch.Tensor) -> torch.Tensor:
        return self.mlp(self.ln(h))


class _Ensemble(EnsembleModel):
    """The input checks shared by both architectures."""

    cfg: _Common  # set by each architecture's __init__ (its own config class)

    def _check(self, x: torch.Tensor) -> None:
        s = self.cfg.image_size
        if x.dim() != 5 or x.shape[2] != 2 or x.shape[3:] != (s, s):
            raise ValueError(f"inputs must be (E, B, 2, {s}, {s}) (image, spectrogram), got {tuple(x.shape)}")
        self.check_members(x.shape[0], "inputs")


class _CALayer(nn.Module):
    """One fusion layer t of I.3 (its own weights)."""

    def __init__(self, members: int, cfg: MultimodalCAConfig, t: int) -> None:
        super().__init__()
        d = cfg.d
        self.cross, self.inject, self.t = cfg.cross, cfg.inject, t
        self.ln_f = EnsembleLayerNorm(members, d)
        self.ln_x = EnsembleLayerNorm(members, d) if cfg.cross else None
        self.attn = EnsembleMHA(members, d, cfg.heads, cfg.dropout, name=f"blocks.{t}.attn")
        self.gate = EnsembleLinear(members, d, d, bias=True) if cfg.inject else None  # W^G, b^G
        self.inj = EnsembleLinear(members, d, d, bias=True) if cfg.inject else None  # W^S, b^S
        self.ln_ffn = EnsembleLayerNorm(members, d)
        self.ffn = EnsembleFFN(members, d, cfg.d_h, cfg.dropout)
        self.hook_gate = HookPoint(f"blocks.{t}.gate") if cfg.inject else None  # G (E, B, 33, d)
        self.hook_inject = HookPoint(f"blocks.{t}.S") if cfg.inject else None  # S (E, B, 33, d)
        self.hook_resid_post = HookPoint(f"blocks.{t}.F")  # F_t (E, B, 33, d)

    def reset_parameters(self, gens: Sequence[torch.Generator]) -> None:
        self.attn.reset_parameters(gens)
        if self.inject:
            assert self.gate is not None and self.inj is not None  # built when inject
            _linear_init_(self.gate, gens)
            _linear_init_(self.inj, gens)
        self.ffn.reset_parameters(gens)

    def forward(self, Fp: torch.Tensor, X: torch.Tensor) -> torch.Tensor:
        f = self.ln_f(Fp)
        if self.cross:
            assert self.ln_x is not None  # built when cross
            kv = self.ln_x(X)  # cross: keys/values are LN(X)
        else:
            kv = f  # else LN(F_{t-1}) itself
        A = self.attn(f, kv)  # A_{t-1}
        Ft = Fp + A  # F̃_t
        if self.inject:
            assert self.gate is not None and self.inj is not None  # built when inject
            assert self.hook_gate is not None and self.hook_inject is not None
            G = self.hook_gate(torch.sigmoid(self.gate(Ft)))  # G_{t-1}(F̃_t)
            S = self.hook_inject(G * self.inj(X))  # S_{t-1} = G ⊙ (X W^Sᵀ + b^S)
            Fb = Ft + S  # F̄_t
        else:
            Fb = Ft  # S ≡ 0
        return self.hook_resid_post(Fb + self.ffn(self.ln_ffn(Fb)))  # F_t


class MultimodalCA(_Ensemble):
    """``E`` independent paper-inspired CA models (I.2 + I.3), or an ablation (``cfg.inject``, ``cfg.cross``).

    Args:
        cfg: architecture; seeds: one per member (member ``e`` equals ``MultimodalCA(cfg, [seeds[e]])``).

    ``forward(x (E, B, 2, 28, 28)) -> logits (E, B, classes)``. Hook points (short names in brackets), every
    one ``(E, B, 33, d)`` but the pattern, ``cls`` and the logits: ``hook_tokens`` [``tokens.X``], ``hook_f0``
    [``blocks.-1.F``: F_0], per layer ``t = 0..T-1`` ``blocks.{t}.attn.hook_kv`` [``blocks.{t}.attn.kv``],
    ``blocks.{t}.attn.hook_pattern`` [``blocks.{t}.attn.pattern``] ``(E, B, heads, 33, 33)``,
    ``blocks.{t}.attn.hook_out`` (A_t), ``blocks.{t}.hook_gate`` [``blocks.{t}.gate``], ``blocks.{t}.hook_inject``
    [``blocks.{t}.S``] (with injection), ``blocks.{t}.hook_resid_post`` [``blocks.{t}.F``: F_{t+1}];
    ``hook_cls`` [``cls``] ``(E, B, d)``, ``hook_logits`` ``(E, B, classes)``.
    """

    def __init__(self, cfg: MultimodalCAConfig, seeds: Sequence[int]) -> None:
        super().__init__()
        self.cfg = cfg
        E = self._set_members(seeds)
        d, n = cfg.d, TOKENS_PER_MODALITY
        self.encoder = DualConvEncoder(E, cfg)
        self.pos_image = nn.Parameter(torch.empty(E, n, d))  # P_I
        self.pos_audio = nn.Parameter(torch.empty(E, n, d))  # P_A
        self.mod_image = nn.Parameter(torch.empty(E, d))  # M_I
        self.mod_audio = nn.Parameter(torch.empty(E, d))  # M_A
        self.cls = nn.Parameter(torch.empty(E, d))  # c
        self.W_0 = EnsembleLinear(E, d, d, bias=True)
        self.blocks: Modules[_CALayer] = Modules([_CALayer(E, cfg, t) for t in range(cfg.layers)])
        self.head = ClassifierHead(E, d, cfg.head_hidden or d, cfg.classes, cfg.dropout)
        self.hook_tokens = HookPoint("tokens.X")
        self.hook_f0 = HookPoint("blocks.-1.F")
        self.hook_cls = HookPoint("cls")
        self.hook_logits = HookPoint()
        self.reset_parameters()

    def reset_parameters(self) -> None:
        """Every member from its own INIT stream, in a fixed order (see the module docstring)."""
        gens = self.member_generators()
        self.encoder.reset_parameters(gens)
        for p in (self.pos_image, self.pos_audio, self.mod_image, self.mod_audio, self.cls):
            _normal_(p, 0.02, gens)
        _linear_init_(self.W_0, gens)
        for blk in self.blocks:
            blk.reset_parameters(gens)
        self.head.reset_parameters(gens)

    def tokens(self, x: torch.Tensor) -> torch.Tensor:
        """``X = concat(c, X_I, X_A)`` (I.2): ``(E, B, 33, d)``."""
        phi = self.encoder(x)
        E, B = phi.shape[:2]
        X_I = phi[:, :, 0] + self.pos_image.unsqueeze(1) + self.mod_image[:, None, None]
        X_A = phi[:, :, 1] + self.pos_audio.unsqueeze(1) + self.mod_audio[:, None, None]
        c = self.cls[:, None, None].expand(E, B, 1, -1)
        return torch.cat([c, X_I, X_A], dim=2)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        self._check(x)
        X = self.hook_tokens(self.tokens(x))
        Fs = self.hook_f0(self.W_0(X))  # F_0 = X W_0ᵀ + b_0
        for blk in self.blocks:
            Fs = blk(Fs, X)
        h = self.hook_cls(Fs[:, :, 0])  # F_T[CLS]
        return self.hook_logits(self.head(h))


class _BiLayer(nn.Module):
    """One layer t of I.4: each stream attends to the other, then its own FFN."""

    def __init__(self, members: int, cfg: BiCAConfig, t: int) -> None:
        super().__init__()
        d = cfg.d
        self.t = t
        self.ln_u, self.ln_v = EnsembleLayerNorm(members, d), EnsembleLayerNorm(members, d)
        self.attn_i = EnsembleMHA(members, d, cfg.heads, cfg.dropout, name=f"blocks.{t}.attn_image")  # MHA^I_t
        self.attn_a = EnsembleMHA(members, d, cfg.heads, cfg.dropout, name=f"blocks.{t}.attn_audio")  # MHA^A_t
        self.ln_fu, self.ln_fv = EnsembleLayerNorm(members, d), EnsembleLayerNorm(members, d)
        self.ffn_i = EnsembleFFN(members, d, cfg.d_h, cfg.dropout)
        self.ffn_a = EnsembleFFN(members, d, cfg.d_h, cfg.dropout)
        self.hook_resid_image = HookPoint(f"blocks.{t}.U")  # U_{t+1} (E, B, 16, d)
        self.hook_resid_audio = HookPoint(f"blocks.{t}.V")  # V_{t+1}

    def reset_parameters(self, gens: Sequence[torch.Generator]) -> None:
        for m in (self.attn_i, self.attn_a, self.ffn_i, self.ffn_a):
            m.reset_parameters(gens)

    def forward(self, U: torch.Tensor, V: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        u, v = self.ln_u(U), self.ln_v(V)
        Ut = U + self.attn_i(u, v)  # Ũ_t: image queries, audio keys/values
        Vt = V + self.attn_a(v, u)  # Ṽ_t: audio queries, image keys/values (both from layer t-1)
        U_next = self.hook_resid_image(Ut + self.ffn_i(self.ln_fu(Ut)))
        return U_next, self.hook_resid_audio(Vt + self.ffn_a(self.ln_fv(Vt)))


class BidirectionalCA(_Ensemble):
    """``E`` independent bidirectional cross-attention transformers (I.2 encoders + I.4).

    ``forward(x (E, B, 2, 28, 28)) -> logits (E, B, classes)``. Hook points (short names in brackets):
    ``blocks.{t}.hook_resid_image`` [``blocks.{t}.U``], ``blocks.{t}.hook_resid_audio`` [``blocks.{t}.V``]
    ``(E, B, 16, d)``, the points of :class:`EnsembleMHA` under ``blocks.{t}.attn_i`` (image queries; short
    names ``blocks.{t}.attn_image.*``) and ``blocks.{t}.attn_a`` (pattern ``(E, B, heads, 16, 16)``), ``hook_pooled`` [``pooled``] ``(E, B, 2d)``,
    ``hook_logits`` ``(E, B, classes)``.
    """

    def __init__(self, cfg: BiCAConfig, seeds: Sequence[int]) -> None:
        super().__init__()
        self.cfg = cfg
        E = self._set_members(seeds)
        d, n = cfg.d, TOKENS_PER_MODALITY
        self.encoder = DualConvEncoder(E, cfg)
        self.pos_image = nn.Parameter(torch.empty(E, n, d))  # P_I
        self.pos_audio = nn.Parameter(torch.empty(E, n, d))  # P_A
        self.blocks: Modules[_BiLayer] = Modules([_BiLayer(E, cfg, t) for t in range(cfg.layers)])
        self.head = ClassifierHead(E, 2 * d, cfg.head_hidden or 2 * d, cfg.classes, cfg.dropout)
        self.hook_pooled = HookPoint("pooled")
        self.hook_logits = HookPoint()
        self.reset_parameters()

    def reset_parameters(self) -> None:
        gens = self.member_generators()
        self.encoder.reset_parameters(gens)
        for p in (self.pos_image, self.pos_audio):
            _normal_(p, 0.02, gens)
        for blk in self.blocks:
            blk.reset_parameters(gens)
        self.head.reset_parameters(gens)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        self._check(x)
        phi = self.encoder(x)
        U = phi[:, :, 0] + self.pos_image.unsqueeze(1)  # U_0 = Φ_I(I) + P_I
        V = phi[:, :, 1] + self.pos_audio.unsqueeze(1)  # V_0 = Φ_A(A) + P_A
        for blk in self.blocks:
            U, V = blk(U, V)
        h = self.hook_pooled(torch.cat([U.mean(2), V.mean(2)], dim=-1))  # concat of the mean-pooled streams
        return self.hook_logits(self.head(h))


def parameter_count(model: _Ensemble) -> int:
    """Trainable parameters of one member (every parameter's size divided by the member count)."""
    E = model.members
    return sum(p.numel() for p in model.parameters() if p.requires_grad) // E

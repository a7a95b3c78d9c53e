"""The one-layer topic-attention model of seed 004 (Li, Li & Risteski, ICML 2023), ensemble-first.

Sec. 3.3 in the paper's notation (columns are positions; ``X̃ in {0,1}^{V x N}`` is the one-hot
masked document, ``V = Tv + 1`` with ``[MASK] = 0``)::

    Z        = W^E X̃                                              (input representation, d x N)
    A(Z)     = σ( (W^K Z + b^K 1ᵀ)ᵀ (W^Q Z + b^Q 1ᵀ) / sqrt(d_a) )   (Eq. 5; σ = *column* softmax)
    f(X̃)     = W^Eᵀ (W^V Z + b^V 1ᵀ) A(Z) + b^pred                  (Eq. 6; W^pred = W^E, tied)
    one-hot:  W^E = I (d = V)  =>  f(X̃) = W^V X̃ A(X̃) + b^pred     (Eq. 7)

One head, no residual, no LayerNorm, no positions. The biases ``b^K, b^Q, b^V`` are not in
Eqs. 5-7; §6.1 adds them back ("following standard implementation in Wolf et al. (2020)"), so they
are on by default (``bias_qk``, ``bias_v``). Because every column of ``A`` sums to one,
``b^V 1ᵀ A = b^V 1ᵀ``: ``b^V`` only adds the constant ``W^Eᵀ b^V`` to every column.

Column softmax: ``A_ij = exp(S_ij) / Σ_l exp(S_lj)`` -- row ``i`` is the *key* (the word attended
to), column ``j`` the *query* (the position predicted), and each column sums to one over the keys
(``A(Z)_ij`` is "the importance of the i-th word for predicting the j-th word", §1). The recorded
``attn.pattern`` keeps this layout: ``pattern[e, b, i, j] = A_ij``, summing to one over axis ``-2``.

Tensors here are row-major (``(E, B, N, d)``: position ``j`` is row ``j``), so ``Z`` is stored
transposed; the comments give the paper's column form. Every parameter has a leading member axis
``E``; member ``e`` is initialised from its own seed only (:func:`tdlab.seeding.generators`), so
member ``e`` equals ``TopicAttention(cfg, [seeds[e]])``.

Frozen parts (``onehot``'s ``W^E = I``, ``uniform_attn``'s ``W^K = W^Q = 0``, ``embed_only``'s
``W^V = I`` and fixed ``b^pred``, a caller's ``frozen_wv``) are buffers, never ``nn.Parameter``s,
so an optimiser or weight decay cannot touch them and ``parameters()`` lists only what trains.

Padding and hidden keys: ``key_mask (E, B, N)`` bool, False = the position is never attended to as a
key (its row of ``A`` is exactly 0). Padding of variable-length documents uses it; so does the
authors' code, which hides every *selected* position of M (the kept ones too) -- the objective
(``MaskedTokens(hide_selected=True)``) builds that mask, the model only obeys it.
"""

from __future__ import annotations

import math
from typing import Literal

import torch
from pydantic import Field, model_validator
from torch import nn

from tdlab.config import Config
from tdlab.models.ensemble import EnsembleLayerNorm, EnsembleModel
from tdlab.models.hooks import HookPoint

__all__ = ["TopicAttention", "TopicModelConfig", "thm1_bias"]


def _column_softmax(S: torch.Tensor, masked: bool) -> torch.Tensor:
    """Eq. 5's softmax over the keys (axis -2); a column without a visible key is 0 when ``masked``."""
    A = torch.softmax(S, dim=-2)
    return A.nan_to_num(0.0) if masked else A


def _rows(table: torch.Tensor, idx: torch.Tensor) -> torch.Tensor:
    """``table[e, idx[e, k]]`` for every member: ``table (E, V, w)``, ``idx (E, K)`` -> ``(E, K, w)``."""
    return torch.gather(table, 1, idx[..., None].expand(*idx.shape, table.shape[-1]))


BERT_LN_EPS = 1e-12  # BertConfig.layer_norm_eps, the LayerNorm of the authors' embedding


def thm1_bias(vocab: int, p_m: float, p_c: float, p_r: float) -> float:
    """Thm. 1's fixed prediction bias ``b^pred_i = -p_m p_r / ((1 - (1 - p_c) p_m) T v)`` (every i).

    ``T v = vocab - 1`` (the words; ``[MASK] = 0`` is the extra id), so only ``V`` is needed.
    At the paper's settings (T = v = 10, p_m = 0.15, p_c = p_r = 0.1): -1.734e-4.
    """
    return -p_m * p_r / ((1.0 - (1.0 - p_c) * p_m) * (vocab - 1))


class TopicModelConfig(Config):
    """Architecture, frozen parts and initialisation of :class:`TopicAttention` (seed 004, §3.3, §6.1).

    The seed is silent on ``d``, ``d_a`` and the initialisation: ``d = d_a = V`` by default (the width
    the one-hot model of Eq. 7 must have; the authors' code uses 104 = V + START/END + padding ids),
    and ``N(0, 0.02²)`` weights with zero biases (``initializer_range`` of the BERT code the authors
    build on, Wolf et al. 2020).
    """

    vocab: int = Field(101, ge=2, le=65536)  # V = T v + 1: [MASK] = 0 and T = v = 10 (§6.1)
    d: int | None = Field(None, ge=1, le=65536)  # embedding width; None -> V (seed silent)
    d_a: int | None = Field(None, ge=1, le=65536)  # attention head size; None -> d (seed silent)
    # Eq. 7: frozen one-hot embeddings W^E = I (needs d = V); the head is then the identity too.
    onehot: bool = False
    # W^K = W^Q = 0 frozen: A = [1/N]_{N x N} over the visible keys (App. C.1, Thms. 1, 2, 4).
    uniform_attn: bool = False
    # Thm. 1: only W^E trains; W^V = I frozen, b^pred frozen at thm1_bias(V, p_m, p_c, p_r), no b^V.
    # Thm. 1 also has W^K = W^Q = 0, so uniform_attn must be set with it.
    embed_only: bool = False
    # A frozen W^V the caller passes at construction (TopicAttention(..., wv=M)): Thm. 3's block map
    # ("block") or Thm. 5's diagonal D^V ("diag", checked to be diagonal).
    frozen_wv: Literal["block", "diag"] | None = None
    bias_pred: bool = True  # b^pred of Eqs. 6-7
    bias_v: bool = True  # b^V (§6.1 adds it back)
    bias_qk: bool = True  # b^K, b^Q (§6.1); not created under uniform_attn, where they cannot change A
    # Masking probabilities, used only for embed_only's fixed b^pred (§3.2; §6.1: Devlin et al. values).
    p_m: float = Field(0.15, gt=0.0, le=1.0)
    p_c: float = Field(0.1, ge=0.0, le=1.0)
    p_r: float = Field(0.1, ge=0.0, le=1.0)
    # Initialisation of trained weight matrices (biases start at 0 in every scheme):
    # "normal": N(0, init_scale²) (BERT's initializer_range 0.02);
    # "uniform": U[0, init_scale) -- the authors' near-zero init of the two-stage experiment (§5.1, Fig. 4),
    #   `zero_init_noise * torch.rand` in their code;
    # "pytorch": PyTorch's defaults, the authors' code for their custom modules: W^K, W^Q, W^V and
    #   b^K, b^Q, b^V ~ U(±1/sqrt(d)) (nn.Linear), W^E ~ N(0, 1) (nn.Embedding);
    # None: "pytorch" under authors_compat, else "normal".
    init: Literal["normal", "uniform", "pytorch"] | None = None
    init_scale: float = Field(0.02, gt=0.0, le=10.0)  # std ("normal") or upper end ("uniform")
    # The authors' code (YuchenLi01/transformer_topic_model_LDA, a BERT MLM class) departs from Eq. 6;
    # this switch turns on the departures that live in the model: the embedding is
    # Z = LayerNorm(W^E X̃ + t 1ᵀ) with a trainable token-type vector t ~ N(0, 1) and a trainable
    # LayerNorm (eps 1e-12), even for one-hot inputs (the tied head still uses the raw W^E), and
    # PyTorch's default init (see init). Hiding every selected position as a key is the objective's
    # key_mask (MaskedTokens(hide_selected=True)); the model needs nothing for it.
    authors_compat: bool = False

    @model_validator(mode="after")
    def _check(self) -> TopicModelConfig:
        V = self.vocab
        if self.onehot and self.d is not None and self.d != V:
            raise ValueError(
                f"d: onehot (Eq. 7) freezes W^E = I, so d must equal vocab = {V} (or be left unset); got d={self.d}"
            )
        if self.p_c + self.p_r > 1.0:
            raise ValueError(f"p_r: p_c + p_r must be at most 1 (§3.2), got p_c={self.p_c}, p_r={self.p_r}")
        if self.embed_only:
            if self.onehot:
                raise ValueError(
                    "embed_only: Thm. 1 trains W^E, but onehot freezes it (nothing would train); set one of them false"
                )
            if not self.uniform_attn:
                raise ValueError("uniform_attn: embed_only (Thm. 1) has W^K = W^Q = 0; set uniform_attn=true with it")
            if self.frozen_wv is not None:
                raise ValueError("frozen_wv: embed_only (Thm. 1) already freezes W^V = I; leave frozen_wv unset")
            if self.bias_v:
                raise ValueError("bias_v: embed_only (Thm. 1) has W^V = I and no b^V; set bias_v=false")
            if not self.bias_pred:
                raise ValueError(
                    "bias_pred: embed_only (Thm. 1) fixes b^pred = -p_m p_r/((1-(1-p_c)p_m)Tv); leave bias_pred true"
                )
        return self

    @property
    def d_model(self) -> int:
        """The embedding width ``d`` (``V`` when unset)."""
        return self.vocab if self.d is None else self.d

    @property
    def d_attn(self) -> int:
        """The attention head size ``d_a`` (``d`` when unset)."""
        return self.d_model if self.d_a is None else self.d_a

    @property
    def init_scheme(self) -> str:
        """The initialisation in force (``init``, or its default under ``authors_compat``)."""
        if self.init is not None:
            return self.init
        return "pytorch" if self.authors_compat else "normal"

    @property
    def b_pred_thm1(self) -> float:
        """Thm. 1's fixed ``b^pred`` entry for this config's ``V``, ``p_m``, ``p_c``, ``p_r``."""
        return thm1_bias(self.vocab, self.p_m, self.p_c, self.p_r)


class _AttentionPoints(nn.Module):
    """The attention's per-position hook points (no parameters: the state dict is unchanged); no keys,
    queries or scores under uniform attention."""

    def __init__(self, uniform: bool) -> None:
        super().__init__()
        scored = () if uniform else ("keys", "queries", "scores")
        for name in (*scored, "values", "pattern", "out"):
            self.add_module(f"hook_{name}", HookPoint(f"attn.{name}"))


class TopicAttention(EnsembleModel):
    """``E`` one-layer topic-attention models (Eqs. 5-7) trained side by side.

    Args:
        cfg: architecture, frozen parts and init.
        seeds: one seed per member (``E = len(seeds)``).
        wv: the frozen ``W^V`` when ``cfg.frozen_wv`` is set: ``(d, d)`` (every member) or ``(E, d, d)``.

    ``forward(tokens (E, B, N) long, key_mask (E, B, N) bool | None) -> (E, B, N, V)``: column ``j`` of
    ``f(X̃)`` at ``[..., j, :]`` -- logits for the cross-entropy of Eq. 4, the prediction itself for the
    squared loss of Eq. 3.

    Parameters (leading ``E``; paper orientation): ``W_E (E, d, V)``, ``W_K, W_Q (E, d_a, d)``,
    ``b_K, b_Q (E, d_a)``, ``W_V (E, d, d)``, ``b_V (E, d)``, ``b_pred (E, V)``; under ``authors_compat``
    also ``token_type (E, d)`` and ``ln`` (LayerNorm gain and shift, ``(E, d)`` each). A frozen one of
    ``W_E, W_K, W_Q, W_V, b_pred`` is a buffer of the same name and shape.

    Hook points (:mod:`tdlab.models.hooks`; short names of :meth:`cache` drop the ``hook_``): ``hook_embed``
    Z (E, B, N, d); ``attn.hook_keys`` / ``attn.hook_queries`` (E, B, N, d_a) and ``attn.hook_scores``
    (E, B, N, N, key i by query j, -inf on hidden keys) unless the attention is uniform; ``attn.hook_pattern``
    A (E, B, N, N), columns summing to one over axis -2; ``attn.hook_values`` W^V Z + b^V (E, B, N, d);
    ``attn.hook_out`` (W^V Z + b^V) A (E, B, N, d); ``hook_out`` f (E, B, N, V) (``(E, B, Q, V)`` with
    ``queries``). The forward pass runs on token tables (:meth:`forward`), so the per-position points are
    built only while hooked; a replaced score, pattern, value or attention output carries on to ``f``
    (``f = attn.out W^E + b^pred``, ``W^E = I`` under ``onehot``), while ``hook_embed``, ``attn.hook_keys``
    and ``attn.hook_queries`` are read-outs whose replacement changes nothing downstream.
    """

    # set through trained_or_frozen (a parameter, or a buffer when frozen): declared here for the type checker
    W_E: torch.Tensor
    W_K: torch.Tensor
    W_Q: torch.Tensor
    W_V: torch.Tensor
    b_pred: torch.Tensor | None

    def __init__(self, cfg: TopicModelConfig, seeds: list[int], wv: torch.Tensor | None = None) -> None:
        super().__init__()
        E, V, d, da = self._set_members(seeds), cfg.vocab, cfg.d_model, cfg.d_attn
        self.cfg = cfg

        def trained_or_frozen(name: str, shape: tuple[int, ...], frozen: torch.Tensor | None) -> None:
            if frozen is None:
                setattr(self, name, nn.Parameter(torch.empty(E, *shape)))
            else:
                self.register_buffer(name, frozen.expand(E, *shape).clone())

        trained_or_frozen("W_E", (d, V), torch.eye(V) if cfg.onehot else None)
        zero_qk = torch.zeros(da, d) if cfg.uniform_attn else None
        trained_or_frozen("W_K", (da, d), zero_qk)
        trained_or_frozen("W_Q", (da, d), zero_qk)
        qk_bias = cfg.bias_qk and not cfg.uniform_attn
        self.b_K = nn.Parameter(torch.empty(E, da)) if qk_bias else None
        self.b_Q = nn.Parameter(torch.empty(E, da)) if qk_bias else None
        trained_or_frozen("W_V", (d, d), self._frozen_wv(wv, E, d))
        self.b_V = nn.Parameter(torch.empty(E, d)) if cfg.bias_v else None
        if cfg.embed_only:
            trained_or_frozen("b_pred", (V,), torch.full((V,), cfg.b_pred_thm1))
        else:
            self.b_pred = nn.Parameter(torch.empty(E, V)) if cfg.bias_pred else None
        self.token_type = nn.Parameter(torch.empty(E, d)) if cfg.authors_compat else None
        self.ln = EnsembleLayerNorm(E, d, eps=BERT_LN_EPS) if cfg.authors_compat else None
        self.hook_embed = HookPoint("embed")
        self.attn = _AttentionPoints(cfg.uniform_attn)
        self.hook_out = HookPoint("out")
        self.reset_parameters()

    def _frozen_wv(self, wv: torch.Tensor | None, E: int, d: int) -> torch.Tensor | None:
        cfg = self.cfg
        if cfg.embed_only:
            if wv is not None:
                raise ValueError("wv: embed_only freezes W^V = I; do not pass a W^V")
            return torch.eye(d)
        if cfg.frozen_wv is None:
            if wv is not None:
                raise ValueError("wv: a frozen W^V was passed but cfg.frozen_wv is unset ('block' or 'diag')")
            return None
        if wv is None:
            raise ValueError(f"wv: frozen_wv={cfg.frozen_wv!r} needs the matrix: TopicAttention(cfg, seeds, wv=W)")
        wv = torch.as_tensor(wv, dtype=torch.get_default_dtype()).detach()
        if wv.shape not in ((d, d), (E, d, d)):
            raise ValueError(f"wv: expected shape ({d}, {d}) or ({E}, {d}, {d}), got {tuple(wv.shape)}")
        if cfg.frozen_wv == "diag" and bool(
            (wv - torch.diag_embed(torch.diagonal(wv, dim1=-2, dim2=-1))).abs().max() > 0
        ):
            raise ValueError(
                "wv: frozen_wv='diag' (Thm. 5's D^V) needs a diagonal matrix; this one has off-diagonal entries"
            )
        return wv

    # ------------------------------------------------------------------------------------------
    def reset_parameters(self) -> None:
        """Initialise every trained tensor of member ``e`` from ``generators(seeds, INIT)[e]`` alone.

        Draws per member, in this order: ``W_E, W_K, b_K, W_Q, b_Q, W_V, b_V, b_pred, token_type`` (those
        that exist and train). Weight matrices follow ``cfg.init_scheme``; biases are 0 except under
        ``"pytorch"`` (``b^K, b^Q, b^V ~ U(±1/sqrt(d))``, as nn.Linear); ``token_type ~ N(0, 1)``
        (nn.Embedding default, the authors' code); LayerNorm gain 1, shift 0.
        """
        cfg, scheme, s = self.cfg, self.cfg.init_scheme, self.cfg.init_scale
        bound = 1.0 / math.sqrt(cfg.d_model)  # nn.Linear's default for fan_in = d
        order = ("W_E", "W_K", "b_K", "W_Q", "b_Q", "W_V", "b_V", "b_pred", "token_type")
        trained = [(n, p) for n in order if isinstance(p := getattr(self, n, None), nn.Parameter)]
        with torch.no_grad():
            for e, g in enumerate(self.member_generators()):
                for name, prm in trained:
                    x = prm[e]
                    if name == "token_type":
                        x.normal_(0.0, 1.0, generator=g)
                    elif name == "b_pred":
                        x.zero_()  # BERT's LM-head bias starts at 0 in every scheme
                    elif name.startswith("b_") and scheme == "pytorch":  # nn.Linear's bias
                        x.uniform_(-bound, bound, generator=g)
                    elif name.startswith("b_"):
                        x.zero_()
                    elif scheme == "normal":
                        x.normal_(0.0, s, generator=g)
                    elif scheme == "uniform":
                        x.uniform_(0.0, s, generator=g)
                    elif name == "W_E":  # pytorch: nn.Embedding
                        x.normal_(0.0, 1.0, generator=g)
                    else:  # pytorch: nn.Linear
                        x.uniform_(-bound, bound, generator=g)
            if self.ln is not None:
                self.ln.weight.fill_(1.0)
                if self.ln.bias is not None:
                    self.ln.bias.fill_(0.0)

    # ------------------------------------------------------------------------------------------
    def token_tables(self) -> dict[str, torch.Tensor]:
        """Every per-token quantity of Eqs. 5-6, one row per vocabulary id (no positions, so column ``j``
        of ``Z``, ``W^K Z``, ... depends on the token ``w̃_j`` alone).

        Returns:
            ``Z (E, V, d)``: row ``a`` = ``W^E e_a`` (LayerNorm'd with the token type under authors_compat);
            ``K, Q (E, V, d_a)``: ``W^K z_a + b^K``, ``W^Q z_a + b^Q``; ``values (E, V, d)``: ``W^V z_a + b^V``;
            ``S (E, V, V)``: ``S[a, c] = (W^K z_a + b^K)ᵀ(W^Q z_c + b^Q) / sqrt(d_a)`` (key token ``a``,
            query token ``c``; absent under uniform_attn); ``F (E, V, V)``: ``W^Eᵀ(W^V z_a + b^V)``, what key
            token ``a`` adds to ``f`` per unit of attention.
        """
        cfg = self.cfg
        Z = self.W_E.transpose(1, 2)  # row a = column a of W^E (= e_a under onehot, Eq. 7)
        if self.ln is not None and self.token_type is not None:  # authors_compat: the authors' BERT embedding,
            Z = self.ln(Z + self.token_type[:, None, :])  # LayerNorm(W^E X̃ + token-type vector)
        values = Z @ self.W_V.transpose(1, 2)
        if self.b_V is not None:
            values = values + self.b_V[:, None, :]
        out = {"Z": Z, "values": values}
        if not cfg.uniform_attn:
            K, Q = Z @ self.W_K.transpose(1, 2), Z @ self.W_Q.transpose(1, 2)
            if self.b_K is not None and self.b_Q is not None:  # both or neither (cfg.bias_qk)
                K, Q = K + self.b_K[:, None, :], Q + self.b_Q[:, None, :]
            out.update(K=K, Q=Q, S=K @ Q.transpose(1, 2) / math.sqrt(cfg.d_attn))  # Eq. 5's scores
        out["F"] = values if cfg.onehot else values @ self.W_E  # tied head W^pred = W^E (identity, Eq. 7)
        return out

    def forward(
        self, tokens: torch.Tensor, key_mask: torch.Tensor | None = None, queries: torch.Tensor | None = None
    ) -> torch.Tensor:
        """``f(X̃)`` of Eq. 6 (Eq. 7 when ``onehot``) for every member, document and position.

        Args:
            tokens: ``(E, B, N)`` long ids in ``[0, V)`` (the masked document ``w̃``).
            key_mask: ``(E, B, N)`` bool, False where a position may not be attended to as a key
                (padding; hidden selected positions). ``None``: every position is visible. A query
                whose document has no visible key gets zero attention (no NaN).
            queries: ``(E, B, Q)`` long positions: compute ``f`` at these columns only (the masked
                positions, the only ones Eq. 1 scores: ~p_m N of N, so ~1/p_m less work).
        Returns:
            ``(E, B, N, V)``: ``out[e, b, j] = f(X̃)_{:j}`` of member ``e`` on document ``b``; with
            ``queries``, ``(E, B, Q, V)``: ``out[e, b, k] = f(X̃)_{:queries[e, b, k]}``.

        Computation. Scores depend on the two tokens only, so all keys carrying the same token ``a`` can
        be merged: ``Σ_{i: w̃_i = a} exp(S_ij) = n_a exp(S[a, w̃_j])`` with ``n_a`` the number of visible
        keys equal to ``a``. Eq. 5's column softmax over ``N`` keys is then one over the ``V`` token ids
        with logits ``S[a, c] + log n_a`` -- the same numbers for ``(V/N)²`` of the cost when ``V < N``
        (T = v = 10: V = 101, N = 100..150). For ``V >= N`` the per-position form runs. Either way
        ``f_j = Σ_i A_ij F[w̃_i] + b^pred``. Per-position activations are built only when recorded.
        """
        cfg = self.cfg
        E, B, N = tokens.shape
        V = cfg.vocab
        self.check_members(E)
        if key_mask is not None and key_mask.shape != tokens.shape:
            raise ValueError(
                f"key_mask must have the shape of tokens {tuple(tokens.shape)}, got {tuple(key_mask.shape)}"
            )
        visible = torch.ones_like(tokens, dtype=torch.bool) if key_mask is None else key_mask.to(torch.bool)
        tab = self.token_tables()
        dt = tab["F"].dtype
        # n[e, b, a]: visible keys of document b that carry token a.
        n = torch.zeros(E, B, V, dtype=dt, device=tokens.device).scatter_add_(-1, tokens, visible.to(dt))

        Nq = N if queries is None else queries.shape[-1]
        if cfg.uniform_attn:
            # W^K = W^Q = 0: A_ij = 1/|visible| for every query j (App. C.1); f_j is the same for all j.
            weight = n / n.sum(-1, keepdim=True).clamp_min(1.0)  # (E, B, V)
            f = (weight @ tab["F"]).unsqueeze(2).expand(E, B, Nq, V)
        elif V < N:
            empty = n.sum(-1, keepdim=True) == 0  # documents without a visible key get zero attention
            log_n = n.masked_fill(empty, 1.0).log()[..., :, None]  # (E, B, V_key, 1)
            if queries is None:
                logits = tab["S"][:, None] + log_n  # (E, B, V_key, V_query)
            else:  # only the query tokens asked for: S[:, w̃_j] for j in queries
                q_tok = torch.gather(tokens, -1, queries)  # (E, B, Q)
                cols = torch.gather(tab["S"][:, None].expand(E, B, V, V), -1, q_tok[:, :, None, :].expand(E, B, V, Nq))
                logits = cols + log_n  # (E, B, V_key, Q)
            A_tok = torch.softmax(logits, dim=-2)  # column softmax of Eq. 5, equal keys merged; log 0 = -inf
            if key_mask is not None:
                A_tok = A_tok.masked_fill(empty[..., None], 0.0)
            f_tok = A_tok.transpose(-1, -2) @ tab["F"][:, None]  # (E, B, V_query or Q, V)
            if queries is None:
                f = _rows(f_tok.reshape(E * B, V, V), tokens.reshape(E * B, N)).reshape(E, B, N, V)
            else:
                f = f_tok
        else:
            A = self._pattern(tab["S"], tokens, visible, key_mask is not None)
            if queries is not None:
                A = torch.gather(A, -1, queries[:, :, None, :].expand(E, B, N, Nq))
            f = A.transpose(-1, -2) @ _rows(tab["F"], tokens.reshape(E, B * N)).reshape(E, B, N, V)
        if any(p.active for p in self._position_points()):
            out = self._positions(tab, tokens, visible, key_mask is not None)
            if out is not None:  # a hook replaced part of the attention: f from its output
                if queries is not None:
                    out = torch.gather(out, 2, queries.unsqueeze(-1).expand(*queries.shape, out.shape[-1]))
                f = out if cfg.onehot else out @ self.W_E[:, None]
        if self.b_pred is not None:
            f = f + self.b_pred[:, None, None, :]
        return self.hook_out(f)

    def _position_points(self) -> list[HookPoint]:
        return [self.hook_embed, *(m for m in self.attn.children() if isinstance(m, HookPoint))]

    def _point(self, name: str) -> HookPoint:
        point = getattr(self.attn, f"hook_{name}")
        assert isinstance(point, HookPoint)
        return point

    def _pattern(self, S_tab: torch.Tensor, tokens: torch.Tensor, visible: torch.Tensor, masked: bool) -> torch.Tensor:
        """Eq. 5 per position: ``A (E, B, N, N)``, ``A[e, b, i, j] = σ(S)_ij``, columns summing to one over keys ``i``."""
        return _column_softmax(self._scores(S_tab, tokens, visible), masked)

    @staticmethod
    def _scores(S_tab: torch.Tensor, tokens: torch.Tensor, visible: torch.Tensor) -> torch.Tensor:
        """``S (E, B, N, N)``, ``S_ij = S_tab[w̃_i, w̃_j]`` (key ``i``, query ``j``), ``-inf`` on hidden keys."""
        E, B, N = tokens.shape
        rows = _rows(S_tab, tokens.reshape(E, B * N)).reshape(E, B, N, -1)  # S[w̃_i, :]
        S = torch.gather(rows, -1, tokens[:, :, None, :].expand(E, B, N, N))  # S_ij = S[w̃_i, w̃_j]
        return S.masked_fill(~visible[..., :, None], float("-inf"))

    def _positions(
        self, tab: dict[str, torch.Tensor], tokens: torch.Tensor, visible: torch.Tensor, masked: bool
    ) -> torch.Tensor | None:
        """Per-position activations through their hook points (built only for the points hooked).

        Returns:
            the attention output ``(E, B, N, d)`` when a hook replaced a score, the pattern, the values or
            the output itself (``f`` is then computed from it), else ``None``.
        """
        E, B, N = tokens.shape
        flat = tokens.reshape(E, B * N)
        at = lambda t: _rows(t, flat).reshape(E, B, N, -1)  # noqa: E731 - a table's rows at the positions
        if self.hook_embed.active:
            self.hook_embed(at(tab["Z"]))
        for name in ("keys", "queries"):
            if "K" in tab and self._point(name).active:
                self._point(name)(at(tab["K" if name == "keys" else "Q"]))
        names = ("values", "pattern", "out") if self.cfg.uniform_attn else ("values", "scores", "pattern", "out")
        if not any(self._point(x).active for x in names):
            return None
        raw = at(tab["values"])
        values = self._point("values")(raw)
        changed = values is not raw
        if self.cfg.uniform_attn:
            A = (visible / visible.sum(-1, keepdim=True).clamp_min(1)).to(values.dtype)[..., :, None].expand(E, B, N, N)
        else:
            S = self._scores(tab["S"], tokens, visible)
            seen_S = self._point("scores")(S)
            A = _column_softmax(seen_S, masked)
            changed |= seen_S is not S
        seen = self._point("pattern")(A)
        raw = seen.transpose(-1, -2) @ values  # column j: Σ_i A_ij (W^V z_i + b^V)
        out = self._point("out")(raw)
        changed |= seen is not A or out is not raw
        return out if changed else None

    # ------------------------------------------------------------------------------------------
    def embedding_gram(self) -> torch.Tensor:
        """``W^Eᵀ W^E`` of every member, ``(E, V, V)`` (Thm. 1, Fig. 1), detached."""
        W = self.W_E.detach()
        return W.transpose(1, 2) @ W

    def value_matrix(self) -> torch.Tensor:
        """``W^V`` of every member, ``(E, d, d)`` (Thms. 2-5, Figs. 2, 6, 9, 10), detached."""
        return self.W_V.detach().clone()

    def norms(self) -> dict[str, torch.Tensor]:
        """Frobenius norms ``‖W^K‖, ‖W^Q‖, ‖W^V‖`` per member, each ``(E,)`` (the two-stage dynamics, §5.1)."""
        return {n: getattr(self, n).detach().flatten(1).norm(dim=1) for n in ("W_K", "W_Q", "W_V")}

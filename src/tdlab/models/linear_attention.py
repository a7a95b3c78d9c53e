"""Linear self-attention (LSA) and linearised cross-attention stacks (LCA_T), ensemble-first.

Seed paper: Barnfield, Sen & Sur, "Multi-layer cross-attention is provably optimal for
multi-modal in-context learning" (arXiv:2602.04872), Secs. 4-5, Apps. C, F, G, H.

Layout. The paper writes tokens as columns (``X in R^{d x L}``); here tokens are rows, and every
tensor has a leading ensemble-member axis: ``X`` is (E, N, L, d), ``y`` (E, N, L), ``x_query``
(E, N, d); predictions are (E, N). Inputs without the member axis ((N, L, d), (N, L), (N, d)) are
shared by all members. Every parameter carries the member axis first, and member ``i`` of a model
built with ``seeds`` equals a model built with ``seeds=[seeds[i]]``.

Readout (Eqs. 4.2, 5.5): with the embedding ``E_F = [[F, x_q], [y^T, 0]]`` of size
(d+1) x (L+1), the prediction is the bottom-right entry of ``E_F + W^PV E_F (E_F^T W^KQ E_F / L)``.
The skip term contributes 0 there, so ``y_hat = e_{d+1}^T W^PV E_F E_F^T W^KQ E_F e_{L+1} / L``.
With the App. C.1 matrices (``W^PV = e_{d+1} e_{d+1}^T``, ``W^KQ = diag(I_d, 0)``) this is
``y^T F^T x_q / L`` (Lemma C.1).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Literal

import torch
import torch.nn.functional as nnf
from torch import Tensor, nn

from tdlab.models.ensemble import EnsembleModel
from tdlab.models.hooks import HookPoint

__all__ = ["LCA", "LSA", "ReadoutPoints", "c1_readout_weights", "lsa_readout", "per_prompt_reference"]

Parametrization = Literal["one", "two", "untied", "diagonal", "full"]

LN_EPS = 1e-5


def c1_readout_weights(d: int, dtype: torch.dtype = torch.float32) -> tuple[Tensor, Tensor]:
    """The App. C.1 readout ``W^PV = [[0, 0], [0, 1]]``, ``W^KQ = [[I_d, 0], [0, 0]]``, each (d+1, d+1)."""
    w_pv = torch.zeros(d + 1, d + 1, dtype=dtype)
    w_pv[d, d] = 1.0
    w_kq = torch.zeros(d + 1, d + 1, dtype=dtype)
    w_kq[:d, :d] = torch.eye(d, dtype=dtype)
    return w_pv, w_kq


class ReadoutPoints(nn.Module):
    """Hook points of the LSA readout (no parameters): ``hook_scores``, the context tokens' attention scores
    ``E_F^T k`` (E, N, L), and ``hook_values``, their values (E, N, L) (the query token's terms are not hooked)."""

    def __init__(self) -> None:
        super().__init__()
        self.hook_scores = HookPoint()
        self.hook_values = HookPoint()


def lsa_readout(
    F: Tensor, y: Tensor, x_query: Tensor, w_pv: Tensor, w_kq: Tensor, points: ReadoutPoints | None = None
) -> Tensor:
    """Bottom-right entry of ``LSA(E_F)`` (Eq. 4.2 on ``E_X``; Eq. 5.5 on ``E_F``), without forming E.

    Args:
        F: (E, N, L, d) context embedding (``X`` for the plain LSA of Sec. 4); y: (E, N, L);
        x_query: (E, N, d); w_pv, w_kq: (E, d+1, d+1); points: a model's readout hook points.

    Returns:
        (E, N) predictions ``e_{d+1}^T W^PV E_F (E_F^T W^KQ E_F / L) e_{L+1}``.
    """
    d, L = x_query.shape[-1], F.shape[-2]
    # Query column of E_F is [x_q; 0]:  k = W^KQ [x_q; 0],  (E, N, d+1)
    k = torch.einsum("eij,enj->eni", w_kq[..., :, :d], x_query)
    # Attention scores E_F^T k: context tokens [f_i; y_i]^T k, query token x_q^T k[:d]
    s_ctx = torch.einsum("enld,end->enl", F, k[..., :d]) + y * k[..., d:]
    s_q = (x_query * k[..., :d]).sum(-1)
    # Values: last row of W^PV applied to each column of E_F
    p = w_pv[:, None, d, :]  # (E, 1, d+1)
    v_ctx = torch.einsum("enld,ed->enl", F, p[:, 0, :d]) + y * p[..., d:]
    v_q = (x_query * p[..., :d]).sum(-1)
    if points is not None:
        s_ctx, v_ctx = points.hook_scores(s_ctx), points.hook_values(v_ctx)
    return ((v_ctx * s_ctx).sum(-1) + v_q * s_q) / L


def _with_member_axis(X: Tensor, y: Tensor, x_query: Tensor, E: int) -> tuple[Tensor, Tensor, Tensor]:
    """Check shapes; data without a member axis (or with one of size 1) is shared by the E members."""
    if X.dim() == 3:  # (N, L, d) -> (1, N, L, d)
        X, y, x_query = X[None], y[None], x_query[None]
    if X.dim() != 4 or y.shape != X.shape[:-1] or x_query.shape != X.shape[:2] + X.shape[-1:]:
        raise ValueError(f"expected X (E,N,L,d), y (E,N,L), x_query (E,N,d); got {X.shape}, {y.shape}, {x_query.shape}")
    if X.shape[0] not in (1, E):
        raise ValueError(f"data has {X.shape[0]} members, model has {E}")
    return X.expand(E, *X.shape[1:]), y.expand(E, *y.shape[1:]), x_query.expand(E, *x_query.shape[1:])


def _right_apply(w: Tensor, z: Tensor) -> Tensor:
    """``z W^T`` for ``z`` (E|1, N|1, rows, d) with d features last, and per-member ``W`` given as a scalar (E,),
    the diagonal of a diagonal matrix (E, d), or a full matrix (E, d, d)."""
    if w.dim() == 1:
        return z * w[:, None, None, None]
    if w.dim() == 2:
        return z * w[:, None, None, :]
    return z @ w.transpose(-1, -2)[:, None]


def _as_matrix(w: Tensor, d: int) -> Tensor:
    """One member's weight (scalar, diagonal or (d, d)) as a (d, d) matrix."""
    if w.dim() == 0:
        return w * torch.eye(d, dtype=w.dtype, device=w.device)
    return torch.diag(w) if w.dim() == 1 else w


def _layer_norm(z: Tensor) -> Tensor:
    """Per-token LayerNorm over the d features, without affine parameters."""
    return nnf.layer_norm(z, z.shape[-1:], eps=LN_EPS)


class LSA(EnsembleModel):
    """Single-layer linear self-attention read out at (d+1, L+1): Sec. 4, Eq. (4.2).

    Parameters ``W_PV``, ``W_KQ``: (E, d+1, d+1), initialised at the App. C.1 matrices plus
    ``sigma_init`` times a standard Gaussian drawn from ``torch.Generator().manual_seed(seeds[e])``
    (``W_PV`` noise first). Thm 4.1: no value of these parameters in-context learns the multi-modal task.

    Args:
        d: covariate dimension. seeds: one seed per member (E = len(seeds)).
        sigma_init: std of the Gaussian perturbation of the C.1 initialisation.

    Hook points: ``readout.hook_scores``, ``readout.hook_values`` (:class:`ReadoutPoints`), ``hook_out`` (E, N).
    """

    def __init__(
        self,
        d: int,
        seeds: Sequence[int],
        *,
        sigma_init: float = 0.0,
        dtype: torch.dtype = torch.float32,
        device: str | torch.device | None = None,
    ):
        super().__init__()
        self._set_members(seeds)
        self.d = d
        base = c1_readout_weights(d, torch.float32)
        noise = [[torch.randn(d + 1, d + 1, generator=g) for _ in base] for g in self.member_generators(None)]
        self.W_PV, self.W_KQ = (
            nn.Parameter(torch.stack([b + sigma_init * n[k] for n in noise]).to(device=device, dtype=dtype))
            for k, b in enumerate(base)
        )
        self.readout = ReadoutPoints()
        self.hook_out = HookPoint()

    def forward(self, X: Tensor, y: Tensor, x_query: Tensor) -> Tensor:
        """X (E, N, L, d), y (E, N, L), x_query (E, N, d) -> predictions (E, N)."""
        X, y, x_query = _with_member_axis(X, y, x_query, self.n_members)
        return self.hook_out(lsa_readout(X, y, x_query, self.W_PV, self.W_KQ, self.readout))


class _LayerPoints(nn.Module):
    """One LCA layer's hook points (no parameters): ``hook_attn_out``, ``hook_resid_post``."""

    def __init__(self) -> None:
        super().__init__()
        self.hook_attn_out = HookPoint()
        self.hook_resid_post = HookPoint()


class LCA(EnsembleModel):
    """Depth-T linearised cross-attention stack LCA_T followed by an LSA readout: Eqs. (5.1)-(5.5).

    Recurrence (Eq. 5.2), ``F_0 = 0``, for t = 1..T, in the paper's column layout::

        F_t = F_{t-1} + S_{t-1} + A_{t-1},     S_{t-1} = W^S_{t-1} X                     (re-injection)
        A_{t-1} = V K^T Q / L,  V = W^V_{t-1} X,  K = X,  Q = F_{t-1}       (Eqs. 5.3-5.4, softmax -> id)
              = W^V_{t-1} Lambda_hat F_{t-1},   Lambda_hat = X X^T / L

    ``W^K = W^Q = I`` are frozen as in the paper. The prediction is the LSA readout on
    ``E_F = [[F_T, x_q], [y^T, 0]]`` (Eq. 5.5).

    Args:
        d: covariate dimension.
        depth: number of CA layers ``T``.
        seeds: one seed per member; used for the ``sigma_init`` perturbation of the initialisation.
        param: how ``(W^S_t, W^V_t)`` are parametrised (parameters ``alpha`` holds ``W^S``, ``beta`` ``W^V``):
            ``"one"``: tied ``W^S = -W^V = alpha I``, alpha (E,) (Sec. 5, Thm 6.2);
            ``"two"``: tied ``W^S = alpha I``, ``W^V = beta I``, alpha, beta (E,) (Sec. 5, Thm 6.3);
            ``"untied"``: ``(alpha_t I, beta_t I)``, alpha, beta (E, T) (Fig. 3, App. H);
            ``"diagonal"``: ``(diag(alpha_t), diag(beta_t))``, alpha, beta (E, T, d) (Fig. 3, App. H,
            which write ``b_t`` for both vectors; we read them as two independent vectors);
            ``"full"``: unconstrained, alpha, beta (E, T, d, d) (Fig. 3, App. H).
        alpha0: initial value of the ``W^S`` scalar (matrices: times I). App. H: ``alpha*``.
        beta0: the same for ``W^V``; ``None`` means ``-alpha0``. App. H: ``-alpha*``.
        sigma_init: std of the Gaussian added to the initialisation (App. H: 0.1; the appendix says
            "noise variance" but its formulas multiply a standard Gaussian by sigma_init, which we
            follow). ``None``: 0.1 for untied/diagonal/full, 0 for the tied forms. Draw order per
            member: ``alpha`` noise, then ``beta`` noise.
        attention: ``"cross"`` (CA between F_t and X, Eqs. 5.3-5.4) or ``"self"`` (LSA on F_t,
            ``A = W^V F F^T F / L``: the "deep LSA" of App. G, Eq. G.2).
        injection: keep ``S_t`` (Eq. 5.2); ``False`` is the no-re-injection ablation (Eq. G.1).
            With ``f0="zeros"`` and no injection ``F_t`` stays 0, so the model predicts 0 exactly.
            With ``param="one"`` the single parameter still enters as ``W^V = -alpha I`` (so the
            ``alpha`` of Eq. G.2, ``V = alpha F``, is our ``-alpha``).
        pre_ln: pre-LayerNorm variant (Fig. 4, App. F). The paper only says LN is "added between
            the LCA layers"; we follow App. I: the query stream and the attended sequence are
            normalised per token (``Q = LN(F_{t-1})``, ``K = V-input = LN(X)``; LN(F) throughout for
            ``attention="self"``) and the re-injection uses the raw ``X``. No affine LN parameters.
        readout: ``"frozen"`` keeps the App. C.1 ``W^PV, W^KQ`` fixed (as in the theory, Lemma C.1);
            ``"learned"`` makes them parameters (E, d+1, d+1) initialised there.
        f0: initial state, ``"zeros"`` (``F_0 = 0``, Eq. 5.2) or ``"x"`` (``F_0 = X``; not in the
            paper, offered because the no-injection ablation is degenerate from ``F_0 = 0``).

    Hook points, on the state the recurrence runs on (``F_t`` (E, N, L, d), or, for cross-attention without
    LayerNorm, its coefficients ``P_t`` (E, N, d, d) with ``F_t = X P_t``, see :meth:`forward`): per layer
    ``blocks.{t}.hook_attn_out`` (``A_t``) and ``blocks.{t}.hook_resid_post`` (``F_{t+1}``); then ``hook_final``
    ``F_T`` (E, N, L, d), the readout's ``readout.hook_scores`` / ``readout.hook_values`` and ``hook_out`` (E, N).
    """

    # Set in __init__ (by name, per ``param``): declared here so that they read as what they are, not as
    # whatever nn.Module.__getattr__ may return.
    alpha: nn.Parameter
    beta: nn.Parameter  # every param but "one"
    W_PV: Tensor  # a parameter (readout="learned") or a buffer
    W_KQ: Tensor

    def __init__(
        self,
        d: int,
        depth: int,
        seeds: Sequence[int],
        *,
        param: Parametrization = "one",
        alpha0: float = 0.0,
        beta0: float | None = None,
        sigma_init: float | None = None,
        attention: Literal["cross", "self"] = "cross",
        injection: bool = True,
        pre_ln: bool = False,
        readout: Literal["frozen", "learned"] = "frozen",
        f0: Literal["zeros", "x"] = "zeros",
        dtype: torch.dtype = torch.float32,
        device: str | torch.device | None = None,
    ):
        super().__init__()
        E = self._set_members(seeds)
        if param not in ("one", "two", "untied", "diagonal", "full"):
            raise ValueError(f"unknown param {param!r}")
        if attention not in ("cross", "self") or readout not in ("frozen", "learned") or f0 not in ("zeros", "x"):
            raise ValueError(f"bad option: attention={attention!r}, readout={readout!r}, f0={f0!r}")
        if depth < 1:
            raise ValueError(f"depth must be >= 1, got {depth}")
        self.d, self.depth, self.param = d, depth, param
        self.attention, self.injection, self.pre_ln, self.f0 = attention, injection, pre_ln, f0
        beta0 = -alpha0 if beta0 is None else beta0
        if sigma_init is None:
            sigma_init = 0.0 if param in ("one", "two") else 0.1

        shape = {"one": (), "two": (), "untied": (depth,), "diagonal": (depth, d), "full": (depth, d, d)}[param]

        def centre(v: float) -> Tensor:
            return v * torch.eye(d).expand(shape) if param == "full" else torch.full(shape, v)

        gens = self.member_generators(None)
        names = ("alpha",) if param == "one" else ("alpha", "beta")
        draws = [[torch.randn(shape, generator=g) for _ in names] for g in gens]  # per member, in order
        for k, (name, v0) in enumerate(zip(names, (alpha0, beta0), strict=False)):
            value = torch.stack([centre(v0) + sigma_init * draw[k] for draw in draws])
            setattr(self, name, nn.Parameter(value.to(device=device, dtype=dtype)))

        w_pv, w_kq = (w.expand(len(gens), d + 1, d + 1).to(device=device, dtype=dtype) for w in c1_readout_weights(d))
        if readout == "learned":
            self.W_PV, self.W_KQ = nn.Parameter(w_pv.clone()), nn.Parameter(w_kq.clone())
        else:
            self.register_buffer("W_PV", w_pv.clone(), persistent=False)
            self.register_buffer("W_KQ", w_kq.clone(), persistent=False)
        self.blocks = nn.ModuleList(_LayerPoints() for _ in range(depth))
        self.hook_final = HookPoint()
        self.readout = ReadoutPoints()
        self.hook_out = HookPoint()
        assert self.alpha.shape[0] == E

    def layer_weights(self, t: int) -> tuple[Tensor, Tensor]:
        """``(W^S_t, W^V_t)`` of layer t (0-based) for all members: each (E,), (E, d) or (E, d, d)."""
        if self.param == "one":
            return self.alpha, -self.alpha  # W^S = -W^V = alpha I
        if self.param == "two":
            return self.alpha, self.beta
        return self.alpha[:, t], self.beta[:, t]

    def scalar_projections(self) -> tuple[Tensor, Tensor]:
        """Normalised traces ``d^{-1} tr(W^S_t)``, ``d^{-1} tr(W^V_t)`` (Fig. 3 left): each (E, T)."""

        def proj(w: Tensor) -> Tensor:
            return w if w.dim() == 1 else (w.mean(-1) if w.dim() == 2 else w.diagonal(dim1=-2, dim2=-1).mean(-1))

        per_layer = [tuple(proj(w) for w in self.layer_weights(t)) for t in range(self.depth)]
        return tuple(torch.stack([p[k] for p in per_layer], dim=-1) for k in range(2))  # type: ignore[return-value]

    def forward(
        self, X: Tensor, y: Tensor, x_query: Tensor, *, return_intermediates: bool = False
    ) -> Tensor | tuple[Tensor, dict[str, list[Tensor]]]:
        """Predict the query responses.

        Args:
            X: (E, N, L, d) context covariates; y: (E, N, L); x_query: (E, N, d).
            return_intermediates: also return ``{"F": [F_0, ..., F_T]}``, each (E, N, L, d), e.g. for
                the whitening error ``||X F_t^T / L - I||_F / sqrt(d)`` (Fig. 3 right).

        Returns:
            (E, N) predictions, or ``(predictions, intermediates)``.
        """
        X, y, x_query = _with_member_axis(X, y, x_query, self.n_members)
        E, N, L, d = X.shape
        X_kv = _layer_norm(X) if self.pre_ln else X
        gram_x = X_kv.transpose(-1, -2) @ X_kv / L  # Lambda_hat = X X^T / L (App. A.3), (E, N, d, d)
        # Without LayerNorm, cross-attention only ever right-multiplies the rows of X by d x d
        # matrices, so F_t = X P_t and the recurrence can run on the coefficients P_t (E, N, d, d),
        # with X replaced by I_d: O(N d^3) per layer instead of O(N L d^2). Otherwise run on F_t itself.
        on_coefficients = self.attention == "cross" and not self.pre_ln
        basis = torch.eye(d, dtype=X.dtype, device=X.device).expand(1, 1, d, d) if on_coefficients else X
        state = basis.expand(E, N, *basis.shape[-2:]) if self.f0 == "x" else X.new_zeros(E, N, *basis.shape[-2:])
        states = [state]  # F_0 (Eq. 5.2: F_0 = 0), or its coefficients P_0
        for t in range(self.depth):
            w_s, w_v = self.layer_weights(t)
            Q = _layer_norm(state) if self.pre_ln else state  # Q_{t-1} = W^Q F_{t-1}, W^Q = I (Eq. 5.4)
            if self.attention == "cross":
                # A_{t-1} = V K^T Q / L = W^V X X^T F_{t-1} / L; rows: F Lambda_hat W^V^T (Eqs. 5.3-5.5)
                A = _right_apply(w_v, Q @ gram_x)
            else:
                # deep LSA (Eq. G.2): V = W^V F, K = Q = F: A = W^V F F^T F / L
                A = _right_apply(w_v, Q @ (Q.transpose(-1, -2) @ Q / L))
            points = self.blocks[t]
            assert isinstance(points, _LayerPoints)
            state = state + points.hook_attn_out(A)  # skip connection of Eq. (5.2)
            if self.injection:
                state = state + _right_apply(w_s, basis)  # S_{t-1} = W^S X, re-injection of the raw covariates
            state = points.hook_resid_post(state)
            states.append(state)
        F = self.hook_final(X @ state if on_coefficients else state)
        y_hat = self.hook_out(lsa_readout(F, y, x_query, self.W_PV, self.W_KQ, self.readout))  # Eq. (5.5)
        if return_intermediates:
            return y_hat, {"F": [X @ P for P in states] if on_coefficients else states}
        return y_hat


def per_prompt_reference(model: LSA | LCA, X: Tensor, y: Tensor, x_query: Tensor) -> Tensor:
    """The same predictions as ``model(X, y, x_query)``, computed literally, one prompt at a time.

    Column layout and the paper's formulas verbatim: the embedding matrix ``E`` is built, the LSA
    of Eq. (4.2) is evaluated as a (d+1) x (L+1) matrix product, and the CA layers of Eqs.
    (5.2)-(5.4) use explicit ``W^S_t``, ``W^V_t`` matrices. Slow by design: an independent check
    for tests and the baseline of ``bench/bench_icl.py``. Differentiable.

    Args: as ``model.forward``. Returns: (E, N) predictions.
    """
    X, y, x_query = _with_member_axis(X, y, x_query, model.n_members)
    E, N, L, d = X.shape

    def col_ln(M: Tensor) -> Tensor:  # LayerNorm of each column (token) over its d features
        mu = M.mean(0, keepdim=True)
        return (M - mu) / torch.sqrt(((M - mu) ** 2).mean(0, keepdim=True) + LN_EPS)

    rows = []
    for e in range(E):
        preds = []
        for n in range(N):
            Xc = X[e, n].T  # (d, L)
            if isinstance(model, LCA):
                Xk = col_ln(Xc) if model.pre_ln else Xc
                F = Xc.clone() if model.f0 == "x" else torch.zeros_like(Xc)
                for t in range(model.depth):
                    w_s, w_v = (_as_matrix(w[e], d) for w in model.layer_weights(t))
                    Q = col_ln(F) if model.pre_ln else F
                    V, K = (w_v @ Xk, Xk) if model.attention == "cross" else (w_v @ Q, Q)
                    A = V @ (K.T @ Q) / L  # Eq. (5.3) with softmax replaced by the identity
                    F = F + A + (w_s @ Xc if model.injection else 0.0)  # Eq. (5.2)
            else:
                F = Xc
            Emb = torch.cat([torch.cat([F, x_query[e, n][:, None]], 1), torch.cat([y[e, n], y.new_zeros(1)])[None]], 0)
            out = Emb + model.W_PV[e] @ Emb @ (Emb.T @ model.W_KQ[e] @ Emb / L)  # Eq. (4.2)
            preds.append(out[d, L])
        rows.append(torch.stack(preds))
    return torch.stack(rows)

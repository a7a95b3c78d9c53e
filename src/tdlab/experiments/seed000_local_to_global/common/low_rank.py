"""What ``markov-rank`` measures and how it starts: the Fig. 6 rank-one initialisation and the
low-rank structure of App. C, on stored parameters (seed 000, App. A.3.1, App. C).

* :func:`rank_one_init_` — "we randomly initialize the weight parameters as rank-one matrices and the
  embeddings on the hypercube {±1}^d" (App. A.3.1, Fig. 6): the seed gives no formula; the init is
  built from the structure App. C reports at the optima (Eqs. (12)-(15)), with random factors.
* :func:`weight_matrices`, :func:`app_c_structure` — the Sec. 2 model's matrices and App. C's statements
  about an optimum, per member (σ₂/σ₁ and :func:`tdlab.probes.spectrum.embedding_alignment`, the alignment
  of singular vectors with the embedding e).
* :func:`bias_step_excess` — Sec. 3's "one additional [bias] step": how far b is from its optimum
  given the other parameters, before and after one gradient step on b alone.
* :class:`TrajectoryProbe` — σ₂/σ₁ and alignments recorded during training (a forward pre-hook that
  reads the weights; no forward code is touched).

Every function takes stacked parameters with a leading member axis ``E`` and works per member.
"""

from __future__ import annotations

import numpy as np
import torch
from pydantic import Field

from tdlab.config import Config
from tdlab.models.gpt import GPT, GPTConfig
from tdlab.probes.spectrum import abs_cosine, embedding_alignment, hypercube_spread, singular_values, sv_ratio
from tdlab.seeding import generators

# Weight matrices of the Sec. 2 model (single layer), by the seed's names -> state-dict keys, (out, in).
MATRICES: dict[str, str] = {
    "W_Q": "blocks.0.attn.W_Q.weight",
    "W_K": "blocks.0.attn.W_K.weight",
    "W_V": "blocks.0.attn.W_V.weight",
    "W_O": "blocks.0.attn.W_O.weight",
    "W_1": "blocks.0.mlp.W_1.weight",
    "W_2": "blocks.0.mlp.W_2.weight",
}
CLAIMED = ("W_V", "W_1")  # the two matrices Figs. 3 and 6 show and the text's claims are about
_RANK_ONE_STREAM = "init-rank-one"  # random stream of the Fig. 6 init (per member, independent of "init")


class RankOneInitConfig(Config):
    """Scales of the Fig. 6 rank-one init (:func:`rank_one_init_`). Not stated by the seed ("randomly
    initialize the weight parameters as rank-one matrices and the embeddings on the hypercube"): ours
    are our choices, |0.1 N(0,1)| for the embedding and feed-forward scales, N(0, 0.02²) entries for the
    attention factors. They are not the authors' public code's init either: its low-rank init leaves
    W_Q and W_K full-rank Gaussian, while the seed's text (and ours) makes every weight matrix rank one."""

    e_std: float = Field(
        0.1, gt=0.0, le=10.0
    )  # c ~ |N(0, e_std²)|: e = c·α, p_n = -(c/2)·α (App. C Eq. (12), App. D p = e/2)
    w_std: float = Field(0.1, gt=0.0, le=10.0)  # s ~ |N(0, w_std²)|: W_1 = s·ξ α^T, ξ ∈ {±1}^{4d} (App. C Eq. (14))
    attn_std: float = Field(0.02, gt=0.0, le=10.0)  # std of the free factor of W_Q, W_K, W_V, W_O


# ----------------------------------------------------------------------------------------------
# The Fig. 6 initialisation


def rank_one_init_(model: GPT, cfg: RankOneInitConfig) -> GPT:
    """Overwrite ``model``'s embeddings and weight matrices with a random rank-one init (Fig. 6).

    Per member, from its own seed (stream ``init-rank-one``), with ``α`` uniform on ``{±1}^d``:

    * ``e = c·α`` and ``p_n = -(c/2)·α`` for every position (App. C Eq. (12), App. D: ``p = e/2``),
      ``c ~ |N(0, e_std²)|`` — "the embeddings on the hypercube {±1}^d";
    * ``W_1 = s·ξ α^T`` with ``ξ`` uniform on ``{±1}^{4d}``, ``s ~ |N(0, w_std²)|`` (Eq. (14)), and
      ``W_2 = W_1^T`` (Eq. (15), the ``p + q < 1`` structure);
    * ``W_Q = g_Q α^T``, ``W_K = g_K α^T`` (so ``W_Q^T W_K ∝ α α^T``, App. C), ``W_V = g_V α^T``
      (α is "the row in W_V", App. A.3.1: W_V reads the embedding direction) and ``W_O = α g_O^T``
      (writes along α; ``W_O W_V ∝ α α^T``), ``g_* ~ N(0, attn_std² I_d)``;
    * the bias ``b`` keeps the model's standard draw.

    Every weight matrix is then exactly rank one with the embedding direction as a factor, and stays
    so under training: every token and positional embedding lies along α, so every gradient of a
    matrix that reads them is ``(·) α^T``, every gradient of one that writes the residual stream is
    ``α (·)^T``, and SGD's update, or AdamW's elementwise one (α ∈ {±1}^d, so its second moments do not
    depend on the α side), keeps that form. Fig. 6's "stays rank one" therefore holds by construction
    of this init (``markov-rank`` checks it as a sanity check, to round-off). The side matters: with
    ``W_V = α g_V^T`` (α on the output side) the gradient ``(·) α^T`` adds a second direction. The
    scales are ours (:class:`RankOneInitConfig`). Returns ``model`` (modified in place under
    ``torch.no_grad``).
    """
    mc = model.cfg
    blk = model.blocks[0]
    if (
        mc.arch != "sec2"
        or mc.layers != 1
        or not mc.tie_weights
        or model.wpe is None
        or mc.heads != 1
        or blk.attn.W_O is None
        or blk.mlp is None
    ):
        raise ValueError(
            "rank_one_init_ needs the Sec. 2 single-layer model with tied weights, absolute positions, "
            "the attention output W^O and the MLP"
        )
    d, r = mc.d, mc.mlp_ratio * mc.d
    with torch.no_grad():
        for m, g in enumerate(generators(model.seeds, _RANK_ONE_STREAM)):

            def sign(n: int, g: torch.Generator = g) -> torch.Tensor:
                return torch.randint(0, 2, (n,), generator=g).double() * 2 - 1

            def normal(n: int, s: float, g: torch.Generator = g) -> torch.Tensor:
                return torch.randn(n, generator=g, dtype=torch.float64) * s

            def put(prm: torch.Tensor, val: torch.Tensor, m: int = m) -> None:
                prm[m].copy_(val.to(model.e.device, model.e.dtype))

            alpha, xi = sign(d), sign(r)
            c = abs(float(normal(1, cfg.e_std)))
            s = abs(float(normal(1, cfg.w_std)))
            g_q, g_k, g_v, g_o = (normal(d, cfg.attn_std) for _ in range(4))
            put(model.e, c * alpha)
            put(model.wpe, (-0.5 * c * alpha).expand(model.wpe.shape[1], d))
            put(blk.attn.W_Q.weight, torch.outer(g_q, alpha))
            put(blk.attn.W_K.weight, torch.outer(g_k, alpha))
            put(blk.attn.W_V.weight, torch.outer(g_v, alpha))
            put(blk.attn.W_O.weight, torch.outer(alpha, g_o))
            w1 = s * torch.outer(xi, alpha)
            put(blk.mlp.W_1.weight, w1)
            put(blk.mlp.W_2.weight, w1.T)
    return model


# ----------------------------------------------------------------------------------------------
# Measurements (plain functions of stored parameters; member axis first)


def weight_matrices(state: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """The six weight matrices (seed names) of a stacked state, each ``(E, out, in)``, plus the
    product ``W_OW_V = W_O W_V`` (App. C states its structure)."""
    mats = {name: torch.as_tensor(state[key]).double() for name, key in MATRICES.items()}
    mats["W_OW_V"] = mats["W_O"] @ mats["W_V"]
    return mats


def app_c_structure(state: dict[str, torch.Tensor]) -> dict[str, np.ndarray]:
    """App. C's statements about an optimum, measured on a stacked state (member axis first).

    With ``α = e/|e|`` (App. C: ``e = e·α``) and ``p̄ = mean_n p_n``:

    * ``position_cos``: ``cos(p̄, e)`` (App. C: -1, ``p_n = -p·α``);
    * ``position_ratio``: ``p/e = -<p̄, e>/|e|²`` (App. C: ≈ 1/2, "p ≈ e/2");
    * ``position_spread``: ``sqrt(mean_n |p_n - p̄|²)/|p̄|`` (App. C: 0, "constant across positions");
    * ``w2_w1t_cos``: signed Frobenius cosine of ``W_2`` and ``W_1^T`` (Eq. 15: +1; App. D: -1 for p+q>1);
    * ``wo_wv_ratio``, ``wo_wv_left_cos``: σ₂/σ₁ of ``W_O W_V`` and |cos| of its left singular vector
      with e (``W_O W_V = α v^T``);
    * ``attention_gain``: ``α^T W_O W_V α = <v, α>`` (App. C: ≈ 0, "hence y_n = x_n");
    * ``qk_ratio``, ``qk_left_cos``, ``qk_right_cos``: the same for ``W_Q^T W_K = (q²d) α α^T``.

    Returns: dict of ``(E,)`` float64 numpy arrays.
    """
    mats = weight_matrices(state)
    e = torch.as_tensor(state["e"]).double()
    alpha = e / e.norm(dim=1, keepdim=True)
    wpe = torch.as_tensor(state["wpe"]).double()
    pbar = wpe.mean(1)
    w1, w2 = mats["W_1"], mats["W_2"]
    ovs = mats["W_OW_V"]
    qk = mats["W_Q"].transpose(1, 2) @ mats["W_K"]
    out = {
        "position_cos": torch.nn.functional.cosine_similarity(pbar, e, dim=1),
        "position_ratio": -(pbar * e).sum(1) / (e * e).sum(1),
        "position_spread": (wpe - pbar[:, None]).pow(2).sum(2).mean(1).sqrt() / pbar.norm(dim=1),
        "w2_w1t_cos": (w2 * w1.transpose(1, 2)).sum((1, 2)) / (w2.flatten(1).norm(dim=1) * w1.flatten(1).norm(dim=1)),
        "wo_wv_ratio": sv_ratio(ovs),
        "wo_wv_left_cos": embedding_alignment(ovs, e)["left"],
        "attention_gain": torch.einsum("ei,eij,ej->e", alpha, ovs, alpha),
        "qk_ratio": sv_ratio(qk),
    }
    al = embedding_alignment(qk, e)
    out["qk_left_cos"], out["qk_right_cos"] = al["left"], al["right"]
    return {k: v.numpy() for k, v in out.items()}


def bias_step_excess(
    model_cfg: GPTConfig, state: dict[str, torch.Tensor], tokens: torch.Tensor, lr: float
) -> dict[str, np.ndarray]:
    """How far the output bias b is from its optimum given the other parameters, before and after one
    gradient step on b alone (Sec. 3: "one additional step is usually sufficient").

    On next-token prediction of ``tokens`` with the logits' bias-free part ``s`` (the model with b = 0):
    ``L(b) = mean softplus(-(2y-1)(s + b))``, ``b* = argmin L`` (Newton; L is convex in b),
    ``b1 = b - lr L'(b)``.

    Args:
        model_cfg: the Sec. 2 model; state: stacked parameters ``(E, ...)``; tokens: ``(E, B, T)``.
        lr: the extra step's size.
    Returns: dict of ``(E,)`` arrays: ``excess_before = L(b) - L(b*)``, ``excess_after = L(b1) - L(b*)``
    (nats), ``b``, ``b_star``, ``b_after``.
    """
    E = tokens.shape[0]
    model = GPT(model_cfg, list(range(E)))
    model.load_state_dict({k: torch.as_tensor(v) for k, v in state.items()})
    assert model.b is not None  # the Sec. 2 model's output bias
    b = model.b.detach().double().clone()
    with torch.no_grad():
        model.b.zero_()
        s = model(tokens[:, :, :-1])[..., 1].double()  # bias-free logit of P(x_{n+1} = 1)
    sign = 2.0 * tokens[:, :, 1:].double() - 1.0

    def L(bb: torch.Tensor) -> torch.Tensor:
        return torch.nn.functional.softplus(-sign * (s + bb[:, None, None])).mean((1, 2))

    def dL(bb: torch.Tensor) -> torch.Tensor:
        return (torch.sigmoid(s + bb[:, None, None]) - (sign + 1) / 2).mean((1, 2))

    bs = b.clone()
    for _ in range(100):  # Newton on a 1-D convex function; damped by the curvature floor
        sig = torch.sigmoid(s + bs[:, None, None])
        h = (sig * (1 - sig)).mean((1, 2)).clamp_min(1e-12)
        bs = bs - (dL(bs) / h).clamp(-5.0, 5.0)
    b1 = b - lr * dL(b)
    low = L(bs)
    return {
        "excess_before": (L(b) - low).numpy(),
        "excess_after": (L(b1) - low).numpy(),
        "b": b.numpy(),
        "b_star": bs.numpy(),
        "b_after": b1.numpy(),
    }


def _probe_rows(model: GPT, step: int, offset: int) -> list[tuple[int, int, str, float]]:
    """Metrics rows of one trajectory snapshot: sigma2/sigma1 of every matrix, |cos| with e of the
    claimed ones, and the embedding's hypercube spread."""
    state = {k: v.detach() for k, v in model.state_dict().items()}
    mats = weight_matrices(state)
    e = state["e"].double()
    rows: list[tuple[int, int, str, float]] = []
    for name, w in mats.items():
        rows += [(step, offset + i, f"sv_ratio/{name}", float(v)) for i, v in enumerate(sv_ratio(w))]
    for name in CLAIMED:
        best = embedding_alignment(mats[name], e)["best"]
        rows += [(step, offset + i, f"emb_cos/{name}", float(v)) for i, v in enumerate(best)]
    rows += [(step, offset + i, "emb_spread", float(v)) for i, v in enumerate(hypercube_spread(e))]
    return rows


class TrajectoryProbe:
    """Forward pre-hook: before the training forward of step ``k + 1`` (weights after ``k``
    updates), every ``every`` steps, records :func:`_probe_rows`. Evaluation forwards (``eval()``
    mode) are not counted."""

    def __init__(self, every: int, offset: int, members: int) -> None:
        self.every, self.offset, self.members, self.seen = every, offset, members, 0
        self.rows: list[tuple[int, int, str, float]] = []

    def __call__(self, module: GPT, args: tuple) -> None:
        if not module.training:
            return
        if self.seen % self.every == 0:
            self.rows += _probe_rows(module, self.seen, self.offset)
        self.seen += 1


def snapshot(state: dict[str, torch.Tensor]) -> dict[str, dict[str, np.ndarray]]:
    """Every per-matrix measurement of one stacked state: σ₂/σ₁, normalised singular values, singular
    values and |cos| of the singular vectors with e, for the six matrices and ``W_OW_V``; the
    embedding's hypercube spread, norm and the |cos| of the mean positional embedding with e
    (App. C: ``p_n = -p·α``). Every leaf is an ``(E, ...)`` array."""
    mats = weight_matrices(state)
    e = torch.as_tensor(state["e"]).double()
    out: dict[str, dict[str, np.ndarray]] = {}
    for name, w in mats.items():
        s = singular_values(w)
        row = {"sv_ratio": sv_ratio(w).numpy(), "sv_normalised": (s / s[:, :1]).numpy(), "sv": s.numpy()}
        row.update({f"cos_{k}": v.numpy() for k, v in embedding_alignment(w, e).items()})
        out[name] = row
    wpe = torch.as_tensor(state["wpe"]).double()
    out["embedding"] = {
        "spread": hypercube_spread(e).numpy(),
        "norm": e.norm(dim=1).numpy(),
        "cos_mean_position": abs_cosine(wpe.mean(1), e).numpy(),
    }
    return out

"""γ-initialisation ("initialisation rate"), seed 001 §3.4.

The seed: a trainable matrix ``W in R^{d1 x d2}`` (``d1`` the input, ``d2`` the output width, in
the paper's row-vector convention ``y = x W``) starts with ``W_ij ~ N(0, (d2^{-γ})^2)``; the larger
γ, the smaller the initialisation (γ = 0.5 is LeCun/He-like, γ > 0.5 counts as small). App. B.4
agrees (``W^emb`` std ``d_m^{-γ}``, ``W^Q`` std ``d_k^{-γ}``: output widths). The same group's public
code uses the *input* width for linear layers instead, so ``fan="in"`` is offered; ``fan="out"`` (the
paper) is the default.

Layouts. torch stores a linear map ``y = x W^T`` as ``weight (out, in)`` and tdlab's ensembles as
``(E, out, in)`` (:class:`tdlab.models.ensemble.EnsembleLinear`): that is ``layout="out_in"``, the
default here. An embedding table ``(vocab, d)`` maps a one-hot of width ``vocab`` (input) to ``d``
(output): the paper's ``W^emb in R^{d_vob x d_m}`` is stored as-is, i.e. ``layout="in_out"``, and its
output width is ``d_m`` — pass ``layout="in_out"`` for embedding and positional tables.

Stable API (other models import it):

* ``gamma_std(d_out, d_in, gamma, fan="out") -> float``
* ``gamma_normal_(w, gamma, fan="out", generators=None, layout="out_in") -> w``

Seed 000 (Local to Global) writes two structured starts into its Sec. 2 single-layer model
(:class:`tdlab.models.gpt.GPT` with ``arch="sec2"``), per member from the member's own seed:

* :func:`rank_one_init_` — Fig. 6's "randomly initialize the weight parameters as rank-one matrices and the
  embeddings on the hypercube {±1}^d" (App. A.3.1), built from App. C's structure (Eqs. (12)-(15));
* :func:`canonical_init_` — App. D's canonical point ``(e, w)`` mapped into the full model (App. A.3.2), and
  :func:`proposed_point`, A.3.2's proposed init read in those coordinates.

Seed 004 (Fig. 5, §8) starts the BERT-shaped encoder's attention near zero: :func:`near_zero_qkv_init_` redraws
``W^Q, W^K, W^V`` of every layer, per member from the member's own seed.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import TYPE_CHECKING, Literal, Protocol

import torch
from torch import Tensor

from tdlab.seeding import generators as member_generators

if TYPE_CHECKING:
    from tdlab.models.gpt import GPT, GPTConfig

__all__ = [
    "CANONICAL_ALPHA_STREAM",
    "NEAR_ZERO_QKV_STREAM",
    "RANK_ONE_STREAM",
    "Fan",
    "Layout",
    "RankOneScales",
    "canonical_init_",
    "gamma_normal_",
    "gamma_std",
    "near_zero_qkv_init_",
    "proposed_point",
    "rank_one_init_",
]

Fan = Literal["out", "in"]
Layout = Literal["out_in", "in_out"]


def gamma_std(d_out: int, d_in: int, gamma: float, fan: Fan = "out") -> float:
    """Standard deviation of a γ-initialised matrix entry (§3.4): ``d^{-γ}``.

    Args:
        d_out: output width (the paper's ``d2``).
        d_in: input width (the paper's ``d1``).
        gamma: initialisation rate γ (any real; γ > 0.5 is "small").
        fan: ``"out"`` (the paper: ``d = d_out``) or ``"in"`` (the group's code: ``d = d_in``).
    Returns:
        ``d^{-γ}`` as a float.
    """
    if fan not in ("out", "in"):
        raise ValueError(f"fan must be 'out' or 'in', got {fan!r}")
    d = d_out if fan == "out" else d_in
    if int(d) < 1:
        raise ValueError(f"width must be >= 1, got d_out={d_out}, d_in={d_in}")
    return float(d) ** (-float(gamma))


def gamma_normal_(
    w: Tensor,
    gamma: float | Sequence[float],
    fan: Fan = "out",
    generators: torch.Generator | Sequence[torch.Generator] | None = None,
    layout: Layout = "out_in",
) -> Tensor:
    """Fill ``w`` in place with ``N(0, gamma_std(d_out, d_in, γ, fan)^2)`` entries, per member.

    Args:
        w: one matrix ``(out, in)`` or an ensemble ``(E, out, in)`` (``layout="out_in"``, torch's
            Linear convention); with ``layout="in_out"`` the last two axes are ``(in, out)`` (an
            embedding table ``(vocab, d)``).
        gamma: one γ for every member, or one per member (length ``E``): a γ-sweep can be one
            ensemble.
        fan: which width sets the scale (see :func:`gamma_std`).
        generators: one generator per member (``E`` of them; for a 2-D ``w`` one generator or a
            list of one). Member ``e``'s entries come from ``generators[e]`` alone, so a member's
            draw does not depend on its ensemble mates. ``None`` uses torch's global generator.
        layout: ``"out_in"`` (default) or ``"in_out"``.
    Returns:
        ``w`` (filled in place, under ``torch.no_grad``).
    """
    if layout not in ("out_in", "in_out"):
        raise ValueError(f"layout must be 'out_in' or 'in_out', got {layout!r}")
    if w.dim() not in (2, 3):
        raise ValueError(f"w must be (out, in) or (E, out, in), got shape {tuple(w.shape)}")
    batch = w if w.dim() == 3 else w.unsqueeze(0)
    E = batch.shape[0]
    a, b = batch.shape[-2:]
    d_out, d_in = (a, b) if layout == "out_in" else (b, a)
    gammas = [float(gamma)] * E if isinstance(gamma, (int, float)) else [float(g) for g in gamma]
    if len(gammas) != E:
        raise ValueError(f"gamma has {len(gammas)} values for {E} members")
    if generators is None or isinstance(generators, torch.Generator):
        gens: list[torch.Generator | None] = [generators] * E
    else:
        gens = list(generators)
    if len(gens) != E:
        raise ValueError(f"{len(gens)} generators for {E} members")
    with torch.no_grad():
        for e in range(E):
            batch[e].normal_(0.0, gamma_std(d_out, d_in, gammas[e], fan), generator=gens[e])
    return w


# ----------------------------------------------------------------------------------------------
# Seed 000's structured starts of the Sec. 2 single-layer model

RANK_ONE_STREAM = "init-rank-one"  # random stream of the Fig. 6 init (per member, independent of "init")
CANONICAL_ALPHA_STREAM = "icommon-alpha"  # per-member stream of the direction alpha of App. D's map


class RankOneScales(Protocol):
    """The scales :func:`rank_one_init_` reads (markov-rank's ``RankOneInitConfig``)."""

    @property
    def e_std(self) -> float: ...  # c ~ |N(0, e_std²)|: e = c·α, p_n = -(c/2)·α
    @property
    def w_std(self) -> float: ...  # s ~ |N(0, w_std²)|: W_1 = s·ξ α^T
    @property
    def attn_std(self) -> float: ...  # std of the free factor of W_Q, W_K, W_V, W_O


def rank_one_init_(model: GPT, cfg: RankOneScales) -> GPT:
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
    scales are the caller's (:class:`RankOneScales`). Returns ``model`` (modified in place under
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
        for m, g in enumerate(member_generators(model.seeds, RANK_ONE_STREAM)):

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


def canonical_init_(model: GPT, theta: torch.Tensor) -> GPT:
    """Set the Sec. 2 model's embeddings and feed-forward weights to App. D's canonical point.

    Per member ``m`` with ``(e, w) = theta[m]`` and ``α`` uniform on ``{±1}^d/√d`` (stream
    ``icommon-alpha`` of the member's seed): ``e = e·α``, ``p_n = -(e/2)·α`` (Eq. 18),
    ``W_1 = (|w|/√d) 1 α^T ∈ R^{4d×d}``, ``W_2 = (w/√d) α 1^T`` (App. D, before Eq. 21), the sign
    of e moved into α. Attention weights and ``b`` keep their standard draw. With the attention path at zero,
    ``logit_n = e^2 (1 + 2w|w|) x_n + b - e^2/2`` (Eq. 24).

    Args:
        model: Sec. 2 model (tied weights, absolute positions, one layer), E members.
        theta: ``(E, 2)``.
    Returns: ``model`` (modified in place).
    """
    mc = model.cfg
    mlp = model.blocks[0].mlp
    if mc.arch != "sec2" or mc.layers != 1 or not mc.tie_weights or model.wpe is None or mlp is None:
        raise ValueError(
            "canonical_init_ needs the Sec. 2 single-layer model with tied weights, absolute positions and an MLP"
        )
    th = torch.as_tensor(theta, dtype=torch.float64)
    if th.shape != (model.members, 2):
        raise ValueError(f"theta must be ({model.members}, 2), got {tuple(th.shape)}")
    d, r = mc.d, mc.mlp_ratio * mc.d
    with torch.no_grad():
        for m, g in enumerate(member_generators(model.seeds, CANONICAL_ALPHA_STREAM)):
            alpha = (torch.randint(0, 2, (d,), generator=g).double() * 2 - 1) / math.sqrt(d)
            # The sign of e goes into alpha: (e, alpha) and (-e, -alpha) are the same embedding, and with
            # W_1 built on the embedding's own direction Eq. (24) holds for either sign (App. D, "Loss").
            e, w = float(th[m, 0]), float(th[m, 1])
            alpha = alpha if e >= 0 else -alpha
            e = abs(e)
            dev, dt = model.e.device, model.e.dtype
            model.e[m].copy_((e * alpha).to(dev, dt))
            model.wpe[m].copy_((-0.5 * e * alpha).expand(model.wpe.shape[1], d).to(dev, dt))
            ones = torch.ones(r, dtype=torch.float64)
            mlp.W_1.weight[m].copy_((abs(w) / math.sqrt(d) * torch.outer(ones, alpha)).to(dev, dt))
            mlp.W_2.weight[m].copy_((w / math.sqrt(d) * torch.outer(alpha, ones)).to(dev, dt))
    return model


def proposed_point(model: GPTConfig) -> tuple[float, float]:
    """A.3.2's proposed init (e = init_e per coordinate, W_1 = init_w1, W_2 = init_w2) in App. D's
    coordinates: ``e = init_e √d`` (α = 1/√d), ``w = init_w2 d`` (``|w| = init_w1 d``: the two agree
    when ``init_w1 = -init_w2``, as in the seed)."""
    return model.init_e * math.sqrt(model.d), model.init_w2 * model.d


# ----------------------------------------------------------------------------------------------
# Seed 004's near-zero attention start (Fig. 5)

NEAR_ZERO_QKV_STREAM = "near-zero-qkv"  # purpose of the near-zero W^Q, W^K, W^V draws


def near_zero_qkv_init_(model: GPT, scale: float, kind: str = "uniform") -> GPT:
    """Redraw W^Q, W^K, W^V of every layer near zero (Fig. 5), member ``e`` from its own seed: U[0, scale)
    entrywise (``"uniform"``) or N(0, scale²) (``"normal"``). Returns ``model``."""
    gens = member_generators(model.seeds, NEAR_ZERO_QKV_STREAM)
    with torch.no_grad():
        for blk in model.blocks:
            for lin in (blk.attn.W_Q, blk.attn.W_K, blk.attn.W_V):
                for e, g in enumerate(gens):
                    if kind == "uniform":
                        lin.weight[e].uniform_(0.0, scale, generator=g)
                    else:
                        lin.weight[e].normal_(0.0, scale, generator=g)
    return model

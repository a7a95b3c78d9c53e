"""The finite-T loss landscape of the attention weights (α, β) with W^V frozen (seed 004, App. F).

Seed 004 (Li, Li, Risteski, ICML 2023), §5.3 and App. F.1–F.5. Setting: one-hot embeddings, the
one-layer model of Eq. 7 ``X̂ = W^V X̃ A(X̃)`` with ``b^pred = 0``, squared loss (Eq. 3), documents
under Assumption 1 (a document *is* its masked-token distribution, Prop. 1 / F.17), and attention
of the form of Assumption 2: for a query at position j and a key at position i,

    A_ij ∝ β  if w̃_i = w̃_j,   α  if w̃_i ≠ w̃_j but topic(w̃_i) = topic(w̃_j),   1  otherwise,

normalised over the keys (Prop. 2; ``c_1 = β c_3``, ``c_2 = α c_3``). With the masked-token
probabilities ``p_1`` (a word of a document topic) and ``p_2`` (a word of another topic), F.18–F.19,
column j of ``X̃ A(X̃)`` is Prop. 3 / F.20: ``p_1 β / z_1`` on the query's own word, ``p_1 α / z_1`` on
the other words of its topic, ``p_1 / z_1`` on words of the other document topics, ``p_2 / z_1`` on
words of the absent topics (query word in a document topic, ``z_1``), and the same with ``p_2`` for the
query's own topic and ``z_2`` when the query word belongs to an absent topic.

Two frozen value maps (row [MASK] = 0 for both; ``q(x) = c_4 (x − p_2)``, ``c_4 = 1/(1 − (1 − p_c)p_m)``,
which is Thm. 2's ``c_3``, written here locally):

* ``block`` (F.3, Thm. 3, Fig. 8): ``(W^V y)_i = q((1/v) Σ_{l ∈ topic(i)} y_l)``, i.e. uniform blocks
  ``c_4/v`` with **W_diff = 0** and the constant ``−c_4 p_2``; this is the map the proof of Thm. 3
  uses (F.21), *not exactly* Thm. 2's ``W^{V*}`` (whose ``W_diff ≠ 0`` and ``W_i0`` only reproduce the
  constant under uniform attention).
* ``diagonal`` (F.4, Def. 2, Thm. 5, Fig. 7): ``(D^V y)_i = q(y_i)``.

The loss (F.21 and its F.4 analogue) is ``L(α, β) = (1/(p_m N)) E Σ_{j ∈ M, w̃_j ≠ [MASK]} ‖W^V X̃ A_{:j} −
X_{:j}‖²``: the [MASK]-query term is left out, as the seed does (it argues that term does not depend
on α, β). :func:`block_loss` / :func:`diagonal_loss` evaluate the case terms of F.3 (cases 1–3) and
F.4 (cases 1–4) exactly, *before* the asymptotic step "plugging in Assumption 3": that step, and
the o(1) bookkeeping after it, is what Remark 7 / App. F.5 say is too complicated, so App. F.5
evaluates these finite-T sums numerically, and so do we.

Seed ambiguities, resolved here:

* The value map's constant ``−c_4 p_2`` (the ``−p_m p_r / ((1 − (1 − p_c)p_m)Tv)`` in q) is kept even
  though Prop. 2 normalises the attention over word keys only (``z_1, z_2`` omit the
  ``p_m(1 − p_c − p_r)`` mass of [MASK] keys): [MASK] keys get no attention, so ``y_0 = 0`` and the
  constant is not reachable through ``W_i0 y_0``; it acts as a fixed bias. We follow the proof.
* Thm. 3's ``λ1``: the statement's ``(1 − (1−p_c)p_m + p_m p_r)(1 + (1−p_c)p_m) / (2(1 − (1−p_c)p_m))``
  (0.577 at p_m = 0.15, p_c = p_r = 0.1) differs from the bound the proof derives (F.28–F.32),
  ``c_5 = (1 + c_4 p_m p_r)(2 − c_4)/(2 c_4)`` (0.371). :func:`lambda1` gives both.
* Thm. 5's ``λ4``: the statement *divides* by ``(√(v−1) − 2 + (1−p_c)p_m)``, the proof's
  ``c_7 (1/(c_4 p_m p_r) + 1) v`` with ``c_7 = (1/c_4)(√(v−1) − 1/c_4 − 1)`` *multiplies*.
  :func:`lambda4` gives both. ``λ2``, ``λ3``, ``λ5`` agree between statement and proof.
* App. F.5 does not state p_m, p_c, p_r; we use §6.1's p_m = 0.15, p_c = p_r = 0.1 (Devlin et al.).

Everything is float64 torch and broadcasts over α, β (grids: :func:`landscape`).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Literal

import numpy as np
import torch

from tdlab.theory.topics import c3

__all__ = [
    "PAPER_MASKING",
    "Kind",
    "Masking",
    "Version",
    "assumption3_v",
    "assumption4",
    "block_loss",
    "block_loss_gamma",
    "c4",
    "diagonal_loss",
    "diagonal_minimum",
    "equal_gamma_points",
    "flat_halfwidth",
    "gamma_of",
    "gamma_star",
    "lambda1",
    "lambda2",
    "lambda3",
    "lambda4",
    "lambda5",
    "landscape",
    "landscape_minimisers",
    "log_grid",
    "masked_probs",
    "monte_carlo_loss",
    "monte_carlo_losses",
    "q_map",
    "thm3_interval",
    "thm5_interval",
]

_F64 = torch.float64
Kind = Literal["block", "diagonal"]
Version = Literal["statement", "proof"]


@dataclass(frozen=True)
class Masking:
    """MLM masking probabilities (§3.2): position masked with ``p_m``; a masked position is kept with
    ``p_c``, replaced by a uniform word of [Tv] with ``p_r``, else set to [MASK]."""

    p_m: float = 0.15
    p_c: float = 0.1
    p_r: float = 0.1

    def __post_init__(self) -> None:
        for name in ("p_m", "p_c", "p_r"):
            x = getattr(self, name)
            if not (0.0 < x < 1.0):
                raise ValueError(f"{name}: must lie in (0, 1), got {x!r}")
        if self.p_c + self.p_r > 1.0:
            raise ValueError(f"p_c + p_r: must be at most 1, got {self.p_c + self.p_r!r}")


PAPER_MASKING = Masking()  # §6.1: p_m = 0.15, p_c = p_r = 0.1 (App. F.5 states none; we take these)


def _check(T: int, v: int, tau: int) -> None:
    if T < 2 or v < 1:
        raise ValueError(f"T, v: need T ≥ 2 and v ≥ 1, got T={T!r}, v={v!r}")
    if not (1 <= tau < T):
        raise ValueError(
            f"tau: need 1 ≤ tau < T (a document must leave an absent topic for case 3/4), got tau={tau!r}, T={T!r}"
        )


def c4(m: Masking = PAPER_MASKING) -> float:
    """``c_4 = 1/(1 − (1 − p_c) p_m)`` (F.27): Thm. 2's ``c_3`` (:func:`tdlab.theory.topics.c3`)."""
    return c3(m.p_m, m.p_c)


def masked_probs(T: int, v: int, tau: int, m: Masking = PAPER_MASKING) -> tuple[float, float]:
    """``(p_1, p_2)`` of F.18–F.19: the masked-document probability of one word of a document topic,
    and of one word of an absent topic."""
    p2 = m.p_m * m.p_r / (v * T)
    p1 = (1.0 - (1.0 - m.p_c) * m.p_m) / (v * tau) + p2
    return p1, p2


def q_map(x: torch.Tensor, T: int, v: int, m: Masking = PAPER_MASKING) -> torch.Tensor:
    """``q(x) = x/(1 − (1−p_c)p_m) − p_m p_r/((1 − (1−p_c)p_m) T v)`` (F.21, F.31) = ``c_4 (x − p_2)``."""
    return c4(m) * x - c4(m) * m.p_m * m.p_r / (T * v)


def gamma_of(alpha, beta, v: int):
    """Remark 5 / F.3: ``γ = ((v − 1) α + β) / v``, the only combination the block loss depends on."""
    return ((v - 1) * alpha + beta) / v


def _t(x) -> torch.Tensor:
    return torch.as_tensor(x, dtype=_F64)


def block_loss(alpha, beta, T: int, v: int, tau: int, m: Masking = PAPER_MASKING) -> torch.Tensor:
    """Exact finite-T loss of the block map (F.3 cases 1–3, before the asymptotic step), written in
    α and β separately (the block sums ``p β + (v − 1) p α`` are formed from the two), so that its
    dependence on γ alone (Remark 5) is a property to check, not an input.

    Args:
        alpha (float | torch.Tensor): broadcastable (any shape), > 0.
        beta (float | torch.Tensor): broadcastable (any shape), > 0.
    Returns:
        ``L(α, β)``, float64, the broadcast shape.
    """
    _check(T, v, tau)
    a, b = torch.broadcast_tensors(_t(alpha), _t(beta))
    p1, p2 = masked_probs(T, v, tau, m)
    q = lambda x: q_map(x, T, v, m)  # noqa: E731
    # Query word in a document topic (cases 1, 2): normaliser z_1 (Prop. 2).
    z1 = b * p1 + a * p1 * (v - 1) + p1 * v * (tau - 1) + p2 * v * (T - tau)
    own1 = (p1 * b + (v - 1) * p1 * a) / (v * z1)  # (1/v) Σ_{l∈topic(w̃_j)} y_l, F.22
    doc1, abs1 = p1 / z1, p2 / z1
    # case 1: topic(w̃_j) = topic(w_j), probability p_c + p_r/T
    l1 = (1 - q(own1)) ** 2 + q(own1) ** 2 * (v - 1) + q(doc1) ** 2 * v * (tau - 1) + q(abs1) ** 2 * v * (T - tau)
    # case 2: w̃_j in another document topic, probability p_r (τ − 1)/T
    l2 = (1 - q(doc1)) ** 2 + q(own1) ** 2 * v + q(doc1) ** 2 * (v * (tau - 1) - 1) + q(abs1) ** 2 * v * (T - tau)
    # case 3: w̃_j in an absent topic, probability p_r (1 − τ/T): normaliser z_2, F.24–F.25
    z2 = b * p2 + a * p2 * (v - 1) + p1 * v * tau + p2 * v * (T - tau - 1)
    own2 = (p2 * b + (v - 1) * p2 * a) / (v * z2)
    doc2, abs2 = p1 / z2, p2 / z2
    l3 = (1 - q(doc2)) ** 2 + q(doc2) ** 2 * (v * tau - 1) + q(own2) ** 2 * v + q(abs2) ** 2 * v * (T - tau - 1)
    return (m.p_c + m.p_r / T) * l1 + m.p_r * (tau - 1) / T * l2 + m.p_r * (1 - tau / T) * l3


def block_loss_gamma(gamma, T: int, v: int, tau: int, m: Masking = PAPER_MASKING) -> torch.Tensor:
    """The block loss as the seed writes it in γ (F.22–F.26 before the asymptotic step):
    ``z_1 = p_1 γ v + p_1 v(τ−1) + p_2 v(T−τ)``, ``z_2 = p_2 γ v + p_1 v τ + p_2 v(T−τ−1)``.
    Equal to :func:`block_loss` at ``γ = ((v−1)α + β)/v`` (Remark 5)."""
    _check(T, v, tau)
    g = _t(gamma)
    p1, p2 = masked_probs(T, v, tau, m)
    q = lambda x: q_map(x, T, v, m)  # noqa: E731
    z1 = p1 * g * v + p1 * v * (tau - 1) + p2 * v * (T - tau)
    s, d, a_ = p1 * g / z1, p1 / z1, p2 / z1
    l1 = (1 - q(s)) ** 2 + q(s) ** 2 * (v - 1) + q(d) ** 2 * v * (tau - 1) + q(a_) ** 2 * v * (T - tau)
    l2 = (1 - q(d)) ** 2 + q(s) ** 2 * v + q(d) ** 2 * (v * (tau - 1) - 1) + q(a_) ** 2 * v * (T - tau)
    z2 = p2 * g * v + p1 * v * tau + p2 * v * (T - tau - 1)
    s2, d2, a2 = p2 * g / z2, p1 / z2, p2 / z2
    l3 = (1 - q(d2)) ** 2 + q(d2) ** 2 * (v * tau - 1) + q(s2) ** 2 * v + q(a2) ** 2 * v * (T - tau - 1)
    return (m.p_c + m.p_r / T) * l1 + m.p_r * (tau - 1) / T * l2 + m.p_r * (1 - tau / T) * l3


def diagonal_loss(alpha, beta, T: int, v: int, tau: int, m: Masking = PAPER_MASKING) -> torch.Tensor:
    """Exact finite-T loss of the diagonal map D^V (F.4 cases 1–4 with F.32/F.34, before the
    asymptotic step). Broadcasts over ``alpha``, ``beta``; returns float64."""
    _check(T, v, tau)
    a, b = torch.broadcast_tensors(_t(alpha), _t(beta))
    p1, p2 = masked_probs(T, v, tau, m)
    q = lambda x: q_map(x, T, v, m)  # noqa: E731
    z1 = b * p1 + a * p1 * (v - 1) + p1 * v * (tau - 1) + p2 * v * (T - tau)
    sw, st, dt, at = p1 * b / z1, p1 * a / z1, p1 / z1, p2 / z1  # same word, same topic, doc topic, absent topic
    rest1 = q(dt) ** 2 * v * (tau - 1) + q(at) ** 2 * v * (T - tau)
    # case 1: w̃_j = w_j, probability p_c + p_r/(vT)
    l1 = (1 - q(sw)) ** 2 + q(st) ** 2 * (v - 1) + rest1
    # case 2: w̃_j ≠ w_j in the same topic, probability (p_r/T)(1 − 1/v)
    l2 = (1 - q(st)) ** 2 + q(sw) ** 2 + q(st) ** 2 * (v - 2) + rest1
    # case 3: w̃_j in another document topic, probability p_r (τ − 1)/T
    l3 = (
        (1 - q(dt)) ** 2
        + q(sw) ** 2
        + q(st) ** 2 * (v - 1)
        + q(dt) ** 2 * (v * (tau - 1) - 1)
        + q(at) ** 2 * v * (T - tau)
    )
    # case 4: w̃_j in an absent topic, probability p_r (1 − τ/T)
    z2 = b * p2 + a * p2 * (v - 1) + p1 * v * tau + p2 * v * (T - tau - 1)
    sw2, st2, dt2, at2 = p2 * b / z2, p2 * a / z2, p1 / z2, p2 / z2
    l4 = (
        (1 - q(dt2)) ** 2
        + q(dt2) ** 2 * (v * tau - 1)
        + q(sw2) ** 2
        + q(st2) ** 2 * (v - 1)
        + q(at2) ** 2 * v * (T - tau - 1)
    )
    return (
        (m.p_c + m.p_r / (v * T)) * l1
        + m.p_r / T * (1 - 1 / v) * l2
        + m.p_r * (tau - 1) / T * l3
        + m.p_r * (1 - tau / T) * l4
    )


def log_grid(lo: float, hi: float, n: int) -> torch.Tensor:
    """``n`` log-spaced points from ``lo`` to ``hi`` (float64)."""
    if not (0 < lo < hi) or n < 2:
        raise ValueError(f"log grid: need 0 < lo < hi and n ≥ 2, got lo={lo!r}, hi={hi!r}, n={n!r}")
    return torch.logspace(math.log10(lo), math.log10(hi), n, dtype=_F64)


def landscape(kind: Kind, alphas, betas, T: int, v: int, tau: int, m: Masking = PAPER_MASKING) -> torch.Tensor:
    """``L`` on the grid ``alphas × betas``: returns ``(len(betas), len(alphas))`` (rows β, columns α,
    as Figs. 7/8 draw β up and α across), float64."""
    a, b = _t(alphas).reshape(1, -1), _t(betas).reshape(-1, 1)
    if kind == "block":
        return block_loss(a, b, T, v, tau, m)
    if kind == "diagonal":
        return diagonal_loss(a, b, T, v, tau, m)
    raise ValueError(f"kind: must be 'block' or 'diagonal', got {kind!r}")


def gamma_star(
    T: int, v: int, tau: int, m: Masking = PAPER_MASKING, lo: float = 1e-4, hi: float = 1e7, n: int = 4001
) -> tuple[float, float]:
    """The minimiser of the block loss over γ ∈ [lo, hi] and its loss: the argmin of an ``n``-point
    log grid, refined by golden-section search in log γ between its neighbours (the loss is smooth
    and, at the settings we use, unimodal there). Returns ``(γ*, L(γ*))``."""
    g = log_grid(lo, hi, n)
    L = block_loss_gamma(g, T, v, tau, m)
    k = int(torch.argmin(L))
    a, b = math.log(float(g[max(k - 1, 0)])), math.log(float(g[min(k + 1, n - 1)]))
    f = lambda x: float(block_loss_gamma(math.exp(x), T, v, tau, m))  # noqa: E731
    r = (math.sqrt(5) - 1) / 2
    c, d = b - r * (b - a), a + r * (b - a)
    for _ in range(80):
        if f(c) < f(d):
            b = d
        else:
            a = c
        c, d = b - r * (b - a), a + r * (b - a)
    x = (a + b) / 2
    return math.exp(x), f(x)


def diagonal_minimum(
    T: int,
    v: int,
    tau: int,
    m: Masking = PAPER_MASKING,
    lo: float = 1e-4,
    hi: float = 1e7,
    start: tuple[float, float] | None = None,
) -> tuple[float, float, float]:
    """The minimiser of the diagonal loss over the box ``[lo, hi]²``: bounded Nelder–Mead in
    ``(log α, log β)`` from ``start`` (default: the argmin of a 121 × 121 log grid). The loss is flat in
    α once ``(v − 1)α ≪ β`` (the minimiser sits at ``α = lo`` at the paper's settings), so α* is where
    the box stops it; β* is well determined. Returns ``(α*, β*, L*)``."""
    from scipy.optimize import minimize

    if start is None:
        g = log_grid(lo, hi, 121)
        L = landscape("diagonal", g, g, T, v, tau, m)
        k = int(torch.argmin(L))
        start = (float(g[k % 121]), float(g[k // 121]))
    f = lambda x: float(diagonal_loss(math.exp(x[0]), math.exp(x[1]), T, v, tau, m))  # noqa: E731
    b = (math.log(lo), math.log(hi))
    res = minimize(
        f,
        np.log(np.asarray(start, dtype=float)),
        method="Nelder-Mead",
        bounds=[b, b],
        options={"xatol": 1e-10, "fatol": 1e-18, "maxiter": 4000, "maxfev": 4000},
    )
    a_, b_ = float(np.exp(res.x[0])), float(np.exp(res.x[1]))
    return a_, b_, float(diagonal_loss(a_, b_, T, v, tau, m))


def landscape_minimisers(
    grid: torch.Tensor,
    diag: torch.Tensor,
    T: int,
    v: int,
    tau: int,
    m: Masking = PAPER_MASKING,
    lo: float = 1e-4,
    hi: float = 1e7,
    gamma_n: int = 4001,
) -> dict[str, torch.Tensor | float]:
    """What Figs. 7 and 8 are read for at one τ (App. F.5), beside the two maps of :func:`landscape` on the
    log grid ``grid`` (α = β = ``grid``, from ``lo`` to ``hi``; ``diag``: the diagonal map there).

    Returns:
        ``block_via_gamma`` the block map through Remark 5's γ (:func:`block_loss_gamma` of :func:`gamma_of`
        on the grid, ``(n, n)``); ``gamma_curve_g``, ``gamma_curve`` the block loss on a ``gamma_n``-point log
        grid of γ; ``gamma_star``, ``gamma_star_loss`` (:func:`gamma_star`); ``diag_alpha_star``,
        ``diag_beta_star``, ``diag_star_loss`` (:func:`diagonal_minimum` started from the argmin of ``diag``);
        ``block_uniform``, ``diag_uniform`` the two maps at α = β = 1 (uniform attention). Scalars as floats.
    """
    n = grid.numel()
    gam = gamma_of(grid.view(1, -1), grid.view(-1, 1), v)
    curve_g = log_grid(lo, hi, gamma_n)
    g_star, g_loss = gamma_star(T, v, tau, m, lo=lo, hi=hi, n=gamma_n)
    k = int(torch.argmin(diag))
    a_star, b_star, d_loss = diagonal_minimum(
        T, v, tau, m, lo=lo, hi=hi, start=(float(grid[k % n]), float(grid[k // n]))
    )
    return {
        "block_via_gamma": block_loss_gamma(gam, T, v, tau, m),
        "gamma_curve_g": curve_g,
        "gamma_curve": block_loss_gamma(curve_g, T, v, tau, m),
        "gamma_star": g_star,
        "gamma_star_loss": g_loss,
        "diag_alpha_star": a_star,
        "diag_beta_star": b_star,
        "diag_star_loss": d_loss,
        "block_uniform": float(block_loss(1.0, 1.0, T, v, tau, m)),
        "diag_uniform": float(diagonal_loss(1.0, 1.0, T, v, tau, m)),
    }


# ---------------------------------------------------------------------------------------------------
# The constants of Thms. 3 and 5 (statement vs proof where they differ)


def _version(version: str) -> None:
    if version not in ("statement", "proof"):
        raise ValueError(f"version: must be 'statement' or 'proof', got {version!r}")


def lambda1(m: Masking = PAPER_MASKING, version: Version = "statement") -> float:
    """Thm. 3's λ1. ``statement``: ``(1 − (1−p_c)p_m + p_m p_r)(1 + (1−p_c)p_m) / (2(1 − (1−p_c)p_m))``
    (0.5773 at the paper's masking); ``proof`` (F.28, Case 1): ``c_5 = (1 + c_4 p_m p_r)(2 − c_4)/(2 c_4)``
    (0.3713). They differ: the statement is not what the proof shows."""
    _version(version)
    k = (1 - m.p_c) * m.p_m
    if version == "statement":
        return (1 - k + m.p_m * m.p_r) * (1 + k) / (2 * (1 - k))
    c = c4(m)
    return (1 + c * m.p_m * m.p_r) * (2 - c) / (2 * c)


def lambda2(m: Masking = PAPER_MASKING) -> float:
    """Thm. 3's λ2 = 100((1 − (1−p_c)p_m)/(p_m p_r) + 1) (= the proof's 100(1/c_4 + p_m p_r)/(p_m p_r))."""
    return 100 * ((1 - (1 - m.p_c) * m.p_m) / (m.p_m * m.p_r) + 1)


def lambda3(v: int, m: Masking = PAPER_MASKING) -> float:
    """Thm. 5's λ3 = (1 − (1−p_c)p_m + p_m p_r) v / 100 (= the proof's (1 + c_4 p_m p_r) v/(100 c_4))."""
    return (1 - (1 - m.p_c) * m.p_m + m.p_m * m.p_r) * v / 100


def lambda4(v: int, m: Masking = PAPER_MASKING, version: Version = "statement") -> float:
    """Thm. 5's λ4. ``statement``: ``(1 − (1−p_c)p_m) / (√(v−1) − 2 + (1−p_c)p_m) · (1 − (1−p_c−p_r)p_m)/(p_m p_r) · v``;
    ``proof`` (F.4, ``c_7 (1/(c_4 p_m p_r) + 1) v``): the same with the factor ``(√(v−1) − 2 + (1−p_c)p_m)``
    multiplying instead of dividing."""
    _version(version)
    k = (1 - m.p_c) * m.p_m
    s = math.sqrt(v - 1) - 2 + k
    tail = (1 - (1 - m.p_c - m.p_r) * m.p_m) / (m.p_m * m.p_r) * v
    return ((1 - k) / s if version == "statement" else (1 - k) * s) * tail


def lambda5(v: int, m: Masking = PAPER_MASKING) -> float:
    """Thm. 5's λ5 = 1/((v − 1)(1 − (1−p_c)p_m)) (= the proof's c_4/(v − 1))."""
    return 1.0 / ((v - 1) * (1 - (1 - m.p_c) * m.p_m))


def thm3_interval(T: int, tau: int, m: Masking = PAPER_MASKING, version: Version = "statement") -> tuple[float, float]:
    """Thm. 3: the optimal γ lies in ``(λ1 (τ − 1), λ2 T)``."""
    return lambda1(m, version) * (tau - 1), lambda2(m) * T


def thm5_interval(
    T: int, v: int, tau: int, m: Masking = PAPER_MASKING, version: Version = "statement"
) -> tuple[float, float]:
    """Thm. 5: the optimal β lies in ``(λ3 τ, λ4 T)`` (and α < λ5 β)."""
    return lambda3(v, m) * tau, lambda4(v, m, version) * T


# ---------------------------------------------------------------------------------------------------
# Monte Carlo: sampled documents, masks and the model's loss (tests the closed forms)


def monte_carlo_losses(
    points: Sequence[tuple[float, float]],
    T: int,
    v: int,
    tau: int,
    N: int,
    docs: int,
    generator: torch.Generator,
    m: Masking = PAPER_MASKING,
) -> dict[str, tuple[np.ndarray, np.ndarray]]:
    """Estimate ``L(α, β)`` of both maps at every ``(α, β)`` of ``points`` by sampling (one set of
    documents and masks shared by all points): ``docs`` documents of ``N`` words from the §3.1
    generator (τ distinct topics; each word's topic uniform among them, the word uniform in its
    topic), MLM masks (§3.2), attention of Assumption 2 computed from the document's *actual* token
    counts (normalised over word keys, [MASK] keys get none, as Prop. 2), the frozen value map, and
    the squared error at every masked position whose input is not [MASK] (F.21), divided by the
    number of masked positions.

    Assumption 1 replaces counts by ``N ×`` probabilities, so the estimate converges to
    :func:`block_loss` / :func:`diagonal_loss` as ``N → ∞``, with a bias of order ``1/(N p_2)`` (a
    replaced word of an absent topic is counted once more than ``N p_2``).

    Returns:
        ``{"block": (estimates, standard errors), "diagonal": (...)}``, arrays of ``len(points)``; the
        errors from the spread over documents (ratio estimator, delta method).
    """
    _check(T, v, tau)
    if N < 1 or docs < 2:
        raise ValueError(f"N, docs: need N ≥ 1 and docs ≥ 2, got N={N!r}, docs={docs!r}")
    V = T * v + 1
    g = generator
    topics = torch.rand((docs, T), generator=g).argsort(dim=1)[:, :tau]  # τ distinct topics per document
    t = topics.gather(1, torch.randint(0, tau, (docs, N), generator=g))
    w = t * v + torch.randint(0, v, (docs, N), generator=g) + 1  # words 1..Tv, topic(i) = ⌈i/v⌉
    masked = torch.rand((docs, N), generator=g) < m.p_m
    r = torch.rand((docs, N), generator=g)
    rand_word = torch.randint(1, V, (docs, N), generator=g)
    wt = torch.where(r < m.p_c, w, torch.where(r < m.p_c + m.p_r, rand_word, torch.zeros_like(w)))
    wt = torch.where(masked, wt, w)
    counts = torch.zeros((docs, V), dtype=_F64).scatter_add_(1, wt, torch.ones((docs, N), dtype=_F64))
    # The loss at a query depends on (document, input word w̃_j, target word w_j) only: count those
    # triples once, then every point is a small weighted sum.
    query = masked & (wt != 0)
    key = (torch.arange(docs).view(-1, 1) * V + wt) * V + w
    trip = torch.zeros(docs * V * V, dtype=_F64).index_add_(0, key[query], torch.ones(int(query.sum()), dtype=_F64))
    trip = trip.view(docs, V, V)  # (doc, input s, target w)
    den_d = masked.sum(dim=1).to(_F64)
    words = torch.arange(V)
    topic_of = torch.div(words - 1, v, rounding_mode="floor")  # 0-based topic of word l ≥ 1
    same_word = words.view(-1, 1) == words.view(1, -1)
    same_topic = topic_of.view(-1, 1) == topic_of.view(1, -1)
    out_d: dict[str, tuple[list[float], list[float]]] = {"block": ([], []), "diagonal": ([], [])}
    for alpha, beta in points:
        # Attention weight of key word l for query word s (Assumption 2); [MASK] keys get none.
        Wt = torch.where(
            same_word,
            torch.tensor(float(beta), dtype=_F64),
            torch.where(same_topic, torch.tensor(float(alpha), dtype=_F64), torch.tensor(1.0, dtype=_F64)),
        )
        Wt[0, :] = 0.0
        num = counts.unsqueeze(2) * Wt.unsqueeze(0)  # (docs, key l, query s)
        y = num / num.sum(dim=1, keepdim=True).clamp_min(1e-300)
        for kind in ("block", "diagonal"):
            if kind == "block":
                blocks = y[:, 1:, :].reshape(docs, T, v, V).mean(dim=2)  # (docs, topic, query)
                o = q_map(blocks.repeat_interleave(v, dim=1), T, v, m)
            else:
                o = q_map(y[:, 1:, :], T, v, m)
            o = torch.cat(
                [torch.zeros((docs, 1, V), dtype=_F64), o], dim=1
            )  # (docs, output row i, query s); row [MASK] = 0
            # ‖o_{:,s} − e_w‖² = ‖o_{:,s}‖² − 2 o_{w,s} + 1 for input s, target w
            per = (o**2).sum(dim=1).unsqueeze(2) - 2 * o.transpose(1, 2) + 1.0  # (docs, s, w)
            num_d = (trip * per).sum(dim=(1, 2))
            est = float(num_d.sum() / den_d.sum())
            resid = (num_d - est * den_d).numpy()
            out_d[kind][0].append(est)
            out_d[kind][1].append(float(np.std(resid, ddof=1) * math.sqrt(docs) / float(den_d.sum())))
    return {k: (np.asarray(e), np.asarray(s_)) for k, (e, s_) in out_d.items()}


def monte_carlo_loss(
    kind: Kind,
    alpha: float,
    beta: float,
    T: int,
    v: int,
    tau: int,
    N: int,
    docs: int,
    generator: torch.Generator,
    m: Masking = PAPER_MASKING,
) -> tuple[float, float]:
    """:func:`monte_carlo_losses` at one point for one map: ``(estimate, standard error)``."""
    if kind not in ("block", "diagonal"):
        raise ValueError(f"kind: must be 'block' or 'diagonal', got {kind!r}")
    est, se = monte_carlo_losses([(alpha, beta)], T, v, tau, N, docs, generator, m)[kind]
    return float(est[0]), float(se[0])


def assumption4(p_m: float, p_c: float, p_r: float) -> bool:
    """Assumption 4 (§5.3), the masking Thms. 3 and 5 are proved under: ``p_m < 1/2``, ``p_c = p_r ∈ (0, 1/2)``."""
    return p_m < 0.5 and math.isclose(p_c, p_r) and 0.0 < p_c < 0.5


def assumption3_v(v: int, p_m: float, p_c: float) -> bool:
    """Assumption 3 (§5.3), "no sparsely supported topics", at finite v: ``v > (c_4 + 1)² + 1`` with
    ``c_4 = 1/(1 − (1 − p_c)p_m)`` (:func:`c4`), the words per topic the proofs of Thms. 3, 5 need."""
    return v > (1.0 / (1.0 - (1.0 - p_c) * p_m) + 1.0) ** 2 + 1.0


def equal_gamma_points(gamma: float, v: int, eps: float) -> tuple[tuple[float, float], ...]:
    """Remark 5's test points: three ``(α, β)`` with the same ``γ = ((v − 1)α + β)/v`` (:func:`gamma_of`).

    ``(γ, γ)``; same-word heavy (``α = εγ``, β taking the rest); same-topic heavy (``β = εγ``). Under the
    block map the loss depends on γ alone (Remark 5, App. F.3), so the three give one loss; under the
    diagonal map they do not.

    Returns:
        ``((α, β), (α, β), (α, β))``, floats.
    """
    return ((gamma, gamma), (eps * gamma, (v - eps * (v - 1)) * gamma), ((v - eps) * gamma / (v - 1), eps * gamma))


def flat_halfwidth(f: Callable[[float], float], x: float, rel: float, lo: float = 1e-12, hi: float = 4.0) -> float:
    """The log10 half-width around ``x`` over which ``f`` stays within ``rel`` (relative) of ``f(x)``.

    The largest ``δ`` (bisection in log δ between ``lo`` and ``hi``) with ``f(x·10^{±δ}) − f(x) ≤ rel |f(x)|``
    on both sides: a minimiser of ``f`` (γ*, β*, α* of Figs. 7, 8, App. F.5) is known no better than this.

    Args:
        f: a scalar function of a positive scalar (e.g. ``γ ↦`` :func:`block_loss_gamma`).
        x: the point (> 0), usually a refined minimiser.
    Returns:
        ``δ`` in log10 units: ``hi`` when ``f`` is flat over the whole search, 0 when not even ``lo`` is.
    """
    f0 = f(x)
    ok = lambda d: all(f(x * 10.0**s) - f0 <= rel * abs(f0) for s in (d, -d))  # noqa: E731
    if ok(hi):
        return hi
    if not ok(lo):
        return 0.0
    a, b = math.log(lo), math.log(hi)
    for _ in range(60):
        mid = (a + b) / 2
        a, b = (mid, b) if ok(math.exp(mid)) else (a, mid)
    return math.exp(a)

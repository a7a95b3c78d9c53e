"""Initialisation regions and the bias step of the canonical (e, w) model on a binary Markov chain.

Seed 000 (Local to Global), Sec. 3 (Eq. 3 and "one additional step is usually sufficient"), Sec. 4
(Thms. 2 and 8, the region ``I_common``), App. A.1 (Eqs. 6-9), App. E (Eq. 26). Builds on
:mod:`tdlab.theory.markov_landscape` (the closed-form landscape); everything is float64.

The region. Sec. 4 defines, after Thms. 2 and 8,

    I_common = {(e, w) : w < 0, |e| > g(w)},   g(w) = sqrt(w^2 - log(-w) + E_sad),

"a common region of initialization ... that leads to the global minima convergence irrespective of
the switching". With the energy Eq. (4), ``E(e, w) = e^2 - w^2 + log(-w)`` for ``w < 0``, so
``|e| > g(w)`` is exactly ``E(e, w) > E_sad``: I_common is the part of the half-plane ``w < 0``
above the saddle's energy level. ``g`` is real on all of ``w < 0`` (``w^2 - log(-w)`` has its
minimum ``(1 + log 2)/2 = -E_sad`` at ``w = -1/sqrt 2``), so the region is well defined there.
It is the intersection of the global-minimum basins ``I_*`` of Thm. 2 (p + q > 1) and Thm. 8
(p + q < 1) within ``w < 0`` (checked in tests/theory/test_markov_regions.py with
:func:`tdlab.theory.markov_landscape.predict_basin`).

The bias. Eq. (3)/(9) analyse ``L(theta) = L(theta, b*(theta))`` with the optimal bias of Lemma 5;
the seed: "Empirically, this roughly translates to running the gradient-descent for the bias for more
steps at each theta. In practice, one additional step is usually sufficient (§ A.3)". With the bias
free, the loss Eq. (26) has gradient (``z0 = b - e^2/2``, ``z1 = z0 + D``, ``D = e^2(1 + 2w|w|)``)::

    dL/db = g0 + g1,   dL/de = g1 dD/de - e (g0 + g1),   dL/dw = g1 dD/dw,
    g0 = pi0 (sigma(z0) - p),  g1 = pi1 (sigma(z1) - (1 - q)).

The ``-e (g0 + g1)`` term is what the profile analysis drops: along the joint flow
``dE/dt = 2 e^2 dL/db``, so a stale bias (``dL/db != 0``) moves the energy off its level and can carry
the trajectory across ``E = E_sad``, out of the basin Thm. 2/8 predicted from ``theta_0``. A bias
step (``b <- b - lr dL/db``) shrinks ``dL/db`` and with it this drift.
:func:`bias_step_basins` counts, from points uniform in a box, where descent with 0 or 1 extra bias
steps per iteration ends against where profile descent does (markov-icommon's check of Sec. 3).

Seed readings resolved here (see also the experiments that use this module):

1. "From the local minimum, a single gradient step on the bias moves the model to the global basin"
   (as first worded) cannot hold as written: on the w-axis ``e = 0`` every component of the
   gradient but ``dL/db`` vanishes for *any* b, so ``{e = 0}`` is invariant under joint gradient
   descent and no bias step leaves it (:func:`joint_gradient`; tested). What one bias step can do is
   remove a stale bias *before* the trajectory has fallen into the local-minimum basin: from a point
   whose joint flow (stale b) ends at the local minimum while the profile theory says global, one
   bias step can put the joint flow back in the global basin. That is the reading implemented.
2. The seed does not give the step size of the "additional step". :func:`descend` takes it as an
   argument; the experiments state theirs.

The same step on any model whose next-token logit is ``s + b`` (the full Sec. 2 model's, with its
bias-free part ``s`` computed by the caller): :func:`bias_step_from_logits` (markov-rank's check of Sec. 3
on the full model, :func:`tdlab.probes.sec2_weights.bias_step_excess`).
"""

from __future__ import annotations

import math
from typing import Any, Protocol

import numpy as np
import torch

from tdlab.theory.gradient_flow import FlowResult, gradient_flow
from tdlab.theory.markov_landscape import (
    ENERGY_SADDLE,
    CriticalKind,
    classify_critical,
    contrast_and_grad,
    loss,
    loss_with_bias,
    optimal_bias,
    predict_basin,
)

__all__ = [
    "BiasStepSpec",
    "bias_excess",
    "bias_gradient",
    "bias_step",
    "bias_step_agreement",
    "bias_step_basins",
    "bias_step_from_logits",
    "descend",
    "icommon_boundary",
    "in_icommon",
    "joint_gradient",
    "limit_kind",
    "run_joint_flow",
    "sample_icommon",
]

_F64 = torch.float64


class BiasStepSpec(Protocol):
    """What :func:`bias_step_basins` reads of a config (markov-icommon's ``BiasStepConfig``)."""

    @property
    def points(self) -> int: ...  # initial points, uniform in the box
    @property
    def e_max(self) -> float: ...  # box |e| <= e_max
    @property
    def w_max(self) -> float: ...  # box |w| <= w_max
    @property
    def b0(self) -> float: ...  # the bias's (stale) start
    @property
    def lr(self) -> float: ...  # GD step size
    @property
    def steps(self) -> int: ...  # GD iterations
    @property
    def atol(self) -> float: ...  # end point within atol of a critical set (Thm. 1)


def _theta2(theta: Any) -> torch.Tensor:
    t = torch.as_tensor(theta, dtype=_F64)
    if t.ndim == 0 or t.shape[-1] != 2:
        raise ValueError(f"theta must have shape (..., 2) for (e, w); got {tuple(t.shape)}")
    return t


# ----------------------------------------------------------------------------------------------
# I_common (Sec. 4)


def icommon_boundary(w: Any) -> torch.Tensor:
    """``g(w) = sqrt(w^2 - log(-w) + E_sad)`` for ``w < 0`` (Sec. 4; Thm. 2 (i)).

    ``g(-1/sqrt 2) = 0``; ``g`` grows without bound as ``w -> 0^-`` and ``w -> -inf``.
    Returns: float64 tensor shaped like ``w``; NaN where ``w >= 0`` (undefined there).
    """
    wt = torch.as_tensor(w, dtype=_F64)
    neg = wt < 0
    ws = torch.where(neg, wt, -torch.ones_like(wt))
    g2 = ws * ws - torch.log(-ws) + ENERGY_SADDLE
    # g2 >= 0 in exact arithmetic; round-off near w = -1/sqrt 2 can leave -1e-17.
    return torch.where(neg, torch.sqrt(g2.clamp_min(0.0)), torch.full_like(wt, math.nan))


def in_icommon(theta: Any, energy_margin: float = 0.0) -> torch.Tensor:
    """Membership of ``I_common = {w < 0, |e| > g(w)}`` (Sec. 4), optionally with a margin.

    Decided on the energy: ``|e| > g(w)`` iff ``E(e, w) - E_sad > 0`` with ``E = e^2 - w^2 + log(-w)``
    (Eq. 4 for ``w < 0``). With ``energy_margin > 0`` a point must clear the saddle's level by that
    much (``E - E_sad > energy_margin``), a band inside the region's boundary.

    Args:
        theta: ``(..., 2)`` points ``(e, w)``.
        energy_margin: ``>= 0``.
    Returns: bool tensor of shape ``theta.shape[:-1]``.
    """
    if energy_margin < 0:
        raise ValueError(f"energy_margin must be >= 0, got {energy_margin}")
    th = _theta2(theta)
    e, w = th[..., 0], th[..., 1]
    neg = w < 0
    ws = torch.where(neg, w, -torch.ones_like(w))
    gap = e * e - ws * ws + torch.log(-ws) - ENERGY_SADDLE
    return neg & (gap > energy_margin)


def sample_icommon(
    gens: list[torch.Generator],
    n: int,
    *,
    e_max: float = 2.0,
    w_range: tuple[float, float] = (-1.5, -0.05),
    energy_margin: float = 0.1,
    max_rounds: int = 1000,
) -> torch.Tensor:
    """Points drawn uniformly from ``I_common`` within the box ``|e| <= e_max``, ``w in w_range``.

    Rejection sampling: uniform proposals in the box, kept when :func:`in_icommon` (with
    ``energy_margin``) accepts them, one stream per generator (one per ensemble member), so member
    ``i``'s points depend on ``gens[i]`` alone. The box and margin are the caller's choice (the seed
    gives no distribution on the region); a box that misses the region raises.

    Args:
        gens: one ``torch.Generator`` per member.
        n: points per member (``>= 1``).
        e_max: ``> 0``; w_range: ``(w_lo, w_hi)`` with ``w_lo < w_hi < 0``.
        energy_margin: ``>= 0``, see :func:`in_icommon`.
    Returns: ``(len(gens), n, 2)`` float64 tensor of ``(e, w)``.
    """
    w_lo, w_hi = (float(v) for v in w_range)
    if not (w_lo < w_hi < 0):
        raise ValueError(f"w_range must satisfy w_lo < w_hi < 0 (I_common has w < 0); got {w_range}")
    if e_max <= 0:
        raise ValueError(f"e_max must be > 0, got {e_max}")
    if n < 1:
        raise ValueError(f"n must be >= 1, got {n}")
    out = []
    for g in gens:
        kept: list[torch.Tensor] = []
        have = 0
        for _ in range(max_rounds):
            u = torch.rand((4 * n, 2), generator=g, dtype=_F64)
            prop = torch.stack([e_max * (2.0 * u[:, 0] - 1.0), w_lo + (w_hi - w_lo) * u[:, 1]], dim=-1)
            ok = prop[in_icommon(prop, energy_margin)]
            kept.append(ok)
            have += ok.shape[0]
            if have >= n:
                break
        else:
            raise ValueError(
                f"the box |e| <= {e_max}, w in {w_range} holds (almost) no point of I_common "
                f"with energy margin {energy_margin}"
            )
        out.append(torch.cat(kept)[:n])
    return torch.stack(out)


# ----------------------------------------------------------------------------------------------
# The loss with a free bias, Eq. (26), and its gradient


def _g01(theta: torch.Tensor, b: torch.Tensor, p: Any, q: Any) -> tuple[torch.Tensor, ...]:
    pt = torch.as_tensor(p, dtype=_F64)
    qt = torch.as_tensor(q, dtype=_F64)
    for name, v in (("p", pt), ("q", qt)):
        if bool(((v <= 0) | (v >= 1)).any()):
            raise ValueError(f"{name} must lie in the open interval (0, 1)")
    D, gD = contrast_and_grad(theta)
    e = theta[..., 0]
    z0 = b - 0.5 * e * e  # logit at x_n = 0, Eq. (6)/(24)
    z1 = z0 + D
    pi1 = pt / (pt + qt)
    g0 = (1.0 - pi1) * (torch.sigmoid(z0) - pt)  # dL/dz0
    g1 = pi1 * (qt - torch.sigmoid(-z1))  # dL/dz1 = pi1 (sigma(z1) - (1 - q)), exact when sigma(z1) ~ 1
    return g0, g1, gD, e


def bias_gradient(theta: Any, b: Any, p: Any, q: Any) -> torch.Tensor:
    """``dL(theta, b)/db = E[sigma(logit_X)] - pi_1`` for the canonical (e, w) model (Eq. 26).

    Zero exactly at ``b = b*(theta)`` (Lemma 5). Returns the broadcast batch shape.
    """
    th = _theta2(theta)
    g0, g1, _, _ = _g01(th, torch.as_tensor(b, dtype=_F64), p, q)
    return g0 + g1


def joint_gradient(theta: Any, b: Any, p: Any, q: Any) -> torch.Tensor:
    """``grad L(e, w, b)`` of Eq. (26) in closed form (module docstring).

    At ``b = b*(theta)`` its (e, w) part equals :func:`tdlab.theory.markov_landscape.grad_loss`
    (Danskin); on ``e = 0`` its (e, w) part is zero for every b.

    Args:
        theta: ``(..., 2)``; b: broadcastable to ``theta.shape[:-1]``; p, q: the chain.
    Returns: ``(..., 3)`` float64, components ``(dL/de, dL/dw, dL/db)``.
    """
    th = _theta2(theta)
    bt = torch.as_tensor(b, dtype=_F64)
    g0, g1, gD, e = _g01(th, bt, p, q)
    gb = g0 + g1
    de = g1 * gD[..., 0] - e * gb
    dw = g1 * gD[..., 1]
    shape = torch.broadcast_shapes(de.shape, dw.shape, gb.shape)
    return torch.stack([de.expand(shape), dw.expand(shape), gb.expand(shape)], dim=-1)


def bias_step(theta: Any, b: Any, p: Any, q: Any, lr: float) -> torch.Tensor:
    """One gradient step on the bias alone: ``b - lr dL(theta, b)/db``. Returns the new b."""
    return torch.as_tensor(b, dtype=_F64) - lr * bias_gradient(theta, b, p, q)


def bias_excess(theta: Any, b: Any, p: Any, q: Any) -> torch.Tensor:
    """``L(theta, b) - L(theta, b*(theta))`` (nats, >= 0): what the profile loss Eq. (9) drops."""
    th = _theta2(theta)
    return loss_with_bias(th, b, p, q) - loss(th, p, q)


def descend(
    theta0: Any,
    b0: Any,
    p: Any,
    q: Any,
    *,
    lr: float,
    steps: int,
    extra_bias_steps: int | None = 1,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Gradient descent on the canonical model with a free bias, Eq. (26).

    Each iteration: one joint step on ``(e, w, b)`` with step ``lr``, then ``extra_bias_steps``
    further steps on ``b`` alone (same ``lr``): 0 is plain joint GD, 1 the seed's "one additional
    step". ``extra_bias_steps=None`` is GD on the profile loss Eq. (9): ``b = b*(theta)`` exactly at
    every iteration (``b0`` ignored), the dynamics Thms. 2/8 analyse (as a flow).

    Args:
        theta0: ``(N, 2)``; b0: ``(N,)`` or a float; p, q: floats or ``(N,)``.
        lr: step size ``> 0``; steps: iterations ``>= 0``.
    Returns: ``(theta (N, 2), b (N,))`` after ``steps`` iterations.
    """
    if lr <= 0 or steps < 0:
        raise ValueError(f"lr must be > 0 and steps >= 0; got lr={lr}, steps={steps}")
    if extra_bias_steps is not None and extra_bias_steps < 0:
        raise ValueError(f"extra_bias_steps must be >= 0 or None, got {extra_bias_steps}")
    th = _theta2(theta0).clone()
    b = torch.as_tensor(b0, dtype=_F64).expand(th.shape[:-1]).clone()
    for _ in range(steps):
        if extra_bias_steps is None:
            b = optimal_bias(th, p, q)
        g = joint_gradient(th, b, p, q)
        th = th - lr * g[..., :2]
        if extra_bias_steps is None:
            continue
        b = b - lr * g[..., 2]
        for _ in range(extra_bias_steps):
            b = bias_step(th, b, p, q, lr)
    if extra_bias_steps is None:
        b = optimal_bias(th, p, q)
    return th, b


def run_joint_flow(theta0: Any, b0: Any, p: float, q: float, t_eval: Any, **integrator: Any) -> FlowResult:
    """Gradient flow of Eq. (26) in ``(e, w, b)`` jointly, with :func:`joint_gradient`.

    Args:
        theta0: ``(N, 2)``; b0: ``(N,)`` or float; p, q: floats; t_eval: ``(K,)`` save times.
        **integrator: forwarded to :func:`tdlab.theory.gradient_flow.gradient_flow` (default here
            ``method="rosenbrock23", rtol=1e-7, atol=1e-9, g_tol=1e-11``).
    Returns: :class:`~tdlab.theory.gradient_flow.FlowResult` with ``(N, 3)`` points ``(e, w, b)``.
    """
    th = _theta2(theta0)
    if th.ndim != 2:
        raise ValueError("theta0 must be (N, 2)")
    b = torch.as_tensor(b0, dtype=_F64).expand(th.shape[0])
    x0 = torch.cat([th, b[:, None]], dim=1)

    def gfn(x: torch.Tensor) -> torch.Tensor:
        return joint_gradient(x[:, :2], x[:, 2], p, q)

    opts: dict[str, Any] = {"method": "rosenbrock23", "rtol": 1e-7, "atol": 1e-9, "g_tol": 1e-11}
    opts.update(integrator)
    return gradient_flow(gfn, x0, t_eval, **opts)


def limit_kind(theta: Any, p: float, q: float, *, atol: float = 1e-3) -> torch.Tensor:
    """Which critical set an end point ``(e, w)`` has reached (Thm. 1), at tolerance ``atol``:
    :func:`tdlab.theory.markov_landscape.classify_critical`, with points within ``atol`` of neither
    set (still moving) coded ``NONE``. Returns int64
    :class:`tdlab.theory.markov_landscape.CriticalKind` codes."""
    return classify_critical(_theta2(theta), p, q, atol=atol)


def bias_step_basins(p: float, q: float, cfg: BiasStepSpec, gen: torch.Generator) -> dict[str, torch.Tensor]:
    """Basins reached by gradient descent on the canonical (e, w) model with a free bias (Eq. 26).

    Initial points uniform in ``|e| <= e_max``, ``|w| <= w_max``, bias ``b0``; descent for ``steps``
    iterations of step ``lr`` with 0 and 1 extra bias steps per iteration and on the profile loss
    (:func:`descend`); end points classified at ``atol`` (:func:`limit_kind`). Sec. 3's "one additional
    step is usually sufficient": how often ``k1`` (and ``k0``) end where ``profile`` does.

    Returns: dict with ``theta0`` ``(n, 2)`` and int64 ``(n,)`` codes ``theory`` (Thm. 2/8's basin of
    the profile *flow*), ``k0``, ``k1``, ``profile``.
    """
    n = cfg.points
    u = torch.rand((n, 2), generator=gen, dtype=torch.float64) * 2 - 1
    theta0 = u * torch.tensor([cfg.e_max, cfg.w_max], dtype=torch.float64)
    out = {"theta0": theta0, "theory": predict_basin(theta0, p, q)}
    for name, k in (("k0", 0), ("k1", 1), ("profile", None)):
        th, _ = descend(theta0, cfg.b0, p, q, lr=cfg.lr, steps=cfg.steps, extra_bias_steps=k)
        out[name] = limit_kind(th, p, q, atol=cfg.atol)
    return out


def bias_step_agreement(
    k0: np.ndarray, k1: np.ndarray, profile: np.ndarray, theory: np.ndarray
) -> tuple[np.ndarray, dict[str, float | int]]:
    """How descent with 0 and 1 extra bias steps agrees with profile descent, point by point (Sec. 3's "one
    additional step is usually sufficient"), from :func:`bias_step_basins`'s codes (``CriticalKind`` values,
    any numeric dtype, ``(n,)`` each).

    Returns: ``(agree_k1, summary)``: the float indicators ``k1 == profile`` and a dict of the shares
    ``agree_k1_with_profile``, ``agree_k0_with_profile``, ``profile_agrees_with_flow_theory`` (Thm. 2/8's
    basin of the flow), ``unsettled_fraction`` (k1 or profile ends at no critical set), and the counts
    ``k0_disagreements``, ``k0_disagreements_fixed_by_one_step``, ``k1_local_where_profile_global``,
    ``k0_local_where_profile_global``, ``unclassified_k1``.
    """
    glob, local, none = int(CriticalKind.GLOBAL_MIN), int(CriticalKind.LOCAL_MIN), int(CriticalKind.NONE)
    agree1, agree0 = (k1 == profile).astype(float), (k0 == profile).astype(float)
    unsettled = float(np.mean((k1 == none) | (profile == none)))
    wrong0 = k0 != profile
    return agree1, {
        "agree_k1_with_profile": float(agree1.mean()),
        "agree_k0_with_profile": float(agree0.mean()),
        "profile_agrees_with_flow_theory": float(np.mean(profile == theory)),
        "unsettled_fraction": unsettled,
        "k0_disagreements": int(wrong0.sum()),
        "k0_disagreements_fixed_by_one_step": int(np.sum(wrong0 & (k1 == profile))),
        "k1_local_where_profile_global": int(np.sum((k1 == local) & (profile == glob))),
        "k0_local_where_profile_global": int(np.sum((k0 == local) & (profile == glob))),
        "unclassified_k1": int(np.sum(k1 == none)),
    }


def bias_step_from_logits(
    s: torch.Tensor, targets: torch.Tensor, b: torch.Tensor, lr: float
) -> dict[str, torch.Tensor]:
    """One gradient step on the output bias alone of a binary next-token model whose logit is ``s + b``
    (Sec. 3: "one additional step is usually sufficient"), against the bias's optimum given ``s``.

    ``L(b) = mean softplus(-(2y-1)(s + b))`` (the cross-entropy of ``P(y = 1) = σ(s + b)``), ``b* = argmin L``
    (Newton; L is convex in b), ``b1 = b - lr L'(b)``.

    Args:
        s: ``(E, B, T)`` float64 bias-free logits of ``P(y = 1)``; targets: ``(E, B, T)`` next tokens in
            ``{0, 1}``; b: ``(E,)`` float64, the bias before the step; lr: the step's size.
    Returns: dict of ``(E,)`` float64 tensors: ``excess_before = L(b) - L(b*)``, ``excess_after =
    L(b1) - L(b*)`` (nats), ``b``, ``b_star``, ``b_after``.
    """
    sign = 2.0 * targets.double() - 1.0

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
    return {"excess_before": L(b) - low, "excess_after": L(b1) - low, "b": b, "b_star": bs, "b_after": b1}

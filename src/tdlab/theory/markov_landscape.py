"""Exact loss landscape and gradient flow of the canonical low-rank transformer on a binary Markov chain.

Seed 000 (Local to Global), Secs. 2-4 and Apps. A, F, G, H. Data: a stationary binary first-order
chain with switching probabilities ``p = P(1|0)``, ``q = P(0|1)`` (see :mod:`tdlab.tasks.markov`).
Parameters (Eq. 2):

* two-parameter model ``theta = (e, w)`` (embedding, feed-forward weight), Eqs. 3/6-9;
* three-parameter model ``theta = (e, w, a)`` with the (linear-)attention scalar ``a``, Eq. 45.

Everything here is a plain function of tensors: ``theta`` has shape ``(..., 2)`` or ``(..., 3)`` (the
last dimension selects the model), ``p`` and ``q`` are floats or tensors broadcastable to
``theta.shape[:-1]``; all computations are float64.

Structure used throughout. Because ``x_n`` is binary, the logit of either model is affine in ``x_n``::

    logit(x_n) = b + c0(theta) + D(theta) * x_n,

and every position is stationary (``x_1 ~ pi``), so the loss Eq. (8) is *exactly* the finite sum over
``(X, Y) = (x_n, x_{n+1}) in {0,1}^2`` of Lemma 2/6 (independent of N). The optimal bias b* absorbs
``c0``, hence ``L(theta) = Phi(D(theta))`` with the profile loss of a one-slope logistic regression

    Phi(D) = min_beta E[ l_log((2Y - 1)(beta + D X)) ],   (Lemma 5 gives the argmin beta*(D))

so the gradient is ``Phi'(D) grad D`` (Danskin, Lemma 7), ``Phi'(D) = pi_1 (sigma(beta* + D) - (1-q))``,
``Phi`` is convex with its minimum at ``D* = log((1-p)(1-q)/(pq))``. The "contrast" D is

* ``e^2 (1 + 2 w|w|)``            for (e, w)     (Eq. 3 / 24 / 34);
* ``e^2 (1 + a e^2)(1 + 2 w|w|)`` for (e, w, a)  (Eq. 45 / 49).

Critical points are ``{D = D*}`` (global minima) or ``{grad D = 0}`` (the w-axis e = 0, plus
Thm. 10's ``Theta_station``), which is Thm. 1 / Thm. 10; the energies Eq. (4) and Eq. (10) are
conserved because the flow is ``-Phi'(D) grad D`` and ``grad D`` is orthogonal to ``grad E``
(Lemma 1 / Lemma 14).

Seed ambiguities resolved here (each is checked numerically in tests/theory/test_markov_landscape.py):

1. Eq. (3) writes ``e^2 (1 + 2w|w|) x_n`` but Eqs. (6), (9) write ``e^2 (1 + 2w|w| x_n)``. Only the
   Eq. (3) placement makes Thm. 1(i) hold (it is also what the FF derivation Eqs. 21-24 gives).
   Default ``form="eq3"``; ``form="eq6"`` implements the other reading, under which the Thm. 1(i) set
   is *not* critical.
2. App. A.2 writes the x_n-independent logit term as ``w|w(1 + a e^2)|`` (= ``w|w||1 + a e^2|``, what
   the ReLU derivation in App. H.1 actually produces) while Eq. (45) writes ``w|w|(1 + a e^2)``. The
   term does not depend on x_n, so b* absorbs it: ``L(theta)``, its gradient, the flow, critical
   sets and energy are identical. It changes only ``b*`` and ``L(theta, b)`` when ``1 + a e^2 < 0``.
   Default ``form="eq45"``; ``form="abs"`` is the A.2 / H.1 reading.
3. Thm. 1 lists Theta_sad as a point while Thm. 10 writes "a set of local minima/maxima"; we classify
   Theta_station (Thm. 10) separately (:attr:`CriticalKind.STATIONARY`): there D = 0 and D takes
   both signs nearby while ``Phi'(0) != 0``, so these points are saddles in the usual sense.
4. App. M.5's linearisation drops a factor 2: near e = 0 the flow is ``de/dt = -2 pi0 pi1 (p+q-1)
   (1 + 2w|w|) e`` (from Eq. 36); the Hessian of Lemma 8 is what we follow.
"""

from __future__ import annotations

import math
from enum import IntEnum
from typing import Any

import numpy as np
import torch

__all__ = [
    "ENERGY_SADDLE",
    "SADDLE_W",
    "CriticalKind",
    "autograd_grad_loss",
    "basin_boundaries",
    "classify_critical",
    "contrast",
    "contrast_and_grad",
    "critical_loci",
    "critical_loci_3",
    "energy",
    "gaussian_basin_probability",
    "gaussian_basin_probability_mc",
    "grad_loss",
    "logit_offset",
    "loss",
    "loss_with_bias",
    "optimal_bias",
    "optimal_contrast",
    "optimal_intercept",
    "predict_basin",
    "predict_limit",
    "profile_loss",
    "profile_loss_slope",
    "run_flow",
]

SADDLE_W = -1.0 / math.sqrt(2.0)
"""w-coordinate of the saddle ``(0, -1/sqrt 2)`` of Thm. 1(iv), where ``1 + 2w|w| = 0``."""

ENERGY_SADDLE = -(1.0 + math.log(2.0)) / 2.0
"""``E_sad = E(0, -1/sqrt 2) = -(1 + log 2)/2`` (Sec. 4, before Thm. 2)."""

_F64 = torch.float64


class CriticalKind(IntEnum):
    """Integer codes for critical sets (Thm. 1, Thm. 10) and for GF limits (Thm. 2, Thm. 8).

    ``NONE``: not a critical point (classification) / no limit identified (flow endpoints).
    """

    NONE = 0
    GLOBAL_MIN = 1
    LOCAL_MIN = 2
    SADDLE = 3
    LOCAL_MAX = 4
    STATIONARY = 5


# ----------------------------------------------------------------------------------------------
# Inputs


def _theta(theta: Any) -> torch.Tensor:
    t = torch.as_tensor(theta)
    if not t.is_floating_point() or t.dtype != _F64:
        t = t.to(_F64)
    if t.ndim == 0 or t.shape[-1] not in (2, 3):
        raise ValueError(f"theta must have shape (..., 2) for (e, w) or (..., 3) for (e, w, a); got {tuple(t.shape)}")
    return t


def _pq(p: Any, q: Any, like: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    pt = torch.as_tensor(p, dtype=_F64, device=like.device)
    qt = torch.as_tensor(q, dtype=_F64, device=like.device)
    for name, v in (("p", pt), ("q", qt)):
        if bool(((v <= 0) | (v >= 1)).any()):
            raise ValueError(f"{name} must lie in the open interval (0, 1)")
    return pt, qt


def _form(theta: torch.Tensor, form: str | None) -> str:
    dim = theta.shape[-1]
    if form is None:
        return "eq3" if dim == 2 else "eq45"
    allowed = ("eq3", "eq6") if dim == 2 else ("eq45", "abs")
    if form not in allowed:
        raise ValueError(f"form={form!r} is not valid for a {dim}-parameter theta; use one of {allowed}")
    return form


def optimal_contrast(p: Any, q: Any) -> torch.Tensor:
    """``D* = log((1-p)(1-q) / (pq))``: the contrast of the Bayes predictor, ``logit(1) - logit(0)``
    of ``P(x_{n+1} = 1 | x_n)``; Theta_* = {D(theta) = D*} (Thm. 1(i), Eq. 49). Sign = sign(1-p-q).

    Returns: float64 tensor of the broadcast shape of (p, q).
    """
    pt, qt = _pq(p, q, torch.empty(0))
    return torch.log1p(-pt) + torch.log1p(-qt) - torch.log(pt) - torch.log(qt)


# ----------------------------------------------------------------------------------------------
# The model: logit(x) = b + c0(theta) + D(theta) x


def contrast_and_grad(theta: Any, form: str | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """Contrast ``D = logit(x_n=1) - logit(x_n=0)`` and its gradient in theta.

    Args:
        theta: ``(..., 2)`` = (e, w) or ``(..., 3)`` = (e, w, a).
        form: 2-param: ``"eq3"`` (default, ``D = e^2(1+2w|w|)``) or ``"eq6"`` (the Eq. 6 typo reading,
            ``D = 2 e^2 w|w|``); 3-param: ``"eq45"`` / ``"abs"`` (same D; see module docstring).
    Returns:
        ``D`` of shape ``(...)`` and ``grad D`` of shape ``(..., dim)``.
    """
    th = _theta(theta)
    form = _form(th, form)
    e, w = th[..., 0], th[..., 1]
    s = w * w.abs()  # w|w|, C^1 with derivative 2|w|
    u = 1.0 + 2.0 * s
    e2 = e * e
    if th.shape[-1] == 2:
        if form == "eq3":
            D = e2 * u
            g = torch.stack([2.0 * e * u, 4.0 * e2 * w.abs()], dim=-1)
        else:  # eq6: logit = e^2 (1 + 2 w|w| x) + b - e^2/2
            D = 2.0 * e2 * s
            g = torch.stack([4.0 * e * s, 4.0 * e2 * w.abs()], dim=-1)
        return D, g
    a = th[..., 2]
    m = 1.0 + a * e2
    D = e2 * m * u
    # d/de [e^2 + a e^4] = 2e (1 + 2 a e^2): Lemma 13's two e-terms summed.
    g = torch.stack([2.0 * e * (1.0 + 2.0 * a * e2) * u, 4.0 * e2 * m * w.abs(), e2 * e2 * u], dim=-1)
    return D, g


def contrast(theta: Any, form: str | None = None) -> torch.Tensor:
    """``D(theta)`` only; see :func:`contrast_and_grad`. Returns shape ``(...)``."""
    return contrast_and_grad(theta, form)[0]


def logit_offset(theta: Any, form: str | None = None) -> torch.Tensor:
    """``c0(theta) = logit(x_n = 0) - b``.

    2-param: ``-e^2/2`` (Eq. 3/24; ``+e^2/2`` under ``form="eq6"``). 3-param (Eq. 45):
    ``e^2[-(1+ae^2)(1+2w|w|)/2 + w|w|(1+ae^2)]``, or with ``|1+ae^2|`` in the last factor under
    ``form="abs"`` (App. A.2 / H.1). Returns shape ``(...)``.
    """
    th = _theta(theta)
    form = _form(th, form)
    e, w = th[..., 0], th[..., 1]
    e2 = e * e
    if th.shape[-1] == 2:
        return -0.5 * e2 if form == "eq3" else 0.5 * e2
    s = w * w.abs()
    m = 1.0 + th[..., 2] * e2
    last = m if form == "eq45" else m.abs()
    return e2 * (-0.5 * m * (1.0 + 2.0 * s) + s * last)


def optimal_intercept(D: Any, p: Any, q: Any) -> torch.Tensor:
    """``beta*(D) = argmin_beta E[l_log((2Y-1)(beta + D X))]`` = ``logit(x_n = 0)`` at the optimal bias.

    Lemma 5 / Eq. (33): with ``A = exp(D)``, ``exp(beta*) = [p/q - 1 + sqrt((p/q-1)^2 + 4 (p/q) A)]/(2A)``,
    the positive root of ``qA s^2 + (q-p) s - p = 0``. Evaluated in log space with the
    cancellation-free root for each sign of ``q - p`` so that any D in float64 range works.

    Returns: tensor of the broadcast shape of (D, p, q).
    """
    Dt = torch.as_tensor(D, dtype=_F64)
    pt, qt = _pq(p, q, Dt)
    r = qt - pt
    lr = torch.log(r.abs().clamp_min(torch.finfo(_F64).tiny))
    log_s = 0.5 * torch.logaddexp(2.0 * lr, math.log(4.0) + torch.log(pt) + torch.log(qt) + Dt)
    m = torch.logaddexp(lr, log_s)  # log(|r| + sqrt(r^2 + 4 p q A))
    # r >= 0: s = 2p / (r + S);  r < 0: s = (|r| + S) / (2 q A).
    return torch.where(r >= 0, math.log(2.0) + torch.log(pt) - m, m - math.log(2.0) - torch.log(qt) - Dt)


def _softplus(z: torch.Tensor) -> torch.Tensor:
    # log(1 + e^z) without overflow and with the exact derivative sigma(z) everywhere
    # (F.softplus switches to the identity above z = 20, an O(e^-20) kink).
    return torch.logaddexp(torch.zeros_like(z), z)


def _expected_logistic(z0: torch.Tensor, z1: torch.Tensor, p: torch.Tensor, q: torch.Tensor) -> torch.Tensor:
    """``E[l_log((2Y-1) logit_X)]`` with ``logit_0 = z0``, ``logit_1 = z1``, X ~ pi, Y | X ~ P (Lemma 2)."""
    pi1 = p / (p + q)  # tensor form of tdlab.tasks.markov.stationary
    pi0 = 1.0 - pi1
    # l_log((2Y-1) z) = softplus(-z) if Y = 1 else softplus(z); P(Y=1|X=0) = p, P(Y=1|X=1) = 1-q.
    return pi0 * (p * _softplus(-z0) + (1.0 - p) * _softplus(z0)) + pi1 * (
        (1.0 - q) * _softplus(-z1) + q * _softplus(z1)
    )


def profile_loss(D: Any, p: Any, q: Any) -> torch.Tensor:
    """``Phi(D) = min_b L`` for logits ``beta + D x_n``: the loss as a function of the contrast alone.

    ``Phi(D*) = H(x_{n+1} | x_n)`` (entropy rate) and ``Phi(0) = H(x_{n+1})`` (Thm. 1 loss values).
    Returns: tensor of the broadcast shape of (D, p, q).
    """
    Dt = torch.as_tensor(D, dtype=_F64)
    pt, qt = _pq(p, q, Dt)
    beta = optimal_intercept(Dt, pt, qt)
    return _expected_logistic(beta, beta + Dt, pt, qt)


def profile_loss_slope(D: Any, p: Any, q: Any) -> torch.Tensor:
    """``Phi'(D) = pi_1 (sigma(beta*(D) + D) - (1 - q))`` = ``E_X[(f1 X + f2) X]`` of Lemma 7.

    ``Phi'(0) = pi0 pi1 (p + q - 1)`` (from Eq. 36). Returns the broadcast shape of (D, p, q).
    """
    Dt = torch.as_tensor(D, dtype=_F64)
    pt, qt = _pq(p, q, Dt)
    beta = optimal_intercept(Dt, pt, qt)
    pi1 = pt / (pt + qt)
    # sigma(z) - (1-q) = q - sigma(-z): exact when sigma(z) rounds to 1.
    return pi1 * (qt - torch.sigmoid(-(beta + Dt)))


def optimal_bias(theta: Any, p: Any, q: Any, form: str | None = None) -> torch.Tensor:
    """``b*(theta) = argmin_b L(theta, b)`` (Lemma 5 for (e, w); Lemma 13 "pi1 f1 + f2 = 0" for
    (e, w, a), solved in closed form the same way).

    Returns: shape ``theta.shape[:-1]`` broadcast with (p, q).
    """
    th = _theta(theta)
    D = contrast(th, form)
    return optimal_intercept(D, p, q) - logit_offset(th, form)


def loss_with_bias(theta: Any, b: Any, p: Any, q: Any, form: str | None = None) -> torch.Tensor:
    """Population cross-entropy ``L(theta, b)`` in nats, Eq. (8)/(26)/(31) and Eq. (44).

    Exact: the average over positions of Eq. (1) equals the expectation over one stationary pair
    ``(x_n, x_{n+1})`` (Lemma 2), a sum of four terms. Returns the broadcast batch shape.
    """
    th = _theta(theta)
    pt, qt = _pq(p, q, th)
    D = contrast(th, form)
    z0 = torch.as_tensor(b, dtype=_F64) + logit_offset(th, form)
    return _expected_logistic(z0, z0 + D, pt, qt)


def loss(theta: Any, p: Any, q: Any, form: str | None = None) -> torch.Tensor:
    """``L(theta) = L(theta, b*(theta))``: Eq. (3)/(9)/(34) for (e, w), Eq. (45) for (e, w, a).

    Args:
        theta: ``(..., 2)`` or ``(..., 3)``.
        p: float or tensor broadcastable to ``theta.shape[:-1]``.
        q: the same.
        form: see :func:`contrast_and_grad`.
    Returns:
        float64 tensor of the broadcast batch shape, in nats. Differentiable (autograd).
    """
    th = _theta(theta)
    return profile_loss(contrast(th, form), p, q)


def _slope_consts(p: torch.Tensor, q: torch.Tensor) -> tuple[torch.Tensor, ...]:
    """Per-chain constants of :func:`_slope_fast`: ``(pi1 q, p + q, (q - p)^2, 4 p q)``."""
    return (p * q / (p + q), p + q, (q - p) ** 2, 4.0 * p * q)


def _slope_fast(D: torch.Tensor, c: tuple[torch.Tensor, ...]) -> torch.Tensor:
    # Phi'(D) without logs: by Lemma 5, sigma(beta* + D) = (p - q + S)/(p + q + S) with
    # S = sqrt((q-p)^2 + 4pq e^D), so Phi'(D) = pi1 q (1 - 2/(p + q + S)). Two transcendental
    # calls instead of ~8, and e^D = inf (D > 709) gives the exact limit pi1 q.
    S = torch.sqrt(c[2] + c[3] * torch.exp(D))
    return c[0] * (1.0 - 2.0 / (c[1] + S))


def grad_loss(theta: Any, p: Any, q: Any, form: str | None = None) -> torch.Tensor:
    """Closed-form ``grad L(theta)`` = ``Phi'(D) grad D``: Lemma 7 for (e, w),
    ``(dL/de, dL/dw) = E[(f1X+f2)X] (2(1+2w|w|)e, 4e^2|w|)``; Lemma 13 for (e, w, a).

    Returns: ``(..., dim)`` with the broadcast batch shape of theta and (p, q).
    """
    th = _theta(theta)
    pt, qt = _pq(p, q, th)
    D, gD = contrast_and_grad(th, form)
    return _slope_fast(D, _slope_consts(pt, qt)).unsqueeze(-1) * gD


def autograd_grad_loss(theta: Any, p: Any, q: Any, form: str | None = None) -> torch.Tensor:
    """``grad L(theta)`` by autograd through :func:`loss` (including through b*(theta)); an
    independent check of :func:`grad_loss`. Returns ``(..., dim)``."""
    with torch.enable_grad():
        th = _theta(theta).detach().clone().requires_grad_(True)
        (g,) = torch.autograd.grad(loss(th, p, q, form).sum(), th)
    return g


# ----------------------------------------------------------------------------------------------
# Energy (Lemma 1 / Eq. 4, Lemma 14 / Eq. 10)


def energy(theta: Any) -> torch.Tensor:
    """``E(e, w) = e^2 - (w^2 + sign(w) log|w|)`` (Eq. 4); ``E(e, w, a) = ... - 2a^2`` (Eq. 10/51).

    Conserved along GF off the e-axis / ea-plane (Lemma 1, Lemma 14), for the default forms.
    Returns shape ``(...)``; NaN where ``w = 0`` (undefined there: the e-axis is invariant instead).
    """
    th = _theta(theta)
    e, w = th[..., 0], th[..., 1]
    E = e * e - (w * w + torch.sign(w) * torch.log(w.abs()))
    E = torch.where(w == 0, torch.full_like(E, math.nan), E)
    if th.shape[-1] == 3:
        E = E - 2.0 * th[..., 2] ** 2
    return E


def _W(w: torch.Tensor) -> torch.Tensor:
    """``w^2 + sign(w) log|w|`` = ``-f(w)`` of Lemma 12 (energy on the w-axis, negated)."""
    return w * w + torch.sign(w) * torch.log(w.abs())


# ----------------------------------------------------------------------------------------------
# Critical sets (Thm. 1, Thm. 10)


def classify_critical(theta: Any, p: Any, q: Any, *, atol: float = 1e-8, form: str | None = None) -> torch.Tensor:
    """Which critical set of Thm. 1 (2-param) / Thm. 10 (3-param) each point belongs to.

    Membership is tested on the defining equations with absolute tolerance ``atol``:
    Theta_* ``|D - D*| <= atol``; on the w-axis ``|e| <= atol``: Theta_min if
    ``(p+q-1)(1+2w|w|) > atol``, Theta_max if ``< -atol``, Theta_sad if ``|1+2w|w|| <= atol``;
    3-param Theta_station: ``|1+ae^2| <= atol`` and ``|1+2w|w|| <= atol`` (e != 0). Everything else
    is ``NONE`` (not critical). Used with a loose ``atol`` it identifies the limit of a GF run.
    Requires p + q != 1 (the theorems' assumption).

    Returns: int64 tensor of :class:`CriticalKind` codes, broadcast batch shape.
    """
    th = _theta(theta)
    pt, qt = _pq(p, q, th)
    if bool(((pt + qt - 1.0) == 0).any()):
        raise ValueError("Thm. 1 / Thm. 10 assume p + q != 1")
    D = contrast(th, form)
    Ds = optimal_contrast(pt, qt)
    e, w = th[..., 0], th[..., 1]
    u = 1.0 + 2.0 * w * w.abs()
    side = torch.sign(pt + qt - 1.0)
    shape = torch.broadcast_shapes(D.shape, Ds.shape)
    code = torch.full(shape, int(CriticalKind.NONE), dtype=torch.long, device=th.device)
    on_axis = (e.abs() <= atol).expand(shape)
    su = (side * u).expand(shape)
    code = torch.where(on_axis & (su > atol), int(CriticalKind.LOCAL_MIN), code)
    code = torch.where(on_axis & (su < -atol), int(CriticalKind.LOCAL_MAX), code)
    code = torch.where(on_axis & (su.abs() <= atol), int(CriticalKind.SADDLE), code)
    if th.shape[-1] == 3:
        m = 1.0 + th[..., 2] * e * e
        station = (~on_axis) & (m.abs() <= atol).expand(shape) & (u.abs() <= atol).expand(shape)
        code = torch.where(station, int(CriticalKind.STATIONARY), code)
    code = torch.where(((D - Ds).abs() <= atol).expand(shape), int(CriticalKind.GLOBAL_MIN), code)
    return code


def _segments(mask: np.ndarray) -> list[tuple[int, int]]:
    """Maximal runs of True in a 1-D mask as (start, stop) index pairs."""
    runs, start = [], None
    for i, v in enumerate(mask):
        if v and start is None:
            start = i
        elif not v and start is not None:
            runs.append((start, i))
            start = None
    if start is not None:
        runs.append((start, len(mask)))
    return runs


def critical_loci(
    p: float, q: float, *, w_lim: tuple[float, float] = (-3.0, 3.0), e_lim: float = 3.0, n: int = 1001
) -> dict[str, list[np.ndarray]]:
    """Loci of Thm. 1's critical sets in the (e, w) plane, for plotting (cf. Fig. 1a/c).

    Args:
        p: chain switching probability 0 → 1.
        q: chain switching probability 1 → 0; ``p + q != 1``.
        w_lim: w range; e_lim: curves are clipped to ``|e| <= e_lim``; n: samples along w.
    Returns:
        dict name -> list of ``(M, 2)`` float64 numpy arrays of ``(e, w)`` points (one per connected
        piece): ``"global_min"`` (the two branches ``e = +-sqrt(D*/(1+2w|w|))``), ``"local_min"`` and
        ``"local_max"`` (segments of the w-axis), ``"saddle"`` (the point ``(0, -1/sqrt 2)``).
    """
    if p + q == 1:
        raise ValueError("Thm. 1 assumes p + q != 1")
    w = np.linspace(w_lim[0], w_lim[1], n)
    u = 1.0 + 2.0 * w * np.abs(w)
    Ds = float(optimal_contrast(p, q))
    with np.errstate(divide="ignore", invalid="ignore"):
        e2 = Ds / u
    ok = np.isfinite(e2) & (e2 > 0) & (e2 <= e_lim**2)
    out: dict[str, list[np.ndarray]] = {"global_min": [], "local_min": [], "local_max": [], "saddle": []}
    for a, b in _segments(ok):
        for sgn in (1.0, -1.0):
            out["global_min"].append(np.stack([sgn * np.sqrt(e2[a:b]), w[a:b]], axis=-1))
    side = np.sign(p + q - 1.0)
    for key, mask in (("local_min", side * u > 0), ("local_max", side * u < 0)):
        for a, b in _segments(mask):
            out[key].append(np.stack([np.zeros(b - a), w[a:b]], axis=-1))
    if w_lim[0] <= SADDLE_W <= w_lim[1]:
        out["saddle"].append(np.array([[0.0, SADDLE_W]]))
    return out


def basin_boundaries(
    p: float, q: float, *, w_lim: tuple[float, float] = (-3.0, 3.0), e_lim: float = 3.0, n: int = 1001
) -> dict[str, list[np.ndarray]]:
    """Boundaries between the basins of Thm. 2 (p+q>1) / Thm. 8 (p+q<1), for plotting (Fig. 1b/d).

    Returns:
        dict name -> list of ``(M, 2)`` numpy arrays of ``(e, w)``: ``"saddle"`` = I_sad, the two
        separatrices ``e = +-g(w)``, ``g(w) = sqrt(w^2 - log(-w) + E_sad)``, on ``w in [-1/sqrt2, 0)``
        (p+q>1) or ``w <= -1/sqrt2`` (p+q<1); ``"local_max"`` = I_max (a w-axis segment);
        ``"e_axis"``: the invariant e-axis (w = 0), part of I_min (p+q>1) or of I_* (p+q<1).
    """
    if p + q == 1:
        raise ValueError("Thms. 2/8 assume p + q != 1")
    side = p + q > 1
    w = np.linspace(w_lim[0], w_lim[1], n)
    with np.errstate(divide="ignore", invalid="ignore"):
        g2 = w * w - np.log(-w) + ENERGY_SADDLE
    rng = ((w >= SADDLE_W) & (w < 0)) if side else (w <= SADDLE_W)
    ok = rng & np.isfinite(g2) & (g2 >= 0) & (g2 <= e_lim**2)
    out: dict[str, list[np.ndarray]] = {"saddle": [], "local_max": [], "e_axis": []}
    for a, b in _segments(ok):
        for sgn in (1.0, -1.0):
            out["saddle"].append(np.stack([sgn * np.sqrt(np.maximum(g2[a:b], 0.0)), w[a:b]], axis=-1))
    mx = (w < SADDLE_W) if side else (w > SADDLE_W)
    for a, b in _segments(mx):
        out["local_max"].append(np.stack([np.zeros(b - a), w[a:b]], axis=-1))
    if w_lim[0] <= 0 <= w_lim[1]:
        ee = np.linspace(-e_lim, e_lim, n)
        out["e_axis"].append(np.stack([ee, np.zeros(n)], axis=-1))
    return out


def critical_loci_3(
    p: float,
    q: float,
    *,
    w_lim: tuple[float, float] = (-2.0, 2.0),
    a_lim: tuple[float, float] = (-2.0, 2.0),
    e_lim: float = 3.0,
    n: int = 101,
) -> dict[str, np.ndarray]:
    """Point clouds / curves of Thm. 10's critical sets in (e, w, a), for plotting (cf. Fig. 2).

    Returns:
        dict name -> ``(M, 3)`` float64 numpy array of ``(e, w, a)``:
        ``"global_min"``: Theta_* sampled on an n x n (w, a) grid, every real root ``e`` of
        ``e^2(1 + a e^2)(1+2w|w|) = D*`` (a quadratic in ``s = e^2``) with ``|e| <= e_lim``;
        ``"local_min"`` / ``"local_max"``: the grid points of the plane ``e = 0`` on each side of
        ``w = -1/sqrt 2``; ``"saddle"``: the line ``(0, -1/sqrt 2, a)``; ``"stationary"``: the two
        curves ``(e, -1/sqrt 2, -1/e^2)`` with ``|e|`` in ``[1/sqrt(max|a|), e_lim]``.
    """
    if p + q == 1:
        raise ValueError("Thm. 10 assumes p + q != 1")
    Ds = float(optimal_contrast(p, q))
    W, A = np.meshgrid(np.linspace(w_lim[0], w_lim[1], n), np.linspace(a_lim[0], a_lim[1], n), indexing="ij")
    W, A = W.ravel(), A.ravel()
    U = 1.0 + 2.0 * W * np.abs(W)
    pts = []
    with np.errstate(divide="ignore", invalid="ignore"):
        c = Ds / U  # a s^2 + s - c = 0
        lin = np.abs(A) < 1e-12
        disc = 1.0 + 4.0 * A * c
        sq = np.sqrt(np.where(disc >= 0, disc, np.nan))
        roots = [np.where(lin, c, (-1.0 + sq) / (2.0 * A)), np.where(lin, np.nan, (-1.0 - sq) / (2.0 * A))]
    for s in roots:
        ok = np.isfinite(s) & (s > 0) & (s <= e_lim**2) & np.isfinite(U) & (U != 0)
        for sgn in (1.0, -1.0):
            pts.append(np.stack([sgn * np.sqrt(s[ok]), W[ok], A[ok]], axis=-1))
    side = np.sign(p + q - 1.0)
    out = {"global_min": np.concatenate(pts, axis=0)}
    z = np.zeros_like(W)
    out["local_min"] = np.stack([z, W, A], axis=-1)[side * U > 0]
    out["local_max"] = np.stack([z, W, A], axis=-1)[side * U < 0]
    a_line = np.linspace(a_lim[0], a_lim[1], n)
    out["saddle"] = np.stack([np.zeros(n), np.full(n, SADDLE_W), a_line], axis=-1)
    amax = max(abs(a_lim[0]), abs(a_lim[1]))
    e_lo = 1.0 / math.sqrt(amax) if amax > 0 else e_lim
    ee = np.linspace(e_lo, e_lim, n) if e_lo < e_lim else np.empty(0)
    st = [np.stack([sgn * ee, np.full(ee.shape, SADDLE_W), -1.0 / ee**2], axis=-1) for sgn in (1.0, -1.0)]
    out["stationary"] = np.concatenate(st, axis=0)
    return out


# ----------------------------------------------------------------------------------------------
# Basins of attraction (Thm. 2, Thm. 8) and limits


def predict_basin(theta0: Any, p: Any, q: Any) -> torch.Tensor:
    """Which critical set gradient flow from ``theta0 = (e0, w0)`` converges to (Thm. 2 / Thm. 8).

    p + q > 1 (Thm. 2): LOCAL_MIN on I_min = {w >= 0} u {w in (-1/sqrt2, 0), E < E_sad}
    (``|e| < g(w)`` is ``E < E_sad``); SADDLE on I_sad = {w in [-1/sqrt2, 0), E = E_sad};
    LOCAL_MAX on I_max = {e = 0, w < -1/sqrt2}; GLOBAL_MIN elsewhere.
    p + q < 1 (Thm. 8): LOCAL_MIN on I_min = {w < -1/sqrt2, E < E_sad} (and on Theta_min itself,
    e = 0, w < -1/sqrt2, which the theorem's open e-interval already contains); SADDLE on
    {w <= -1/sqrt2, E = E_sad}; LOCAL_MAX on {e = 0, w > -1/sqrt2}; GLOBAL_MIN elsewhere (including
    the e-axis minus the origin).
    Boundaries are decided exactly (no tolerance); they have measure zero.

    Args:
        theta0: ``(..., 2)`` initial points (2-param model only: App. H leaves the 3-param basins open).
        p: broadcastable to ``theta0.shape[:-1]``.
        q: the same; ``p + q != 1``.
    Returns:
        int64 :class:`CriticalKind` codes, broadcast batch shape.
    """
    th = _theta(theta0)
    if th.shape[-1] != 2:
        raise ValueError("basins are characterised for theta = (e, w) only (Thms. 2, 8; see App. H)")
    pt, qt = _pq(p, q, th)
    if bool(((pt + qt - 1.0) == 0).any()):
        raise ValueError("Thms. 2/8 assume p + q != 1")
    e, w = th[..., 0], th[..., 1]
    big = pt + qt > 1.0
    E = torch.where(w == 0, torch.full_like(e, math.inf), e * e - _W(torch.where(w == 0, torch.ones_like(w), w)))
    below = E < ENERGY_SADDLE
    at = E == ENERGY_SADDLE
    on_axis = e == 0
    G, LMIN, SAD, LMAX = (
        int(c) for c in (CriticalKind.GLOBAL_MIN, CriticalKind.LOCAL_MIN, CriticalKind.SADDLE, CriticalKind.LOCAL_MAX)
    )
    # p + q > 1
    c_big = torch.full_like(w, G, dtype=torch.long)
    c_big = torch.where((w < 0) & (w > SADDLE_W) & below, LMIN, c_big)
    c_big = torch.where((w < 0) & (w >= SADDLE_W) & at, SAD, c_big)
    c_big = torch.where(w >= 0, LMIN, c_big)
    c_big = torch.where(on_axis & (w < SADDLE_W), LMAX, c_big)
    c_big = torch.where(on_axis & (w == SADDLE_W), SAD, c_big)
    c_big = torch.where(on_axis & (w > SADDLE_W), LMIN, c_big)
    # p + q < 1
    c_small = torch.full_like(w, G, dtype=torch.long)
    c_small = torch.where((w < SADDLE_W) & below, LMIN, c_small)
    c_small = torch.where((w <= SADDLE_W) & at, SAD, c_small)
    c_small = torch.where(on_axis & (w < SADDLE_W), LMIN, c_small)
    c_small = torch.where(on_axis & (w == SADDLE_W), SAD, c_small)
    c_small = torch.where(on_axis & (w > SADDLE_W), LMAX, c_small)
    return torch.where(big, c_big, c_small)


def _bisect(F, lo: torch.Tensor, hi: torch.Tensor, iters: int = 200) -> torch.Tensor:
    """Root of a function continuous and monotone on each row's ``[lo, hi]`` with a sign change."""
    flo = torch.sign(F(lo))
    for _ in range(iters):
        mid = 0.5 * (lo + hi)
        same = torch.sign(F(mid)) == flo
        lo = torch.where(same, mid, lo)
        hi = torch.where(same, hi, mid)
    return 0.5 * (lo + hi)


def predict_limit(theta0: Any, p: Any, q: Any) -> torch.Tensor:
    """The limit point ``theta_lim`` of GF from ``theta0 = (e0, w0)`` (Thms. 2/8 with Lemma 11).

    The trajectory stays on its energy contour ``E = E0`` and on its side of the invariant e-axis, so
    ``theta_lim`` is the contour's intersection with the critical set of the predicted basin
    (:func:`predict_basin`), found by bisection on the monotone branch of w:

    * local min: ``(0, w*)`` with ``-(w*^2 + sign(w*) log|w*|) = E0`` on w0's branch
      (``(0, inf)``, ``(-1/sqrt2, 0)`` or ``(-inf, -1/sqrt2)``; Lemma 12);
    * global min: ``D*/(1+2w|w|) - (w^2 + sign(w) log|w|) = E0`` on ``w < -1/sqrt2`` (p+q>1) or on
      w0's side of 0 within ``w > -1/sqrt2`` (p+q<1), ``e* = sign(e0) sqrt(D*/(1+2w*|w*|))``
      (the end of App. G.1's proof);
    * on the e-axis (w0 = 0): the origin (p+q>1) or ``(sign(e0) sqrt(D*), 0)`` (p+q<1);
    * saddle basin: ``(0, -1/sqrt2)``; critical starting points (e0 = 0): themselves.

    Returns: ``(..., 2)`` float64 with the broadcast batch shape.
    """
    th = _theta(theta0)
    pt, qt = _pq(p, q, th)
    code = predict_basin(th, pt, qt)
    shape = code.shape
    e0 = th[..., 0].expand(shape)
    w0 = th[..., 1].expand(shape)
    Ds = optimal_contrast(pt, qt).expand(shape)
    big = (pt + qt > 1.0).expand(shape)
    wsafe = torch.where(w0 == 0, torch.ones_like(w0), w0)
    E0 = e0 * e0 - _W(wsafe)
    is_glob = code == int(CriticalKind.GLOBAL_MIN)
    is_min = code == int(CriticalKind.LOCAL_MIN)
    # Brackets per row; endpoints a hair inside the singular ends (w = 0, w = -1/sqrt2, +-inf).
    eps0, eps_s = 1e-300, 1e-15
    far = 2.0 + torch.sqrt(E0.abs() + Ds.abs())
    pos = w0 > 0
    left = torch.where(is_glob, big, w0 < SADDLE_W)  # branch (-inf, -1/sqrt2)
    lo = torch.where(pos, torch.full_like(w0, eps0), torch.where(left, -far, torch.full_like(w0, SADDLE_W + eps_s)))
    hi = torch.where(pos, far, torch.where(left, torch.full_like(w0, SADDLE_W - eps_s), torch.full_like(w0, -eps0)))

    def F(w: torch.Tensor) -> torch.Tensor:
        Ww = _W(w)
        return torch.where(is_glob, Ds / (1.0 + 2.0 * w * w.abs()) - Ww - E0, Ww + E0)

    solve = (is_glob | is_min) & (e0 != 0) & (w0 != 0)
    wr = _bisect(F, lo, hi)
    er = torch.where(
        is_glob, torch.sign(e0) * torch.sqrt((Ds / (1.0 + 2.0 * wr * wr.abs())).clamp_min(0)), torch.zeros_like(wr)
    )
    e_lim = torch.where(solve, er, e0)
    w_lim = torch.where(solve, wr, w0)
    # e-axis starts (w0 = 0, e0 != 0): move along the axis.
    axis = (w0 == 0) & (e0 != 0)
    e_axis = torch.where(big, torch.zeros_like(e0), torch.sign(e0) * torch.sqrt(Ds.clamp_min(0)))
    e_lim = torch.where(axis, e_axis, e_lim)
    w_lim = torch.where(axis, torch.zeros_like(w0), w_lim)
    sad = (code == int(CriticalKind.SADDLE)) & (e0 != 0)
    e_lim = torch.where(sad, torch.zeros_like(e0), e_lim)
    w_lim = torch.where(sad, torch.full_like(w0, SADDLE_W), w_lim)
    return torch.stack([e_lim, w_lim], dim=-1)


# ----------------------------------------------------------------------------------------------
# Gradient flow on the landscape


def run_flow(
    theta0: Any,
    p: Any,
    q: Any,
    t_eval: Any,
    *,
    gradient: str = "closed",
    form: str | None = None,
    **integrator: Any,
):
    """Gradient flow (GF, Sec. 4; GF-attn, App. A.2) from a batch of initial points.

    Args:
        theta0: ``(N, 2)`` or ``(N, 3)`` initial points.
        p: float or ``(N,)`` tensor (one chain per trajectory).
        q: the same.
        t_eval: ``(K,)`` save times.
        gradient: ``"closed"`` (:func:`grad_loss`'s formula, with the (p, q) constants precomputed
            per row) or ``"autograd"`` (backward through :func:`loss`, b*(theta) included).
        form: model reading, see :func:`contrast_and_grad`.
        **integrator: forwarded to :func:`tdlab.train.flow.gradient_flow`; defaults here are
            ``method="rosenbrock23", rtol=1e-6, atol=1e-8, g_tol=1e-10`` (long-horizon / basin
            use; pass ``method="dopri5"`` or ``"rk4"`` for accurate trajectories).
    Returns:
        :class:`tdlab.train.flow.FlowResult` (trajectory ``(K, N, dim)``, final ``(N, dim)``, ...).
    """
    from tdlab.train.flow import autograd_gradient, gradient_flow

    th = _theta(theta0)
    if th.ndim != 2:
        raise ValueError("theta0 must be (N, dim)")
    n = th.shape[0]
    pt, qt = _pq(p, q, th)
    pt = pt.expand(n).contiguous() if pt.ndim else pt
    qt = qt.expand(n).contiguous() if qt.ndim else qt
    if gradient == "closed":
        _form(th, form)  # validate once, not per call

        def gfn(x: torch.Tensor, *c: torch.Tensor) -> torch.Tensor:
            D, gD = contrast_and_grad(x, form)
            return _slope_fast(D, c).unsqueeze(-1) * gD

        args = _slope_consts(pt, qt)
    elif gradient == "autograd":
        gfn = autograd_gradient(lambda x, pp, qq: loss(x, pp, qq, form))
        args = (pt, qt)
    else:
        raise ValueError("gradient must be 'closed' or 'autograd'")
    opts = {"method": "rosenbrock23", "rtol": 1e-6, "atol": 1e-8, "g_tol": 1e-10}
    if integrator.get("method") in ("dopri5", "rk4"):
        opts = {"method": integrator["method"]}
    opts.update(integrator)
    return gradient_flow(gfn, th, t_eval, args=args, **opts)


# ----------------------------------------------------------------------------------------------
# Gaussian initialisation (App. G, end of G.1; Thm. 8; App. H.4)


def gaussian_basin_probability(sigma: Any, p: float, q: float) -> dict[CriticalKind, np.ndarray]:
    """P(theta0 ~ N(0, sigma^2 I_2) lies in each basin of Thm. 2 / Thm. 8), by 1-D quadrature.

    With ``g(w) = sqrt(w^2 - log(-w) + E_sad)`` and phi_sigma the N(0, sigma^2) density,
    p + q > 1: ``P_min = 1/2 + int_{-1/sqrt2}^0 phi_sigma(w) erf(g(w) / (sigma sqrt 2)) dw``;
    p + q < 1: ``P_min = int_{-inf}^{-1/sqrt2} phi_sigma(w) erf(g(w) / (sigma sqrt 2)) dw``;
    ``P_global = 1 - P_min``; saddle and maximum basins are null sets (probability 0). The basins
    depend on (p, q) only through the sign of p + q - 1. Quadrature error < 1e-9.

    Args:
        sigma: float or array of standard deviations (> 0).
    Returns:
        dict with keys GLOBAL_MIN, LOCAL_MIN, SADDLE, LOCAL_MAX -> numpy arrays shaped like sigma.
    """
    from scipy import integrate, special

    if p + q == 1:
        raise ValueError("Thms. 2/8 assume p + q != 1")
    sig = np.atleast_1d(np.asarray(sigma, dtype=np.float64))
    if np.any(sig <= 0):
        raise ValueError("sigma must be > 0")
    big = p + q > 1

    def integrand(w: float, s: float) -> float:
        g2 = w * w - math.log(-w) + ENERGY_SADDLE
        g = math.sqrt(max(g2, 0.0))
        return math.exp(-0.5 * (w / s) ** 2) / (s * math.sqrt(2 * math.pi)) * special.erf(g / (s * math.sqrt(2)))

    pmin = np.empty_like(sig)
    for i, s in enumerate(sig):
        if big:
            val, _ = integrate.quad(integrand, SADDLE_W, 0.0, args=(s,), epsabs=1e-13, epsrel=1e-11, limit=200)
            pmin[i] = 0.5 + val
        else:
            val, _ = integrate.quad(integrand, -np.inf, SADDLE_W, args=(s,), epsabs=1e-13, epsrel=1e-11, limit=200)
            pmin[i] = val
    shape = np.shape(sigma)
    return {
        CriticalKind.GLOBAL_MIN: (1.0 - pmin).reshape(shape),
        CriticalKind.LOCAL_MIN: pmin.reshape(shape),
        CriticalKind.SADDLE: np.zeros(shape),
        CriticalKind.LOCAL_MAX: np.zeros(shape),
    }


def gaussian_basin_probability_mc(
    sigma: float,
    p: float,
    q: float,
    *,
    n: int = 100_000,
    dim: int = 2,
    method: str = "theory",
    generator: torch.Generator | None = None,
    t_end: float = 2000.0,
    atol: float = 1e-3,
    **integrator: Any,
) -> dict[CriticalKind, tuple[float, float]]:
    """Monte Carlo estimate of the basin probabilities under ``theta0 ~ N(0, sigma^2 I_dim)``.

    Args:
        sigma: standard deviation; p, q: the chain (p + q != 1).
        n: number of draws. dim: 2 for (e, w), 3 for (e, w, a).
        method: ``"theory"`` classifies draws with :func:`predict_basin` (dim = 2 only);
            ``"flow"`` integrates GF to ``t_end`` (:func:`run_flow` defaults, rosenbrock23) and
            classifies the endpoint with
            :func:`classify_critical` at tolerance ``atol`` (the only option for dim = 3, where
            App. H gives no closed-form basins; Thm. 11 is informal).
        generator: torch generator for the draws.
    Returns:
        dict code -> (probability, standard error ``sqrt(P(1-P)/n)``) for every
        :class:`CriticalKind` (``NONE`` = endpoint not within ``atol`` of any critical set).
    """
    th0 = sigma * torch.randn((n, dim), dtype=_F64, generator=generator)
    if method == "theory":
        if dim != 2:
            raise ValueError("method='theory' needs dim=2 (Thms. 2/8)")
        codes = predict_basin(th0, p, q)
    elif method == "flow":
        res = run_flow(th0, p, q, [t_end], **integrator)
        codes = classify_critical(res.final, p, q, atol=atol)
    else:
        raise ValueError("method must be 'theory' or 'flow'")
    out = {}
    for c in CriticalKind:
        P = float((codes == int(c)).double().mean())
        out[c] = (P, math.sqrt(max(P * (1.0 - P), 0.0) / n))
    return out

"""The population loss of the canonical (e, w[, a]) model and its gradient (seed 000, Secs. 2-3, Apps. A, F, H).

Data: a stationary binary chain with ``p = P(1|0)``, ``q = P(0|1)``. ``theta`` has shape ``(..., 2)``
for (e, w) or ``(..., 3)`` for (e, w, a); ``p``, ``q`` are floats or tensors broadcastable to
``theta.shape[:-1]``; everything is float64. The logit is affine in the binary ``x_n``::

    logit(x_n) = b + c0(theta) + D(theta) * x_n,

* the contrast ``D = e^2 (1 + 2 w|w|)`` (Eq. 3 / 24 / 34) or ``e^2 (1 + a e^2)(1 + 2 w|w|)`` (Eq. 45 / 49),
  with its gradient (:func:`contrast_and_grad`), and the offset ``c0`` (:func:`logit_offset`);
* ``L(theta, b)``, Eq. (8)/(26)/(31)/(44): exactly the expectation over one stationary pair
  ``(x_n, x_{n+1})`` (Lemma 2), a sum of four terms (:func:`loss_with_bias`);
* the optimal bias ``b*(theta)`` of Lemma 5 / Eq. (33) (:func:`optimal_bias`), hence
  ``L(theta) = Phi(D(theta))`` with the profile loss ``Phi(D) = min_beta E[l_log((2Y-1)(beta + D X))]``
  (:func:`profile_loss`, :func:`loss`), convex with its minimum at ``D* = log((1-p)(1-q)/(pq))``;
* ``grad L = Phi'(D) grad D`` (Danskin; Lemma 7 for (e, w), Lemma 13 for (e, w, a)), in closed form
  (:func:`grad_loss`) and by autograd as an independent check (:func:`autograd_grad_loss`).

Seed ambiguities resolved here (checked in tests/theory/markov_landscape/test_population_loss.py):

1. Eq. (3) writes ``e^2 (1 + 2w|w|) x_n`` but Eqs. (6), (9) write ``e^2 (1 + 2w|w| x_n)``. Only the
   Eq. (3) placement makes Thm. 1(i) hold (it is also what the FF derivation Eqs. 21-24 gives).
   Default ``form="eq3"``; ``form="eq6"`` implements the other reading, under which the Thm. 1(i) set
   is *not* critical.
2. App. A.2 writes the x_n-independent logit term as ``w|w(1 + a e^2)|`` (= ``w|w||1 + a e^2|``, what
   the ReLU derivation in App. H.1 actually produces) while Eq. (45) writes ``w|w|(1 + a e^2)``. The
   term does not depend on x_n, so b* absorbs it: ``L(theta)``, its gradient, the flow, critical
   sets and energy are identical. It changes only ``b*`` and ``L(theta, b)`` when ``1 + a e^2 < 0``.
   Default ``form="eq45"``; ``form="abs"`` is the A.2 / H.1 reading.
"""

from __future__ import annotations

import math
from typing import Any

import torch

__all__ = [
    "autograd_grad_loss",
    "contrast",
    "contrast_and_grad",
    "grad_loss",
    "logit_offset",
    "loss",
    "loss_with_bias",
    "optimal_bias",
    "optimal_contrast",
    "optimal_intercept",
    "profile_loss",
    "profile_loss_slope",
]

_F64 = torch.float64


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

"""Gradient flow on the canonical (e, w[, a]) landscape (seed 000: GF, Sec. 4; GF-attn, App. A.2).

``d theta / dt = -grad L(theta)`` with ``grad L = Phi'(D) grad D`` (Lemma 7, Lemma 13) from a batch of
``(N, 2)`` or ``(N, 3)`` initial points, one chain ``(p, q)`` per row, integrated by the batched
integrator of :mod:`tdlab.theory.gradient_flow`; and the basin probabilities under a Gaussian
initialisation by Monte Carlo (Thm. 8; App. H.4, where only the flow can classify the 3-parameter
endpoints).

Seed ambiguity resolved here: App. M.5's linearisation drops a factor 2. Near e = 0 the flow is
``de/dt = -2 pi0 pi1 (p+q-1)(1 + 2w|w|) e`` (from Eq. 36); the Hessian of Lemma 8 is what we follow
(checked in tests/theory/markov_landscape/test_flow.py).
"""

from __future__ import annotations

import math
from typing import Any

import torch

from tdlab.theory.gradient_flow import FlowResult, autograd_gradient, gradient_flow
from tdlab.theory.markov_landscape.basins import predict_basin
from tdlab.theory.markov_landscape.critical import CriticalKind, classify_critical
from tdlab.theory.markov_landscape.population_loss import (
    _F64,
    _form,
    _pq,
    _slope_consts,
    _slope_fast,
    _theta,
    contrast_and_grad,
    loss,
)

__all__ = ["gaussian_basin_probability_mc", "run_flow"]


def run_flow(
    theta0: Any,
    p: Any,
    q: Any,
    t_eval: Any,
    *,
    gradient: str = "closed",
    form: str | None = None,
    **integrator: Any,
) -> FlowResult:
    """Gradient flow (GF, Sec. 4; GF-attn, App. A.2) from a batch of initial points.

    Args:
        theta0: ``(N, 2)`` or ``(N, 3)`` initial points.
        p: float or ``(N,)`` tensor (one chain per trajectory).
        q: the same.
        t_eval: ``(K,)`` save times.
        gradient: ``"closed"`` (:func:`grad_loss`'s formula, with the (p, q) constants precomputed
            per row) or ``"autograd"`` (backward through :func:`loss`, b*(theta) included).
        form: model reading, see :func:`contrast_and_grad`.
        **integrator: forwarded to :func:`tdlab.theory.gradient_flow.gradient_flow`; defaults here are
            ``method="rosenbrock23", rtol=1e-6, atol=1e-8, g_tol=1e-10`` (long-horizon / basin
            use; pass ``method="dopri5"`` or ``"rk4"`` for accurate trajectories).
    Returns:
        :class:`~tdlab.theory.gradient_flow.FlowResult` (trajectory ``(K, N, dim)``, final ``(N, dim)``, ...).
    """
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
    opts: dict[str, Any] = {"method": "rosenbrock23", "rtol": 1e-6, "atol": 1e-8, "g_tol": 1e-10}
    if integrator.get("method") in ("dopri5", "rk4"):
        opts = {"method": integrator["method"]}
    opts.update(integrator)
    return gradient_flow(gfn, th, t_eval, args=args, **opts)


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

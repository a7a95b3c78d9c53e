"""Energies, basins of attraction and limits of gradient flow on the canonical landscape (seed 000, Sec. 4).

* the energy ``E(e, w) = e^2 - (w^2 + sign(w) log|w|)`` (Eq. 4) and ``E(e, w, a) = ... - 2a^2``
  (Eq. 10 / 51), conserved along GF because ``grad D`` is orthogonal to ``grad E`` (Lemma 1, Lemma 14),
  and a numerical trajectory's largest drift from it (:func:`max_energy_drift`);
* the basin of each starting point ``(e0, w0)``: Thm. 2 (p + q > 1) and Thm. 8 (p + q < 1), decided by
  the side of the saddle energy ``E_sad = -(1 + log 2)/2`` and of ``w = -1/sqrt 2``
  (:func:`predict_basin`), the separatrices ``e = +-g(w)`` bounding them (:func:`basin_boundaries`,
  Fig. 1b/d), and the limit point on the start's energy contour (:func:`predict_limit`, Lemma 11);
* the probability of each basin under ``theta0 ~ N(0, sigma^2 I_2)`` by quadrature (App. G, end of G.1),
  and the likelier of the two minima with its loss (:func:`gaussian_init_limit`: what GF from such an
  init is predicted to reach).

Points are ``(..., 2)`` tensors (App. H leaves the 3-parameter basins open); codes are
:class:`~tdlab.theory.markov_landscape.critical.CriticalKind` (int64 tensors).
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import torch

from tdlab.theory.markov_landscape.critical import SADDLE_W, CriticalKind, _segments
from tdlab.theory.markov_landscape.population_loss import _pq, _theta, optimal_contrast, profile_loss

__all__ = [
    "ENERGY_SADDLE",
    "basin_boundaries",
    "energy",
    "gaussian_basin_probability",
    "gaussian_init_limit",
    "max_energy_drift",
    "predict_basin",
    "predict_limit",
]

ENERGY_SADDLE = -(1.0 + math.log(2.0)) / 2.0
"""``E_sad = E(0, -1/sqrt 2) = -(1 + log 2)/2`` (Sec. 4, before Thm. 2)."""


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


def max_energy_drift(traj: torch.Tensor) -> torch.Tensor:
    """Per trajectory, ``max_t |E(t) - E(0)| / max(1, |E(0)|)`` of a ``(K, n, dim)`` trajectory (``K`` save
    times, ``n`` starts, ``dim`` 2 or 3): how far a numerical flow strays from the energy Eq. 4 / Eq. 10 that
    the exact flow conserves (Lemma 1 / Lemma 14), a check of the integrator. Returns ``(n,)``; NaN for a
    trajectory on the plane ``w = 0``."""
    E = energy(traj)
    return ((E - E[0]).abs() / E[0].abs().clamp_min(1.0)).amax(dim=0)


def _W(w: torch.Tensor) -> torch.Tensor:
    """``w^2 + sign(w) log|w|`` = ``-f(w)`` of Lemma 12 (energy on the w-axis, negated)."""
    return w * w + torch.sign(w) * torch.log(w.abs())


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


def gaussian_init_limit(sigma: float, p: float, q: float) -> tuple[CriticalKind, float, float]:
    """The predicted end of GF from ``theta0 ~ N(0, sigma^2 I_2)`` on the canonical (e, w) model: the likelier
    basin of :func:`gaussian_basin_probability` (App. G; Thm. 2 for p+q>1, Thm. 8 for p+q<1), LOCAL_MIN on
    a tie, with its loss and probability.

    Loss values: the profile loss ``Phi`` (Lemma 5) at ``D = 0`` (w-axis local minima, H(pi)) and at
    ``D = D*`` (Theta_*, the entropy rate), Thm. 1.

    Returns: ``(kind, loss, probability)``: ``kind`` LOCAL_MIN or GLOBAL_MIN, ``loss`` in nats.
    Raises ``ValueError`` at p + q = 1 (Thms. 2/8 do not apply).
    """
    probs = gaussian_basin_probability(sigma, p, q)
    p_local, p_global = float(probs[CriticalKind.LOCAL_MIN]), float(probs[CriticalKind.GLOBAL_MIN])
    if p_local >= p_global:
        return CriticalKind.LOCAL_MIN, float(profile_loss(0.0, p, q)), p_local
    return CriticalKind.GLOBAL_MIN, float(profile_loss(optimal_contrast(p, q), p, q)), p_global

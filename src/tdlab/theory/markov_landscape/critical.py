"""Critical points of the canonical (e, w[, a]) landscape: Thm. 1 (two parameters), Thm. 10 (three).

Since ``L(theta) = Phi(D(theta))`` with ``Phi`` convex and minimal at ``D*``
(:mod:`~tdlab.theory.markov_landscape.population_loss`), ``grad L = Phi'(D) grad D`` vanishes exactly on

* Theta_* = ``{D(theta) = D*}``, the global minima (Thm. 1(i); Eq. 49 with attention);
* the w-axis ``e = 0`` (``grad D = 0`` there): local minima where ``(p+q-1)(1+2w|w|) > 0``, local
  maxima where it is ``< 0``, the saddle ``(0, -1/sqrt 2)`` where ``1 + 2w|w| = 0`` (Thm. 1(ii)-(iv));
  with attention the same sets times the a-axis (Thm. 10);
* with attention also Theta_station = ``{1 + a e^2 = 0, 1 + 2w|w| = 0, e != 0}`` (Thm. 10).

Points are ``(..., 2)`` or ``(..., 3)`` tensors; codes are :class:`CriticalKind` (int64 tensors); the
loci for plotting (Figs. 1, 2) are numpy arrays of points.

Seed ambiguity resolved here: Thm. 1 lists Theta_sad as a point while Thm. 10 writes "a set of local
minima/maxima"; we classify Theta_station (Thm. 10) separately (:attr:`CriticalKind.STATIONARY`): there
D = 0 and D takes both signs nearby while ``Phi'(0) != 0``, so these points are saddles in the usual sense.
"""

from __future__ import annotations

import math
from enum import IntEnum
from typing import Any

import numpy as np
import torch

from tdlab.theory.markov_landscape.population_loss import _pq, _theta, contrast, optimal_contrast

__all__ = ["SADDLE_W", "CriticalKind", "classify_critical", "critical_loci", "critical_loci_3"]

SADDLE_W = -1.0 / math.sqrt(2.0)
"""w-coordinate of the saddle ``(0, -1/sqrt 2)`` of Thm. 1(iv), where ``1 + 2w|w| = 0``."""


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
    W2, A2 = np.meshgrid(np.linspace(w_lim[0], w_lim[1], n), np.linspace(a_lim[0], a_lim[1], n), indexing="ij")
    W, A = W2.ravel(), A2.ravel()
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

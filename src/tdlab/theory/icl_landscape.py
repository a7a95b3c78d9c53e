"""Reading Monte-Carlo maps of seed 002's two-parameter loss ``l(alpha, beta)`` (Barnfield, Sen & Sur, Fig. 4, App. F).

A map is estimated on prompts split into ``G`` groups (:func:`prompt_groups`; :func:`group_means` of per-prompt
losses): ``maps (G, ...)`` holds each group's estimate at every grid point and ``sizes (G,)`` the groups' prompt
counts. :func:`pooled` is the map on every prompt, :func:`leave_out` the map without one group, and
:func:`jackknife_se` the delete-a-group jackknife standard error of any statistic read off a map (a minimiser, a
valley's RMS; :func:`jackknife_spread` from the leave-one-group-out estimates themselves). :func:`valley` reads the heat map's valley
``alpha_hat(beta)`` (Fig. 4's dark ravine; App. E.1's ``alpha*(beta)`` at infinite context). A map's minimiser:
:func:`grid_simplex` (the grid argmin and a simplex at it), :func:`polish_minimum` (Nelder-Mead from that simplex on
the same function the map samples). :func:`valley_rms_between`: how far one map's valley lies from another's.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import numpy as np
import torch
from scipy.optimize import minimize
from torch import Tensor

__all__ = [
    "grid_simplex",
    "group_means",
    "jackknife_se",
    "jackknife_spread",
    "leave_out",
    "polish_minimum",
    "pooled",
    "prompt_groups",
    "valley",
    "valley_rms_between",
]


def prompt_groups(n: int, groups: int, device: str | torch.device | None = None) -> tuple[Tensor, Tensor]:
    """The split of ``n`` prompts into ``groups`` contiguous groups that a map is estimated on: each prompt's group
    ``(n,)`` (prompt ``i`` in group ``floor(i G / n)``) and the groups' sizes ``(G,)`` (float64)."""
    gid = torch.as_tensor(np.arange(n) * groups // n, device=device)
    sizes = torch.bincount(gid, minlength=groups).to(torch.float64)
    return gid, sizes


def group_means(values: Tensor, gid: Tensor, sizes: Tensor) -> np.ndarray:
    """``(G, P)``: each group's mean of per-prompt ``values (P, N)`` at ``P`` points (``gid``, ``sizes`` from
    :func:`prompt_groups`), in float64."""
    sums = torch.zeros(values.shape[0], sizes.numel(), dtype=torch.float64, device=values.device).index_add_(
        1, gid, values.double()
    )
    return (sums / sizes).T.cpu().numpy()


def pooled(maps: np.ndarray, sizes: np.ndarray) -> np.ndarray:
    """The map on every prompt from the group maps: ``maps (G, ...)``, ``sizes (G,)`` → ``(...)``, the
    size-weighted mean over groups."""
    return np.tensordot(sizes, maps, axes=1) / sizes.sum()


def leave_out(maps: np.ndarray, sizes: np.ndarray) -> np.ndarray:
    """``(G, ...)``: the map on every prompt but group ``g``'s, for each ``g`` (``maps (G, ...)``, ``sizes (G,)``)."""
    total = np.tensordot(sizes, maps, axes=1)
    return (total[None] - sizes.reshape(-1, *[1] * (maps.ndim - 1)) * maps) / (sizes.sum() - sizes).reshape(
        -1, *[1] * (maps.ndim - 1)
    )


def jackknife_se(stat: Callable[[np.ndarray], float], maps: np.ndarray, sizes: np.ndarray) -> float:
    """Delete-a-group jackknife standard error of ``stat(map)`` over the ``G`` groups of a map's prompts:
    ``sqrt((G − 1)/G Σ_g (θ_(g) − mean θ)²)`` with ``θ_(g) = stat(leave_out(maps, sizes)[g])``; for a mean it is
    the textbook standard error."""
    return jackknife_spread(np.array([stat(m) for m in leave_out(maps, sizes)]))


def jackknife_spread(thetas: np.ndarray | list[float]) -> float:
    """The delete-a-group jackknife standard error from the ``G`` leave-one-group-out estimates ``θ_(g)`` themselves:
    ``sqrt((G − 1)/G Σ_g (θ_(g) − mean θ)²)``."""
    thetas = np.asarray(thetas)
    G = thetas.size
    return float(np.sqrt((G - 1) / G * np.sum((thetas - thetas.mean()) ** 2)))


def valley(a_ax: np.ndarray, b_ax: np.ndarray, loss: np.ndarray, betas: np.ndarray) -> np.ndarray:
    """The heat map's valley ``alpha_hat(beta)`` (Fig. 4): for every beta column, the argmin over alpha refined by
    a parabola through log-loss at the three nearest grid points; interpolated at ``betas``.

    Args:
        a_ax: ``(A,)`` evenly spaced alpha grid.
        b_ax: ``(B,)`` increasing beta grid.
        loss: ``(A, B)`` positive losses on the grid.
        betas: ``(K,)`` where to read the valley.
    Returns:
        ``(K,)`` alpha of the valley at ``betas``.
    """
    logl = np.log(loss)
    out = np.empty(b_ax.size)
    h = a_ax[1] - a_ax[0]
    for j in range(b_ax.size):
        i = int(np.nanargmin(logl[:, j]))
        i = min(max(i, 1), a_ax.size - 2)
        y0, y1, y2 = logl[i - 1, j], logl[i, j], logl[i + 1, j]
        den = y0 - 2 * y1 + y2
        out[j] = a_ax[i] + (0.5 * h * (y0 - y2) / den if den > 0 else 0.0)
    return np.interp(betas, b_ax, out)


def grid_simplex(a_ax: np.ndarray, b_ax: np.ndarray, loss: np.ndarray) -> tuple[Any, Any, np.ndarray]:
    """The grid argmin of a map and the start simplex of its polish (:func:`polish_minimum`): the argmin cell and
    its neighbours one cell up in alpha and in beta.

    Args:
        a_ax: ``(A,)`` evenly spaced alpha grid; b_ax: ``(B,)`` evenly spaced beta grid; loss: ``(A, B)`` (NaN ignored).
    Returns:
        ``(i, j, simplex)``: the argmin's indices and the ``(3, 2)`` simplex of ``(alpha, beta)`` points.
    """
    i, j = np.unravel_index(np.nanargmin(loss), loss.shape)
    start = np.array(
        [
            [a_ax[i], b_ax[j]],
            [a_ax[i] + (a_ax[1] - a_ax[0]), b_ax[j]],
            [a_ax[i], b_ax[j] + (b_ax[1] - b_ax[0])],
        ]
    )
    return i, j, start


def polish_minimum(loss: Callable[[np.ndarray], float], simplex: np.ndarray, maxfev: int) -> np.ndarray:
    """A map's minimiser polished by Nelder-Mead on the function the map samples (a grid argmin is unreliable along
    Fig. 4's long diagonal valley: cells off the valley floor cost more than cells along it), from ``simplex``
    (:func:`grid_simplex`), at most ``maxfev`` evaluations (``xatol`` 1e-7, ``fatol`` 1e-13).

    Returns:
        ``(3,)``: ``(alpha, beta, loss)`` at the polished point.
    """
    res = minimize(
        loss,
        simplex[0],
        method="Nelder-Mead",
        options={"xatol": 1e-7, "fatol": 1e-13, "maxfev": maxfev, "initial_simplex": simplex},
    )
    return np.array([res.x[0], res.x[1], res.fun])


def valley_rms_between(v: Mapping[str, Any], o: Mapping[str, Any]) -> tuple[float, float]:
    """The RMS over ``v``'s betas of ``v``'s valley minus ``o``'s (read at ``v``'s betas by linear interpolation), and
    its delete-a-group jackknife standard error; the maps are drawn on different prompts, so the two maps' jackknife
    errors add in quadrature (App. F's pre-LN ravine against the no-LN one: "similarly located").

    Args:
        v, o: each a map: ``a_ax``, ``b_ax`` (its grid), ``beta`` (``(K,)`` where its valley is read), ``valley``
            (``(K,)`` :func:`valley` of the pooled map there), ``groups`` (``(G, A, B)`` group maps), ``sizes``
            (``(G,)``).
    Returns:
        ``(rms, se)``.
    """
    ref = np.interp(v["beta"], o["beta"], o["valley"])

    def rms(a: np.ndarray, b: np.ndarray) -> float:
        return float(np.sqrt(np.mean((a - b) ** 2)))

    ravine = rms(v["valley"], ref)
    se_ln = jackknife_se(lambda mp: rms(valley(v["a_ax"], v["b_ax"], mp, v["beta"]), ref), v["groups"], v["sizes"])
    se_plain = jackknife_se(
        lambda mp: rms(v["valley"], np.interp(v["beta"], o["beta"], valley(o["a_ax"], o["b_ax"], mp, o["beta"]))),
        o["groups"],
        o["sizes"],
    )
    return ravine, float(np.hypot(se_ln, se_plain))

"""Events on training curves: when each member's curve first crosses a level (and the T50 / AUC of an
accuracy curve, the half-growth step of a norm curve built on it, seed 004's two-stage lags of W^K, W^Q behind
W^V and a curve's means over two stages of training).

A crossing is known only to the evaluation grid (between the previous evaluation and this one), and
a member that never crosses within the run is *censored*: its crossing step is only known to lie
beyond the last evaluation. Both facts travel with the values into the claims layer
(:class:`tdlab.claims.Sample`'s ``resolution`` and ``censored``).
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass

import numpy as np

__all__ = [
    "NOISE_SIGMAS",
    "Crossings",
    "Lags",
    "auc",
    "evaluation_noise",
    "first_crossing",
    "gap_crossing",
    "half_growth_steps",
    "halving_epoch",
    "lags",
    "log_ratio_resolution",
    "loss_auc",
    "min_depths",
    "plateau_escape_step",
    "relative_growth",
    "rotation_means",
    "stage_split",
    "t50",
    "table1_measures",
]

# A gap must exceed this many standard deviations of one evaluation's noise before it counts as crossed:
# with a few hundred evaluations per run, a one-sided 3-sigma level is crossed by noise alone rarely.
NOISE_SIGMAS = 3.0


@dataclass(frozen=True)
class Crossings:
    """Per-member first-crossing steps.

    Attributes:
        steps: ``(E,)`` the first evaluation step at which the curve was past the level; the last
            evaluated step for a member that never was (censored).
        censored: ``(E,)`` True where the member never crossed within the run.
        resolution: the evaluation interval: a crossing at step ``s`` happened in ``(s − resolution, s]``.
    """

    steps: np.ndarray
    censored: np.ndarray
    resolution: float

    def as_optional(self) -> list[int | None]:
        """Crossing steps with ``None`` for members that never crossed (for the report)."""
        return [None if c else int(s) for s, c in zip(self.steps, self.censored, strict=True)]


def first_crossing(steps: np.ndarray, values: np.ndarray, level: float, below: bool = True) -> Crossings:
    """First evaluation step > 0 at which each member's value is below (``below=True``) or above ``level``.

    Args:
        steps: ``(S,)`` evaluation steps (ascending); values: ``(E, S)`` one curve per member.
    """
    s = np.asarray(steps, dtype=float)
    v = np.atleast_2d(np.asarray(values, dtype=float))
    past = (v < level) if below else (v > level)
    past &= (s > 0)[None, :]
    hit = np.asarray(past.any(axis=1))
    first = np.where(hit, s[np.argmax(past, axis=1)], s[-1])
    resolution = float(np.median(np.diff(s))) if s.size > 1 else 0.0
    return Crossings(first, ~hit, resolution)


def evaluation_noise(reference: np.ndarray, population: float) -> float:
    """The standard deviation of one evaluation of a *fixed* predictor around its population loss.

    Args:
        reference: ``(E, S)`` a fixed predictor's loss (the unigram predictor, say) scored on each member's
            evaluation batches at each evaluation; population: its population loss (H(π), say).
    Returns the root mean square of ``reference − population`` over members and evaluations: the noise one
    evaluation carries, which a level read off a single evaluation must clear.
    """
    r = np.asarray(reference, dtype=float)
    r = r[np.isfinite(r)]
    return float(np.sqrt(np.mean((r - population) ** 2))) if r.size else 0.0


def gap_crossing(
    steps: np.ndarray, values: np.ndarray, reference: np.ndarray, drop: float, noise: float
) -> tuple[Crossings, float]:
    """First evaluation at which each member's value is below a reference predictor's *on the same batches*
    by more than ``margin = max(drop, NOISE_SIGMAS · noise)``.

    Comparing with the reference on the same batches removes the batches' shared noise that a fixed level
    (``population − drop``) would read as a crossing; the margin keeps what noise remains (and a ``drop``
    smaller than one evaluation's noise) from deciding a discrete event.

    Args:
        steps: ``(S,)`` evaluation steps; values, reference: ``(E, S)``; drop: the gap that means crossed
            (nats); noise: one evaluation's noise (:func:`evaluation_noise`).
    Returns the crossings and the margin used.
    """
    margin = max(float(drop), NOISE_SIGMAS * float(noise))
    gap = np.asarray(values, dtype=float) - np.asarray(reference, dtype=float)
    return first_crossing(steps, gap, -margin, below=True), margin


def plateau_escape_step(steps: np.ndarray, losses: np.ndarray, threshold: float) -> int | None:
    """First evaluation step > 0 at which one curve ``losses`` ``(S,)`` is below ``threshold``
    (``None`` if it never is)."""
    return first_crossing(steps, np.asarray(losses, dtype=float)[None, :], threshold).as_optional()[0]


def t50(epochs: np.ndarray, acc: np.ndarray, threshold: float = 0.5) -> Crossings:
    """``T50`` per member: the first evaluated epoch ``> 0`` with ``acc > threshold``, censored at the last
    evaluation where there is none (:func:`first_crossing`; seed 001's learning-speed measure of Fig. 2).

    Args:
        epochs: ``(S,)`` evaluation epochs; acc: ``(members, S)`` accuracy curves.
    Returns:
        :class:`Crossings` in epochs.
    """
    return first_crossing(epochs, acc, threshold, below=False)


def auc(epochs: np.ndarray, acc: np.ndarray) -> list[float]:
    """``AUC`` per member: the mean accuracy over the evaluations at epochs ``>= 1`` (the epoch-0
    evaluation, chance for every model, is left out; seed 001, Fig. 2).

    Args:
        epochs: ``(S,)`` evaluation epochs; acc: ``(members, S)`` (or ``(S,)``, one member).
    Returns:
        one float per member. ValueError when no evaluation lies at epoch ``>= 1``.
    """
    keep = np.asarray(epochs) >= 1
    if not keep.any():
        raise ValueError("no evaluation after the first epoch")
    return np.atleast_2d(acc)[:, keep].mean(1).tolist()


def relative_growth(norms: np.ndarray) -> np.ndarray:
    """``g(t) = (n_t − n_0)/(max_s n_s − n_0)`` along the last axis: the share of its overall rise a
    norm curve has made by step ``t`` (seed 004's two-stage rule reads ``g`` of ``‖W^K‖``, ``‖W^Q‖``, ``‖W^V‖``,
    Fig. 4).

    Args:
        norms: ``(..., S)`` norm curves, step 0 first.
    Returns:
        ``(..., S)`` float; a curve that never rises above its start (``max = n_0``) gets ``g = 0``.
    """
    n = np.asarray(norms, dtype=float)
    rise = n.max(-1, keepdims=True) - n[..., :1]
    with np.errstate(invalid="ignore", divide="ignore"):
        g = (n - n[..., :1]) / rise
    return np.where(rise > 0, g, 0.0)


def stage_split(g: np.ndarray, threshold: float) -> np.ndarray:
    """Index of the first step with ``g ≥ threshold`` along the last axis; -1 where there is none.

    Args:
        g: ``(..., S)`` relative growth (:func:`relative_growth`).
    Returns:
        ``(...)`` int64 indices into the step axis.
    """
    hit = np.asarray(g) >= threshold
    return np.where(hit.any(-1), hit.argmax(-1), -1).astype(np.int64)


def half_growth_steps(steps: np.ndarray, norms: np.ndarray, half: float = 0.5) -> np.ndarray:
    """``(E,)`` t½: the first step at which ``g(t) ≥ half`` (:func:`relative_growth`; inf where it never
    does: a norm that never rises above its start).

    Args:
        steps: ``(S,)``; norms: ``(E, S)``."""
    idx = stage_split(relative_growth(norms), half)
    return np.where(idx >= 0, np.asarray(steps, dtype=float)[np.maximum(idx, 0)], np.inf)


def rotation_means(steps: np.ndarray, rot: np.ndarray, stage1_end: int, horizon: int) -> tuple[np.ndarray, np.ndarray]:
    """Mean of a per-member curve over two windows of training: steps ``<= stage1_end`` and
    ``(stage1_end, horizon]`` (seed 004 Fig. 5: W^V's rotation, large in stage 1, small once W^K, W^Q grow).

    Args:
        steps: ``(n,)`` evaluation steps.
        rot: ``(E, n)`` the curve of each member at those steps.
    Returns:
        ``(stage 1 (E,), stage 2 (E,))`` means.
    """
    steps = np.asarray(steps)
    s1, s2 = steps <= stage1_end, (steps > stage1_end) & (steps <= horizon)
    return rot[:, s1].mean(-1), rot[:, s2].mean(-1)


@dataclass(frozen=True)
class Lags:
    """Seed 004's two-stage rule (Figs. 4, 5: W^V grows first, W^K and W^Q later) measured on ``E`` members, each
    field ``(E,)``."""

    t_k: np.ndarray  # t½(W^K), steps (inf: never grows)
    t_q: np.ndarray
    t_v: np.ndarray
    lag: np.ndarray  # (min(t½K, t½Q) − t½V) / horizon
    censored: np.ndarray  # bool: neither W^K nor W^Q grows, the lag is a lower bound
    growth: np.ndarray  # min(‖W^K‖, ‖W^Q‖ at the horizon / at the start)
    first_step: np.ndarray  # first-step norm change of W^K (the smaller of K, Q) relative to W^V's

    def member(self, e: int) -> dict[str, float | bool]:
        return {k: (bool(v[e]) if v.dtype == bool else float(v[e])) for k, v in self.__dict__.items()}


def lags(steps: np.ndarray, norm_k: np.ndarray, norm_q: np.ndarray, norm_v: np.ndarray, half: float = 0.5) -> Lags:
    """The two-stage rule's measurements of every member from its norm curves over the horizon.

    Args:
        steps: ``(S,)`` the steps of the curves (the first is the start, increasing; the last is the horizon).
        norm_k: ``(E, S)`` Frobenius norms of ``W^K``.
        norm_q: ``(E, S)`` the same of ``W^Q``.
        norm_v: ``(E, S)`` the same of ``W^V``.
        half: the growth share that defines t½.
    Returns:
        :class:`Lags`. A member whose W^K and W^Q never grow has its lag censored at ``(horizon − t½V)/span``
        (a lower bound); one whose W^V never grows gets ``(min(t½K, t½Q) − span)/span`` (an upper bound ≤ 0).
    """
    steps = np.asarray(steps, dtype=float)
    K, Q, V = (np.atleast_2d(np.asarray(x, dtype=float)) for x in (norm_k, norm_q, norm_v))
    if not (K.shape == Q.shape == V.shape) or K.shape[-1] != steps.size or steps.size < 2:
        raise ValueError(
            f"norm curves must share one (E, S) shape with S = len(steps) = {steps.size} ≥ 2; "
            f"got {K.shape}, {Q.shape}, {V.shape}"
        )
    t_k, t_q, t_v = (half_growth_steps(steps, x, half) for x in (K, Q, V))
    start, end = steps[0], steps[-1]
    span = end - start
    kq = np.minimum(t_k, t_q)
    censored = ~np.isfinite(kq) & np.isfinite(t_v)
    lag = (np.where(np.isfinite(kq), kq, end) - np.where(np.isfinite(t_v), t_v, end)) / span
    with np.errstate(invalid="ignore", divide="ignore"):
        growth = np.minimum(K[:, -1] / K[:, 0], Q[:, -1] / Q[:, 0])
        first = np.minimum(np.abs(K[:, 1] - K[:, 0]), np.abs(Q[:, 1] - Q[:, 0])) / np.abs(V[:, 1] - V[:, 0])
    return Lags(t_k=t_k, t_q=t_q, t_v=t_v, lag=lag, censored=censored, growth=growth, first_step=first)


def min_depths(gaps: dict[int, list[float]], tol: float) -> Crossings:
    """Per member, the smallest depth whose gap is ≤ ``tol``: seed 003 Part II's "which depth reaches the order-k
    in-context estimator" read on a grid of depths, as a crossing over depths instead of steps.

    Args:
        gaps: ``{depth: per-member gaps}`` (equal lengths).
    Returns:
        :class:`~tdlab.probes.curves.Crossings` over depths: ``steps`` the smallest reaching depth, or
        ``max(depths) + 1`` (the least depth it could need) where none reaches, then ``censored``;
        ``resolution`` the largest spacing of the depth grid (1 for a contiguous one).
    """
    depths = sorted(gaps)
    n = len(gaps[depths[0]])
    values, censored = [], []
    for e in range(n):
        reach = [d for d in depths if gaps[d][e] <= tol]
        values.append(reach[0] if reach else depths[-1] + 1)
        censored.append(not reach)
    spacing = max((b - a for a, b in itertools.pairwise(depths)), default=1)
    return Crossings(np.asarray(values, dtype=float), np.asarray(censored), float(spacing))


def table1_measures(epochs: np.ndarray, val_acc: np.ndarray, test_acc: np.ndarray) -> dict[str, list[float]]:
    """Per-member Table 1 measures (seed 002, Table 1: test accuracy at the best-validation epoch) from per-epoch
    accuracies.

    Args:
        epochs: ``(S,)`` evaluation epochs (0 = before training, excluded from every choice);
        val_acc: ``(members, S)``.
        test_acc: ``(members, S)``.
    Returns:
        ``val_choice`` (test acc at the first epoch of best validation acc) and ``val_choice_epoch``,
        ``best_test`` and ``best_epoch`` (first epoch of best test acc), ``final`` (last epoch's test acc).
    """
    keep = epochs > 0
    ep, va, te = epochs[keep], np.atleast_2d(val_acc)[:, keep], np.atleast_2d(test_acc)[:, keep]
    iv, it = va.argmax(1), te.argmax(1)  # argmax takes the first of ties
    rows = np.arange(te.shape[0])
    return {
        "val_choice": te[rows, iv].tolist(),
        "val_choice_epoch": ep[iv].tolist(),
        "best_test": te[rows, it].tolist(),
        "best_epoch": ep[it].tolist(),
        "final": te[:, -1].tolist(),
    }


# Seed 001 (Figs. 1, 2A): relative loss curves and a ratio of crossings


def loss_auc(epochs: np.ndarray, loss: np.ndarray) -> list[float]:
    """Area under ``loss(t)/loss(0)`` per member: the mean ratio over the evaluations at epochs >= 1."""
    return auc(epochs, loss / loss[:, :1])


def halving_epoch(epochs: np.ndarray, loss: np.ndarray, level: float = 0.5) -> Crossings:
    """First evaluated epoch ``> 0`` with ``loss(t)/loss(0) < level`` per member, censored at the last
    evaluation where there is none (:func:`first_crossing`)."""
    return first_crossing(epochs, loss / loss[:, :1], level, below=True)


def log_ratio_resolution(t_mem: np.ndarray, t_rsn: np.ndarray, interval: float) -> float:
    """Twice the largest change of ``log(t_mem / t_rsn)`` when each T50 moves by up to half an evaluation
    interval (both ``> interval / 2``): the log ratio's resolution."""
    h = interval / 2
    r = np.log(t_mem / t_rsn)
    hi = np.log((t_mem + h) / (t_rsn - h)) - r
    lo = r - np.log((t_mem - h) / (t_rsn + h))
    return float(2 * np.max(np.maximum(hi, lo)))

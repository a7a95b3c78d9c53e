"""Events on training curves: when each member's curve first crosses a level (and the T50 / AUC of an
accuracy curve, the half-growth step of a norm curve built on it).

A crossing is known only to the evaluation grid (between the previous evaluation and this one), and
a member that never crosses within the run is *censored*: its crossing step is only known to lie
beyond the last evaluation. Both facts travel with the values into the claims layer
(:class:`tdlab.claims.Sample`'s ``resolution`` and ``censored``).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

__all__ = [
    "NOISE_SIGMAS",
    "Crossings",
    "auc",
    "evaluation_noise",
    "first_crossing",
    "gap_crossing",
    "half_growth_steps",
    "plateau_escape_step",
    "relative_growth",
    "stage_split",
    "t50",
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

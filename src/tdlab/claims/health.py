"""Whether an arm trained (the health gate), and whether a curve still moves at its end (end drift).

Both are measurements the judge reads; neither decides a claim by itself.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

# per-member numbers, or a curve's steps: a sequence or a numpy array (read with np.asarray)
Floats = Sequence[float] | np.ndarray

__all__ = ["ArmHealth", "assess_arm", "end_drift"]


@dataclass
class ArmHealth:
    """Whether an arm trained, with the reasons when it did not.

    ``moved``: at least one accepted step, final loss below the initial one, every value finite.
    ``trained``: ``moved`` and the test error below the trivial predictor's (where one is given).
    """

    arm: str
    moved: bool
    trained: bool
    reasons: list[str] = field(default_factory=list)
    facts: dict[str, Any] = field(default_factory=dict)

    @property
    def status(self) -> str:
        return "trained" if self.trained else ("moved, not learned" if self.moved else "not trained")

    def to_dict(self) -> dict[str, Any]:
        return {
            "arm": self.arm,
            "status": self.status,
            "moved": self.moved,
            "trained": self.trained,
            "reasons": self.reasons,
            **self.facts,
        }


def assess_arm(
    arm: str,
    initial_loss: Floats,
    final_loss: Floats,
    *,
    accepted_steps: Floats | None = None,
    test_error: Floats | None = None,
    trivial_error: float | None = None,
    all_finite: bool = True,
) -> ArmHealth:
    """The training-health gate of one arm (every member must pass).

    Args:
        initial_loss, final_loss: per member, the objective at the start and the end of training.
        accepted_steps: per member, optimiser steps that were taken (rejected backtracking steps
            excluded); ``None`` when the trainer accepts every step.
        test_error, trivial_error: per-member final test error and the trivial predictor's (E[y²],
            H(π), log V); ``None`` skips that check.
        all_finite: whether every stored value of the arm is finite.
    """
    reasons: list[str] = []
    init, final = np.asarray(initial_loss, float), np.asarray(final_loss, float)
    if not all_finite or not (np.all(np.isfinite(init)) and np.all(np.isfinite(final))):
        reasons.append("non-finite values")
    if accepted_steps is not None:
        acc = np.asarray(accepted_steps, float)
        if np.any(acc < 1):
            reasons.append(f"no accepted step (members {np.nonzero(acc < 1)[0].tolist()})")
    with np.errstate(invalid="ignore"):
        not_lower = np.nonzero(~(final < init))[0].tolist()
    if not_lower:
        reasons.append(
            f"final loss not below the initial one (members {not_lower}: "
            f"{', '.join(f'{init[i]:.4g} → {final[i]:.4g}' for i in not_lower[:4])})"
        )
    moved = not reasons
    learned_reasons: list[str] = []
    if test_error is not None and trivial_error is not None:
        te = np.asarray(test_error, float)
        with np.errstate(invalid="ignore"):
            above = np.nonzero(~(te < trivial_error))[0].tolist()
        if above:
            learned_reasons.append(
                f"test error not below the trivial predictor's {trivial_error:.4g} (members {above})"
            )
    facts: dict[str, Any] = {
        "initial_loss": init.tolist(),
        "final_loss": final.tolist(),
        "trivial_error": trivial_error,
    }
    if accepted_steps is not None:
        facts["accepted_steps"] = list(map(float, accepted_steps))
    return ArmHealth(arm, moved, moved and not learned_reasons, reasons + learned_reasons, facts)


def end_drift(
    steps: Floats,
    values: np.ndarray,
    fraction: float = 0.1,
    min_points: int = 3,
    *,
    lr_steps: Floats | None = None,
    lr: Floats | None = None,
) -> float:
    """How much a curve still moves at the end of training: the least-squares slope over the end
    window times the window's length.

    The window is the last ``fraction`` of training measured in *learning-rate time* (the integral of
    the learning rate) when the schedule is given, else in steps. Under a cosine schedule the last 10 %
    of the steps run at ≤ 2.5 % of the peak rate, so a curve looks flat there whether or not it has
    converged; the last 10 % of the learning-rate integral is where the optimiser last moved the
    model by a tenth of its total motion, so a curve still falling there has not converged.

    Args:
        steps: ``(S,)`` evaluation steps; values: ``(E, S)`` one curve per member.
        lr_steps, lr: the learning-rate schedule as logged (steps and rates); ``None``: step time.
    Returns:
        the mean over members of the fitted change across the window (same unit as ``values``);
        NaN when fewer than two evaluations exist.
    """
    s = np.asarray(steps, dtype=float)
    v = np.atleast_2d(np.asarray(values, dtype=float))
    if s.size < 2:
        return float("nan")
    clock = s
    if lr is not None and lr_steps is not None and len(lr) >= 2:
        ls, lv = np.asarray(lr_steps, float), np.asarray(lr, float)
        order = np.argsort(ls)
        ls, lv = ls[order], lv[order]
        cum = np.concatenate([[0.0], np.cumsum(np.diff(ls) * (lv[1:] + lv[:-1]) / 2)])
        if cum[-1] > 0:
            clock = np.interp(s, ls, cum)
    start = clock[-1] - fraction * (clock[-1] - clock[0])
    idx = np.nonzero(clock >= start)[0]
    if idx.size < min_points:
        idx = np.arange(max(0, s.size - min_points), s.size)
    x = s[idx]
    span = x[-1] - x[0]
    if span <= 0:
        return float("nan")
    xc = x - x.mean()
    slopes = (v[:, idx] - v[:, idx].mean(axis=1, keepdims=True)) @ xc / (xc @ xc)
    return float(np.mean(slopes) * span)

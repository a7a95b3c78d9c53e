"""Events on training curves: when each member's curve first crosses a level.

A crossing is known only to the evaluation grid (between the previous evaluation and this one), and
a member that never crosses within the run is *censored*: its crossing step is only known to lie
beyond the last evaluation. Both facts travel with the values into the claims layer
(:class:`tdlab.claims.Sample`'s ``resolution`` and ``censored``).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

__all__ = ["Crossings", "first_crossing", "plateau_escape_step"]


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
        return [None if c else int(s) for s, c in zip(self.steps, self.censored)]


def first_crossing(steps: np.ndarray, values: np.ndarray, level: float, below: bool = True) -> Crossings:
    """First evaluation step > 0 at which each member's value is below (``below=True``) or above ``level``.

    Args:
        steps: ``(S,)`` evaluation steps (ascending); values: ``(E, S)`` one curve per member.
    """
    s = np.asarray(steps, dtype=float)
    v = np.atleast_2d(np.asarray(values, dtype=float))
    past = (v < level) if below else (v > level)
    past &= (s > 0)[None, :]
    hit = past.any(axis=1)
    first = np.where(hit, s[np.argmax(past, axis=1)], s[-1])
    resolution = float(np.median(np.diff(s))) if s.size > 1 else 0.0
    return Crossings(first, ~hit, resolution)


def plateau_escape_step(steps: np.ndarray, losses: np.ndarray, threshold: float) -> int | None:
    """First evaluation step > 0 at which one curve ``losses`` ``(S,)`` is below ``threshold``
    (``None`` if it never is)."""
    return first_crossing(steps, np.asarray(losses, dtype=float)[None, :], threshold).as_optional()[0]

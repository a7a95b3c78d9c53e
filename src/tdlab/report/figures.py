"""Shared plotting: loss curves with a spread band, each member's own curve and reference lines; figures saved
atomically, each marked where a curve runs off its axes and signed with the run's profile and budget.

A figure a reader trusts shows what the members did, not only their mean: where members split (two leave a
plateau, one does not) the mean is a line no member follows, so :func:`curve_with_band` draws every member
thin beside the band. A curve that leaves the axes' limits is marked at the edge with its extreme value
(:func:`save_figure`), and the runner signs every figure with what ran (:func:`figure_note`): the profile,
the members and the training length, so a quick figure is never read as the paper's.
"""

from __future__ import annotations

import contextlib
import contextvars
import io
import math
from collections.abc import Iterator, Mapping
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt
import numpy as np
import pandas as pd

from tdlab.runs import atomic_write

__all__ = [
    "MEMBER_LINES",
    "curve_with_band",
    "figure_note",
    "member_curves",
    "plt",
    "reference_lines",
    "save_figure",
]

# Up to this many members, each member's curve is drawn (thin) beside the band; more would hide the band.
MEMBER_LINES = 16
_NOTE: contextvars.ContextVar[str | None] = contextvars.ContextVar("figure_note", default=None)


@contextlib.contextmanager
def figure_note(text: str) -> Iterator[None]:
    """Every figure saved inside the block is signed ``text`` (the runner: profile, members, budget)."""
    token = _NOTE.set(text)
    try:
        yield
    finally:
        _NOTE.reset(token)


def _mark_clipped(fig: plt.Figure) -> None:
    """On each axes, a note at the top (bottom) edge where a drawn curve runs above (below) the limits, with its
    extreme value: a curve that starts at 40.8 nats off the top of the axes is said, not hidden."""
    for ax in fig.axes:
        lo, hi = ax.get_ylim()
        if ax.get_yscale() != "linear" or not (math.isfinite(lo) and math.isfinite(hi)):
            continue
        above, below = -math.inf, math.inf
        for line in ax.get_lines():
            y = np.asarray(line.get_ydata(), dtype=float)
            y = y[np.isfinite(y)]
            if y.size == 0 or line.get_transform() is not ax.transData:
                continue  # reference lines (axhline, axvline) are drawn in axes coordinates on one side
            above, below = max(above, float(y.max())), min(below, float(y.min()))
        top, bottom = max(lo, hi), min(lo, hi)
        if above > top + 1e-12 * max(1.0, abs(top)):
            ax.annotate(f"▲ curves clipped above (max {above:.4g})", (0.01, 0.99), xycoords="axes fraction",
                        ha="left", va="top", fontsize=7, color="firebrick", zorder=10,
                        bbox={"boxstyle": "round", "fc": "white", "ec": "firebrick", "lw": 0.6})  # fmt: skip
        if below < bottom - 1e-12 * max(1.0, abs(bottom)):
            ax.annotate(f"▼ curves clipped below (min {below:.4g})", (0.01, 0.01), xycoords="axes fraction",
                        ha="left", va="bottom", fontsize=7, color="firebrick", zorder=10,
                        bbox={"boxstyle": "round", "fc": "white", "ec": "firebrick", "lw": 0.6})  # fmt: skip


def save_figure(fig: plt.Figure, path: Path) -> Path:
    """Save ``fig`` as PNG through a temp file + rename, curves that leave the axes marked and the figure signed
    with :func:`figure_note`'s text where one is set; closes the figure."""
    _mark_clipped(fig)
    note = _NOTE.get()
    if note:
        fig.text(0.005, 0.0, note, fontsize=7, color="0.35", ha="left", va="top")
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=110, bbox_inches="tight")
    plt.close(fig)
    atomic_write(Path(path), buf.getvalue())
    return Path(path)


def member_curves(metrics: pd.DataFrame, arm: str, name: str) -> tuple[np.ndarray, np.ndarray]:
    """``(steps (S,), values (members, S))`` of metric ``name`` in ``arm``."""
    df = metrics[(metrics["arm"] == arm) & (metrics["name"] == name)]
    table = df.pivot_table(index="member", columns="step", values="value", dropna=False)  # keep all-NaN steps
    return table.columns.to_numpy(), table.to_numpy()


def curve_with_band(ax: plt.Axes, steps: np.ndarray, values: np.ndarray, label: str, color: str | None = None) -> None:
    """Mean over members with a shaded min–max band and, up to :data:`MEMBER_LINES` members, each member's own
    curve drawn thin (where members split, the mean is a line no member follows). ``values``: ``(members, S)``."""
    mean = values.mean(0)
    (line,) = ax.plot(steps, mean, label=label + (" (mean; thin: members)" if 1 < values.shape[0] <= MEMBER_LINES else ""),
                      color=color, lw=1.8)  # fmt: skip
    if values.shape[0] > 1:
        ax.fill_between(steps, values.min(0), values.max(0), color=line.get_color(), alpha=0.2, lw=0)
    if 1 < values.shape[0] <= MEMBER_LINES:
        for member in values:
            ax.plot(steps, member, color=line.get_color(), lw=0.6, alpha=0.55, label="_member")


def reference_lines(ax: plt.Axes, lines: Mapping[str, float]) -> None:
    """Horizontal dashed lines for theory values (e.g. entropies)."""
    styles = ["--", ":", "-.", (0, (5, 1))]
    for (label, y), ls in zip(lines.items(), styles * 4, strict=False):
        ax.axhline(y, color="k", ls=ls, lw=1.1, label=label)


def pq_plane(ax) -> None:
    """Axes of the (p, q) plane of a binary chain: the unit square, equal aspect, labelled switching
    probabilities (seed 000, Sec. 2)."""
    ax.set_xlim(0, 1)
    ax.set_ylim(0, 1)
    ax.set_aspect("equal")
    ax.set_xlabel("p = P(1|0)")
    ax.set_ylabel("q = P(0|1)")

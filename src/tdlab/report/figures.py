"""Shared plotting: loss curves with a spread band and reference lines, saved atomically."""

from __future__ import annotations

import io
from collections.abc import Mapping, Sequence
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt
import numpy as np
import pandas as pd

from tdlab.runs import atomic_write

__all__ = ["curve_with_band", "member_curves", "plt", "reference_lines", "save_figure"]


def save_figure(fig: plt.Figure, path: Path) -> Path:
    """Save ``fig`` as PNG through a temp file + rename; closes the figure."""
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
    """Mean over members with a shaded min–max band."""
    mean = values.mean(0)
    (line,) = ax.plot(steps, mean, label=label, color=color, lw=1.8)
    if values.shape[0] > 1:
        ax.fill_between(steps, values.min(0), values.max(0), color=line.get_color(), alpha=0.2, lw=0)


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


def heatmap_panels(fig: plt.Figure, axes: np.ndarray, panels: Sequence[tuple[np.ndarray, str]]) -> None:
    """One heatmap with its colour bar per ``(matrix, title)`` on ``axes`` (flattened); spare axes hidden."""
    flat = list(np.asarray(axes).flat)
    for ax, (matrix, title) in zip(flat, panels, strict=False):
        im = ax.imshow(matrix, cmap="viridis")
        fig.colorbar(im, ax=ax, fraction=0.046)
        ax.set_title(title, fontsize=9)
        ax.set_xticks([])
        ax.set_yticks([])
    for ax in flat[len(panels) :]:
        ax.axis("off")

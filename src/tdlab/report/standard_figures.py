"""The standard figures, declared by an experiment and drawn here: training curves, a value over a 2-D grid of
cells, matrices side by side, bars over arms.

An experiment lists them as data (``figures = (Curves(...), Heatmap(...))``) and the default
``Experiment.plot`` draws them with :func:`draw_figures`: every curve as the members' mean with a min–max band
and each member thin (:func:`tdlab.report.figures.curve_with_band`), reference lines dashed, bars with every
member's value as a dot, each figure saved by :func:`tdlab.report.figures.save_figure` (curves that leave the
axes marked, signed with the run's profile and budget). What depends on the run's config (which arms, which
reference values) is a function of ``(cfg, measurements)`` in the declaration; a figure that is the
experiment's own (a landscape, a flow field) stays a hand ``plot``. Declaring imports no matplotlib (an
experiment's module is imported to list or judge it); drawing does.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

import numpy as np

__all__ = [
    "Bar",
    "Bars",
    "Curves",
    "Heatmap",
    "Line",
    "Matrices",
    "Matrix",
    "Panel",
    "RunCurves",
    "Series",
    "StandardFigure",
    "draw_figure",
    "draw_figures",
]

Text = str | Callable[[Any], str]  # fixed, or a function of the run's config


class RunCurves(Protocol):
    """What the standard figures read of a run (``tdlab.run_view.RunView`` is one): a metric's
    curves, ``(steps (S,), values (members, S))``, and whether the run has them."""

    def has(self, arm: Any, name: str) -> bool: ...

    def curves(self, arm: Any, name: str) -> tuple[np.ndarray, np.ndarray]: ...


def _text(t: Text, cfg: Any) -> str:
    return t(cfg) if callable(t) else t


@dataclass(frozen=True)
class Line:
    """One curve: metric ``metric`` of ``arm`` over training, less metric ``minus`` of the same arm where given
    (a gap to a reference predictor the trainer scores on the same batches), steps divided by ``per``
    (steps per epoch, for an epoch axis)."""

    arm: Any
    metric: str = "test_loss"
    label: str = ""
    color: str | None = None
    minus: str | None = None
    per: float = 1.0


@dataclass(frozen=True)
class Series:
    """A line whose values the declaration gives (read from the measurements, or a closed form over the same
    ``x``), not a stored training curve: ``y`` as ``(n,)``, or ``(members, n)`` drawn as the members' mean with
    a band and each member thin, as a training curve is; ``yerr`` ``(n,)`` draws error bars (e.g. ± sd over
    replicate draws); ``style`` is matplotlib's format string (``"o-"``, ``"g-."``, ``"s--"``)."""

    x: Sequence[float]
    y: Sequence[float] | np.ndarray
    label: str = ""
    style: str = "o-"
    color: str | None = None
    yerr: Sequence[float] | None = None


@dataclass(frozen=True)
class Panel:
    """One axes of :class:`Curves`: its training-curve lines, its :class:`Series`, the theory values drawn as
    dashed lines, the steps marked with a dotted vertical line (``marks``: label → x), its scales, labels and
    limits."""

    title: str
    lines: Sequence[Line] = ()
    reference: Mapping[str, float] = field(default_factory=dict)
    marks: Mapping[str, float] = field(default_factory=dict)
    ylim: tuple[float, float] | None = None
    yscale: str = "linear"
    ylabel: str | None = None  # default: the figure's
    series: Sequence[Series] = ()
    xscale: str = "linear"
    xlabel: str | None = None  # default: the figure's


@dataclass(frozen=True)
class Curves:
    """Training curves with a band over members, and lines of measured or closed-form values over any ``x``
    (:class:`Series`: a value against depth, context length, κ): one panel per :class:`Panel` that ``panels(cfg,
    measurements)`` returns, ``columns`` to a row (all in one row by default). A line whose arm the run lacks is
    left out (a stopped run's arm)."""

    file: str
    panels: Callable[[Any, Mapping[str, Any]], Sequence[Panel]]
    title: Text = ""
    xlabel: str = "iteration"
    ylabel: str = "test loss (nats)"
    size: tuple[float, float] = (5.5, 4.0)  # of one panel, inches
    legend: float = 8.0
    columns: int | Callable[[Any], int] | None = None  # fixed, or a function of the run's config

    def draw(self, cfg: Any, run: RunCurves, measurements: Mapping[str, Any], path: Path) -> Path:
        from tdlab.report.figures import curve_with_band, plt, reference_lines, save_figure

        panels = list(self.panels(cfg, measurements)) or [Panel("nothing measured", [])]
        columns = self.columns(cfg) if callable(self.columns) else self.columns
        cols = max(1, min(columns or len(panels), len(panels)))
        rows = max(1, -(-len(panels) // cols))
        fig, axes = plt.subplots(rows, cols, figsize=(self.size[0] * cols, self.size[1] * rows), squeeze=False)
        for ax in list(axes.flat)[len(panels) :]:
            ax.axis("off")
        for ax, panel in zip(axes.flat, panels, strict=False):
            for line in panel.lines:
                if not run.has(line.arm, line.metric) or (line.minus and not run.has(line.arm, line.minus)):
                    continue
                steps, values = run.curves(line.arm, line.metric)
                if line.minus:
                    values = values - run.curves(line.arm, line.minus)[1]
                curve_with_band(ax, steps / line.per, values, line.label or str(line.arm), line.color)
            for series in panel.series:
                _draw_series(ax, series)
            reference_lines(ax, panel.reference)
            for label, x in panel.marks.items():
                ax.axvline(x, color="grey", ls=":", lw=0.8, label=label)
            if panel.yscale == "symlog":
                ax.set_yscale("symlog", linthresh=1e-2)
            elif panel.yscale != "linear":
                ax.set_yscale(panel.yscale)
            if panel.xscale != "linear":
                ax.set_xscale(panel.xscale)
            if panel.ylim is not None:
                ax.set_ylim(*panel.ylim)
            ax.set_title(panel.title, fontsize=10)
            ax.set_xlabel(panel.xlabel if panel.xlabel is not None else self.xlabel)
            ax.set_ylabel(panel.ylabel if panel.ylabel is not None else self.ylabel)
            if ax.get_legend_handles_labels()[0]:
                ax.legend(fontsize=self.legend)
        title = _text(self.title, cfg)
        if title:
            fig.suptitle(title, fontsize=10)
        fig.tight_layout()
        return save_figure(fig, path)


def _draw_series(ax: Any, series: Series) -> None:
    from tdlab.report.figures import curve_with_band

    x, y = np.asarray(series.x, dtype=float), np.asarray(series.y, dtype=float)
    color = {} if series.color is None else {"color": series.color}  # else the format string's colour holds
    if y.ndim == 2:
        curve_with_band(ax, x, y, series.label, series.color)
    elif series.yerr is not None:
        yerr = np.asarray(series.yerr, dtype=float)
        ax.errorbar(x, y, yerr=yerr, fmt=series.style, ms=3, capsize=2, label=series.label or None, **color)
    else:
        ax.plot(x, y, series.style, ms=3, label=series.label or None, **color)


Key = Callable[[Mapping[str, Any]], Any]  # a cell's coordinate: hashable, sortable


def _key(k: str | Key) -> Key:
    return k if callable(k) else (lambda cell: cell[k])


@dataclass(frozen=True)
class Heatmap:
    """One value over a 2-D grid of cells: ``measurements[cells]`` maps each cell (an arm) to its dict of
    measurements, ``x`` and ``y`` (a key of that dict, or a function of it) place it, ``value`` is the number
    drawn and printed in its square; a square no cell fills is "—". Colours from ``vmin`` (default: the
    smallest value) to the largest value, or ``vmax_at_least`` where that is larger (a small gap stays pale)."""

    file: str
    value: str
    x: str | Key
    y: str | Key
    cells: str = "cells"
    title: Text = ""
    colorbar: str = ""
    x_label: Callable[[Any], str] = str
    y_label: Callable[[Any], str] = str
    x_order: Callable[[Any], Any] | None = None  # a sort key of the x values (default: their own order)
    y_order: Callable[[Any], Any] | None = None
    cmap: str = "Reds"
    vmin: float | None = None
    vmax_at_least: float | None = None
    fmt: str = "{:+.3f}"

    def grid(self, measurements: Mapping[str, Any]) -> tuple[list[Any], list[Any], np.ndarray]:
        """``(x values, y values, grid (len(y), len(x)))`` of the cells, NaN where no cell is."""
        cells = list(measurements.get(self.cells, {}).values())
        x_of, y_of = _key(self.x), _key(self.y)
        xs: list[Any] = sorted({x_of(c) for c in cells}, key=self.x_order)
        ys: list[Any] = sorted({y_of(c) for c in cells}, key=self.y_order)
        grid = np.full((len(ys), len(xs)), np.nan)
        for c in cells:
            v = c.get(self.value)
            grid[ys.index(y_of(c)), xs.index(x_of(c))] = np.nan if v is None else v
        return xs, ys, grid

    def draw(self, cfg: Any, run: RunCurves, measurements: Mapping[str, Any], path: Path) -> Path:
        from tdlab.report.figures import plt, save_figure

        xs, ys, grid = self.grid(measurements)
        if grid.size == 0:  # a run with no cells measured (stopped before any): say so, do not fail
            grid = np.full((1, 1), np.nan)
        fig, ax = plt.subplots(figsize=(1.6 * len(xs) + 2.5, 0.55 * len(ys) + 1.8))
        finite = grid[np.isfinite(grid)]
        hi = float(finite.max()) if finite.size else math.nan
        if self.vmax_at_least is not None:
            hi = self.vmax_at_least if not math.isfinite(hi) else max(self.vmax_at_least, hi)
        lo = self.vmin if self.vmin is not None else (float(finite.min()) if finite.size else None)
        im = ax.imshow(grid, cmap=self.cmap, vmin=lo, vmax=hi if math.isfinite(hi) else None)
        for i in range(len(ys)):
            for j in range(len(xs)):
                txt = "—" if np.isnan(grid[i, j]) else self.fmt.format(grid[i, j])
                ax.text(j, i, txt, ha="center", va="center", fontsize=8)
        ax.set_xticks(range(len(xs)), [self.x_label(x) for x in xs])
        ax.set_yticks(range(len(ys)), [self.y_label(y) for y in ys])
        fig.colorbar(im, ax=ax, label=self.colorbar)
        ax.set_title(_text(self.title, cfg), fontsize=9)
        return save_figure(fig, path)


@dataclass(frozen=True)
class Matrix:
    """One panel of :class:`Matrices`: a matrix with its title, tick labels and axis labels.

    Attributes:
        values: the matrix ``(n, m)``; a vector ``(n,)`` is drawn as a column ``(n, 1)``.
        title: the panel's title.
        rows: one text per row (``n``) labelling the y axis; ``None``: no y ticks.
        cols: one text per column (``m``) labelling the x axis; ``None``: no x ticks.
        xlabel: the x axis' label.
        ylabel: the y axis' label.
    """

    values: Any  # array-like (n, m) or (n,): numpy, a CPU tensor
    title: str = ""
    rows: Sequence[str] | None = None
    cols: Sequence[str] | None = None
    xlabel: str = ""
    ylabel: str = ""


def _matrix(panel: Matrix | tuple[Any, str]) -> Matrix:
    return panel if isinstance(panel, Matrix) else Matrix(*panel)


@dataclass(frozen=True)
class Matrices:
    """Matrices side by side, each a heatmap with its colour bar, laid out ``columns`` to a row.

    By default each panel is coloured from its own smallest to its largest value in viridis, without ticks.
    A fixed scale (``vmin``, ``vmax``) is shared by every panel, so that a claim's threshold (cos ≥ 0.8)
    reads as the same colour in each; ``symmetric`` centres each panel's own scale on 0 instead (signed
    weights at very different magnitudes, init beside final).

    Attributes:
        file: the PNG's name in the figure folder.
        panels: ``panels(cfg, run, measurements)`` → the panels, each a :class:`Matrix` or a
            ``(matrix (n, m), title)`` pair; none: a figure that says "nothing measured".
        title: the figure's title, fixed or a function of the run's config.
        columns: panels to a row, fixed or a function of the run's config.
        size: one panel's ``(width, height)``, inches.
        cmap: the colour map's name.
        vmin: the low end of the colour scale shared by every panel; ``None``: each panel's smallest value.
        vmax: the high end of the shared colour scale; ``None``: each panel's largest value.
        symmetric: each panel's scale runs from ``-max|values|`` to ``+max|values|`` (1 where the panel is all
            0); excludes ``vmin``/``vmax``.
        ticks: where a panel has tick texts (:attr:`Matrix.rows`, :attr:`Matrix.cols`), label about this many
            rows and columns, at round positions (a long axis stays readable); ``None``: every one.
        colorbar: the label of every panel's colour bar.
        aspect: the panels' aspect, ``"equal"`` (square cells) or ``"auto"`` (filling the panel).
        width_ratios: the columns' relative widths (``columns`` of them; a vector's column narrower than a
            matrix's); ``None``: equal.
    """

    file: str
    panels: Callable[[Any, Any, Mapping[str, Any]], Sequence[Matrix | tuple[Any, str]]]
    title: Text = ""
    columns: int | Callable[[Any], int] = 3
    size: tuple[float, float] = (4.2, 3.8)
    cmap: str = "viridis"
    vmin: float | None = None
    vmax: float | None = None
    symmetric: bool = False
    ticks: int | None = None
    colorbar: str = ""
    aspect: str = "equal"
    width_ratios: Sequence[float] | None = None

    def __post_init__(self) -> None:
        if self.symmetric and (self.vmin is not None or self.vmax is not None):
            raise ValueError(f"{self.file}: symmetric scales each panel on its own; it excludes vmin/vmax")
        if self.vmin is not None and self.vmax is not None and not self.vmin < self.vmax:
            raise ValueError(f"{self.file}: vmin={self.vmin} must be below vmax={self.vmax}")

    def scale(self, values: np.ndarray) -> tuple[float | None, float | None]:
        """The colour scale ``(low, high)`` of one panel's ``values`` (``None``: matplotlib's own end)."""
        if not self.symmetric:
            return self.vmin, self.vmax
        finite = np.abs(values[np.isfinite(values)])
        lim = float(finite.max()) if finite.size else 0.0
        return (-lim, lim) if lim > 0 else (-1.0, 1.0)

    def tick_labels(self, texts: Sequence[str] | None, n: int) -> tuple[list[int], list[str]]:
        """``(positions, texts)`` of the ticks of an axis of ``n`` rows (or columns) labelled ``texts`` (``n`` of
        them; ``None``: no ticks)."""
        if texts is None:
            return [], []
        if len(texts) != n:
            raise ValueError(f"{self.file}: {len(texts)} tick texts for an axis of {n}")
        at = list(range(n))
        if self.ticks is not None:
            from matplotlib.ticker import MaxNLocator

            at = [int(t) for t in MaxNLocator(nbins=self.ticks, integer=True).tick_values(0, n - 1) if 0 <= t < n]
        return at, [texts[i] for i in at]

    def draw(self, cfg: Any, run: RunCurves, measurements: Mapping[str, Any], path: Path) -> Path:
        from tdlab.report.figures import plt, save_figure

        panels = [_matrix(p) for p in self.panels(cfg, run, measurements)]
        columns = self.columns(cfg) if callable(self.columns) else self.columns
        cols = max(1, min(columns, len(panels)))
        rows = max(1, -(-len(panels) // cols))
        widths = list(self.width_ratios)[:cols] if self.width_ratios is not None else None
        fig, axes = plt.subplots(
            rows,
            cols,
            figsize=(self.size[0] * cols, self.size[1] * rows),
            squeeze=False,
            gridspec_kw={"width_ratios": widths} if widths else None,
        )
        flat = list(axes.flat)
        for ax, panel in zip(flat, panels, strict=False):
            values = np.asarray(panel.values, dtype=float)
            values = values[:, None] if values.ndim == 1 else values
            lo, hi = self.scale(values)
            im = ax.imshow(values, cmap=self.cmap, vmin=lo, vmax=hi, aspect=self.aspect)
            fig.colorbar(im, ax=ax, fraction=0.046, label=self.colorbar)
            ax.set_title(panel.title, fontsize=9)
            ax.set_yticks(*self.tick_labels(panel.rows, values.shape[0]))
            ax.set_xticks(*self.tick_labels(panel.cols, values.shape[1]))
            ax.set_xlabel(panel.xlabel)
            ax.set_ylabel(panel.ylabel)
        for ax in flat[len(panels) :]:
            ax.axis("off")
        if not panels:
            flat[0].text(0.5, 0.5, "nothing measured", ha="center", va="center", transform=flat[0].transAxes)
        title = _text(self.title, cfg)
        if title:
            fig.suptitle(title)
        fig.tight_layout()  # a panel's tick texts clear its left neighbour's colour bar
        return save_figure(fig, path)


@dataclass(frozen=True)
class Bar:
    """One bar: the members' values of one quantity (its height their mean, a min–max error bar, each
    member a dot)."""

    label: str
    values: Sequence[float]
    color: str | None = None


@dataclass(frozen=True)
class Bars:
    """Bars over arms: ``bars(cfg, measurements)`` returns the :class:`Bar` s, ``reference`` (a function of
    the same) the theory values drawn as dashed lines across them."""

    file: str
    bars: Callable[[Any, Mapping[str, Any]], Sequence[Bar]]
    reference: Callable[[Any, Mapping[str, Any]], Mapping[str, float]] | None = None
    title: Text = ""
    ylabel: str = ""
    ylim: tuple[float, float] | None = None

    def draw(self, cfg: Any, run: RunCurves, measurements: Mapping[str, Any], path: Path) -> Path:
        from tdlab.report.figures import plt, reference_lines, save_figure

        bars = list(self.bars(cfg, measurements))
        fig, ax = plt.subplots(figsize=(max(4.0, 1.1 * len(bars) + 2), 4.0))
        for i, bar in enumerate(bars):
            v = np.asarray(bar.values, dtype=float)
            v = v[np.isfinite(v)]
            if v.size == 0:
                continue
            mean = float(v.mean())
            patch = ax.bar(i, mean, width=0.6, color=bar.color, alpha=0.75)[0]
            if v.size > 1:
                ax.errorbar(i, mean, yerr=[[mean - v.min()], [v.max() - mean]], color="k", capsize=3, lw=1)
                ax.plot(np.full(v.size, i), v, "o", ms=3, color="k", alpha=0.6, mfc=patch.get_facecolor())
        if self.reference is not None:
            reference_lines(ax, self.reference(cfg, measurements))
        ax.set_xticks(range(len(bars)), [b.label for b in bars], fontsize=8)
        if self.ylim is not None:
            ax.set_ylim(*self.ylim)
        ax.set_ylabel(self.ylabel)
        title = _text(self.title, cfg)
        if title:
            ax.set_title(title, fontsize=9)
        if self.reference is not None:
            ax.legend(fontsize=7)
        fig.tight_layout()
        return save_figure(fig, path)


StandardFigure = Curves | Heatmap | Matrices | Bars


def draw_figure(fig: StandardFigure, cfg: Any, run: RunCurves, measurements: Mapping[str, Any], figdir: Path) -> Path:
    """Draw one declared figure into ``figdir / fig.file``."""
    return fig.draw(cfg, run, measurements, Path(figdir) / fig.file)


def draw_figures(
    figures: Sequence[StandardFigure], cfg: Any, run: RunCurves, measurements: Mapping[str, Any], figdir: Path
) -> list[Path]:
    """Every declared figure drawn into ``figdir``, in order; their paths."""
    return [draw_figure(f, cfg, run, measurements, figdir) for f in figures]

"""The standard figures an experiment declares and the report layer draws: each kind (curves, a grid's
heatmap, matrices, bars) writes its file from a planted run, draws every member beside the band, marks a
curve that leaves the axes, and is signed with the run's profile and budget; the default ``plot`` draws the
declared ones."""

from __future__ import annotations

import numpy as np
import pytest
from PIL import Image

from tdlab.report.figures import figure_note, plt
from tdlab.report.standard_figures import (
    Bar,
    Bars,
    Curves,
    Heatmap,
    Line,
    Matrices,
    Matrix,
    Panel,
    Series,
    draw_figure,
    draw_figures,
)
from tdlab.run_view import RunView
from tdlab.runs import RunWriter

NOTE = "planted · profile quick · 3 members · train.steps = 40 (the seed's: 8000)"
STEPS = range(0, 50, 10)


@pytest.fixture(scope="module")
def run(tmp_path_factory) -> RunView:
    """Two arms of 3 members: ``test_loss`` from 2.0 down to ~0.6 (member 2 stays high), and the Bayes
    predictor's loss on the same batches."""
    with RunWriter(tmp_path_factory.mktemp("runs"), "planted", run_id="r") as w:
        w.write_config({"experiment": "planted"})
        for arm, shift in (("a", 0.0), ("b", 0.05)):
            rows = []
            for m in range(3):
                for s in STEPS:
                    loss = 0.6 + shift + (1.4 if m == 2 else 1.4 * np.exp(-s / 10))
                    rows += [(s, m, "test_loss", loss), (s, m, "test_loss@bayes", 0.6)]
            w.add_metrics(arm, rows)
        return RunView(w.finish())


@pytest.fixture
def drawn(monkeypatch):
    """The figures save_figure closed, kept open to read their texts and lines."""
    figs: list = []
    monkeypatch.setattr(plt, "close", figs.append)
    yield figs
    monkeypatch.undo()
    for f in figs:
        plt.close(f)


def _texts(fig) -> list[str]:
    return [t.get_text() for t in fig.texts] + [t.get_text() for ax in fig.axes for t in ax.texts]


def _signed_png(path, fig) -> None:
    assert path.is_file() and Image.open(path).size[0] > 100
    assert NOTE in _texts(fig)


CURVES = Curves(
    "curves.png",
    lambda cfg, m: [
        Panel(
            "loss",
            [Line("a", label="a"), Line("b", label="b"), Line("missing", label="stopped arm")],
            reference={"entropy rate": m["rate"]},
            marks={"early": 20.0},
            ylim=(0.5, 1.0),  # member 2 at 2.0 and every start run off the top
        ),
        Panel("gap", [Line("a", minus="test_loss@bayes")], yscale="symlog"),
    ],
    title=lambda cfg: f"Fig. X — {cfg} members",
    columns=1,
)


def test_curves_draw_members_beside_the_band_reference_lines_and_mark_the_clipping(run, drawn, tmp_path):
    with figure_note(NOTE):
        path = draw_figure(CURVES, 3, run, {"rate": 0.6}, tmp_path)
    (fig,) = drawn
    _signed_png(path, fig)
    assert path.name == "curves.png"
    loss, gap = [ax for ax in fig.axes if ax.get_visible() and ax.axison]
    labels = [ln.get_label() for ln in loss.get_lines()]
    assert labels.count("_member") == 6  # 2 arms x 3 members, thin; the stopped arm is left out
    assert "entropy rate" in labels and "early" in labels and not any("stopped" in x for x in labels)
    (mark,) = [t for t in _texts(fig) if "clipped above" in t]
    assert "2.05" in mark  # member 2 of arm b, off the top
    gap_mean = gap.get_lines()[0].get_ydata()
    assert gap_mean[0] == pytest.approx(1.4) and gap.get_yscale() == "symlog"
    assert "Fig. X — 3 members" in _texts(fig)


def test_series_draw_given_values_with_error_bars_or_a_member_band_on_the_panels_scales(run, drawn, tmp_path):
    depths = [1, 2, 4, 8]
    series = Curves(
        "series.png",
        lambda cfg, m: [
            Panel(
                "excess against depth",
                series=[
                    Series(depths, m["mean"], label="measured", yerr=m["sd"]),
                    Series(depths, [2.0**-d for d in depths], label="theory", style="g-."),
                    Series(depths, m["members"], label="members"),
                ],
                xscale="log",
                yscale="log",
                xlabel="depth T",
            )
        ],
    )
    members = np.array([[1.0, 0.5, 0.25, 0.125], [1.2, 0.6, 0.3, 0.15]])
    measured = {"mean": members.mean(0), "sd": members.std(0), "members": members}
    with figure_note(NOTE):
        draw_figure(series, 3, run, measured, tmp_path)
    (fig,) = drawn
    (ax,) = fig.axes
    assert ax.get_xscale() == "log" and ax.get_yscale() == "log" and ax.get_xlabel() == "depth T"
    by_label = {ln.get_label(): ln for ln in ax.get_lines()}
    np.testing.assert_array_equal(by_label["theory"].get_ydata(), [0.5, 0.25, 0.0625, 0.00390625])
    assert by_label["theory"].get_linestyle() == "-." and by_label["theory"].get_color() == "g"
    np.testing.assert_allclose(by_label["members (mean; thin: members)"].get_ydata(), members.mean(0))
    assert [ln.get_label() for ln in ax.get_lines()].count("_member") == 2
    (bars,) = ax.containers  # the measured series' error bars, one per depth
    assert bars.get_label() == "measured" and len(bars.lines[2][0].get_segments()) == len(depths)
    np.testing.assert_allclose([seg[1, 1] - seg[0, 1] for seg in bars.lines[2][0].get_segments()], 2 * members.std(0))


def test_curves_with_nothing_measured_still_draw_a_figure(run, drawn, tmp_path):
    empty = Curves("empty.png", lambda cfg, m: [])
    assert draw_figure(empty, None, run, {}, tmp_path).is_file()


def test_heatmap_places_each_cell_and_marks_the_missing_one(run, drawn, tmp_path):
    cells = {
        "k1/d1": {"k": 1, "depth": 1, "gap_mean": 0.01},
        "k1/d2": {"k": 1, "depth": 2, "gap_mean": 0.0},
        "k2/d1": {"k": 2, "depth": 1, "gap_mean": 0.2},
    }
    fig_decl = Heatmap(
        "gaps.png",
        "gap_mean",
        x=lambda c: f"k={c['k']}",
        y="depth",
        title=lambda cfg: f"gap (tol {cfg})",
        y_label=lambda d: f"{d} layer(s)",
        vmin=0.0,
        vmax_at_least=0.08,
    )
    xs, ys, grid = fig_decl.grid({"cells": cells})
    assert xs == ["k=1", "k=2"] and ys == [1, 2]
    assert grid[0].tolist() == [0.01, 0.2] and grid[1, 0] == 0.0 and np.isnan(grid[1, 1])
    with figure_note(NOTE):
        path = draw_figure(fig_decl, 0.02, run, {"cells": cells}, tmp_path)
    (fig,) = drawn
    _signed_png(path, fig)
    texts = _texts(fig)
    assert "—" in texts and "+0.200" in texts and "gap (tol 0.02)" in [ax.get_title() for ax in fig.axes]
    assert [t.get_text() for t in fig.axes[0].get_yticklabels()] == ["1 layer(s)", "2 layer(s)"]
    # no cells (a run stopped before any): a figure that says nothing, not a failure
    assert draw_figure(fig_decl, 0.02, run, {"cells": {}}, tmp_path / "none").is_file()


def test_matrices_draw_one_heatmap_per_panel_with_spare_axes_hidden(run, drawn, tmp_path):
    decl = Matrices(
        "grams.png",
        lambda cfg, view, m: [(np.eye(4) * i, f"arm {i}") for i in range(cfg)],
        title="Fig. 1 — grams",
        columns=3,
    )
    with figure_note(NOTE):
        path = draw_figure(decl, 4, run, {}, tmp_path)
    (fig,) = drawn
    _signed_png(path, fig)
    titles = [ax.get_title() for ax in fig.axes]
    assert [t for t in titles if t.startswith("arm")] == ["arm 0", "arm 1", "arm 2", "arm 3"]
    assert sum(not ax.axison for ax in fig.axes) == 2  # a 2 x 3 grid holds 4 panels


def _panels(fig) -> list:
    """The axes that hold a matrix (colour bars and hidden spares do not)."""
    return [ax for ax in fig.axes if ax.images]


def test_matrices_default_scale_is_each_panels_own_range_in_viridis_without_ticks(run, drawn, tmp_path):
    decl = Matrices("own.png", lambda cfg, view, m: [(np.arange(6.0).reshape(2, 3) * k, f"x{k}") for k in (1, 2)])
    draw_figure(decl, None, run, {}, tmp_path)
    (fig,) = drawn
    one, two = (ax.images[0] for ax in _panels(fig))
    assert one.get_clim() == (0.0, 5.0) and two.get_clim() == (0.0, 10.0)
    assert one.get_cmap().name == "viridis"
    assert all(not ax.get_xticks().size and not ax.get_yticks().size for ax in _panels(fig))


def test_matrices_share_a_fixed_scale_colour_map_and_label_ticks_with_the_given_texts(run, drawn, tmp_path):
    anchors = [str(11 + k) for k in range(10)]  # token ids 11..20, as Fig. 3A labels its reasoning anchors
    decl = Matrices(
        "cosines.png",
        lambda cfg, view, m: [
            Matrix(np.full((10, 10), 0.3 * k), f"epoch {k}", rows=anchors, cols=anchors, xlabel="anchor")
            for k in range(cfg)
        ],
        columns=lambda cfg: cfg,
        cmap="RdBu_r",
        vmin=-1.0,
        vmax=1.0,
        ticks=5,
        colorbar="cos",
    )
    with figure_note(NOTE):
        path = draw_figure(decl, 3, run, {}, tmp_path)
    (fig,) = drawn
    _signed_png(path, fig)
    panels = _panels(fig)
    assert [ax.get_title() for ax in panels] == ["epoch 0", "epoch 1", "epoch 2"]
    assert len({round(ax.get_position().y0, 6) for ax in panels}) == 1  # columns=cfg: one row
    for ax in panels:
        (im,) = ax.images
        assert im.get_clim() == (-1.0, 1.0)  # cos 0.0, 0.3, 0.6: the same colour means the same value
        assert im.get_cmap().name == "RdBu_r"
        # about 5 of the 10 texts, at round positions
        assert [t.get_text() for t in ax.get_xticklabels()] == ["11", "13", "15", "17", "19"]
        assert [t.get_text() for t in ax.get_yticklabels()] == ["11", "13", "15", "17", "19"]
        assert list(ax.get_yticks()) == [0, 2, 4, 6, 8] and ax.get_xlabel() == "anchor"
    assert sum(ax.get_ylabel() == "cos" for ax in fig.axes) == 3  # every panel's colour bar
    with pytest.raises(ValueError, match="3 tick texts for an axis of 10"):
        Matrices("x.png", lambda *a: []).tick_labels(["a", "b", "c"], 10)


def test_matrices_symmetric_scale_per_panel_a_vector_as_a_column_and_narrow_columns(run, drawn, tmp_path):
    W = np.array([[0.5, -2.0], [1.0, 0.0]])  # max |W| = 2
    decl = Matrices(
        "weights.png",
        lambda cfg, view, m: [
            Matrix(W, "W", rows=["0", "1"]),
            Matrix(W * 1e-3, "W at init"),
            Matrix(np.array([0.1, -0.3, 0.2]), "e"),
            Matrix(np.zeros((2, 2)), "all zero"),
        ],
        columns=4,
        cmap="RdBu_r",
        symmetric=True,
        aspect="auto",
        width_ratios=(8, 8, 1.2, 8),
    )
    draw_figure(decl, None, run, {}, tmp_path)
    (fig,) = drawn
    w, init, e, zero = _panels(fig)
    assert w.images[0].get_clim() == (-2.0, 2.0) and init.images[0].get_clim() == pytest.approx((-2e-3, 2e-3))
    assert e.images[0].get_array().shape == (3, 1) and e.images[0].get_clim() == pytest.approx((-0.3, 0.3))
    assert zero.images[0].get_clim() == (-1.0, 1.0)
    assert [t.get_text() for t in w.get_yticklabels()] == ["0", "1"] and not w.get_xticks().size
    assert w.get_aspect() == "auto"
    assert e.get_position().width < w.get_position().width / 3  # the vector's column is the narrow one
    with pytest.raises(ValueError, match="excludes vmin"):
        Matrices("x.png", lambda *a: [], symmetric=True, vmin=-1.0)
    with pytest.raises(ValueError, match="must be below"):
        Matrices("x.png", lambda *a: [], vmin=1.0, vmax=1.0)


def test_matrices_with_no_panels_say_nothing_was_measured(run, drawn, tmp_path):
    assert draw_figure(Matrices("none.png", lambda *a: []), None, run, {}, tmp_path).is_file()
    (fig,) = drawn
    assert "nothing measured" in _texts(fig)


def test_bars_show_each_member_reference_lines_and_mark_the_clipping(run, drawn, tmp_path):
    decl = Bars(
        "bars.png",
        lambda cfg, m: [Bar("ours", m["ours"]), Bar("paper", [0.5]), Bar("none", [])],
        reference=lambda cfg, m: {"chance": 0.25},
        title="Fig. 3 — accuracy",
        ylabel="accuracy",
        ylim=(0.0, 1.0),
    )
    with figure_note(NOTE):
        path = draw_figure(decl, None, run, {"ours": [0.4, 0.6, 1.3]}, tmp_path)
    (fig,) = drawn
    _signed_png(path, fig)
    (ax,) = fig.axes
    dots = [ln for ln in ax.get_lines() if ln.get_marker() == "o"]
    assert len(dots) == 1 and list(dots[0].get_ydata()) == [0.4, 0.6, 1.3]  # every member, not only the mean
    assert "chance" in [ln.get_label() for ln in ax.get_lines()]
    assert any("clipped above" in t and "1.3" in t for t in _texts(fig))


def test_the_default_plot_draws_the_declared_figures(run, drawn, tmp_path):
    from tdlab.experiments.base import Analysis, Experiment

    class Planted(Experiment):
        name = "planted-figures"
        figures = (CURVES, Bars("bars.png", lambda cfg, m: [Bar("x", [1.0])]))

        def run(self, cfg, ctx):  # pragma: no cover - never trained
            raise NotImplementedError

    paths = Planted().plot(3, run, Analysis(measurements={"rate": 0.6}), tmp_path)
    assert [p.name for p in paths] == ["curves.png", "bars.png"] and all(p.is_file() for p in paths)
    assert draw_figures((), 3, run, {}, tmp_path) == []

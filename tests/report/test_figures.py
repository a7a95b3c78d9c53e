"""Figures a reader trusts: each member's curve beside the band, curves that leave the axes marked with their
extreme value, and every figure of a run signed with its profile and budget."""

from __future__ import annotations

import numpy as np
from PIL import Image

from tdlab.report.figures import MEMBER_LINES, curve_with_band, figure_note, plt, reference_lines, save_figure


def _texts(fig) -> list[str]:
    return [t.get_text() for t in fig.texts] + [t.get_text() for ax in fig.axes for t in ax.texts]


def test_members_that_split_are_each_drawn_beside_the_band():
    steps = np.arange(10)
    split = np.stack([np.full(10, 0.69), np.linspace(0.69, 0.62, 10), np.linspace(0.69, 0.62, 10)])
    fig, ax = plt.subplots()
    curve_with_band(ax, steps, split, "standard init")
    lines = ax.get_lines()
    assert len(lines) == 1 + 3  # the mean and each member
    assert [ln.get_linewidth() for ln in lines[1:]] == [0.6] * 3
    assert np.allclose(lines[1].get_ydata(), 0.69)  # the member that stayed is there to see
    assert "members" in lines[0].get_label()
    many = np.zeros((MEMBER_LINES + 1, 10))
    fig2, ax2 = plt.subplots()
    curve_with_band(ax2, steps, many, "many")
    assert len(ax2.get_lines()) == 1  # too many to draw: the band says it
    plt.close(fig)
    plt.close(fig2)


def test_a_curve_off_the_axes_is_marked_with_its_value_and_a_reference_line_is_not(tmp_path):
    steps = np.arange(5)
    fig, ax = plt.subplots()
    curve_with_band(ax, steps, np.array([[40.8, 2.0, 0.7, 0.65, 0.64], [30.0, 1.5, 0.7, 0.64, 0.63]]), "loss")
    reference_lines(ax, {"H(π)": 0.67, "off the axes": 5.0})
    ax.axvline(2.0)
    ax.set_ylim(0.6, 0.72)
    save_figure(fig, tmp_path / "f.png")
    (mark,) = [t for t in _texts(fig) if "clipped above" in t]
    assert "40.8" in mark and not any("clipped below" in t for t in _texts(fig))
    fig2, ax2 = plt.subplots()
    ax2.plot(steps, [0.65] * 5)
    ax2.axhline(9.0)  # a reference line outside: not a clipped curve
    ax2.set_ylim(0.6, 0.7)
    save_figure(fig2, tmp_path / "g.png")
    assert not any("clipped" in t for t in _texts(fig2))


def test_a_figure_saved_in_a_run_is_signed_with_what_ran(tmp_path):
    fig, ax = plt.subplots()
    ax.plot([0, 1], [0, 1])
    with figure_note("markov-init · profile quick · 3 members · train.steps = 2000 (the seed's: 8000)"):
        path = save_figure(fig, tmp_path / "f.png")
    assert any("profile quick" in t and "the seed's: 8000" in t for t in _texts(fig))
    assert Image.open(path).size[0] > 100
    fig2, _ = plt.subplots()
    save_figure(fig2, tmp_path / "g.png")
    assert _texts(fig2) == []  # outside a run: no note

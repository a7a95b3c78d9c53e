"""Progress bars: bars open at the same time (fits on lanes) are lines of one display."""

from __future__ import annotations

from tdlab import progress
from tdlab.progress import ProgressBar


def test_bars_open_at_once_share_one_display_that_the_last_to_close_stops():
    with ProgressBar(10, "a") as a:
        with ProgressBar(20, "b") as b:  # rich allows one live display: a second would raise LiveError
            shown = progress._shared
            assert shown is not None and a._progress is shown and b._progress is shown
            assert [t.description for t in shown.tasks] == ["a", "b"]
            b.advance(3)
            b.set(loss=0.5)
            assert shown.tasks[1].completed == 3 and "loss 0.5000" in shown.tasks[1].fields["info"]
        assert progress._shared is shown  # a is still open
    assert progress._shared is None and not shown.live.is_started
    with ProgressBar(5, "c") as c:  # a new display after the last one stopped
        assert progress._shared is not shown and [t.description for t in progress._shared.tasks] == ["c"]
        c.advance()


def test_a_disabled_bar_shows_nothing():
    with ProgressBar(10, "quiet", enabled=False) as bar:
        bar.advance()
        bar.set(loss=1.0)
        assert progress._shared is None and bar._progress is None

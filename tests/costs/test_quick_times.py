"""The quick profiles' measured wall times: a data file shipped with the package, each time with its note."""

from __future__ import annotations

import math

from tdlab.costs.quick_times import QuickTime, load_quick_times, quick_times, write_quick_times
from tdlab.experiments.catalog import CATALOG


def test_the_shipped_times_name_known_experiments_and_say_how_they_were_measured():
    times = quick_times()
    assert times and set(times) <= set(CATALOG)
    assert all(t.seconds > 0 and math.isfinite(t.seconds) and t.note for t in times.values())
    assert times["markov-init"] == QuickTime(290, "idle")


def test_writing_a_time_keeps_the_others_and_the_files_note(tmp_path):
    path = tmp_path / "quick.json"
    write_quick_times(path, {"a": QuickTime(1.5, "idle, 2026-12-02")})
    write_quick_times(path, {"b": QuickTime(2.0, "shared")})
    assert load_quick_times(path) == {"a": QuickTime(1.5, "idle, 2026-12-02"), "b": QuickTime(2.0, "shared")}
    write_quick_times(path, {"a": QuickTime(3.0, "idle")})
    assert load_quick_times(path)["a"] == QuickTime(3.0, "idle")

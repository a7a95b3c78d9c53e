"""The quick profiles' measured wall times, from ``quick_seconds.json`` beside this module (package data).

``bench/bench_quick_profiles.py NAME --after-only --write-quick-times FILE`` measures and writes them; each
entry keeps its note of when and how it was measured (``idle``: the load average at most 1.8; ``shared``:
other jobs shared the cores, so the time is an over-estimate). The ``standard`` profile's rule
(:mod:`tdlab.costs.standard`), the batch's cost prior (:func:`tdlab.batch.estimates`) and the profiles
page (:mod:`tdlab.pages.profiles`) read them.
"""

from __future__ import annotations

import json
from functools import cache
from importlib.resources import files
from pathlib import Path
from typing import Any, NamedTuple

__all__ = ["QuickTime", "load_quick_times", "quick_times", "write_quick_times"]


class QuickTime(NamedTuple):
    """One experiment's quick wall time on the 2-core machine and how it was measured."""

    seconds: float
    note: str


def load_quick_times(path: Path) -> dict[str, QuickTime]:
    """``{experiment: QuickTime}`` of the data file at ``path`` (``{"about": ..., "times": {name: {seconds, note}}}``)."""
    data = json.loads(Path(path).read_text(encoding="utf-8"))
    return {name: QuickTime(t["seconds"], str(t["note"])) for name, t in data["times"].items()}


@cache
def quick_times() -> dict[str, QuickTime]:
    """The shipped quick times (read once per process)."""
    return load_quick_times(Path(str(files("tdlab.costs") / "quick_seconds.json")))


def write_quick_times(path: Path, new: dict[str, QuickTime]) -> None:
    """Put ``new`` into the data file at ``path`` (its other entries and its ``about`` kept, or a new file)."""
    p = Path(path)
    data: dict[str, Any] = json.loads(p.read_text(encoding="utf-8")) if p.is_file() else {"about": "", "times": {}}
    data["times"].update({name: {"seconds": t.seconds, "note": t.note} for name, t in new.items()})
    p.write_text(json.dumps(data, indent=1, ensure_ascii=False) + "\n", encoding="utf-8")

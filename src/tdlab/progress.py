"""A rich progress bar for long work (training, and the tasks' long reads and fits): step, losses and ETA."""

from __future__ import annotations

from threading import Lock

from rich.console import Console
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    TaskID,
    TextColumn,
    TimeElapsedColumn,
    TimeRemainingColumn,
)

__all__ = ["ProgressBar"]

# Bars open at the same time (fits training at once on lanes, tdlab.train.lanes) share one display: rich
# shows one live display at a time, so the first bar to open starts it and the last to close stops it.
_LOCK = Lock()
_shared: Progress | None = None
_open = 0


def _display() -> Progress:
    return Progress(
        TextColumn("[bold]{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TextColumn("{task.fields[info]}"),
        TimeElapsedColumn(),
        TextColumn("ETA"),
        TimeRemainingColumn(),
        console=Console(stderr=True),
        transient=False,
    )


class ProgressBar:
    """``with ProgressBar(total, "label") as bar: bar.advance(); bar.set(loss=0.6)``.

    Writes to stderr so that stdout stays clean for results; a no-op when ``enabled`` is False. Bars
    open at once are lines of one display.
    """

    def __init__(self, total: int, label: str = "", enabled: bool = True) -> None:
        self.enabled, self.total, self.label = enabled, total, label or "train"
        self.fields: dict[str, float] = {}
        self._progress: Progress | None = None
        self._task: TaskID | None = None

    def __enter__(self) -> ProgressBar:
        global _shared, _open
        if self.enabled:
            with _LOCK:
                if _shared is None:
                    _shared = _display()
                    _shared.start()
                _open += 1
                self._progress = _shared
                self._task = _shared.add_task(self.label, total=self.total, info="")
        return self

    def __exit__(self, *exc) -> None:
        global _shared, _open
        if self.enabled and self._progress is not None:
            with _LOCK:
                _open -= 1
                if _open == 0 and _shared is not None:
                    _shared.stop()
                    _shared = None
            self._progress = None

    def set(self, **values: float) -> None:
        self.fields.update(values)
        if self._progress is not None and self._task is not None:
            info = "  ".join(f"{k} {v:.4f}" for k, v in self.fields.items())
            self._progress.update(self._task, info=info)

    def advance(self, n: float = 1) -> None:
        if self._progress is not None and self._task is not None:
            self._progress.advance(self._task, n)

"""A rich progress bar for long work: step, losses and ETA."""

from __future__ import annotations

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn, TimeRemainingColumn

__all__ = ["ProgressBar"]


class ProgressBar:
    """``with ProgressBar(total, "label") as bar: bar.advance(); bar.set(loss=0.6)``.

    Writes to stderr so that stdout stays clean for results; a no-op when ``enabled`` is False.
    """

    def __init__(self, total: int, label: str = "", enabled: bool = True) -> None:
        self.enabled = enabled
        self.fields: dict[str, float] = {}
        if enabled:
            self._progress = Progress(
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
            self._task = self._progress.add_task(label or "train", total=total, info="")

    def __enter__(self) -> ProgressBar:
        if self.enabled:
            self._progress.start()
        return self

    def __exit__(self, *exc) -> None:
        if self.enabled:
            self._progress.stop()

    def set(self, **values: float) -> None:
        self.fields.update(values)
        if self.enabled:
            info = "  ".join(f"{k} {v:.4f}" for k, v in self.fields.items())
            self._progress.update(self._task, info=info)

    def advance(self, n: int = 1) -> None:
        if self.enabled:
            self._progress.advance(self._task, n)

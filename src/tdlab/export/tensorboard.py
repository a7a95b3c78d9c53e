"""A run's metrics as TensorBoard scalars: after the fact (``tdlab export RUN_DIR --to tensorboard
--out DIR``) or live, while the run trains (``tdlab run NAME --tensorboard DIR``).

What is written, in both cases the same layout::

    DIR/member-0/events.out.tfevents.*     member 0 of every arm
    DIR/member-1/events.out.tfevents.*     member 1 ...

One TensorBoard *run* (sub-folder) per ensemble member, so ``tensorboard --logdir DIR`` overlays the
members; in each, one scalar series per metric with the tag ``ARM/NAME`` (``gpt2/standard/test_loss``,
``sec2/standard/train_loss``, reference losses as their own tags: ``sec2/standard/test_loss@bayes``),
the metric's ``step`` as the TensorBoard step and its ``value`` as the scalar (stored as float32, as
TensorBoard stores every scalar). Every row of ``metrics.parquet`` (long format: ``arm, step, member,
name, value``) becomes one scalar: losses, reference losses, learning rate, probes, measurements an
experiment stores. A series is written in increasing step order, each ``(arm, member, name, step)``
once. Event files are written by TensorBoard's own writer through
:class:`torch.utils.tensorboard.SummaryWriter` (the ``tensorboard`` package, no TensorFlow),
imported only when something is written.

Live, :class:`TensorBoardScalars` is the run's metric sink (:mod:`tdlab.train.live`): the trainers
hand it their rows at every evaluation and every logged step and it writes and flushes them at once,
or within about a second when the calls come faster than that, so a TensorBoard pointed at ``DIR``
shows the curves while the run trains; rows an experiment stores without a trainer arrive when it
stores the arm.

Where: ``DIR`` is a folder that can be written (made when missing), outside every run directory, and
holding no event files of an earlier export or run in its ``member-*`` sub-folders (TensorBoard would
draw both as one curve); a bad ``DIR`` is refused in one line before anything is written
(:func:`check_folder`). The run directory is never touched.
"""

from __future__ import annotations

import math
import os
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import pandas as pd

from tdlab.config import ConfigError, echo
from tdlab.runs import Run
from tdlab.safeio import check_not_in_run

if TYPE_CHECKING:  # imported when the first scalar is written
    from torch.utils.tensorboard import SummaryWriter

__all__ = [
    "EVENT_GLOB",
    "ExportedScalars",
    "TensorBoardScalars",
    "check_folder",
    "default_folder",
    "export_run",
    "member_folder",
    "read_scalars",
    "tag",
]

EVENT_GLOB = "events.out.tfevents.*"  # the names TensorBoard's writer gives its event files
Row = tuple[int, int, str, float]  # (step, member, name, value)


def member_folder(member: int) -> str:
    """The sub-folder (TensorBoard run) of ``member``: ``member-0``, ``member-1``, ..."""
    return f"member-{int(member)}"


def tag(arm: str, name: str) -> str:
    """The scalar tag of metric ``name`` of ``arm``: ``ARM/NAME`` (``gpt2/standard/test_loss@bayes``)."""
    return f"{arm}/{name}"


def check_folder(path: str | Path, option: str = "--out") -> Path:
    """``path`` as a folder TensorBoard event files may go to, checked without leaving anything behind:
    an existing folder or a new name whose nearest existing parent is a folder; writable (a probe file
    is made and removed); not inside a run directory; no event files in its ``member-*`` sub-folders.

    Returns the path (not made: :class:`TensorBoardScalars` makes it with the first scalar).

    Raises:
        ConfigError: one line naming ``option``: a file or device, a path under a file, a place that
            cannot be written, a run directory, a folder holding event files already.
    """
    p = Path(path).expanduser()
    if p.exists() and not p.is_dir():
        raise ConfigError(f"{option} {echo(str(p))}: not a folder (a file or device); give a folder")
    check_not_in_run(p, option)
    base = p
    while not base.exists() and not base.is_symlink() and base != base.parent:
        base = base.parent
    if not base.is_dir():
        raise ConfigError(
            f"{option} {echo(str(p))}: {base} is not a folder (a file, device or broken symlink); give a folder"
        )
    try:
        fd, probe = tempfile.mkstemp(dir=base, prefix=".tdlab-write-test-")
        os.close(fd)
        os.unlink(probe)
    except OSError as exc:
        raise ConfigError(
            f"{option} {echo(str(p))}: cannot write there ({exc.strerror or type(exc).__name__})"
        ) from None
    if base == p:
        # a member-I that is not a real folder (a file, a symlink) would fail the writer after training
        odd = sorted(
            e.name for e in os.scandir(p) if e.name.startswith("member-") and not e.is_dir(follow_symlinks=False)
        )
        if odd:
            raise ConfigError(
                f"{option} {echo(str(p))}: {odd[0]} there is not a folder (a file or a symlink), and "
                f"TensorBoard writes member-I/ folders there; give a new or empty folder"
            )
        old = sorted(p.glob(f"member-*/{EVENT_GLOB}"))
        if old:
            raise ConfigError(
                f"{option} {echo(str(p))}: holds TensorBoard event files already "
                f"({old[0].relative_to(p)}, {len(old)} in all), which TensorBoard would draw as one "
                f"curve with the new ones; give a new or empty folder"
            )
    return p


class TensorBoardScalars:
    """Metric rows as TensorBoard scalars under ``folder`` (the module's layout), one
    :class:`~torch.utils.tensorboard.SummaryWriter` per member, opened with the member's first row.

    :meth:`add` is the :class:`~tdlab.train.live.MetricSink` of a live run. Each
    ``(arm, member, name, step)`` is written once (a row streamed by the trainer and stored with its
    arm later is not written again); the scalars of one member and step go in one event, events in
    increasing step order.

    ``every`` (seconds) is how often a live sink writes and flushes: a call of :meth:`add` that comes
    ``every`` seconds or more after the last write writes at once (with what earlier calls held) and
    flushes the event files, so TensorBoard reads it at once; calls in between are held, so a run that
    logs every few milliseconds does not hand its writers one event at a time (each costs a
    hand-over to the writer's thread and a pure-Python CRC). :meth:`flush` writes what is held (the
    run context calls it at the end of every fit and stored arm). ``every=0``: every call written and
    flushed; ``None`` (export): written at once, flushed when closed. Use as a context manager, or
    call :meth:`close`.
    """

    def __init__(self, folder: str | Path, every: float | None = 1.0) -> None:
        self.folder, self.every = Path(folder), every
        self._writers: dict[int, SummaryWriter] = {}
        self._written: set[tuple[str, int, str, int]] = set()
        self._held: list[tuple[str, int, str, int, float]] = []
        self._last = -math.inf  # time.monotonic() of the last write
        self.scalars = 0  # scalars written so far

    def writer(self, member: int) -> SummaryWriter:
        """The open writer of ``member`` (made, with its folder, on first use)."""
        w = self._writers.get(member)
        if w is None:
            from torch.utils.tensorboard import SummaryWriter

            w = self._writers[member] = SummaryWriter(
                str(self.folder / member_folder(member)), max_queue=10_000, flush_secs=max(1, int(self.every or 120))
            )
        return w

    def add(self, arm: str, rows: Sequence[Row]) -> None:
        """Take ``arm``'s rows ``(step, member, name, value)``: those not written before become ``ARM/NAME``
        scalars of their member's run (now, or with the next write: ``every``)."""
        for s, m, n, v in rows:
            key = (arm, int(m), str(n), int(s))
            if key not in self._written:
                self._written.add(key)
                self._held.append((*key, float(v)))
        if self.every is None or time.monotonic() - self._last >= self.every:
            self.flush()

    def flush(self) -> None:
        """Write the held rows and (live) flush the event files they went to."""
        if not self._held:
            return
        from tensorboard.compat.proto.summary_pb2 import Summary

        # One event per member and step holding all its scalars, in increasing step order (so each
        # series' steps go up); what add_scalar writes, one value per event, costs a record a scalar.
        events: dict[tuple[int, int], list[Summary.Value]] = {}
        for a, m, n, s, v in sorted(self._held, key=lambda r: (r[3], r[1])):
            events.setdefault((s, m), []).append(Summary.Value(tag=tag(a, n), simple_value=v))
        for (s, m), values in events.items():
            self.writer(m)._get_file_writer().add_summary(Summary(value=values), s)
        self.scalars += len(self._held)
        if self.every is not None:
            for m in {r[1] for r in self._held}:
                self._writers[m].flush()
            self._last = time.monotonic()
        self._held = []

    def close_member(self, member: int) -> None:
        """Write what is held, then flush and close ``member``'s event file (a later row of it opens a new one)."""
        self.flush()
        w = self._writers.pop(member, None)
        if w is not None:
            w.close()

    def close(self) -> None:
        """Write what is held, flush and close every event file."""
        self.flush()
        for m in list(self._writers):
            self.close_member(m)

    def __enter__(self) -> TensorBoardScalars:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


@dataclass(frozen=True)
class ExportedScalars:
    """What :func:`export_run` wrote: the folder, the scalars, the arms and members they belong to."""

    folder: Path
    scalars: int
    arms: tuple[str, ...]
    members: tuple[int, ...]


def default_folder(run_dir: Path) -> Path:
    """Where ``tdlab export RUN --to tensorboard`` writes without ``--out``: ``RUNID.tensorboard`` in
    the current directory."""
    return Path(f"{Path(run_dir).resolve().name}.tensorboard")


def export_run(
    run_dir: str | Path, out: str | Path | None = None, arm: str | None = None, member: int | None = None
) -> ExportedScalars:
    """Write every metric of a finished run (``metrics.parquet``) as TensorBoard scalars under ``out``
    (the module's layout: ``out/member-I/``, tags ``ARM/NAME``). Nothing in the run directory changes.

    Args:
        run_dir: a finished run directory.
        out: the folder (:func:`check_folder`); ``None``: :func:`default_folder`.
        arm: only this arm's metrics (default: every arm's).
        member: only this member's (default: every member's).
    Raises:
        ConfigError: a bad ``out`` (before anything is read or written), an arm without metrics or a
            member the selection does not have (naming those there are), a run without metric rows.
        RunDirError: a missing or corrupt run directory or metrics table.
    """
    run = Run(Path(run_dir))
    folder = check_folder(out if out is not None else default_folder(run.path), "--out")
    df = run.metrics()
    if df.empty:
        raise ConfigError(f"{run.path / 'metrics.parquet'} holds no metric rows: nothing to export")
    if arm is not None:
        arms = sorted(df["arm"].unique())
        if arm not in arms:
            shown = ", ".join(arms[:20]) + (f", ... ({len(arms)} in all)" if len(arms) > 20 else "")
            raise ConfigError(f"--arm: unknown arm {echo(arm)} in {run.path}; arms with metrics: {shown}")
        df = df[df["arm"] == arm]
    if member is not None:
        members = sorted(int(m) for m in df["member"].unique())
        if member not in members:
            where = f"arm {arm!r}" if arm is not None else "the run"
            raise ConfigError(f"--member: {member} is out of range: {where} has metrics of members {_span(members)}")
        df = df[df["member"] == member]
    df = df.sort_values(["member", "arm", "name", "step"], kind="stable")
    with TensorBoardScalars(folder, every=None) as tb:
        for m, sub in df.groupby("member", sort=True):
            for a, rows in sub.groupby("arm", sort=False):
                tb.add(
                    str(a),
                    list(
                        zip(
                            rows["step"].tolist(),
                            rows["member"].tolist(),
                            rows["name"].tolist(),
                            rows["value"].tolist(),
                            strict=True,
                        )
                    ),
                )
            tb.close_member(int(m))  # one event file open at a time, whatever the ensemble's size
        scalars = tb.scalars
    return ExportedScalars(
        folder, scalars, tuple(sorted(df["arm"].unique())), tuple(sorted(int(m) for m in df["member"].unique()))
    )


def _span(members: list[int]) -> str:
    if members == list(range(members[0], members[-1] + 1)):
        return f"{members[0]}..{members[-1]}" if len(members) > 1 else str(members[0])
    return ", ".join(map(str, members[:20])) + (", ..." if len(members) > 20 else "")


def read_scalars(folder: str | Path) -> pd.DataFrame:
    """Every scalar under ``folder`` read back with TensorBoard's own reader
    (:class:`~tensorboard.backend.event_processing.event_accumulator.EventAccumulator`, nothing
    sampled away): columns ``member, tag, step, value`` (float32 values as float64), one row per scalar
    event, in file order."""
    from tensorboard.backend.event_processing.event_accumulator import SCALARS, EventAccumulator

    out: list[tuple[int, str, int, float]] = []
    for sub in sorted(Path(folder).glob("member-*")):
        acc = EventAccumulator(str(sub), size_guidance={SCALARS: 0})
        acc.Reload()
        member = int(sub.name.removeprefix("member-"))
        for t in acc.Tags()[SCALARS]:
            out.extend((member, t, e.step, e.value) for e in acc.Scalars(t))
    return pd.DataFrame(out, columns=["member", "tag", "step", "value"])

"""Metric rows handed on while a run records them (``tdlab run NAME --tensorboard DIR``).

A *sink* takes an arm's rows ``(step, member, name, value)`` as they are recorded
(:class:`MetricSink`; :class:`tdlab.export.tensorboard.TensorBoardScalars` is the one tdlab has).
Nothing is handed on unless a caller asks:

* :class:`~tdlab.run_context.RunContext` carries the run's sink (its ``live`` field, by default
  the sink set here with :func:`streaming_to`, else ``None``). :meth:`RunContext.fit` gives the trainer
  a function of the rows (:func:`arm_stream`: the arm's name and the member offset of a ``--decide``
  round bound in); :meth:`RunContext.store_rows` hands on the stored rows of every arm, so an experiment
  that measures without a trainer reaches the sink when it stores the arm.
* :class:`~tdlab.train.trainer.Trainer` and :class:`~tdlab.train.regression.RegressionTrainer` call
  their ``live`` attribute (default ``None``: one ``is None`` test a step, nothing imported) with the
  rows recorded since the last call: after every evaluation (losses, reference losses) and at the end
  of every step that logged (training loss, learning rate, probes).

A sink may be handed the same row twice (streamed by the trainer, then stored with the arm): it
writes each ``(arm, member, name, step)`` once.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from contextvars import ContextVar
from threading import Lock
from typing import Protocol

__all__ = ["LockedSink", "MetricSink", "Row", "arm_stream", "current", "streaming_to"]

Row = tuple[int, int, str, float]  # (step, member, name, value), as FitResult.rows


class MetricSink(Protocol):
    """Where rows go as they are recorded."""

    def add(self, arm: str, rows: Sequence[Row]) -> None:
        """Take ``arm``'s rows (each ``(arm, member, name, step)`` is written once, later copies dropped);
        a sink may hold them for a moment (it writes at least every second or so)."""

    def flush(self) -> None:
        """Write what is held (called at the end of every fit and every stored arm)."""


class LockedSink:
    """A sink that several threads share (fits training at once on lanes, :mod:`tdlab.train.lanes`): one
    call at a time reaches ``sink``."""

    def __init__(self, sink: MetricSink) -> None:
        self.sink, self._lock = sink, Lock()

    def add(self, arm: str, rows: Sequence[Row]) -> None:
        with self._lock:
            self.sink.add(arm, rows)

    def flush(self) -> None:
        with self._lock:
            self.sink.flush()


_SINK: ContextVar[MetricSink | None] = ContextVar("tdlab_metric_sink", default=None)


def current() -> MetricSink | None:
    """The sink set by the innermost :func:`streaming_to` (``None``: rows go nowhere but the run)."""
    return _SINK.get()


@contextmanager
def streaming_to(sink: MetricSink | None) -> Iterator[MetricSink | None]:
    """Within the block, a :class:`RunContext` made without a sink streams to ``sink`` (the ``tdlab run``
    command sets it around the run; ``None`` keeps streaming off). The caller closes the sink."""
    token = _SINK.set(sink)
    try:
        yield sink
    finally:
        _SINK.reset(token)


def arm_stream(sink: MetricSink | None, arm: str, offset: int = 0) -> Callable[[Sequence[Row]], None] | None:
    """What a trainer's ``live`` attribute is set to for ``arm``: a function handing its rows to ``sink``
    with members shifted by ``offset`` (a ``--decide`` round trains members ``offset..`` of the arm as
    ``0..``); ``None`` without a sink."""
    if sink is None:
        return None
    if offset == 0:
        return lambda rows: sink.add(arm, rows)
    return lambda rows: sink.add(arm, [(s, m + offset, n, v) for s, m, n, v in rows])

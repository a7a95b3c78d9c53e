"""Stopping a run cleanly and keeping its work: checkpoints by wall time, and a stop on request.

A machine lent for minutes, a batch with ``--until 9m``, a ``kill`` (SIGTERM) or a session that ends: each
would lose the training a run had done since its start. Inside :func:`stopping`, every
:class:`~tdlab.train.trainer.Trainer` and :class:`~tdlab.train.regression.RegressionTrainer` fit that has a
checkpoint file

- saves a resumable checkpoint whenever ``every_s`` seconds of wall time have passed since its last one
  (the trainer's checkpoints are exact at any step: model, optimiser, schedule, random streams and the
  running loss, so a resumed run ends with the numbers of one never stopped, bit for bit on the CPU), and
- once a stop is requested (SIGTERM, Ctrl-C, :func:`request_stop`, or the ``deadline`` passed), saves a checkpoint
  after the step it is in and raises :class:`RunStopped`; the run's staging folder keeps the checkpoint for
  ``tdlab run --resume`` (and ``tdlab batch`` resumes it by itself).

Lanes (:mod:`tdlab.train.lanes`) read the same policy: a stop stops every lane's fit at its next step.
Long work that is not training (a loss map on a grid and its polishes) keeps its evaluations in a
:class:`~tdlab.train.memo.CheckpointedMemo`, which saves and stops under the same policy; work stored piece by
piece (a landscape's arms) stops between pieces at :meth:`RunContext.stop_point
<tdlab.run_context.RunContext.stop_point>`. Other work that does not go through these (closed forms) runs
on to its end; ``tdlab batch`` kills it after a grace period and starts it again next time.
"""

from __future__ import annotations

import signal
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

__all__ = [
    "INTERRUPTED_EXIT_CODE",
    "STOPPED_EXIT_CODE",
    "RunStopped",
    "Stopping",
    "current",
    "request_stop",
    "stopping",
]

# The exit code of a ``tdlab run`` stopped on request with its checkpoints kept (resumable): distinct from
# 0 (done), 1 (diverged or failed) and 2 (bad input); a stop asked by Ctrl-C exits 130, as Ctrl-C does.
STOPPED_EXIT_CODE = 3
INTERRUPTED_EXIT_CODE = 130


class RunStopped(Exception):
    """A fit stopped on request after saving its checkpoint at ``step`` (``label``: the fit's progress label);
    with ``stored``, work that is not training stopped after the piece it names, which is stored."""

    def __init__(self, step: int, label: str = "", stored: bool = False) -> None:
        super().__init__(
            f"stopped on request after {label or 'a stored piece of work'}, which is stored"
            if stored
            else f"stopped on request at step {step}{f' of {label}' if label else ''}; checkpoint saved"
        )
        self.step, self.label = step, label
        self.run_dir: object | None = None  # the run directory it belongs to (set by the runner)


@dataclass
class Stopping:
    """The policy fits read: checkpoint every ``every_s`` seconds (``None``: never by time), stop once
    :attr:`requested` is set or ``time.monotonic()`` passes ``deadline``."""

    every_s: float | None = None
    deadline: float | None = None
    requested: threading.Event = field(default_factory=threading.Event)
    signal_name: str | None = None  # the signal that asked for the stop (SIGINT, SIGTERM), None otherwise

    def stop_requested(self) -> bool:
        return self.requested.is_set() or (self.deadline is not None and time.monotonic() >= self.deadline)

    def due(self, last_saved: float) -> bool:
        """Whether a fit whose last checkpoint was at ``last_saved`` (``time.monotonic()``) saves one now."""
        return self.stop_requested() or (self.every_s is not None and time.monotonic() - last_saved >= self.every_s)


_active: Stopping | None = None


def current() -> Stopping | None:
    """The policy of the innermost :func:`stopping` block (``None`` outside one: fits never stop)."""
    return _active


def request_stop() -> None:
    """Ask every fit under the active policy to checkpoint and stop at its next step."""
    if _active is not None:
        _active.requested.set()


@contextmanager
def stopping(
    every_s: float | None = None,
    until_s: float | None = None,
    signals: bool = True,
    on_signal: Callable[[str], None] | None = None,
) -> Iterator[Stopping]:
    """Within the block, checkpointed fits save every ``every_s`` seconds and stop after ``until_s`` seconds
    or on SIGTERM or Ctrl-C (SIGINT) (with ``signals``, from the main thread only). The first such signal asks
    for the stop (``on_signal(name)`` is told, e.g. to say so); a second one is not caught again, so it acts as
    usual (SIGTERM ends the process, Ctrl-C raises ``KeyboardInterrupt``). Restores the previous policy and
    handlers afterwards."""
    global _active
    if every_s is not None and every_s <= 0:
        raise ValueError(f"every_s must be > 0 (got {every_s})")
    if until_s is not None and until_s < 0:
        raise ValueError(f"until_s must be >= 0 (got {until_s})")
    policy = Stopping(every_s, None if until_s is None else time.monotonic() + until_s)
    previous = _active
    install = signals and threading.current_thread() is threading.main_thread()
    old: dict[int, Any] = {}

    def on_stop_signal(signum: int, frame: object) -> None:
        name = signal.Signals(signum).name
        policy.signal_name = policy.signal_name or name
        policy.requested.set()
        signal.signal(signum, old.get(signum) or signal.SIG_DFL)  # the next one acts as it did before
        if on_signal is not None:
            on_signal(name)

    if install:
        for sig in (signal.SIGTERM, signal.SIGINT):
            old[sig] = signal.signal(sig, on_stop_signal)
    _active = policy
    try:
        yield policy
    finally:
        _active = previous
        for signum, handler in old.items():
            signal.signal(signum, handler if handler is not None else signal.SIG_DFL)

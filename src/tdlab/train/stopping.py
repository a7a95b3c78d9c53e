"""Stopping a run cleanly and keeping its work: checkpoints by wall time, and a stop on request.

A machine lent for minutes, a batch with ``--until 9m``, a ``kill`` (SIGTERM) or a session that ends: each
would lose the training a run had done since its start. Inside :func:`stopping`, every
:class:`~tdlab.train.trainer.Trainer` fit that has a checkpoint file

- saves a resumable checkpoint whenever ``every_s`` seconds of wall time have passed since its last one
  (the trainer's checkpoints are exact at any step: model, optimiser, schedule, random streams and the
  running loss, so a resumed run ends with the numbers of one never stopped, bit for bit on the CPU), and
- once a stop is requested (SIGTERM, :func:`request_stop`, or the ``deadline`` passed), saves a checkpoint
  after the step it is in and raises :class:`RunStopped`; the run's staging folder keeps the checkpoint for
  ``tdlab run --resume`` (and ``tdlab batch`` resumes it by itself).

Lanes (:mod:`tdlab.train.lanes`) read the same policy: a stop stops every lane's fit at its next step.
Work that does not train through a checkpointed fit (closed forms, the regression fits of seed 002) runs on
to its end; ``tdlab batch`` kills it after a grace period and starts it again next time.
"""

from __future__ import annotations

import signal
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field

__all__ = ["Stopping", "RunStopped", "stopping", "current", "request_stop", "STOPPED_EXIT_CODE"]

# The exit code of a ``tdlab run`` stopped on request with its checkpoints kept (resumable): distinct from
# 0 (done), 1 (diverged or failed), 2 (bad input) and 130 (Ctrl-C).
STOPPED_EXIT_CODE = 3


class RunStopped(Exception):
    """A fit stopped on request after saving its checkpoint at ``step`` (``label``: the fit's progress label)."""

    def __init__(self, step: int, label: str = "") -> None:
        super().__init__(f"stopped on request at step {step}{f' of {label}' if label else ''}; checkpoint saved")
        self.step, self.label = step, label
        self.run_dir: object | None = None  # the run directory it belongs to (set by the runner)


@dataclass
class Stopping:
    """The policy fits read: checkpoint every ``every_s`` seconds (``None``: never by time), stop once
    :attr:`requested` is set or ``time.monotonic()`` passes ``deadline``."""

    every_s: float | None = None
    deadline: float | None = None
    requested: threading.Event = field(default_factory=threading.Event)

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
def stopping(every_s: float | None = None, until_s: float | None = None, sigterm: bool = True) -> Iterator[Stopping]:
    """Within the block, checkpointed fits save every ``every_s`` seconds and stop after ``until_s`` seconds
    or on SIGTERM (with ``sigterm``, from the main thread only: a second SIGTERM is not caught again, so it
    ends the process as usual). Restores the previous policy and handler afterwards."""
    global _active
    if every_s is not None and every_s <= 0:
        raise ValueError(f"every_s must be > 0 (got {every_s})")
    if until_s is not None and until_s < 0:
        raise ValueError(f"until_s must be >= 0 (got {until_s})")
    policy = Stopping(every_s, None if until_s is None else time.monotonic() + until_s)
    previous, old_handler = _active, None
    install = sigterm and threading.current_thread() is threading.main_thread()

    def on_term(signum: int, frame: object) -> None:
        policy.requested.set()
        signal.signal(signal.SIGTERM, old_handler if old_handler is not None else signal.SIG_DFL)

    if install:
        old_handler = signal.signal(signal.SIGTERM, on_term)
    _active = policy
    try:
        yield policy
    finally:
        _active = previous
        if install:
            signal.signal(signal.SIGTERM, old_handler if old_handler is not None else signal.SIG_DFL)

"""Where a run's time goes: the trainers and the runner mark their phases, a :class:`PhaseClock` adds them up.

The marks are no-ops unless a clock is running (``with PhaseClock() as clock:``), so a run pays a function
call per mark (well under a microsecond) when nobody is measuring: the trainer with its marks against the same
trainer without them (``bench/bench_trainer_overhead.py``: its source with every ``with phase(...)`` replaced by
its body, a markov-init quick arm, 200 steps, 5 alternating rounds, 2026-12-02) ran in 7.1 s against 8.3 s,
within the spread of the shared cores (±100 %), to the same numbers bit for bit: they cost nothing measurable,
and they are what ``bench/profile_quick.py``'s breakdown reads. Time is *exclusive*: a phase nested in
another (a probe's forward pass inside ``probes``) is counted once, in the inner phase, and what no mark
covers is the clock's :attr:`~PhaseClock.other` (Python between the marks, imports, run set-up).

Phases the trainers mark (the breakdown ``bench/profile_quick.py`` prints):

==============  ===========================================================================================
``data``        drawing or preparing a training batch (and building fixed data sets)
``forward``     the training loss's forward pass
``backward``    its backward pass
``optimiser``   gradient clipping, the optimiser step, the schedule, ``zero_grad``
``evaluation``  test/eval-split metrics and the reference predictors' losses
``probes``      probes and snapshots during training
``logging``     metric rows, progress, the live sink
``checkpoint``  resumable checkpoints
``io``          storing an arm's metrics and parameters in the run directory
``analysis``    measuring and judging the claims (after training)
``report``      figures, summary and HTML report
==============  ===========================================================================================
"""

from __future__ import annotations

import threading
import time
from collections import defaultdict
from collections.abc import Iterator
from contextlib import AbstractContextManager, contextmanager, nullcontext

__all__ = ["PhaseClock", "phase"]

_active: PhaseClock | None = None


class PhaseClock:
    """Exclusive wall time per phase while it runs.

    ``seconds[name]``: time inside ``phase(name)`` minus time inside phases nested in it; ``calls[name]``:
    how often it was entered; :attr:`total`: the clock's own wall time; :attr:`other`: total − the phases.
    One clock runs at a time (entering a second one raises ``RuntimeError``). Phases marked on several
    threads at once (fits on lanes, :mod:`tdlab.train.lanes`) each nest on their own thread and add up, so
    their sum can then exceed the wall time (and :attr:`other` is floored at zero).
    """

    def __init__(self) -> None:
        self.seconds: dict[str, float] = defaultdict(float)
        self.calls: dict[str, int] = defaultdict(int)
        self.total = 0.0
        self._local = threading.local()  # per thread: time spent in children of each open phase
        self._lock = threading.Lock()
        self._t0 = 0.0

    def __enter__(self) -> PhaseClock:
        global _active
        if _active is not None:
            raise RuntimeError("a PhaseClock is already running")
        _active, self._t0 = self, time.perf_counter()
        return self

    def __exit__(self, *exc: object) -> None:
        global _active
        self.total = time.perf_counter() - self._t0
        _active = None

    @contextmanager
    def timing(self, name: str) -> Iterator[None]:
        stack = self._local.__dict__.setdefault("stack", [])
        stack.append(0.0)
        t0 = time.perf_counter()
        try:
            yield
        finally:
            elapsed = time.perf_counter() - t0
            children = stack.pop()
            with self._lock:
                self.seconds[name] += elapsed - children
                self.calls[name] += 1
            if stack:
                stack[-1] += elapsed

    @property
    def other(self) -> float:
        return max(0.0, self.total - sum(self.seconds.values()))

    def shares(self) -> dict[str, float]:
        """``{phase: share of total}``, largest first, with ``other`` last."""
        total = self.total or 1.0
        out = {k: v / total for k, v in sorted(self.seconds.items(), key=lambda kv: -kv[1])}
        out["other"] = self.other / total
        return out


def phase(name: str) -> AbstractContextManager[None]:
    """Mark a phase: timed by the running :class:`PhaseClock`, a no-op when none runs."""
    return nullcontext() if _active is None else _active.timing(name)

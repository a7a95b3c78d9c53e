"""Independent fits at once on one-thread lanes: the cells of a grid trained side by side on a multi-core CPU.

Many experiments train each cell on one torch thread (:func:`tdlab.train.cpu.cpu_threads`: their tensors
are too small for a second intra-op thread to pay, and its OpenMP spin-waits cost a lot on shared cores),
one cell after another, so a 2-core machine idles a core. A *lane* is a Python thread that trains one fit
at a time. torch releases the GIL inside its kernels and autograd runs a CPU backward on the calling
thread, so two lanes use two cores with no spin-waits between them; with one intra-op thread every op of a
fit runs serially on its lane, so each fit computes bit for bit what it computes alone (tested). Measured
on the 2-core machine, idle: the two quick cells of ``markov-icl-depth`` (depth 1 and 2, 3 members, 150
steps) 18.1 s one after the other, 11.4 s on two lanes (1.59×; the depth-2 cell alone sets the floor).

Lanes run only where every fit would run on one thread anyway (``torch.get_num_threads() == 1``) and on
the CPU, so they never change a number. ``tdlab run --lanes N`` caps them (1: one fit at a time).
"""

from __future__ import annotations

import queue
import threading
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from contextvars import ContextVar
from typing import Generic, TypeVar

from tdlab.cores import usable_cores

__all__ = ["Outcome", "in_lanes", "lane_count", "limit", "limited_to", "usable_cores"]

T = TypeVar("T")
_LIMIT: ContextVar[int | None] = ContextVar("tdlab_lanes", default=None)


def limit() -> int | None:
    """The lanes set by the innermost :func:`limited_to` (``None``: as many as there are usable cores)."""
    return _LIMIT.get()


@contextmanager
def limited_to(n: int | None) -> Iterator[None]:
    """Within the block, a :class:`~tdlab.run_context.RunContext` made without a lane count uses at
    most ``n`` lanes (``tdlab run --lanes N`` sets it around the run; ``None``: the usable cores)."""
    if n is not None and n < 1:
        raise ValueError(f"lanes must be >= 1 (got {n})")
    token = _LIMIT.set(n)
    try:
        yield
    finally:
        _LIMIT.reset(token)


def lane_count(requested: int | None, jobs: int, device: str) -> int:
    """Lanes for ``jobs`` independent fits: ``requested`` (``None``: the usable cores), at most ``jobs``;
    1 off the CPU, or where torch runs more than one intra-op thread (a lane would then share its cores
    with another lane's OpenMP team, and the fits' float reductions would change order)."""
    import torch  # here: the CLI imports this module, and torch costs a second and a half

    if requested is not None and requested < 1:
        raise ValueError(f"lanes must be >= 1 (got {requested})")
    if not str(device).startswith("cpu") or torch.get_num_threads() != 1:
        return 1
    return max(1, min(usable_cores() if requested is None else requested, jobs))


class Outcome(Generic[T]):
    """A job's result, or the exception it raised."""

    __slots__ = ("error", "value")

    def __init__(self, value: T | None = None, error: BaseException | None = None) -> None:
        self.value, self.error = value, error


def in_lanes(jobs: Sequence[Callable[[], T]], lanes: int) -> Iterator[tuple[int, Outcome[T]]]:
    """Run ``jobs`` on ``lanes`` threads; yield ``(index, outcome)`` in job order, each as soon as it and
    every job before it have finished (so the caller stores results in a fixed order while later jobs
    still train). One lane runs the jobs in this thread, one after another.

    A job's exception is handed back in its :class:`Outcome`, never raised here. If the caller stops
    (an exception, Ctrl-C), no lane starts another job; running jobs are on daemon threads, so the
    process can exit without waiting for them (checkpoints are written atomically, so a resumed run
    continues from the last one)."""
    if lanes <= 1 or len(jobs) <= 1:
        for i, job in enumerate(jobs):
            try:
                yield i, Outcome(job())
            except Exception as err:
                yield i, Outcome(error=err)
        return
    todo: queue.SimpleQueue[int] = queue.SimpleQueue()
    for i in range(len(jobs)):
        todo.put(i)
    done: dict[int, Outcome[T]] = {}
    ready = threading.Condition()
    stop = threading.Event()

    def lane() -> None:
        while not stop.is_set():
            try:
                i = todo.get_nowait()
            except queue.Empty:
                return
            try:
                out: Outcome[T] = Outcome(jobs[i]())
            except BaseException as err:
                out = Outcome(error=err)
            with ready:
                done[i] = out
                ready.notify_all()

    threads = [threading.Thread(target=lane, name=f"tdlab-lane-{n}", daemon=True) for n in range(min(lanes, len(jobs)))]
    for t in threads:
        t.start()
    try:
        for i in range(len(jobs)):
            with ready:
                while i not in done:
                    ready.wait(timeout=0.5)  # a timeout, so that Ctrl-C reaches this thread
                out = done.pop(i)
            yield i, out
    finally:
        stop.set()

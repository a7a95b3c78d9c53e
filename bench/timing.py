"""Timing helper shared by the benchmark scripts (run as ``python bench/NAME.py``, so ``bench/`` is on
``sys.path``)."""

from __future__ import annotations

import time
from collections.abc import Callable


def best_time(fn: Callable[[], object], repeats: int, warmup: bool = True) -> float:
    """Seconds of the fastest of ``repeats`` calls of ``fn`` (after one untimed call if ``warmup``):
    the minimum is the least noisy estimate on a shared machine."""
    if warmup:
        fn()
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return min(times)

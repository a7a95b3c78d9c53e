"""Timing helper shared by the benchmark scripts (run as ``python bench/NAME.py``, so ``bench/`` is on
``sys.path``)."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import torch


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


def objective_steps(
    model: torch.nn.Module,
    opt: torch.optim.Optimizer,
    objective: Any,
    sample: Callable[[list[torch.Generator]], Any],
    steps: int,
    device: str,
) -> None:
    """``steps`` training steps of ``model`` (an ensemble) with a tdlab objective: ``sample(gens)`` draws a
    raw sample from the members' train-data generators, the objective prepares and scores it, the summed
    per-member losses are stepped. Synchronises a GPU at the end so a timer sees the work."""
    from tdlab.seeding import Purpose, generators

    gens = generators(model.seeds, Purpose.TRAIN_DATA, device)
    for _ in range(steps):
        loss = objective.loss(model, objective.prepare(sample(gens), gens))
        opt.zero_grad()
        loss.sum().backward()
        opt.step()
    if device != "cpu":
        torch.cuda.synchronize()

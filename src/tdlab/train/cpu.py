"""CPU execution settings scoped to a block: the torch thread count, and flushing denormal floats."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

import torch

__all__ = ["cpu_threads", "flush_denormals"]


@contextmanager
def cpu_threads(n: int | None, device: str) -> Iterator[None]:
    """Run with ``n`` torch intra-op threads on the CPU (at most the threads this process has: its share of the
    cores, :mod:`tdlab.cores`), restored afterwards (``None``, or a non-CPU ``device``: leave them as they are).

    Why: the models of the Markov-tying, in-context-Markov and multi-modal ICL experiments work on many
    tiny tensors (d <= 32, a few thousand tokens a step). A second thread buys little there, and on
    shared cores its OpenMP spin-waits cost a lot. Measured on the 2-core machine under load:
    markov-tying training, 2 arms x 300 steps, 5.1 s CPU / 7.6 s wall with 1 thread vs 79 s / 136 s
    with 2; markov-icl-depth quick cells, 100 steps each, 16 s / 26 s vs 96 s / 182 s; a batched
    32x32 ``eigh`` 0.2 s vs 18 s.
    """
    if n is None or not str(device).startswith("cpu"):
        yield
        return
    old = torch.get_num_threads()
    torch.set_num_threads(min(n, old))  # never more than this process's share (tdlab.cores)
    try:
        yield
    finally:
        torch.set_num_threads(old)


@contextmanager
def flush_denormals(device: str) -> Iterator[None]:
    """Treat denormal floats (|x| < 1.2e-38 in fp32) as zero on the CPU while the block runs.

    Why: small-init models without LayerNorm (the Sec. 2 model of seed 000 at sigma = 0.02) make
    denormal intermediates during training, and x86 arithmetic on denormals is many times slower.
    Measured on the 2-core machine, 64-member Sec. 2 ensemble, sequence length 64: 76 ms per step
    without, 47 ms with (ReLU forward 9.4 ms -> 0.6 ms). Values that small carry no information
    for a loss of order 0.1-1 nats. Restores the default (off) afterwards.
    """
    if not str(device).startswith("cpu"):
        yield
        return
    torch.set_flush_denormal(True)
    try:
        yield
    finally:
        torch.set_flush_denormal(False)

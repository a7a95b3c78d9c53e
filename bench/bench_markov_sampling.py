"""Tokens/s of the prefix-scan sampler of k-th order Markov sources vs a Python loop over positions.

The loop is the straightforward sampler (as in seed 003's reference setting): one
``torch.multinomial`` draw per position, vectorised over the batch, each sequence reading the row of
its own kernel at its current state. The scan (:mod:`tdlab.tasks.markov_kth`) builds the random map
of every step at once and composes them in ``ceil(log2 T)`` gathers.

    PYTHONPATH=src python bench/bench_markov_sampling.py [--members 1] [--repeats 5] [--threads N]
"""

from __future__ import annotations

import argparse

import torch
from timing import best_time

from tdlab.tasks.markov_kth import InContextMarkov, KthOrderMarkov, sample_dirichlet


def loop_sample(task, gens: list[torch.Generator], batch: int, length: int) -> torch.Tensor:
    """Reference sampler: ``(E, B, T)`` tokens, Python loop over positions (first k uniform)."""
    k, V = task.k, task.vocab
    out = []
    for g in gens:
        if isinstance(task, InContextMarkov):
            kernels = sample_dirichlet(task.alpha, (batch, V**k, V), g)  # (B, S, V)
        else:
            kernels = task.kernel.expand(batch, *task.kernel.shape)
        rows = torch.arange(batch)
        x = torch.empty(batch, length, dtype=torch.long)
        x[:, :k] = torch.randint(V, (batch, min(k, length)), generator=g)
        s = (x[:, :k] * V ** torch.arange(k - 1, -1, -1)).sum(-1)
        for t in range(k, length):
            v = torch.multinomial(kernels[rows, s], 1, generator=g).squeeze(-1)
            x[:, t] = v
            s = (s % V ** (k - 1)) * V + v
        out.append(x)
    return torch.stack(out)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--members", type=int, default=1, help="ensemble members E")
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--threads", type=int, default=0, help="torch threads (0: torch default)")
    args = ap.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)

    tasks = {
        "in-context k=2 V=2": InContextMarkov(2, 2, alpha=1.0, init="uniform"),
        "fixed k=3 V=2": KthOrderMarkov.random(3, 2, torch.Generator().manual_seed(0), init="uniform"),
        "in-context k=2 V=3": InContextMarkov(2, 3, alpha=1.0, init="uniform"),
    }
    threads = torch.get_num_threads()
    print(f"torch {torch.__version__}, threads={threads}, members E={args.members}, best of {args.repeats}")
    print(f"{'source':<22}{'T':>6}{'B':>5}{'scan tok/s':>14}{'loop tok/s':>14}{'scan/loop':>11}")
    for name, task in tasks.items():
        for T in (256, 1024):
            for B in (16, 64):
                gens = [torch.Generator().manual_seed(e) for e in range(args.members)]
                scan = best_time(lambda task=task, gens=gens, B=B, T=T: task.sample(gens, B, T), args.repeats)
                loop = best_time(lambda task=task, gens=gens, B=B, T=T: loop_sample(task, gens, B, T), args.repeats)
                n = args.members * B * T
                print(f"{name:<22}{T:>6}{B:>5}{n / scan:>14.3g}{n / loop:>14.3g}{loop / scan:>10.1f}x")


if __name__ == "__main__":
    main()

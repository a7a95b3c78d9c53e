"""Ensemble speed-up of the attention-only grid of ``markov-icl-depth-linear`` on CPU (seed 003 Part II).

For each depth of the grid, E members of an attention-only GPT (no MLP, no LayerNorm, relative
key/value positions, one head) on in-context k-th order Markov sequences are trained for a few steps
two ways in this process, with the same trainer, data and seeds:

* ``ensemble``: one :class:`~tdlab.models.gpt.GPT` with E members (``chunk=E``), as the experiment does;
* ``loop``: the same E members one after another (``chunk=1``).

It checks that both give the same final parameters (member e is the model trained alone), then
prints members·steps/s of each and their ratio per depth and for the whole grid (E = 5 × depths).

    PYTHONPATH=src python bench/bench_icl_linear.py [--members 5] [--depths 1 2 3 4 5] [--steps 20]
        [--batch 32] [--seq-len 64] [--k 2] [--threads 2]
"""

from __future__ import annotations

import argparse
import time

import torch

from tdlab.models.gpt import GPT, GPTConfig
from tdlab.seeding import member_seeds
from tdlab.tasks.markov_kth import InContextMarkov
from tdlab.train.trainer import TrainConfig, Trainer


def fit_time(cfg: GPTConfig, tcfg: TrainConfig, seeds: list[int], task: InContextMarkov) -> tuple[float, list[dict]]:
    """Seconds of one ``Trainer.fit`` and the members' final states."""
    t0 = time.perf_counter()
    result = Trainer(tcfg, progress=False).fit(lambda s: GPT(cfg, s), seeds, task)
    return time.perf_counter() - t0, result.states


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--members", type=int, default=5)
    ap.add_argument("--depths", type=int, nargs="+", default=[1, 2, 3, 4, 5])
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--seq-len", type=int, default=64)
    ap.add_argument("--d", type=int, default=16)
    ap.add_argument("--k", type=int, default=2)
    ap.add_argument("--threads", type=int, default=None, help="torch.set_num_threads for this run")
    args = ap.parse_args()
    if args.threads is not None:
        torch.set_num_threads(args.threads)
    task = InContextMarkov(args.k, 2, 1.0)
    seeds = member_seeds(0, args.members)
    print(
        f"torch {torch.__version__}, {torch.get_num_threads()} threads; E={args.members}, k={args.k}, d={args.d}, "
        f"T={args.seq_len}, batch {args.batch}, {args.steps} steps; attention-only GPT, relative k/v positions"
    )
    print(f"{'depth':>5} {'ensemble member-steps/s':>24} {'loop member-steps/s':>20} {'ratio':>7} {'max |dθ|':>10}")
    tot_ens = tot_loop = 0.0
    warm = GPTConfig(
        arch="gpt2",
        d=args.d,
        layers=1,
        mlp=False,
        norm="none",
        positions="relative",
        rel_encoding="kv",
        max_len=args.seq_len,
    )
    fit_time(
        warm, TrainConfig(steps=2, batch=args.batch, seq_len=args.seq_len, eval_every=2, eval_batches=1), seeds, task
    )  # warm-up
    for depth in args.depths:
        cfg = GPTConfig(
            arch="gpt2",
            d=args.d,
            layers=depth,
            heads=1,
            mlp=False,
            norm="none",
            positions="relative",
            rel_encoding="kv",
            max_len=args.seq_len,
        )
        base = dict(
            steps=args.steps, batch=args.batch, seq_len=args.seq_len, lr=1e-2, eval_every=args.steps, eval_batches=1
        )
        t_ens, s_ens = fit_time(cfg, TrainConfig(**base, chunk=args.members), seeds, task)
        t_loop, s_loop = fit_time(cfg, TrainConfig(**base, chunk=1), seeds, task)
        diff = max(float((a[n] - b[n]).abs().max()) for a, b in zip(s_ens, s_loop, strict=True) for n in a)
        assert diff < 1e-3, f"ensemble and loop disagree at depth {depth}: {diff}"
        n = args.members * args.steps
        tot_ens, tot_loop = tot_ens + t_ens, tot_loop + t_loop
        print(f"{depth:>5} {n / t_ens:>24,.1f} {n / t_loop:>20,.1f} {t_loop / t_ens:>6.2f}x {diff:>10.1e}")
    n = args.members * args.steps * len(args.depths)
    print(f"{'grid':>5} {n / tot_ens:>24,.1f} {n / tot_loop:>20,.1f} {tot_loop / tot_ens:>6.2f}x")


if __name__ == "__main__":
    main()

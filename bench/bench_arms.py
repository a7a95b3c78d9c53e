"""Arms that share shapes as one stacked ensemble vs one after another, at an experiment's paper shapes.

Several seed experiments train arms that differ only in their data (markov-tying's (p, q) cells of one tying,
markov-icommon's cells, markov-icl-depth's orders k at one depth and encoding): the same model shape, the
same members. They could train as one ensemble of arms × members instead of one ensemble per arm. This prints,
per experiment, the time of one training step of every arm both ways and the ratio (one after another / stacked:
above 1, stacking pays), on the device asked for.

A step is the trainer's next-token objective (forward, backward of the summed per-member loss, one AdamW step)
on random binary sequences of the paper profile's batch and length; the model is the experiment's own arm
model. Timing: the best of ``--repeats`` calls of ``--steps`` steps after one warm-up (``bench/timing.py``).

Usage: ``python bench/bench_arms.py [NAME ...] [--device cpu] [--threads 1] [--steps 3] [--repeats 3]``
"""

from __future__ import annotations

import argparse
from collections.abc import Callable
from typing import Any

import torch
from timing import best_time

from tdlab.config import build_config
from tdlab.experiments.base import get
from tdlab.models.gpt import GPT, GPTConfig
from tdlab.train.objectives import NextToken


def _arms(name: str) -> tuple[GPTConfig, int, int, int, int]:
    """``(model, arms sharing it, members, batch, sequence length)`` at the paper profile."""
    exp = get(name)
    cfg: Any = build_config(exp.Config, exp.profiles["paper"])
    t = cfg.train
    if name == "markov-tying":  # the (p, q) cells of one tying
        return cfg.arm_model(True), len(cfg.grid), cfg.members, t.batch, t.seq_len
    if name == "markov-icommon":  # every (p, q) cell
        return cfg.arm_model(), len(cfg.grid), cfg.members, t.batch, t.seq_len
    if name == "markov-icl-depth":  # the orders k at the deepest depth, one encoding
        return cfg.arm_model(max(cfg.depths), cfg.positions[0]), len(cfg.ks), cfg.members, t.batch, t.seq_len
    raise SystemExit(f"unknown experiment {name!r}; allowed: {', '.join(EXPERIMENTS)}")


EXPERIMENTS = ("markov-tying", "markov-icommon", "markov-icl-depth")


def _stepper(mcfg: GPTConfig, members: int, batch: int, length: int, n: int, device: str) -> Callable[[], None]:
    model = GPT(mcfg, list(range(members))).to(device)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    obj = NextToken()
    g = torch.Generator().manual_seed(0)
    tokens = torch.randint(0, mcfg.vocab, (members, batch, length + 1), generator=g).to(device)

    def run() -> None:
        for _ in range(n):
            loss = obj.loss(model, obj.prepare({"tokens": tokens}, []))
            opt.zero_grad()
            loss.sum().backward()
            opt.step()
        if device != "cpu":
            torch.cuda.synchronize()

    return run


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("names", nargs="*", default=list(EXPERIMENTS), help="experiments (default: all)")
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--steps", type=int, default=3)
    ap.add_argument("--repeats", type=int, default=3)
    a = ap.parse_args()
    torch.set_num_threads(a.threads)
    print(f"device {a.device}, {a.threads} thread(s), {a.steps} steps per call, best of {a.repeats}")
    print("| experiment | arms x members | batch x length | one after another (s/step) | stacked (s/step) | ratio |")
    print("|---|---|---|---|---|---|")
    for name in a.names:
        mcfg, arms, members, batch, length = _arms(name)
        one = best_time(_stepper(mcfg, members, batch, length, a.steps, a.device), a.repeats) / a.steps
        stacked = best_time(_stepper(mcfg, arms * members, batch, length, a.steps, a.device), a.repeats) / a.steps
        print(
            f"| `{name}` | {arms} x {members} | {batch} x {length} | {arms * one:.3f} | {stacked:.3f} | "
            f"{arms * one / stacked:.2f}x |"
        )


if __name__ == "__main__":
    main()

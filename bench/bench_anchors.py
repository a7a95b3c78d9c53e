"""Throughput of seed 001's γ-sweep: the γ × seed members as one ensemble vs the same members
trained one after the other, in one process.

Model: the seed-001 post-LN transformer at the quick profile's widths (d_m 64, d_k 32, d_ff 128; A.3's
200/64/512 with ``--paper-widths``), last-position objective, batch 100, AdamW, clip 1, on a fixed data
set of anchor sequences (keys 21..40). Prints steps/s for E = 6 and E = 24 (γ ∈ {0.3, 0.5, 0.8} x 2 or 8
seeds) and the ratio (target: never slower on a CPU, >= 5x on a GPU at E = 24).

Usage: ``python bench/bench_anchors.py [--steps 20] [--device cpu] [--threads 1] [--paper-widths]``
"""

from __future__ import annotations

import argparse

import torch
from timing import best_time

from tdlab.experiments.paper001_reasoning_bias.common.training import GammaArms, Seed001GPTConfig, gamma_gpt
from tdlab.seeding import Purpose, generators
from tdlab.tasks.anchors import Anchors, AnchorsConfig
from tdlab.train.objectives import LastPosition


def steps(model: torch.nn.Module, data: dict[str, torch.Tensor], n: int, batch: int, device: str) -> None:
    """``n`` AdamW steps (clip 1 per member) on random batches of the fixed data set."""
    obj = LastPosition()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3, weight_decay=0.0)
    E = data["tokens"].shape[0]
    gens = generators(model.seeds, Purpose.TRAIN_DATA)
    for _ in range(n):
        idx = torch.stack([torch.randint(0, data["tokens"].shape[1], (batch,), generator=g) for g in gens]).to(device)
        rows = torch.arange(E, device=device)[:, None]
        b = obj.prepare({k: v[rows, idx] for k, v in data.items()}, gens)
        loss = obj.loss(model, b)
        opt.zero_grad()
        loss.sum().backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)  # the bench times the step, not per-member clipping
        opt.step()
    if device != "cpu":
        torch.cuda.synchronize()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--paper-widths", action="store_true")
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    dev = args.device
    task = Anchors(AnchorsConfig(key_min=21, key_max=40, n_train=4_000, n_test=200))
    widths = {} if args.paper_widths else {"d": 64, "d_attn": 32, "d_ff": 128}
    cfg = Seed001GPTConfig(**widths, vocab=task.vocab, max_len=task.cfg.L)
    print(
        f"seed-001 transformer {widths or 'A.3 widths'}, batch 100, {args.steps} steps, device {dev}, threads {args.threads}"
    )
    for per_gamma in (2, 8):
        arms = GammaArms.make(0, (0.3, 0.5, 0.8), per_gamma)
        seeds = list(arms.seeds)
        one = task.dataset(torch.Generator().manual_seed(0), 4_000)
        data = {k: one[k].unsqueeze(0).expand(len(seeds), *one[k].shape).to(dev) for k in ("tokens", "label")}
        ens = gamma_gpt(cfg, seeds, arms.gamma_of).to(dev)
        singles = [gamma_gpt(cfg, [s], arms.gamma_of).to(dev) for s in seeds]
        t_ens = best_time(lambda ens=ens, data=data: steps(ens, data, args.steps, 100, dev), repeats=2)
        t_loop = best_time(
            lambda data=data, singles=singles: [
                steps(m, {k: v[:1] for k, v in data.items()}, args.steps, 100, dev) for m in singles
            ],
            repeats=1,
        )
        print(
            f"  E = {len(seeds):2d}: ensemble {args.steps / t_ens:7.2f} steps/s, members one after another "
            f"{args.steps / t_loop:7.2f} steps/s, speed-up x{t_loop / t_ens:.2f}"
        )


if __name__ == "__main__":
    main()

"""Throughput of seed 004's topic model and its loss landscape.

Prints, in one process:

1. training steps/s of the one-layer topic model (§3.3, LDA documents, masked-token objective) as one
   ensemble of E members vs E single models trained one after the other (target: never slower on
   a CPU, >= 10x on a GPU), for the all-trained model and for the one-hot uniform-attention model;
2. the masked-position shortcut (``gather_queries``) vs the full (E, B, N, V) output;
3. the landscape's grid evaluation time (Figs. 7, 8: 4 τ values x both maps) at 60 x 60 and 200 x 200.

Usage: ``python bench/bench_topics.py [--members 32] [--batch 40] [--steps 5] [--device cpu] [--threads 2]``
"""

from __future__ import annotations

import argparse

import torch
from timing import best_time, objective_steps

from tdlab.models.topic_attention import TopicAttention, TopicModelConfig
from tdlab.seeding import member_seeds
from tdlab.tasks.topics import Topics, TopicsConfig
from tdlab.theory import topics_landscape as tl
from tdlab.train.objectives import MaskedTokens


def train_steps(
    model: TopicAttention, task: Topics, objective: MaskedTokens, batch: int, steps: int, device: str
) -> None:
    objective_steps(
        model,
        torch.optim.Adam(model.parameters(), lr=0.01),
        objective,
        lambda gens: task.sample(gens, batch, 150, device),
        steps,
        device,
    )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--members", type=int, default=32)
    ap.add_argument("--batch", type=int, default=40)
    ap.add_argument("--steps", type=int, default=5)
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--threads", type=int, default=2)
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    E, dev = args.members, args.device
    task = Topics(TopicsConfig())
    seeds = member_seeds(0, E)
    print(f"topic model, T = v = 10, N ~ U{{100..150}}, batch {args.batch}, {args.steps} steps, device {dev}")
    for label, mcfg in (
        ("all trained", TopicModelConfig()),
        ("one-hot, uniform attention", TopicModelConfig(onehot=True, uniform_attn=True)),
    ):
        obj = MaskedTokens(vocab=101, gather_queries=True)
        ens = TopicAttention(mcfg, seeds).to(dev)
        singles = [TopicAttention(mcfg, [s]).to(dev) for s in seeds]
        t_ens = best_time(lambda ens=ens, obj=obj: train_steps(ens, task, obj, args.batch, args.steps, dev), repeats=2)
        t_loop = best_time(
            lambda obj=obj, singles=singles: [train_steps(m, task, obj, args.batch, args.steps, dev) for m in singles],
            repeats=1,
        )
        sps_ens, sps_loop = args.steps / t_ens, args.steps / t_loop
        print(
            f"  {label:28s} ensemble of {E}: {sps_ens:7.2f} steps/s   {E} single models: {sps_loop:7.2f} steps/s"
            f"   speed-up x{t_loop / t_ens:.2f}"
        )
    model = TopicAttention(TopicModelConfig(), seeds[:8]).to(dev)
    for gather in (False, True):
        obj = MaskedTokens(vocab=101, gather_queries=gather)
        t = best_time(lambda obj=obj: train_steps(model, task, obj, args.batch, args.steps, dev), repeats=2)
        print(f"  8 members, all trained, gather_queries={gather!s:5s}: {args.steps / t:7.2f} steps/s")
    for n in (60, 200):
        grid = tl.log_grid(1e-4, 1e7, n)

        def landscape(grid: torch.Tensor = grid) -> None:
            for tau in (20, 40, 60, 80):
                for kind in ("block", "diagonal"):
                    tl.landscape(kind, grid, grid, 100, 300, tau)

        print(f"  landscape, {n} x {n} grid, 4 τ x 2 maps: {best_time(landscape, repeats=3) * 1e3:8.1f} ms")


if __name__ == "__main__":
    main()

"""Throughput of the real-text encoder's masked-token training step (seed 004 §6.2).

Prints, in one process, tokens/s (every window position counts as a token) of the BERT-shaped encoder of
``topics-real`` (``GPT(arch="gpt2", causal=False, norm="post")``, tied output, word-level vocabulary) trained by
:class:`~tdlab.train.objectives.MaskedTokens` (p_m = 0.15, 80/10/10, output layer at the masked positions only):

1. one ensemble of E members vs E single models trained one after the other (the ratio is the ensemble's
   speed-up; target: never slower on a CPU, well above 1 on a GPU);
2. the masked-position shortcut (``gather_queries``) vs the full (E, B, T, V) output, 8 members.

Random windows over a vocabulary of ``--vocab`` words stand in for the corpus (the step's cost does not
depend on which words). Usage: ``python bench/bench_topics_real.py [--members 8] [--d 64] [--layers 2]
[--heads 4] [--vocab 5000] [--batch 32] [--seq-len 64] [--steps 3] [--device cpu] [--threads 2]``
"""

from __future__ import annotations

import argparse

import torch
from timing import best_time, objective_steps

from tdlab.models.gpt import GPT, GPTConfig
from tdlab.seeding import member_seeds
from tdlab.train.objectives import MaskedTokens

OFFSET = 2  # [MASK], [PAD] below the words (paper004_topics.common.real_text's layout)


def train_steps(
    model: GPT, windows: torch.Tensor, objective: MaskedTokens, batch: int, steps: int, device: str
) -> None:
    E = model.members
    objective_steps(
        model,
        torch.optim.AdamW(model.parameters(), lr=1e-3),
        objective,
        lambda gens: {"tokens": windows[torch.randint(0, windows.shape[0], (E, batch), device=device)]},
        steps,
        device,
    )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--members", type=int, default=8)
    ap.add_argument("--d", type=int, default=64)
    ap.add_argument("--layers", type=int, default=2)
    ap.add_argument("--heads", type=int, default=4)
    ap.add_argument("--vocab", type=int, default=5000)
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--seq-len", type=int, default=64)
    ap.add_argument("--steps", type=int, default=3)
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--threads", type=int, default=2)
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    E, dev, V = args.members, args.device, args.vocab + OFFSET + 1
    cfg = GPTConfig(
        arch="gpt2",
        vocab=V,
        d=args.d,
        layers=args.layers,
        heads=args.heads,
        max_len=args.seq_len,
        norm="post",
        causal=False,
    )
    windows = torch.randint(OFFSET, V, (4096, args.seq_len), generator=torch.Generator().manual_seed(0)).to(dev)
    seeds = member_seeds(0, E)
    tokens = args.steps * args.batch * args.seq_len  # per member
    print(
        f"encoder d={args.d} L={args.layers} H={args.heads}, {args.vocab} words, batch {args.batch} x {args.seq_len}, "
        f"{args.steps} steps, device {dev}"
    )
    obj = MaskedTokens(vocab=V, mask_id=0, words=(OFFSET, V), gather_queries=True)
    ens = GPT(cfg, seeds).to(dev)
    singles = [GPT(cfg, [s]).to(dev) for s in seeds]
    t_ens = best_time(lambda: train_steps(ens, windows, obj, args.batch, args.steps, dev), repeats=2)
    t_loop = best_time(lambda: [train_steps(m, windows, obj, args.batch, args.steps, dev) for m in singles], repeats=1)
    print(
        f"  ensemble of {E}: {E * tokens / t_ens:10.0f} tokens/s   {E} single models: {E * tokens / t_loop:10.0f} "
        f"tokens/s   ensemble / singles = x{t_loop / t_ens:.2f}"
    )
    for gather in (False, True):
        o = MaskedTokens(vocab=V, mask_id=0, words=(OFFSET, V), gather_queries=gather)
        t = best_time(lambda o=o: train_steps(ens, windows, o, args.batch, args.steps, dev), repeats=2)
        print(f"  {E} members, gather_queries={gather!s:5s}: {E * tokens / t:10.0f} tokens/s")


if __name__ == "__main__":
    main()

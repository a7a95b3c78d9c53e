"""A direction between two arms, judged over paired seeds: does a larger learning rate end lower?

Two ensembles of seed 000's Sec. 2 model (Sec. 2 equations, Eq. (1) loss) train on the same Markov chain
with the same member seeds (so member i of both arms shares its initialisation and data), one at each
learning rate. The statement "within this budget, the larger rate ends at a lower test loss" is declared
as a `compare` ClaimSpec (relation `lt`: measured − reference < −margin), judged with the paired
interval over seeds, behind the health gate (`assess_arm`: every member's loss went down). Not a seed
claim: it shows how an experiment of your own is judged like tdlab's 31.

    python examples/direction_claim.py                     # 4 seeds x 2 arms x 200 steps, a few seconds
    python examples/direction_claim.py --lrs 3e-3 1e-2 --steps 1000 --margin 0.005
"""

from __future__ import annotations

import argparse

from tdlab.claims import ClaimSpec, Measurements, Sample, assess_arm, judge
from tdlab.models.gpt import GPT, GPTConfig
from tdlab.seeding import member_seeds
from tdlab.tasks.markov import MarkovChain
from tdlab.train.trainer import TrainConfig, Trainer


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--lrs", type=float, nargs=2, default=[1e-3, 1e-2], metavar=("SMALL", "LARGE"))
    ap.add_argument("--members", type=int, default=4, help="seeds per arm (paired)")
    ap.add_argument("--steps", type=int, default=200)
    ap.add_argument("--seq-len", type=int, default=64)
    ap.add_argument("--margin", type=float, default=0.0, help="declared margin, nats")
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()

    task = MarkovChain(p=0.2, q=0.3)
    model = GPTConfig(arch="sec2", d=8, max_len=args.seq_len)
    seeds = member_seeds(args.seed, args.members)  # the same seeds in both arms: a paired comparison
    arms = {}
    for lr in args.lrs:
        cfg = TrainConfig(steps=args.steps, seq_len=args.seq_len, lr=lr, eval_every=max(1, args.steps // 5))
        fit = Trainer(cfg, progress=False).fit(lambda s: GPT(model, s), seeds, task)
        curves = [fit.series("test_loss", member=e)[1] for e in range(args.members)]
        arms[f"lr={lr:g}"] = ([c[0] for c in curves], [c[-1] for c in curves])
        print(f"lr={lr:g}: final test loss {', '.join(f'{c[-1]:.4f}' for c in curves)} ({fit.wall_time:.1f} s)")

    small, large = (f"lr={lr:g}" for lr in args.lrs)
    spec = ClaimSpec(
        "larger-lr-ends-lower",
        f"After {args.steps} steps the larger learning rate ends at a lower test loss",
        test="compare",
        relation="lt",
        quantity="final test loss, nats (large-lr arm − small-lr arm)",
        margin=args.margin,
        horizon="budget",
        paired=True,
        unit=" nats",
    )
    m = Measurements()
    m.row(spec.id, "sec2", Sample(arms[large][1]), reference=Sample(arms[small][1]), arms=[large, small])
    health = {arm: assess_arm(arm, initial, final) for arm, (initial, final) in arms.items()}
    (group,) = judge([spec], m, cfg=None, health=health)
    row = group.rows[0]
    print(
        f"paired difference {row.interval.center:+.4f}, 95% interval [{row.interval.lo:+.4f}, {row.interval.hi:+.4f}] nats"
    )
    print(f"verdict: {group.verdict}")
    print(row.describe())


if __name__ == "__main__":
    main()

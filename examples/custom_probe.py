"""A probe of your own over named activations: how far block 0's attention is from uniform, per member.

Seed 000 (Local to Global), Sec. 2 equations: on a first-order chain the Bayes predictor needs only x_n, which the
residual stream already carries (x_n e + p_n), so block 0's attention has nothing to find. The probe reads
`blocks.0.attn.pattern` (E, B, H, T, T) from `model.run_with_cache` and measures, per member, the attention entropy
relative to uniform causal attention's (1 = uniform), the mass on the current and previous token, and the mean
distance attended. The same function runs inside the Trainer as a probe (`probes=[...]`, rows like the losses), and
an `every` claim judges it per member, each with its own standard error over the probe batch. (Seed 003's context-
matching score, `tdlab.probes.attention`, is the same kind of probe for in-context sources.)

    python examples/custom_probe.py                        # 4 members, 300 steps, a few seconds
    python examples/custom_probe.py --arch gpt2 --steps 1000
"""

from __future__ import annotations

import argparse

import torch

from tdlab.claims import ClaimSpec, Measurements, Sample, judge
from tdlab.models.gpt import GPT, GPTConfig
from tdlab.seeding import generators, member_seeds
from tdlab.tasks.markov import MarkovChain
from tdlab.train.trainer import TrainConfig, Trainer

NAME = "blocks.0.attn.pattern"


def attention_stats(model: GPT, tokens: torch.Tensor) -> dict[str, torch.Tensor]:
    """Per member and sequence ``(E, B)``: relative entropy, mass on key n and n-1, mean distance."""
    _, cache = model.run_with_cache(tokens, names=[NAME])
    att = cache[NAME].mean(2)  # (E, B, T, T): heads averaged; rows are queries n, columns keys i <= n
    n = torch.arange(att.shape[-1], dtype=att.dtype)
    entropy = -(att * att.clamp_min(1e-12).log()).sum(-1)[..., 1:]  # query 0 has one key: skip it
    return {
        "rel_entropy": (entropy / (n[1:] + 1).log()).mean(-1),
        "on_current": att.diagonal(dim1=-2, dim2=-1).mean(-1),
        "on_previous": att.diagonal(offset=-1, dim1=-2, dim2=-1).mean(-1),
        "distance": (att * (n[:, None] - n[None, :]).clamp(min=0)).sum(-1).mean(-1),
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--arch", default="sec2", choices=["sec2", "gpt2"])
    for flag, default in (("--members", 4), ("--steps", 300), ("--seq-len", 64), ("--seed", 0)):
        ap.add_argument(flag, type=int, default=default)
    args = ap.parse_args()
    task, seeds = MarkovChain(p=0.2, q=0.3), member_seeds(args.seed, args.members)
    probe_tokens = task.sample(generators(seeds, "probe-data"), 32, args.seq_len)  # own stream, per member
    model = GPT(GPTConfig(arch=args.arch, d=8, max_len=args.seq_len), seeds)

    def probe(m):
        return {"attn_rel_entropy": attention_stats(m, probe_tokens)["rel_entropy"].mean(1)}

    cfg = TrainConfig(steps=args.steps, seq_len=args.seq_len, lr=1e-2, eval_every=max(1, args.steps // 3))
    fit = Trainer(cfg, progress=False, probes=[probe], probe_every=max(1, args.steps // 3)).fit_model(model, task)
    s = attention_stats(model, probe_tokens)  # fit_model trained `model` in place
    T = args.seq_len
    on_current = sum(1 / (t + 1) for t in range(T)) / T
    print(f"uniform causal attention: on current {on_current:.4f}, distance {(T - 1) / 4:.2f}")
    for e in range(args.members):
        steps, ent = fit.series("attn_rel_entropy", member=e)
        print(
            f"member {e}: test loss {fit.series('test_loss', e)[1][-1]:.4f}; rel. entropy along training "
            + " ".join(f"{v:.3f}@{st}" for st, v in zip(steps, ent, strict=True))
            + f"; on current {s['on_current'][e].mean():.4f}, previous {s['on_previous'][e].mean():.4f}, "
            f"distance {s['distance'][e].mean():.2f}"
        )
    spec = ClaimSpec(
        "attention-stays-uniform",
        "Block 0's attention stays near uniform on a first-order chain",
        test="every",
        relation="ge",
        quantity="attention entropy / uniform causal attention's",
        expected=1.0,
        tolerance=0.05,
        horizon="budget",
        kind="sanity",
    )
    ent, m = s["rel_entropy"], Measurements()  # ent: (E, B)
    m.row(spec.id, args.arch, Sample(ent.mean(1).tolist(), se=(ent.std(1) / ent.shape[1] ** 0.5).tolist()))
    (group,) = judge([spec], m, cfg=None)
    print(f"verdict: {group.verdict}")
    print(group.rows[0].describe())


if __name__ == "__main__":
    main()

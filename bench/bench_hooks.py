"""What bare hook points cost a forward pass (no hook attached: the training case).

Every model passes its activations through :class:`tdlab.models.hooks.HookPoint` s. For a few models at the
sizes their quick profiles train, this times the no-grad forward pass and the forward + backward pass three
ways, in one process, interleaved so that load on a shared machine hits all alike:

* ``hooked``: as the models run (every point a bare ``HookPoint``);
* ``bypassed``: ``HookPoint.__call__`` swapped for a plain ``return x`` (the cheapest Python identity; what is
  left is the call itself, which any named activation costs);
* the point calls per forward, and what that many bare calls cost on their own (``calls x t_call``), as a
  share of the forward pass.

The ratio column is ``hooked / bypassed``. Usage: ``python bench/bench_hooks.py [--threads 1] [--repeats 30]``.
"""

from __future__ import annotations

import argparse
import time
from contextlib import contextmanager

import torch
from timing import best_time

from tdlab.models.ensemble import EnsembleModel
from tdlab.models.gpt import GPT, GPTConfig
from tdlab.models.hooks import HookPoint
from tdlab.models.normalised_attention import NormalisedAttention, NormAttnConfig
from tdlab.models.topic_attention import TopicAttention, TopicModelConfig


def _bypass(self: HookPoint, x: torch.Tensor) -> torch.Tensor:
    return x


@contextmanager
def bypassed():
    real = HookPoint.__call__
    HookPoint.__call__ = _bypass  # type: ignore[method-assign]
    try:
        yield
    finally:
        HookPoint.__call__ = real  # type: ignore[method-assign]


def point_calls(model: EnsembleModel, x: torch.Tensor) -> int:
    """How many hook-point calls one forward pass makes."""
    n = [0]

    def count(a: torch.Tensor, hook: HookPoint) -> None:
        n[0] += 1

    with torch.no_grad():
        model.run_with_hooks(x, fwd_hooks=[(lambda name: True, count)])
    return n[0]


def bare_call_seconds(repeats: int = 200_000) -> float:
    point, t = HookPoint(), torch.zeros(1)
    t0 = time.perf_counter()
    for _ in range(repeats):
        point(t)
    return (time.perf_counter() - t0) / repeats


def cases() -> list[tuple[str, EnsembleModel, torch.Tensor]]:
    g = torch.Generator().manual_seed(0)
    return [
        # markov-init quick: Sec. 2 model, 3 members, batch 16 x 256 binary tokens
        ("GPT sec2 (E=3, B=16, T=256)", GPT(GPTConfig(d=8), [0, 1, 2]), torch.randint(0, 2, (3, 16, 256), generator=g)),
        (
            "GPT-2 2 layers (E=3, B=16, T=64)",
            GPT(GPTConfig(arch="gpt2", vocab=3, d=16, heads=2, layers=2, max_len=64), [0, 1, 2]),
            torch.randint(0, 3, (3, 16, 64), generator=g),
        ),
        (
            "TopicAttention (E=4, B=32, N=100)",
            TopicAttention(TopicModelConfig(), [0, 1, 2, 3]),
            torch.randint(0, 101, (4, 32, 100), generator=g),
        ),
        (
            "NormalisedAttention (E=3, B=16, T=64)",
            NormalisedAttention(NormAttnConfig(), [0, 1, 2]),
            torch.randint(0, 2, (3, 16, 64), generator=g),
        ),
    ]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--repeats", type=int, default=30)
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    t_call = bare_call_seconds()
    print(f"one bare HookPoint call: {t_call * 1e9:.0f} ns")
    print(
        f"{'model':40s} {'pass':9s} {'hooked ms':>10s} {'bypassed ms':>12s} {'ratio':>6s} {'calls':>6s} {'calls share':>12s}"
    )
    for name, model, x in cases():
        calls = point_calls(model, x)

        def fwd(model: EnsembleModel = model, x: torch.Tensor = x) -> None:
            with torch.no_grad():
                model(x)

        def fwd_bwd(model: EnsembleModel = model, x: torch.Tensor = x) -> None:
            model.zero_grad(set_to_none=True)
            model(x).float().sum().backward()

        for label, fn in (("forward", fwd), ("fwd+bwd", fwd_bwd)):
            hooked, bare = [], []
            for _ in range(3):  # interleaved rounds, best of each
                hooked.append(best_time(fn, args.repeats))
                with bypassed():
                    bare.append(best_time(fn, args.repeats))
            h, b = min(hooked), min(bare)
            print(
                f"{name:40s} {label:9s} {h * 1e3:10.3f} {b * 1e3:12.3f} {h / b:6.3f} {calls:6d} "
                f"{calls * t_call / h:11.2%}"
            )


if __name__ == "__main__":
    main()

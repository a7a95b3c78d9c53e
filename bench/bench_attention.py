"""Where a paper-scale Markov run's CPU time goes: causal attention of tiny heads over long sequences.

``markov-init``'s paper profile (Table 2: d = 8, one head, sequence length 1024, batch 16, 5 members) trains
4 arms of 8000 steps; py-spy puts over 80 % of a step in attention, most of it in the backward pass. This
times one attention call at those shapes, forward alone and forward + backward, for the kernels torch offers on
the CPU: ``scaled_dot_product_attention``'s default (the flash kernel on the CPU), its math backend, and an
explicit ``softmax(q k^T / sqrt(d)) v`` with a causal mask (what the models run when a probe records the
pattern). The ratio column is each against the default's forward + backward.

Usage: ``python bench/bench_attention.py [--threads 1] [--batch 80] [--seq 1024] [--head 8] [--repeats 3]``
(batch: members x sequences per step).
"""

from __future__ import annotations

import argparse
import math

import torch
import torch.nn.functional as F
from timing import best_time
from torch.nn.attention import SDPBackend, sdpa_kernel


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--batch", type=int, default=80, help="members x sequences per step (paper markov-init: 5 x 16)")
    ap.add_argument("--seq", type=int, default=1024)
    ap.add_argument("--head", type=int, default=8, help="head width d_h")
    ap.add_argument("--repeats", type=int, default=3)
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    g = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(args.batch, 1, args.seq, args.head, generator=g, requires_grad=True) for _ in range(3))
    causal = torch.ones(args.seq, args.seq, dtype=torch.bool).tril()

    def sdpa() -> torch.Tensor:
        return F.scaled_dot_product_attention(q, k, v, is_causal=True)

    def explicit() -> torch.Tensor:
        s = (q @ k.transpose(-1, -2)) / math.sqrt(args.head)
        return s.masked_fill(~causal, float("-inf")).softmax(-1) @ v

    def forward(f):
        def go() -> None:
            with torch.no_grad():
                f()

        return go

    def both(f):
        def go() -> None:
            f().sum().backward()

        return go

    def math_backend(fn):
        def go() -> None:
            with sdpa_kernel(SDPBackend.MATH):
                fn()

        return go

    cases = {
        "sdpa (default)": (forward(sdpa), both(sdpa)),
        "sdpa (math backend)": (math_backend(forward(sdpa)), math_backend(both(sdpa))),
        "explicit softmax": (forward(explicit), both(explicit)),
    }
    print(f"causal attention, {args.batch} x {args.seq} tokens, head width {args.head}, {args.threads} thread(s)")
    print(f"{'kernel':<22}{'forward s':>11}{'fwd+bwd s':>11}{'bwd / fwd':>11}{'vs default':>12}")
    base = None
    for name, (fwd, fb) in cases.items():
        tf, tb = best_time(fwd, args.repeats), best_time(fb, args.repeats)
        base = base or tb
        print(f"{name:<22}{tf:>11.3f}{tb:>11.3f}{(tb - tf) / tf:>11.2f}{tb / base:>11.2f}x")


if __name__ == "__main__":
    main()

"""Throughput of the vectorised LCA_T against a per-prompt Python loop (seed arXiv:2602.04872, App. H sizes).

Times one forward + backward pass of the squared query loss for a depth-10 LCA stack on
N = 2000 prompts of context length L = 100 (d1 = d2 = 16), in two implementations in this process:

* ``LCA.forward``: all prompts (and ensemble members) at once, tokens as rows;
* ``per_prompt_reference``: the paper's column-layout equations, one prompt at a time.

Prints prompts/s for each and the ratio, after checking that both give the same loss and gradients.
The loop's cost is linear in the number of prompts, so by default it is timed on the first 200
prompts only (``--loop-prompts``); the vectorised pass is always timed on all N.

    PYTHONPATH=src python bench/bench_icl.py [--params one full] [--members 1] [--threads 2]
"""

from __future__ import annotations

import argparse
import time

import torch
from timing import best_time

from tdlab.models.linear_attention import LCA, per_prompt_reference
from tdlab.tasks.multimodal import MultiModalBatch, MultiModalPrompts
from tdlab.theory.icl import alpha_star


def forward_backward(model: LCA, predict, batch) -> tuple[float, list[torch.Tensor]]:
    """One loss evaluation and backward pass; returns the loss and the parameter gradients."""
    model.zero_grad(set_to_none=True)
    loss = ((predict(model, batch.X, batch.y, batch.x_query) - batch.y_query) ** 2).mean()
    loss.backward()
    return loss.item(), [p.grad.clone() for p in model.parameters()]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--params", nargs="+", default=["one", "full"], help="LCA parametrisations to time")
    ap.add_argument("--depth", type=int, default=10)
    ap.add_argument("--prompts", type=int, default=2000)
    ap.add_argument("--context", type=int, default=100)
    ap.add_argument("--members", type=int, default=1, help="ensemble members E")
    ap.add_argument("--loop-prompts", type=int, default=200, help="prompts per member timed in the loop")
    ap.add_argument("--repeats", type=int, default=3, help="timed repeats of the vectorised pass (best kept)")
    ap.add_argument("--threads", type=int, default=None, help="torch.set_num_threads for this run")
    args = ap.parse_args()
    if args.threads is not None:
        torch.set_num_threads(args.threads)

    task = MultiModalPrompts()  # App. H: d1 = d2 = 16, per-modality norms ~ U[0, 5]
    gens = [torch.Generator().manual_seed(1000 + e) for e in range(args.members)]
    batch = task.sample(gens, args.prompts, args.context)
    sub = MultiModalBatch(**{k: v[:, : args.loop_prompts] for k, v in vars(batch).items()})
    n, n_loop = args.members * args.prompts, args.members * sub.shape[1]
    print(
        f"torch {torch.__version__}, {torch.get_num_threads()} threads; E={args.members}, N={args.prompts}, "
        f"L={args.context}, d={task.d}, T={args.depth}, float32, forward+backward; loop timed on {sub.shape[1]} prompts"
    )
    print(f"{'param':>8} {'vectorised prompts/s':>21} {'loop prompts/s':>15} {'ratio':>8} {'max |dgrad|':>12}")
    for param in args.params:
        model = LCA(task.d, args.depth, seeds=list(range(args.members)), param=param, alpha0=alpha_star(task))
        forward_backward(model, LCA.__call__, batch)  # warm-up
        t_vec = best_time(lambda model=model: forward_backward(model, LCA.__call__, batch), args.repeats, warmup=False)
        t0 = time.perf_counter()
        loss_loop, g_loop = forward_backward(model, per_prompt_reference, sub)
        t_loop = time.perf_counter() - t0
        loss_vec, g_vec = forward_backward(model, LCA.__call__, sub)  # same prompts as the loop
        dgrad = max(
            (a - b).abs().max().item() / (b.abs().max().item() + 1e-30) for a, b in zip(g_vec, g_loop, strict=True)
        )
        assert abs(loss_vec - loss_loop) <= 1e-4 * abs(loss_loop), (loss_vec, loss_loop)
        rate_vec, rate_loop = n / t_vec, n_loop / t_loop
        print(f"{param:>8} {rate_vec:>21,.0f} {rate_loop:>15,.1f} {rate_vec / rate_loop:>7.0f}x {dgrad:>12.1e}")


if __name__ == "__main__":
    main()

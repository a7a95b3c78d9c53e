"""Benchmark: batched gradient flow on the seed-000 Markov landscape (tdlab.theory.markov_landscape).

Unit of work: 10^4 trajectories from theta0 ~ N(0, sigma^2 I), one chain (p, q), integrated to
t_end with K save times, for the 2-parameter (e, w) and 3-parameter (e, w, a) models. Prints wall
and CPU time and trajectories/s per (model, integrator), and the speed ratio of the closed-form
gradient to autograd, both per batched gradient call and over a whole flow (same process, same
points).

    PYTHONPATH=src python bench/bench_flow.py            # defaults below
    PYTHONPATH=src python bench/bench_flow.py --n 2000 --skip-autograd-flow
"""

from __future__ import annotations

import argparse
import platform
import time

import torch

from tdlab.theory import markov_landscape as ml
from tdlab.theory.markov_landscape import CriticalKind


def _timed(fn):
    w0, c0 = time.perf_counter(), time.process_time()
    out = fn()
    return out, time.perf_counter() - w0, time.process_time() - c0


def _grad_call_ratio(th: torch.Tensor, p: float, q: float, reps: int) -> tuple[float, float]:
    """Seconds per batched gradient call: closed form vs autograd (single thread, as in the flow)."""
    prev = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        ml.grad_loss(th, p, q)
        ml.autograd_grad_loss(th, p, q)
        _, wc, _ = _timed(lambda: [ml.grad_loss(th, p, q) for _ in range(reps)])
        _, wa, _ = _timed(lambda: [ml.autograd_grad_loss(th, p, q) for _ in range(reps)])
    finally:
        torch.set_num_threads(prev)
    return wc / reps, wa / reps


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=10_000, help="trajectories per run")
    ap.add_argument("--t-end", type=float, default=200.0)
    ap.add_argument("--saves", type=int, default=11, help="save times, evenly spaced in [0, t_end]")
    ap.add_argument("--sigma", type=float, default=1.0)
    ap.add_argument("--p", type=float, default=0.2)
    ap.add_argument("--q", type=float, default=0.3)
    ap.add_argument("--methods", default="rosenbrock23,dopri5", help="integrators for the 2-param model")
    ap.add_argument(
        "--methods3",
        default="rosenbrock23",
        help="integrators for the 3-param model (dopri5 is stability-limited there: rows on the "
        "global-minimum surface at large |e| take >10^4 explicit steps)",
    )
    ap.add_argument("--skip-autograd-flow", action="store_true", help="only time single autograd calls")
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()

    print(
        f"torch {torch.__version__}, {platform.processor() or platform.machine()}, "
        f"torch threads {torch.get_num_threads()} (the integrator runs single-threaded)"
    )
    print(f"N={args.n} sigma={args.sigma} (p, q)=({args.p}, {args.q}) t_end={args.t_end} saves={args.saves}")
    g = torch.Generator().manual_seed(args.seed)
    t_eval = torch.linspace(0.0, args.t_end, args.saves)
    for dim in (2, 3):
        th0 = args.sigma * torch.randn(args.n, dim, generator=g, dtype=torch.float64)
        tc, ta = _grad_call_ratio(th0, args.p, args.q, reps=50)
        print(
            f"\n[{dim}-param] gradient call on {args.n} points: closed {tc * 1e3:.2f} ms, "
            f"autograd {ta * 1e3:.2f} ms, ratio autograd/closed = {ta / tc:.1f}x"
        )
        methods = (args.methods if dim == 2 else args.methods3).split(",")
        for method in methods:
            opts = {"method": method}
            if method == "dopri5":
                opts.update(rtol=1e-8, atol=1e-10, g_tol=1e-10)
            grads = ["closed"] if args.skip_autograd_flow or method != methods[0] else ["closed", "autograd"]
            walls = {}
            for grad in grads:
                res, wall, cpu = _timed(
                    lambda th0=th0, grad=grad, opts=opts: ml.run_flow(
                        th0, args.p, args.q, t_eval, gradient=grad, **opts
                    )
                )
                walls[grad] = wall
                codes = ml.classify_critical(res.final, args.p, args.q, atol=1e-4)
                frac = {
                    c.name: round(float((codes == int(c)).double().mean()), 4)
                    for c in CriticalKind
                    if bool((codes == int(c)).any())
                }
                E0, E1 = ml.energy(th0), ml.energy(res.final)
                drift = (E1 - E0).abs() / E0.abs().clamp_min(1.0)
                drift = drift[torch.isfinite(drift)].max().item()
                print(
                    f"  {method:13s} {grad:8s} wall {wall:7.2f} s  cpu {cpu:7.2f} s  "
                    f"{args.n / wall:8.0f} traj/s  grad-rows/traj {res.n_grad_rows / args.n:6.0f}  "
                    f"max steps {int(res.n_steps.max())}  finished {float(res.finished.double().mean()):.4f}  "
                    f"at rest {float(res.frozen.double().mean()):.3f}  energy drift {drift:.1e}  limits {frac}"
                )
            if "autograd" in walls:
                print(f"  flow ratio autograd/closed ({method}) = {walls['autograd'] / walls['closed']:.1f}x")


if __name__ == "__main__":
    main()

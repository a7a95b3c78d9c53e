"""Training-step throughput of the ``markov-init`` model (seed 000, Sec. 2 and GPT-2 variant).

Prints, in one process:

1. ms per training step of one model (data generation included, no evaluation) at sequence
   lengths 256 and 1024 for both architectures, against an in-process baseline written the way the
   seed authors' public code works (a Python loop over positions drawing one multinomial per
   position, plus evaluation on 24 fresh batches after every step is NOT included: we compare
   steps only), and against the reference figures measured on this machine class;
2. E members as one vectorised ensemble (chunked automatically) vs E single models one after the
   other, at lengths 64, 256 and 1024;
3. the same on CUDA when a GPU is available.

Usage: ``python bench/bench_markov_init.py [--members 64] [--steps 10] [--threads 2] [--device cpu]``
"""

from __future__ import annotations

import argparse
import time
from contextlib import nullcontext

import torch

from tdlab.models.gpt import GPT, GPTConfig
from tdlab.seeding import Purpose, generators, member_seeds
from tdlab.tasks.markov import MarkovChain
from tdlab.train.cpu import flush_denormals
from tdlab.train.trainer import TrainConfig, Trainer, auto_chunk, next_token_loss

# Issue 3: the seed authors' public code on 2 cores, fp32, d = 8, batch 16, ms per training step.
REFERENCE_MS = {("gpt2", 256): 17.0, ("gpt2", 1024): 103.0, ("sec2", 256): 15.0, ("sec2", 1024): 94.0}


def loop_sample(task: MarkovChain, gen: torch.Generator, batch: int, length: int) -> torch.Tensor:
    """Reference-style data generation: one multinomial draw per position (the baseline)."""
    P = task.kernel.float()
    x = torch.empty(1, batch, length, dtype=torch.long)
    x[0, :, 0] = torch.multinomial(torch.tensor(task.pi).float(), batch, replacement=True, generator=gen)
    for n in range(1, length):
        x[0, :, n] = torch.multinomial(P[x[0, :, n - 1]], 1, generator=gen).squeeze(-1)
    return x


def time_steps(step, steps: int, device: str) -> float:
    for _ in range(2):
        step()
    if device.startswith("cuda"):
        torch.cuda.synchronize()
    t = time.perf_counter()
    for _ in range(steps):
        step()
    if device.startswith("cuda"):
        torch.cuda.synchronize()
    return (time.perf_counter() - t) / steps


def single_model_step(arch: str, T: int, device: str, loop_data: bool) -> callable:
    task = MarkovChain(0.5, 0.8)
    model = GPT(GPTConfig(arch=arch, d=8, max_len=T), member_seeds(0, 1)).to(device)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3, betas=(0.9, 0.95), weight_decay=1e-3)
    # the loop baseline draws on the CPU (as the reference code does) and copies to the device
    gens = generators(model.seeds, Purpose.TRAIN_DATA, "cpu" if loop_data else device)

    def step() -> None:
        # tdlab's step flushes denormals on the CPU as its Trainer does; the reference-style baseline does not
        with nullcontext() if loop_data else flush_denormals(device):
            x = loop_sample(task, gens[0], 16, T + 1).to(device) if loop_data else task.sample(gens, 16, T + 1, device)
            loss = next_token_loss(model(x[..., :-1]), x[..., 1:]).sum()
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()

    return step


def ensemble_vs_loop(T: int, members: int, steps: int, device: str) -> tuple[float, float, int]:
    """Seconds per step for ``members`` members: (as a chunked ensemble, one model after another)."""
    task = MarkovChain(0.5, 0.8)
    cfg = GPTConfig(arch="sec2", d=8, max_len=T)
    seeds = member_seeds(0, members)
    chunk = auto_chunk(members, 16, T, device)
    tc = TrainConfig(steps=steps, batch=16, seq_len=T, eval_every=10**9, eval_batches=1, log_every=10**9, chunk=chunk)
    t = time.perf_counter()
    Trainer(tc, device, progress=False).fit(lambda s: GPT(cfg, s), seeds, task)
    ens = (time.perf_counter() - t) / steps
    loop_members = min(members, 8)  # time 8 singles and scale: the loop is linear in members
    tc1 = tc.model_copy(update={"chunk": 1})
    t = time.perf_counter()
    Trainer(tc1, device, progress=False).fit(lambda s: GPT(cfg, s), seeds[:loop_members], task)
    loop = (time.perf_counter() - t) / steps * members / loop_members
    return ens, loop, chunk


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--members", type=int, default=64)
    ap.add_argument("--steps", type=int, default=10)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--skip-single", action="store_true")
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    dev = args.device
    print(f"torch {torch.__version__}, device {dev}, threads {torch.get_num_threads()}")
    if not args.skip_single:
        print("\n1. one model, ms per training step (batch 16, d 8, data generation included, no evaluation)")
        print(
            f"{'arch':6} {'T':>5} {'tdlab':>9} {'loop-data baseline':>19} {'ratio':>6} {'reference':>10} {'ratio':>6}"
        )
        for arch in ("sec2", "gpt2"):
            for T in (256, 1024):
                ours = time_steps(single_model_step(arch, T, dev, False), args.steps, dev) * 1e3
                base = time_steps(single_model_step(arch, T, dev, True), max(3, args.steps // 3), dev) * 1e3
                ref = REFERENCE_MS[(arch, T)]
                print(f"{arch:6} {T:5d} {ours:9.1f} {base:19.1f} {base / ours:6.2f} {ref:10.1f} {ref / ours:6.2f}")
    print(
        f"\n2. {args.members} members (sec2): ensemble (auto chunk) vs one model after another, ms per step of all members"
    )
    print(f"{'T':>5} {'chunk':>5} {'ensemble':>10} {'loop':>10} {'speed-up':>9}")
    for T in (64, 256, 1024):
        ens, loop, chunk = ensemble_vs_loop(T, args.members, args.steps, dev)
        print(f"{T:5d} {chunk:5d} {ens * 1e3:10.1f} {loop * 1e3:10.1f} {loop / ens:9.2f}")


if __name__ == "__main__":
    main()

"""What the trainer's phase marks and the unwrapped optimisers cost or save on a representative quick fit.

One arm of ``markov-init``'s quick profile (``sec2/standard``, its members, a shortened schedule) is fitted in
this process by three trainers, alternating, each round in a new order:

* ``as is``: :class:`tdlab.train.trainer.Trainer`, its loop marked (:func:`tdlab.train.phases.phase`, no clock
  running) and its optimisers :mod:`tdlab.train.optim`'s;
* ``no marks``: the same module with every ``with phase(...):`` replaced by its body (an AST rewrite of its
  source, so nothing else differs);
* ``torch optim``: the marked trainer with ``torch.optim.AdamW`` / ``SGD`` in place of the unwrapped ones.

It prints each variant's median wall time over the rounds, its ratio to ``as is``, and whether its final
parameters equal ``as is``'s bit for bit. The unwrapped optimisers' one-off saving (the ``torch._dynamo``
import of a first ``step``) is measured apart, in fresh processes, alternating: the seconds from a fresh
interpreter to the end of a first optimiser step, each way.

    python bench/bench_trainer_overhead.py                      # 5 rounds of 300 steps
    python bench/bench_trainer_overhead.py --rounds 3 --steps 200
"""

from __future__ import annotations

import argparse
import ast
import statistics
import subprocess
import sys
import time
import types
from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import Any

import torch

import tdlab.train.trainer as marked
from tdlab.experiments.base import get
from tdlab.models.gpt import GPT
from tdlab.seeding import member_seeds
from tdlab.tasks.markov import MarkovChain


class _Unmark(ast.NodeTransformer):
    """``with phase(NAME): BODY`` -> ``BODY`` (a with of several items, or of anything else, is kept)."""

    def visit_With(self, node: ast.With) -> Any:
        self.generic_visit(node)
        [item] = node.items if len(node.items) == 1 else [None]
        call = item.context_expr if item is not None else None
        if isinstance(call, ast.Call) and isinstance(call.func, ast.Name) and call.func.id == "phase":
            return node.body
        return node


def unmarked_trainer() -> types.ModuleType:
    """:mod:`tdlab.train.trainer` compiled again from its source without its phase marks."""
    path = Path(marked.__file__)
    tree = ast.fix_missing_locations(_Unmark().visit(ast.parse(path.read_text(), str(path))))
    module = types.ModuleType("tdlab_trainer_unmarked")
    module.__file__ = str(path)
    sys.modules[module.__name__] = module  # dataclasses resolve their module by name
    exec(compile(tree, str(path), "exec"), module.__dict__)
    return module


def fit(module: types.ModuleType, steps: int) -> tuple[float, list[dict[str, torch.Tensor]]]:
    """Wall seconds and final member states of one markov-init quick arm trained by ``module``'s Trainer."""
    exp = get("markov-init")
    cfg = exp.make_config("quick", [f"train.steps={steps}"])
    arm = exp.arms(cfg)[0]
    trainer = module.Trainer(cfg.train, "cpu", False, label=arm.name)
    t0 = time.perf_counter()
    result = trainer.fit(
        partial(GPT, cfg.arm_model(arm.arch, arm.init)),
        member_seeds(cfg.seed, cfg.members),
        MarkovChain(cfg.task.p, cfg.task.q),
    )
    return time.perf_counter() - t0, result.states


def torch_optim_trainer() -> types.ModuleType:
    """A module whose Trainer is the marked one with torch's own optimisers (the same numbers, with their
    ``torch._dynamo`` guards)."""
    module = types.ModuleType("tdlab_trainer_torch_optim")
    module.Trainer = type("Trainer", (marked.Trainer,), {"_optimizer": _torch_optimizer})  # type: ignore[attr-defined]
    return module


def _torch_optimizer(self: Any, model: torch.nn.Module) -> torch.optim.Optimizer:
    cfg = self.cfg
    decay = [p for p in model.parameters() if p.dim() >= 3]
    no_decay = [p for p in model.parameters() if p.dim() < 3]
    groups = [{"params": decay, "weight_decay": cfg.weight_decay}, {"params": no_decay, "weight_decay": 0.0}]
    if cfg.optimizer == "sgd":
        return torch.optim.SGD(groups, lr=cfg.lr, momentum=cfg.momentum)
    return torch.optim.AdamW(groups, lr=cfg.lr, betas=(cfg.beta1, cfg.beta2))


FIRST_STEP = """
import time; t0 = time.perf_counter()
import torch
from tdlab.train.optim import EagerAdamW
p = torch.nn.Parameter(torch.ones(3)); p.grad = torch.ones(3)
({cls})([p], lr=1e-3).step()
print(time.perf_counter() - t0)
"""


def first_step(cls: str) -> float:
    """Seconds from a fresh interpreter to the end of a first ``cls`` step (imports included)."""
    out = subprocess.run([sys.executable, "-c", FIRST_STEP.format(cls=cls)], capture_output=True, text=True, check=True)
    return float(out.stdout.strip().splitlines()[-1])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--steps", type=int, default=300)
    args = ap.parse_args()
    torch.set_num_threads(1)
    variants: dict[str, Callable[[], types.ModuleType]] = {
        "as is": lambda: marked,
        "no marks": unmarked_trainer,
        "torch optim": torch_optim_trainer,
    }
    modules = {k: make() for k, make in variants.items()}
    for module in modules.values():  # warm-up: imports, each optimiser's one-off costs (measured apart, below)
        fit(module, 20)
    times: dict[str, list[float]] = {k: [] for k in modules}
    states: dict[str, list[dict[str, torch.Tensor]]] = {}
    names = list(modules)
    for r in range(args.rounds):
        for k in names[r % len(names) :] + names[: r % len(names)]:  # a new order each round
            seconds, states[k] = fit(modules[k], args.steps)
            times[k].append(seconds)
    base = statistics.median(times["as is"])
    print(f"markov-init quick arm, {args.steps} steps, {args.rounds} rounds, 1 thread (median s, ratio to 'as is'):")
    for k, ts in times.items():
        same = all(torch.equal(a[n], b[n]) for a, b in zip(states[k], states["as is"], strict=True) for n in a)
        spread = (max(ts) - min(ts)) / base
        print(
            f"  {k:12s} {statistics.median(ts):7.3f} s  ratio {statistics.median(ts) / base:.4f}  "
            f"spread {spread:.1%}  bit-identical: {same}"
        )
    eager, plain = [], []
    for _ in range(args.rounds):
        eager.append(first_step("EagerAdamW"))
        plain.append(first_step("torch.optim.AdamW"))
    print(
        f"fresh process to the end of a first AdamW step: unwrapped {statistics.median(eager):.3f} s, "
        f"torch's {statistics.median(plain):.3f} s (median of {args.rounds}, each)"
    )


if __name__ == "__main__":
    main()

"""PyTorch's Adam, AdamW and SGD, the same code and the same numbers, without importing ``torch._dynamo``.

``torch.optim.Optimizer`` wraps ``add_param_group``, ``zero_grad``, ``state_dict`` and
``load_state_dict`` in ``torch._disable_dynamo`` and every ``step`` in a guard that puts graph breaks
around it; both import ``torch._dynamo`` on their first call: about 1–2 s of a small run on the CPU
spent at the first optimiser construction, for a compiler tdlab never runs. Outside ``torch.compile``
those wrappers change nothing (they only tell the compiler not to trace the method), so here each
method is torch's own, unwrapped (:func:`inspect.unwrap`), and ``step`` sets the grad mode as torch's
guard does (``defaults["differentiable"]``, so no autograd graph is recorded). While compiling, every
method is torch's wrapped one. State dicts and hooks are torch's: a checkpoint of one loads into the
other.

What it pays (``bench/bench_trainer_overhead.py``, 2-core machine shared with other jobs, 2026-12-02): a fresh
process reaches the end of its first AdamW step in 1.58 s with these against 3.12 s with torch's (median of 5
each, alternating), 1.5 s saved once per process, which every ``tdlab run`` and test process starts with; per
step nothing measurable (a markov-init quick arm, 200 steps, 5 alternating rounds: torch's / these 1.32, within
a spread of ±100 % on the shared cores), and the numbers are bit for bit the same.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, overload

import torch
from torch.optim import SGD, Adam, AdamW, Optimizer

__all__ = ["EagerAdam", "EagerAdamW", "EagerSGD"]

_PLAIN = {
    name: inspect.unwrap(getattr(Optimizer, name))
    for name in ("add_param_group", "zero_grad", "state_dict", "load_state_dict")
}


if TYPE_CHECKING:
    _Base = Optimizer  # what the mixin sits before: its super() is the optimiser's
else:
    _Base = object


class _Eager(_Base):
    """Mixin before a ``torch.optim`` optimiser class: its methods without the ``torch._dynamo`` wrappers."""

    _torch_step: Callable[..., Any]  # the optimiser's own step, unwrapped (set per subclass)

    def add_param_group(self, param_group: dict[str, Any]) -> None:
        if torch.compiler.is_compiling():
            return super().add_param_group(param_group)
        return _PLAIN["add_param_group"](self, param_group)

    def zero_grad(self, set_to_none: bool = True) -> None:
        if torch.compiler.is_compiling():
            return super().zero_grad(set_to_none)
        return _PLAIN["zero_grad"](self, set_to_none)

    def state_dict(self) -> dict[str, Any]:
        if torch.compiler.is_compiling():
            return super().state_dict()
        return _PLAIN["state_dict"](self)

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        if torch.compiler.is_compiling():
            return super().load_state_dict(state_dict)
        return _PLAIN["load_state_dict"](self, state_dict)

    @overload
    def step(self, closure: None = None) -> None: ...

    @overload
    def step(self, closure: Callable[[], float]) -> float: ...

    def step(self, closure: Callable[[], float] | None = None) -> float | None:
        if torch.compiler.is_compiling():
            return super().step(closure)
        with torch.set_grad_enabled(self.defaults["differentiable"]):  # what torch's guard does, less its graph breaks
            return type(self)._torch_step(self, closure)


class EagerAdam(_Eager, Adam):
    """``torch.optim.Adam`` without the ``torch._dynamo`` import (same arguments, numbers and state)."""

    _torch_step = staticmethod(inspect.unwrap(Adam.step))


class EagerAdamW(_Eager, AdamW):
    """``torch.optim.AdamW`` without the ``torch._dynamo`` import (same arguments, numbers and state)."""

    _torch_step = staticmethod(inspect.unwrap(AdamW.step))


class EagerSGD(_Eager, SGD):
    """``torch.optim.SGD`` without the ``torch._dynamo`` import (same arguments, numbers and state)."""

    _torch_step = staticmethod(inspect.unwrap(SGD.step))

"""torch.optim's Adam, AdamW and SGD without their torch._dynamo import: the same numbers and state."""

from __future__ import annotations

import copy
import json
import subprocess
import sys

import pytest
import torch

from tdlab.train.optim import EagerAdam, EagerAdamW, EagerSGD

CASES = [
    (torch.optim.AdamW, EagerAdamW, {"lr": 1e-2, "betas": (0.9, 0.95)}),
    (torch.optim.Adam, EagerAdam, {"lr": 1e-2}),
    (torch.optim.SGD, EagerSGD, {"lr": 1e-2, "momentum": 0.9}),
    (torch.optim.SGD, EagerSGD, {"lr": 1e-2}),
]


def _train(cls, kw, steps=6, state=None):
    """A small least-squares fit with two groups (decayed matrix, undecayed bias) and a schedule;
    returns the parameters, the optimiser's state dict and the step hook's count."""
    torch.manual_seed(0)
    w, b = torch.nn.Parameter(torch.randn(2, 4, 5)), torch.nn.Parameter(torch.randn(2, 1, 5))
    opt = cls([{"params": [w], "weight_decay": 0.1}, {"params": [b], "weight_decay": 0.0}], **kw)
    if state is not None:
        opt.load_state_dict(copy.deepcopy(state))  # loading keeps the tensors, training then changes them
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: 1.0 / (1 + s))
    calls = []
    opt.register_step_post_hook(lambda *_: calls.append(1))
    for _ in range(steps):
        opt.zero_grad(set_to_none=True)
        x = torch.randn(2, 3, 4)
        ((x @ w + b) ** 2).sum().backward()
        opt.step()
        sched.step()
    return [w.detach(), b.detach()], opt.state_dict(), len(calls)


def _same_state(a: dict, b: dict) -> bool:
    return (
        a["param_groups"] == b["param_groups"]
        and a["state"].keys() == b["state"].keys()
        and all(
            torch.equal(torch.as_tensor(x), torch.as_tensor(y))
            for k in a["state"]
            for x, y in zip(a["state"][k].values(), b["state"][k].values(), strict=True)
        )
    )


@pytest.mark.parametrize(("torch_cls", "eager_cls", "kw"), CASES)
def test_same_numbers_state_and_hooks_as_torch(torch_cls, eager_cls, kw):
    (p_t, s_t, n_t), (p_e, s_e, n_e) = _train(torch_cls, kw), _train(eager_cls, kw)
    assert all(torch.equal(a, b) for a, b in zip(p_t, p_e, strict=True))
    assert _same_state(s_t, s_e) and n_t == n_e == 6
    assert not any(p.grad is not None and p.grad.requires_grad for p in p_e)  # no graph through the update


@pytest.mark.parametrize(("torch_cls", "eager_cls", "kw"), CASES)
def test_a_state_dict_of_one_resumes_in_the_other(torch_cls, eager_cls, kw):
    _, state_t, _ = _train(torch_cls, kw, steps=3)
    _, state_e, _ = _train(eager_cls, kw, steps=3)
    p_tt, _, _ = _train(torch_cls, kw, state=state_t)
    p_et, _, _ = _train(eager_cls, kw, state=state_t)
    p_te, _, _ = _train(torch_cls, kw, state=state_e)
    assert all(torch.equal(a, b) and torch.equal(a, c) for a, b, c in zip(p_tt, p_et, p_te, strict=True))


def test_a_fresh_process_trains_without_importing_torch_dynamo():
    code = (
        "import json, sys, torch\n"
        "from tdlab.train.optim import EagerAdamW, EagerSGD\n"
        "for cls in (EagerAdamW, EagerSGD):\n"
        "    p = torch.nn.Parameter(torch.ones(3))\n"
        "    opt = cls([p], lr=0.1)\n"
        "    opt.zero_grad(); (p ** 2).sum().backward(); opt.step(); opt.load_state_dict(opt.state_dict())\n"
        "print(json.dumps('torch._dynamo' in sys.modules))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300, check=True)
    assert json.loads(out.stdout.strip().splitlines()[-1]) is False

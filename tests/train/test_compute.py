"""``tdlab.train.compute.step_flops`` against torch's own count of a real step's matrix products
(``torch.utils.flop_counter``): the explicit attention path (taken while the pattern is cached) computes every
score, as an encoder's attention does, so an encoder's step is counted exactly; a causal step does the same
products but needs only half the scores (what the fused kernel computes)."""

from __future__ import annotations

import pytest
import torch
from pydantic import BaseModel
from torch.utils.flop_counter import FlopCounterMode

from tdlab.models.gpt import GPT, GPTConfig
from tdlab.train.compute import step_flops


class _Train(BaseModel):
    batch: int
    seq_len: int


class _Run(BaseModel):
    members: int
    model: GPTConfig
    train: _Train


def _counted(cfg: _Run) -> float:
    """Multiply-adds torch counts in one forward and backward of ``cfg``'s ensemble on one batch."""
    torch.manual_seed(0)
    model = GPT(cfg.model, list(range(cfg.members)))
    tokens = torch.randint(0, cfg.model.vocab, (cfg.members, cfg.train.batch, cfg.train.seq_len))
    with FlopCounterMode(display=False) as counter, model.cache():
        model(tokens).float().sum().backward()
    return counter.get_total_flops() / 2  # torch counts a multiply-add as two


@pytest.mark.parametrize(
    "model",
    [
        dict(d=32, layers=2, heads=2, vocab=50),
        dict(d=24, layers=1, heads=3, vocab=7, d_attn=12, d_ff=40),
        dict(d=16, layers=1, heads=1, vocab=11, mlp=False),
    ],
)
def test_an_encoder_step_is_the_products_torch_counts(model):
    cfg = _Run(
        members=2, model=GPTConfig(arch="gpt2", max_len=32, causal=False, **model), train=_Train(batch=3, seq_len=32)
    )
    assert step_flops(cfg) == _counted(cfg)


def test_a_causal_step_needs_half_the_scores_and_grows_with_the_width_squared():
    enc = _Run(
        members=2,
        model=GPTConfig(arch="gpt2", d=32, layers=2, heads=2, vocab=50, max_len=32, causal=False),
        train=_Train(batch=3, seq_len=32),
    )
    dec = enc.model_copy(update={"model": enc.model.model_copy(update={"causal": True})})
    tokens, T, da, layers = 2 * 3 * 32, 32, 32, 2
    # the scores and weighted values: 2 T d_attn per token and layer for an encoder's forward pass, half that
    # for a causal one; a step is three passes' worth
    assert step_flops(enc) - step_flops(dec) == 3 * tokens * layers * T * da
    wide = enc.model_copy(update={"model": enc.model.model_copy(update={"d": 64})})
    assert step_flops(wide) > 1.9 * step_flops(enc)  # the maps 4x, the scores 2x (d_attn = d), the head 2x


def test_a_config_that_is_not_sequence_training_has_no_count():
    assert step_flops(_Train(batch=1, seq_len=4)) is None

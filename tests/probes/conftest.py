"""What the probe tests share: seed 001's tiny two-layer transformer, built per member from its seeds."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from tdlab.models.gpt import GPT, GPTConfig


@pytest.fixture
def anchors_gpt() -> Callable[[float, list[int]], GPT]:
    """``build(gamma, seeds)``: seed 001's post-LN two-layer one-head transformer at a tiny width (d = 8,
    d_k = 4), γ-initialised, one member per seed."""

    def build(gamma: float, seeds: list[int]) -> GPT:
        cfg = GPTConfig(
            arch="gpt2",
            vocab=200,
            d=8,
            layers=2,
            heads=1,
            max_len=9,
            norm="post",
            d_attn=4,
            d_ff=8,
            activation="relu",
            tie_weights=False,
            head_bias=True,
            init="gamma",
            init_gamma=gamma,
        )
        return GPT(cfg, seeds)

    return build

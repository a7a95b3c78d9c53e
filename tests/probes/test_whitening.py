"""Seed 002's whitening diagnostic: from prompt statistics it equals the raw one; the relative move of
trained weights."""

from __future__ import annotations

import numpy as np
import torch

from tdlab.models.linear_attention import LCA
from tdlab.probes.whitening import relative_move, whitening_by_layer, whitening_from_stats
from tdlab.tasks.multimodal import MultiModalPrompts
from tdlab.theory.icl_stats import PromptStats


def test_whitening_from_statistics_equals_the_raw_diagnostic():
    task = MultiModalPrompts(dims=(3, 2))
    gens = [torch.Generator().manual_seed(s) for s in (1, 2)]
    b = task.sample(gens, 7, 30, dtype=torch.float64)
    model = LCA(task.d, 4, [1, 2], param="diagonal", alpha0=0.03, sigma_init=0.01, dtype=torch.float64)
    raw = whitening_by_layer(model, b.X, b.y, b.x_query)
    assert raw.shape == (2, 5, 7)
    assert torch.allclose(raw[:, 0], torch.ones_like(raw[:, 0]))  # F_0 = 0
    assert torch.allclose(whitening_from_stats(model, PromptStats.from_batch(b)), raw, atol=1e-10)


def test_relative_move_is_the_distance_moved_over_the_inits_offset():
    init = {"a": np.array([[1.0, 0.0], [0.0, 2.0]])}
    final = {"a": np.array([[1.0, 3.0], [0.0, 2.0]])}
    centre = {"a": np.zeros((2, 2))}
    np.testing.assert_allclose(relative_move(final, init, centre), [3.0, 0.0])

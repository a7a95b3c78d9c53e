"""Seed 001's embedding-cosine readings: Spearman along rows and over the pairs of cosine matrices, the pair
error, and the theory cosines of Fig. 3C."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from tdlab.experiments.seed001_reasoning_bias.common.cosines import (
    pair_abs_error,
    pair_indices,
    pair_spearman,
    reasoning_theory_cosines,
    spearman_rows,
)
from tdlab.experiments.seed001_reasoning_bias.mlp import AnchorsMlp


def test_spearman_rows_and_pair_indices():
    assert spearman_rows(torch.tensor([[1.0, 2.0, 3.0], [3.0, 2.0, 1.0]]), torch.arange(3)).tolist() == pytest.approx(
        [1.0, -1.0]
    )
    i, j = pair_indices(4)
    assert list(zip(i.tolist(), j.tolist(), strict=True)) == [(0, 1), (0, 2), (0, 3), (1, 2), (1, 3), (2, 3)]


def test_pair_spearman_pair_error_and_the_theory_cosines_of_fig3c():
    a = torch.tensor([[1.0, 0.9, 0.1], [0.9, 1.0, 0.5], [0.1, 0.5, 1.0]])
    assert float(pair_spearman(a, a)) == pytest.approx(1.0)
    assert float(pair_spearman(-a, a)) == pytest.approx(-1.0)
    # an order-preserving map keeps the Spearman at 1 while the values move: only the error sees it
    assert float(pair_spearman(a**3, a)) == pytest.approx(1.0)
    assert float(pair_abs_error(a**3, a)) == pytest.approx(np.mean([0.9 - 0.729, 0.1 - 0.001, 0.5 - 0.125]))
    exp = AnchorsMlp()
    laws, cos = reasoning_theory_cosines(exp.task(exp.make_config("quick")))
    assert laws.shape == (10, 200) and torch.allclose(laws.sum(1), torch.ones(10, dtype=laws.dtype))
    for i in range(10):  # neighbouring anchors' laws overlap most: cosines fall with |s_i - s_j| along every row
        row = cos[i]
        assert all(row[j] >= row[j + 1] - 1e-12 for j in range(i, 9))
        assert all(row[j] >= row[j - 1] - 1e-12 for j in range(1, i + 1))

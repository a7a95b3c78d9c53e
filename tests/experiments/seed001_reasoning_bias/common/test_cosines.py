"""Seed 001's embedding-cosine readings: the theory cosines of Fig. 3C (the pair statistics are
:mod:`tdlab.probes.embedding`'s, tested in ``tests/probes/test_embedding.py``)."""

from __future__ import annotations

import torch

from tdlab.experiments.seed001_reasoning_bias.common.cosines import reasoning_theory_cosines
from tdlab.experiments.seed001_reasoning_bias.mlp import AnchorsMlp


def test_the_theory_cosines_of_fig3c():
    exp = AnchorsMlp()
    laws, cos = reasoning_theory_cosines(exp.task(exp.make_config("quick")))
    assert laws.shape == (10, 200) and torch.allclose(laws.sum(1), torch.ones(10, dtype=laws.dtype))
    for i in range(10):  # neighbouring anchors' laws overlap most: cosines fall with |s_i - s_j| along every row
        row = cos[i]
        assert all(row[j] >= row[j + 1] - 1e-12 for j in range(i, 9))
        assert all(row[j] >= row[j - 1] - 1e-12 for j in range(1, i + 1))

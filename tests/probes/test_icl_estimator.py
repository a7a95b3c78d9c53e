"""The 3-layer construction against the order-k add-β estimator (seed 003 Part II, 'Intuition'): the gaps fall
to zero as κ grows on sampled sequences, and each entry is the direct KL and loss difference computed position
by position from the construction's next-token law."""

from __future__ import annotations

import math

import pytest
import torch

from tdlab.models.normalised_attention import construction_probs
from tdlab.probes.icl_estimator import construction_gaps
from tdlab.tasks.markov_kth import InContextMarkov
from tdlab.theory.kgram import kgram_probs


def test_construction_gaps_fall_to_zero_on_sampled_sequences():
    x = InContextMarkov(2, 2, 1.0).sample([torch.Generator().manual_seed(0)], 16, 24)[0]
    res = construction_gaps(x, 2, [2.0, 20.0, 400.0], 1.0)
    gaps, kls = [r[0] for r in res], [r[1] for r in res]
    assert gaps[0] > 1e-2 and gaps[-1] < 1e-12 and gaps[0] > gaps[1] > gaps[2] >= 0.0
    assert all(m >= g for m, g in zip(kls, gaps, strict=True))  # the largest KL bounds the mean
    assert abs(res[-1][2]) < 1e-10  # the loss gap vanishes with it


def test_construction_gaps_are_the_direct_kl_and_loss_difference():
    x = InContextMarkov(1, 2, 0.5).sample([torch.Generator().manual_seed(1)], 5, 12)[0]
    (gap, max_kl, loss_gap), _ = construction_gaps(x, 1, [1.5, 3.0], 0.5)
    p = construction_probs(x, 1, 1.5, 0.5)
    ref = kgram_probs(x, 1, 2, 0.5)
    kls, dloss = [], []
    for n in range(x.shape[0]):
        for t in range(x.shape[1]):
            kls.append(sum(float(ref[n, t, v]) * math.log(float(ref[n, t, v]) / float(p[n, t, v])) for v in range(2)))
            if t + 1 < x.shape[1]:
                nxt = int(x[n, t + 1])
                dloss.append(math.log(float(ref[n, t, nxt])) - math.log(float(p[n, t, nxt])))
    assert gap == pytest.approx(sum(kls) / len(kls), rel=1e-9, abs=1e-12)
    assert max_kl == pytest.approx(max(kls), rel=1e-9, abs=1e-12)
    assert loss_gap == pytest.approx(sum(dloss) / len(dloss), rel=1e-9, abs=1e-12)

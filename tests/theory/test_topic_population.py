"""tdlab.theory.topic_population: the exact uniform-τ population against F.18–F.19 (sampled documents against
these laws: tests/tasks/test_topics.py)."""

from __future__ import annotations

import math

import pytest
import torch

from tdlab.theory.topic_population import population, tau_subsets


def test_population_is_F17_of_every_tau_subset():
    T, v, tau, p_m, p_c, p_r = 5, 3, 2, 0.15, 0.1, 0.1
    pop = population(T, v, tau, p_m, p_c, p_r)
    assert pop["theta"].shape == (math.comb(T, tau), T)
    assert torch.equal(pop["theta"], tau_subsets(T, tau))
    assert len({tuple(r.tolist()) for r in pop["theta"]}) == math.comb(T, tau)
    p1 = (1 - (1 - p_c) * p_m) / (v * tau) + p_m * p_r / (v * T)  # F.18
    p2 = p_m * p_r / (v * T)  # F.19
    for theta, p, q in zip(pop["theta"], pop["p"], pop["q"], strict=True):
        in_doc = theta.repeat_interleave(v) > 0
        assert torch.allclose(p[1:], in_doc.double() / (tau * v), rtol=1e-15, atol=0) and p[0] == 0
        assert torch.allclose(q[1:][in_doc], torch.tensor(p1, dtype=torch.float64), rtol=1e-15, atol=0)
        assert torch.allclose(q[1:][~in_doc], torch.tensor(p2, dtype=torch.float64), rtol=1e-15, atol=0)
        assert q[0] == pytest.approx(p_m * (1 - p_c - p_r), rel=1e-15)
        assert q.sum() == pytest.approx(1.0, abs=1e-14)

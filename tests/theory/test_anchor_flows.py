"""tdlab.theory.anchor_flows: the gap between the label law of the sequences ending in a token and of those
containing it (what Eq. 29's compact form needs equal), against the task's own sampled sequences."""

from __future__ import annotations

import torch
import torch.nn.functional as F

from tdlab.tasks.anchors import Anchors, AnchorsConfig
from tdlab.theory.anchor_flows import last_vs_all_law_gap, population_flow_counts

F64 = torch.float64


def _task() -> Anchors:
    return Anchors(AnchorsConfig(key_min=21, key_max=30, mem_max=3, rsn_min=11, rsn_max=13, d_vob=60, L=5))


def test_the_gap_is_zero_for_reasoning_anchors_and_not_for_a_fixed_memory_table():
    task = _task()
    table = task.memory_table(torch.Generator().manual_seed(3))
    pop = population_flow_counts(task, table, 64)
    rsn, mem, keys = torch.arange(11, 14), torch.arange(1, 4), torch.arange(21, 31)
    assert float(last_vs_all_law_gap(pop, rsn).max()) < 1e-12  # the tuples (and M) are symmetric
    assert float(last_vs_all_law_gap(pop, mem).min()) > 0.01  # one table: different cells end in s and hold s
    assert float(last_vs_all_law_gap(pop, keys).min()) > 0.01  # the last key is noise: P_Y
    # on average over tables the memory laws agree (Eq. 7): the gap shrinks as tables are averaged
    tables = [task.memory_table(torch.Generator().manual_seed(s)) for s in range(200)]
    pops = [population_flow_counts(task, t, 64) for t in tables]
    mean = {k: sum(p[k] for p in pops) / len(pops) for k in pops[0]}
    assert float(last_vs_all_law_gap(mean, mem).max()) < 0.25 * float(last_vs_all_law_gap(pop, mem).min())


def test_the_gap_matches_a_large_sample():
    task = _task()
    table = task.memory_table(torch.Generator().manual_seed(3))
    d = task.dataset(torch.Generator().manual_seed(3), 200_000, "train")  # the same table (drawn first)
    gap = last_vs_all_law_gap(population_flow_counts(task, table, 64), torch.tensor([1, 12, 25]))
    Y = F.one_hot(d["label"], 64).to(F64)
    for s, want in zip((1, 12, 25), gap.tolist(), strict=True):
        last = (d["tokens"][:, -1] == s).to(F64) @ Y
        every = (d["tokens"] == s).sum(1).to(F64) @ Y
        got = 0.5 * float((last / last.sum() - every / every.sum()).abs().sum())
        assert abs(got - want) < 0.03


def test_a_token_that_never_ends_a_sequence_has_the_largest_gap():
    task = Anchors(AnchorsConfig(key_min=21, key_max=30, mem_max=3, rsn_min=11, rsn_max=13, d_vob=60, L=5, p_max=2))
    pop = population_flow_counts(task, task.memory_table(torch.Generator().manual_seed(0)), 64)
    assert last_vs_all_law_gap(pop, torch.tensor([12])).tolist() == [1.0]  # anchors never last when p < L − q

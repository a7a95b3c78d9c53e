"""tdlab.theory.anchor_flows: the gap between the label law of the sequences ending in a token and of those
containing it (what Eq. 29's compact form needs equal), against the task's own sampled sequences; the
flows' closed forms (Eqs. 29, 36, Thm. 2) against slow loops and the split of a flow into kept and dropped terms;
the exact cross-entropy flow of an ensemble against each member's own gradient."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from tdlab.models.emb_mlp import Def2Config, Def2Transformer
from tdlab.tasks.anchors import Anchors, AnchorsConfig
from tdlab.theory.anchor_flows import (
    cross_entropy_flow,
    eq29_embedding_flow,
    eq36_matrix,
    euler_step,
    frobenius_cos,
    last_vs_all_law_gap,
    population_flow_counts,
    rate,
    thm2_matrix,
    thm2_terms,
    wv_flow_readings,
)

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


def test_formulas_against_loops():
    g = torch.Generator().manual_seed(0)
    d_m, d_k, V, n, L = 7, 3, 6, 5, 4
    W_emb, W2 = torch.randn(V, d_m, generator=g, dtype=F64), torch.randn(d_m, d_k, generator=g, dtype=F64)
    tokens, labels = torch.randint(0, V, (n, L), generator=g), torch.randint(0, V, (n,), generator=g)
    want = torch.zeros(d_m, d_k, dtype=F64)
    for i in range(n):  # Eq. 36 term by term
        y = torch.full((d_m,), -1.0 / d_m, dtype=F64)
        y[labels[i]] += 1
        want += torch.outer(sum(W_emb[t] for t in tokens[i]) / L, y @ W2) / n
    assert torch.allclose(eq36_matrix(W_emb, tokens, labels, W2), want)
    law = torch.rand(d_m, generator=g, dtype=F64)
    law /= law.sum()
    m = thm2_matrix(W_emb, slice(2, 5), law, W2)
    assert torch.allclose(m, 0.5 * torch.outer((W_emb[2] + W_emb[3] + W_emb[4]) / 3, (law - 1 / d_m) @ W2))
    W_VO, W_f = torch.randn(d_m, d_m, generator=g, dtype=F64), torch.randn(d_m, d_m, generator=g, dtype=F64)
    counts = torch.rand(d_m, generator=g, dtype=F64) * 4
    eye = torch.eye(d_m, dtype=F64)
    W_t = (W_f.T + eye) @ (W_VO.T + eye)  # W̃ of Props. 2–3
    assert torch.allclose(eq29_embedding_flow(counts, 4, 10, L, W_VO, W_f), 0.4 / L * (counts / 4 - 1 / d_m) @ W_t)
    rows = torch.stack([counts, 2 * counts])  # a token a row: n_s (k, 1) broadcasts
    got = eq29_embedding_flow(rows, torch.tensor([[4.0], [8.0]], dtype=F64), 10, L, W_VO, W_f)
    assert torch.allclose(got[1], eq29_embedding_flow(2 * counts, 8, 10, L, W_VO, W_f))
    assert frobenius_cos(m, 3 * m) == pytest.approx(1.0) and frobenius_cos(m, -m) == pytest.approx(-1.0)
    assert rate(2.5 * m, m) == pytest.approx(2.5)


def test_thm2_terms_split_the_flow_into_kept_and_dropped():
    g = torch.Generator().manual_seed(1)
    d_m, d_k, V, n, L = 6, 3, 5, 40, 4
    W0, dW = 0.1 * torch.randn(V, d_m, generator=g, dtype=F64), torch.randn(V, d_m, generator=g, dtype=F64)
    W2 = torch.randn(d_m, d_k, generator=g, dtype=F64)
    tokens, labels = torch.randint(0, V, (n, L), generator=g), torch.randint(0, d_m, (n,), generator=g)
    K = eq36_matrix(dW, tokens, labels, W2)  # the label-driven growth term
    M = 2 * K
    t = thm2_terms(K, M, W0 + dW, W0, tokens, labels, W2)  # a flow that is the kept term alone
    assert t["dropped_rel"] == pytest.approx(0.0, abs=1e-12) and t["growth_cos"] == pytest.approx(1.0)
    assert t["reduction_cos"] == pytest.approx(1.0) and t["reduction_rate"] == pytest.approx(0.5)
    init = eq36_matrix(W0, tokens, labels, W2)
    t = thm2_terms(K + init, M, W0 + dW, W0, tokens, labels, W2)  # Eq. 36 exactly: only the initial term dropped
    assert t["eq36_rel"] == pytest.approx(0.0, abs=1e-12)
    assert t["dropped_rel"] == pytest.approx(t["init_rel"]) == pytest.approx(float(init.norm() / K.norm()))


def test_cross_entropy_flow_is_each_members_own_gradient():
    cfg = Def2Config(vocab=60, d_m=60, d_k=8, d_f=16, gamma=0.5)
    task = _task()
    sets = [task.dataset(torch.Generator().manual_seed(s), 40, "train") for s in (1, 2)]
    tokens, labels = torch.stack([d["tokens"] for d in sets]), torch.stack([d["label"] for d in sets])
    model = Def2Transformer(cfg, [5, 6]).double()
    loss, flow = cross_entropy_flow(model, tokens, labels)
    assert loss.shape == (2,) and set(flow) == {k for k, _ in model.named_parameters()}
    for e, seed in enumerate((5, 6)):  # one member trained alone: its mean cross-entropy, differentiated
        alone = Def2Transformer(cfg, [seed]).double()
        logp = torch.log_softmax(alone(tokens[e : e + 1])[0], -1)
        want = -logp[torch.arange(40), labels[e]].mean()
        grads = torch.autograd.grad(want, [p for _, p in alone.named_parameters()])
        assert float(loss[e]) == pytest.approx(want.item(), rel=1e-12)
        for (k, _), g in zip(alone.named_parameters(), grads, strict=True):
            assert torch.allclose(flow[k][e], -g[0], atol=1e-12), k
    # a small step along the flow lowers the loss (it is −∇R)
    with torch.no_grad():
        for k, p in model.named_parameters():
            p.add_(1e-3 * flow[k])
    assert bool((cross_entropy_flow(model, tokens, labels)[0] < loss).all())


def test_wv_flow_readings_on_a_flow_that_is_thm2s_matrix():
    """A flow equal to 3 × Thm. 2's matrix (built by hand from the label frequencies) has cos 1 and rate 3 with it;
    its top left singular vector is the mean reasoning embedding, so with the key rows set to that mean the key
    alignment is 1; a displacement W^V(t) − W^V(0) of rank one along the mean memory embedding aligns with it."""
    g = torch.Generator().manual_seed(2)
    d_m, d_k, V, n, L = 6, 3, 12, 30, 4
    W_emb, W2 = torch.randn(V, d_m, generator=g, dtype=F64), torch.randn(d_m, d_k, generator=g, dtype=F64)
    ids = {"key": [0, 1, 2], "memory": [3, 4, 5], "reasoning": [6, 7, 8]}
    W_emb[ids["key"]] = W_emb[6:9].mean(0)  # the key mean is the reasoning mean
    tokens, labels = torch.randint(0, V, (n, L), generator=g), torch.randint(0, d_m, (n,), generator=g)
    law = torch.tensor([float((labels == y).sum()) / n for y in range(d_m)], dtype=F64)
    M = 0.5 * torch.outer(W_emb[6:9].mean(0), (law - 1 / d_m) @ W2)
    V0 = torch.randn(d_k, d_m, generator=g, dtype=F64)  # torch's layout
    W_V = V0.T + torch.outer(W_emb[3:6].mean(0), torch.randn(d_k, generator=g, dtype=F64))
    P = {"W_emb": W_emb, "W2": W2, "W_V": W_V}
    r = wv_flow_readings(3 * M, tokens, labels, P, slice(6, 9), ids)
    assert set(r) == {"eq36_cos", "thm2_cos", "thm2_rate", "grad_key_align"}  # t = 0: no displacement
    assert r["thm2_cos"] == pytest.approx(1.0) and r["thm2_rate"] == pytest.approx(3.0)
    assert r["grad_key_align"] == pytest.approx(1.0)
    assert r["eq36_cos"] == pytest.approx(frobenius_cos(M, eq36_matrix(W_emb, tokens, labels, W2)))
    W0 = W_emb - 0.1
    r = wv_flow_readings(3 * M, tokens, labels, P, slice(6, 9), ids, V0, W0)
    assert r["disp_mem_align"] == pytest.approx(1.0)
    mem, rsn = W_emb[3:6].mean(0), W_emb[6:9].mean(0)
    assert r["disp_rsn_align"] == pytest.approx(abs(frobenius_cos(mem, rsn)))
    assert r["thm2_terms"] == thm2_terms(3 * M, M, W_emb, W0, tokens, labels, W2)


def test_euler_step_moves_every_parameter_by_lr_times_the_flow():
    cfg = Def2Config(vocab=60, d_m=60, d_k=8, d_f=16, gamma=0.5)
    task = _task()
    sets = [task.dataset(torch.Generator().manual_seed(s), 40, "train") for s in (1, 2)]
    tokens, labels = torch.stack([d["tokens"] for d in sets]), torch.stack([d["label"] for d in sets])
    model = Def2Transformer(cfg, [5, 6]).double()
    before = {k: p.detach().clone() for k, p in model.named_parameters()}
    loss0, flow = cross_entropy_flow(model, tokens, labels)
    loss = euler_step(model, tokens, labels, 0.25)
    assert torch.equal(loss, loss0)  # the loss before the step
    for k, p in model.named_parameters():
        assert torch.allclose(p.detach(), before[k] + 0.25 * flow[k], rtol=0, atol=1e-15), k
    # a small step of gradient descent lowers the loss
    assert bool((euler_step(model, tokens, labels, 1e-3) < loss).all())

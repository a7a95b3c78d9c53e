"""Label laws of seed 001 (App. B.2) against brute-force enumeration and generator histograms; the
order-blind memory ceiling against brute force; Eq. 14 cosines against their closed form."""

from __future__ import annotations

import itertools
import math
from collections import Counter, defaultdict

import numpy as np
import pytest
import torch
from scipy.stats import chisquare

from tdlab.tasks.anchors import Anchors, AnchorsConfig
from tdlab.theory.anchors import (
    _expected_max_occupancy,
    b2_key_law,
    eq7_memory_law,
    eq14_cosine,
    eq14_vectors,
    eq22_reasoning_law,
    expected_order_blind_memory_ceiling,
    extended_binomial,
    label_law_cosines,
    memory_law_spread,
    order_blind_memory_ceiling,
    order_blind_sample_ceiling,
    reasoning_theory_cosines,
    sigma_p,
    token_label_law,
    trapezoid_law,
)

CFG = AnchorsConfig()
TASK = Anchors(CFG)


def _brute_reasoning(cfg: AnchorsConfig, s: int, tuples) -> torch.Tensor:
    """P^s by enumeration: every (z, tuple) once, each occurrence of s in the tuple counted."""
    p = torch.zeros(cfg.d_vob, dtype=torch.float64)
    for z in range(cfg.key_min, cfg.key_max + 1):
        for t in tuples:
            p[z + sum(t)] += t.count(s)
    return p / p.sum()


def test_extended_binomial_counts():
    for n, k in ((1, 10), (2, 10), (3, 4)):
        c = Counter(sum(v) for v in itertools.product(range(k), repeat=n))
        for j in range(-1, n * (k - 1) + 2):
            assert extended_binomial(n, j, k) == c.get(j, 0)


def test_eq22_and_trapezoid_vs_enumeration():
    all_rsn = list(itertools.product(range(11, 21), repeat=2))
    for s in range(11, 21):
        brute = _brute_reasoning(CFG, s, all_rsn)  # Eq. 8: M ignored
        assert torch.allclose(eq22_reasoning_law(CFG, s), brute, atol=1e-15)
        assert torch.allclose(trapezoid_law(CFG, s), brute, atol=1e-15)
    # q = 3 on a small task: Eq. 22's extended binomials
    cfg3 = AnchorsConfig(
        key_min=10, key_max=19, mem_min=1, mem_max=3, rsn_min=4, rsn_max=7, q=3, L=5, d_vob=64, test_tuples=[[4, 5, 6]]
    )
    tuples3 = list(itertools.product(range(4, 8), repeat=3))
    for s in range(4, 8):
        assert torch.allclose(eq22_reasoning_law(cfg3, s), _brute_reasoning(cfg3, s, tuples3), atol=1e-15)


def test_exact_law_on_training_population():
    train = [t for t in itertools.product(range(11, 21), repeat=2) if t not in {(11, 13), (13, 11)}]
    for s in (11, 13, 15, 20):
        assert torch.allclose(token_label_law(TASK, s), _brute_reasoning(CFG, s, train), atol=1e-15)
    # anchors in no masked tuple see the seed's law exactly; 11 and 13 do not
    assert torch.allclose(token_label_law(TASK, 15), eq22_reasoning_law(CFG, 15), atol=1e-15)
    assert not torch.allclose(token_label_law(TASK, 11), eq22_reasoning_law(CFG, 11), atol=1e-4)
    for s in (1, 7):  # Eq. 7, averaged over the table draw
        assert torch.allclose(token_label_law(TASK, s), eq7_memory_law(CFG), atol=1e-15)


def test_reasoning_theory_cosines_of_fig3c():
    # Fig. 3B–C: the reasoning anchors' laws are the enumerated population laws, their centred cosines fall with
    # |s_i − s_j| along every row (neighbouring anchors' laws overlap most)
    train = [t for t in itertools.product(range(11, 21), repeat=2) if t not in {(11, 13), (13, 11)}]
    laws, cos = reasoning_theory_cosines(TASK)
    assert laws.shape == (10, 200) and cos.shape == (10, 10)
    for i, s in enumerate(range(11, 21)):
        assert torch.allclose(laws[i], _brute_reasoning(CFG, s, train), atol=1e-15)
    x = torch.stack([_brute_reasoning(CFG, s, train) for s in range(11, 21)]) - 1.0 / CFG.d_vob
    x = x / x.norm(dim=1, keepdim=True)
    assert torch.allclose(cos, x @ x.T, atol=1e-12)
    for i in range(10):
        row = cos[i]
        assert all(row[j] >= row[j + 1] - 1e-12 for j in range(i, 9))
        assert all(row[j] >= row[j - 1] - 1e-12 for j in range(1, i + 1))


def _occurrence_histogram(data, s: int, positions: str, V: int) -> np.ndarray:
    tok, y = data["tokens"], data["label"]
    anchors = torch.zeros_like(tok, dtype=torch.bool)
    anchors[torch.arange(len(tok))[:, None], data["key_pos"][:, None] + 1 + torch.arange(data["anchors"].shape[1])] = (
        True
    )
    hit = (tok == s) & (anchors if positions == "anchor" else ~anchors)
    mult = hit.sum(1)
    return np.bincount(np.repeat(y.numpy(), mult.numpy()), minlength=V).astype(float)


def _chi2_pvalue(hist: np.ndarray, law: torch.Tensor) -> float:
    p = law.numpy()
    assert hist[p == 0].sum() == 0  # no label outside the law's support
    m = p > 0
    return float(chisquare(hist[m], hist.sum() * p[m]).pvalue)


@pytest.fixture(scope="module")
def train_data():
    gen = torch.Generator().manual_seed(11)
    return gen.initial_seed(), TASK.dataset(gen, 198 * 400)


def test_generator_histograms_follow_the_laws(train_data):
    seed, data = train_data
    table = TASK.memory_table(seed)
    for s in (11, 15):  # reasoning anchors (one in a masked tuple)
        h = _occurrence_histogram(data, s, "anchor", CFG.d_vob)
        assert _chi2_pvalue(h, token_label_law(TASK, s)) > 1e-3
    h = _occurrence_histogram(data, 4, "anchor", CFG.d_vob)  # memory anchor, given the drawn table
    assert _chi2_pvalue(h, token_label_law(TASK, 4, table)) > 1e-3
    for s in (21, 70, 120):  # keys: z_p and noise occurrences (App. B.2, Monte Carlo)
        h = _occurrence_histogram(data, s, "key", CFG.d_vob)
        assert _chi2_pvalue(h, token_label_law(TASK, s, table)) > 1e-3


def test_b2_key_law_is_the_balanced_population_law():
    # With no masked tuple, memory : reasoning tuples are 1 : 1 as App. B.2 assumes; averaged over the
    # table draw the exact population law is B.2's formula.
    cfg = AnchorsConfig(test_tuples=[])
    task = Anchors(cfg)
    for s in (21, 60, 120):
        assert torch.allclose(token_label_law(task, s), b2_key_law(cfg, s), atol=1e-15)
        assert float(b2_key_law(cfg, s).sum()) == pytest.approx(1.0)
    # and differs (a little) from the default task's law, which has M masked
    assert not torch.allclose(token_label_law(TASK, 60), b2_key_law(CFG, 60), atol=1e-6)


def test_order_blind_ceiling_vs_brute_force():
    for cfg in (CFG, AnchorsConfig(memory_labels="window"), AnchorsConfig(mix="memory", mem_max=20, memory_groups=4)):
        task = Anchors(cfg)
        table = task.memory_table(7)
        classes = defaultdict(list)
        for zi, z in enumerate(range(cfg.key_min, cfg.key_max + 1)):
            for j, t in enumerate(task.mem_tuples.tolist()):
                classes[(z, tuple(sorted(t)))].append(int(table[zi, j]))
        brute = sum(Counter(v).most_common(1)[0][1] for v in classes.values()) / (table.numel())
        assert order_blind_memory_ceiling(task, table) == pytest.approx(brute, abs=1e-12)
        mc = np.mean([order_blind_memory_ceiling(task, task.memory_table(k)) for k in range(20)])
        assert mc == pytest.approx(expected_order_blind_memory_ceiling(task), abs=0.01)
    assert expected_order_blind_memory_ceiling(TASK) == pytest.approx((10 + 90 * (1 + 1 / 100) / 2) / 100, abs=1e-12)


def test_expected_max_occupancy_vs_enumeration():
    for m, b in ((1, 5), (2, 7), (3, 4), (4, 3)):
        vals = [max(Counter(x).values()) for x in itertools.product(range(b), repeat=m)]
        assert _expected_max_occupancy(m, b) == pytest.approx(np.mean(vals), abs=1e-12)


def test_eq14_cosines_closed_form():
    rsn = list(range(11, 21))
    w = eq14_vectors(rsn, 200)
    cos = label_law_cosines(w + 1.0 / 200, 200)  # cosine of the vectors themselves
    w_n = w / w.norm(dim=1, keepdim=True)
    assert torch.allclose(cos, w_n @ w_n.T, atol=1e-12)
    delta = torch.tensor([[abs(a - b) for b in rsn] for a in rsn], dtype=torch.float64)
    assert torch.allclose(w_n @ w_n.T, eq14_cosine(delta, 200), atol=1e-6)
    keys = list(range(40, 101, 7))
    k = eq14_vectors(keys, 200, kind="key")
    k = k / k.norm(dim=1, keepdim=True)
    dk = torch.tensor([[abs(a - b) for b in keys] for a in keys], dtype=torch.float64)
    assert torch.allclose(k @ k.T, eq14_cosine(dk, 200, kind="key"), atol=1e-9)
    # with noise ε ~ N(0, d_m^{-2γ}) the vectors still have the right shape and differ from noise-free
    noisy = eq14_vectors(rsn, 200, noise_std=200**-0.8, generator=torch.Generator().manual_seed(0))
    assert noisy.shape == (10, 200) and not torch.allclose(noisy, eq14_vectors(rsn, 200))


def test_sigma_p_and_law_cosines():
    law = eq22_reasoning_law(CFG, 15)
    i = torch.arange(CFG.d_vob, dtype=torch.float64)
    mean = float((law * i).sum())
    std = math.sqrt(float((law * (i - mean) ** 2).sum()))
    assert sigma_p(CFG) == pytest.approx(std, rel=1e-12)
    assert 28.5 < sigma_p(CFG) < 29.5  # the seed's σ_P, not Eq. 14's √6
    laws = torch.stack([eq22_reasoning_law(CFG, s) for s in range(11, 21)])
    c = label_law_cosines(laws)
    assert torch.allclose(torch.diagonal(c), torch.ones(10, dtype=torch.float64))
    # Fig. 3C: cosine falls with |s_i - s_j|
    row = c[0]
    assert bool((row[1:] < row[:-1]).all())


def test_order_blind_sample_ceiling_against_a_count():
    g = torch.Generator().manual_seed(7)
    n = 500
    key = torch.randint(21, 25, (n,), generator=g)
    anchors = torch.randint(1, 4, (n, 2), generator=g)
    label = torch.randint(30, 34, (n,), generator=g)
    by_class: dict[tuple, Counter] = defaultdict(Counter)  # (key, anchor multiset) -> label counts
    for z, a, y in zip(key.tolist(), anchors.tolist(), label.tolist(), strict=True):
        by_class[(z, *sorted(a))][y] += 1
    want = sum(max(c.values()) for c in by_class.values()) / n
    assert order_blind_sample_ceiling(key, anchors, label) == pytest.approx(want, abs=1e-15)
    # labels set by the ordered pair: an order-blind model cannot tell (1, 2) from (2, 1), an order-aware one could
    a = torch.tensor([[1, 2], [2, 1], [1, 2], [2, 1]])
    assert order_blind_sample_ceiling(torch.full((4,), 21), a, torch.tensor([30, 31, 30, 31])) == 0.5
    assert order_blind_sample_ceiling(torch.full((4,), 21), a, torch.tensor([30, 30, 30, 30])) == 1.0


def test_memory_law_spread_is_zero_under_eq7_and_the_largest_gap_otherwise():
    assert memory_law_spread(TASK) == pytest.approx(0.0, abs=1e-12)  # Eq. 7: one law for every memory anchor
    task = Anchors(AnchorsConfig(memory_labels="window"))  # F_mem,2: y ~ U{z − Σa .. z + Σa}, laws differ by s
    laws = [token_label_law(task, s) for s in range(task.cfg.mem_min, task.cfg.mem_max + 1)]
    want = max(float(x) for law in laws for x in (law - laws[0]).abs())
    assert memory_law_spread(task) == want and want > 0

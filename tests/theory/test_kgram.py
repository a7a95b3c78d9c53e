"""k-gram in-context estimator and in-context Bayes losses (seed 003, Part II) against brute force,
closed forms and Monte Carlo."""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest
import torch

from tdlab.tasks.markov_kth import InContextMarkov, KthOrderMarkov
from tdlab.theory.kgram import (
    context_states,
    cross_entropy,
    estimator_loss_curves,
    estimator_losses,
    incontext_bayes_loss_curve,
    incontext_bayes_loss_exact,
    incontext_log_marginal,
    kgram_counts,
    kgram_loss_curve,
    kgram_probs,
)


def gens_of(*seeds: int) -> list[torch.Generator]:
    return [torch.Generator().manual_seed(s) for s in seeds]


def slow_state(block, V):
    """Base-V number of a token block, most recent (last) token least significant."""
    s = 0
    for x in block:
        s = s * V + int(x)
    return s


def test_context_states_most_recent_last():
    x = torch.tensor([[1, 0, 2, 2, 1, 0]])
    for k in (0, 1, 2, 3):
        s = context_states(x, k, 3)[0]
        for i in range(6):
            want = -1 if i < k - 1 else slow_state(x[0, max(i - k + 1, 0) : i + 1].tolist() if k else [], 3)
            assert s[i].item() == want, (k, i)


def slow_kgram(x: list[int], k: int, V: int, beta: float) -> list[list[float]]:
    """The seed's context-matching estimator with add-beta smoothing, by explicit loops.

    Position i (0-based) predicts x[i+1] from x[0..i]; counts over j in [k, i] with
    x[j-k..j-1] == x[i-k+1..i]; uniform where i < k-1 or the context count is 0."""
    out = []
    for i in range(len(x)):
        if i < k - 1:
            out.append([1.0 / V] * V)
            continue
        ctx = x[i - k + 1 : i + 1] if k else []
        n = [0] * V
        for j in range(k, i + 1):
            if x[j - k : j] == ctx:
                n[x[j]] += 1
        tot = sum(n)
        if tot == 0:
            out.append([1.0 / V] * V)
        else:
            out.append([(c + beta) / (tot + V * beta) for c in n])
    return out


@pytest.mark.parametrize(
    "k,V,beta,T",
    [
        (0, 2, 1.0, 15),
        (1, 2, 1.0, 30),
        (2, 2, 0.5, 40),
        (3, 2, 1.0, 40),
        (2, 3, 0.0, 50),
        (1, 4, 2.0, 25),
        (3, 4, 1.0, 60),
    ],
)
def test_kgram_probs_vs_brute_force(k, V, beta, T):
    g = torch.Generator().manual_seed(100 * k + V)
    x = torch.randint(0, V, (3, 2, T), generator=g)
    p = kgram_probs(x, k, V, beta)
    assert p.shape == (3, 2, T, V)
    # Both counting algorithms agree ("auto" picks one-hot for small tables, sort for large).
    assert torch.equal(kgram_counts(x, k, V, method="onehot"), kgram_counts(x, k, V, method="sort"))
    for a, b in itertools.product(range(3), range(2)):
        want = torch.tensor(slow_kgram(x[a, b].tolist(), k, V, beta), dtype=torch.float64)
        torch.testing.assert_close(p[a, b], want, rtol=0, atol=1e-12)


def test_kgram_counts_small_example():
    # x = 0 1 0 1 1 0 ; k = 1: transitions 0->1, 1->0, 0->1, 1->1, 1->0.
    x = torch.tensor([0, 1, 0, 1, 1, 0])
    n = kgram_counts(x, 1, 2)
    want = [[0, 0], [0, 0], [0, 1], [1, 0], [1, 1], [0, 2]]
    assert n.tolist() == want


def test_cross_entropy_and_loss_curve():
    x = torch.tensor([[0, 1, 1, 0], [1, 1, 0, 0]])
    p = kgram_probs(x, 1, 2)
    ce = cross_entropy(p, x)
    manual = [[-math.log(p[b, i, x[b, i + 1]].item()) for i in range(3)] for b in range(2)]
    manual = torch.tensor(manual, dtype=torch.float64)
    torch.testing.assert_close(ce, manual)
    torch.testing.assert_close(kgram_loss_curve(x, 1, 2), manual.mean(0))


def slow_log_marginal(x: list[int], k: int, V: int, a: float) -> float:
    """Dirichlet-multinomial evidence with per-state counts built by loops, math.lgamma."""
    counts: dict[tuple, list[int]] = {}
    for j in range(k, len(x)):
        counts.setdefault(tuple(x[j - k : j]), [0] * V)[x[j]] += 1
    lp = -min(k, len(x)) * math.log(V)
    for n in counts.values():
        lp += sum(math.lgamma(c + a) for c in n) - math.lgamma(sum(n) + V * a) - V * math.lgamma(a) + math.lgamma(V * a)
    return lp


@pytest.mark.parametrize("k,V,alpha", [(1, 2, 1.0), (2, 2, 0.5), (2, 3, 2.0)])
def test_chain_rule_of_add_alpha_equals_dirichlet_evidence(k, V, alpha):
    """The add-alpha estimator is the posterior predictive: the product of its predictions is the
    marginal likelihood of the in-context source."""
    x = InContextMarkov(k, V, alpha).sample(gens_of(1), 8, 40)[0]
    chain = -cross_entropy(kgram_probs(x, k, V, alpha), x).sum(-1) - math.log(V)  # + log P(x_0)
    ev = incontext_log_marginal(x, k, V, alpha)
    slow = torch.tensor([slow_log_marginal(s.tolist(), k, V, alpha) for s in x], dtype=torch.float64)
    torch.testing.assert_close(ev, slow, rtol=0, atol=1e-9)
    torch.testing.assert_close(chain, ev, rtol=0, atol=1e-9)


@pytest.mark.parametrize("k,V,alpha,L", [(1, 2, 1.0, 10), (2, 2, 0.5, 10), (1, 3, 1.0, 7)])
def test_incontext_bayes_loss_exact_vs_monte_carlo(k, V, alpha, L):
    exact = incontext_bayes_loss_exact(k, V, alpha, L)
    assert exact.shape == (L - 1,)
    torch.testing.assert_close(exact[:k], torch.full((k,), math.log(V), dtype=torch.float64))
    x = InContextMarkov(k, V, alpha).sample(gens_of(7), 25000, L)[0]
    # Rao-Blackwellised estimate (entropy of the predictive) ...
    rb, rb_sem = incontext_bayes_loss_curve(x, k, V, alpha)
    assert ((rb - exact).abs() <= 4 * rb_sem + 1e-9).all(), (rb, exact)
    # ... and the plain Monte Carlo log loss of the add-alpha estimator at the realised tokens.
    ce = cross_entropy(kgram_probs(x, k, V, alpha), x)
    mc, mc_sem = ce.mean(0), ce.std(0) / math.sqrt(ce.shape[0])
    assert ((mc - exact).abs() <= 4 * mc_sem + 1e-9).all(), (mc, exact)
    assert rb_sem[k:].max() < mc_sem[k:].min()


def test_posterior_predictive_vs_monte_carlo_posterior():
    """For every binary context of length 4, the frequency of the next token among sampled
    sequences with that context matches the add-one (Laplace) prediction."""
    k, L = 1, 5
    x = InContextMarkov(k, 2, 1.0).sample(gens_of(3), 100000, L)[0]
    p = kgram_probs(x, k, 2, 1.0)[:, L - 2, 1]  # P(x_5 = 1 | x_0..x_4)
    ctx = (x[:, : L - 1] * 2 ** torch.arange(L - 2, -1, -1)).sum(-1)
    for c in range(2 ** (L - 1)):
        m = ctx == c
        n = int(m.sum())
        freq = x[m, L - 1].double().mean().item()
        pc = p[m][0].item()
        assert abs(freq - pc) < 4.5 * math.sqrt(pc * (1 - pc) / n), (c, freq, pc, n)


def test_matched_estimator_is_best_on_incontext_source():
    """On a k = 2 in-context source the Bayes estimator (order 2, beta = alpha) beats mismatched
    orders and smoothing at every position after the first few, and approaches E[entropy rate]."""
    task = InContextMarkov(2, 2, alpha=1.0)
    x = task.sample(gens_of(5), 1000, 300)[0]
    curves = estimator_loss_curves(x, (0, 1, 2, 3), 2, beta=1.0)
    late = {j: c[200:].mean().item() for j, c in curves.items()}
    assert late[2] < late[1] < late[0]
    assert late[2] < late[3]
    assert late[2] < kgram_loss_curve(x, 2, 2, beta=0.05)[200:].mean().item()
    asym, _sem = task.asymptotic_bayes_loss(4000, torch.Generator().manual_seed(1))
    assert asym < late[2] < asym + 0.03


def test_estimators_converge_to_conditional_entropies_on_fixed_source():
    """The order-j estimator on a fixed k = 2 source tends to H(x_{t+1} | last j tokens)."""
    src = KthOrderMarkov.random(2, 2, torch.Generator().manual_seed(12), alpha=0.5)
    x = src.sample(gens_of(4), 32, 3000)[0]
    curves = estimator_loss_curves(x, (0, 1, 2), 2)
    for j in (0, 1, 2):
        late = curves[j][2000:].mean().item()
        assert late == pytest.approx(src.conditional_entropy(j), abs=0.01), j
    assert src.conditional_entropy(0) > src.conditional_entropy(1) > src.conditional_entropy(2)


# ----------------------------------------------------------------------------------------------
# Fresh settings (issue 38): the talk's context-matching estimator written as a literal loop over the
# history, with add-beta smoothing, and the in-context source's Bayes loss from Dirichlet-multinomial
# evidence (scipy gammaln) with a uniform first block.


def _ind_kgram(x, k, V, beta):
    """out[i] = P(x_{i+1} = . | x_0..x_i): counts of v after each earlier occurrence of the last k tokens."""
    out = np.full((len(x), V), 1.0 / V)
    for i in range(k - 1, len(x)):
        ctx = tuple(x[i - k + 1 : i + 1]) if k else ()
        n = np.zeros(V)
        for j in range(k, i + 1):  # transition x_{j-k..j-1} -> x_j, j <= i
            if tuple(x[j - k : j]) == ctx:
                n[x[j]] += 1
        if n.sum() + V * beta > 0:
            out[i] = (n + beta) / (n.sum() + V * beta)
    return out


@pytest.mark.parametrize("k,V,beta", [(2, 3, 0.0), (2, 3, 0.5), (3, 2, 1.0), (3, 4, 0.25), (0, 3, 1.0)])
def test_fresh_kgram_estimator_against_a_literal_loop(k, V, beta):
    rng = np.random.default_rng(3800 + 10 * k + V)
    x = rng.integers(0, V, size=(3, 60))
    x[1, ::2] = 0  # some repeated contexts
    got = kgram_probs(torch.tensor(x), k, V, beta=beta).numpy()
    for b in range(3):
        assert np.max(np.abs(got[b] - _ind_kgram(x[b], k, V, beta))) < 1e-14


@pytest.mark.parametrize("k,V,alpha,length", [(2, 3, 0.5, 7), (3, 2, 2.0, 12)])
def test_fresh_incontext_bayes_loss_against_dirichlet_evidence(k, V, alpha, length):
    """log P(x_0..x_{n-1}) = -k log V + sum_s [lgG(V a) - lgG(V a + N_s) + sum_v (lgG(a + N_sv) - lgG(a))];
    loss_i = E[-log P(x_{i+1} | x_0..x_i)] = H(x_0..x_{i+1}) - H(x_0..x_i)."""
    from scipy.special import gammaln

    def log_marg(seq):
        n = {}
        for j in range(k, len(seq)):
            key = tuple(seq[j - k : j])
            n.setdefault(key, np.zeros(V))[seq[j]] += 1
        lp = -min(k, len(seq)) * math.log(V)
        for c in n.values():
            lp += gammaln(V * alpha) - gammaln(V * alpha + c.sum()) + np.sum(gammaln(alpha + c) - gammaln(alpha))
        return lp

    H = [0.0]
    for m in range(1, length + 1):
        lp = np.array([log_marg(s) for s in itertools.product(range(V), repeat=m)])
        assert abs(np.exp(lp).sum() - 1) < 1e-12
        H.append(-np.sum(np.exp(lp) * lp))
    want = np.array([H[i + 2] - H[i + 1] for i in range(length - 1)])
    got = incontext_bayes_loss_exact(k, V, alpha, length).numpy()
    assert np.max(np.abs(got - want)) < 1e-12
    # positions before the first full context are uniform: loss log V
    assert np.allclose(want[: k - 1], math.log(V), atol=1e-14)


def slow_loss(seq: list[int], j: int, alpha: float) -> list[float]:
    """−log of the add-α order-j estimator at the realised next token, by explicit counting (binary)."""
    out = []
    for i in range(len(seq) - 1):
        ctx = seq[i - j + 1 : i + 1] if j else []
        if len(ctx) < j:
            out.append(math.log(2))
            continue
        n = [0, 0]
        for t in range(j, i + 1):
            if seq[t - j : t] == ctx:
                n[seq[t]] += 1
        out.append(-math.log((n[seq[i + 1]] + alpha) / (sum(n) + 2 * alpha)))
    return out


def test_estimator_losses_match_a_slow_count():
    x = InContextMarkov(2, 2, 1.0).sample([torch.Generator().manual_seed(0), torch.Generator().manual_seed(1)], 3, 12)
    got = estimator_losses(x, 2, 2, 0.5)
    assert sorted(got) == [0, 1, 2] and got[2].shape == (2, 11)
    for j in range(3):
        for e in range(2):
            want = np.mean([slow_loss(x[e, b].tolist(), j, 0.5) for b in range(3)], axis=0)
            np.testing.assert_allclose(got[j][e].numpy(), want, rtol=1e-12)

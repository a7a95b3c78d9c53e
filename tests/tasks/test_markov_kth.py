"""k-th order Markov sources (seed 003, Part II) against theory and slow reference implementations."""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest
import torch
from scipy import stats

from tdlab.tasks.markov import stack_uniforms
from tdlab.tasks.markov_kth import (
    InContextMarkov,
    KthOrderMarkov,
    conditional_entropy,
    entropy_rate,
    estimator_gap,
    sample_dirichlet,
    sample_log_gamma,
    stationary_law,
)
from tdlab.theory.kgram import context_states, estimator_losses


def gens_of(*seeds: int) -> list[torch.Generator]:
    return [torch.Generator().manual_seed(s) for s in seeds]


def slow_state(block, V):
    """Base-V number of a token block, most recent (last) token least significant."""
    s = 0
    for x in block:
        s = s * V + int(x)
    return s


def count_pairs(s: torch.Tensor, nxt: torch.Tensor, S: int, V: int) -> torch.Tensor:
    """``(S, V)`` counts of (state, next token) pairs."""
    ones = torch.ones(len(s), dtype=torch.float64)
    return torch.zeros(S, V, dtype=torch.float64).index_put_((s, nxt), ones, accumulate=True)


def slow_stationary(kernel: np.ndarray, k: int, V: int) -> np.ndarray:
    """Stationary law of the k-tuple chain by power iteration on explicit tuples (Python loops)."""
    tuples = list(itertools.product(range(V), repeat=k))
    index = {t: slow_state(t, V) for t in tuples}
    Q = np.zeros((V**k, V**k))
    for t in tuples:
        for v in range(V):
            Q[index[t], index[(*t[1:], v)]] += kernel[index[t], v]
    pi = np.full(V**k, 1.0 / V**k)
    for _ in range(5000):
        pi = 0.5 * pi + 0.5 * pi @ Q  # lazy chain: same fixed point, no periodicity issue
    return pi


# ---------------------------------------------------------------------------------------------
# Encoding and ground truth


@pytest.mark.parametrize("k,V,seed", [(1, 2, 0), (2, 2, 1), (3, 2, 2), (2, 3, 3)])
def test_stationary_law_and_entropy_rate_exact(k, V, seed):
    src = KthOrderMarkov.random(k, V, torch.Generator().manual_seed(seed), alpha=0.7)
    P = src.kernel.numpy()
    pi = slow_stationary(P, k, V)
    np.testing.assert_allclose(src.pi.numpy(), pi, atol=1e-10)
    H = sum(pi[s] * -sum(p * math.log(p) for p in P[s] if p > 0) for s in range(V**k))
    assert src.entropy_rate() == pytest.approx(H, abs=1e-10)
    # Ordered conditional entropies: H_0 >= H_1 >= ... >= H_k = entropy rate.
    hs = [src.conditional_entropy(j) for j in range(k + 2)]
    assert all(a >= b - 1e-12 for a, b in itertools.pairwise(hs))
    assert hs[k] == hs[k + 1] == pytest.approx(H, abs=1e-10)
    marg = np.array([sum(pi[s] for s in range(V**k) if s % V == v) for v in range(V)])
    assert hs[0] == pytest.approx(-(marg * np.log(marg)).sum(), abs=1e-10)


def test_first_order_binary_matches_closed_form():
    p, q = 0.2, 0.35
    src = KthOrderMarkov([[1 - p, p], [q, 1 - q]])
    np.testing.assert_allclose(src.pi.numpy(), [q / (p + q), p / (p + q)])
    h = lambda a: -a * math.log(a) - (1 - a) * math.log(1 - a)  # noqa: E731
    assert src.entropy_rate() == pytest.approx((q * h(p) + p * h(q)) / (p + q), abs=1e-12)


def test_batched_ground_truth_matches_single():
    P = sample_dirichlet(1.0, (5, 4, 2), torch.Generator().manual_seed(0))
    hb = entropy_rate(P)
    for b in range(5):
        assert hb[b].item() == pytest.approx(entropy_rate(P[b]).item(), abs=1e-12)
        assert conditional_entropy(P, 1)[b].item() == pytest.approx(conditional_entropy(P[b], 1).item(), abs=1e-12)
    assert torch.allclose(stationary_law(P).sum(-1), torch.ones(5, dtype=torch.float64))


def test_invalid_kernels():
    with pytest.raises(ValueError):
        KthOrderMarkov(torch.full((3, 2), 0.5))  # 3 is not 2**k
    with pytest.raises(ValueError):
        KthOrderMarkov([[0.5, 0.6], [0.5, 0.5]])
    with pytest.raises(ValueError):
        KthOrderMarkov([[1.0, 0.0], [0.0, 1.0]])  # reducible: no unique stationary law
    with pytest.raises(ValueError):
        InContextMarkov(2, init="bogus")


# ---------------------------------------------------------------------------------------------
# Sampling


def test_fixed_source_entropy_rate_vs_empirical_log_loss():
    src = KthOrderMarkov.random(3, 2, torch.Generator().manual_seed(7), alpha=1.0)
    x = src.sample(gens_of(11), 16, 8000)[0]
    nll = -torch.log(torch.gather(src.optimal_probs(x)[:, :-1], -1, x[:, 1:, None]).squeeze(-1))
    per_seq = nll[:, 10:].mean(-1)  # stationary: every position has expected loss = entropy rate
    est, sem = per_seq.mean().item(), per_seq.std().item() / 4.0
    assert abs(est - src.entropy_rate()) < 4 * sem + 1e-3


@pytest.mark.parametrize("k,V", [(2, 2), (1, 3), (3, 2)])
def test_fixed_source_transition_frequencies_match_kernel(k, V):
    src = KthOrderMarkov.random(k, V, torch.Generator().manual_seed(k * 10 + V), alpha=2.0)
    x = src.sample(gens_of(5), 32, 4000)[0]
    s = context_states(x, k, V)[:, k - 1 : -1].reshape(-1)
    nxt = x[:, k:].reshape(-1)
    N = count_pairs(s, nxt, V**k, V)
    n = N.sum(-1, keepdim=True)
    z = (N / n - src.kernel) / torch.sqrt(src.kernel * (1 - src.kernel) / n)
    assert z.abs().max() < 5
    # Visit frequencies of the states match the stationary law.
    np.testing.assert_allclose((n[:, 0] / n.sum()).numpy(), src.pi.numpy(), atol=0.01)


@pytest.mark.parametrize("init", ["stationary", "uniform"])
def test_first_block_law(init):
    src = KthOrderMarkov.random(2, 2, torch.Generator().manual_seed(3), alpha=0.5, init=init)
    x = src.sample(gens_of(1), 40000, 3)[0]
    s0 = x[:, 0] * 2 + x[:, 1]
    freq = torch.bincount(s0, minlength=4).double() / len(s0)
    want = src.pi if init == "stationary" else torch.full((4,), 0.25, dtype=torch.float64)
    assert (freq - want).abs().max() < 0.015


@pytest.mark.parametrize("init", ["stationary", "uniform"])
def test_fixed_source_bayes_loss_curve_exact_vs_monte_carlo(init):
    src = KthOrderMarkov.random(3, 2, torch.Generator().manual_seed(9), alpha=0.5, init=init)
    T = 12
    curve = src.bayes_loss_curve(T)
    x = src.sample(gens_of(2), 40000, T)[0]
    nll = -torch.log(torch.gather(src.optimal_probs(x)[:, :-1], -1, x[:, 1:, None]).squeeze(-1))
    mc, sem = nll.mean(0), nll.std(0) / math.sqrt(nll.shape[0])
    assert ((mc - curve).abs() < 4 * sem + 1e-3).all(), (mc, curve)
    if init == "stationary":
        assert curve[0].item() == pytest.approx(src.conditional_entropy(1), abs=1e-12)
        assert torch.allclose(curve[2:], torch.full((T - 3,), src.entropy_rate(), dtype=torch.float64))
    else:
        assert torch.allclose(curve[:2], torch.full((2,), math.log(2), dtype=torch.float64))


def test_optimal_probs_prefix_conditionals_stationary():
    src = KthOrderMarkov.random(3, 2, torch.Generator().manual_seed(4))
    pi = src.pi.numpy()
    for prefix in itertools.product(range(2), repeat=2):
        x = torch.tensor([*list(prefix), 0])
        p = src.optimal_probs(x).numpy()

        # P(x1 | x0) and P(x2 | x0 x1) by summing the stationary law of (x0, x1, x2) by hand.
        def joint(*t):
            rest = itertools.product(range(2), repeat=3 - len(t))
            return sum(pi[slow_state(list(t) + list(r), 2)] for r in rest)

        np.testing.assert_allclose(p[0, 1], joint(prefix[0], 1) / joint(prefix[0]), atol=1e-12)
        np.testing.assert_allclose(p[1, 1], joint(*prefix, 1) / joint(*prefix), atol=1e-12)
        np.testing.assert_allclose(p[2], src.kernel[slow_state([*list(prefix), 0], 2)].numpy())


def slow_sample(kernels: torch.Tensor, u: torch.Tensor, k: int, V: int, init: str, pi=None) -> torch.Tensor:
    """Sequential reference sampler: same uniforms, one position at a time (Python loops)."""
    B, T = u.shape
    out = torch.zeros(B, T, dtype=torch.long)
    for b in range(B):
        K = kernels[b] if kernels.dim() == 3 else kernels
        if init == "uniform":
            toks = [min(int(u[b, j] * V), V - 1) for j in range(min(k, T))]
        else:
            law = pi[b] if pi.dim() == 2 else pi
            s0 = int((u[b, 0] >= law.cumsum(0)[:-1]).sum())
            toks = [(s0 // V ** (k - 1 - m)) % V for m in range(k)][:T]
        for j in range(k, T):
            s = slow_state(toks[-k:], V)
            toks.append(int((u[b, j] >= K[s].cumsum(0)[:-1]).sum()))
        out[b] = torch.tensor(toks)
    return out


@pytest.mark.parametrize("init", ["stationary", "uniform"])
def test_fixed_scan_sampler_equals_sequential_loop(init):
    src = KthOrderMarkov.random(2, 3, torch.Generator().manual_seed(8), init=init)
    x = src.sample(gens_of(4, 5), 6, 37)
    u = stack_uniforms(gens_of(4, 5), (6, 37))
    for e in range(2):
        assert torch.equal(x[e], slow_sample(src.kernel, u[e], 2, 3, init, src.pi))


@pytest.mark.parametrize("init", ["stationary", "uniform"])
def test_incontext_scan_sampler_equals_sequential_loop(init):
    task = InContextMarkov(2, 2, alpha=0.8, init=init)
    x, K = task.sample_with_kernels(gens_of(3), 5, 33)
    g = torch.Generator().manual_seed(3)
    K2 = sample_dirichlet(0.8, (5, 4, 2), g)  # member draws: kernels first, then the uniforms
    u = torch.rand((5, 33), generator=g)
    assert torch.equal(K[0], K2)
    assert torch.equal(x[0], slow_sample(K2, u, 2, 2, init, stationary_law(K2)))


def test_short_sequences():
    src = KthOrderMarkov.random(3, 2, torch.Generator().manual_seed(1))
    for T in (1, 2, 3, 4):
        assert src.sample(gens_of(0), 3, T).shape == (1, 3, T)
        assert InContextMarkov(3).sample(gens_of(0), 3, T).shape == (1, 3, T)


def test_incontext_transition_frequencies_match_own_kernel():
    task = InContextMarkov(2, 3, alpha=1.0)
    x, K = task.sample_with_kernels(gens_of(6), 16, 6000)
    x, K = x[0], K[0]
    s = context_states(x, 2, 3)[:, 1:-1]
    nxt = x[:, 2:]
    zs = []
    for b in range(16):
        N = count_pairs(s[b], nxt[b], 9, 3)
        n = N.sum(-1, keepdim=True)
        ok = (n[:, 0] > 50)[:, None] & (K[b] > 0.01) & (K[b] < 0.99)
        z = (N / n - K[b]) / torch.sqrt(K[b] * (1 - K[b]) / n)
        zs.append(z[ok])
    z = torch.cat(zs)
    assert z.abs().max() < 5.5 and abs(z.mean()) < 0.2 and 0.8 < z.std() < 1.2
    # Kernels differ across sequences (nothing is shared).
    assert (K[0] - K[1]).abs().max() > 0.05


def test_incontext_first_tokens_uniform():
    x = InContextMarkov(2, 3, alpha=0.3).sample(gens_of(2), 30000, 2)[0]
    freq = torch.bincount(x[:, 0] * 3 + x[:, 1], minlength=9).double() / 30000
    assert (freq - 1 / 9).abs().max() < 0.01


# ---------------------------------------------------------------------------------------------
# Seeds and members


@pytest.mark.parametrize(
    "task", [KthOrderMarkov.random(2, 2, torch.Generator().manual_seed(0)), InContextMarkov(2, 3, 0.5)]
)
def test_same_seed_same_tokens_and_member_independence(task):
    a = task.sample(gens_of(10, 20, 30), 4, 50)
    b = task.sample(gens_of(10, 20, 30), 4, 50)
    assert a.dtype == torch.int64 and a.shape == (3, 4, 50)
    assert torch.equal(a, b)
    assert not torch.equal(a[0], a[1])
    for e, s in enumerate((10, 20, 30)):
        assert torch.equal(task.sample(gens_of(s), 4, 50)[0], a[e])
    assert torch.equal(task.sample(gens_of(30, 10), 4, 50)[1], a[0])


# ---------------------------------------------------------------------------------------------
# Gamma / Dirichlet draws


@pytest.mark.parametrize("alpha", [0.2, 1.0, 3.5])
def test_gamma_draws_match_gamma_law(alpha):
    g = sample_log_gamma(alpha, (20000,), torch.Generator().manual_seed(1)).exp().numpy()
    assert stats.kstest(g, stats.gamma(alpha).cdf).pvalue > 1e-3
    again = sample_log_gamma(alpha, (20000,), torch.Generator().manual_seed(1)).exp().numpy()
    np.testing.assert_array_equal(g, again)


def test_dirichlet_moments():
    a, V = 0.5, 3
    d = sample_dirichlet(a, (20000, V), torch.Generator().manual_seed(2))
    assert torch.allclose(d.sum(-1), torch.ones(20000, dtype=torch.float64))
    np.testing.assert_allclose(d.mean(0).numpy(), 1 / V, atol=0.005)
    var = (1 / V) * (1 - 1 / V) / (V * a + 1)
    np.testing.assert_allclose(d.var(0).numpy(), var, rtol=0.06)


def test_random_kernel_deterministic():
    a = KthOrderMarkov.random(2, 3, torch.Generator().manual_seed(5), alpha=0.4)
    b = KthOrderMarkov.random(2, 3, torch.Generator().manual_seed(5), alpha=0.4)
    assert a.kernel.shape == (9, 3) and torch.equal(a.kernel, b.kernel)
    assert torch.allclose(a.kernel.sum(-1), torch.ones(9, dtype=torch.float64))


def test_asymptotic_bayes_loss_first_order_binary():
    # k = 1, V = 2, alpha = 1: E[(q h(p) + p h(q)) / (p + q)] over p, q ~ U(0, 1), by quadrature.
    from scipy import integrate

    h = lambda a: -a * math.log(a) - (1 - a) * math.log(1 - a)  # noqa: E731
    want = integrate.dblquad(lambda p, q: (q * h(p) + p * h(q)) / (p + q), 1e-12, 1 - 1e-12, 1e-12, 1 - 1e-12)[0]
    mean, sem = InContextMarkov(1, 2, 1.0).asymptotic_bayes_loss(8000, torch.Generator().manual_seed(0))
    assert abs(mean - want) < 4 * sem


# ----------------------------------------------------------------------------------------------
# Fresh fixed sources (issue 38) against numpy written from the talk's definitions: the k-tuple chain built
# from tuples (no state arithmetic of tdlab), its stationary law by an eigenvector, the entropy rate
# H(x_{t+1} | last k tokens) and the lower-order conditional entropies by summing the stationary joint law.


def _ind_tuple_chain(P, k, V):
    """States = k-tuples (oldest first); state index = base-V number of the tuple (the documented encoding)."""
    tuples = list(itertools.product(range(V), repeat=k))
    index = {t: i for i, t in enumerate(tuples)}
    Q = np.zeros((len(tuples), len(tuples)))
    for t in tuples:
        for v in range(V):
            Q[index[t], index[(*t[1:], v)]] += P[index[t], v]
    w, vecs = np.linalg.eig(Q.T)
    pi = np.real(vecs[:, np.argmin(np.abs(w - 1))])
    return tuples, pi / pi.sum()


def _ind_cond_entropy(P, k, V, order):
    """H(x_{t+1} | last `order` tokens) from the stationary joint law of (k-tuple, next token)."""
    tuples, pi = _ind_tuple_chain(P, k, V)
    joint = {}
    for i, t in enumerate(tuples):
        for v in range(V):
            key = (t[k - order :] if order else (), v)
            joint[key] = joint.get(key, 0.0) + pi[i] * P[i, v]
    ctx = {}
    for (c, _), pr in joint.items():
        ctx[c] = ctx.get(c, 0.0) + pr
    return -sum(pr * math.log(pr / ctx[c]) for (c, _), pr in joint.items() if pr > 0)


@pytest.mark.parametrize("k,V,seed", [(2, 3, 381), (3, 2, 382), (3, 3, 383)])
def test_fresh_source_stationary_law_and_entropies_against_independent_numpy(k, V, seed):
    rng = np.random.default_rng(seed)
    P = rng.dirichlet(np.full(V, 0.7), size=V**k)
    src = KthOrderMarkov(torch.tensor(P))
    _, pi = _ind_tuple_chain(P, k, V)
    assert np.max(np.abs(src.pi.numpy() - pi)) < 1e-13
    assert abs(src.entropy_rate() - _ind_cond_entropy(P, k, V, k)) < 1e-13
    for j in range(k):
        assert abs(src.conditional_entropy(j) - _ind_cond_entropy(P, k, V, j)) < 1e-13
    # a long stationary sample: its k-tuple frequencies and the kernel's log loss on it
    x = src.sample([torch.Generator().manual_seed(seed)], 1, 100_000)[0, 0].numpy()
    # tuple (x_t .. x_{t+k-1}) as a base-V number, oldest most significant
    codes = sum(x[t : len(x) - k + 1 + t] * V ** (k - 1 - t) for t in range(k))
    counts = np.bincount(codes, minlength=V**k) / len(codes)
    assert np.max(np.abs(counts - pi)) < 5 * math.sqrt(pi.max() / len(codes))
    nll = -np.log(P[codes[:-1], x[k:]]).mean()
    assert abs(nll - _ind_cond_entropy(P, k, V, k)) < 0.02


def test_estimator_gap_is_the_sources_own_and_grows_with_the_orders_apart(one_thread):
    """The order-lower/order-k estimator gap of the in-context source, drawn once from a fixed stream: an
    independent draw of the same setting agrees within its Monte-Carlo error; a whole order more is worth
    more; the draw is fixed (cached and reproducible); lower outside 0..k is refused."""
    gap = estimator_gap(1, 0, 65, 1.0)
    x = InContextMarkov(1, 2, 1.0).sample([torch.Generator().manual_seed(123)], 512, 65)
    est = estimator_losses(x, 1, 2, 1.0)
    assert 0.03 < gap < 0.1 and gap == pytest.approx(float((est[0] - est[1]).mean()), abs=0.01)
    assert estimator_gap(2, 0, 65, 1.0) > estimator_gap(2, 1, 65, 1.0) > 0
    assert estimator_gap(1, 1, 65, 1.0) == 0.0
    assert estimator_gap.__wrapped__(1, 0, 65, 1.0) == gap  # the same stream, not a cache artefact
    with pytest.raises(ValueError, match="lower"):
        estimator_gap(1, 2, 65, 1.0)

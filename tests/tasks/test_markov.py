"""The binary first-order Markov task against exact enumeration and plain sequential sampling."""

from __future__ import annotations

import itertools
import math

import pytest
import torch

from tdlab.tasks.markov import (
    MarkovChain,
    entropy_rate,
    iterate_random_maps,
    marginal_entropy,
    stack_uniforms,
    stationary,
)

PQ = [(0.5, 0.8), (0.2, 0.3), (0.9, 0.95), (0.05, 0.6), (0.3, 0.7)]


def _enumerate(p: float, q: float, n: int):
    """All binary sequences of length n with their exact probabilities under (pi, P), float64."""
    P = [[1 - p, p], [q, 1 - q]]
    pi = [q / (p + q), p / (p + q)]
    seqs = list(itertools.product((0, 1), repeat=n))
    probs = []
    for s in seqs:
        pr = pi[s[0]]
        for a, b in itertools.pairwise(s):
            pr *= P[a][b]
        probs.append(pr)
    return torch.tensor(seqs), torch.tensor(probs, dtype=torch.float64)


def _H(probs) -> float:
    return -sum(x * math.log(x) for x in probs if x > 0)


@pytest.mark.parametrize("p,q", PQ)
def test_entropies_match_exact_enumeration(p, q):
    n = 8
    seqs, probs = _enumerate(p, q, n)
    assert probs.sum().item() == pytest.approx(1.0, abs=1e-12)
    # Joint law of the last two symbols, H(x_n, x_{n-1}) - H(x_{n-1}) = H(x_n | x_{n-1}).
    joint = {(a, b): probs[(seqs[:, -2] == a) & (seqs[:, -1] == b)].sum().item() for a in (0, 1) for b in (0, 1)}
    prev = [joint[(a, 0)] + joint[(a, 1)] for a in (0, 1)]
    last = [joint[(0, b)] + joint[(1, b)] for b in (0, 1)]
    assert entropy_rate(p, q) == pytest.approx(_H(joint.values()) - _H(prev), abs=1e-12)
    assert marginal_entropy(p, q) == pytest.approx(_H(last), abs=1e-12)
    # The chain started from pi is stationary: the last symbol has law pi.
    assert last == pytest.approx(list(stationary(p, q)), abs=1e-12)
    chain = MarkovChain(p, q)
    assert chain.baselines() == {"entropy_rate": entropy_rate(p, q), "marginal_entropy": marginal_entropy(p, q)}
    # Every binary chain with p + q != 1 has memory: the bigram loss is strictly below the unigram one.
    if abs(p + q - 1) > 1e-9:
        assert entropy_rate(p, q) < marginal_entropy(p, q)


@pytest.mark.parametrize("p,q", PQ[:3])
def test_optimal_predictor_is_the_conditional_law_and_its_loss_is_the_entropy_rate(p, q):
    n = 8
    chain = MarkovChain(p, q)
    seqs, probs = _enumerate(p, q, n)
    opt = chain.optimal_probs(seqs)  # (S, n, 2): law of x_{k+1} given x_1..x_k
    assert opt.shape == (2**n, n, 2)
    # Against the exact conditional P(x_{k+1} | x_1^k) = P(x_1^{k+1}) / P(x_1^k) from enumeration.
    prefix = {}
    for s, pr in zip(seqs.tolist(), probs.tolist(), strict=True):
        for k in range(1, n + 1):
            prefix[tuple(s[:k])] = prefix.get(tuple(s[:k]), 0.0) + pr
    for s in seqs[::17].tolist():
        for k in range(1, n):
            cond1 = prefix[(*tuple(s[:k]), 1)] / prefix[tuple(s[:k])]
            assert opt[int("".join(map(str, s)), 2), k - 1, 1].item() == pytest.approx(cond1, abs=1e-12)
    # Expected per-position log loss of the optimal predictor = entropy rate (exact, every position).
    nll = -opt[:, :-1, :].gather(-1, seqs[:, 1:, None]).squeeze(-1).log()  # (S, n-1)
    expected = (probs[:, None] * nll).sum(0)
    assert torch.allclose(expected, torch.full_like(expected, entropy_rate(p, q)), atol=1e-12)


@pytest.mark.parametrize("p,q", PQ)
def test_stationary_law_is_invariant(p, q):
    chain = MarkovChain(p, q)
    pi = torch.tensor(chain.pi, dtype=torch.float64)
    assert torch.allclose(pi @ chain.kernel, pi, atol=1e-15)
    assert pi.sum().item() == pytest.approx(1.0)
    assert torch.allclose(chain.kernel.sum(1), torch.ones(2, dtype=torch.float64))


@pytest.mark.parametrize("p,q", [(0.5, 0.8), (0.05, 0.9), (0.3, 0.1)])
def test_sampled_transitions_and_first_symbol_match_the_chain(p, q):
    chain = MarkovChain(p, q)
    gens = [torch.Generator().manual_seed(100 + e) for e in range(2)]
    x = chain.sample(gens, batch=1500, length=40)
    assert x.shape == (2, 1500, 40) and x.dtype == torch.int64
    assert set(x.unique().tolist()) <= {0, 1}
    a, b = x[..., :-1].reshape(-1), x[..., 1:].reshape(-1)
    n0, n1 = int((a == 0).sum()), int((a == 1).sum())
    p_hat = ((a == 0) & (b == 1)).sum().item() / n0
    q_hat = ((a == 1) & (b == 0)).sum().item() / n1
    # Given the current state, the next symbol is an independent Bernoulli: binomial standard errors.
    assert abs(p_hat - p) < 5 * math.sqrt(p * (1 - p) / n0)
    assert abs(q_hat - q) < 5 * math.sqrt(q * (1 - q) / n1)
    pi1 = chain.pi[1]
    first = x[..., 0].double().mean().item()
    assert abs(first - pi1) < 5 * math.sqrt(pi1 * (1 - pi1) / x[..., 0].numel())
    # Stationary start: every position has marginal pi.
    last = x[..., -1].double().mean().item()
    assert abs(last - pi1) < 5 * math.sqrt(pi1 * (1 - pi1) / x[..., -1].numel())


@pytest.mark.parametrize("T, S", [(1, 2), (2, 2), (7, 3), (17, 5), (64, 2)])
def test_iterate_random_maps_equals_a_sequential_loop(T, S):
    g = torch.Generator().manual_seed(T * 10 + S)
    maps = torch.randint(0, S, (2, 3, T, S), generator=g)
    s0 = torch.randint(0, S, (2, 3), generator=g)
    got = iterate_random_maps(maps, s0)
    assert got.shape == (2, 3, T + 1)
    ref = torch.empty_like(got)
    for e in range(2):
        for b in range(3):
            s = int(s0[e, b])
            ref[e, b, 0] = s
            for n in range(T):
                s = int(maps[e, b, n, s])
                ref[e, b, n + 1] = s
    assert torch.equal(got, ref)


def test_sample_equals_the_sequential_markov_recursion_on_the_same_uniforms():
    # The scan is the chain x_{n+1} = [u < p] if x_n = 0 else [u >= q], x_1 = [u_1 < pi_1].
    chain = MarkovChain(0.35, 0.6)
    seeds = [5, 6]
    x = chain.sample([torch.Generator().manual_seed(s) for s in seeds], batch=4, length=12)
    u = stack_uniforms([torch.Generator().manual_seed(s) for s in seeds], (4, 12))
    for e in range(2):
        for b in range(4):
            s = int(u[e, b, 0] < chain.pi[1])
            seq = [s]
            for n in range(1, 12):
                s = int(u[e, b, n] < chain.p) if s == 0 else int(u[e, b, n] >= chain.q)
                seq.append(s)
            assert x[e, b].tolist() == seq


def test_same_seed_same_tokens_and_members_do_not_depend_on_each_other():
    chain = MarkovChain(0.5, 0.8)

    def gens(seeds):
        return [torch.Generator().manual_seed(s) for s in seeds]

    a = chain.sample(gens([1, 2, 3]), 5, 16)
    b = chain.sample(gens([1, 2, 3]), 5, 16)
    assert torch.equal(a, b)
    alone = chain.sample(gens([2]), 5, 16)
    assert torch.equal(alone[0], a[1])
    assert not torch.equal(a[0], a[1])
    c = chain.sample(gens([4]), 5, 16)
    assert not torch.equal(c[0], a[0])


@pytest.mark.parametrize(
    "p,q", [(0.0, 0.5), (1.0, 0.5), (0.5, 0.0), (0.5, 1.0), (-0.1, 0.5), (0.5, 1.5), (math.nan, 0.5)]
)
def test_bad_parameters_raise(p, q):
    with pytest.raises(ValueError):
        MarkovChain(p, q)
    with pytest.raises(ValueError):
        entropy_rate(p, q)


def test_bad_sample_shape_raises():
    chain = MarkovChain(0.5, 0.5)
    with pytest.raises(ValueError, match="batch"):
        chain.sample([torch.Generator()], 0, 4)
    with pytest.raises(ValueError, match="length"):
        chain.sample([torch.Generator()], 2, 0)

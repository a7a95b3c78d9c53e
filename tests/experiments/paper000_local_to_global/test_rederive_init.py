"""An independent re-derivation of markov-init's published refutation of ``standard-init-ends-at-theory-limit``.

The seed (000, Local to Global) says of Fig. 4 (App. A.3.2): "Starting from the standard initialization,
the model converges to a local minimum corresponding to the unigram model", i.e. the final test loss of
the Sec. 2 transformer trained from the standard Gaussian init σ = 0.02 on the chain (p, q) = (0.5, 0.8)
(p + q > 1, Thm. 2's side) is H(π). tdlab's record (``results/paper/markov-init.json``) finds the
opposite: every member ends at the entropy rate. This test re-derives that finding with nothing of
tdlab's: its own chain sampler, its own closed forms for H(π) and the entropy rate (checked here against
brute-force enumeration and sampling), and its own plain-torch model written from the seed's Sec. 2
equations (nothing imported from ``tdlab.models``, ``tdlab.train``, ``tdlab.tasks`` or ``tdlab.theory``).

The model, Sec. 2 as the seed writes it (weight-tied, a = e; one head; no output projection, which Sec. 2
does not write; no LayerNorm), for tokens x_n ∈ {0, 1}:

    x_n = x_n e + p_n                                   (Embedding)
    y_n = x_n + Σ_{i ≤ n} att_{n,i} W_V x_i,  att_{n,·} = softmax_i(<W_Q x_n, W_K x_i> / √d)   (Attention)
    z_n = y_n + W_2 ReLU(W_1 y_n),  W_1 ∈ R^{4d×d}, W_2 ∈ R^{d×4d}                              (FF)
    logit_n = <a, z_n> + b,  P(x_{n+1} = 1 | x_1^n) = σ(logit_n)                                (Linear)

with d = 8 and every parameter drawn from N(0, 0.02²) (App. A.3.2: "all the transformer parameters ... are
randomly chosen around zero with small variance σ = 0.02"; b too). Loss Eq. (1), the mean cross-entropy of
the next token over n ∈ [N]. Training as Table 2: AdamW (β = (0.9, 0.95)), lr 1e-3, weight decay 1e-3 (on
every parameter: Table 2 does not say which), the cosine schedule lr_t = lr · ½(1 + cos(π t / 8000)) of
Table 2's 8000 iterations, batch 16, fresh sequences every step.

Budget (one CPU thread): sequence length N = 256 instead of 1024 and the first 2000 of the schedule's 8000
iterations, ~15-35 s measured here (the longer under load on shared cores). Measured while writing this test,
seeds 0-5: every one left the H(π) plateau by step ~1250 and sat at the entropy rate at step 2000. With the
cosine compressed to end at step 2000 instead (the lr decays before the escape) seed 2 was still at H(π) at
step 2000 (compressed to 3000 steps, it left at ~1500): the horizon decides how late the escape can come, and
the seed's own schedule is the one run here. The test fixes seed 0, the first one tried.
"""

from __future__ import annotations

import itertools
import math

import pytest
import torch
import torch.nn.functional as F

P, Q = 0.5, 0.8  # Fig. 4: p = 0.5, q = 0.8 (p + q > 1)
D = 8  # embedding dimension (A.3.1's d = 8; a point of Table 2's grid)
SIGMA = 0.02  # App. A.3.2: the standard init
N = 256  # sequence length (Table 2: 1024; shortened for one CPU thread)
BATCH = 16  # Table 2
LR, BETAS, WEIGHT_DECAY = 1e-3, (0.9, 0.95), 1e-3  # Table 2
PAPER_ITERATIONS = 8000  # Table 2: the cosine schedule's horizon
STEPS = 2000  # the iterations run here: the schedule's first quarter
TOL = 0.01  # markov-init's claims.tol_nats, the tolerance its end-state claims use


# ----------------------------------------------------------------------------------------------
# The chain: closed forms and a sampler


def binary_entropy(x: float) -> float:
    return -x * math.log(x) - (1 - x) * math.log(1 - x)


def stationary(p: float, q: float) -> tuple[float, float]:
    """π = (q, p)/(p + q) (Sec. 2), the solution of π = π P for P = [1 − p, p; q, 1 − q]."""
    return q / (p + q), p / (p + q)


def marginal_entropy(p: float, q: float) -> float:
    """H(π) = H(x_{n+1}): the loss of the unigram predictor, the local minimum's (Thm. 1)."""
    return binary_entropy(stationary(p, q)[1])


def entropy_rate(p: float, q: float) -> float:
    """H(x_{n+1} | x_n) = π_0 h(p) + π_1 h(q): the loss of the Markov kernel, the global minimum's (Thm. 1)."""
    pi0, pi1 = stationary(p, q)
    return pi0 * binary_entropy(p) + pi1 * binary_entropy(q)


def kernel_prob_one(prev: torch.Tensor, p: float, q: float) -> torch.Tensor:
    """P(x_{n+1} = 1 | x_n): p after a 0, 1 − q after a 1."""
    return torch.where(prev == 0, torch.full_like(prev, p), torch.full_like(prev, 1 - q))


def sample_chain(gen: torch.Generator, batch: int, length: int, p: float, q: float) -> torch.Tensor:
    """``(batch, length)`` float 0/1 sequences of the stationary chain: x_1 ~ π, then the kernel."""
    x = torch.empty(batch, length)
    x[:, 0] = (torch.rand(batch, generator=gen) < stationary(p, q)[1]).float()
    u = torch.rand(batch, length, generator=gen)
    for n in range(1, length):
        x[:, n] = (u[:, n] < kernel_prob_one(x[:, n - 1], p, q)).float()
    return x


def sequence_entropy(n: int, p: float, q: float) -> float:
    """H(x_1^n) by brute force: the probability of every one of the 2^n sequences, summed."""
    pi = stationary(p, q)
    kernel = [[1 - p, p], [q, 1 - q]]
    total = 0.0
    for seq in itertools.product((0, 1), repeat=n):
        prob = pi[seq[0]]
        for a, b in itertools.pairwise(seq):
            prob *= kernel[a][b]
        total -= prob * math.log(prob)
    return total


def reference_losses(x: torch.Tensor, p: float, q: float) -> tuple[float, float]:
    """On sequences ``x`` ``(B, N + 1)``: the mean next-token loss of the Bayes predictor (the kernel) and of
    the unigram predictor (π), over the same N targets per sequence the model predicts."""
    prev, nxt = x[:, :-1], x[:, 1:]
    bayes = F.binary_cross_entropy(kernel_prob_one(prev, p, q), nxt).item()
    unigram = F.binary_cross_entropy(torch.full_like(nxt, stationary(p, q)[1]), nxt).item()
    return bayes, unigram


# ----------------------------------------------------------------------------------------------
# The Sec. 2 transformer


class Sec2Transformer(torch.nn.Module):
    """Sec. 2's single-layer transformer with a = e; parameters ~ N(0, σ²). ``forward`` maps 0/1 tokens
    ``(B, N)`` to the logits of P(x_{n+1} = 1 | x_1^n), ``(B, N)``."""

    def __init__(self, length: int, d: int, sigma: float, gen: torch.Generator) -> None:
        super().__init__()

        def draw(*shape: int) -> torch.nn.Parameter:
            return torch.nn.Parameter(sigma * torch.randn(shape, generator=gen))

        self.e = draw(d)  # token embedding, tied with the output vector a
        self.pos = draw(length, d)  # p_n
        self.W_Q, self.W_K, self.W_V = draw(d, d), draw(d, d), draw(d, d)
        self.W_1, self.W_2 = draw(4 * d, d), draw(d, 4 * d)
        self.b = draw()

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        n = tokens.shape[1]
        x = tokens[..., None] * self.e + self.pos[:n]  # (B, N, d)
        q, k, v = (x @ W.T for W in (self.W_Q, self.W_K, self.W_V))
        # softmax(<q_n, k_i>/√d) over i ≤ n, times W_V x_i (one head: the (B, 1, N, d) layout is SDPA's)
        y = x + F.scaled_dot_product_attention(q[:, None], k[:, None], v[:, None], is_causal=True)[:, 0]
        z = y + torch.relu(y @ self.W_1.T) @ self.W_2.T
        return z @ self.e + self.b  # <a, z_n> + b with a = e


def next_token_loss(model: Sec2Transformer, x: torch.Tensor) -> torch.Tensor:
    """Eq. (1): the mean cross-entropy of x_{n+1} given x_1^n over n ∈ [N], for ``x`` ``(B, N + 1)``."""
    return F.binary_cross_entropy_with_logits(model(x[:, :-1]), x[:, 1:])


# ----------------------------------------------------------------------------------------------
# Tests


@pytest.fixture
def one_thread():
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


def test_the_closed_forms_match_brute_force_enumeration_and_the_sampler() -> None:
    h_pi, rate = marginal_entropy(P, Q), entropy_rate(P, Q)
    pi0, pi1 = stationary(P, Q)
    assert pi0 * (1 - P) + pi1 * Q == pytest.approx(pi0, abs=1e-15)  # π = π P
    # Enumeration over all 2^n sequences: H(x_1) = H(π) and H(x_1^n) − H(x_1^{n−1}) = H(x_{n+1} | x_n) for
    # the stationary chain, so H(x_1^n)/n → the entropy rate (the seed's definition, App. A).
    assert sequence_entropy(1, P, Q) == pytest.approx(h_pi, abs=1e-12)
    entropies = [sequence_entropy(n, P, Q) for n in range(1, 13)]
    for a, b in itertools.pairwise(entropies):
        assert b - a == pytest.approx(rate, abs=1e-12)
    assert entropies[-1] / 12 == pytest.approx(rate + (h_pi - rate) / 12, abs=1e-12)
    # The sampler: the state frequency, the transition frequencies and the two predictors' losses on its
    # sequences lie within 4 standard errors of the closed forms (the state and loss sequences are
    # correlated, by λ = 1 − p − q = −0.3 per step: their standard errors are doubled, which covers it).
    x = sample_chain(torch.Generator().manual_seed(1), 256, 513, P, Q)
    prev, nxt = x[:, :-1], x[:, 1:]
    assert abs(x.mean().item() - pi1) < 4 * 2 * math.sqrt(pi0 * pi1 / x.numel())
    after0, after1 = nxt[prev == 0], nxt[prev == 1]
    assert abs(after0.mean().item() - P) < 4 * math.sqrt(P * (1 - P) / after0.numel())
    assert abs((1 - after1).mean().item() - Q) < 4 * math.sqrt(Q * (1 - Q) / after1.numel())
    bayes, unigram = reference_losses(x, P, Q)
    se = 2 * 1.0 / math.sqrt(nxt.numel())  # a per-token loss here lies in [0.22, 1.61]: its sd is below 1
    assert abs(bayes - rate) < 4 * se
    assert abs(unigram - h_pi) < 4 * se
    # What the end-state claim separates: the two minima are 4.7 tolerances apart at (0.5, 0.8).
    assert h_pi - rate == pytest.approx(0.0473, abs=1e-4)
    assert h_pi - rate > 4 * TOL


def test_the_standard_init_leaves_h_pi_and_ends_at_the_entropy_rate(one_thread) -> None:
    """Re-derives the published refutation: from σ = 0.02 the Sec. 2 model passes the H(π) plateau and ends
    at the entropy rate (below H(π) by ~0.047 nats, far beyond the 0.01-nat tolerance), not at H(π)."""
    gen = torch.Generator().manual_seed(0)
    model = Sec2Transformer(N, D, SIGMA, gen)
    opt = torch.optim.AdamW(model.parameters(), lr=LR, betas=BETAS, weight_decay=WEIGHT_DECAY)
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda t: 0.5 * (1 + math.cos(math.pi * t / PAPER_ITERATIONS)))
    data = torch.Generator().manual_seed(1000)
    train = sample_chain(data, BATCH * STEPS, N + 1, P, Q).view(STEPS, BATCH, N + 1)  # fresh every step
    evals = torch.Generator().manual_seed(2000)

    def test_gap() -> tuple[float, float, float]:
        """Test loss on 64 fresh sequences, and its gaps to the Bayes and unigram predictors on them."""
        x = sample_chain(evals, 64, N + 1, P, Q)
        with torch.no_grad():
            loss = next_token_loss(model, x).item()
        bayes, unigram = reference_losses(x, P, Q)
        return loss, loss - bayes, loss - unigram

    start = test_gap()
    plateau = None
    for t in range(STEPS):
        loss = next_token_loss(model, train[t])
        opt.zero_grad()
        loss.backward()
        opt.step()
        sched.step()
        if t + 1 == 250:
            plateau = test_gap()
    final, to_bayes, to_unigram = test_gap()

    # σ = 0.02 is small: the model starts at the uniform predictor (log 2) and first learns the unigram law,
    # the H(π) plateau (the local minimum of Thm. 1) ...
    assert start[0] == pytest.approx(math.log(2), abs=TOL)
    assert plateau is not None and abs(plateau[2]) < TOL
    # ... but does not stay there: its final test loss is below the unigram predictor's on the same fresh
    # sequences by far more than the tolerance (by most of H(π) − rate) ...
    assert to_unigram < -3 * TOL
    # ... and it ends at the Bayes predictor's, the entropy rate (the global minimum), within the tolerance.
    assert abs(to_bayes) < TOL
    assert abs(final - entropy_rate(P, Q)) < 1.5 * TOL
    assert marginal_entropy(P, Q) - final > 3 * TOL

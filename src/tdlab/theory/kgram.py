"""The k-gram in-context estimator and the Bayes losses of the in-context Markov source.

Seed 003 ("Attention with Markov", Makkuva et al., talk), Part II, "ICL for kth-order Markov":
use the historical tokens that followed the *same* k-context as the current one ("context
matching"),

    Pr_k(x | x_1..x_t) = sum_{i=k+1}^t 1{x_i = x, x_{i-k..i-1} = x_{t-k+1..t}}
                         / sum_{i=k+1}^t 1{x_{i-k..i-1} = x_{t-k+1..t}},

the estimator that a 3-layer, 1-head transformer can represent for any k (the talk's main result).
With add-beta smoothing,

    P(x_{t+1} = v | x_1..x_t) = (N_t(s_t -> v) + beta) / (N_t(s_t) + V beta),

it is the posterior predictive (hence Bayes-optimal) under iid Dirichlet(beta) kernel rows, i.e.
for :class:`tdlab.tasks.markov_kth.InContextMarkov` with ``alpha = beta`` and its default uniform
initial block (beta = 1: Laplace's add-one rule). ``beta = 0`` is the seed's raw ratio.

States (:func:`context_states`): the last ``k`` tokens read as a base-``V`` number, most recent token
least significant, as the sources of :mod:`tdlab.tasks.markov_kth` encode their kernels' rows (the
sources import this function; it is a function of the sequence alone).

Indexing (0-based, as in ``MarkovChain.optimal_probs``): for tokens ``(..., T)`` the estimator
returns ``(..., T, V)``; entry ``i`` is the law of ``x_{i+1}`` given ``x_0..x_i``. Counts use the
transitions ``x_{j-k..j-1} -> x_j`` for ``k <= j <= i``. Positions with fewer than ``k`` previous
tokens (``i < k - 1``) have no k-context and are predicted uniform; this is also what the
order-``min(i+1, k)`` estimator gives there (that order has no completed transition yet), and it is
the Bayes predictor of the in-context source, whose first ``k`` tokens are uniform. Whenever the
current context has count 0 the prediction is uniform (the ``beta -> 0`` limit for ``beta = 0``).
"""

from __future__ import annotations

import math
from collections.abc import Iterable

import torch

__all__ = [
    "context_states",
    "cross_entropy",
    "estimator_loss_curves",
    "estimator_losses",
    "incontext_bayes_loss_curve",
    "incontext_bayes_loss_exact",
    "incontext_log_marginal",
    "kgram_counts",
    "kgram_loss_curve",
    "kgram_probs",
]


def context_states(tokens: torch.Tensor, k: int, vocab: int) -> torch.Tensor:
    """State (last ``k`` tokens, base ``vocab``, most recent last) after each position.

    Args:
        tokens: ``(..., T)`` integer tokens.
        k: context length (``k = 0`` gives the single empty state 0 everywhere).
        vocab: alphabet size ``V``.
    Returns:
        ``(..., T)`` int64; entry ``i`` is the state of ``x_{i-k+1..i}`` (0-based), or ``-1`` where
        fewer than ``k`` tokens have been seen (``i < k - 1``).
    """
    if k < 0:
        raise ValueError(f"k must be >= 0, got {k}")
    x = tokens.long()
    T = x.shape[-1]
    s = torch.zeros_like(x)
    for m in range(min(k, T)):
        # Digit m (weight V**m) is the token m steps back.
        s[..., m:] += x[..., : T - m] * vocab**m
    if k > 0:
        s[..., : k - 1] = -1
    return s


def _transition_ids(tokens: torch.Tensor, k: int, vocab: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Context states ``(..., T)`` (-1 where undefined) and transition ids ``(..., T)``:
    ``state(x_{j-k..j-1}) * V + x_j`` for ``j >= k``, the dummy id ``V**(k+1)`` for ``j < k``."""
    x = tokens.long()
    ctx = context_states(x, k, vocab)
    pair = torch.full_like(x, vocab ** (k + 1))
    if k == 0:
        pair = x.clone()
    elif x.shape[-1] > k:
        pair[..., k:] = ctx[..., k - 1 : -1] * vocab + x[..., k:]
    return ctx, pair


def kgram_counts(tokens: torch.Tensor, k: int, vocab: int, method: str = "auto") -> torch.Tensor:
    """In-context counts ``N_i(s_i -> v)``: how often ``v`` followed the current k-context so far.

    Args:
        tokens: ``(..., T)`` integer tokens in ``{0..V-1}``.
        k: context length ``>= 0`` (0: unigram counts).
        vocab: ``V``.
        method: ``"onehot"`` (cumulative sum of one-hot transition ids: ``O(T V**(k+1))`` memory,
            fastest for small tables), ``"sort"`` (``O(T V)`` memory, ``O(T log T)`` time whatever
            ``V**k``: sort the keys ``(transition id, position)`` and count the occurrences of
            ``(s_i, v)`` at positions ``<= i`` with two binary searches), or ``"auto"`` (one-hot
            while ``V**(k+1) <= 64``).
    Returns:
        ``(..., T, V)`` int64; entry ``[i, v]`` counts ``k <= j <= i`` with
        ``x_{j-k..j-1} = x_{i-k+1..i}`` and ``x_j = v``; zero where ``i < k - 1``.
    """
    if k < 0:
        raise ValueError(f"k must be >= 0, got {k}")
    if method == "auto":
        method = "onehot" if vocab ** (k + 1) <= 64 else "sort"
    lead, T = tokens.shape[:-1], tokens.shape[-1]
    ctx, pair = _transition_ids(tokens.reshape(-1, T), k, vocab)
    dev = tokens.device
    q = ctx.clamp_min(0)[..., None] * vocab + torch.arange(vocab, device=dev)  # (N, T, V) ids to read
    if method == "onehot":
        onehot = torch.zeros(*pair.shape, vocab ** (k + 1) + 1, dtype=torch.int32, device=dev)
        running = onehot.scatter_(-1, pair[..., None], 1).cumsum(-2, dtype=torch.int32)
        counts = torch.gather(running, -1, q).long()
    elif method == "sort":
        pos = torch.arange(T, device=dev)
        keys = (pair * (T + 1) + pos).sort(-1).values  # (N, T)
        lo = torch.searchsorted(keys, (q * (T + 1)).flatten(-2))
        hi = torch.searchsorted(keys, (q * (T + 1) + pos[:, None]).flatten(-2), right=True)
        counts = (hi - lo).reshape(-1, T, vocab)
    else:
        raise ValueError(f"method must be 'auto', 'onehot' or 'sort', got {method!r}")
    counts = counts.masked_fill((ctx < 0)[..., None], 0)
    return counts.reshape(*lead, T, vocab)


def kgram_probs(
    tokens: torch.Tensor, k: int, vocab: int, beta: float = 1.0, dtype: torch.dtype = torch.float64
) -> torch.Tensor:
    """The add-``beta`` order-``k`` in-context estimator at every position.

    Args:
        tokens: ``(..., T)``.
        k: estimator order ``>= 0`` (need not equal the source's order).
        vocab: ``V``.
        beta: smoothing ``>= 0`` (Bayes for a Dirichlet(beta) prior; 0 = raw frequencies).
    Returns:
        ``(..., T, V)``; entry ``i`` is ``P(x_{i+1} = v | x_0..x_i)`` (module doc for conventions).
    """
    if beta < 0:
        raise ValueError(f"beta must be >= 0, got {beta}")
    n = kgram_counts(tokens, k, vocab).to(dtype)
    tot = n.sum(-1, keepdim=True)
    p = (n + beta) / (tot + vocab * beta) if beta > 0 else n / tot.clamp_min(1)
    if beta == 0:
        p = torch.where(tot > 0, p, torch.full_like(p, 1.0 / vocab))
    return p


def cross_entropy(probs: torch.Tensor, tokens: torch.Tensor) -> torch.Tensor:
    """Per-position loss against the realised next token.

    Args:
        probs: ``(..., T, V)`` next-token laws (entry ``i`` predicts ``x_{i+1}``).
        tokens: ``(..., T)``.
    Returns:
        ``(..., T - 1)``: ``-log probs[..., i, x_{i+1}]`` in nats.
    """
    nxt = tokens[..., 1:].long().unsqueeze(-1)
    return -torch.log(torch.gather(probs[..., :-1, :], -1, nxt).squeeze(-1))


def kgram_loss_curve(tokens: torch.Tensor, k: int, vocab: int, beta: float = 1.0) -> torch.Tensor:
    """Expected loss of the order-``k`` add-``beta`` estimator by position, averaged over sequences.

    Args:
        tokens: ``(..., T)`` samples of a source (any leading dims are averaged).
    Returns:
        ``(T - 1,)`` float64; entry ``i`` is the mean of ``-log P_hat(x_{i+1} | x_0..x_i)``.
    """
    ce = cross_entropy(kgram_probs(tokens, k, vocab, beta), tokens)
    return ce.reshape(-1, ce.shape[-1]).mean(0)


def estimator_loss_curves(
    tokens: torch.Tensor, orders: Iterable[int], vocab: int, beta: float = 1.0
) -> dict[int, torch.Tensor]:
    """``{order: kgram_loss_curve(tokens, order, vocab, beta)}``: e.g. orders (0, 1, 2) on a k = 2
    source compare the unigram, bigram and matched estimators; each ``(T - 1,)``."""
    return {int(j): kgram_loss_curve(tokens, int(j), vocab, beta) for j in orders}


def estimator_losses(tokens: torch.Tensor, k: int, vocab: int, alpha: float) -> dict[int, torch.Tensor]:
    """Per-member, per-position loss of the add-α order-``j`` in-context estimators, ``j = 0..k``
    (:func:`estimator_loss_curves` with the member axis kept: each member's own probe sequences).

    Args:
        tokens: ``(E, S, T)`` sequences, ``S`` per member.
    Returns:
        ``{j: (E, T − 1) float64}``: entry ``[e, i]`` is the mean over member ``e``'s sequences of
        ``−log P̂_j(x_{i+1} | x_0..x_i)`` in nats (``.mean(-1)``: the loss per token).
    """
    return {j: cross_entropy(kgram_probs(tokens, j, vocab, beta=alpha), tokens).mean(1) for j in range(k + 1)}


# ----------------------------------------------------------------------------------------------
# Bayes losses of the in-context source (Dirichlet(alpha) rows, uniform first k tokens)


def incontext_log_marginal(tokens: torch.Tensor, k: int, vocab: int, alpha: float) -> torch.Tensor:
    """Exact log-probability of sequences under the in-context source (kernel integrated out).

    ``P(x_1..x_T) = V**-k prod_s B(N(s, .) + alpha) / B(alpha)`` (Dirichlet-multinomial per state,
    ``B`` the multivariate Beta function, ``N`` the transition counts of the whole sequence).

    Args:
        tokens: ``(..., T)``.
    Returns:
        ``(...)`` float64 log-probabilities.
    """
    x = tokens.long()
    lead, T = x.shape[:-1], x.shape[-1]
    if k >= T:
        return torch.full(lead, -T * math.log(vocab), dtype=torch.float64, device=x.device)
    _, pair = _transition_ids(x.reshape(-1, T), k, vocab)
    S = vocab**k
    n = torch.zeros(pair.shape[0], S * vocab + 1, dtype=torch.float64, device=x.device)
    n.scatter_add_(-1, pair, torch.ones_like(pair, dtype=torch.float64))
    n = n[:, :-1].reshape(-1, S, vocab)
    a = torch.as_tensor(alpha, dtype=torch.float64)
    logB = torch.lgamma(n + a).sum(-1) - torch.lgamma(n.sum(-1) + vocab * a)
    logB0 = vocab * torch.lgamma(a) - torch.lgamma(vocab * a)
    out = -k * math.log(vocab) + (logB - logB0).sum(-1)
    return out.reshape(lead)


def incontext_bayes_loss_curve(
    tokens: torch.Tensor, k: int, vocab: int, alpha: float
) -> tuple[torch.Tensor, torch.Tensor]:
    """Bayes loss of the in-context source by position, estimated from its samples.

    Rao-Blackwellised: ``E[-log p(x_{i+1} | x_0..x_i)] = E[H(p(. | x_0..x_i))]`` (tower property),
    so the entropy of the exact posterior predictive (add-alpha) is averaged instead of its log
    loss at the realised token, which has several times the variance.

    Args:
        tokens: ``(..., T)`` samples of ``InContextMarkov(k, vocab, alpha, init="uniform")``; leading
            dims are iid sequences.
    Returns:
        ``(mean, sem)``, each ``(T - 1,)`` float64: entry ``i`` for predicting ``x_{i+1}``.
    """
    p = kgram_probs(tokens, k, vocab, beta=alpha)[..., :-1, :]
    h = -torch.special.xlogy(p, p).sum(-1)
    h = h.reshape(-1, h.shape[-1])
    n = h.shape[0]
    sem = h.std(0) / math.sqrt(n) if n > 1 else torch.full_like(h[0], float("nan"))
    return h.mean(0), sem


def incontext_bayes_loss_exact(k: int, vocab: int, alpha: float, length: int) -> torch.Tensor:
    """Exact Bayes loss of the in-context source by position, by enumerating all sequences.

    ``loss_i = H(x_0..x_{i+1}) - H(x_0..x_i)`` with block entropies from
    :func:`incontext_log_marginal` (independent of the estimator code). Cost ``~2 V**length``; meant
    for ``V**length <= 2**20`` or so.

    Returns:
        ``(length - 1,)`` float64; entry ``i`` for predicting ``x_{i+1}`` from ``x_0..x_i``.
    """
    if vocab**length > 2**22:
        raise ValueError(f"V**length = {vocab}**{length} sequences is too many to enumerate")
    H = [0.0]
    for m in range(1, length + 1):
        idx = torch.arange(vocab**m)
        w = vocab ** torch.arange(m - 1, -1, -1)
        seqs = (idx[:, None] // w) % vocab  # all sequences of length m
        lp = incontext_log_marginal(seqs, k, vocab, alpha)
        H.append(float(-(lp.exp() * lp).sum()))
    return torch.tensor([H[i + 2] - H[i + 1] for i in range(length - 1)], dtype=torch.float64)

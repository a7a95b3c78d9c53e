"""Closed forms of seed 000's binary first-order chain (Sec. 2): kernel ``P = [[1-p, p], [q, 1-q]]``
(``p = P(1|0)``, ``q = P(0|1)``), its stationary law and entropies, as plain functions of ``(p, q)``.

The sampler is :class:`tdlab.tasks.markov.MarkovChain`; theory that needs these numbers takes them from
here, so it never reaches into the task.
"""

from __future__ import annotations

import math

__all__ = ["binary_entropy", "check_pq", "entropy_rate", "marginal_entropy", "stationary"]


def check_pq(p: float, q: float) -> None:
    """Raise ``ValueError`` unless both transition probabilities lie in ``(0, 1)`` (an ergodic, aperiodic chain)."""
    for name, v in (("p", p), ("q", q)):
        if not 0.0 < float(v) < 1.0:
            raise ValueError(f"{name} must lie in the open interval (0, 1), got {v}")


def binary_entropy(x: float) -> float:
    """h(x) = -x log x - (1-x) log(1-x) in nats (h(0) = h(1) = 0)."""
    if x <= 0.0 or x >= 1.0:
        return 0.0
    return -x * math.log(x) - (1.0 - x) * math.log(1.0 - x)


def stationary(p: float, q: float) -> tuple[float, float]:
    """Stationary law pi = (q, p) / (p + q) of the chain (Sec. 2)."""
    check_pq(p, q)
    return q / (p + q), p / (p + q)


def marginal_entropy(p: float, q: float) -> float:
    """H(pi) = H(x_{n+1}) in nats: the loss of the best unigram predictor, i.e. of the local minima
    of Thm. 1 (L(theta_min) = H(x_{n+1}))."""
    return binary_entropy(stationary(p, q)[1])


def entropy_rate(p: float, q: float) -> float:
    """H(x_{n+1} | x_n) = pi_0 h(p) + pi_1 h(q) in nats: the loss of the Bayes (bigram) predictor,
    i.e. of the global minima of Thm. 1."""
    pi0, pi1 = stationary(p, q)
    return pi0 * binary_entropy(p) + pi1 * binary_entropy(q)

"""Markov sources with known ground truth.

Seed 000 (Local to Global), Sec. 2: a binary first-order chain with kernel
``P = [[1-p, p], [q, 1-q]]`` (``p = P(1|0)``, ``q = P(0|1)``), stationary law
``pi = (q, p) / (p + q)`` and first symbol drawn from ``pi``.

Sampling is vectorised over ensemble members, batch *and positions*: a Markov chain driven by
uniform noise is an iteration of random maps ``s_{n+1} = f_n(s_n)`` on its finite state space, and
the composition of maps is associative, so all prefixes ``f_n o ... o f_1`` come out of a parallel
prefix scan in ``ceil(log2 T)`` gathers (:func:`iterate_random_maps`). The reference code's Python
loop over positions, its main CPU cost, disappears.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import torch
from pydantic import Field

from tdlab.config import Config
from tdlab.theory.markov_chain import binary_entropy, check_pq, entropy_rate, marginal_entropy, stationary

__all__ = [
    "ChainConfig",
    "MarkovChain",
    "binary_entropy",
    "entropy_rate",
    "iterate_random_maps",
    "marginal_entropy",
    "stack_uniforms",
    "stationary",
]


# ----------------------------------------------------------------------------------------------
# Ground truth of the binary first-order chain (its closed forms: tdlab.theory.markov_chain)


class ChainConfig(Config):
    """A binary first-order Markov chain (seed 000, Sec. 2): P(1|0) = p, P(0|1) = q."""

    p: float = Field(0.5, gt=0.0, lt=1.0)  # seed 000 Fig. 4: p = 0.5
    q: float = Field(0.8, gt=0.0, lt=1.0)  # seed 000 Fig. 4: q = 0.8


# ----------------------------------------------------------------------------------------------
# Vectorised sampling by a prefix scan over random maps


def iterate_random_maps(maps: torch.Tensor, s0: torch.Tensor) -> torch.Tensor:
    """States of the iteration ``s_n = f_n(s_{n-1})`` for all n at once.

    Args:
        maps: ``(..., T, S)`` integer tensor; ``maps[..., n, s]`` is ``f_{n+1}(s)``, a map of the
            state space ``{0..S-1}`` into itself.
        s0: ``(...)`` integer tensor of initial states.
    Returns:
        ``(..., T + 1)`` states ``(s_0, s_1, ..., s_T)``.

    A Hillis-Steele scan: after the pass with shift ``k``, ``F[n]`` is the composition of the
    ``min(2k, n+1)`` maps ending at ``n``; composition of tables is a gather.
    """
    F = maps
    T = F.shape[-2]
    shift = 1
    while shift < T:
        # F[n] <- F[n] o F[n - shift] for n >= shift.
        composed = torch.gather(F[..., shift:, :], -1, F[..., :-shift, :])
        F = torch.cat([F[..., :shift, :], composed], dim=-2)
        shift *= 2
    idx = s0.unsqueeze(-1).unsqueeze(-1).expand(*F.shape[:-1], 1)
    states = torch.gather(F, -1, idx).squeeze(-1)
    return torch.cat([s0.unsqueeze(-1), states], dim=-1)


def stack_uniforms(
    gens: Sequence[torch.Generator], shape: Sequence[int], device: str | torch.device = "cpu"
) -> torch.Tensor:
    """``(E, *shape)`` uniforms on [0, 1); member ``e``'s block comes from ``gens[e]`` alone, so a
    member's data never depends on which other members are drawn with it."""
    return torch.stack([torch.rand(tuple(shape), generator=g, device=device) for g in gens])


# ----------------------------------------------------------------------------------------------
# The task


@dataclass(frozen=True)
class MarkovChain:
    """Binary first-order Markov chain ``(pi, P)`` of seed 000, Sec. 2.

    Attributes:
        p: switching probability P(x_{n+1}=1 | x_n=0), in (0, 1).
        q: switching probability P(x_{n+1}=0 | x_n=1), in (0, 1).
    """

    p: float
    q: float
    vocab: int = 2

    def __post_init__(self) -> None:
        check_pq(self.p, self.q)

    # --- ground truth -------------------------------------------------------------------------
    @property
    def kernel(self) -> torch.Tensor:
        """``(2, 2)`` transition matrix P[i, j] = P(x_{n+1} = j | x_n = i)."""
        return torch.tensor([[1 - self.p, self.p], [self.q, 1 - self.q]], dtype=torch.float64)

    @property
    def pi(self) -> tuple[float, float]:
        return stationary(self.p, self.q)

    def baselines(self) -> dict[str, float]:
        """Ground-truth losses in nats: ``entropy_rate`` (Bayes / bigram predictor, global minima)
        and ``marginal_entropy`` H(pi) (unigram predictor, local minima), Thm. 1."""
        return {
            "entropy_rate": entropy_rate(self.p, self.q),
            "marginal_entropy": marginal_entropy(self.p, self.q),
        }

    def optimal_probs(self, tokens: torch.Tensor) -> torch.Tensor:
        """Bayes-optimal next-token law given the prefix: ``(..., T)`` tokens -> ``(..., T, 2)``
        probabilities of x_{n+1} given x_1^n (for a first-order chain it depends on x_n only)."""
        return self.kernel.to(tokens.device)[tokens]

    def unigram_probs(self, tokens: torch.Tensor) -> torch.Tensor:
        """The unigram predictor (the stationary law pi at every position; loss H(pi), the local
        minimum of Thm. 2): ``(..., T)`` -> ``(..., T, 2)``."""
        pi = torch.tensor(self.pi, dtype=torch.float64, device=tokens.device)
        return pi.expand(*tokens.shape, 2)

    def reference_predictors(self) -> dict[str, Callable[[torch.Tensor], torch.Tensor]]:
        """Predictors the trainer scores on its evaluation batches: ``bayes`` (bigram, the global
        minima) and ``unigram`` (the local minima)."""
        return {"bayes": self.optimal_probs, "unigram": self.unigram_probs}

    # --- sampling -----------------------------------------------------------------------------
    def sample(
        self, gens: Sequence[torch.Generator], batch: int, length: int, device: str | torch.device = "cpu"
    ) -> torch.Tensor:
        """Sequences from the chain, first symbol from pi.

        Args:
            gens: one generator per ensemble member (``E = len(gens)``).
            batch: sequences per member ``B``.
            length: symbols per sequence ``T``.
        Returns:
            ``(E, B, T)`` int64 tokens in {0, 1}.
        """
        if batch < 1 or length < 1:
            raise ValueError(f"batch and length must be >= 1, got batch={batch}, length={length}")
        u = stack_uniforms(gens, (batch, length), device)  # (E, B, T)
        s0 = (u[..., 0] < self.pi[1]).long()
        # Map of step n on states {0, 1}: 0 -> [u < p], 1 -> [u >= q].
        v = u[..., 1:]
        maps = torch.stack([(v < self.p).long(), (v >= self.q).long()], dim=-1)  # (E, B, T-1, 2)
        return iterate_random_maps(maps, s0)

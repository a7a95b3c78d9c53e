"""The task of seed 999: sticky tokens. In tdlab it would be ``src/tdlab/tasks/sticky.py``.

A task knows its ground truth and how to sample, and nothing of models or training: the trainer asks it
for ``(E, B, T)`` token batches (one random stream per ensemble member) and scores the reference
predictors it names on the same evaluation batches as the model.

Each sequence starts uniform over ``V`` symbols; each next symbol repeats the last with probability ``r``
and is otherwise drawn uniformly (so it may repeat by chance too). The next-token law depends on the
current symbol only: the Bayes loss per token is the entropy rate, the unigram (uniform) loss is log V.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import torch


def entropy_rate(vocab: int, r: float) -> float:
    """Nats per token of the Bayes predictor: ``a = r + (1 − r)/V`` on the repeat, ``b = (1 − r)/V`` on each
    other symbol."""
    a, b = r + (1 - r) / vocab, (1 - r) / vocab
    return -(a * math.log(a) + (vocab - 1) * b * math.log(b)) if b > 0 else 0.0


@dataclass(frozen=True)
class StickyTokens:
    """Sticky tokens over ``vocab`` symbols with repeat probability ``r`` in [0, 1)."""

    vocab: int = 4
    r: float = 0.6

    def __post_init__(self) -> None:
        if self.vocab < 2 or not 0.0 <= self.r < 1.0:
            raise ValueError(f"need vocab >= 2 and 0 <= r < 1, got vocab={self.vocab}, r={self.r}")

    def sample(
        self, gens: Sequence[torch.Generator], batch: int, length: int, device: str | torch.device = "cpu"
    ) -> torch.Tensor:
        """``(E, B, T)`` int64 tokens, member ``e`` drawn from ``gens[e]`` alone."""
        out = []
        for g in gens:  # each member's stream on the CPU: a seed gives the same data on every device
            fresh = torch.randint(self.vocab, (batch, length), generator=g)
            stick = torch.rand((batch, length), generator=g) < self.r
            x = fresh.clone()
            for t in range(1, length):
                x[:, t] = torch.where(stick[:, t], x[:, t - 1], fresh[:, t])
            out.append(x)
        return torch.stack(out).to(device)

    def optimal_probs(self, tokens: torch.Tensor) -> torch.Tensor:
        """The Bayes predictor: ``(..., T)`` tokens -> ``(..., T, V)`` laws of the next token."""
        b = (1 - self.r) / self.vocab
        probs = torch.full((*tokens.shape, self.vocab), b, dtype=torch.float64, device=tokens.device)
        return probs.scatter_add_(-1, tokens.unsqueeze(-1), torch.full_like(probs[..., :1], self.r))

    def unigram_probs(self, tokens: torch.Tensor) -> torch.Tensor:
        """The uniform predictor (loss log V)."""
        return torch.full((*tokens.shape, self.vocab), 1 / self.vocab, dtype=torch.float64, device=tokens.device)

    def reference_predictors(self) -> dict[str, Callable[[torch.Tensor], torch.Tensor]]:
        """Scored by the trainer on its evaluation batches: the metrics ``test_loss@bayes``, ``@unigram``."""
        return {"bayes": self.optimal_probs, "unigram": self.unigram_probs}

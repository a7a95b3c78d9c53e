"""Topic-model documents and masked-token corruption (seed 004, Li, Li & Risteski, ICML 2023).

Vocabulary (§3.1–3.2): the token ``[MASK] = 0`` plus ``T·v`` words ``1..Tv``; word ``i`` belongs to
topic ``topic(i) = ⌈i/v⌉`` (Def. 1), so the T topics are **disjoint** blocks of ``v`` consecutive ids
and a topic emits each of its words with probability ``1/v``. Two document generators:

* ``"uniform-tau"`` (§3.1): τ distinct topics drawn uniformly from ``[T]``; each word's topic is
  uniform among them, the word uniform within its topic. The document's topic proportions are
  ``θ = 1_S / τ`` (S the chosen set).
* ``"lda"`` (§6.1): ``θ ~ Dir(α·1_T)`` (α = 0.1), each word's topic ``~ Cat(θ)``, the word uniform
  within its topic ("Step 1 is changed to sampling the topic distribution according to the Dirichlet
  distribution").

Length ``N ~ U{n_min..n_max}`` (§6.1: 100..150) independently per document. Documents of one batch are
right-padded with id 0 to a common width; ``key_mask`` is True on the ``N`` real positions. Padding
uses the [MASK] id only because it is 0; it is never a token of the document (a task knows nothing
of models: whoever feeds a model must pass ``key_mask`` on).

Population (Assumption 1, "infinitely long documents"): a document *is* its word distribution
``p(i) = θ_{topic(i)}/v`` and, after masking, its token distribution is F.17 (Prop. 1)::

    q(i) = (1 − (1 − p_c) p_m) p(i) + p_m p_r / (Tv)   for words i = 1..Tv,
    q(0) = p_m (1 − p_c − p_r).

For uniform-τ this is ``p_1`` / ``p_2`` of F.18–F.19. :func:`population` lists every τ-subset
document (all equally likely), which makes Eq. (1)'s squared loss under Assumption 1 an exact finite
sum (used by :mod:`tdlab.theory.topics`).

Masking (§3.2, :func:`tdlab.train.objectives.mask_tokens`, the corruption of the masked-token objective): a (real) position joins M with probability ``p_m``; a position
of M keeps its word with probability ``p_c``, becomes a uniform word of ``[Tv]`` with probability
``p_r`` (the original word included, as F.17 requires), and becomes [MASK] otherwise.

Choices where the seed is silent (each a config option or argument):

* ``tau`` defaults to 3: §6.1 says "most sentences contain 2 to 4 topics" for its LDA data; §3.1 gives
  no value. The theory of Thm. 2 / Lemma 1 does not depend on τ (any ``1 <= τ < T``).
* ``sample(length=...)``: with ``length`` given, every batch has exactly that width (it must be at least
  ``n_max``), so shapes are fixed across steps and a member's masks (drawn over the padded width) do
  not depend on the other members' lengths; with ``length=None`` the width is the longest document
  of the batch over all members.
* Replacement words come from ``[words[0], words[1])``, by default ``[1, Tv + 1)`` = the words only
  (§3.2 "random word in [Tv]"); the authors' code draws from every id (pass ``words=(0, vocab)``).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Literal

import torch
from pydantic import Field, model_validator
from torch import Tensor

from tdlab.config import Config
from tdlab.theory.topic_population import (
    masked_distribution,
    population,
    tau_subsets,
    topic_of,
    topic_words,
    word_distribution,
)

__all__ = [
    "MASK_ID",
    "Topics",
    "TopicsConfig",
    "draw_theta",
    "masked_distribution",
    "population",
    "tau_subsets",
    "topic_of",
    "topic_words",
    "word_distribution",
]

MASK_ID = 0  # §3.2: [MASK] = 0
Generator = Literal["uniform-tau", "lda"]


class TopicsConfig(Config):
    """The topic-model data of seed 004 (§3.1, §3.2, §6.1); defaults are §6.1's settings."""

    T: int = Field(10, ge=1, le=4096)  # §6.1: T = 10 topics
    v: int = Field(10, ge=1, le=4096)  # §6.1: v = 10 words per topic
    # "lda" is §6.1's experimental generator; "uniform-tau" is §3.1's (the theory's) generator.
    generator: Generator = "lda"
    # uniform-tau only: topics per document. The seed gives no value; 3 is the middle of §6.1's
    # "most sentences contain 2 to 4 topics". Thm. 2 / Lemma 1 hold for any 1 <= tau < T.
    tau: int = Field(3, ge=1, le=4096)
    alpha: float = Field(0.1, gt=0.0, le=1e6)  # lda only: θ ~ Dir(alpha · 1_T), §6.1 alpha = 0.1
    n_min: int = Field(100, ge=1, le=1_000_000)  # §6.1: N uniform on {100..150}
    n_max: int = Field(150, ge=1, le=1_000_000)
    p_m: float = Field(0.15, ge=0.0, le=1.0)  # §6.1 (after Devlin et al.): P(position joins M)
    p_c: float = Field(0.1, ge=0.0, le=1.0)  # P(kept | in M)
    p_r: float = Field(0.1, ge=0.0, le=1.0)  # P(replaced by a uniform word | in M)

    @model_validator(mode="after")
    def _check(self) -> TopicsConfig:
        if self.tau > self.T:
            raise ValueError(f"tau={self.tau} must be at most T={self.T} (a document has tau distinct topics of T)")
        if self.n_min > self.n_max:
            raise ValueError(f"n_min={self.n_min} must be at most n_max={self.n_max}")
        if self.p_c + self.p_r > 1.0:
            raise ValueError(f"p_c + p_r = {self.p_c + self.p_r} must be at most 1 (p_c={self.p_c}, p_r={self.p_r})")
        if self.T * self.v + 1 > 1_000_000:
            raise ValueError(f"vocabulary T*v + 1 = {self.T * self.v + 1} is too large (at most 1000000)")
        return self

    @property
    def vocab(self) -> int:
        """``Tv + 1``: the words and [MASK]."""
        return self.T * self.v + 1


# ----------------------------------------------------------------------------------------------
# Sampling


def draw_theta(gen: torch.Generator, n: int, T: int, alpha: float, device: str | torch.device = "cpu") -> Tensor:
    """``(n, T)`` float64 draws of ``Dir(alpha · 1_T)`` (§6.1) from ``gen``, as normalised Gamma(alpha)
    draws (float64: with alpha = 0.1 a Gamma draw below float32's range has probability ~1e-4)."""
    shape = torch.full((n, T), float(alpha), dtype=torch.float64, device=device)
    g = torch._standard_gamma(shape, generator=gen)
    return g / g.sum(-1, keepdim=True)


class Topics:
    """Documents of seed 004's topic model (§3.1 / §6.1), ``vocab = Tv + 1`` ids with [MASK] = 0.

    Attributes:
        cfg: the :class:`TopicsConfig`.
        vocab: ``Tv + 1``; mask_id: 0; words: ``(1, Tv + 1)``, the half-open range of word ids.
    """

    mask_id = MASK_ID

    def __init__(self, cfg: TopicsConfig | None = None) -> None:
        self.cfg = cfg if cfg is not None else TopicsConfig()
        self.vocab = self.cfg.vocab
        self.words = (1, self.vocab)

    def population(self) -> dict[str, Tensor]:
        """:func:`population` with this task's (T, v, τ, p_m, p_c, p_r) (uniform-τ's Assumption 1)."""
        c = self.cfg
        return population(c.T, c.v, c.tau, c.p_m, c.p_c, c.p_r)

    def sample(
        self, gens: Sequence[torch.Generator], batch: int, length: int | None = None, device: str | torch.device = "cpu"
    ) -> dict[str, Tensor]:
        """Documents of every member.

        Args:
            gens: one generator per member (``E = len(gens)``); member ``e`` uses ``gens[e]`` alone.
            batch: documents per member ``B``.
            length: the output width; at least ``n_max``. None: the longest document of the batch.
        Returns:
            ``tokens`` ``(E, B, W)`` long (words in ``1..Tv``, 0 on padding) and ``key_mask``
            ``(E, B, W)`` bool (True on the ``N`` real positions of each document, a prefix).
        """
        out = self.sample_latent(gens, batch, length, device)
        return {"tokens": out["tokens"], "key_mask": out["key_mask"]}

    def sample_latent(
        self, gens: Sequence[torch.Generator], batch: int, length: int | None = None, device: str | torch.device = "cpu"
    ) -> dict[str, Tensor]:
        """:meth:`sample` with the latent variables: also ``theta`` ``(E, B, T)`` float64 (the topic
        proportions; ``1_S/τ`` for uniform-τ), ``topic`` ``(E, B, W)`` long (1-based topic of each
        position, 0 on padding) and ``length`` ``(E, B)`` long (N of each document)."""
        c = self.cfg
        if batch < 1:
            raise ValueError(f"batch must be >= 1, got {batch}")
        if length is not None and length < c.n_max:
            raise ValueError(f"length={length} must be at least n_max={c.n_max} (documents are never cut)")
        if not gens:
            raise ValueError("gens must hold one generator per member (got none)")
        # Every draw has the member's full width n_max, so member e's documents do not depend on the
        # other members; the batch is cropped (or padded) to its common width afterwards.
        thetas, topics, words, lengths = [], [], [], []
        for g in gens:
            n = torch.randint(c.n_min, c.n_max + 1, (batch,), generator=g, device=device)
            if c.generator == "uniform-tau":
                order = torch.rand((batch, c.T), generator=g, device=device).argsort(-1)
                chosen = order[:, : c.tau]  # τ distinct topics, uniform subset (0-based)
                pick = torch.randint(0, c.tau, (batch, c.n_max), generator=g, device=device)
                topic = chosen.gather(-1, pick)
                theta = torch.zeros((batch, c.T), dtype=torch.float64, device=device)
                theta.scatter_(-1, chosen, 1.0 / c.tau)
            else:
                theta = draw_theta(g, batch, c.T, c.alpha, device)
                u = torch.rand((batch, c.n_max), generator=g, device=device, dtype=torch.float64)
                # Inverse CDF of Cat(θ); the clamp guards a last cumulative sum a rounding below 1.
                topic = torch.searchsorted(theta.cumsum(-1), u, right=True).clamp_max(c.T - 1)
            within = torch.randint(0, c.v, (batch, c.n_max), generator=g, device=device)
            thetas.append(theta)
            topics.append(topic)
            words.append(topic * c.v + within + 1)
            lengths.append(n)
        n = torch.stack(lengths)
        width = int(n.max()) if length is None else int(length)
        key_mask = torch.arange(width, device=device) < n.unsqueeze(-1)
        pad = max(0, width - c.n_max)

        def fit(xs: list[Tensor]) -> Tensor:
            x = torch.stack(xs)[..., :width]
            return torch.nn.functional.pad(x, (0, pad)) if pad else x

        tokens = fit(words).masked_fill(~key_mask, 0)
        topic = (fit(topics) + 1).masked_fill(~key_mask, 0)
        return {"tokens": tokens, "key_mask": key_mask, "theta": torch.stack(thetas), "topic": topic, "length": n}

"""Sufficient statistics of seed 002's in-context regression prompts (Barnfield, Sen & Sur, App. C).

Without LayerNorm, the linear-attention models of seed 002 see a prompt ``(X, y, x_q)`` (tokens as rows)
only through ``Lambda_hat = X^T X / L``, ``c = X^T y / L``, ``y^T y / L`` and the query; at infinite context
these are their limits ``Lambda = I + m m^T``, ``c = zeta m``, ``zeta^2`` (App. A.3). :class:`PromptStats`
holds them with their leading member and prompt axes ``(E, N)``; :func:`sample_stats` and
:func:`population_stats` reduce the prompts a task draws (any :class:`PromptSampler`, e.g.
:class:`tdlab.tasks.multimodal.MultiModalPrompts`) to them. How a model predicts from them is
:func:`tdlab.train.regression.predict`; the scalar LCA_T's predictions in closed form and the minimisers of the
finite-context loss are :mod:`tdlab.theory.icl_minimisers`.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Protocol

import torch
from torch import Tensor

from tdlab.theory.icl import QueryDraw, bayes_predictor

__all__ = [
    "TOKENS_PER_DRAW",
    "PromptSampler",
    "PromptStats",
    "RawPrompts",
    "baseline_errors",
    "population_stats",
    "sample_stats",
]

TOKENS_PER_DRAW = 1 << 20  # prompts are drawn in chunks of about this many tokens (memory)


class RawPrompts(QueryDraw, Protocol):
    """Raw prompts of ``E`` members, ``N`` each, context length ``L`` (e.g. a ``MultiModalBatch``): the contexts
    beside the queries and latents of :class:`~tdlab.theory.icl.QueryDraw`."""

    @property
    def X(self) -> Tensor: ...  # (E, N, L, d) context covariates

    @property
    def y(self) -> Tensor: ...  # (E, N, L) context responses

    def to(self, device: str | torch.device | None = None, dtype: torch.dtype | None = None) -> RawPrompts:
        """A copy on ``device`` and/or with floating dtype ``dtype``."""
        ...


class PromptSampler(Protocol):
    """What the statistics need of a task: ``n_prompts`` prompts of context length ``L`` per generator."""

    def sample(
        self, gens: Sequence[torch.Generator], n_prompts: int, L: int, *, dtype: torch.dtype = torch.float32
    ) -> RawPrompts: ...


class PromptStats:
    """What the non-LayerNorm models see of ``N`` prompts per member (leading axes ``(E, N)``).

    Attributes:
        c: (E, N, d) ``X^T y / L``; yy: (E, N) ``y^T y / L``; ybar: (E, N) the in-context sample mean
        ``(1/L) sum_i y_i`` (App. G baseline; 0 at infinite context); x_query: (E, N, d); y_query: (E, N);
        bayes: (E, N) the paper's ``y_q^Bayes = <w, x_q>`` (Eq. 4.1); L: context length
        (``math.inf`` for the population limit); m, zeta: the prompts' latents.
        gram: (E, N, d, d) ``Lambda_hat = X^T X / L`` (population: ``I + m m^T``, built on demand).
    """

    def __init__(
        self,
        *,
        c: Tensor,
        yy: Tensor,
        ybar: Tensor,
        x_query: Tensor,
        y_query: Tensor,
        m: Tensor,
        zeta: Tensor,
        L: float,
        gram: Tensor | None = None,
    ) -> None:
        self.c, self.yy, self.ybar, self.x_query, self.y_query = c, yy, ybar, x_query, y_query
        self.m, self.zeta, self.L = m, zeta, L
        self._gram = gram
        self.bayes = bayes_predictor(m, zeta, x_query)
        self._spectral: tuple[Tensor, Tensor] | None = None

    @property
    def population(self) -> bool:
        return math.isinf(self.L)

    @property
    def shape(self) -> tuple[int, int, int]:
        """``(E, N, d)``."""
        return tuple(self.x_query.shape)  # type: ignore[return-value]

    @property
    def gram(self) -> Tensor:
        if self._gram is None:  # population: Lambda = I + m m^T (Eq. 3.4)
            d = self.m.shape[-1]
            eye = torch.eye(d, dtype=self.m.dtype, device=self.m.device)
            self._gram = eye + self.m[..., :, None] * self.m[..., None, :]
        return self._gram

    def spectral(self) -> tuple[Tensor, Tensor]:
        """``(lambda, a)``, each (E, N, K): eigenvalues of ``Lambda_hat`` and ``a_k = (u_k . c)(u_k . x_q)``,
        so that ``c^T f(Lambda_hat) x_q = sum_k a_k f(lambda_k)``. Population: ``K = 2``, the spike
        ``(Z, zeta m . x_q)`` and the bulk ``(1, 0)`` (``c = zeta m`` has no bulk component)."""
        if self._spectral is None:
            if self.population:
                z = 1.0 + (self.m * self.m).sum(-1)
                a = self.zeta * (self.m * self.x_query).sum(-1)
                self._spectral = (torch.stack([z, torch.ones_like(z)], -1), torch.stack([a, torch.zeros_like(a)], -1))
            else:
                lam, U = torch.linalg.eigh(self.gram)
                a = (U.transpose(-1, -2) @ self.c[..., None])[..., 0] * (U.transpose(-1, -2) @ self.x_query[..., None])[
                    ..., 0
                ]
                self._spectral = (lam, a)
        return self._spectral

    def member(self, e: int) -> PromptStats:
        """Member ``e`` alone (member axis of size 1 kept)."""
        out = PromptStats(
            c=self.c[e : e + 1],
            yy=self.yy[e : e + 1],
            ybar=self.ybar[e : e + 1],
            x_query=self.x_query[e : e + 1],
            y_query=self.y_query[e : e + 1],
            m=self.m[e : e + 1],
            zeta=self.zeta[e : e + 1],
            L=self.L,
            gram=None if self._gram is None else self._gram[e : e + 1],
        )
        if self._spectral is not None:
            out._spectral = tuple(s[e : e + 1] for s in self._spectral)  # type: ignore[assignment]
        return out

    @staticmethod
    def from_batch(batch: RawPrompts) -> PromptStats:
        """Statistics of raw prompts (E, N, L, d)."""
        X, y = batch.X, batch.y
        L = X.shape[-2]
        return PromptStats(
            gram=X.transpose(-1, -2) @ X / L,
            c=(X * y[..., None]).sum(-2) / L,
            yy=(y * y).mean(-1),
            ybar=y.mean(-1),
            x_query=batch.x_query,
            y_query=batch.y_query,
            m=batch.m,
            zeta=batch.zeta,
            L=float(L),
        )

    @staticmethod
    def cat(parts: Sequence[PromptStats], dim: int) -> PromptStats:
        """Concatenate along the member (``dim=0``) or prompt (``dim=1``) axis."""
        first = parts[0]
        grams = None if first._gram is None or first.population else torch.cat([p.gram for p in parts], dim)
        return PromptStats(
            **{
                k: torch.cat([getattr(p, k) for p in parts], dim)
                for k in ("c", "yy", "ybar", "x_query", "y_query", "m", "zeta")
            },
            L=first.L,
            gram=grams,
        )


def sample_stats(
    task: PromptSampler,
    gens: Sequence[torch.Generator],
    n: int,
    L: int,
    *,
    dtype: torch.dtype = torch.float64,
    device: str | torch.device | None = None,
) -> PromptStats:
    """Draw ``n`` prompts of context length ``L`` per member with :meth:`PromptSampler.sample` and
    reduce them to statistics. Each member is drawn from its own generator, in chunks of
    ``TOKENS_PER_DRAW // (L + 1)`` prompts (so memory stays bounded; the chunking is a function of
    ``L`` alone, hence reproducible). Drawn in float32, reduced in ``dtype``."""
    per = max(1, TOKENS_PER_DRAW // (L + 1))
    members = []
    for g in gens:
        chunks = []
        for s in range(0, n, per):
            b = task.sample([g], min(per, n - s), L, dtype=torch.float32).to(device=device, dtype=dtype)
            chunks.append(PromptStats.from_batch(b))
        members.append(PromptStats.cat(chunks, 1))
    return PromptStats.cat(members, 0)


def population_stats(
    task: PromptSampler,
    gens: Sequence[torch.Generator],
    n: int,
    *,
    dtype: torch.dtype = torch.float64,
    device: str | torch.device | None = None,
) -> PromptStats:
    """``n`` fresh prompts per member at infinite context (Sec. 6: ``L_tr -> inf``): the latents, the
    query and its response come from :meth:`PromptSampler.sample` (context length 1, discarded);
    the context statistics are their limits ``Lambda = I + m m^T``, ``c = zeta m``, ``y^T y / L = zeta^2``."""
    b = task.sample(list(gens), n, 1, dtype=torch.float32).to(device=device, dtype=dtype)
    return PromptStats(
        c=b.zeta[..., None] * b.m,
        yy=b.zeta**2,
        ybar=torch.zeros_like(b.zeta),
        x_query=b.x_query,
        y_query=b.y_query,
        m=b.m,
        zeta=b.zeta,
        L=math.inf,
    )


def baseline_errors(st: PromptStats) -> dict[str, Tensor]:
    """Per-member ``(E,)`` errors of the predictors that need no training, on the prompts of ``st``: the
    in-context sample mean ``y_bar`` (App. G) as ``sample_mean_mse`` and ``sample_mean_excess`` (its mean
    ``(y_bar - y^Bayes)^2``), the Bayes predictor (Eq. 4.1) as ``bayes_mse`` and the zero predictor as ``zero_mse``
    (``E[y_q^2]``)."""
    return {
        "sample_mean_mse": ((st.y_query - st.ybar) ** 2).mean(-1),
        "sample_mean_excess": ((st.ybar - st.bayes) ** 2).mean(-1),
        "bayes_mse": ((st.y_query - st.bayes) ** 2).mean(-1),
        "zero_mse": (st.y_query**2).mean(-1),
    }

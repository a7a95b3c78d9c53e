"""Multi-modal in-context regression prompts from a latent factor model.

Seed paper: Barnfield, Sen & Sur, "Multi-layer cross-attention is provably optimal for
multi-modal in-context learning" (arXiv:2602.04872), Section 3 and Appendix H.

Each prompt carries a stacked modality vector ``m = [v; r]`` (one block per modality) and a
response scale ``zeta``. Every token ``i`` of the prompt (the ``L`` context tokens and the query)
is generated from one latent scalar ``u_i`` shared by all modalities and the response (Eq. 3.1)::

    u_i ~ N(0, 1),   x_i = u_i m + mu_i,   mu_i ~ N(0, I_d),   y_i = zeta u_i

so that, given ``(m, zeta)``, ``(x_i, y_i) ~ N(0, [[I + m m^T, zeta m], [zeta m^T, zeta^2]])``
(Eq. 3.2), and ``y_i = <w, x_i> + eps_i`` with ``w = zeta m / (1 + |m|^2)`` and
``eps_i ~ N(0, zeta^2 / (1 + |m|^2))`` (Eq. 3.3). The covariate covariance
``Lambda = I + m m^T`` (Eq. 3.4) changes from prompt to prompt: that covariate shift is what
defeats single-layer linear self-attention (Thm 4.1).

Distribution of ``m`` (Assumption 6.1 only asks for a continuous law with bounded ``|m|^2``).
Appendix H: "m drawn from a spherical Gaussian with norm mapped uniformly on [0, 5]". That
sentence has two readings, both offered through ``norm_mode``:

* ``"per_modality"`` (default): each modality block ``v``, ``r`` has a uniform direction and its
  own norm ``~ U[lo, hi]``, independently. With ``[0, 5]`` and two modalities,
  ``|m|^2 = |v|^2 + |r|^2`` ranges over ``[0, 50]`` and ``alpha* = 2 / (2 + 0 + 50) = 1/26``.
  This is the reading the paper implies: App. H states ``alpha* = 1/26 ~ 0.04`` for this setting.
* ``"total"``: ``m`` has a uniform direction in ``R^d`` and ``|m| ~ U[lo, hi]``; with ``[0, 5]``,
  ``|m|^2`` ranges over ``[0, 25]`` and ``alpha* = 2/27``. Fig. 4 (``|m| ~ Unif(0, 2)``) uses this
  form of statement.

``zeta`` must have mean 0 and variance 1 (Sec. 3); App. H uses ``N(0, 1)`` (``zeta="gaussian"``),
and ``zeta="rademacher"`` (+-1) is offered as a second law with the same two moments.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, fields
from typing import Literal

import torch
from torch import Tensor

__all__ = ["MultiModalBatch", "MultiModalPrompts", "NormMode", "ZetaLaw"]

NormMode = Literal["per_modality", "total"]
ZetaLaw = Literal["gaussian", "rademacher"]


@dataclass(frozen=True)
class MultiModalBatch:
    """Prompts for an ensemble of ``E`` members, ``N`` prompts each, context length ``L``.

    Tokens are rows (the paper writes them as the columns of ``X in R^{d x L}``).

    Attributes:
        X: context covariates, (E, N, L, d).
        y: context responses, (E, N, L).
        x_query: query covariate, (E, N, d).
        y_query: query response, (E, N).
        m: stacked modality vector of each prompt, (E, N, d).
        zeta: response scale of each prompt, (E, N).
    """

    X: Tensor
    y: Tensor
    x_query: Tensor
    y_query: Tensor
    m: Tensor
    zeta: Tensor

    @property
    def shape(self) -> tuple[int, int, int, int]:
        """``(E, N, L, d)``."""
        return tuple(self.X.shape)  # type: ignore[return-value]

    def member(self, e: int) -> MultiModalBatch:
        """The data of member ``e`` alone, keeping a member axis of size 1."""
        return MultiModalBatch(**{f.name: getattr(self, f.name)[e : e + 1] for f in fields(self)})

    def to(self, device: str | torch.device | None = None, dtype: torch.dtype | None = None) -> MultiModalBatch:
        """A copy on ``device`` and/or with floating dtype ``dtype``."""
        return MultiModalBatch(**{f.name: getattr(self, f.name).to(device=device, dtype=dtype) for f in fields(self)})


@dataclass(frozen=True)
class MultiModalPrompts:
    """The latent factor prompt distribution of Sec. 3 (defaults: the App. H setting).

    Args:
        dims: covariate dimension of each modality, ``(d1, d2)`` in the paper (16, 16 in App. H);
            more than two modalities stack the same way (Sec. 3).
        norm_range: ``(lo, hi)``, the interval on which the norm is uniform (``(0, 5)`` in App. H).
        norm_mode: ``"per_modality"`` (each block's norm ``~ U[lo, hi]``) or ``"total"``
            (``|m| ~ U[lo, hi]``); see the module docstring for why the first is the default.
        zeta: law of the response scale, ``"gaussian"`` (``N(0, 1)``, App. H) or ``"rademacher"``.
    """

    dims: tuple[int, ...] = (16, 16)
    norm_range: tuple[float, float] = (0.0, 5.0)
    norm_mode: NormMode = "per_modality"
    zeta: ZetaLaw = "gaussian"

    def __post_init__(self) -> None:
        object.__setattr__(self, "dims", tuple(int(k) for k in self.dims))
        object.__setattr__(self, "norm_range", tuple(float(v) for v in self.norm_range))
        lo, hi = self.norm_range
        if not self.dims or min(self.dims) < 1:
            raise ValueError(f"dims must be positive, got {self.dims}")
        if not 0.0 <= lo < hi:
            raise ValueError(f"norm_range must satisfy 0 <= lo < hi, got {self.norm_range}")
        if self.norm_mode not in ("per_modality", "total"):
            raise ValueError(f"unknown norm_mode {self.norm_mode!r}")
        if self.zeta not in ("gaussian", "rademacher"):
            raise ValueError(f"unknown zeta law {self.zeta!r}")

    @property
    def d(self) -> int:
        """Total covariate dimension ``d = d1 + d2 (+ ...)``."""
        return sum(self.dims)

    @property
    def n_norms(self) -> int:
        """How many independent uniform norms make up ``|m|``: one per modality, or one in total."""
        return len(self.dims) if self.norm_mode == "per_modality" else 1

    @property
    def m_sq_range(self) -> tuple[float, float]:
        """``(ess inf |m|^2, ess sup |m|^2)``, the paper's ``(m_lower, m_upper)`` (Assumption 6.1)."""
        lo, hi = self.norm_range
        return self.n_norms * lo**2, self.n_norms * hi**2

    def sample_latents(
        self, gen: torch.Generator, n: int, *, dtype: torch.dtype = torch.float32
    ) -> tuple[Tensor, Tensor]:
        """Draw ``n`` prompt latents ``(m, zeta)`` with ``gen``: shapes (n, d) and (n,)."""
        dev = gen.device
        direction = torch.randn(n, self.d, generator=gen, device=dev, dtype=dtype)
        lo, hi = self.norm_range
        norms = lo + (hi - lo) * torch.rand(n, self.n_norms, generator=gen, device=dev, dtype=dtype)
        blocks = direction.split(list(self.dims), dim=-1) if self.norm_mode == "per_modality" else (direction,)
        m = torch.cat([b / b.norm(dim=-1, keepdim=True) * norms[:, k : k + 1] for k, b in enumerate(blocks)], dim=-1)
        if self.zeta == "gaussian":
            zeta = torch.randn(n, generator=gen, device=dev, dtype=dtype)
        else:
            zeta = 2.0 * torch.randint(0, 2, (n,), generator=gen, device=dev).to(dtype) - 1.0
        return m, zeta

    def _sample_member(self, gen: torch.Generator, n: int, L: int, dtype: torch.dtype) -> tuple[Tensor, ...]:
        # One member's block, drawn only from its own generator, in a fixed order:
        # latents (m, zeta), then u for the L context tokens and the query, then the noise mu.
        m, zeta = self.sample_latents(gen, n, dtype=dtype)
        u = torch.randn(n, L + 1, generator=gen, device=gen.device, dtype=dtype)
        mu = torch.randn(n, L + 1, self.d, generator=gen, device=gen.device, dtype=dtype)
        x = u[..., None] * m[:, None, :] + mu  # Eq. (3.1), both modalities at once
        y = zeta[:, None] * u
        return x[:, :L], y[:, :L], x[:, L], y[:, L], m, zeta

    def sample(
        self,
        gens: Sequence[torch.Generator],
        n_prompts: int,
        L: int,
        *,
        dtype: torch.dtype = torch.float32,
        device: str | torch.device | None = None,
    ) -> MultiModalBatch:
        """Draw ``n_prompts`` prompts of context length ``L`` for each ensemble member.

        Args:
            gens: one generator per member; member ``e``'s prompts depend on ``gens[e]`` only.
            n_prompts: prompts per member, ``N``.
            L: context length (number of labelled tokens before the query).
            dtype: floating dtype of the returned tensors.
            device: where to put the result (drawn on each generator's device, then moved).

        Returns:
            A :class:`MultiModalBatch` whose tensors have leading axes ``(E, N)``, ``E = len(gens)``.
        """
        if len(gens) == 0:
            raise ValueError("need at least one generator")
        if n_prompts < 1 or L < 1:
            raise ValueError(f"need n_prompts >= 1 and L >= 1, got {n_prompts}, {L}")
        blocks = [self._sample_member(g, n_prompts, L, dtype) for g in gens]
        X, y, xq, yq, m, zeta = (torch.stack([b[k].to(device) for b in blocks]) for k in range(6))
        return MultiModalBatch(X=X, y=y, x_query=xq, y_query=yq, m=m, zeta=zeta)

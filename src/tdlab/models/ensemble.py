"""Building blocks for ensemble-first models and the activation cache every model shares.

Every parameter carries a leading member axis ``E``; every activation is ``(E, ...)``. Members never
mix: each op below acts on member ``e``'s slice with member ``e``'s weights only, so gradients of a
summed per-member loss are exactly each member's own gradients.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, Generic, TypeVar, overload

import torch
import torch.nn.functional as F
from torch import nn

__all__ = ["CachingModule", "EnsembleLayerNorm", "EnsembleLinear", "Modules", "assemble"]

M = TypeVar("M", bound=nn.Module)


class Modules(nn.ModuleList, Generic[M]):
    """``nn.ModuleList`` whose items the type checker knows are ``M`` (torch's yields plain ``nn.Module``s,
    whose attributes type as ``Tensor | Module``). The same container at run time: same state-dict keys."""

    if TYPE_CHECKING:

        def __iter__(self) -> Iterator[M]: ...

        @overload
        def __getitem__(self, idx: slice) -> Modules[M]: ...

        @overload
        def __getitem__(self, idx: int) -> M: ...

        def __getitem__(self, idx: int | slice) -> M | Modules[M]: ...


class EnsembleLinear(nn.Module):
    """``E`` independent linear maps ``x -> x W^T (+ b)``.

    Shapes: weight ``(E, out, in)``, bias ``(E, out)``; input ``(E, ..., in)`` -> ``(E, ..., out)``.
    Parameters are created empty; the owning model initialises them per member.
    """

    def __init__(self, members: int, d_in: int, d_out: int, bias: bool = False) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.empty(members, d_out, d_in))
        self.bias = nn.Parameter(torch.empty(members, d_out)) if bias else None

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        E, *mid, d_in = x.shape
        flat = x.reshape(E, -1, d_in)
        if self.bias is None:
            out = torch.bmm(flat, self.weight.transpose(1, 2))
        else:
            out = torch.baddbmm(self.bias.unsqueeze(1), flat, self.weight.transpose(1, 2))
        return out.reshape(E, *mid, -1)


class EnsembleLayerNorm(nn.Module):
    """LayerNorm over the last axis with per-member affine weights ``(E, d)``."""

    def __init__(self, members: int, d: int, bias: bool = True, eps: float = 1e-5) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.ones(members, d))
        self.bias = nn.Parameter(torch.zeros(members, d)) if bias else None
        self.eps = eps

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        shape = (x.shape[0],) + (1,) * (x.dim() - 2) + (x.shape[-1],)
        y = F.layer_norm(x, x.shape[-1:], eps=self.eps) * self.weight.reshape(shape)
        if self.bias is not None:
            y = y + self.bias.reshape(shape)
        return y


class CachingModule(nn.Module):
    """Gives a model named activations, in the spirit of TransformerLens's ``run_with_cache``.

    Forward code calls ``self.record("blocks.0.attn.pattern", t)`` at the points worth probing;
    outside a :meth:`cache` block that is a no-op. Probes read the cache and never reach into the
    forward code, so a new probe needs no model change.
    """

    _cache: dict[str, torch.Tensor] | None = None
    _cache_names: frozenset[str] | None = None

    def record(self, name: str, value: torch.Tensor) -> None:
        if self._cache is not None and (self._cache_names is None or name in self._cache_names):
            self._cache[name] = value.detach()

    def caching(self, name: str) -> bool:
        """Whether ``name`` is being recorded (lets forward code build costly tensors only on demand)."""
        return self._cache is not None and (self._cache_names is None or name in self._cache_names)

    @contextmanager
    def cache(self, names: Iterable[str] | None = None) -> Iterator[dict[str, torch.Tensor]]:
        """Record activations during forward passes inside the block.

        Args:
            names: the activation names to keep (all when ``None``).
        Yields:
            the dict that fills with ``name -> tensor`` (detached, leading member axis ``E``).
        """
        self._cache = {}
        self._cache_names = None if names is None else frozenset(names)
        try:
            yield self._cache
        finally:
            self._cache = None
            self._cache_names = None

    def run_with_cache(
        self, *args, names: Iterable[str] | None = None, **kwargs
    ) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
        """``(output, cache)`` of one forward pass."""
        with self.cache(names) as c, torch.no_grad():
            out = self(*args, **kwargs)
        return out, dict(c)


def assemble(into: M, members: Iterable[nn.Module]) -> M:
    """Fill ensemble ``into`` (``E`` members) with the parameters and buffers of ``E`` one-member models.

    Settings that differ only in initialisation (an init scale, seed 001's γ, seed 004's near-zero
    init) then train as one ensemble: build each member alone with its own config and seed, and copy
    it into an ensemble of the same architecture. Returns ``into``.
    """
    members = list(members)
    own = into.state_dict()
    with torch.no_grad():
        for name, t in own.items():
            parts = [m.state_dict()[name] for m in members]
            if len(parts) != t.shape[0] or any(p.shape[0] != 1 or p.shape[1:] != t.shape[1:] for p in parts):
                raise ValueError(
                    f"assemble: {len(parts)} one-member models do not fit {name} of shape {tuple(t.shape)}"
                )
            t.copy_(torch.cat(parts))
    return into

"""Building blocks for ensemble-first models and the member contract every model shares.

Every parameter carries a leading member axis ``E``; every activation is ``(E, ...)``. Members never
mix: each op below acts on member ``e``'s slice with member ``e``'s weights only, so gradients of a
summed per-member loss are exactly each member's own gradients.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence
from typing import TYPE_CHECKING, Generic, TypeVar, overload

import torch
import torch.nn.functional as F
from torch import nn

from tdlab.models.hooks import HookedModule
from tdlab.seeding import Purpose, generators

__all__ = [
    "CachingModule",
    "EnsembleLayerNorm",
    "EnsembleLinear",
    "EnsembleModel",
    "Members",
    "Modules",
    "assemble",
]

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


class Members(nn.Module):
    """The member contract every model shares: ``E = len(seeds)`` independent members, member ``e``
    drawn from ``seeds[e]`` alone, so it equals the same model built from ``[seeds[e]]``.

    A model calls :meth:`_set_members` first in ``__init__`` and draws its initial parameters from
    :meth:`member_generators`, one generator per member, consumed in the model's fixed order.
    """

    seeds: list[int]

    def _set_members(self, seeds: Sequence[int]) -> int:
        """Keep ``seeds`` (one per member); returns ``E``. Raises ValueError for no seed."""
        if len(seeds) == 0:
            raise ValueError("an ensemble needs at least one member seed")
        self.seeds = list(seeds)
        return len(self.seeds)

    @property
    def members(self) -> int:
        """``E``, the size of the leading axis of every parameter, input and activation."""
        return len(self.seeds)

    @property
    def n_members(self) -> int:
        """The same as :attr:`members` (the regression trainers' spelling)."""
        return len(self.seeds)

    def member_generators(self, purpose: str | None = Purpose.INIT) -> list[torch.Generator]:
        """One CPU generator per member: member ``e``'s stream ``purpose`` of :mod:`tdlab.seeding`, or, for
        ``purpose=None``, a generator seeded with ``seeds[e]`` itself (the in-context regression models)."""
        if purpose is None:
            return [torch.Generator().manual_seed(int(s)) for s in self.seeds]
        return generators(self.seeds, purpose)

    def check_members(self, E: int, what: str = "tokens") -> None:
        """Raise ValueError unless an input's leading axis ``E`` is the member count."""
        if self.members != E:
            raise ValueError(f"{what} have {E} members, the model has {self.members}")

    def member_state(self, e: int) -> dict[str, torch.Tensor]:
        """Parameters and buffers of member ``e`` (without the member axis), e.g. for saving or probes."""
        return {k: v[e].detach().clone() for k, v in self.state_dict().items()}


class EnsembleModel(Members, HookedModule):
    """What every tdlab model subclasses: the member contract and hook points (``docs/models.md``)."""


CachingModule = HookedModule  # the earlier name of the hooks mixin


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

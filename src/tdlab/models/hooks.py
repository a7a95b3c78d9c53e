"""Hook points: every model's activations, named from its module tree, to read and to replace.

In the style of TransformerLens: forward code passes each activation worth probing through a
:class:`HookPoint` (an identity module) and a model that is a :class:`HookedModule` offers

* ``out, cache = model.run_with_cache(x, names_filter=...)``: the output and ``{name: tensor}``
  (detached, leading member axis ``E``);
* ``model.run_with_hooks(x, fwd_hooks=[(name_or_predicate, fn)])``: ``fn(activation, hook)``
  returns the tensor to carry on with, or ``None`` to keep the activation; the hooks are removed
  when the call returns, also when it raises;
* ``with model.hooks(fwd_hooks): ...``: the same hooks for a block of calls (e.g. a cached run of
  an ablated model).

A point's name is its path in ``named_modules()``: ``blocks.0.attn.hook_pattern``. The one-line
interventions (``cache`` from a clean run; ``hook.name`` is the point's name)::

    zero     = lambda a, hook: torch.zeros_like(a)
    mean     = lambda a, hook: a.mean(dim=(1, 2), keepdim=True).expand_as(a)   # over batch and positions
    resample = lambda a, hook: a[:, torch.randperm(a.shape[1])]                # another input's value
    patch    = lambda a, hook: cache[hook.name]                               # activation patching

Many points also have the short name probes have always used (``blocks.0.attn.pattern`` for
``blocks.0.attn.hook_pattern``): a cache answers to it, ``run_with_cache(x, names=[...])`` selects by it,
and :meth:`HookedModule.cache` keys its dict by it.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import contextmanager
from typing import Any

import torch
from torch import nn

__all__ = ["ActivationCache", "HookFn", "HookPoint", "HookedModule", "NamesFilter"]

HookFn = Callable[[torch.Tensor, "HookPoint"], "torch.Tensor | None"]
NamesFilter = str | Sequence[str] | Callable[[str], bool] | None


class HookPoint(nn.Module):
    """An identity on one activation that hooks can read and replace (module docstring).

    ``point(x)`` runs the attached hooks in order, each on what the previous one returned, and
    returns the result (``x`` itself when none is attached or every hook returns ``None``). The
    point skips ``nn.Module.__call__`` (its dispatch costs more than the identity), so a bare point is
    one Python call and one list test. ``bench/bench_hooks.py`` (one thread, a shared 2-core CPU, four
    models at quick-profile sizes): a bare call ~200 ns; the 8-22 calls of a forward pass <= 0.11 % of
    its time; forward time with the points over the same pass with them bypassed (a bare ``return x``)
    0.99-1.09, forward + backward 0.90-1.00 (``--repeats 60``; 0.86-1.20 at 30): 1.00 within the
    machine's noise.

    Attributes:
        name: the point's path in its model's module tree (set by :class:`HookedModule`).
        alias: the short name of :meth:`HookedModule.cache` (``None``: the point has none).
        readers: how many of the attached hooks only read (caches); forward code may take the
            explicit route that materialises the activation for them, as it always has.
    """

    def __init__(self, alias: str | None = None) -> None:
        super().__init__()
        self.name = ""
        self.alias = alias
        self.fns: list[HookFn] = []
        self.readers = 0

    def __call__(self, x: torch.Tensor) -> torch.Tensor:
        if not self.fns:
            return x
        for fn in tuple(self.fns):
            y = fn(x, self)
            if y is not None:
                x = y
        return x

    forward = __call__

    @property
    def active(self) -> bool:
        """Whether a hook is attached (lets forward code build a costly activation only on demand)."""
        return bool(self.fns)

    def add(self, fn: HookFn, reads: bool = False) -> Callable[[], None]:
        """Attach ``fn``; returns the function that detaches it again."""
        self.fns.append(fn)
        self.readers += reads

        def remove() -> None:
            if fn in self.fns:
                self.fns.remove(fn)
                self.readers -= reads

        return remove

    def extra_repr(self) -> str:
        return f"name={self.name!r}"


class ActivationCache(dict[str, torch.Tensor]):
    """``{name: tensor}`` of one forward pass that answers to a point's other spelling too:
    ``cache["blocks.0.attn.pattern"] is cache["blocks.0.attn.hook_pattern"]``. Iterates its own keys only
    (hook-point names, or short names for a cache selected by them)."""

    def __init__(self, data: dict[str, torch.Tensor], aliases: dict[str, str]) -> None:
        super().__init__(data)
        self.aliases = aliases  # the other spelling -> key

    def __missing__(self, key: str) -> torch.Tensor:
        name = self.aliases.get(key)
        if name is None or not dict.__contains__(self, name):
            raise KeyError(key)
        return dict.__getitem__(self, name)

    def __contains__(self, key: object) -> bool:
        return dict.__contains__(self, key) or dict.__contains__(self, self.aliases.get(key, None))  # type: ignore[call-overload]

    def get(self, key: str, default: Any = None) -> Any:
        try:
            return self[key]
        except KeyError:
            return default


def _selector(names: NamesFilter) -> Callable[[str], bool]:
    if names is None:
        return lambda _name: True
    if isinstance(names, str):
        return lambda name: name == names
    if callable(names):
        return names
    wanted = frozenset(names)
    return lambda name: name in wanted


class HookedModule(nn.Module):
    """A model whose activations are :class:`HookPoint` s (module docstring).

    Subclasses place hook points as attributes of themselves or of their submodules; nothing else
    is needed: names come from the module tree, and the contract test (``tests/models/test_hooks.py``)
    finds every subclass. Hook points hold no parameters, so they leave ``state_dict()`` as it is.
    """

    def hook_points(self) -> dict[str, HookPoint]:
        """``{name: point}`` of every hook point, in module order (names set on the points)."""
        out = {}
        for name, mod in self.named_modules():
            if isinstance(mod, HookPoint):
                mod.name = name
                out[name] = mod
        return out

    def _resolve(self, name: str | Callable[[str], bool]) -> list[HookPoint]:
        points = self.hook_points()
        if callable(name):
            return [p for n, p in points.items() if name(n)]
        if name not in points:
            raise KeyError(f"{type(self).__name__} has no hook point {name!r}; it has {', '.join(points)}")
        return [points[name]]

    @contextmanager
    def hooks(
        self, fwd_hooks: Iterable[tuple[str | Callable[[str], bool], HookFn]] = (), reads: bool = False
    ) -> Iterator[HookedModule]:
        """Attach ``fwd_hooks`` (a point's name or a predicate on names, and ``fn(activation, hook)``) for
        the block; every one is detached on the way out, also when the block raises."""
        removers: list[Callable[[], None]] = []
        try:
            for name, fn in fwd_hooks:
                removers.extend(p.add(fn, reads) for p in self._resolve(name))
            yield self
        finally:
            for remove in reversed(removers):
                remove()

    def run_with_hooks(
        self, *args: Any, fwd_hooks: Iterable[tuple[str | Callable[[str], bool], HookFn]] = (), **kwargs: Any
    ) -> Any:
        """The forward pass with ``fwd_hooks`` attached (see :meth:`hooks`), gradients as usual."""
        with self.hooks(fwd_hooks):
            return self(*args, **kwargs)

    @contextmanager
    def _caching(self, select: Callable[[HookPoint], str | None]) -> Iterator[dict[str, torch.Tensor]]:
        """Attach a reader to every point ``select`` gives a key; yields the dict they fill."""
        store: dict[str, torch.Tensor] = {}
        hooks = []
        for point in self.hook_points().values():
            key = select(point)
            if key is not None:

                def save(a: torch.Tensor, hook: HookPoint, key: str = key) -> None:
                    store[key] = a.detach()

                hooks.append((point.name, save))
        with self.hooks(hooks, reads=True):
            yield store

    def run_with_cache(
        self,
        *args: Any,
        names_filter: NamesFilter = None,
        names: Iterable[str] | None = None,
        **kwargs: Any,
    ) -> tuple[Any, ActivationCache]:
        """``(output, cache)`` of one forward pass without gradients.

        Args:
            names_filter: the hook points to keep, by name (one, a list, or a predicate on names);
                ``None``: every point.
            names: or the short names of the points to keep (the probes' spelling); the cache is then
                keyed by short names, as :meth:`cache`.
        Returns:
            the output, and the :class:`ActivationCache` ``{hook-point name: tensor}`` (detached, leading
            member axis ``E``), which also answers to short names (and the other way round).
        """
        points = self.hook_points()
        if names is None:
            keep = _selector(names_filter)
            ctx = self._caching(lambda p: p.name if keep(p.name) else None)
            aliases = {p.alias: n for n, p in points.items() if p.alias is not None}
        else:
            ctx = self.cache(names)
            aliases = {n: p.alias for n, p in points.items() if p.alias is not None}
        with ctx as store, torch.no_grad():
            out = self(*args, **kwargs)
        return out, ActivationCache(store, aliases)

    @contextmanager
    def cache(self, names: Iterable[str] | None = None) -> Iterator[dict[str, torch.Tensor]]:
        """Record activations by their short names during forward passes inside the block.

        Args:
            names: the short names to keep (every point that has one when ``None``).
        Yields:
            the dict that fills with ``short name -> tensor`` (detached, leading member axis ``E``).
        """
        keep = _selector(None if names is None else list(names))
        with self._caching(lambda p: p.alias if p.alias is not None and keep(p.alias) else None) as store:
            yield store

    def caching(self, name: str) -> bool:
        """Whether the point of short name ``name`` has a hook attached."""
        return any(p.active for p in self.hook_points().values() if p.alias == name)

    def record(self, name: str, value: torch.Tensor) -> torch.Tensor:
        """``value`` through the point of short name ``name`` (the call forward code made before hook points,
        kept for code outside tdlab); returns what its hooks leave, ``value`` when no point has that name."""
        for point in self.hook_points().values():
            if point.alias == name:
                return point(value)
        return value

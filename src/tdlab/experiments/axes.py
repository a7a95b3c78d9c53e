"""Atlas axes, as an experiment declares them: the few settings its claims are most sensitive to, with
their ranges per profile.

A seed's experiment declares them under ``atlas:`` in its YAML (:mod:`tdlab.experiments.declared` validates
these classes, pydantic dataclasses, from it); an experiment of another package sets
``atlas_axes = AtlasAxes(axes=(AtlasAxis("task.p", (...)), ...))``. The grid is the
cartesian product of the axes' values for the chosen profile (``quick`` may give a coarser range);
:mod:`tdlab.atlas` turns it into a sweep and maps each claim over it (the first axis is a map's
columns, the second its rows, any further axes facets).

An axis over a list field (``depths=[1, 2, 3]`` of ``markov-icl-depth``, whose run trains every listed
value) sets ``as_list=True``: each point then sets the field to the one-element list ``[value]``, and the
map reads the value back from that list.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import field
from typing import Any

from pydantic import ConfigDict
from pydantic.dataclasses import dataclass

__all__ = ["AtlasAxes", "AtlasAxis", "linspace"]


def linspace(start: float, stop: float, num: int, digits: int = 6) -> tuple[float, ...]:
    """``num`` evenly spaced values from ``start`` to ``stop`` inclusive, rounded to ``digits``
    significant digits (so that values print, hash and compare the same on every machine)."""
    if num < 1:
        raise ValueError(f"linspace: num must be >= 1, got {num}")
    if num == 1:
        return (float(start),)
    step = (stop - start) / (num - 1)
    return tuple(float(f"{start + i * step:.{digits}g}") for i in range(num))


@dataclass(frozen=True, config=ConfigDict(extra="forbid"))
class AtlasAxis:
    """One swept setting.

    Attributes:
        field: dotted config path (``task.p``, ``train.lr``), checked against the experiment's config
            class by :func:`check_fields`.
        values: the range under the ``paper`` profile (and any profile without its own range).
        quick: the range under the ``quick`` profile (a coarser grid that stays within minutes);
            ``None``: ``values``.
        label: short name on the maps (default: the last component of ``field``).
        as_list: the field is a list the run iterates over; each point sets it to ``[value]``.
    """

    field: str
    values: tuple[Any, ...]
    quick: tuple[Any, ...] | None = None
    label: str | None = None
    as_list: bool = False

    def __post_init__(self) -> None:
        if not self.field or any(not part for part in self.field.split(".")):
            raise ValueError(f"atlas axis: field must be a dotted config path, got {self.field!r}")
        for name, vals in (("values", self.values), ("quick", self.quick)):
            if vals is None:
                continue
            if not vals:
                raise ValueError(f"atlas axis {self.field}: {name} is empty")
            if len(set(map(repr, vals))) != len(vals):
                raise ValueError(f"atlas axis {self.field}: {name} repeats a value")

    @property
    def name(self) -> str:
        return self.label or self.field.rsplit(".", 1)[-1]

    def range(self, profile: str) -> tuple[Any, ...]:
        """The values swept under ``profile``."""
        return self.quick if profile == "quick" and self.quick is not None else self.values

    def override(self, value: Any) -> Any:
        """What a point sets ``field`` to for the axis value ``value``."""
        return [value] if self.as_list else value

    def read(self, config: Mapping[str, Any]) -> Any:
        """The axis value of a stored config (the ``config`` mapping of ``config.yaml`` / the index);
        ``None`` when the path is missing or a list field does not hold exactly one value."""
        node: Any = config
        for part in self.field.split("."):
            if not isinstance(node, Mapping) or part not in node:
                return None
            node = node[part]
        if self.as_list:
            return node[0] if isinstance(node, list) and len(node) == 1 else None
        return node


@dataclass(frozen=True, config=ConfigDict(extra="forbid"))
class AtlasAxes:
    """An experiment's atlas declaration: the axes, fixed overrides of every point, and why.

    Attributes:
        axes: the swept settings (first: map columns, second: map rows, the rest: facets).
        set: dotted overrides every point gets, under every profile (e.g. ``cells=[]`` so that the
            list axes decide the grid).
        profile_set: extra overrides per profile (``{"quick": {"archs": ["sec2"]}}``).
        why: which measured findings chose these axes (shown on the experiment's page).
    """

    axes: tuple[AtlasAxis, ...]
    set: Mapping[str, Any] = field(default_factory=dict)
    profile_set: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)
    why: str = ""

    def __post_init__(self) -> None:
        if not self.axes:
            raise ValueError("atlas axes: at least one axis")
        fields = [a.field for a in self.axes]
        if len(set(fields)) != len(fields):
            raise ValueError(f"atlas axes: a field is swept twice: {fields}")
        clash = set(fields) & (set(self.set) | {k for s in self.profile_set.values() for k in s})
        if clash:
            raise ValueError(f"atlas axes: {sorted(clash)} both swept and fixed")

    def overrides(self, profile: str) -> dict[str, Any]:
        """The fixed overrides of every point under ``profile``."""
        return {**self.set, **self.profile_set.get(profile, {})}

    def grid(self, profile: str) -> dict[str, list[Any]]:
        """The sweep grid under ``profile``: dotted field -> the values points set it to."""
        return {a.field: [a.override(v) for v in a.range(profile)] for a in self.axes}

    def size(self, profile: str) -> int:
        return math.prod(len(a.range(profile)) for a in self.axes)

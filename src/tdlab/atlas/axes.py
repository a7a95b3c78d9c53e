"""Atlas sweeps: an experiment's declared axes (:mod:`tdlab.experiments.axes`) as the sweep
``atlas-EXPERIMENT-PROFILE`` (:func:`atlas_spec`), run with :mod:`tdlab.sweep`'s own planning and
running, so points already in the runs folder are skipped and killed ones resumed exactly as ``tdlab
sweep`` does.
"""

from __future__ import annotations

from collections.abc import Sequence

from tdlab.config import ConfigError, field_exists
from tdlab.experiments.axes import AtlasAxes, AtlasAxis, linspace
from tdlab.experiments.base import Experiment, get, registry
from tdlab.sweep import SweepSpec

__all__ = [
    "AtlasAxes",
    "AtlasAxis",
    "atlas_spec",
    "check_fields",
    "experiments_with_axes",
    "field_exists",
    "linspace",
    "sweep_name",
]

SWEEP_PREFIX = "atlas-"


def sweep_name(experiment: str, profile: str) -> str:
    """The name of an experiment's atlas sweep under ``profile`` (its points' run ids start with it)."""
    return f"{SWEEP_PREFIX}{experiment}-{profile}"


def atlas_spec(exp: Experiment, profile: str = "quick") -> SweepSpec:
    """The :class:`~tdlab.sweep.SweepSpec` of ``exp``'s atlas axes under ``profile``.

    Raises:
        ConfigError: ``exp`` declares no axes, or ``profile`` is not one of its profiles.
    """
    decl = exp.atlas_axes
    if decl is None:
        raise ConfigError(
            f"experiment: {exp.name} declares no atlas axes; "
            f"experiments with axes: {', '.join(e.name for e in experiments_with_axes()) or 'none'}"
        )
    if profile not in exp.profiles:
        raise ConfigError(f"profile: unknown profile {profile!r} for {exp.name}; allowed: {', '.join(exp.profiles)}")
    return SweepSpec(
        name=sweep_name(exp.name, profile),
        experiment=exp.name,
        profile=profile,
        set=decl.overrides(profile),
        grid=decl.grid(profile),
    )


def experiments_with_axes(names: Sequence[str] = ()) -> list[Experiment]:
    """The experiments named (every registered one that declares axes when ``names`` is empty).

    Raises:
        ConfigError: an unknown name, or a name of an experiment without atlas axes.
    """
    if not names:
        return [e for _, e in sorted(registry().items()) if e.atlas_axes is not None]
    out = []
    for n in names:
        exp = get(n)  # unknown: ConfigError naming the allowed ones
        if exp.atlas_axes is None:
            with_axes = ", ".join(e.name for _, e in sorted(registry().items()) if e.atlas_axes is not None)
            raise ConfigError(
                f"experiment: {n} declares no atlas axes, so it has no atlas sweep; "
                f"experiments with axes: {with_axes or 'none'}"
            )
        if exp not in out:
            out.append(exp)
    return out


def check_fields(exp: Experiment) -> None:
    """Every axis field and fixed override of ``exp``'s declaration names a field of its config class.

    Raises:
        ConfigError: naming the first path that does not exist.
    """
    decl = exp.atlas_axes
    if decl is None:
        return
    paths = [a.field for a in decl.axes] + list(decl.set) + [k for s in decl.profile_set.values() for k in s]
    for p in paths:
        if not field_exists(exp.Config, p):
            raise ConfigError(f"{exp.name}: atlas axis or override {p!r} is not a field of {exp.Config.__name__}")

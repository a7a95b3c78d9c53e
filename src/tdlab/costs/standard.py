"""The ``standard`` profile: between ``quick`` and ``paper``, sized so that one experiment's first pass fits
about 30 minutes on 2 CPU cores.

Rule (one for every experiment, from a measured quick time):

1. ``t_q``: the quick profile's wall time on the 2-core machine, measured (:func:`tdlab.costs.quick_times.quick_times`:
   a data file a benchmark writes, with where each number comes from). The budget is
   ``B = MARGIN * TARGET_SECONDS`` (24 of the 30 minutes: machines differ, and evaluation does not shrink with
   the schedule).
2. The training length (:func:`tdlab.rounds.length_field`: steps or epochs) grows by
   ``k = min(paper length / quick length, B / t_q)``, so time is modelled as all training: an
   over-estimate, hence a conservative ``k``. The length is rounded down to two significant figures
   (whole epochs), never below quick's, and set to paper's when ``k`` reaches it.
3. Only where the seed's length fits, members grow towards paper's with what is left:
   ``m = min(paper members, floor(quick members * B / (t_q * k)))``.
4. A learning rate that quick raises above the seed's goes back to the seed's where the longer
   schedule covers at least quick's learning-rate time (length x rate), so arms get at least as far
   as in quick (:func:`paper_learning_rates`; e.g. markov-icl-heads: 2300 steps at 3e-3 against quick's
   200 at 1e-2). Elsewhere it stays quick's: the seed's rate would need more steps than the budget.
5. Everything else stays quick's (sequence lengths, grids): they change what is measured, and their
   cost is not linear in anything we measured. ``--decide`` adds members and
   training where a group stays undecided.

Experiments with no single training-length field, or with no measured quick time, run quick's settings
under ``standard``, except those listed in :data:`EXPLICIT` (settings chosen by hand, each with its
reason and measurement).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol

from pydantic import BaseModel

from tdlab.config import Config as BaseConfig
from tdlab.config import build_config, deep_merge, parse_overrides, read_field
from tdlab.costs.quick_times import quick_times
from tdlab.rounds import length_field as training_length_field

if TYPE_CHECKING:
    from tdlab.experiments.axes import AtlasAxes

__all__ = [
    "EXPLICIT",
    "MARGIN",
    "TARGET_SECONDS",
    "Sized",
    "Standard",
    "paper_learning_rates",
    "standard_layer",
    "standard_of",
]

TARGET_SECONDS = 1800.0  # the first pass of `--profile standard` on 2 CPU cores
MARGIN = 0.8

# Hand-chosen standard settings for experiments the rule cannot size: ``"paper"`` (the seed's settings,
# where they fit the budget on 2 CPU cores, measured) or a layer over quick's; each with its reason.
EXPLICIT: dict[str, tuple[dict[str, Any] | str, str]] = {
    # Closed-form gradient flows and landscapes: no training loop, and the paper profile is cheap on the CPU
    # (`tdlab run NAME --profile paper`, 2-core machine shared with one other run, 2026-11-26).
    "topics-landscape": ("paper", "the paper profile: 28 s on 2 CPU cores (measured)"),
    "markov-landscape": ("paper", "the paper profile: 36 s on 2 CPU cores (measured)"),
    "markov-landscape-3d": ("paper", "the paper profile: 40 s on 2 CPU cores (measured)"),
}


class Sized(Protocol):
    """What the rule reads of an experiment (class or instance): its name, config class and atlas axes (which,
    with the decide layer's table, give its length field: :func:`tdlab.rounds.length_field`)."""

    @property
    def name(self) -> str: ...

    @property
    def Config(self) -> type[BaseConfig]: ...  # the experiment's config class (with ``members``), named as a class

    @property
    def atlas_axes(self) -> AtlasAxes | None: ...


@dataclass(frozen=True)
class Standard:
    """What the rule chose for one experiment: the layer over quick's settings, why, the predicted first
    pass in seconds (None where nothing was sized) and the seed's learning rates it took back."""

    layer: dict[str, Any]
    reason: str
    predicted_s: float | None
    paper_lrs: dict[str, float] = field(default_factory=dict)


def _round_down(x: float, integer: bool) -> float:
    """``x`` rounded down to two significant figures (a whole number for epochs)."""
    if x <= 0:
        return x
    scale = 10 ** (math.floor(math.log10(x)) - 1)
    out = math.floor(x / scale) * scale
    return int(out) if integer or float(out).is_integer() else out


def standard_of(exp: Sized, quick: dict[str, Any], paper: dict[str, Any], seconds: float | None = None) -> Standard:
    """The rule of this module for ``exp``; ``quick``/``paper``: its profile layers, ``seconds``: its
    measured quick time (default :func:`~tdlab.costs.quick_times.quick_times`'s)."""
    if exp.name in EXPLICIT:
        layer, why = EXPLICIT[exp.name]
        if isinstance(layer, str):
            assert layer == "paper", f"{exp.name}: an explicit layer is a dict or 'paper', not {layer!r}"
            return Standard(dict(paper), why, None)
        return Standard(deep_merge(quick, layer), why, None)
    measured = quick_times().get(exp.name)
    if seconds is None and measured is not None:
        seconds = measured.seconds
    length_field = training_length_field(exp)
    if length_field is None:
        return Standard(dict(quick), "no single training-length field: quick's settings", None)
    if seconds is None:
        return Standard(dict(quick), "no measured quick time: quick's settings", None)
    q_cfg, p_cfg = build_config(exp.Config, quick), build_config(exp.Config, paper)
    lq, lp = read_field(q_cfg, length_field), read_field(p_cfg, length_field)
    mq, mp = int(read_field(q_cfg, "members")), int(read_field(p_cfg, "members"))
    budget = MARGIN * TARGET_SECONDS
    if lp <= lq:
        k, length = 1.0, lq
    else:
        k = min(lp / lq, max(1.0, budget / seconds))
        length = lp if k >= lp / lq else max(lq, _round_down(lq * k, isinstance(lq, int)))
        k = length / lq
    members = mq
    if length == lp and mp > mq:
        members = max(mq, min(mp, math.floor(mq * budget / (seconds * k))))
    lrs = paper_learning_rates(q_cfg, p_cfg, length / lq)
    sets = [f"{length_field}={length}", f"members={members}", *(f"{f}={v!r}" for f, v in lrs.items())]
    layer = deep_merge(quick, parse_overrides(sets))
    predicted = seconds * k * members / mq
    why = (
        f"quick {seconds:g} s ({measured.note if measured is not None else 'given'}) for {length_field}={lq}, {mq} members; "
        f"{length_field} x{k:.3g} = {length} (paper {lp}), {members} members (paper {mp})"
        + "".join(f", the seed's {f} {v:g}" for f, v in lrs.items())
        + f": ~{predicted:.0f} s predicted"
    )
    return Standard(layer, why, predicted, lrs)


def paper_learning_rates(quick: BaseModel, paper: BaseModel, k: float) -> dict[str, float]:
    """The learning rates (fields named ``lr`` or ``*_lr``) that quick inflates above the seed's and that
    standard can take back: those where ``k`` times quick's length at the seed's rate covers at least
    quick's learning-rate time (``k * lr_paper >= lr_quick``), so the arms get at least as far as in quick."""
    out: dict[str, float] = {}

    def walk(q: Any, p: Any, prefix: str) -> None:
        for name in type(q).model_fields:
            vq, vp = getattr(q, name), getattr(p, name)
            if isinstance(vq, BaseModel) and isinstance(vp, BaseModel):
                walk(vq, vp, f"{prefix}{name}.")
            elif (
                (name == "lr" or name.endswith("_lr"))
                and isinstance(vq, float)
                and isinstance(vp, float)
                and vp < vq <= k * vp
            ):
                out[prefix + name] = vp

    walk(quick, paper, "")
    return out


def standard_layer(exp: Any) -> dict[str, Any]:
    """The ``standard`` profile layer of ``exp`` (what :func:`tdlab.experiments.base.register` installs)."""
    return standard_of(exp, exp.profiles["quick"], exp.profiles["paper"]).layer

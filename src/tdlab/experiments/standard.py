"""The ``standard`` profile: between ``quick`` and ``paper``, sized so that one experiment's first pass fits
about 30 minutes on 2 CPU cores.

Rule (one for every experiment, from a measured quick time):

1. ``t_q``: the quick profile's wall time on the 2-core machine, measured (:data:`QUICK_SECONDS`, with
   where each number comes from). The budget is ``B = MARGIN * TARGET_SECONDS`` (24 of the 30 minutes:
   machines differ, and evaluation does not shrink with the schedule).
2. The training length (``Experiment.training_length_field()``: steps or epochs) grows by
   ``k = min(paper length / quick length, B / t_q)``, so time is modelled as all training: an
   over-estimate, hence a conservative ``k``. The length is rounded down to two significant figures
   (whole epochs), never below quick's, and set to paper's when ``k`` reaches it.
3. Only where the seed's length fits, members grow towards paper's with what is left:
   ``m = min(paper members, floor(quick members * B / (t_q * k)))``.
4. A learning rate that quick raises above the seed's goes back to the seed's where the longer
   schedule covers at least quick's learning-rate time (length x rate), so arms get at least as far
   as in quick (:func:`seed_learning_rates`; e.g. markov-icl-heads: 2300 steps at 3e-3 against quick's
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
from typing import Any, Protocol

from pydantic import BaseModel

from tdlab.config import Config as BaseConfig
from tdlab.config import build_config, deep_merge, parse_overrides, read_field

__all__ = [
    "EXPLICIT",
    "MARGIN",
    "QUICK_SECONDS",
    "TARGET_SECONDS",
    "Sized",
    "Standard",
    "seed_learning_rates",
    "standard_layer",
    "standard_of",
]

TARGET_SECONDS = 1800.0  # the first pass of `--profile standard` on 2 CPU cores
MARGIN = 0.8

# Quick-profile wall times (s) on the 2-core machine, and where each was measured. "idle":
# `python bench/profile_quick.py --experiment NAME` with the load average <= 1.8 (docs/performance.md).
# "shared": the findings runs (runs_final), taken while other jobs shared the two cores; up to 10x an idle
# time, so the standard profile they size is conservative (it can be re-sized from an idle measurement).
QUICK_SECONDS: dict[str, tuple[float, str]] = {
    # seed 000
    "markov-init": (290, "idle"),
    "markov-icommon": (83, "shared"),
    "markov-rank": (59, "shared"),
    "markov-tying": (110, "idle, six members, 2026-11-28"),
    # seed 001: the gamma grid of anchors-bias is trained once and its analyses read it (wall 0 in theirs)
    "anchors-bias": (571, "idle, six members per γ, 2026-11-28"),
    "anchors-attention": (571, "idle, as anchors-bias: the same training"),
    "anchors-embedding": (571, "idle, as anchors-bias: the same training"),
    "anchors-lowrank": (571, "idle, as anchors-bias: the same training"),
    "anchors-labels": (142, "idle"),
    "anchors-mlp": (199, "idle, six members, 2026-11-28"),
    "anchors-text": (219, "shared"),
    # seed 002 (warm reference cache; an empty $TDLAB_CACHE adds minutes once)
    "icl-ablations": (39, "shared"),
    "icl-avdigits": (178, "idle"),
    "icl-landscape": (129, "shared"),
    "icl-unrestricted": (325, "shared"),
    # seed 003
    "markov-icl-construction": (105, "shared"),
    "markov-icl-depth": (527, "idle"),
    "markov-icl-depth-linear": (88, "idle"),
    "markov-icl-heads": (124, "idle"),
    # seed 004
    "topics-attn": (101, "load ~4 (docs/performance.md)"),
    "topics-embed": (146, "shared"),
    "topics-real": (150, "idle"),
    "topics-real-cooc": (942, "shared"),
    "topics-wv": (65, "idle"),
}

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
    """What the rule reads of an experiment (class or instance): its name, config class and length field."""

    @property
    def name(self) -> str: ...

    @property
    def Config(self) -> type[BaseConfig]: ...  # the experiment's config class (with ``members``), named as a class

    def training_length_field(self) -> str | None: ...


@dataclass(frozen=True)
class Standard:
    """What the rule chose for one experiment: the layer over quick's settings, why, the predicted first
    pass in seconds (None where nothing was sized) and the seed's learning rates it took back."""

    layer: dict[str, Any]
    reason: str
    predicted_s: float | None
    seed_lrs: dict[str, float] = field(default_factory=dict)


def _round_down(x: float, integer: bool) -> float:
    """``x`` rounded down to two significant figures (a whole number for epochs)."""
    if x <= 0:
        return x
    scale = 10 ** (math.floor(math.log10(x)) - 1)
    out = math.floor(x / scale) * scale
    return int(out) if integer or float(out).is_integer() else out


def standard_of(exp: Sized, quick: dict[str, Any], paper: dict[str, Any], seconds: float | None = None) -> Standard:
    """The rule of this module for ``exp``; ``quick``/``paper``: its profile layers, ``seconds``: its
    measured quick time (default :data:`QUICK_SECONDS`)."""
    if exp.name in EXPLICIT:
        layer, why = EXPLICIT[exp.name]
        if isinstance(layer, str):
            assert layer == "paper", f"{exp.name}: an explicit layer is a dict or 'paper', not {layer!r}"
            return Standard(dict(paper), why, None)
        return Standard(deep_merge(quick, layer), why, None)
    if seconds is None and exp.name in QUICK_SECONDS:
        seconds = QUICK_SECONDS[exp.name][0]
    length_field = exp.training_length_field()
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
    lrs = seed_learning_rates(q_cfg, p_cfg, length / lq)
    sets = [f"{length_field}={length}", f"members={members}", *(f"{f}={v!r}" for f, v in lrs.items())]
    layer = deep_merge(quick, parse_overrides(sets))
    predicted = seconds * k * members / mq
    why = (
        f"quick {seconds:g} s ({QUICK_SECONDS.get(exp.name, (0, 'given'))[1]}) for {length_field}={lq}, {mq} members; "
        f"{length_field} x{k:.3g} = {length} (paper {lp}), {members} members (paper {mp})"
        + "".join(f", the seed's {f} {v:g}" for f, v in lrs.items())
        + f": ~{predicted:.0f} s predicted"
    )
    return Standard(layer, why, predicted, lrs)


def seed_learning_rates(quick: BaseModel, paper: BaseModel, k: float) -> dict[str, float]:
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

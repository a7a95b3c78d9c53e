"""What ``--decide``'s rounds (:mod:`tdlab.decide`) grow and keep, beside the experiments whose fields it names:
the config field that sets an experiment's training length (and the seed's length, which the judge's budget
rule reads), the field that sets a Monte-Carlo reference's replicate draws, and the state one run keeps
across its rounds (:class:`RoundState`: draws computed once, the measured seconds of a unit of work).

Tables by experiment name; an experiment not listed gets the defaults: its training length is the first
atlas axis over a scalar ``steps``/``epochs`` field, and it has no reference draws.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

from tdlab.config import build_config, read_field

__all__ = [
    "DRAWS_FIELDS",
    "LENGTH_FIELDS",
    "UNTRAINED",
    "RoundState",
    "current_round",
    "draws_field",
    "in_round",
    "length_field",
    "lengths",
]

# The config field that sets how long every arm trains (``--decide`` doubles it for paper groups that wait on
# training), where the atlas's axes do not name it.
LENGTH_FIELDS: dict[str, str] = {
    "markov-rank": "train.steps",
    "markov-icl-depth": "train.steps",
}

# Configs under which nothing trains (a pretrained checkpoint): no length to fall short of, so the budget rule
# does not apply and ``--decide`` never trains longer.
_PRETRAINED: Callable[[Any], bool] = lambda cfg: bool(cfg.model.checkpoint)  # noqa: E731
UNTRAINED: dict[str, Callable[[Any], bool]] = {
    "topics-real": _PRETRAINED,
    "topics-real-cooc": _PRETRAINED,
    "topics-real-two-stage": _PRETRAINED,
}

# The config field that sets how many replicate draws a Monte-Carlo reference of the claims takes (``--decide``
# grows it for paper groups whose interval the reference's error helps widen). The experiment keeps its draws in
# :attr:`RoundState.memo` so a round computes only the new ones, and records their cost as
# ``RoundState.unit_seconds["reference draw"]``.
DRAWS_FIELDS: dict[str, str] = {
    "icl-lsa-vs-lca": "claims.reference_draws",
}


def length_field(exp: Any) -> str | None:
    """The training-length field of ``exp`` (an experiment, class or instance): :data:`LENGTH_FIELDS`, else the
    first atlas axis over a scalar ``steps``/``epochs`` field; ``None``: no single field."""
    if exp.name in LENGTH_FIELDS:
        return LENGTH_FIELDS[exp.name]
    axes = exp.atlas_axes.axes if exp.atlas_axes is not None else ()
    return next((a.field for a in axes if not a.as_list and a.field.rsplit(".", 1)[-1] in ("steps", "epochs")), None)


def lengths(exp: Any, cfg: Any) -> tuple[float, float] | None:
    """``(cfg's training length, the seed's)``: :func:`length_field` under ``cfg`` and under the paper profile
    (the seed's own settings), which the budget rule of :func:`tdlab.claims.judge` reads; ``None`` for an
    experiment with no such field or no paper profile, or a config under which nothing trains (:data:`UNTRAINED`)."""
    name = length_field(exp)
    if name is None or "paper" not in exp.profiles:
        return None
    untrained = UNTRAINED.get(exp.name)
    if untrained is not None and untrained(cfg):
        return None
    # built, not made: make_config's memory check would refuse the seed's setting on a small machine
    return float(read_field(cfg, name)), float(read_field(build_config(exp.Config, exp.profiles["paper"]), name))


def draws_field(exp: Any) -> str | None:
    """The reference-draws field of ``exp`` (:data:`DRAWS_FIELDS`); ``None``: none."""
    return DRAWS_FIELDS.get(exp.name)


@dataclass
class RoundState:
    """What one run keeps across its ``--decide`` rounds: ``memo``, values an experiment computed that depend on
    their key alone (a reference's replicate draw), and ``unit_seconds``, the measured wall seconds of one unit of
    such work by name (``"reference draw"``), which the rounds' cost estimate reads."""

    memo: dict[Any, Any] = field(default_factory=dict)
    unit_seconds: dict[str, float] = field(default_factory=dict)


_active: RoundState | None = None


def current_round() -> RoundState:
    """The state of the innermost :func:`in_round` block; outside one (a plain run), a fresh state nothing keeps."""
    return _active if _active is not None else RoundState()


@contextmanager
def in_round(state: RoundState) -> Iterator[RoundState]:
    """Within the block, :func:`current_round` is ``state`` (on every thread: lanes see it too)."""
    global _active
    previous, _active = _active, state
    try:
        yield state
    finally:
        _active = previous

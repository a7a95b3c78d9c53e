"""``tdlab run NAME --decide``: rounds of more members, and longer training, until the paper claims are settled.

The first pass runs the profile as it is. After each pass the claims are judged at the look
confidence of :class:`~tdlab.claims.sequential.Looks` (the error rate split over a fixed schedule of
looks, so stopping at a decision keeps it). The next round grows what leaves paper groups undecided:

* **members**, for groups whose interval straddles a boundary (and the other causes more members settle,
  :func:`~tdlab.claims.sequential.growable`): the schedule's next member count. An arm trained through
  :meth:`RunContext.fit` keeps its members and trains only the new ones (member ``i`` depends on its seed
  alone); everything else of the experiment is recomputed at the new size;
* **training**, for groups judged at convergence that are still moving, short of their stage or never
  reached (:func:`~tdlab.claims.sequential.waits_on_training`): the experiment's training-length field
  (:func:`~tdlab.rounds.length_field`, ``train.steps``) doubles, capped at the paper profile's value.
  The learning-rate plan is stretched to the new length and every member trains anew: the plans tdlab's
  profiles use are cosines that end at zero, which a resumed run cannot extend (held at its final rate a
  continuation would not move, and a restart would change the plan), so "the same plan, longer" is a
  longer run of that plan. The decided run is then exactly ``tdlab run NAME --set FIELD=N --seeds M``.
  An experiment with a paper claim judged at the seed's budget never trains longer (that claim would read
  another budget): its groups waiting on training are reported, not grown.

The rounds live in the run's staging folder: its ``config.yaml`` holds the current round's config
and a ``decide`` block (the schedule, the budget, the rounds done, the time spent), so
``tdlab run --resume`` of a run interrupted in a round finishes that round and goes on with the
same schedule.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from pydantic import Field

from tdlab.claims.sequential import (
    Draws,
    Extension,
    Looks,
    RoundPlan,
    blocker,
    decided,
    distance,
    precision_needed,
    round_plan,
)
from tdlab.config import apply_overrides, read_field
from tdlab.config_fields import config_fields
from tdlab.experiments.base import Analysis, Experiment, ExperimentConfig
from tdlab.rounds import RoundState, draws_field, in_round, lengths
from tdlab.rounds import length_field as training_length_field
from tdlab.run_context import RunContext
from tdlab.run_view import RunView
from tdlab.runs import Run

__all__ = ["DecidePlan", "draws_extension", "run_rounds", "training_extension"]


class DecidePlan(Looks, frozen=True):
    """A ``--decide`` run's schedule of looks and its wall-time budget."""

    budget_s: float = Field(1800.0, gt=0.0, le=7 * 24 * 3600.0)  # wall time for all rounds, the first pass included


def training_extension(exp: Experiment, cfg: ExperimentConfig) -> Extension | None:
    """How ``exp`` may train longer in a ``--decide`` run (:class:`~tdlab.claims.sequential.Extension`), or
    ``None`` when it has no single training-length field. The cap is the field's value under the paper
    profile: never train longer than the seed did, so a claim judged at the seed's budget is read at most
    there (the budget rule decides a fail only at that length)."""
    both = lengths(exp, cfg)
    if both is None:
        return None
    current, cap = both
    return Extension(str(training_length_field(exp)), current, max(cap, current))


def draws_extension(exp: Experiment, cfg: ExperimentConfig) -> Draws | None:
    """How ``exp``'s Monte-Carlo reference may take more draws in a ``--decide`` run
    (:class:`~tdlab.claims.sequential.Draws`, capped at the field's upper bound), or ``None`` when it names no
    reference-draws field (:func:`~tdlab.rounds.draws_field`)."""
    name = draws_field(exp)
    if name is None:
        return None
    bound = next(f.hi for f in config_fields(type(cfg)) if f.key == name)
    current = int(read_field(cfg, name))
    return Draws(name, current, int(bound) if bound != float("inf") else current * 64)


def _needs(paper: list[Any]) -> str:
    """What the undecided groups would need: how many times their members (and draws) must grow before the
    nearest undecided row, and every one, decides (:func:`~tdlab.claims.sequential.precision_needed`)."""

    def times(k: float) -> str:
        return f"~{k:.3g}×" if k != float("inf") else "∞ (a row on its boundary)"

    parts = []
    for g in paper:
        need = None if decided(g) else precision_needed(g)
        if need is not None:
            parts.append(f"{g.id} {times(need[0])} for its nearest row, {times(need[1])} for every row")
    if not parts:
        return ""
    return (
        "; to decide, the members (and a reference's draws) would have to grow by: "
        + ", ".join(parts)
        + " (an interval narrows as one over the square root of both)"
    )


def run_rounds(
    exp: Experiment,
    cfg: ExperimentConfig,
    ctx: RunContext,
    plan: DecidePlan,
    state: dict[str, Any],
    write_config: Callable[[ExperimentConfig, dict[str, Any]], None],
    say: Callable[[str], None],
) -> tuple[ExperimentConfig, Analysis, dict[str, Any]]:
    """Run the rounds of ``plan`` in ``ctx``'s staging folder; returns the last round's config, its
    analysis (judged at the look confidence) and the record the summary keeps.

    ``state`` is the ``decide`` block of the run's ``config.yaml``: empty for a new run, or the rounds a
    resumed run had finished (``cfg`` is then the interrupted round's config, whose staged arms are kept).
    ``write_config(cfg, block)`` stores the round's config and block before the round trains.
    """
    rounds: list[dict[str, Any]] = list(state.get("rounds", []))
    schedule: list[int] = list(state.get("schedule") or plan.members(cfg.members))
    length_field = training_length_field(exp)
    kept = RoundState()  # draws computed once for all rounds, the measured seconds of one (tdlab.rounds)
    first_length = state.get("first_length") or ({length_field: read_field(cfg, length_field)} if length_field else {})
    spent = float(state.get("spent_s", 0.0))
    resumed_round = bool(state)
    analysis: Analysis | None = None
    plan_next: RoundPlan | None = None
    while True:
        look = len(rounds)  # 0-based index of this round's look
        longer = False
        if plan_next is not None:  # a new round (a resumed one's config is already the round's)
            longer = plan_next.length is not None
            cfg = cfg.model_copy(update={"members": plan_next.members})
            if longer:
                cfg = apply_overrides(cfg, [f"{length_field}={plan_next.length!r}"])
            if plan_next.draws is not None:
                cfg = apply_overrides(cfg, [f"{draws_field(exp)}={plan_next.draws!r}"])
        elif resumed_round and rounds:
            current = read_field(cfg, length_field) if length_field else None
            longer = current != rounds[-1].get("length", current)  # rounds recorded before lengths were: not longer
        block = {
            **plan.model_dump(),
            "confidence": plan.confidence,
            "schedule": schedule,
            "rounds": rounds,
            "spent_s": spent,
            "first_length": first_length,
        }
        if look > 0 and not resumed_round:
            ctx.start_round(reuse=not longer)
        resumed_round = False
        write_config(cfg, block)
        t0 = time.perf_counter()
        with in_round(kept):
            exp.run(cfg, ctx)
        analysis = exp.analyse(cfg, RunView(Run(ctx.writer.path)), confidence=plan.confidence)
        wall = time.perf_counter() - t0
        spent += wall
        ctx.writer.keep = True  # a look is done: an interrupted later round is resumed, never thrown away
        paper = analysis.paper
        before = rounds[-1]["members"] if rounds else 0
        trained = cfg.members if (longer or not rounds) else cfg.members - before  # members trained this round
        extension = training_extension(exp, cfg)
        draws = draws_extension(exp, cfg)
        history = [r["distance"] for r in rounds] + [{g.id: distance(g) for g in paper}]
        plan_next = round_plan(
            plan,
            schedule,
            look + 1,
            paper,
            history,
            plan.budget_s - spent,
            wall / max(trained, 1),
            at=schedule.index(cfg.members) if cfg.members in schedule else len(schedule) - 1,
            extension=extension,
            draws=draws,
            seconds_per_draw=kept.unit_seconds.get("reference draw", 0.0),
        )
        rec = {
            "look": look + 1,
            "members": cfg.members,
            "added": cfg.members - before,
            "trained": trained,
            "length": read_field(cfg, length_field) if length_field else None,
            "draws": draws.current if draws is not None else None,
            "longer": longer,
            "wall_s": round(wall, 3),
            "decided": sum(g.verdict in ("holds", "fails") for g in paper),
            "groups": len(paper),
            "undecided": {g.id: g.cause for g in paper if g.verdict not in ("holds", "fails")},
            "distance": history[-1],
            "growing": list(plan_next.growing),
            "training": list(plan_next.training),
            "sharpening": list(plan_next.sharpening),
            "not_helped": {
                g.id: why
                for g in paper
                if not decided(g)
                and (why := blocker(g))
                and g.id not in plan_next.training
                and g.id not in plan_next.sharpening
            },
        }
        rounds.append(rec)
        waiting = [f"{gid} ({why})" for gid, why in rec["not_helped"].items()]
        say(
            f"look {look + 1}/{plan.looks}: {cfg.members} members per arm"
            + (f", {length_field} = {rec['length']:g}" if length_field else "")
            + f", {wall:.0f} s — "
            f"{rec['decided']}/{len(paper)} paper groups decided"
            + (f"; more members for {', '.join(plan_next.growing)}" if plan_next.members and plan_next.growing else "")
            + (
                f"; {length_field} → {plan_next.length:g} for {', '.join(plan_next.training)}"
                if plan_next.members and plan_next.length is not None
                else ""
            )
            + (
                f"; {draws_field(exp)} → {plan_next.draws} for {', '.join(plan_next.sharpening)}"
                if plan_next.members and plan_next.draws is not None
                else ""
            )
            + (f"; not helped by members, training or draws: {', '.join(waiting)}" if waiting else "")
        )
        if plan_next.members is None:
            need = _needs(paper)
            say(f"decide: stopped — {plan_next.stop}{need}")
            record = {
                **block,
                "rounds": rounds,
                "spent_s": round(spent, 3),
                "stopped": plan_next.stop + need,
                "decided": rec["decided"],
                "groups": len(paper),
            }
            return cfg, analysis, record

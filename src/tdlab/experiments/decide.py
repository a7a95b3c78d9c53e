"""``tdlab run NAME --decide``: rounds of more members until the paper claims are settled.

The first pass runs the profile as it is. After each pass the claims are judged at the look
confidence of :class:`~tdlab.claims.sequential.Looks` (the error rate split over a fixed schedule of
looks, so stopping at a decision keeps it); while some paper group is not resolved for a reason more
members can settle, the next round runs the experiment again with the schedule's next member count.
An arm trained through :meth:`RunContext.fit` keeps its members and trains only the new ones (member
``i`` depends on its seed alone); everything else of the experiment is recomputed at the new size.

The rounds live in the run's staging folder: its ``config.yaml`` holds the current round's config
and a ``decide`` block (the schedule, the budget, the rounds done, the time spent), so
``tdlab run --resume`` of a run interrupted in a round finishes that round and goes on with the
same schedule. Training is never extended: a claim judged at the seed's budget keeps it, and a
group waiting on training (``stage not reached``, ``still moving``) is reported, not grown.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from pydantic import Field

from tdlab.claims.sequential import Looks, RoundPlan, blocker, decided, distance, round_plan
from tdlab.experiments.base import Analysis, Experiment, ExperimentConfig, RunContext
from tdlab.experiments.view import RunView
from tdlab.runs import Run

__all__ = ["DecidePlan", "run_rounds"]


class DecidePlan(Looks, frozen=True):
    """A ``--decide`` run's schedule of looks and its wall-time budget."""

    budget_s: float = Field(1800.0, gt=0.0, le=7 * 24 * 3600.0)  # wall time for all rounds, the first pass included


def run_rounds(exp: Experiment, cfg: ExperimentConfig, ctx: RunContext, plan: DecidePlan, state: dict[str, Any],
               write_config: Callable[[ExperimentConfig, dict[str, Any]], None], say: Callable[[str], None]
               ) -> tuple[ExperimentConfig, Analysis, dict[str, Any]]:
    """Run the rounds of ``plan`` in ``ctx``'s staging folder; returns the last round's config, its
    analysis (judged at the look confidence) and the record the summary keeps.

    ``state`` is the ``decide`` block of the run's ``config.yaml``: empty for a new run, or the rounds a
    resumed run had finished (``cfg`` is then the interrupted round's config, whose staged arms are kept).
    ``write_config(cfg, block)`` stores the round's config and block before the round trains.
    """
    rounds: list[dict[str, Any]] = list(state.get("rounds", []))
    schedule: list[int] = list(state.get("schedule") or plan.members(cfg.members))
    spent = float(state.get("spent_s", 0.0))
    resumed_round = bool(state)
    analysis: Analysis | None = None
    while True:
        look = len(rounds)  # 0-based index of this round's look
        cfg = cfg.model_copy(update={"members": schedule[look]})
        block = {**plan.model_dump(), "confidence": plan.confidence, "schedule": schedule, "rounds": rounds,
                 "spent_s": spent}
        if look > 0 and not resumed_round:
            ctx.start_round()
        resumed_round = False
        write_config(cfg, block)
        t0 = time.perf_counter()
        exp.run(cfg, ctx)
        analysis = exp.analyse(cfg, RunView(Run(ctx.writer.path)), confidence=plan.confidence)
        wall = time.perf_counter() - t0
        spent += wall
        ctx.writer.keep = True  # a look is done: an interrupted later round is resumed, never thrown away
        paper = analysis.paper
        added = schedule[look] - (schedule[look - 1] if look else 0)
        history = [r["distance"] for r in rounds] + [{g.id: distance(g) for g in paper}]
        plan_next: RoundPlan = round_plan(plan, schedule, look + 1, paper, history, plan.budget_s - spent, wall / added)
        rec = {"look": look + 1, "members": schedule[look], "added": added, "wall_s": round(wall, 3),
               "decided": sum(g.verdict in ("holds", "fails") for g in paper), "groups": len(paper),
               "undecided": {g.id: g.cause for g in paper if g.verdict not in ("holds", "fails")},
               "distance": history[-1], "growing": list(plan_next.growing),
               "not_helped": {g.id: why for g in paper if not decided(g) and (why := blocker(g))}}
        rounds.append(rec)
        waiting = [f"{gid} ({why})" for gid, why in rec["not_helped"].items()]
        say(f"look {look + 1}/{len(schedule)}: {schedule[look]} members per arm, {wall:.0f} s — "
            f"{rec['decided']}/{len(paper)} paper groups decided"
            + (f"; more members for {', '.join(plan_next.growing)}" if plan_next.members else "")
            + (f"; not helped by members: {', '.join(waiting)}" if waiting else ""))
        if plan_next.members is None:
            say(f"decide: stopped — {plan_next.stop}")
            record = {**block, "rounds": rounds, "spent_s": round(spent, 3), "stopped": plan_next.stop,
                      "decided": rec["decided"], "groups": len(paper)}
            return cfg, analysis, record

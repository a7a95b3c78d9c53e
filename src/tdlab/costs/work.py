"""Each experiment's work as a function of its config, for the batch's cost prior and its pace of a stopped run.

Three tables, by experiment name, each entry a function of ``(experiment, config)``:

* :data:`FIT_WORK`: the run's separate trainings (arms that do not share one ensemble), each weighed by its
  model's depth where the depths differ; :func:`tdlab.batch.estimates` scales a quick time by the paper's
  over quick's. Not listed: 1 (the arms of both profiles are the same).
* :data:`FIT_ARMS`: the arms the run trains as trainer fits of one length, where they are nearly all of its
  time: what a stopped run has done of them (:func:`tdlab.runs.staged_done`) over the time it ran says how long
  is left at its own pace. Not listed: the cost model's estimate less what ran.
* :data:`WORK`: the run's whole work in a unit of the experiment's own, where the prior cannot read it off the
  training length, activations and fits; the prior is then ``quick seconds x work(paper) / work(quick)``.

Arm names come from the experiments' own helpers, so a renamed arm is renamed here too.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

__all__ = ["FIT_ARMS", "FIT_WORK", "PRE_LN_UNIT", "WORK", "fit_arms", "fit_work", "work"]

Cost = Callable[[Any, Any], float]


def _icommon_arms(exp: Any, cfg: Any) -> list[str]:
    from tdlab.experiments.paper000_local_to_global.icommon import cell_arm

    return [cell_arm(p, q) for p, q in cfg.grid]


def _two_stage_fits(exp: Any, cfg: Any) -> float:
    from tdlab.experiments.paper004_topics.two_stage import arm_keys

    return float(len(arm_keys(cfg)))  # one fit per optimiser and batch size (the batch sizes cannot share an ensemble)


def _grid_fits(exp: Any, cfg: Any) -> float:
    return float(sum(depth * heads for _, _, depth, heads in cfg.grid()))  # one fit per cell, ~ its layers x heads


FIT_WORK: dict[str, Cost] = {
    # one fit per (cell, budget), each as long as its budget (no single length field: counted here), in fits of a
    # fixed 1,000 steps, so that quick's count and the paper's compare (quick's budgets start at 500, the seed's at 2,000)
    "markov-bridge": lambda exp, cfg: len(cfg.grid) * sum(cfg.budgets) / 1000.0,
    "markov-icommon": lambda exp, cfg: float(len(cfg.grid)),  # one fit per (p, q) cell
    "markov-icl-construction": lambda exp, cfg: float(len(cfg.train_ks)),  # one per trained order (closed forms aside)
    "markov-icl-depth": lambda exp, cfg: float(sum(depth for _, depth, _ in cfg.grid())),  # per cell, ~ its layers
    "markov-icl-depth-linear": _grid_fits,
    "markov-icl-heads": _grid_fits,
    "markov-tying": lambda exp, cfg: float(len(cfg.grid) * len(cfg.tying)),  # one fit per (cell, tying)
    "topics-two-stage": _two_stage_fits,
}

FIT_ARMS: dict[str, Callable[[Any, Any], list[str]]] = {
    "markov-init": lambda exp, cfg: [arm.name for arm in exp.arms(cfg)],
    "markov-icommon": _icommon_arms,
    # the landscape before them is minutes of the seed's ~14 h (docs/batch.md)
    "markov-tying": lambda exp, cfg: [exp.train_arm(tied, p, q) for p, q in cfg.grid for tied in cfg.tying],
    # the GD arms, of one length; the reference draws before them are about a fifth of the seed's ~5 h
    # (docs/batch.md), so a stopped run's pace over them overstates what is left by at most that share
    "icl-unrestricted": lambda exp, cfg: [exp.arm(param, sigma) for sigma in cfg.sigmas for param in cfg.params],
}

# icl-landscape: the weight of one pre-LN unit (a raw forward of one prompt token through one layer) over one
# no-LN unit (one prompt's second moments through one layer): the quick profile spends about 45 % of its time in
# the pre-LN panel (py-spy, 2026-11-28) on 1.55e8 units against 55 % on 8.39e9 no-LN units.
PRE_LN_UNIT = 44.0


def _flows_work(exp: Any, cfg: Any) -> float:
    """Full-batch gradient evaluations x the sequences each reads: members x n_train x (steps to the last time + 1).
    No training-length field says this (the flow runs to ``times[-1]``), so the generic prior would see quick's 40
    steps on 2,000 sequences and the paper profile's 100 on 20,000 as one cost."""
    return float(cfg.members * cfg.task.n_train * (cfg.steps(cfg.times[-1]) + 1))


def _labels_work(exp: Any, cfg: Any) -> float:
    """The arms' optimiser steps (epochs x steps per epoch, which grows with the data set: 200 at quick's 20,000
    sequences, 1,980 at the seed's 198,000) times the arithmetic of a step (:func:`tdlab.train.compute.step_flops`):
    the generic rule reads the epochs alone, since the steps per epoch are per arm here (812x quick's steps at the
    seed's settings)."""
    from tdlab.experiments.paper001_reasoning_bias.labels import ARMS
    from tdlab.train.compute import step_flops

    steps = sum(cfg.epochs_of(a) * cfg.steps_per_epoch(a) for a in ARMS)
    return float(steps * (step_flops(cfg) or 0.0))


def _landscape_work(exp: Any, cfg: Any) -> float:
    """Per panel: its depth x the prompts it averages over (no LN: the population sample's statistics; pre-LN: raw
    prompts x context) x the evaluations (GD steps of every start, a backward counted as two forwards on raw
    prompts; map points; the Nelder-Mead polish). The pre-LN panel grows ~300x from quick to paper while the length
    x activations rule saw ~4x (paper: 9 min predicted, ~1 day on a CPU thread)."""
    starts = cfg.members * len(cfg.off_valley)
    total = 0.0
    for panel in cfg.panels:
        if panel.pre_ln:
            evals = 3 * cfg.ln_steps * starts + cfg.ln_grid**2 + cfg.polish_evals
            total += PRE_LN_UNIT * panel.depth * cfg.ln_prompts * cfg.ln_context * evals
        else:
            evals = cfg.train.steps * starts + cfg.grid**2 + cfg.polish_evals
            total += panel.depth * cfg.population_prompts * evals
    return total


WORK: dict[str, Cost] = {
    "anchors-flows": _flows_work,
    "anchors-labels": _labels_work,
    "icl-landscape": _landscape_work,
}


def fit_work(exp: Any, cfg: Any) -> float:
    """:data:`FIT_WORK` of ``exp`` (an experiment) at ``cfg``; 1 where it lists none."""
    f = FIT_WORK.get(exp.name)
    return 1.0 if f is None else f(exp, cfg)


def fit_arms(exp: Any, cfg: Any) -> list[str] | None:
    """:data:`FIT_ARMS` of ``exp`` at ``cfg``; ``None`` where it lists none (not declared)."""
    f = FIT_ARMS.get(exp.name)
    return None if f is None else f(exp, cfg)


def work(exp: Any, cfg: Any) -> float | None:
    """:data:`WORK` of ``exp`` at ``cfg``; ``None`` where it lists none (the generic scaling)."""
    f = WORK.get(exp.name)
    return None if f is None else f(exp, cfg)

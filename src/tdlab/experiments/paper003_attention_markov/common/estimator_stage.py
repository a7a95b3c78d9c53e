"""What the in-context experiments of seed 003 (Part II) share: the in-context estimators their probes
measure on fresh sequences, and the training stage those estimators define.

The in-context estimator of order ``j`` is :func:`tdlab.theory.kgram.kgram_probs`'s add-α form (α = the
source's Dirichlet concentration of :class:`~tdlab.tasks.markov_kth.InContextMarkov`), measured on the *same*
probe sequences as the model; why it stands for the talk's count ratio is the shared reading
``in_context_estimator`` of the seed's ``experiments.yaml``.

A transformer trained on an order-``k`` source first learns order-0 in-context counting, then order-1
matching, ... (the loss sits at the order-``j`` estimator's plateau on the way). A claim about reaching
the order-``k`` estimator, or about the attention that does it, can only fail on a member that has
left the order-``(k − 1)`` plateau; before that, the run's budget, not the architecture, sets the
number. :data:`PAST_LOWER_ORDER` is that stage: the member's probe loss is below the order-``(k−1)``
estimator's by ``share`` of the gap between the order-``(k−1)`` and order-``k`` estimators.

``share = 0.25`` by default (each experiment's ``claims.stage_share``): the rule seed 000's plateau
escape uses for the H(π) plateau (``markov-init``: left when below H(π) − 0.25·(H(π) − rate)). It is
large enough to lie well above the probe's paired sampling noise (0.25 × 0.034–0.064 nats for
k ≤ 4, T ≥ 64, against a few thousandths between model and estimator on the same sequences) and small
enough to leave a failure region open for the reach claims: a member at the stage boundary is still
0.75 × 0.034 ≥ 0.026 nats from the order-``k`` estimator, above their 0.02-nat tolerance, so the stage
never decides a reach claim by itself (:func:`stage_leaves_room` checks it per row).

The reach tolerances are ours; what lets them make a claim fail is a planted calibration
(:func:`planted_reach`): members at the order-``k`` estimator (what the talk's statement says a transformer
computes) hold, members at the order-``(k − 1)`` estimator (the lower-order counting the estimator
improves on) fail, with the gap between the two the source's own at the run's sequence length
(:func:`tdlab.tasks.markov_kth.estimator_gap`, drawn once from a fixed stream).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from tdlab.claims import Measurements, Sample, Stage
from tdlab.claims.calibration import planted_pair
from tdlab.tasks.markov_kth import estimator_gap

PROBE_DATA = "probe-data"  # the random stream of a member's probe sequences (the same in every cell of one k)

PAST_LOWER_ORDER = Stage(
    "past-order-(k-1)-estimator",
    "the member's probe loss is below the order-(k−1) in-context estimator's on the same sequences by "
    "claims.stage_share of the gap to the order-k one: it has left the (k−1)-context counting plateau",
)


def stage_bound(lower: Sequence[float] | np.ndarray, upper: Sequence[float] | np.ndarray, share: float) -> np.ndarray:
    """``lower − share · (lower − upper)``: the loss below which a member has left the order-``(k−1)``
    plateau (``lower``: the order-``(k−1)`` estimator's loss, ``upper``: the order-``k`` one's; ``(E,)``)."""
    lo, up = np.asarray(lower, float), np.asarray(upper, float)
    return lo - share * (lo - up)


def record_stage(
    out: Measurements,
    arm: str,
    loss: Sequence[float] | np.ndarray,
    lower: Sequence[float] | np.ndarray,
    upper: Sequence[float] | np.ndarray,
    share: float,
    k: int,
    stage: Stage = PAST_LOWER_ORDER,
    source: str = "",
) -> None:
    """Record whether ``arm``'s members passed ``stage`` on per-member probe losses.

    ``source`` names another arm whose losses decide the stage of ``arm`` (a control arm trained under
    the same budget); empty: ``arm``'s own.
    """
    who = f"{source}'s " if source else ""
    out.stage(
        arm,
        stage,
        loss,
        stage_bound(lower, upper, share),
        "lt",
        evidence=f"{who}probe loss vs order-{k - 1} estimator − {share:g}·(order-{k - 1} − order-{k}), nats",
    )


def stage_leaves_room(
    lower: Sequence[float] | np.ndarray, upper: Sequence[float] | np.ndarray, share: float, tol: float
) -> bool:
    """Whether a member at the stage boundary is still more than ``tol`` above the order-``k``
    estimator, i.e. whether a reach claim with tolerance ``tol`` can still fail past the stage."""
    gap = float(np.mean(np.asarray(lower, float) - np.asarray(upper, float)))
    return (1 - share) * gap > tol


def planted_reach(
    k: int, lower: int, tokens: int, alpha: float, tol: float, members: int, reach: bool = True
) -> tuple[Sample, Sample]:
    """Planted gaps to the order-``k`` estimator at ``members`` members (spread ± tol/5): at the order-``k``
    estimator (gap 0) and at the order-``lower`` one (gap :func:`tdlab.tasks.markov_kth.estimator_gap`).
    ``reach``: the statement is that the estimator is reached (the first satisfies it); else that it is not
    (the order-``lower`` case satisfies it, the estimator violates it)."""
    at, short = planted_pair(0.0, estimator_gap(k, lower, tokens, alpha), tol / 5, members)
    return (at, short) if reach else (short, at)

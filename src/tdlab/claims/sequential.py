"""Deciding with more members without inflating the error: a fixed schedule of looks.

``tdlab run NAME --decide`` judges a run, adds members to the arms whose paper claims are not
resolved because their interval straddles a boundary, and judges again. Looking at the data after
each addition and stopping at the first decision would, at a fixed 95 % per look, decide wrongly
more often than 5 %. tdlab fixes the schedule up front — at most ``looks`` looks, members growing
by ``growth`` at each (3, 6, 12, 24 for the defaults) — and splits the error rate across them
(Bonferroni): every look judges at confidence ``1 − alpha / looks``. A wrong decision at *any* look
then has probability at most ``alpha`` (union bound), whatever the stopping rule, so the verdict a
run stops with, and every verdict printed on the way, keeps the error rate of one 95 % decision.

The price is a stricter first look (98.75 % for four looks): a ``--decide`` run can leave undecided
a claim that the plain quick run decided at 95 %.

Which undecided groups more members can settle (:func:`growable`) is read from the cause the
judge recorded: an interval that straddles its boundary, one member, a failure not confirmed after
Holm's correction, an exact sign test or a censored interval short of members (:func:`row_blocker`
says when not: a row whose every member never reached, an ``every`` test judging each member on its
own error, an interval whose width the reference's Monte-Carlo error sets, not the members' spread). Training too short
(``stage not reached``, ``still moving``), an arm that did not train, a tolerance finer than the
measurement's resolution, and rows of tdlab's own settings (which never decide a paper claim) are
not helped by more members. Training too short is helped by longer training (:func:`waits_on_training`,
:class:`Extension`) when the claim is judged at convergence, never when it is judged at the seed's budget.
An interval a Monte-Carlo reference helps widen is helped by more draws of that reference
(:func:`waits_on_draws`, :class:`Draws`) where the experiment names the field that sets them
(:data:`tdlab.rounds.DRAWS_FIELDS`).
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from pydantic import BaseModel, Field

from tdlab.claims.stats import region, t_quantile

__all__ = [
    "GROWABLE_CAUSES",
    "TRAINING_CAUSES",
    "Draws",
    "Extension",
    "Looks",
    "RoundPlan",
    "blocker",
    "decided",
    "distance",
    "growable",
    "half_width_ratio",
    "precision_needed",
    "round_plan",
    "row_blocker",
    "waits_on_draws",
    "waits_on_training",
]

# Rounds in a row that decide nothing and bring no undecided group closer before the rounds stop.
STALL_ROUNDS = 2
# Causes of an undecided paper group that more members can settle.
GROWABLE_CAUSES = frozenset({"spread", "one member", "members", "multiplicity", "censored"})
# A doubling is worth a round when it narrows an interval to this fraction of its width or less.
NARROWING = 0.9
# row_blocker's reason for a row whose width the reference's Monte-Carlo error sets (more draws may help).
REFERENCE_BOUND = "the reference's Monte-Carlo error, not the members' spread, sets the interval's width"
# Causes of a not-resolved or not-evaluable row that say its training was too short.
TRAINING_CAUSES = frozenset({"still moving", "stage not reached", "shorter than the seed's length"})


class Looks(BaseModel, frozen=True):
    """The fixed schedule of looks of a ``--decide`` run."""

    looks: int = Field(4, ge=1, le=8)  # looks in all, the first pass included
    alpha: float = Field(0.05, gt=0.0, lt=0.5)  # the error rate of one decision, split over the looks
    growth: float = Field(2.0, ge=1.25, le=4.0)  # members multiply by this at each look
    max_members: int = Field(4096, ge=1, le=4096)  # never more members than this (ExperimentConfig's bound)

    @property
    def confidence(self) -> float:
        """The confidence every look judges at: ``1 − alpha / looks``."""
        return 1.0 - self.alpha / self.looks

    def members(self, first: int) -> list[int]:
        """Members at each look, from ``first`` at the first pass: ``ceil(first · growth^k)``, strictly
        increasing, capped at :attr:`max_members` (the schedule ends early at the cap)."""
        out = [int(first)]
        for k in range(1, self.looks):
            nxt = min(self.max_members, max(out[-1] + 1, math.ceil(first * self.growth**k - 1e-9)))
            if nxt <= out[-1]:
                break
            out.append(nxt)
        return out


def decided(group: Any) -> bool:
    """A group (:class:`~tdlab.claims.judge.GroupResult` or its dict) holds or fails."""
    return _get(group, "verdict") in ("holds", "fails")


def blocker(group: Any) -> str:
    """Why more members cannot settle ``group`` ("" when they may): a decided group, a sanity group,
    or one whose every undecided seed row is blocked (:func:`row_blocker`)."""
    if _get(group, "kind") != "paper":
        return "a sanity check"
    if decided(group):
        return "decided"
    rows = [r for r in _rows(group) if r.get("provenance") == "paper" and r.get("verdict") == "not resolved"]
    if not rows:
        return str(_get(group, "cause"))
    why = [row_blocker(r) for r in rows]
    return "" if "" in why else why[0]


def row_blocker(row: Mapping[str, Any]) -> str:
    """Why more members cannot settle one not-resolved row (its ``to_dict()``), "" when they may.

    They may when its interval straddles the boundary (``spread``), it has one member, it failed alone
    but not after Holm's correction, or a censored interval or an exact sign test is short of members;
    not when every member (of both arms) never reached within the horizon, when the tolerance is
    finer than the measurement's resolution, when each member is judged on its own error (``every``
    tests), or when a reference's Monte-Carlo error sets the width so far that twice the members would
    narrow the interval by less than a tenth (:func:`half_width_ratio`).
    """
    cause, test = row.get("cause"), row.get("test")
    if cause == "resolution" and test != "compare":
        return "the tolerance is finer than the measurement's resolution"
    if not (cause in GROWABLE_CAUSES or (cause == "resolution" and test == "compare")):
        return str(cause)
    if test == "every":
        return "each member is judged on its own error"
    censored = row.get("censored")
    if cause == "censored" and censored and all(censored) and (test != "compare" or row.get("both_censored", True)):
        return "no member reached within the horizon"
    if test != "compare" and row.get("reference_se") and half_width_ratio(row, members=2.0) > NARROWING:
        return REFERENCE_BOUND
    return ""


def half_width_ratio(row: Mapping[str, Any], members: float = 1.0, draws: float = 1.0) -> float:
    """A value row's interval half-width with ``members`` times its members and ``draws`` times its reference's
    draws, over its half-width now: the Student-t quantile at the members' degrees of freedom times the standard
    error, whose members' part shrinks with the members, the reference's with the draws, and the measurement's
    own Monte-Carlo error with neither (:func:`tdlab.claims.stats.mean_interval`). With few members the quantile
    dominates (98.75 % at 3 members: 8.9 standard errors; at 6: 3.8), so more members narrow an interval even
    where the reference's error exceeds theirs. 1 where the row has no spread to scale."""
    n, sd = int(row.get("n") or 0), row.get("std")
    if n < 2 or sd is None or not math.isfinite(sd):
        return 1.0
    confidence = float(row.get("confidence") or 0.95)
    mc, ref = float(row.get("mc_se") or 0.0), float(row.get("reference_se") or 0.0)
    grown = max(n + 1, math.ceil(n * members)) if members > 1 else n
    now = t_quantile(confidence, n - 1) * math.sqrt(sd**2 / n + mc**2 + ref**2)
    then = t_quantile(confidence, grown - 1) * math.sqrt(sd**2 / grown + mc**2 + ref**2 / draws)
    return then / now if now > 0 else 1.0


def growable(group: Any) -> bool:
    """An undecided paper group that more members may settle (:func:`blocker` is empty)."""
    return blocker(group) == ""


def _rows(group: Any) -> list[Mapping[str, Any]]:
    rows = _get(group, "rows") or []
    out = []
    for r in rows:
        if isinstance(r, Mapping):
            out.append(r)
        else:  # a RowResult: its dict, with whether the reference arm was censored throughout too
            d = r.to_dict()
            ref = r.reference
            d["both_censored"] = ref is None or (bool(ref.censored) and all(ref.censored))
            out.append(d)
    return out


def waits_on_training(group: Any) -> bool:
    """An undecided paper group that longer training may settle: one of its undecided seed rows is still
    moving, short of its stage or of the seed's length, or censored in every member (never reached). A
    claim judged at the seed's budget waits on training too: the extension stops at the seed's length
    (:class:`Extension`'s cap), so it is read at most there."""
    if _get(group, "kind") != "paper" or decided(group):
        return False
    rows = [
        r
        for r in _rows(group)
        if r.get("provenance") == "paper" and r.get("verdict") in ("not resolved", "not evaluable")
    ]
    return any(
        r.get("cause") in TRAINING_CAUSES
        or (r.get("cause") == "censored" and row_blocker(r) == "no member reached within the horizon")
        for r in rows
    )


@dataclass(frozen=True)
class Extension:
    """How a ``--decide`` run may train longer: the config ``field`` that sets every arm's training length,
    its ``current`` value and the ``cap`` it never exceeds (the paper profile's value: the seed's own length)."""

    field: str
    current: float
    cap: float
    factor: float = 2.0

    def next(self) -> float | None:
        """The next training length, ``current · factor`` capped at :attr:`cap` and kept an integer where the
        field is one; ``None`` at the cap."""
        if self.current >= self.cap:
            return None
        nxt = min(self.cap, self.current * self.factor)
        return round(nxt) if float(self.current).is_integer() and float(self.cap).is_integer() else nxt

    def why_not(self) -> str:
        return f"{self.field} = {self.current:g} is the paper profile's (the seed's) length already"


def waits_on_draws(group: Any) -> bool:
    """An undecided paper group that more draws of its Monte-Carlo reference may settle: one of its undecided
    seed rows straddles its boundary (a cause more members would settle, or the reference's error binding,
    :func:`row_blocker`) and twice the draws would narrow its interval by a tenth or more
    (:func:`half_width_ratio`, :data:`NARROWING`)."""
    if _get(group, "kind") != "paper" or decided(group):
        return False
    return any(
        r.get("provenance") == "paper"
        and r.get("verdict") == "not resolved"
        and r.get("test") != "compare"
        and r.get("reference_se")
        and row_blocker(r) in ("", REFERENCE_BOUND)
        and half_width_ratio(r, draws=2.0) <= NARROWING
        for r in _rows(group)
    )


def precision_needed(group: Any) -> tuple[float, float] | None:
    """How many times the members (and a Monte-Carlo reference's draws) of ``group``'s undecided seed value
    rows must grow before ``(the nearest of them, every one)`` decides: per row ``(half-width / distance from
    its centre to the nearest boundary)²``, since a width shrinks as one over the square root of both (the
    t quantile's shrinking left out: an upper bound). ``None`` when no such row has an interval (a
    comparison, a censored bound)."""
    need = []
    for r in _rows(group):
        if r.get("provenance") != "paper" or r.get("verdict") != "not resolved" or r.get("test") != "value":
            continue
        iv, expected, tol = r.get("interval"), r.get("expected"), float(r.get("tolerance") or 0.0)
        if not iv or expected is None or not all(math.isfinite(v) for v in iv):
            continue
        if r.get("relation") not in ("close", "le", "ge"):
            continue
        lo, hi = region(str(r.get("relation")), float(expected), tol)
        centre, half = (iv[0] + iv[1]) / 2, (iv[1] - iv[0]) / 2
        gaps = [abs(centre - b) for b in (lo, hi) if math.isfinite(b)]
        if gaps:
            need.append(math.inf if min(gaps) == 0 else (half / min(gaps)) ** 2)
    return (min(need), max(need)) if need else None


@dataclass(frozen=True)
class Draws:
    """How a ``--decide`` run may sharpen a Monte-Carlo reference its claims compare with: the config ``field``
    that sets the reference's replicate draws, its ``current`` value and the ``cap`` it never exceeds (the
    field's upper bound). Draw ``r`` depends on the run's seed and ``r`` alone, so a round with more draws
    keeps the earlier ones and computes only the new."""

    field: str
    current: int
    cap: int
    factor: float = 2.0

    def next(self) -> int | None:
        """The next draw count, ``current · factor`` rounded up and capped; ``None`` at the cap."""
        nxt = min(self.cap, math.ceil(self.current * self.factor))
        return nxt if nxt > self.current else None

    def why_not(self) -> str:
        return f"{self.field} = {self.current} is its largest allowed value"


@dataclass(frozen=True)
class RoundPlan:
    """What the next round does, or why there is none."""

    members: int | None  # members of the next round; None: stop
    stop: str = ""  # why the rounds end ("" while they go on)
    growing: tuple[str, ...] = ()  # the groups it adds members for
    length: float | None = None  # the next round's training length when it trains longer (every member anew)
    training: tuple[str, ...] = ()  # the groups it trains longer for
    draws: int | None = None  # the next round's reference draws when it sharpens a Monte-Carlo reference
    sharpening: tuple[str, ...] = ()  # the groups it draws the reference more often for


def distance(group: Any) -> float:
    """How far an undecided group is from a decision: over its undecided deciding rows (the seed rows
    of a paper group), the largest p-value of the nearer decision, ``min(p_fail, p_hold)``; a look
    decides a row when it falls below ``alpha / looks``. 0 for a decided group, 1 for one none of whose
    rows could be judged (not evaluable)."""
    if decided(group):
        return 0.0
    rows = _get(group, "rows")
    rows = [r for r in rows if _get(group, "kind") == "sanity" or _get(r, "provenance") == "paper"]
    ps = [min(_get(r, "p_fail"), _get(r, "p_hold")) for r in rows if _get(r, "verdict") == "not resolved"]
    return max(ps, default=1.0)


def round_plan(
    looks: Looks,
    schedule: Sequence[int],
    done_looks: int,
    groups: Sequence[Any],
    history: Sequence[Mapping[str, float]],
    seconds_left: float,
    seconds_per_member: float,
    *,
    at: int | None = None,
    extension: Extension | None = None,
    draws: Draws | None = None,
    seconds_per_draw: float = 0.0,
) -> RoundPlan:
    """After look ``done_looks`` (1-based) judged ``groups``: the next round's members (and training length),
    or why the rounds stop.

    Members grow along ``schedule`` (the current count is ``schedule[at]``, default ``done_looks − 1``) for
    groups more members can settle (:func:`growable`); the training length grows by ``extension`` for groups
    waiting on training (:func:`waits_on_training`) when the experiment may train longer. A round that trains
    longer trains every member anew (a cosine plan that ended at its floor cannot be resumed into a longer
    one); one that only adds members trains the new ones. A Monte-Carlo reference's draws grow by ``draws``
    for groups whose width it helps set (:func:`waits_on_draws`), at ``seconds_per_draw`` each new draw.

    Stops when every paper group is decided, when no undecided one can be helped by members, training or draws,
    when the plan's looks are used (every round is a look, whatever it grew), when the last
    :data:`STALL_ROUNDS` rounds decided nothing new and brought no helped group closer (``history``: each
    group's :func:`distance` at every look so far, this one last), or when the next round would not fit in
    ``seconds_left`` (``seconds_per_member``: the measured cost of training one member of the last round).

    One round that decides nothing is no reason to stop: an interval shrinks by about √2 per doubling,
    and a claim a standard deviation inside its tolerance is typically decided at the third or fourth
    look (simulated, 2,000 runs: stopping after one such round decides 77 % of them, after two 96 %).
    """
    at = done_looks - 1 if at is None else at
    paper = [g for g in groups if _get(g, "kind") == "paper"]
    n_decided = sum(decided(g) for g in paper)
    grow = tuple(_get(g, "id") for g in paper if growable(g))
    waiting = tuple(_get(g, "id") for g in paper if waits_on_training(g))
    longer = extension.next() if extension is not None and waiting else None
    train = waiting if longer is not None else ()
    sharp = tuple(_get(g, "id") for g in paper if waits_on_draws(g)) if draws is not None else ()
    more_draws = draws.next() if draws is not None and sharp else None
    sharpen = sharp if more_draws is not None else ()
    if n_decided == len(paper):
        return RoundPlan(None, "every paper group is decided")
    if not grow and not train and not sharpen:
        why = []
        if waiting and extension is not None:
            why.append(f"longer training is not possible: {extension.why_not()}")
        if sharp and draws is not None:
            why.append(f"more draws are not possible: {draws.why_not()}")
        return RoundPlan(
            None,
            "no undecided paper group is one that more members, longer training or more reference draws can settle"
            + (f" ({'; '.join(why)})" if why else ""),
        )
    helped = grow + train + sharpen
    if history:
        stalled = 0  # the rounds at the end that decided nothing and brought no helped group closer
        for later, earlier in itertools.pairwise(reversed(history)):
            newly = [i for i, d in later.items() if d == 0.0 and earlier.get(i, 1.0) > 0.0]
            closer = [i for i in helped if later.get(i, 1.0) < earlier.get(i, 1.0)]
            if newly or closer:
                break
            stalled += 1
        if stalled >= STALL_ROUNDS:
            return RoundPlan(
                None,
                f"the last {stalled} rounds decided nothing new and brought no undecided group closer",
                grow,
                None,
                train,
                None,
                sharpen,
            )
    if done_looks >= looks.looks:
        return RoundPlan(None, f"the schedule's {looks.looks} looks are used", grow, None, train, None, sharpen)
    now = schedule[at]
    members = schedule[at + 1] if grow and at + 1 < len(schedule) else now
    if members == now and longer is None and more_draws is None:
        return RoundPlan(None, f"the schedule's largest member count ({now}) is reached", grow)
    grow = grow if members > now else ()
    scale = longer / extension.current if longer is not None and extension is not None else 1.0
    cost = (members if longer is not None else members - now) * scale * seconds_per_member
    if more_draws is not None and draws is not None:
        cost += (more_draws - draws.current) * seconds_per_draw
    if cost > seconds_left:
        what = ", ".join(
            ([f"+{members - now} members"] if members > now else [])
            + ([f"{extension.field} {extension.current:g} → {longer:g}"] if longer is not None and extension else [])
            + ([f"{draws.field} {draws.current} → {more_draws}"] if more_draws is not None and draws else [])
        )
        return RoundPlan(
            None,
            f"budget: the next round ({what}, ~{cost:.0f} s) does not fit in the {max(seconds_left, 0):.0f} s left",
            grow,
            None,
            train,
            None,
            sharpen,
        )
    return RoundPlan(members, "", grow, longer, train, more_draws, sharpen)


def _get(group: Any, key: str) -> Any:
    if isinstance(group, dict):
        return group.get(key)
    if key == "test" and hasattr(group, "spec"):
        return group.spec.test
    return getattr(group, key)

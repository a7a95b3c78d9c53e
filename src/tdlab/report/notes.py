"""The notes every experiment's report needs, written from its judged groups and its measurements.

:func:`verdict_notes` says, group by group, what held (with the numbers that decided it), what failed and
by how much (how far the measured value lies from the values the claim accepts), what was not evaluable or
not resolved and why (the judge's cause and reason; for a stage not reached, which arm's members missed it
and on what evidence), and which rows are ours (extensions that are reported but never decide a paper
group). Sanity checks that hold are counted in one line; only those that do not are spelled out.

An experiment's own ``notes`` add, after these, only what the verdicts cannot say (a measured fact of its
own, a reading of the seed): the verdicts and their numbers are said here, once, the same way everywhere.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from tdlab.claims import GroupResult, Measurements, RowResult

__all__ = ["MAX_ROWS", "accepted", "miss", "row_numbers", "verdict_notes"]

# Rows named per group before the rest are counted: a 40-cell grid's notes stay a line, not a page.
MAX_ROWS = 3


def accepted(r: RowResult) -> tuple[float, float]:
    """``(lo, hi)``: the values of the row's quantity its claim accepts — the measured value for ``value``
    and ``every`` tests, the difference of the two arms for ``compare`` tests (``lt``: below −margin)."""
    e, tol = r.expected, r.tolerance
    return {
        "close": (e - tol, e + tol),
        "le": (-math.inf, e + tol),
        "ge": (e - tol, math.inf),
        "lt": (-math.inf, 0.0 - e),  # 0.0 - e: a zero margin reads 0, not -0
        "gt": (e, math.inf),
    }[r.relation]


def miss(r: RowResult) -> float:
    """How far the row's estimate (its interval's centre, else the members' mean) lies outside
    :func:`accepted`; 0 inside, NaN when the estimate is not finite."""
    x = r.interval.center if math.isfinite(r.interval.center) else r.mean
    if not math.isfinite(x):
        return math.nan
    lo, hi = accepted(r)
    return max(lo - x, x - hi, 0.0)


def _interval(r: RowResult) -> str:
    iv = r.interval
    return f" [{iv.lo:.4g}, {iv.hi:.4g}]" if math.isfinite(iv.lo) or math.isfinite(iv.hi) else ""


def _region(r: RowResult) -> str:
    lo, hi = accepted(r)
    if math.isinf(lo) and math.isinf(hi):
        return "any value"
    if math.isinf(lo):
        return f"≤ {hi:.4g}" if r.relation == "le" else f"< {hi:.4g}"
    if math.isinf(hi):
        return f"≥ {lo:.4g}" if r.relation == "ge" else f"> {lo:.4g}"
    return f"{lo:.4g}..{hi:.4g}"


def row_numbers(r: RowResult) -> str:
    """The row's estimate with its interval against what the claim accepts, in the row's unit:
    ``measured 0.6931 [0.69, 0.6962] nats, accepted ≤ 0.7`` (a difference for a comparison)."""
    what = "difference" if r.test == "compare" else "measured"
    x = r.interval.center if r.test == "compare" and math.isfinite(r.interval.center) else r.mean
    text = f"{what} {x:.4g}{_interval(r)}{r.unit}, accepted {_region(r)}"
    if r.test == "every" and r.per_member:
        text += f"; {r.per_member.count('holds')}/{r.measured.n} members"
    return text


def _key(g: GroupResult, r: RowResult) -> str:
    """The row's key within its group ("" for a group's one unnamed row)."""
    if r.id == g.id:
        return ""
    return r.id[len(g.id) + 1 :] if r.id.startswith(g.id + "/") else r.id


def _rows(g: GroupResult, rows: Sequence[RowResult], say) -> str:
    shown = "; ".join(f"{_key(g, r)}: {say(r)}" if _key(g, r) else say(r) for r in rows[:MAX_ROWS])
    more = len(rows) - MAX_ROWS
    return shown + (f" (and {more} more rows)" if more > 0 else "")


def _failed(r: RowResult) -> str:
    d = miss(r)
    by = f", outside by {d:.4g}{r.unit}" if math.isfinite(d) and d > 0 else ""
    return row_numbers(r) + by


def _stages(g: GroupResult, measured: Measurements | None) -> str:
    """Which arms' members missed the group's stage, with the stage check's evidence."""
    if g.stage is None or measured is None:
        return ""
    arms = sorted({a for r in g.rows if r.cause == "stage not reached" for a in r.arms})
    missed = []
    for arm in arms:
        check = measured.stages.get(arm, {}).get(g.stage.id)
        if check is None:
            continue
        passed = check.passed
        if all(passed):
            continue
        evidence = f" ({check.evidence})" if check.evidence else ""
        missed.append(f"{arm}: {sum(passed)}/{len(passed)} members passed{evidence}")
    return f"; stage {g.stage.id!r}: " + "; ".join(missed) if missed else ""


def _group(g: GroupResult, measured: Measurements | None) -> str:
    deciding = g.deciding
    head = f"{g.statement} ({g.id})"
    if g.verdict == "holds":
        held = [r for r in deciding if r.verdict == "holds"]
        return f"Holds — {head}: " + _rows(g, held, row_numbers) + "."
    if g.verdict == "fails":
        failed = [r for r in deciding if r.verdict == "fails"]
        tally = f"{len(failed)}/{len(deciding)} rows fail — " if len(deciding) > 1 else ""
        return f"Fails — {head}: {tally}" + _rows(g, failed, _failed) + "."
    open_rows = [r for r in deciding if r.verdict == g.verdict]
    why = f"{g.cause}" + (f": {g.reason}" if g.reason else "")
    if g.verdict == "not resolved":
        detail = (
            _rows(g, open_rows, lambda r: row_numbers(r) + (f" ({r.reason})" if r.reason else "")) if open_rows else ""
        )
    else:
        detail = _rows(g, open_rows, lambda r: r.reason or r.cause) if open_rows and not g.reason else ""
    return f"{g.verdict.capitalize()} — {head}: {why}" + (f" — {detail}" if detail else "") + _stages(g, measured) + "."


def _ours(g: GroupResult) -> str | None:
    ours = [r for r in g.rows if r.provenance != "paper"]
    if g.kind != "paper" or not ours:
        return None
    tally = ", ".join(f"{v} {n}" for v in ("holds", "fails", "not resolved", "not evaluable") if (n := sum(r.verdict == v for r in ours)))  # fmt: skip
    outside = sorted({h for r in ours for h in r.outside})
    why = f", outside the statement's hypotheses ({'; '.join(outside)})" if outside else ""
    return (
        f"Ours — {g.id}: {len(ours)} of its {len(g.rows)} rows are settings of ours{why}, reported but never "
        f"deciding the paper's statement: {tally}."
    )


def verdict_notes(groups: Sequence[GroupResult], measured: Measurements | None = None) -> list[str]:
    """One line per paper group (its verdict, the deciding numbers or the cause), a line per paper group
    with rows of ours, and the sanity checks: one count line when all hold, else a line per one that does
    not. ``measured``: the run's :class:`Measurements` (the stage checks a stage-gated group names)."""
    notes: list[str] = []
    for g in groups:
        if g.kind == "paper":
            notes.append(_group(g, measured))
            ours = _ours(g)
            if ours:
                notes.append(ours)
    sanity = [g for g in groups if g.kind != "paper"]
    held = [g for g in sanity if g.verdict == "holds"]
    if held:
        notes.append(f"Sanity checks: {len(held)}/{len(sanity)} hold ({', '.join(g.id for g in held)}).")
    notes += [_group(g, measured) for g in sanity if g.verdict != "holds"]
    return notes

"""Two records of one experiment side by side: ``tdlab results compare A.json B.json``.

The question a reader asks of a run repeated elsewhere (on a GPU, with another commit, on another
machine): does it say the same? Two answers, both from the records alone:

- **Verdicts**, group by group: the same; a difference in certainty only (one side decided, the other
  not resolved or not evaluable); or a **contradiction** (holds on one side, fails on the other).
- **Numbers**, row by row, where both records ran the same config (the root seed aside): each row's estimate (the mean of a
  value row, the difference of a compare row) with its standard error over the members (and its
  Monte-Carlo error), compared by a Welch interval of A − B widened by both resolutions; the rows whose
  difference excludes 0 after Holm's correction over the compared rows, at the records' confidence,
  **differ**. Members drawn on different kinds of device (or from different seeds) are independent
  draws, so a difference beyond the spread is a finding; the same kind and seed draw the same members,
  and the numbers should then agree to round-off (:attr:`Comparison.identical` counts the rows that do).

Rows with no spread on either side (closed forms, or one value of the draws) are compared with ``rtol``
(relative): they differ only where both drew the same members, and are otherwise counted as equal or
not. A censored row is not compared (its value is a bound), nor is a row with no finite value on a side.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from tdlab.claims.stats import Interval, holm, p_outside
from tdlab.records import Record, RecordError
from tdlab.report.mdtext import md_cell, md_code
from tdlab.results import load_records

__all__ = [
    "Comparison",
    "GroupPair",
    "RowPair",
    "compare_folders",
    "compare_records",
    "folder_markdown",
    "folder_rows",
    "row_estimate",
]

DECIDED = ("holds", "fails")


@dataclass(frozen=True)
class Estimate:
    """A row's estimate, its standard error and degrees of freedom, and its resolution bound."""

    value: float
    se: float
    df: float
    widen: float


@dataclass(frozen=True)
class GroupPair:
    """One claim group's verdict in A and in B (``None``: the group is absent from that record)."""

    id: str
    kind: str
    a: str | None
    b: str | None
    cause_a: str | None
    cause_b: str | None

    @property
    def agreement(self) -> str:
        """``same``, ``contradicts`` (holds against fails), ``certainty`` (one side decided, or neither and
        for different causes) or ``absent`` (in one record only)."""
        if self.a is None or self.b is None:
            return "absent"
        if self.a == self.b:
            return "same"
        if self.a in DECIDED and self.b in DECIDED:
            return "contradicts"
        return "certainty"


@dataclass(frozen=True)
class RowPair:
    """One row's estimate in A and in B, and what their comparison says (``status``: ``compared``,
    ``censored``, ``no value``, ``one member``, ``deterministic``)."""

    id: str
    a: Estimate | None
    b: Estimate | None
    status: str
    p: float = 1.0  # the p-value of "A and B estimate the same value" (1 when not compared)
    differs: bool = False
    identical: bool = False
    equal: bool = True  # a row without spread: A and B agree to ``rtol``


@dataclass(frozen=True)
class Comparison:
    """What :func:`compare_records` found. ``same_config``: both ran the same config but for the root seed
    (a replicate); ``same_stream``: and the same seed on the same kind of device (the same members)."""

    a: Record
    b: Record
    groups: list[GroupPair]
    rows: list[RowPair]
    same_config: bool
    same_stream: bool

    @property
    def contradictions(self) -> list[GroupPair]:
        return [g for g in self.groups if g.agreement == "contradicts"]

    @property
    def differing(self) -> list[RowPair]:
        return [r for r in self.rows if r.differs]

    @property
    def identical(self) -> int:
        return sum(r.identical for r in self.rows)

    def tally(self) -> dict[str, int]:
        """Groups by agreement: ``same``, ``certainty``, ``contradicts``, ``absent``."""
        return {k: sum(g.agreement == k for g in self.groups) for k in ("same", "certainty", "contradicts", "absent")}

    @property
    def agree(self) -> bool:
        """No group holds in one record and fails in the other, and no row's numbers differ."""
        return not self.contradictions and not self.differing


def _finite(values: Any) -> list[float] | None:
    if not isinstance(values, list) or not values:
        return None
    try:
        out = [float(v) for v in values]
    except (TypeError, ValueError):
        return None
    return out if all(math.isfinite(v) for v in out) else None


def _mean_se(values: Sequence[float]) -> tuple[float, float, float]:
    """Mean, standard error and degrees of freedom of ``values`` (se inf for one value)."""
    n = len(values)
    if n < 2:
        return values[0], math.inf, 0.0
    return statistics.fmean(values), statistics.stdev(values) / math.sqrt(n), n - 1.0


def row_estimate(row: dict[str, Any]) -> Estimate | str:
    """A judged row's estimate (a compare row: mean of ``measured − reference``, paired or Welch; otherwise the
    mean of ``measured``), with its member and Monte-Carlo standard error; or why it has none (``censored``,
    ``no value``). One value is deterministic when its interval is finite (a closed form, an exact
    enumeration: only its Monte-Carlo error and resolution), and of unknown spread otherwise."""
    if row.get("censored") and any(row["censored"]):
        return "censored"
    m = _finite(row.get("measured"))
    if m is None:
        return "no value"
    mc = float(row.get("mc_se") or 0.0)
    widen = float(row.get("resolution") or 0.0) / 2
    if row.get("test") == "compare":
        r = _finite(row.get("reference"))
        if r is None:
            return "no value"
        if row.get("paired") and len(r) == len(m):
            value, se, df = _mean_se([x - y for x, y in zip(m, r, strict=True)])
        else:
            (ma, sa, da), (mb, sb, db) = _mean_se(m), _mean_se(r)
            value, se = ma - mb, math.hypot(sa, sb)
            df = _welch_df((sa, da), (sb, db))
    else:
        value, se, df = _mean_se(m)
        iv = row.get("interval") or [math.nan, math.nan]
        if len(m) == 1 and all(isinstance(x, (int, float)) and math.isfinite(x) for x in iv):
            se = 0.0  # one value with a finite interval: the judge read it as deterministic (a closed form)
        if se == 0.0:
            df = math.inf
    if math.isinf(se):
        return Estimate(value, math.inf, 0.0, widen)
    return Estimate(value, math.hypot(se, mc), df if se > 0 else math.inf, widen)


def _welch_df(*parts: tuple[float, float]) -> float:
    """Welch–Satterthwaite degrees of freedom of a sum of independent errors ``(se, df)``."""
    num = sum(se**2 for se, _ in parts) ** 2
    den = sum(se**4 / df for se, df in parts if se > 0 and math.isfinite(df) and df > 0)
    if num == 0.0:
        return math.inf
    return num / den if den > 0 else math.inf


def _pair_rows(a: Record, b: Record, rtol: float, confidence: float, same_stream: bool) -> list[RowPair]:
    rows_a = {r["id"]: r for g in a.claims + a.sanity for r in g["rows"]}
    rows_b = {r["id"]: r for g in b.claims + b.sanity for r in g["rows"]}
    pairs: list[RowPair] = []
    for rid in [r for r in rows_a if r in rows_b]:
        ea, eb = row_estimate(rows_a[rid]), row_estimate(rows_b[rid])
        same = same_stream and rows_a[rid].get("measured") == rows_b[rid].get("measured")
        if isinstance(ea, str) or isinstance(eb, str):
            why = ea if isinstance(ea, str) else eb
            pairs.append(
                RowPair(rid, None if isinstance(ea, str) else ea, None if isinstance(eb, str) else eb, str(why))
            )
            continue
        gap, widen = ea.value - eb.value, ea.widen + eb.widen
        if math.isinf(ea.se) or math.isinf(eb.se):
            pairs.append(RowPair(rid, ea, eb, "one member", identical=same))
        elif ea.se == 0.0 and eb.se == 0.0:
            # without spread a difference is evidence only where both drew the same members: a value of the
            # draws (a sampled start's integration error) may move with the seed and the device
            off = abs(gap) > widen + rtol * max(abs(ea.value), abs(eb.value))
            pairs.append(
                RowPair(
                    rid,
                    ea,
                    eb,
                    "deterministic",
                    p=0.0 if off else 1.0,
                    differs=off and same_stream,
                    identical=same,
                    equal=not off,
                )
            )
        else:
            se = math.hypot(ea.se, eb.se)
            df = _welch_df((ea.se, ea.df), (eb.se, eb.df))
            iv = Interval(gap, math.nan, math.nan, 2, se, df, widen)
            pairs.append(RowPair(rid, ea, eb, "compared", p=p_outside(iv, 0.0, 0.0), identical=same))
    # Holm over the rows compared by their spread, at the records' confidence
    tested = [i for i, r in enumerate(pairs) if r.status == "compared"]
    for i, rejected in zip(tested, holm([pairs[i].p for i in tested], 1 - confidence), strict=True):
        if rejected:
            pairs[i] = replace(pairs[i], differs=True)
    return pairs


def _settings(rec: Record) -> dict[str, Any]:
    """The record's config without its root seed: two records with the same settings are replicates."""
    return {k: v for k, v in rec.config.items() if k != "seed"}


def compare_records(a: Record, b: Record, rtol: float = 1e-6) -> Comparison:
    """Compare two records of the same experiment (:class:`RecordError` otherwise): their groups' verdicts,
    and, when they ran the same config, their rows' numbers (see the module)."""
    if a.experiment != b.experiment:
        raise RecordError(f"the records are of two experiments ({a.experiment}, {b.experiment}); compare one")
    if not (0.0 <= rtol < 1.0):
        raise RecordError(f"rtol: {rtol} is out of range; allowed: 0 <= rtol < 1")
    ga = {g["id"]: g for g in a.claims + a.sanity}
    gb = {g["id"]: g for g in b.claims + b.sanity}
    groups = [
        GroupPair(
            gid,
            (ga.get(gid) or gb[gid])["kind"],
            ga[gid]["verdict"] if gid in ga else None,
            gb[gid]["verdict"] if gid in gb else None,
            ga[gid].get("cause") if gid in ga else None,
            gb[gid].get("cause") if gid in gb else None,
        )
        for gid in list(ga) + [g for g in gb if g not in ga]
    ]
    same_config = _settings(a) == _settings(b)
    same_stream = same_config and a.seed == b.seed and a.device.split(":")[0] == b.device.split(":")[0]
    rows = _pair_rows(a, b, rtol, max(a.confidence, b.confidence), same_stream) if same_config else []
    return Comparison(a, b, groups, rows, same_config, same_stream)


def _device(rec: Record) -> str:
    return rec.gpu or rec.device


def _side(rec: Record) -> str:
    return (
        f"{rec.profile}, seed {rec.seed}, {rec.members} members, {_device(rec)}, {rec.wall_time_s:.0f} s, "
        f"commit {rec.commit or 'unknown'}"
    )


def _label(rec: Record) -> str:
    return f"{rec.profile}, seed {rec.seed}, {_device(rec)}"


def _fmt(e: Estimate | None) -> str:
    if e is None:
        return "—"
    if math.isinf(e.se):
        return f"{e.value:.4g}"
    return f"{e.value:.4g} ± {e.se:.2g}"


def header_lines(c: Comparison) -> list[str]:
    """Who A and B are, and what their configs and member draws allow to be compared."""
    lines = [f"{c.a.experiment}", f"  A: {_side(c.a)}", f"  B: {_side(c.b)}"]
    if not c.same_config:
        lines.append("  different configs: verdicts only (the numbers are at different settings)")
    elif c.a.seed != c.b.seed:
        lines.append("  the same config at two root seeds: independent members (a replicate)")
    elif c.same_stream:
        lines.append("  same config, seed and kind of device: the same members, numbers should agree to round-off")
    else:
        lines.append("  same config, members drawn independently (another kind of device or seed)")
    return lines


def _verdict(v: str | None, cause: str | None) -> str:
    """A verdict with its cause when not decided; ``—`` where the group is absent."""
    if v is None:
        return "—"
    return v if v in DECIDED or not cause else f"{v} ({cause})"


def group_rows(c: Comparison) -> list[tuple[str, str, str, str, str]]:
    """``(group, kind, A, B, agreement)`` per group: a verdict with its cause when not decided."""
    return [(g.id, g.kind, _verdict(g.a, g.cause_a), _verdict(g.b, g.cause_b), g.agreement) for g in c.groups]


def row_rows(c: Comparison) -> list[tuple[str, str, str, str]]:
    """``(row, A, B, p)`` for the rows whose numbers differ."""
    return [(r.id, _fmt(r.a), _fmt(r.b), f"{r.p:.2g}") for r in c.differing]


def summary_line(c: Comparison) -> str:
    """Groups the same / differing in certainty / contradicting, and rows compared / differing."""
    tally = c.tally()
    text = (
        f"{len(c.groups)} groups: {tally['same']} same verdict, {tally['certainty']} differ in certainty only, "
        f"{tally['contradicts']} contradict" + (f", {tally['absent']} in one record only" if tally["absent"] else "")
    )
    if c.same_config:
        by = {s: sum(r.status == s for r in c.rows) for s in ("compared", "deterministic")}
        equal = sum(r.status == "deterministic" and r.equal for r in c.rows)
        skipped = len(c.rows) - by["compared"] - by["deterministic"]
        text += (
            f"; {len(c.rows)} rows: {by['compared']} compared over the members, {by['deterministic']} without spread "
            f"({equal} equal to rtol), {skipped} not comparable (censored, one member or no value); "
            f"{len(c.differing)} differ"
        )
        if c.same_stream:
            text += f"; {c.identical} identical"
    return text


def compare_folders(a: Path, b: Path, rtol: float = 1e-6) -> list[Comparison]:
    """Every experiment with a record in both folders of records (``results/quick`` and a replicate's),
    compared (:func:`compare_records`), in A's order; :class:`RecordError` when they share none."""
    ra, rb = load_records(a), load_records(b)
    shared = [n for n in ra if n in rb]
    if not shared:
        raise RecordError(f"{a} and {b} hold no record of the same experiment")
    return [compare_records(ra[n], rb[n], rtol) for n in shared]


def folder_rows(cs: Sequence[Comparison]) -> list[tuple[str, ...]]:
    """``(experiment, seeds, devices, groups the same, differing in certainty, opposite, rows compared, rows
    that differ)`` per comparison: the table of two folders of records."""
    out: list[tuple[str, ...]] = []
    for c in cs:
        tally = c.tally()
        compared = sum(r.status in ("compared", "deterministic") for r in c.rows)
        out.append(
            (
                c.a.experiment,
                f"{c.a.seed} / {c.b.seed}",
                f"{_device(c.a)} / {_device(c.b)}",
                str(tally["same"]),
                str(tally["certainty"]),
                str(tally["contradicts"]),
                str(compared) if c.same_config else "— (configs differ)",
                str(len(c.differing)) if c.same_config else "—",
            )
        )
    return out


def folder_markdown(cs: Sequence[Comparison]) -> str:
    """The table of two folders of records as markdown (paper and sanity groups together), then every group
    that holds in one and fails in the other, every group decided in one and not the other (or undecided in
    both for different causes), and every row whose numbers differ."""
    lines = [
        "| experiment | seeds | devices | groups: same verdict | differ in certainty | opposite | rows compared | "
        "rows that differ |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for row in folder_rows(cs):
        lines.append(f"| `{md_code(row[0])}` | " + " | ".join(md_cell(x) for x in row[1:]) + " |")

    def group_line(c: Comparison, g: GroupPair) -> str:
        return (
            f"- `{md_code(c.a.experiment)}` `{md_code(g.id)}` ({g.kind}): {md_cell(_verdict(g.a, g.cause_a))} in A "
            f"({md_cell(_label(c.a))}), {md_cell(_verdict(g.b, g.cause_b))} in B ({md_cell(_label(c.b))})"
        )

    opposite = [group_line(c, g) for c in cs for g in c.contradictions]
    certainty = [group_line(c, g) for c in cs for g in c.groups if g.agreement == "certainty"]
    differ = [
        f"- `{md_code(c.a.experiment)}` row `{md_code(r.id)}`: {md_cell(_fmt(r.a))} against {md_cell(_fmt(r.b))} "
        f"(p = {r.p:.2g}, Holm over the experiment's rows)"
        for c in cs
        for r in c.differing
    ]
    notes = []
    for title, part in (
        ("Opposite verdicts", opposite),
        ("Differing in certainty only", certainty),
        ("Rows whose numbers differ", differ),
    ):
        if part:
            notes += ["", f"{title}:", "", *part]
    tally = {k: sum(c.tally()[k] for c in cs) for k in ("same", "certainty", "contradicts")}
    total = sum(len(c.groups) for c in cs)
    lines += [
        "",
        f"{len(cs)} experiments, {total} groups: {tally['same']} with the same verdict, {tally['certainty']} "
        f"differing in certainty only, {tally['contradicts']} opposite; "
        f"{sum(len(c.differing) for c in cs)} rows whose numbers differ.",
    ]
    ps = [r.p for c in cs for r in c.rows if r.status == "compared"]
    if ps:
        # calibration: with the members' spread covering every draw the root seed makes (shared data, a
        # shared chain), the p-values are uniform and about 5 % fall below 0.05
        low = sum(p < 0.05 for p in ps)
        lines += [
            "",
            f"Before Holm, {low} of the {len(ps)} rows compared over the members have "
            f"p < 0.05 ({100 * low / len(ps):.1f} %; about 5 % if the members' spread "
            "covers what the root seed draws for all of them).",
        ]
    return "\n".join(lines + notes) + "\n"

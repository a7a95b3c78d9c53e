"""Tables from published records (:mod:`tdlab.records`): the verdicts at the seeds' own settings (the
``paper`` profile) beside the ``quick`` profile's, by seed, by experiment and by claim group.

``tdlab findings --results results`` prints them (``--into docs/findings.md --section paper-scale`` writes the
by-seed and by-experiment tables into the findings page, ``--per-paper --into README.md --section seeds``
the README's table per seed); ``tdlab docs build`` puts the group table of each seed
on its page. Every number comes from a committed record, never from a run folder on this machine.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from tdlab.claims import VERDICTS
from tdlab.explain import explain_declared, explain_markdown, explain_record, readings_markdown
from tdlab.records import Record
from tdlab.report.mdtext import md_cell, md_code
from tdlab.results import load_records

__all__ = [
    "Published",
    "experiment_table",
    "group_table",
    "load_published",
    "overview_table",
    "paper_table",
    "paper_tables",
    "record_changes",
    "records_markdown",
    "settings_off",
    "undecided_lines",
    "what_settles",
]

_SHORT = {"holds": "holds", "fails": "fails", "not resolved": "not resolved", "not evaluable": "not evaluable"}


class Published:
    """The records of two profiles: ``paper`` (the seeds' settings) and ``quick``, by experiment."""

    def __init__(self, paper: Mapping[str, Record], quick: Mapping[str, Record]) -> None:
        self.paper, self.quick = dict(paper), dict(quick)


def load_published(results: Path) -> Published:
    """``results/paper`` and ``results/quick`` (each may be absent)."""
    return Published(load_records(Path(results) / "paper"), load_records(Path(results) / "quick"))


def _paper_number(exp: Any) -> str:
    return str(exp.paper)[:3]


def _by_paper(experiments: Sequence[Any]) -> dict[str, list[Any]]:
    """The experiments by paper number (``"000"`` ...), in their order."""
    by_paper: dict[str, list[Any]] = {}
    for e in experiments:
        by_paper.setdefault(_paper_number(e), []).append(e)
    return by_paper


def _tally(groups: Sequence[Mapping[str, Any]]) -> dict[str, int]:
    return {v: sum(g["verdict"] == v for g in groups) for v in VERDICTS}


def _cells(t: Mapping[str, int], total: int) -> str:
    return " | ".join(str(t[v]) for v in VERDICTS) + f" | {total}"


def paper_table(pub: Published, experiments: Sequence[Any]) -> str:
    """One row per seed: experiments with a paper record, their paper groups held / failed / not resolved /
    not evaluable at the seed's settings, and quick's over the same experiments; a total row."""
    lines = [
        "| seed | experiments at the paper profile | holds | fails | not resolved | not evaluable | paper groups "
        "| quick over the same: holds | fails | not resolved | not evaluable | paper groups |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    by_paper = _by_paper(experiments)
    all_p: list[Mapping[str, Any]] = []
    all_q: list[Mapping[str, Any]] = []
    n_all = n_rec = 0
    for number in sorted(by_paper):
        exps = by_paper[number]
        recs = [pub.paper[e.name] for e in exps if e.name in pub.paper]
        gp = [g for r in recs for g in r.claims]
        gq = [g for r in recs if r.experiment in pub.quick for g in pub.quick[r.experiment].claims]
        all_p += gp
        all_q += gq
        n_all, n_rec = n_all + len(exps), n_rec + len(recs)
        lines.append(
            f"| {number} | {len(recs)} of {len(exps)} | {_cells(_tally(gp), len(gp))} | "
            f"{_cells(_tally(gq), len(gq)) if gq else '— | — | — | — | —'} |"
        )
    lines.append(
        f"| all | {n_rec} of {n_all} | {_cells(_tally(all_p), len(all_p))} | "
        f"{_cells(_tally(all_q), len(all_q)) if all_q else '— | — | — | — | —'} |"
    )
    return "\n".join(lines) + "\n"


def records_markdown(folder: Path, experiments: Sequence[Any]) -> str:
    """The findings table and one line per claim group of every record in ``folder`` (``results/quick``), in
    the order of ``experiments`` (:func:`tdlab.report.findings.summaries_markdown`): what each experiment's
    committed record found, each labelled with the record and the commit that trained it."""
    from tdlab.report.findings import summaries_markdown

    recs = load_records(Path(folder))
    pairs = [
        (
            f"record `{md_code(f'{folder}/{e.name}.json')}`, trained at `{recs[e.name].trained_by()}`",
            recs[e.name].model_dump(),
        )
        for e in experiments
        if e.name in recs
    ]
    return summaries_markdown(pairs)


def settings_off(rec: Record) -> list[str]:
    """The fields where the record's config departs from the settings its seed states (the experiment's
    manifest): empty for a record at the seed's settings."""
    from tdlab.config import validate_config
    from tdlab.experiments.base import get

    exp = get(rec.experiment)
    return [d["field"] for d in exp.settings_diff(validate_config(exp.Config, rec.config))]


def _counts(rec: Record | None, paper: bool = False) -> str:
    if rec is None:
        return "—"
    t = rec.counts()
    out = f"{t['holds']}/{len(rec.claims)}" + "".join(f", {t[v]} {v}" for v in VERDICTS[1:] if t[v])
    off = settings_off(rec) if paper else []
    return out + (f" (paper profile: {len(off)} setting(s) not the seed's)" if off else "")


def experiment_table(pub: Published, experiments: Sequence[Any]) -> str:
    """One row per experiment with a paper record: its paper groups at the seed's settings and in quick,
    members, device, wall time and the commit that trained it."""
    lines = [
        "| experiment | paper profile: paper groups held | quick | members | device | wall | trained by |",
        "|---|---|---|---|---|---|---|",
    ]
    for e in experiments:
        rec = pub.paper.get(e.name)
        if rec is None:
            continue
        dev = rec.gpu or rec.device
        lines.append(
            f"| `{e.name}` | {_counts(rec, paper=True)} | {_counts(pub.quick.get(e.name))} | {rec.members} | {md_cell(dev)}"
            f"{f', {rec.threads} thread(s)' if rec.threads and rec.device == 'cpu' else ''} | "
            f"{rec.wall_time_s:.0f} s | `{rec.trained_by()}` |"
        )
    return "\n".join(lines) + "\n"


def overview_table(pub: Published, experiments: Sequence[Any]) -> str:
    """One row per seed and a total: each profile's paper groups held / failed / not resolved / not
    evaluable over every record it has (quick over all its records, the seed's settings over its own), and
    how many of the seed's experiments have a record. The README's first results table."""
    lines = [
        "| seed | quick: records | holds | fails | not resolved | not evaluable | paper groups "
        "| paper profile: records | holds | fails | not resolved | not evaluable | paper groups |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    by_paper = _by_paper(experiments)

    def row(label: str, exps: Sequence[Any]) -> str:
        cells = []
        for recs in (pub.quick, pub.paper):
            mine = [recs[e.name] for e in exps if e.name in recs]
            groups = [g for r in mine for g in r.claims]
            cells.append(f"{len(mine)} of {len(exps)} | {_cells(_tally(groups), len(groups))}")
        return f"| {label} | {cells[0]} | {cells[1]} |"

    lines += [row(number, by_paper[number]) for number in sorted(by_paper)]
    lines.append(row("all", list(experiments)))
    return "\n".join(lines) + "\n"


def paper_tables(pub: Published, experiments: Sequence[Any], titles: Mapping[str, str]) -> str:
    """The :func:`overview_table`, then one table per seed, one row per experiment: what it reproduces, its
    paper groups held in the committed quick record and, once published, at the seed's settings ("—": no
    record). The README's results section; the full tables are :func:`paper_table` and
    :func:`experiment_table`. ``titles``: each seed's title by number (the docs site's ``PAPERS``, passed in:
    that module reads this one's tables)."""
    by_paper = _by_paper(experiments)
    out = [
        "**All seeds** (paper claim groups, every committed record of each profile):",
        "",
        overview_table(pub, experiments),
    ]
    for number in sorted(by_paper):
        out += [
            f"**Seed {number}: {md_cell(titles.get(number, str(by_paper[number][0].paper)[3:].strip()))}**",
            "",
            "| experiment | reproduces | quick: paper groups held | paper profile: paper groups held |",
            "|---|---|---|---|",
        ]
        out += [
            f"| `{e.name}` | {md_cell(e.figure)} | {_counts(pub.quick.get(e.name))} | "
            f"{_counts(pub.paper.get(e.name), paper=True)} |"
            for e in by_paper[number]
        ]
        out.append("")
    return "\n".join(out)


def _verdict_cell(g: Mapping[str, Any] | None) -> str:
    if g is None:
        return "—"
    cause = g.get("cause") if g["verdict"] != "holds" else ""
    return f"**{_SHORT[g['verdict']]}**" + (f" ({md_cell(cause)})" if cause else "")


def _deciding(g: Mapping[str, Any] | None) -> str:
    """The numbers of a group's first seed row (``mean [lo, hi] vs expected ± tol``, or why not evaluable)."""
    from tdlab.report.findings import row_summary

    rows = [r for r in (g or {}).get("rows", []) if r.get("provenance", "paper") == "paper"]
    if not rows:
        return "—"
    more = f" (+{len(rows) - 1} rows)" if len(rows) > 1 else ""
    return md_cell(f"{rows[0]['id'].split('/', 1)[-1]}: {row_summary(rows[0])}"[:300]) + more


def group_table(pub: Published, exp: Any) -> str:
    """Every paper group of ``exp``: its verdict at the seed's settings (with the deciding numbers of its
    first seed row) beside quick's, and the command that reproduces the seed's settings."""
    rec, quick = pub.paper.get(exp.name), pub.quick.get(exp.name)
    lines = ["| claim group | paper profile | what decided it (first seed row) | quick |", "|---|---|---|---|"]
    paper_groups = {g["id"]: g for g in rec.claims} if rec else {}
    quick_groups = {g["id"]: g for g in quick.claims} if quick else {}
    for spec in (s for s in exp.claims if s.kind == "paper"):
        g = paper_groups.get(spec.id)
        lines.append(
            f"| `{spec.id}` | {_verdict_cell(g)} | {_deciding(g)} | {_verdict_cell(quick_groups.get(spec.id))} |"
        )
    seed = rec.seed if rec else 0
    how = f"`tdlab run {exp.name} --profile paper --seed {seed}`"
    made = (
        f"Recorded: {rec.members} members, {md_cell(rec.gpu or rec.device)}, {rec.wall_time_s:.0f} s, commit "
        f"`{rec.trained_by()}`."
        if rec
        else "No record at the seed's settings yet."
    )
    off = settings_off(rec) if rec else []
    if off:
        made += f" Not the seed's settings: the paper profile departs from them in {', '.join(f'`{f}`' for f in off)}."
    reads = readings_markdown(exp.name)
    says = [
        *(["", "How it reads the seed, where the seed is ambiguous or silent:", "", *reads] if reads else []),
        "",
        f"What each claim says (`tdlab explain {exp.name}`): the paper's words and place, the kind of statement, its "
        "hypotheses and whether the record met them, where its threshold comes from, and what decided the verdict.",
        "",
        *explain_markdown(explain_record(rec) if rec else explain_declared(exp.name)),
    ]
    return "\n".join(lines) + f"\n\n{made} Reproduce: {how}.\n" + "\n".join(says) + "\n"


def what_settles(name: str, rec: Record, group: Mapping[str, Any], length_field: str | None = None) -> str:
    """What would decide an undecided paper group of the record ``rec`` of ``name``, or that compute at the
    seed's settings cannot: its seed rows' interval straddling a boundary needs members (how many, from
    :func:`~tdlab.claims.sequential.precision_needed`, and the command that runs them); a claim at
    convergence still moving needs training past the seed's length (``length_field`` doubled); an exact sign
    test on too few members to decide, the fewest that can (:func:`~tdlab.claims.stats.min_sign_members`); one whose arms
    did not reach the stage its claim needs within that length, or did not train, is settled only by a longer
    run, which is no longer the seed's setting; one trained shorter than the seed, by its length; a group with
    no row in the seed's setting is not settled by more of this run, and one whose seed rows ran but measured
    nothing (no member of the class the claim reads, e.g. "0 diagonal members") is not settled by it as it
    stands."""
    from tdlab.claims.sequential import TRAINING_CAUSES, precision_needed
    from tdlab.claims.stats import min_sign_members

    cause = str(group.get("cause") or "")
    paper_rows = [r for r in group.get("rows") or () if r.get("provenance") == "paper"]
    if cause == "no paper rows" or (cause == "no rows" and not paper_rows):
        return "not by more of this run: the paper profile has no row at the seed's setting that could decide it"
    if cause == "no rows":
        return (
            "not by more of this run as it stands: the seed's setting ran, but its rows measured nothing (the "
            "reason names what they lacked); more members or a longer run might give them members to read, which "
            "this record cannot tell"
        )
    value = _dotted(rec.config, length_field) if length_field else None
    longer = f" (`--set {md_code(length_field)}={2 * value:g}`)" if isinstance(value, (int, float)) else ""
    if cause == "not trained":
        return (
            "not by more members: the seed's setting ran and its arms did not train (the reason names them); a "
            f"longer run{longer} would show whether they do (our setting, not the seed's)"
        )
    if cause in TRAINING_CAUSES:
        if cause == "stage not reached":
            return (
                "not by more members: its arms did not reach the claim's stage (the reason names it) within the "
                f"seed's length; a longer run{longer} would show whether they reach it later (our setting, not "
                "the seed's)"
            )
        if cause == "shorter than the seed's length":
            return "training to the seed's length: the run stopped short of it"
        return f"training past the seed's length{longer}: the claim is about convergence, and the run is still moving"
    if cause == "members":  # an exact sign test on too few members to decide whatever they show
        confidence = float(next((r.get("confidence") for r in paper_rows if r.get("cause") == "members"), 0.95))
        n = min_sign_members(1 - confidence)
        return (
            f"at least {n} members (`tdlab run {md_code(name)} --profile paper --seeds {n}`): on {rec.members} the "
            f"exact sign test cannot reach p < {1 - confidence:g} whatever the members show"
        )
    need = precision_needed(group)
    if need is None:
        return "more members (a comparison or a bound: no interval to extrapolate)"
    near, every = need
    if every == float("inf"):
        return "no member count: a row's interval is centred on its boundary"
    m = rec.members
    n_near, n_every = (math.ceil(m * k - 1e-9) for k in (near, every))  # 4.0000000001x of 4 members is 16
    every_text = f"{n_every:,}" if n_every <= 10_000 else "over 10,000 (a row within a hair of its boundary)"
    return (
        f"about {n_near} members for its nearest row (`tdlab run {md_code(name)} --profile paper --seeds {n_near}`), "
        f"{every_text} for every row"
    )


def _dotted(config: Mapping[str, Any], dotted: str) -> Any:
    node: Any = config
    for part in dotted.split("."):
        if not isinstance(node, Mapping) or part not in node:
            return None
        node = node[part]
    return node


def undecided_lines(pub: Published, length_fields: Mapping[str, str | None] | None = None) -> list[str]:
    """Every paper group not decided at the seed's settings, with the cause its record gives and what would
    settle it (:func:`what_settles`; ``length_fields``: each experiment's training-length field)."""
    out = []
    for name, rec in pub.paper.items():
        for g in rec.claims:
            if g["verdict"] in ("not resolved", "not evaluable"):
                out.append(
                    f"`{name}` `{md_code(g['id'])}`: {g['verdict']} ({md_cell(g.get('cause') or '')})"
                    + (f" — {md_cell(g['reason'])}" if g.get("reason") else "")
                    + f". Would settle it: {what_settles(name, rec, g, (length_fields or {}).get(name))}"
                )
    return out


def _group_state(g: Mapping[str, Any]) -> str:
    return f"{g['kind']} {g['verdict']} ({g['cause']})"


def record_changes(results: Path, before: Path) -> str:
    """What changed between two results folders (``before``: the records of an earlier commit, e.g. checked out
    with ``git worktree add``): per profile and experiment, every group whose kind, verdict or cause differs,
    with the reason its first undecided or failing row now gives; groups that appeared or went. A markdown
    table, or one line saying nothing moved."""
    lines = [
        "| profile | experiment | group | before | after | why (the reason of a row with the group's verdict now) |",
        "|---|---|---|---|---|---|",
    ]
    for profile in ("paper", "quick"):
        now, was = load_records(Path(results) / profile), load_records(Path(before) / profile)
        for name in sorted(set(now) | set(was)):
            a = {g["id"]: g for g in (was[name].claims + was[name].sanity)} if name in was else {}
            b = {g["id"]: g for g in (now[name].claims + now[name].sanity)} if name in now else {}
            for gid in [*b, *(k for k in a if k not in b)]:
                old, new = a.get(gid), b.get(gid)
                if old is not None and new is not None and _group_state(old) == _group_state(new):
                    continue
                rows = (new or {}).get("rows", [])
                deciding = [r for r in rows if r.get("verdict") == (new or {}).get("verdict") and r.get("reason")]
                why = next((r["reason"] for r in deciding or [r for r in rows if r.get("reason")]), "")
                lines.append(
                    f"| {profile} | `{md_code(name)}` | `{md_code(gid)}` | "
                    f"{md_cell(_group_state(old)) if old else '—'} | {md_cell(_group_state(new)) if new else '—'} | "
                    f"{md_cell(why)} |"
                )
    return (
        "\n".join(lines) + "\n"
        if len(lines) > 2
        else "Nothing moved: every group has the kind, verdict and cause it had.\n"
    )

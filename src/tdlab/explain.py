"""What decided each paper claim of an experiment, as the paper states it (``tdlab explain``).

For every paper claim group: the paper's words and place, the kind of statement (at stated settings, a
limit, an existence), each hypothesis it needs and whether the run met it, the settings where the run
departs from the seed's manifest (:mod:`tdlab.experiments.manifest`), where its threshold comes from, and
the verdict with what decided it. The run is a published record (``results/PROFILE/NAME.json``), re-judged
by the current claims layer on its stored measurements; with no record, the declarations alone are
explained at the profile's config and the verdict is ``None``. Above the groups, how the experiment reads the
seed where the seed is ambiguous or silent (its ``readings``, :class:`~tdlab.experiments.manifest.Reading`).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from tdlab.claims import ClaimSpec, GroupResult
from tdlab.config import ConfigError, build_config, echo, validate_config
from tdlab.experiments.base import get
from tdlab.experiments.manifest import ours_fields

__all__ = [
    "explain",
    "explain_declared",
    "explain_lines",
    "explain_markdown",
    "explain_record",
    "readings_lines",
    "readings_markdown",
]


def _hypotheses(spec: ClaimSpec, cfg: Any, group: GroupResult | None) -> list[dict[str, Any]]:
    out = []
    for h in spec.hypotheses:
        if h.on == "config":
            holds: bool | None = bool(h.met(cfg))
            outside = (len(group.rows) if group else 0) if not holds else 0
        elif group is None or not group.rows:
            holds, outside = None, 0
        else:
            outside = sum(h.text in r.outside for r in group.rows)
            holds = outside == 0
        out.append({"text": h.text, "on": h.on, "holds": holds, "rows_outside": outside})
    return out


def _decided_by(group: GroupResult) -> str:
    if group.reason:
        return f"{group.cause}: {group.reason}"
    deciding = group.deciding
    first = next((r for r in deciding if r.verdict == group.verdict), deciding[0] if deciding else None)
    return f"{group.cause}: {first.describe()}" if first is not None else group.cause


def explain(name: str, group: str | None = None, results: Path = Path("results/paper")) -> list[dict[str, Any]]:
    """One entry per paper claim group of experiment ``name`` (only ``group`` when given), explained on the
    record of ``name`` in the results folder ``results`` (one profile's: ``results/paper``), re-judged; with
    no record there, on the declarations at that profile's config (``paper`` when the folder is not named for
    a profile). Raises :class:`ConfigError` for an unknown experiment or group."""
    from tdlab.results import load_record

    exp = get(name)
    papers = [s.id for s in exp.claims if s.kind == "paper"]
    if group is not None and group not in papers:
        raise ConfigError(f"group: {echo(group)} is not a paper claim group of {name}; allowed: {', '.join(papers)}")
    path = Path(results) / f"{name}.json"
    if path.is_file():
        entries = explain_record(load_record(path), path)
    else:
        folder = Path(results).name
        profile = (
            folder if folder in exp.profiles else ("paper" if "paper" in exp.profiles else next(iter(exp.profiles)))
        )
        entries = explain_declared(name, profile)
    return [e for e in entries if group is None or e["group"] == group]


def explain_declared(name: str, profile: str = "paper") -> list[dict[str, Any]]:
    """:func:`explain`'s entries from the declarations alone, at ``profile``'s config (no verdicts)."""
    exp = get(name)
    cfg = build_config(exp.Config, exp.profiles[profile])  # built, not made: no memory check to explain
    return _entries(exp, cfg, {}, {"record": None, "profile": profile, "commit": None})


def explain_record(rec: Any, path: Path | None = None) -> list[dict[str, Any]]:
    """:func:`explain`'s entries for a published :class:`~tdlab.records.Record` (re-judged on its stored
    measurements); ``path``: where it was read from."""
    from tdlab.results import rejudge

    exp = get(rec.experiment)
    cfg = validate_config(exp.Config, rec.config)
    judged = {g.id: g for g in rejudge(rec)} if rec.measured is not None else {}
    info = {"record": str(path) if path else None, "profile": rec.profile, "commit": rec.commit}
    return _entries(exp, cfg, judged, info)


def _entries(exp: Any, cfg: Any, judged: dict[str, GroupResult], record: dict[str, Any]) -> list[dict[str, Any]]:
    diff = exp.settings_diff(cfg)
    ours = ours_fields(exp.manifest, cfg)
    out = []
    for spec in (s for s in exp.claims if s.kind == "paper"):
        g = judged.get(spec.id)
        t = spec.threshold
        out.append(
            {
                "experiment": exp.name,
                "group": spec.id,
                "statement": spec.statement,
                "quote": spec.quote,
                "where": spec.where,
                "kind": spec.form,
                "limit": spec.limit,
                "grid": spec.grid,
                "all_rows": spec.all_rows,
                "hypotheses": _hypotheses(spec, cfg, g),
                "manifest": bool(exp.manifest),
                "settings_diff": [{k: d[k] for k in ("field", "paper", "run", "where")} for d in diff],
                "paper_differs": {d["field"]: exp.paper_differs.get(d["field"], "") for d in diff},
                "ours_fields": ours,
                "threshold_source": t.source if t else None,
                "threshold": t.describe() if t else "not declared: an uncalibrated threshold of ours",
                "calibrated": spec.calibrated,
                "verdict": g.verdict if g else None,
                "cause": g.cause if g else None,
                "decided_by": _decided_by(g) if g else "no record: nothing judged",
                "rows": g.counts if g else None,
                **record,
            }
        )
    return out


def readings_lines(name: str) -> list[str]:
    """How experiment ``name`` reads its seed (its ``readings``), as text: a block, empty when it declares none."""
    readings = get(name).readings
    if not readings:
        return []
    lines = [f"{name}: how it reads the seed"]
    for r in readings:
        lines.append(f"  {r.where}: {r.paper}")
        lines.append(f"    → {r.chosen}" + (f" (option: {r.option})" if r.option else ""))
    return [*lines, ""]


def readings_markdown(name: str) -> list[str]:
    """:func:`readings_lines` as markdown for the seed pages: one item per reading."""
    from tdlab.report.mdtext import md_cell

    return [
        f"- {md_cell(r.where)}: {md_cell(r.paper)} — {md_cell(r.chosen)}"
        + (f" (option: `{r.option}`)" if r.option else "")
        for r in get(name).readings
    ]


def explain_lines(entries: list[dict[str, Any]]) -> list[str]:
    """:func:`explain`'s entries as text, a block per group."""
    lines: list[str] = []
    for e in entries:
        verdict = (e["verdict"] or "no record").upper()
        lines += [f"{e['experiment']} · {e['group']}: {verdict}", f"  paper ({e['where']}): “{e['quote']}”"]
        lines.append(f"  kind: {e['kind']}" + (f" ({e['limit'] or e['grid']})" if e["limit"] or e["grid"] else ""))
        for h in e["hypotheses"]:
            met = {True: "met", False: "NOT met", None: "not measured"}[h["holds"]]
            extra = f" ({h['rows_outside']} row(s) outside: ours)" if h["rows_outside"] else ""
            lines.append(f"  hypothesis: {h['text']} — {met}{extra}")
        if e["settings_diff"]:
            for d in e["settings_diff"]:
                why = e["paper_differs"].get(d["field"]) or ""
                lines.append(
                    f"  differs from the seed: {d['field']} = {d['run']} (paper: {d['paper']}, {d['where']})"
                    + (f" — {why}" if why else "")
                )
        elif e["manifest"]:
            lines.append("  settings: the seed's (every field of its manifest)")
        else:
            lines.append("  settings: no manifest of the seed's settings declared")
        lines.append(f"  threshold: {e['threshold']}")
        lines.append(f"  decided by: {e['decided_by']}")
        if e["record"]:
            lines.append(f"  record: {e['record']} ({e['profile']}, trained at {(e['commit'] or 'not recorded')[:12]})")
        lines.append("")
    return lines


def explain_markdown(entries: list[dict[str, Any]]) -> list[str]:
    """:func:`explain`'s entries as markdown for the seed pages: one item per group."""
    from tdlab.report.mdtext import md_cell

    lines: list[str] = []
    for e in entries:
        verdict = f"**{e['verdict']}**" if e["verdict"] else "no record"
        kind = e["kind"] + (f" ({md_cell(e['limit'] or e['grid'])})" if e["limit"] or e["grid"] else "")
        lines.append(f"- `{e['group']}` — {verdict}; {md_cell(e['where'])}: “{md_cell(e['quote'])}” Kind: {kind}.")
        for h in e["hypotheses"]:
            met = {True: "met", False: "**not met**", None: "not measured"}[h["holds"]]
            extra = f", {h['rows_outside']} row(s) outside it are ours" if h["rows_outside"] else ""
            lines.append(f"    - hypothesis: {md_cell(h['text'])} — {met}{extra}")
        if e["settings_diff"]:
            off = "; ".join(
                f"`{d['field']}` {md_cell(str(d['run']))} (paper: {md_cell(str(d['paper']))})"
                for d in e["settings_diff"]
            )
            lines.append(f"    - differs from the seed's settings: {off}")
        lines.append(f"    - threshold: {md_cell(e['threshold'])}")
        if e["verdict"]:
            lines.append(f"    - decided by: {md_cell(e['decided_by'])[:400]}")
    return lines

"""What decided each paper claim of an experiment, as the paper states it (``tdlab explain``).

For every paper claim group: the paper's words and place, the kind of statement (at stated settings, a
limit, an existence), each hypothesis it needs and whether the run met it, the settings where the run
departs from the seed's manifest (:mod:`tdlab.experiments.manifest`), where its threshold comes from, and
the verdict with what decided it. The run is a published record (``results/PROFILE/NAME.json``), re-judged
by the current claims layer on its stored measurements; with no record, the declarations alone are
explained at the profile's config and the verdict is ``None``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from tdlab.claims import ClaimSpec, GroupResult
from tdlab.config import ConfigError, build_config, echo, validate_config
from tdlab.experiments.base import get
from tdlab.experiments.manifest import ours_fields

__all__ = ["explain", "explain_lines"]


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
    from tdlab.results import load_record, rejudge

    exp = get(name)
    papers = [s for s in exp.claims if s.kind == "paper"]
    if group is not None and group not in {s.id for s in papers}:
        raise ConfigError(
            f"group: {echo(group)} is not a paper claim group of {name}; allowed: {', '.join(s.id for s in papers)}"
        )
    path = Path(results) / f"{name}.json"
    judged: dict[str, GroupResult] = {}
    record: dict[str, Any] = {"record": None, "profile": None, "commit": None}
    if path.is_file():
        rec = load_record(path)
        cfg = validate_config(exp.Config, rec.config)
        if rec.measured is not None:
            judged = {g.id: g for g in rejudge(rec)}
        record = {"record": str(path), "profile": rec.profile, "commit": rec.commit}
    else:
        profile = Path(results).name if Path(results).name in exp.profiles else "paper"
        cfg = build_config(exp.Config, exp.profiles[profile])  # built, not made: no memory check to explain
        record["profile"] = profile
    diff = exp.settings_diff(cfg)
    ours = ours_fields(exp.manifest, cfg)
    out = []
    for spec in papers:
        if group is not None and spec.id != group:
            continue
        g = judged.get(spec.id)
        t = spec.threshold
        out.append(
            {
                "experiment": name,
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
                "settings_diff": [{k: d[k] for k in ("field", "seed", "run", "where")} for d in diff],
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
                    f"  differs from the seed: {d['field']} = {d['run']} (seed: {d['seed']}, {d['where']})"
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

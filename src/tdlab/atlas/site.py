"""The atlas site: static HTML pages built from the run index alone (``tdlab atlas build``).

Layout of ``OUT/``::

    index.html                      one row per seed paper and experiment (every registered one)
    experiments/NAME.html           each claim's map over the atlas axes, the default run, every run
    runs/RUN_ID/report.html         every indexed run's report (copied, with its figures/)

Claims, verdicts and configs come from the index (``index.sqlite``); run folders are read only to copy
their ``report.html`` and figures (a missing report is generated with :func:`tdlab.report.html.write_report`;
a missing run folder gets a report rendered from the index's summary, without figures). Every link is
relative, so the folder works from ``file://`` and from any static host; no script is needed to read it
(a few lines of inline JS only toggle the per-point tables).

The default setting of an experiment is its newest indexed run whose config equals the experiment's
default config under that run's profile (``tdlab run NAME --profile P`` with nothing set); its map
cells are the points of the atlas sweep ``atlas-NAME-PROFILE`` (:func:`tdlab.atlas.axes.sweep_name`),
placed by the axis values read from each run's stored config.
"""

from __future__ import annotations

import itertools
import json
import shutil
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from jinja2 import Environment, FileSystemLoader, select_autoescape

from tdlab.atlas.axes import AtlasAxes, AtlasAxis, sweep_name
from tdlab.config import ConfigError
from tdlab.index import INDEX_NAME, RunIndex
from tdlab.report.findings import group_line, row_summary
from tdlab.runs import RunDirError, atomic_write

__all__ = ["build_site", "load_index", "MARKS", "TEMPLATES", "ClaimMap", "ExperimentPage"]

TEMPLATES = Path(__file__).resolve().parents[1] / "report" / "templates"  # beside the run report's template
MARKS = {"holds": "✓", "fails": "✗", "not resolved": "?", "not evaluable": "–"}  # as the sweep's phase diagrams
NOT_RUN = "·"
_ENV = Environment(loader=FileSystemLoader(TEMPLATES), autoescape=select_autoescape(default=True),
                   trim_blocks=True, lstrip_blocks=True)


def load_index(runs: Path) -> list[dict[str, Any]]:
    """Every run of ``runs``' index, oldest first.

    Raises:
        ConfigError: ``runs`` holds no ``index.sqlite`` (nothing is created there).
    """
    if not (Path(runs) / INDEX_NAME).is_file():
        raise ConfigError(f"--runs: {runs} holds no run index ({INDEX_NAME}); run experiments there first "
                          f"(tdlab atlas run --runs {runs}), or index existing run folders with "
                          f"`tdlab runs --reindex --out {runs}`")
    return RunIndex(runs).query(order="created")


def _fmt(v: Any) -> str:
    if isinstance(v, float):
        return f"{v:g}"
    if isinstance(v, (list, tuple)):
        return "[" + ", ".join(_fmt(x) for x in v) + "]"
    return "—" if v is None else str(v)


def _key(v: Any) -> tuple:
    """Sort key of axis values of mixed types (numbers before strings, None last)."""
    if isinstance(v, bool) or v is None:
        return (2, str(v))
    if isinstance(v, (int, float)):
        return (0, float(v))
    return (1, json.dumps(v, sort_keys=True, default=str))


@dataclass
class Cell:
    """One point of a map for one claim: the verdict and what decided it."""

    mark: str
    verdict: str  # a verdict, or "not run" / the run's status when it has no verdict for this claim
    title: str
    href: str | None = None


@dataclass
class ClaimMap:
    """One claim group over the atlas grid: facets (axes 3+) of row × column tables of cells."""

    id: str
    statement: str
    facets: list[tuple[str, list[tuple[str, list[Cell]]]]]  # (facet label, [(row label, cells)])
    counts: dict[str, int]
    points: int  # grid points run (with or without a verdict for this claim)

    @property
    def held(self) -> str:
        return f"{self.counts.get('holds', 0)}/{self.points}"


@dataclass
class Sweep:
    """The atlas sweep of one profile: axes, column labels, maps per claim, the points table."""

    profile: str
    name: str
    axes: list[AtlasAxis]
    columns: list[str]
    maps: list[ClaimMap]
    points: list[dict[str, Any]]
    expected: int  # points the declaration has under this profile


@dataclass
class ExperimentPage:
    name: str
    paper: str
    figure: str
    description: str
    decl: AtlasAxes | None
    default: dict[str, Any] | None  # the newest run at the default config (index row)
    default_href: str | None
    sweeps: list[Sweep] = field(default_factory=list)
    runs: list[dict[str, Any]] = field(default_factory=list)  # every indexed run, newest first

    @property
    def href(self) -> str:
        return f"experiments/{self.name}.html"


def _canonical(obj: Any) -> str:
    return json.dumps(obj, sort_keys=True, default=str)


def _default_configs(exp: Any) -> dict[str, str]:
    """``{profile: canonical JSON of the default config}`` (profiles whose config cannot be built here,
    e.g. over this machine's memory, are left out)."""
    out = {}
    for profile in exp.profiles:
        try:
            out[profile] = _canonical(json.loads(json.dumps(exp.make_config(profile).model_dump(mode="json"))))
        except ConfigError:
            continue
    return out


class _Reports:
    """Copies (or generates) each run's report into ``OUT/runs/RUN_ID/`` once."""

    def __init__(self, runs: Path, out: Path, descriptions: dict[str, str]) -> None:
        self.runs, self.out, self.descriptions = Path(runs), Path(out), descriptions
        self.done: dict[str, str] = {}

    def link(self, row: dict[str, Any]) -> str:
        """``runs/RUN_ID/report.html``, relative to the site's root (pages prefix their way up)."""
        rel = self.done.get(row["run_id"])
        if rel is None:
            rel = self._publish(row)
            self.done[row["run_id"]] = rel
        return rel

    def _source(self, row: dict[str, Any]) -> Path | None:
        for cand in (Path(row["path"]) if row.get("path") else None, self.runs / row["run_id"]):
            if cand is not None and (cand / "summary.json").is_file():
                return cand
        return None

    def _publish(self, row: dict[str, Any]) -> str:
        from tdlab.report.html import render_report, write_report
        from tdlab.runs import Run

        dest = self.out / "runs" / row["run_id"]
        dest.mkdir(parents=True, exist_ok=True)
        description = self.descriptions.get(row["experiment"] or "", "")
        src = self._source(row)
        if src is not None:
            try:
                if not (src / "report.html").is_file():  # generated where `tdlab report` would put it
                    run = Run(src)
                    write_report(run, run.summary, description)
                shutil.copyfile(src / "report.html", dest / "report.html")
                if (src / "figures").is_dir():
                    shutil.copytree(src / "figures", dest / "figures", dirs_exist_ok=True)
                return f"runs/{row['run_id']}/report.html"
            except (OSError, RunDirError):
                pass  # a read-only or damaged run folder: render from the index below
        summary = {**row["summary"], "figures": []}  # no figure files to link to
        summary.setdefault("run_id", row["run_id"])
        for k, v in (("experiment", row["experiment"]), ("figure", ""), ("paper", ""), ("profile", row["profile"]),
                     ("status", row["status"]), ("seed", row["seed"]), ("members", row["members"])):
            summary.setdefault(k, v)
        conf = {"experiment": row["experiment"], "profile": row["profile"], "config": row["config"]}
        atomic_write(dest / "report.html", render_report(summary, conf, description))
        return f"runs/{row['run_id']}/report.html"


def _cell_title(axes: Sequence[AtlasAxis], values: Sequence[Any], row: dict[str, Any], group: dict[str, Any] | None) -> str:
    where = ", ".join(f"{a.name} = {_fmt(v)}" for a, v in zip(axes, values))
    if group is None:
        s = row["summary"] or {}
        return f"{where}: run {row['run_id']} ({row['status']}{': ' + s['error'] if s.get('error') else ''}), no verdict for this claim"
    lines = [f"{where}: {group['verdict']}"]
    for r in group.get("rows", []):
        name = r["id"].split("/", 1)[1] if "/" in r["id"] else r["id"]
        lines.append(f"{name}: {row_summary(r)} → {r['verdict']}")
    return "\n".join(lines)


def _sweep(exp: Any, decl: AtlasAxes, profile: str, rows: list[dict[str, Any]], reports: _Reports) -> Sweep | None:
    """The maps of ``exp``'s atlas sweep under ``profile`` from its indexed points (None: no point run)."""
    name = sweep_name(exp.name, profile)
    points: dict[tuple, dict[str, Any]] = {}
    for r in rows:  # oldest first: a later run of the same point replaces an earlier one
        if r["sweep"] == name and r["experiment"] == exp.name:
            values = tuple(a.read(r["config"]) for a in decl.axes)
            points[tuple(_canonical(v) for v in values)] = {"row": r, "values": values}
    if not points:
        return None
    axes = list(decl.axes)
    levels = []  # every axis's values: the declared range, then any value a stored point has beyond it
    for i, a in enumerate(axes):
        vals = list(a.range(profile))
        for p in points.values():
            if _canonical(p["values"][i]) not in {_canonical(v) for v in vals}:
                vals.append(p["values"][i])
        levels.append(vals)
    cols = levels[0]
    rows_ = list(reversed(levels[1])) if len(axes) > 1 else [None]  # largest value on top, as a phase diagram
    facet_axes = axes[2:]
    facets = list(itertools.product(*levels[2:])) if facet_axes else [()]
    claim_ids: dict[str, str] = {}
    statements: dict[str, list[str]] = {}  # a statement may depend on the point (markov-init: Thm. 2 or 8)
    for p in points.values():
        for g in (p["row"]["summary"] or {}).get("claims", []):
            seen = statements.setdefault(g["id"], [])
            if g["statement"] not in seen:
                seen.append(g["statement"])
            claim_ids[g["id"]] = " | ".join(seen)
    for p in points.values():
        p["href"] = reports.link(p["row"])
        p["groups"] = {g["id"]: g for g in (p["row"]["summary"] or {}).get("claims", [])}
    maps = []
    for cid, statement in claim_ids.items():
        counts: dict[str, int] = {}
        built = []
        for fvals in facets:
            label = ", ".join(f"{a.name} = {_fmt(v)}" for a, v in zip(facet_axes, fvals))
            table = []
            for yv in rows_:
                cells = []
                for xv in cols:
                    values = (xv,) + ((yv,) if len(axes) > 1 else ()) + tuple(fvals)
                    p = points.get(tuple(_canonical(v) for v in values))
                    if p is None:
                        where = ", ".join(f"{a.name} = {_fmt(v)}" for a, v in zip(axes, values))
                        cells.append(Cell(NOT_RUN, "not run", f"{where}: not run"))
                        continue
                    g = p["groups"].get(cid)
                    verdict = g["verdict"] if g else (p["row"]["status"] or "no verdict")
                    counts[verdict] = counts.get(verdict, 0) + 1
                    cells.append(Cell(MARKS.get(verdict, NOT_RUN), verdict, _cell_title(axes, values, p["row"], g), p["href"]))
                table.append((_fmt(yv) if yv is not None else "", cells))
            built.append((label, table))
        maps.append(ClaimMap(cid, statement, built, counts, len(points)))
    table = []
    for p in sorted(points.values(), key=lambda p: [_key(v) for v in p["values"]]):
        table.append({"values": [_fmt(v) for v in p["values"]], "run_id": p["row"]["run_id"], "href": p["href"],
                      "status": p["row"]["status"],
                      "claims": [(cid, p["groups"][cid]["verdict"], group_line(p["groups"][cid])) if cid in p["groups"]
                                 else (cid, "—", "") for cid in claim_ids],
                      "notes": (p["row"]["summary"] or {}).get("notes", [])})
    return Sweep(profile, name, axes, [_fmt(c) for c in cols], maps, table, decl.size(profile))


def _pages(rows: list[dict[str, Any]], reports: _Reports, out: Path) -> list[ExperimentPage]:
    from tdlab.experiments.base import registry

    pages = []
    for name, exp in sorted(registry().items(), key=lambda kv: (kv[1].paper, kv[0])):
        mine = [r for r in rows if r["experiment"] == name]
        defaults = _default_configs(exp) if mine else {}
        default = None
        for r in reversed(mine):  # newest first
            if r["profile"] in defaults and r["status"] == "done" and _canonical(r["config"]) == defaults[r["profile"]]:
                default = r
                break
        page = ExperimentPage(name, exp.paper, exp.figure, exp.description, exp.atlas_axes, default,
                              reports.link(default) if default else None)
        if exp.atlas_axes is not None:
            for profile in exp.profiles:
                s = _sweep(exp, exp.atlas_axes, profile, mine, reports)
                if s is not None:
                    page.sweeps.append(s)
        for r in reversed(mine):
            page.runs.append({"row": r, "href": reports.link(r),
                              "overrides": _overrides(r, exp.atlas_axes)})
        pages.append(page)
    return pages


def _overrides(row: dict[str, Any], decl: AtlasAxes | None) -> str:
    """The atlas axis values of a run (for the runs table), or its sweep tag."""
    if decl is None or not (row["sweep"] or "").startswith("atlas-"):
        return row["sweep"] or ""
    return ", ".join(f"{a.name} = {_fmt(a.read(row['config']))}" for a in decl.axes)


def build_site(runs: Path, out: Path) -> Path:
    """Write the atlas site of ``runs``' index into ``out``; returns the front page's path.

    Raises:
        ConfigError: ``runs`` has no index, or ``out`` is not a folder that can be written.
    """
    from tdlab.claims import VERDICTS
    from tdlab.experiments.base import registry

    rows = load_index(runs)
    out = Path(out)
    if out.exists() and not out.is_dir():
        raise ConfigError(f"--out: {out} exists and is not a folder")
    (out / "experiments").mkdir(parents=True, exist_ok=True)
    reports = _Reports(runs, out, {n: e.description for n, e in registry().items()})
    pages = _pages(rows, reports, out)
    common = {"marks": MARKS, "not_run": NOT_RUN, "verdicts": VERDICTS, "runs_dir": str(runs), "n_runs": len(rows)}
    for page in pages:
        atomic_write(out / page.href, _ENV.get_template("atlas_experiment.html.j2").render(p=page, root="../", **common))
    atomic_write(out / "index.html", _ENV.get_template("atlas_index.html.j2").render(pages=pages, root="", **common))
    return out / "index.html"

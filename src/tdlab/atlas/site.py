"""The atlas site: static HTML pages built from the run index alone (``tdlab atlas build``).

Layout of ``OUT/``::

    index.html                      one row per seed paper and experiment (every registered one)
    experiments/NAME.html           each claim's map over the atlas axes, the default run, every run
    runs/RUN_ID/report.html         every indexed run's report (copied, with its figures/)

Claims, verdicts and configs come from the index (``index.sqlite``, its run ids checked: each names one
folder); run folders ``RUNS/RUN_ID`` are only read, to copy their ``report.html`` and figures -- regular
files only, never through a symlink (a report that is missing is rendered into the site, never into the
run folder; a missing or damaged run folder gets a report rendered from the index's summary, without
figures). Every link is relative, so the folder works from ``file://`` and from any static host; no
script is needed to read it (a few lines of inline JS only toggle the per-point tables).

The site never overlaps what it reads (``--out`` is not the runs folder, above it, or in a run
directory) and is built in a staging folder swapped in when complete: an interrupted build leaves the
earlier site as it was.

The default setting of an experiment is its newest indexed run whose config equals the experiment's
default config under that run's profile (``tdlab run NAME --profile P`` with nothing set); its map
cells are the points of the atlas sweep ``atlas-NAME-PROFILE`` (:func:`tdlab.atlas.axes.sweep_name`),
placed by the axis values read from each run's stored config.
"""

from __future__ import annotations

import itertools
import json
import math
import os
import stat
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from jinja2 import Environment, FileSystemLoader, select_autoescape

from tdlab.atlas.axes import AtlasAxes, AtlasAxis, sweep_name
from tdlab.config import ConfigError, echo
from tdlab.index import INDEX_NAME, RunIndex
from tdlab.report.findings import check_groups, decided_by, group_line, row_summary
from tdlab.runs import RunDirError
from tdlab.safeio import atomic_write, built_aside, check_output_folder, copy_inside, enclosing_run, is_run_dir

__all__ = [
    "MARKS",
    "SCORE_CLIP",
    "TEMPLATES",
    "ClaimMap",
    "ExperimentPage",
    "build_site",
    "cell_score",
    "legend_stops",
    "load_index",
    "score_colour",
]

TEMPLATES = Path(__file__).resolve().parents[1] / "report" / "templates"  # beside the run report's template
MARKS = {"holds": "✓", "fails": "✗", "not resolved": "?", "not evaluable": "–"}  # as the sweep's phase diagrams
NOT_RUN = "·"
_ENV = Environment(
    loader=FileSystemLoader(TEMPLATES), autoescape=select_autoescape(default=True), trim_blocks=True, lstrip_blocks=True
)


def load_index(runs: Path) -> list[dict[str, Any]]:
    """Every run of ``runs``' index, oldest first.

    Raises:
        ConfigError: ``runs`` holds no ``index.sqlite`` (nothing is created there).
    """
    if not (Path(runs) / INDEX_NAME).is_file():
        raise ConfigError(
            f"--runs: {runs} holds no run index ({INDEX_NAME}); run experiments there first "
            f"(tdlab atlas run --runs {runs}), or index existing run folders with "
            f"`tdlab runs --reindex --out {runs}`"
        )
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
    score: float | None = None  # the measured value's signed distance to the tolerance boundary (cell_score)

    @property
    def colour(self) -> str | None:
        """The cell's background on the diverging scale (None: no measured value, the verdict's colour)."""
        return score_colour(self.score) if self.score is not None else None


# The colour scale of a map cell: the measured value's signed distance to the boundary of the region where the
# claim holds, in units of the tolerance (positive inside, negative outside), clipped to ± SCORE_CLIP.
SCORE_CLIP = 2.0
HOLD_RGB, FAIL_RGB, BOUNDARY_RGB = (26, 152, 80), (215, 48, 39), (255, 255, 255)


def _number(x: object) -> float | None:
    """``x`` where it is a finite number (not a bool), else None."""
    return x if isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(x) else None


def cell_score(row: dict[str, Any]) -> float | None:
    """Where one summary row's measured value lies relative to its tolerance region: the signed distance
    to the region's boundary in units of the tolerance (> 0: inside, where the claim holds; < 0: outside;
    0: on the boundary). A ``close`` row's region is ``expected ± tolerance``, ``le`` is ``≤ expected +
    tolerance``, ``ge`` is ``≥ expected − tolerance``; a comparison (``lt``/``gt``) reads the difference
    (the interval's centre) against the margin ``expected``. A zero tolerance scales by the boundary's
    size instead. None: the row has no finite measured value."""
    rel, exp, given_tol = row.get("relation"), _number(row.get("expected")), _number(row.get("tolerance"))
    if exp is None:
        return None
    tol = float(given_tol) if given_tol is not None and given_tol > 0 else 0.0
    if row.get("test") == "compare" or rel in ("lt", "gt"):
        val = _number(row.get("difference"))
        if val is None:  # the interval's centre
            iv = [_number(x) for x in row.get("interval") or [None, None]]
            if len(iv) == 2 and iv[0] is not None and iv[1] is not None:
                val = (iv[0] + iv[1]) / 2
        if val is None:
            return None
        boundary = -exp if rel == "lt" else exp
        inside = (boundary - val) if rel == "lt" else (val - boundary)
    else:
        val = _number(row.get("mean"))
        if val is None:
            return None
        if rel == "close":
            boundary, inside = exp + tol, tol - abs(val - exp)
        elif rel == "le":
            boundary = exp + tol
            inside = boundary - val
        elif rel == "ge":
            boundary = exp - tol
            inside = val - boundary
        else:
            return None
    scale = tol or abs(boundary) or abs(val) or 1.0
    return max(-SCORE_CLIP, min(SCORE_CLIP, inside / scale))


def score_colour(score: float) -> str:
    """The diverging colour of ``score``: white on the boundary, deepening to green inside the tolerance
    region and to red outside it (saturated at ± :data:`SCORE_CLIP` tolerances)."""
    t = max(-1.0, min(1.0, score / SCORE_CLIP))
    end = HOLD_RGB if t >= 0 else FAIL_RGB
    f = 0.15 + 0.85 * abs(t) if t != 0 else 0.0  # a cell just off the boundary is still visibly on its side
    return "#" + "".join(f"{round(b + (e - b) * f):02x}" for b, e in zip(BOUNDARY_RGB, end, strict=True))


def legend_stops() -> list[tuple[str, str]]:
    """``(label, colour)`` stops of the scale's legend, from far outside to far inside (the boundary at 0)."""
    return [(f"{s:+g} tol" if s else "boundary", score_colour(s)) for s in (-SCORE_CLIP, -1.0, 0.0, 1.0, SCORE_CLIP)]


def _first_paper_row(group: dict[str, Any] | None) -> dict[str, Any] | None:
    """A group's first paper (``seed``) row, else its first row: the one value a cell is coloured by."""
    rows = (group or {}).get("rows") or []
    return next((r for r in rows if r.get("provenance") == "paper"), rows[0] if rows else None)


@dataclass
class ClaimMap:
    """One claim group over the atlas grid: facets (axes 3+) of row × column tables of cells."""

    id: str
    statement: str
    facets: list[tuple[str, list[tuple[str, list[Cell]]]]]  # (facet label, [(row label, cells)])
    counts: dict[str, int]
    points: int  # grid points run (with or without a verdict for this claim)

    @property
    def scored(self) -> bool:
        """Whether some cell has a measured value (the map then shows the colour scale's legend)."""
        return any(c.score is not None for _, table in self.facets for _, cells in table for c in cells)

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
    """Copies (or renders) each run's report into ``SITE/runs/RUN_ID/`` once.

    Only ``RUNS/RUN_ID`` is read (the run id is checked by the index, so it is one folder name), and
    only its regular files, never through a symlink and never more than their size
    (:func:`tdlab.safeio.copy_inside`); nothing in the run folder is written. A file that cannot be
    copied is left out and named in :attr:`skipped`; a run folder that is missing or damaged gets a
    report rendered from the index's summary, without figures, headed by its experiment's description and
    readings (``experiments``: the registry, by name).
    """

    def __init__(self, runs: Path, out: Path, experiments: Mapping[str, Any]) -> None:
        self.runs, self.out, self.experiments = Path(runs), Path(out), experiments
        self.done: dict[str, str] = {}
        self.skipped: list[str] = []

    def link(self, row: dict[str, Any]) -> str:
        """``runs/RUN_ID/report.html``, relative to the site's root (pages prefix their way up)."""
        rel = self.done.get(row["run_id"])
        if rel is None:
            rel = self._publish(row)
            self.done[row["run_id"]] = rel
        return rel

    def _publish(self, row: dict[str, Any]) -> str:
        from tdlab.report.html import render_report
        from tdlab.runs import Run

        dest = self.out / "runs" / row["run_id"]
        dest.mkdir(parents=True, exist_ok=True)
        exp = self.experiments.get(row["experiment"] or "")
        about = (exp.description, exp.readings) if exp is not None else ("", ())
        rel = f"runs/{row['run_id']}/report.html"
        src = self.runs / row["run_id"]
        if src.is_symlink():  # it may lead anywhere (another run, /etc): nothing is read through it
            self.skipped.append(f"{src}: a symlink, not read (its report is rendered from the index)")
        elif src.exists():
            try:
                run = Run(src)
                if (src / "report.html").exists() or (src / "report.html").is_symlink():
                    copy_inside(src, "report.html", dest / "report.html")
                else:  # rendered into the site: the run folder is never written
                    atomic_write(dest / "report.html", render_report(run.summary, run.config, *about))
                self._copy_folder(src, Path("figures"), dest)
                return rel
            except (OSError, RunDirError) as exc:
                self.skipped.append(f"{src}: {exc}" if isinstance(exc, OSError) else str(exc))
        summary = {**row["summary"], "figures": []}  # no figure files to link to
        summary.setdefault("run_id", row["run_id"])
        for k, v in (
            ("experiment", row["experiment"]),
            ("figure", ""),
            ("paper", ""),
            ("profile", row["profile"]),
            ("status", row["status"]),
            ("seed", row["seed"]),
            ("members", row["members"]),
        ):
            summary.setdefault(k, v)
        conf = {"experiment": row["experiment"], "profile": row["profile"], "config": row["config"]}
        atomic_write(dest / "report.html", render_report(summary, conf, *about))
        return rel

    def _copy_folder(self, run: Path, rel: Path, dest: Path) -> None:
        """Copy the regular files under ``run/rel`` to ``dest/rel``; symlinks (loops included), devices and
        the like are left out and named in :attr:`skipped`."""
        folder = run / rel
        try:
            st = os.lstat(folder)
        except FileNotFoundError:
            return
        if not stat.S_ISDIR(st.st_mode):
            self.skipped.append(f"{folder}: not copied (not a folder: a symlink or a file)")
            return
        for entry in sorted(os.scandir(folder), key=lambda e: e.name):
            if entry.is_dir(follow_symlinks=False):
                self._copy_folder(run, rel / entry.name, dest)
                continue
            try:
                copy_inside(run, rel / entry.name, dest / rel / entry.name)
            except RunDirError as exc:
                self.skipped.append(f"{exc} (not copied)")


def _cell_title(
    axes: Sequence[AtlasAxis], values: Sequence[Any], row: dict[str, Any], group: dict[str, Any] | None
) -> str:
    where = ", ".join(f"{a.name} = {_fmt(v)}" for a, v in zip(axes, values, strict=True))
    if group is None:
        s = row["summary"] or {}
        return f"{where}: run {row['run_id']} ({row['status']}{': ' + s['error'] if s.get('error') else ''}), no verdict for this claim"
    lines = [f"{where}: {group['verdict']}"]
    if (row.get("summary") or {}).get("decide"):
        lines.append(f"decided by {decided_by(row['summary'])}")
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
            label = ", ".join(f"{a.name} = {_fmt(v)}" for a, v in zip(facet_axes, fvals, strict=True))
            table = []
            for yv in rows_:
                cells = []
                for xv in cols:
                    values = (xv,) + ((yv,) if len(axes) > 1 else ()) + tuple(fvals)
                    point = points.get(tuple(_canonical(v) for v in values))
                    if point is None:
                        where = ", ".join(f"{a.name} = {_fmt(v)}" for a, v in zip(axes, values, strict=True))
                        cells.append(Cell(NOT_RUN, "not run", f"{where}: not run"))
                        continue
                    g = point["groups"].get(cid)
                    verdict = g["verdict"] if g else (point["row"]["status"] or "no verdict")
                    counts[verdict] = counts.get(verdict, 0) + 1
                    first = _first_paper_row(g) if g and g["verdict"] != "not evaluable" else None
                    score = cell_score(first) if first is not None else None
                    cells.append(
                        Cell(
                            MARKS.get(verdict, NOT_RUN),
                            verdict,
                            _cell_title(axes, values, point["row"], g),
                            point["href"],
                            score,
                        )
                    )
                table.append((_fmt(yv) if yv is not None else "", cells))
            built.append((label, table))
        maps.append(ClaimMap(cid, statement, built, counts, len(points)))
    runs = []
    for p in sorted(points.values(), key=lambda p: [_key(v) for v in p["values"]]):
        runs.append(
            {
                "values": [_fmt(v) for v in p["values"]],
                "run_id": p["row"]["run_id"],
                "href": p["href"],
                "status": p["row"]["status"],
                "claims": [
                    (cid, p["groups"][cid]["verdict"], group_line(p["groups"][cid]))
                    if cid in p["groups"]
                    else (cid, "—", "")
                    for cid in claim_ids
                ],
                "notes": (p["row"]["summary"] or {}).get("notes", []),
            }
        )
    return Sweep(profile, name, axes, [_fmt(c) for c in cols], maps, runs, decl.size(profile))


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
        page = ExperimentPage(
            name,
            exp.paper,
            exp.figure,
            exp.description,
            exp.atlas_axes,
            default,
            reports.link(default) if default else None,
        )
        if exp.atlas_axes is not None:
            for profile in exp.profiles:
                s = _sweep(exp, exp.atlas_axes, profile, mine, reports)
                if s is not None:
                    page.sweeps.append(s)
        for r in reversed(mine):
            page.runs.append({"row": r, "href": reports.link(r), "overrides": _overrides(r, exp.atlas_axes)})
        pages.append(page)
    return pages


def _overrides(row: dict[str, Any], decl: AtlasAxes | None) -> str:
    """The atlas axis values of a run (for the runs table), or its sweep tag."""
    if decl is None or not (row["sweep"] or "").startswith("atlas-"):
        return row["sweep"] or ""
    return ", ".join(f"{a.name} = {_fmt(a.read(row['config']))}" for a in decl.axes)


SITE_MARK = ".tdlab-atlas"  # in every site folder: marks a folder that a new build may replace


def _check_target(runs: Path, out: Path) -> Path:
    """``out`` (symlinks resolved) as the site folder of ``runs``: a new folder, an empty one or an
    earlier site, in a folder that can be written, overlapping no run it reads.

    Raises:
        ConfigError: one line naming ``--out``.
    """
    try:
        site = out.expanduser().resolve()
        source = Path(runs).expanduser().resolve()
    except (OSError, RuntimeError):  # RuntimeError: pathlib's word for a symlink loop
        raise ConfigError(
            f"--out {echo(str(out))}: a symlink loop or a path that cannot be resolved; give a folder for the site"
        ) from None
    if site == source or site in source.parents:
        raise ConfigError(
            f"--out {echo(str(out))}: holds the runs folder {runs} the site is built from; the site "
            f"never overlaps the runs it reads: give another folder (default: RUNS/atlas)"
        )
    if site.exists() or site.is_symlink():
        if not site.is_dir():
            raise ConfigError(f"--out {echo(str(out))}: exists and is not a folder; give a folder for the site")
        earlier = (site / SITE_MARK).is_file() or ((site / "index.html").is_file() and (site / "experiments").is_dir())
        if not earlier and any(site.iterdir()):
            raise ConfigError(
                f"--out {echo(str(out))}: a folder holding other files, not an atlas site; a build "
                f"replaces its --out folder as a whole: give a new or empty folder"
            )
    check_output_folder(site.parent, "--out")  # writable, and no run directory
    if enclosing_run(site) is not None or is_run_dir(site):
        raise ConfigError(
            f"--out {echo(str(out))}: a run directory, which is read-only to every command but "
            f"`tdlab run --resume` and `tdlab report`: give another folder"
        )
    return site


def build_site(runs: Path, out: Path, warn: Callable[[str], None] | None = None) -> Path:
    """Write the atlas site of ``runs``' index into ``out``; returns the front page's path.

    The site is built in a hidden staging folder beside ``out`` and swapped in when complete, so an
    interrupted build leaves the earlier site (or none) as it was, never half a site. ``warn`` gets
    one line naming the run files that were not copied (symlinks, devices), if any.

    Raises:
        ConfigError: ``runs`` has no index; ``out`` overlaps ``runs`` or a run directory, holds other
            files, or is not a folder that can be written.
        CorruptIndexError: the index is damaged or holds a row tdlab never writes (a run id that is
            not one folder name).
    """
    from tdlab.claims import VERDICTS
    from tdlab.experiments.base import registry

    rows = []
    for row in load_index(runs):  # a row whose summary the pages cannot read is left out, with a warning
        try:
            check_groups(row["summary"] or {}, f"{Path(runs) / INDEX_NAME}: run {row['run_id']}")
        except RunDirError as exc:
            if warn is not None:
                warn(f"{exc}; the run is left out of the site (`tdlab report RUN_DIR` rebuilds its summary)")
            continue
        rows.append(row)
    site = _check_target(Path(runs), Path(out))
    with built_aside(site) as staging:
        (staging / "experiments").mkdir()
        reports = _Reports(runs, staging, registry())
        pages = _pages(rows, reports, staging)
        common = {
            "marks": MARKS,
            "legend": legend_stops(),
            "not_run": NOT_RUN,
            "verdicts": VERDICTS,
            "runs_dir": str(runs),
            "n_runs": len(rows),
        }
        for page in pages:
            atomic_write(
                staging / page.href, _ENV.get_template("atlas_experiment.html.j2").render(p=page, root="../", **common)
            )
        atomic_write(
            staging / "index.html", _ENV.get_template("atlas_index.html.j2").render(pages=pages, root="", **common)
        )
        atomic_write(staging / SITE_MARK, f"atlas site of {Path(runs).resolve()}\n")
    if reports.skipped and warn is not None:
        warn(
            f"{len(reports.skipped)} run file(s) not copied into the site: {reports.skipped[0]}"
            + (f" (and {len(reports.skipped) - 1} more)" if len(reports.skipped) > 1 else "")
        )
    return site / "index.html"

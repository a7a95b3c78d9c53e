"""Sweeps: a grid of ordinary runs, locally or on a Ray cluster.

A spec (YAML) names an experiment, a profile, fixed overrides and a grid::

    name: pq-grid
    experiment: markov-init
    profile: quick
    seeds: 2                      # ensemble members per point (optional)
    set: {train.steps: 1000}      # fixed overrides (dotted keys)
    grid:                         # cartesian product ...
      task.p: [0.2, 0.5, 0.8]
      task.q: [0.3, 0.8]
    points:                       # ... plus explicit points (optional)
      - {task.p: 0.9, task.q: 0.9}

Every point is an ordinary run directory ``OUT/NAME__pNNN-HASH`` (indexed, tagged with the sweep);
``OUT/sweeps/NAME/`` holds the spec, ``status.json`` (every point's overrides, run id, status and
error), ``summary.parquet`` / ``summary.html`` (every claim and scalar measurement across the grid)
and one figure per swept metric (a line for a 1-D grid, a phase diagram for a 2-D one).

Each point runs as its own ``tdlab run`` process, so a worker that dies (killed, out of memory)
marks its point failed with the error and the sweep goes on. Backends: ``local`` (a pool of
``--workers`` concurrent processes) and ``ray`` (one Ray task per point, ``ray.init(address)`` for an
existing cluster, a local Ray instance otherwise).

Starting the same sweep again skips points already done and resumes killed ones, but only what
matches: a folder ``OUT/RUN_ID`` or ``OUT/.staging-RUN_ID`` is adopted only when its ``config.yaml``
holds the point's own config (experiment, profile and full config, compared by hash, see
:func:`tdlab.runs.config_hash`) and its checkpoints are tdlab's (no pickle). Anything else marks the
point failed with one line naming the folder; it is never adopted as done, resumed or changed.

Limits: a spec needs at least one grid key or one point (``grid: {}`` alone is refused), and at most
:data:`MAX_POINTS` points (10,000) unless ``tdlab sweep --max-points N`` allows more; the size is the
grid's product plus the explicit points, checked before any point is built. Every point's config is
validated once, before anything runs (a few ms a point; a progress bar on stderr above
:data:`PROGRESS_ABOVE` points).
"""

from __future__ import annotations

import hashlib
import itertools
import json
import math
import os
import subprocess
import sys
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Literal

import numpy as np
import pandas as pd
import yaml
from pydantic import Field, PrivateAttr, ValidationError, field_validator

from tdlab.cluster import check_address, connect, disconnect
from tdlab.config import ECHO_CHARS, Config, ConfigError, _format_validation_error, one_line, parse_duration
from tdlab.config import echo as echo_value
from tdlab.runs import Run, RunDirError, atomic_write, config_hash, staging_path
from tdlab.safeio import YamlBombError, legacy_pickles, load_yaml

__all__ = ["MAX_POINTS", "Point", "SweepSpec", "count_points", "load_spec", "plan", "run_sweep", "summarise"]

MAX_POINTS = 10_000  # default limit on a sweep's points (tdlab sweep --max-points N raises it)
PROGRESS_ABOVE = 300  # validating more points than this shows a progress bar (~0.2 s)


class SweepSpec(Config):
    name: str = Field(pattern=r"^[A-Za-z0-9][A-Za-z0-9_.-]*$")
    experiment: str
    profile: str = "quick"
    seeds: int | None = Field(None, ge=1)
    seed: int | None = Field(None, ge=0)
    set: dict[str, Any] = {}
    grid: dict[str, list[Any]] = {}
    points: list[dict[str, Any]] = []
    decide: str | None = None  # run every point with --decide and this --budget (90s, 30m, 1.5h)
    # Every point's config hash, filled by the one validation (load_spec, or run_sweep when not loaded).
    _hashes: list[str] | None = PrivateAttr(None)

    @field_validator("decide")
    @classmethod
    def _budget(cls, v: str | None) -> str | None:
        if v is not None:
            parse_duration(v, "decide")
        return v

    @field_validator("grid")
    @classmethod
    def _nonempty(cls, v: dict[str, list[Any]]) -> dict[str, list[Any]]:
        for k, vals in v.items():
            if not vals:
                raise ValueError(f"grid key {k!r} has no values")
        return v


class Point(Config):
    index: int
    overrides: dict[str, Any]
    run_id: str
    status: Literal["pending", "done", "diverged", "failed", "skipped"] = "pending"
    error: str | None = None


def load_spec(path: Path, max_points: int = MAX_POINTS) -> SweepSpec:
    """Read and validate a sweep spec (its size, then every point's config, once); bad files raise
    :class:`ConfigError` naming the field. Returns the spec."""
    try:
        raw = load_yaml(Path(path).read_bytes().decode("utf-8"))
    except (OSError, UnicodeDecodeError, yaml.YAMLError, RecursionError, YamlBombError) as exc:
        reason = one_line(getattr(exc, "problem", None) or str(exc) or type(exc).__name__)
        raise ConfigError(f"sweep spec {path}: cannot read: {reason[: 4 * ECHO_CHARS]}") from None
    if not isinstance(raw, dict):
        raise ConfigError(f"sweep spec {path}: expected a mapping")
    try:
        spec = SweepSpec.model_validate(raw)
    except ValidationError as exc:
        raise ConfigError(f"sweep spec {path}: {_format_validation_error(exc)}") from None
    _validate_points(spec, max_points)
    return spec


def count_points(spec: SweepSpec) -> int:
    """How many points ``spec`` has: the grid's product plus the explicit points (nothing enumerated)."""
    return (math.prod(len(v) for v in spec.grid.values()) if spec.grid else 0) + len(spec.points)


def _validate_points(spec: SweepSpec, max_points: int = MAX_POINTS) -> None:
    """Check the spec's size, then validate every point's config before anything runs (once: the
    config hashes are kept on the spec for :func:`run_sweep`)."""
    from tdlab.experiments.base import get

    n = count_points(spec)
    if n == 0:
        raise ConfigError(
            f"sweep spec {spec.name}: no points: 'grid' has no keys and 'points' is empty; "
            f"give at least one grid key with values or one point"
        )
    if n > max_points:
        raise ConfigError(
            f"sweep spec {spec.name}: {n} points, more than the limit of {max_points}; "
            f"shrink the grid or raise the limit with tdlab sweep --max-points N"
        )
    exp = get(spec.experiment)
    hashes = []
    with _progress(n) as advance:
        for i, p in enumerate(_points(spec)):
            try:
                cfg = exp.make_config(spec.profile, _as_sets({**spec.set, **p}), spec.seeds, spec.seed)
            except ConfigError as exc:
                raise ConfigError(f"sweep spec {spec.name}: point {i} {echo_value(p)}: {exc}") from None
            conf = {"experiment": exp.name, "profile": spec.profile, "config": cfg.model_dump(mode="json")}
            if spec.decide is not None:  # the identity a --decide point's run records (tdlab.runs.config_hash)
                conf["decide"] = {**_decide_plan(spec.decide), "schedule": [cfg.members]}
            hashes.append(config_hash(conf))
            advance()
    spec._hashes = hashes


@contextmanager
def _progress(total: int) -> Iterator[Callable[[], None]]:
    """A function advancing a progress bar on stderr (drawn only above :data:`PROGRESS_ABOVE` points)."""
    if total <= PROGRESS_ABOVE:
        yield lambda: None
        return
    from rich.console import Console
    from rich.progress import Progress

    with Progress(console=Console(stderr=True), transient=True) as bar:
        task = bar.add_task(f"validating {total} points", total=total)
        yield lambda: bar.advance(task)


def _points(spec: SweepSpec) -> list[dict[str, Any]]:
    """Every point's overrides: the grid's product, then the explicit points."""
    keys = list(spec.grid)
    pts = (
        [dict(zip(keys, vals, strict=True)) for vals in itertools.product(*(spec.grid[k] for k in keys))]
        if keys
        else []
    )
    return pts + [dict(p) for p in spec.points]


def _as_sets(overrides: dict[str, Any]) -> list[str]:
    try:
        return [f"{k}={json.dumps(v)}" for k, v in overrides.items()]
    except (TypeError, ValueError, RecursionError):  # YAML dates, bytes, sets: not config values
        bad = next(k for k, v in overrides.items() if not _json_ok(v))
        raise ConfigError(
            f"{bad}: {echo_value(overrides[bad])} is not a config value (numbers, strings, booleans, null, lists, mappings)"
        ) from None


def _json_ok(value: Any) -> bool:
    try:
        json.dumps(value)
    except (TypeError, ValueError, RecursionError):
        return False
    return True


def _decide_plan(budget: str) -> dict[str, Any]:
    """The plan a point run with ``--decide --budget BUDGET`` (and the CLI's other defaults) records."""
    from tdlab.decide import DecidePlan

    return DecidePlan(budget_s=parse_duration(budget, "decide")).model_dump()


def plan(spec: SweepSpec) -> list[Point]:
    """The points of a sweep with deterministic run ids (same spec, same ids)."""
    out = []
    for i, p in enumerate(_points(spec)):
        h = hashlib.sha1(
            json.dumps([spec.model_dump(exclude={"grid", "points"}), p], sort_keys=True).encode()
        ).hexdigest()[:8]
        out.append(Point(index=i, overrides=p, run_id=f"{spec.name}__p{i:03d}-{h}"))
    return out


def _mismatch(out: Path, point: Point, want: str) -> str | None:
    """Why the folders of ``point``'s run id in ``out`` (finished or staging) must not be adopted
    or resumed: a config.yaml that is unreadable or of another config, or a pickled checkpoint.
    ``None`` when there is no such folder or every one holds the point's own config."""
    for folder in (out / point.run_id, staging_path(out / point.run_id)):
        if not folder.exists():
            continue
        try:
            got = config_hash(Run.read_config(folder / "config.yaml"))
        except RunDirError as exc:
            return f"{folder} is in the way and is not this point's run: {exc}"
        if got != want:
            return (
                f"{folder} holds a run of another config than this point's; not adopted or resumed "
                f"(move it away, or use another --out)"
            )
        if pickles := legacy_pickles(folder / "checkpoints"):
            return f"{folder} holds a pickled checkpoint ({pickles[0].name}); not resumed (tdlab never unpickles)"
    return None


def _command(spec: SweepSpec, point: Point, out: Path) -> list[str]:
    if (staging_path(Path(out) / point.run_id) / "config.yaml").is_file():  # a killed attempt: finish it
        return [sys.executable, "-m", "tdlab.cli", "run", "--resume", str(Path(out) / point.run_id), "--quiet"]
    cmd = [
        sys.executable,
        "-m",
        "tdlab.cli",
        "run",
        spec.experiment,
        "--profile",
        spec.profile,
        "--out",
        str(out),
        "--run-id",
        point.run_id,
        "--sweep",
        spec.name,
        "--quiet",
    ]
    for s in _as_sets({**spec.set, **point.overrides}):
        cmd += ["--set", s]
    if spec.seeds is not None:
        cmd += ["--seeds", str(spec.seeds)]
    if spec.seed is not None:
        cmd += ["--seed", str(spec.seed)]
    if spec.decide is not None:
        cmd += ["--decide", "--budget", spec.decide]
    return cmd


def run_point(cmd: list[str], threads: int) -> tuple[int, str]:
    """Run one point as a ``tdlab run`` process: ``(exit code, last lines of its stderr)``."""
    env = {**os.environ, "TDLAB_THREADS": str(threads)}
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env)
    return proc.returncode, "\n".join((proc.stderr or "").strip().splitlines()[-5:])


def _point_status(out: Path, point: Point, rc: int, err: str) -> Point:
    try:
        s = Run(out / point.run_id).summary
        return point.model_copy(update={"status": s.get("status", "failed"), "error": s.get("error")})
    except RunDirError:
        return point.model_copy(
            update={"status": "failed", "error": f"exit code {rc}: {err}" if err else f"exit code {rc}"}
        )


def run_sweep(
    spec: SweepSpec,
    out: Path,
    backend: Literal["local", "ray"] = "local",
    workers: int = 2,
    address: str | None = None,
    echo: Callable[[str], None] = print,
) -> list[Point]:
    """Run every point not already done; write status, summary table and figures. Returns the points.

    A folder of a point's run id that does not hold the point's config (or holds a pickle) fails the
    point with one line naming it; it is neither adopted nor resumed."""
    if spec._hashes is None:  # not validated by load_spec
        _validate_points(spec, max(MAX_POINTS, count_points(spec)))
    hashes = spec._hashes
    assert hashes is not None  # _validate_points sets them
    if backend == "ray":
        check_address(address)  # before anything is written: a wrong address is one line, not minutes of retries
    out = Path(out)
    sdir = out / "sweeps" / spec.name
    sdir.mkdir(parents=True, exist_ok=True)
    atomic_write(sdir / "spec.yaml", yaml.safe_dump(spec.model_dump(mode="json"), sort_keys=False))
    points = plan(spec)
    todo = []
    for i, p in enumerate(points):
        problem = _mismatch(out, p, hashes[i])
        if problem is not None:
            points[i] = p.model_copy(update={"status": "failed", "error": problem})
            continue
        done = (out / p.run_id / "summary.json").is_file()
        if done:
            points[i] = _point_status(out, p, 0, "")
            if points[i].status == "done":  # a diverged point keeps saying so
                points[i] = points[i].model_copy(update={"status": "skipped"})
        else:
            todo.append(p)
    echo(
        f"sweep {spec.name}: {len(points)} points, {len(points) - len(todo)} already done, {len(todo)} to run ({backend})"
    )
    _write_status(sdir, points)
    threads = max(1, (os.cpu_count() or 2) // max(1, workers))
    finished = (
        _run_ray(spec, todo, out, workers, address, threads)
        if backend == "ray"
        else _run_local(spec, todo, out, workers, threads)
    )
    by_index = {p.index: p for p in finished}
    points = [by_index.get(p.index, p) for p in points]
    _write_status(sdir, points)
    summarise(spec, points, out)
    failed = [p for p in points if p.status == "failed"]
    for p in failed:
        echo(f"point {p.index} {p.overrides} failed: {p.error}")
    echo(
        f"sweep {spec.name}: {sum(p.status in ('done', 'skipped') for p in points)} done, {len(failed)} failed; see {sdir}"
    )
    return points


def _run_local(spec: SweepSpec, todo: list[Point], out: Path, workers: int, threads: int) -> list[Point]:
    def one(p: Point) -> Point:
        rc, err = run_point(_command(spec, p, out), threads)
        return _point_status(out, p, rc, err)

    with ThreadPoolExecutor(max_workers=max(1, workers)) as pool:  # each thread waits on a child process
        return list(pool.map(one, todo))


def _run_ray(
    spec: SweepSpec, todo: list[Point], out: Path, workers: int, address: str | None, threads: int
) -> list[Point]:
    ray, started = connect(address, num_cpus=max(1, workers))
    try:
        remote = ray.remote(num_cpus=1, max_retries=0)(run_point)
        refs = [remote.remote(_command(spec, p, out), threads) for p in todo]
        results = []
        for p, ref in zip(todo, refs, strict=True):
            try:
                rc, err = ray.get(ref)
            except Exception as exc:  # a crashed Ray worker: the point fails, the sweep goes on
                rc, err = -1, f"{type(exc).__name__}: {exc}"
            results.append(_point_status(out, p, rc, err))
        return results
    finally:
        disconnect(ray, started)


def _write_status(sdir: Path, points: list[Point]) -> None:
    atomic_write(sdir / "status.json", json.dumps([p.model_dump(mode="json") for p in points], indent=2))


def _scalars(prefix: str, obj: Any) -> dict[str, float]:
    if isinstance(obj, bool):
        return {prefix: float(obj)}
    if isinstance(obj, (int, float)):
        return {prefix: float(obj)}
    if isinstance(obj, dict):
        out: dict[str, float] = {}
        for k, v in obj.items():
            out.update(_scalars(f"{prefix}.{k}" if prefix else str(k), v))
        return out
    return {}


def summarise(spec: SweepSpec, points: list[Point], out: Path) -> pd.DataFrame:
    """The summary table (one row per point) as parquet + HTML, and one figure per swept metric."""
    from tdlab.report.figures import plt, save_figure

    sdir = Path(out) / "sweeps" / spec.name
    rows = []
    for p in points:
        row: dict[str, Any] = {**p.overrides, "run_id": p.run_id, "status": p.status, "error": p.error}
        if p.status in ("done", "skipped"):
            try:
                s = Run(Path(out) / p.run_id).summary
            except RunDirError:
                s = {}
            for g in [*s.get("claims", []), *s.get("sanity", [])]:
                row[f"{g['id']}.verdict"] = g["verdict"]
                for c in g.get("rows", []):  # one column set per claim row: mean, expected, verdict
                    row[f"{c['id']}.measured"] = c["mean"]
                    row[f"{c['id']}.expected"] = c["expected"]
                    row[f"{c['id']}.verdict"] = c["verdict"]
            row.update({f"m.{k}": v for k, v in _scalars("", s.get("measurements", {})).items()})
        rows.append(row)
    df = pd.DataFrame(rows)
    tmp = sdir / ".summary.parquet.tmp"
    df.to_parquet(tmp)
    os.replace(tmp, sdir / "summary.parquet")
    atomic_write(
        sdir / "summary.html",
        f"<html><head><meta charset='utf-8'><title>sweep {spec.name}</title></head><body>"
        f"<h1>sweep {spec.name} — {spec.experiment} ({spec.profile})</h1>{df.to_html(index=False, na_rep='')}"
        + "".join(
            f"<img src='figures/{f}'>" for f in _metric_figures(df, list(spec.grid), sdir / "figures", plt, save_figure)
        )
        + "</body></html>",
    )
    return df


_VERDICT_MARK = {"holds": "✓", "fails": "✗", "not resolved": "?", "not evaluable": "–"}


def _metric_figures(df: pd.DataFrame, keys: list[str], figdir: Path, plt: Any, save_figure: Any) -> list[str]:
    metrics = [c for c in df.columns if c.endswith(".measured") or c.startswith("m.")]
    names: list[str] = []
    if not keys or not metrics:
        return names
    for metric in metrics:
        data = df.dropna(subset=[metric])
        if data.empty:
            continue
        fig, ax = plt.subplots(figsize=(5, 4))
        fname = "".join(ch if ch.isalnum() or ch in "-_." else "_" for ch in metric) + ".png"
        if len(keys) >= 2:  # phase diagram over the first two swept keys
            table = data.pivot_table(index=keys[1], columns=keys[0], values=metric, aggfunc="mean")
            im = ax.imshow(table.to_numpy(dtype=float), origin="lower", aspect="auto", cmap="viridis")
            ax.set_xticks(range(table.shape[1]), [f"{v:g}" if isinstance(v, float) else str(v) for v in table.columns])
            ax.set_yticks(range(table.shape[0]), [f"{v:g}" if isinstance(v, float) else str(v) for v in table.index])
            ax.set_xlabel(keys[0])
            ax.set_ylabel(keys[1])
            verdict = metric.replace(".measured", ".verdict")
            if verdict in data and metric.endswith(".measured"):  # the cell's verdict: ✓ holds, ✗ fails, ? not resolved
                vt = data.pivot_table(index=keys[1], columns=keys[0], values=verdict, aggfunc="first")
                for (i, j), v in np.ndenumerate(vt.to_numpy(dtype=object)):
                    if isinstance(v, str):
                        ax.text(j, i, _VERDICT_MARK.get(v, "·"), ha="center", va="center", color="w", fontsize=11)
            fig.colorbar(im, ax=ax)
        else:
            d = data.sort_values(keys[0])
            ax.plot(d[keys[0]], d[metric], "o-")
            ax.set_xlabel(keys[0])
            ax.set_ylabel(metric)
        ax.set_title(metric, fontsize=8)
        save_figure(fig, figdir / fname)
        names.append(fname)
    return names

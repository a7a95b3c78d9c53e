"""Running an experiment end to end: config -> training -> claims, figures, summary, report.

Everything happens in the run's staging folder; the run directory appears only when the whole
run, report included, is written (see :mod:`tdlab.runs`).
"""

from __future__ import annotations

import sqlite3
import time
from pathlib import Path
from typing import Any

import torch
from pydantic import ValidationError
from rich.console import Console

from tdlab.claims import VERDICTS
from tdlab.config import ConfigError, echo, one_line
from tdlab.decide import DecidePlan, run_rounds
from tdlab.experiments.base import Analysis, Experiment, ExperimentConfig, included_from, stored_experiment
from tdlab.index import CorruptIndexError, RunIndex
from tdlab.records import write_record
from tdlab.report.figures import figure_note
from tdlab.report.html import write_report
from tdlab.rounds import length_field, lengths
from tdlab.run_context import RunContext
from tdlab.run_view import RunView
from tdlab.runs import Run, RunDirError, RunWriter, environment, segment_ok, staged_segments, staging_path
from tdlab.safeio import check_output_folder
from tdlab.train.phases import phase
from tdlab.train.stopping import RunStopped
from tdlab.train.trainer import DivergenceError

__all__ = ["check_device", "check_out", "claim_counts", "execute", "rebuild", "resume"]

err_console = Console(stderr=True)


def check_device(device: str) -> str:
    """Validate ``--device``: ``cpu``, or ``cuda``/``cuda:N`` where a GPU exists."""
    if device == "cpu":
        return device
    if device.startswith("cuda"):
        if not torch.cuda.is_available():
            raise ConfigError(f"device: {echo(device)} is not available on this machine (no CUDA GPU); allowed: cpu")
        return device
    raise ConfigError(f"device: unknown device {echo(device)}; allowed: cpu, cuda, cuda:N")


def check_out(out: Path) -> Path:
    """Validate ``--out``: a folder run directories can be written in (made if missing). A file, a
    device, a path under a file, an unwritable place or a run directory is refused before anything is
    written (:func:`tdlab.safeio.check_output_folder`)."""
    return check_output_folder(out, "--out")


def execute(
    exp: Experiment,
    cfg: ExperimentConfig,
    profile: str,
    out: Path,
    device: str = "cpu",
    progress: bool = True,
    run_id: str | None = None,
    sweep: str | None = None,
    decide: DecidePlan | None = None,
) -> Run:
    """Run ``exp`` with a validated ``cfg``; returns the finished run (status ``done`` or ``diverged``),
    indexed in ``out``'s run index (under ``sweep`` when part of one). With ``decide``, the run goes
    on in rounds of more members until its paper claims are settled (:mod:`tdlab.decide`)."""
    device = check_device(device)
    out = check_out(out)
    writer = RunWriter(Path(out), exp.name, run_id)
    writer.write_config(_config_record(exp, cfg, profile, sweep))
    return _execute(exp, cfg, profile, writer, device, progress, sweep, decide)


def _config_record(
    exp: Experiment, cfg: ExperimentConfig, profile: str, sweep: str | None, decide: dict[str, Any] | None = None
) -> dict[str, Any]:
    """What ``config.yaml`` holds: experiment, profile, config, sweep, the CPU threads it trains on (a resume
    takes the same count: :func:`recorded_threads`) and, for ``--decide``, its rounds."""
    rec = {
        "experiment": exp.name,
        "profile": profile,
        "config": cfg.model_dump(mode="json"),
        "sweep": sweep,
        "threads": torch.get_num_threads(),
    }
    came = included_from(exp.name)
    if came is not None:  # said in a message only: tdlab never includes a path it reads from a run directory
        rec["include"] = str(came)
    return {**rec, "decide": decide} if decide is not None else rec


def recorded_threads(final: Path) -> int | None:
    """The CPU threads the interrupted run that will become ``final`` was started on (its staged
    ``config.yaml``), so that a resume trains on the same count: a thread count changes a float sum's order,
    and with it the numbers' last bits. ``None`` where nothing readable says (a run staged before tdlab kept it,
    or no staging folder: the resume itself then says what is wrong)."""
    try:
        n = Run.read_config(staging_path(Path(final)) / "config.yaml").get("threads")
    except (RunDirError, OSError):
        return None
    return n if isinstance(n, int) and not isinstance(n, bool) and 1 <= n <= 4096 else None


def resume(path: Path, device: str = "cpu", progress: bool = True) -> Run:
    """Finish an interrupted run from its checkpoints; ends with the same numbers as an
    uninterrupted run of the same config and seed."""
    writer = RunWriter.reopen(Path(path))
    exp, cfg = stored_experiment(writer.path)
    conf = Run.read_config(writer.path / "config.yaml")
    try:
        plan = DecidePlan.model_validate(conf["decide"]) if conf.get("decide") is not None else None
    except ValidationError as exc:
        raise RunDirError(
            f"{writer.path / 'config.yaml'}: its 'decide' block is not what tdlab writes ({one_line(str(exc))})"
        ) from None
    return _execute(
        exp,
        cfg,
        conf.get("profile", "?"),
        writer,
        check_device(device),
        progress,
        conf.get("sweep"),
        plan,
        conf.get("decide") or {},
    )


def _execute(
    exp: Experiment,
    cfg: ExperimentConfig,
    profile: str,
    writer: RunWriter,
    device: str,
    progress: bool,
    sweep: str | None = None,
    decide: DecidePlan | None = None,
    decide_state: dict[str, Any] | None = None,
) -> Run:
    if progress:
        err_console.print(f"run {writer.run_id}: building in {writer.path}", highlight=False, soft_wrap=True)
    with writer:
        status: dict[str, Any] = {"status": "done", "error": None}
        t0, before = time.perf_counter(), staged_segments(writer.path)  # the earlier segments of a resumed run
        ctx = RunContext(writer, device, progress)
        analysis, record = None, None
        try:
            if decide is None:
                exp.run(cfg, ctx)
            else:
                cfg, analysis, record = run_rounds(
                    exp,
                    cfg,
                    ctx,
                    decide,
                    decide_state or {},
                    lambda c, block: writer.write_config(_config_record(exp, c, profile, sweep, block)),
                    lambda line: err_console.print(line, highlight=False, soft_wrap=True, markup=False),
                )
        except DivergenceError as err:
            # What was measured is already stored; the run finishes as "diverged", naming member and step.
            status = {"status": "diverged", "error": str(err), "member": err.member, "step": err.step}
        except (RunStopped, KeyboardInterrupt) as stop:  # the staging folder stays for --resume if it has checkpoints
            stop.run_dir = writer.final  # type: ignore[union-attr]
            writer.save_segments([*before, _segment(environment(device), time.perf_counter() - t0)])
            raise
        env = environment(device)
        segments = [*before, _segment(env, time.perf_counter() - t0)]
        meta = {
            "run_id": writer.run_id,
            "profile": profile,
            "wall_time_s": sum(g["wall_s"] for g in segments),  # every segment of a resumed run
            "env": env,
            **status,
        }
        if before:  # resumed: which commit, device and threads ran each part of the training
            meta["segments"] = segments
        if record is not None:
            meta["decide"] = record
        _report(exp, cfg, Run(writer.path), meta, analysis)
        run = writer.finish()
    _index(run, writer.out, sweep)
    return run


def _segment(env: dict[str, Any], seconds: float) -> dict[str, Any]:
    """One process's part of a run (:func:`tdlab.runs.staged_segments`): the commit, device and threads of
    ``env`` (:func:`tdlab.runs.environment`), and the wall seconds it ran."""
    return {"commit": env["commit"], "device": env["device"], "threads": env["torch_threads"], "wall_s": seconds}


def _index(run: Run, out: Path, sweep: str | None) -> None:
    """Add a finished run to ``out``'s index. A broken index (corrupt file, disk full) must not lose the
    run: it is in place already, so say where and how to index it later, in one line, and go on."""
    try:
        RunIndex(out).add_run(run, sweep)
    except (sqlite3.Error, OSError, CorruptIndexError) as exc:
        err_console.print(
            f"warning: the run is at {run.path} but not indexed ({one_line(str(exc)) or type(exc).__name__}); "
            f"`tdlab runs --reindex --out {out}` will index it",
            highlight=False,
            soft_wrap=True,
            markup=False,
        )


def rebuild(path: Path) -> Run:
    """Recompute claims, figures, summary and report of an existing run from its stored data."""
    run = Run(Path(path))
    exp, cfg = stored_experiment(run.path)
    conf = run.config
    meta = _stored_meta(run)
    meta.setdefault("run_id", run.path.name)
    meta.setdefault("profile", conf.get("profile", "?"))
    meta.setdefault("status", "done")
    if meta["status"] == "done" and run.metrics().empty:
        raise RunDirError(f"{run.path / 'metrics.parquet'} holds no rows: nothing to compute the claims from")
    # Analyses index the metrics by the names their experiment writes: a table without them, or a
    # summary of the wrong shape, fails deep inside. Whatever fails, the run directory is left as it was.
    with run.preserved():
        try:
            _report(exp, cfg, run, meta)
        except (ConfigError, RunDirError):
            raise
        except (KeyError, IndexError, ValueError, TypeError, ZeroDivisionError, AttributeError) as exc:
            raise RunDirError(
                f"{run.path}: metrics.parquet / summary.json do not hold what {exp.name} reads "
                f"({type(exc).__name__}: {echo(str(exc))})"
            ) from None
    _index(run, run.path.parent, conf.get("sweep"))
    return run


_META_TYPES: dict[str, tuple[type, ...]] = {
    "run_id": (str,),
    "profile": (str,),
    "wall_time_s": (int, float),
    "env": (dict,),
    "status": (str,),
    "error": (str, type(None)),
    "member": (int, type(None)),
    "step": (int, type(None)),
    "decide": (dict,),
    "segments": (list,),
}


def _stored_meta(run: Run) -> dict[str, Any]:
    """What a rebuilt report keeps of the old ``summary.json`` (run id, profile, wall time, environment,
    status, a resumed run's segments), each checked: a value of the wrong type is a damaged summary, refused in one line."""
    old = run.summary
    meta = {k: old[k] for k in _META_TYPES if k in old}
    where = run.path / "summary.json"
    for key, value in meta.items():
        if not isinstance(value, _META_TYPES[key]) or isinstance(value, bool):
            raise RunDirError(f"{where}: '{key}' holds {type(value).__name__}, not what tdlab writes there")
    if "decide" in meta and not _confidence_ok(meta["decide"].get("confidence")):
        raise RunDirError(f"{where}: 'decide' holds no confidence in (0.5, 1), not what tdlab writes there")
    if "status" in meta and meta["status"] not in ("done", "diverged"):
        raise RunDirError(f"{where}: 'status' is {echo(meta['status'])}; allowed: done, diverged")
    if not all(segment_ok(g) for g in meta.get("segments", [])):
        raise RunDirError(
            f"{where}: 'segments' holds a part that is not a segment tdlab writes (commit, device, threads, wall_s)"
        )
    env = meta.get("env")
    if env is not None and not (
        isinstance(env.get("device"), str) and all(isinstance(v, (str, int, float, type(None))) for v in env.values())
    ):
        raise RunDirError(f"{where}: 'env' is not the environment tdlab records (device, versions)")
    return meta


def _confidence_ok(c: Any) -> bool:
    return isinstance(c, float) and 0.5 < c < 1.0


def _report(
    exp: Experiment, cfg: ExperimentConfig, run: Run, meta: dict[str, Any], analysis: Analysis | None = None
) -> None:
    """Health gate, claims, figures, ``summary.json`` and ``report.html`` of a run.

    The gate runs first: every trained arm is checked (:meth:`Experiment.health`), and every claim
    row that needs an arm that did not train is ``not evaluable``. Counts are over paper claim
    groups; sanity groups are counted apart. A ``--decide`` run is judged at its looks' confidence
    (``meta["decide"]``); ``analysis``, when given, is the last look's, already judged.
    """
    view = RunView(run)  # one read of the metrics table for measuring, gating and plotting
    if meta.get("status") != "done":
        analysis = None
    elif analysis is None:
        analysis = exp.analyse(cfg, view, confidence=(meta.get("decide") or {}).get("confidence", 0.95))
    figures: list[Path] = []
    if analysis is not None:
        with phase("report"), figure_note(_figure_note(exp, cfg, str(meta.get("profile", "?")))):
            figures = exp.plot(cfg, view, analysis, run.path / "figures")
    summary = {
        "experiment": exp.name,
        "paper": exp.paper,
        "figure": exp.figure,
        **meta,
        "seed": cfg.seed,
        "members": cfg.members,
        # the fields where the run departs from the settings its seed states (empty: at the seed's settings)
        "settings_diff": exp.settings_diff(cfg),
        **claim_counts(analysis),
        "measurements": analysis.measurements if analysis else {},
        "notes": analysis.notes if analysis else [],
        "figures": [str(f.relative_to(run.path)) for f in figures],
    }
    with phase("report"):
        run.write_summary(summary)
        write_record(run, summary, analysis)  # what results/PROFILE/NAME.json publishes
        write_report(run, summary, exp.description, exp.readings)


def _figure_note(exp: Experiment, cfg: ExperimentConfig, profile: str) -> str:
    """What every figure of a run is signed with: the experiment, the profile, the members and the training
    length beside the seed's (a quick figure is never read as the paper's)."""
    note = f"{exp.name} · profile {profile} · {cfg.members} members"
    field, both = length_field(exp), lengths(exp, cfg)
    if field is not None and both is not None:
        note += f" · {field} = {both[0]:g} (the seed's: {both[1]:g})"
    off = exp.settings_diff(cfg)
    return note + (
        f" · {len(off)} setting(s) not the seed's" if off else (" · the seed's settings" if exp.manifest else "")
    )


def claim_counts(analysis: Analysis | None) -> dict[str, Any]:
    """The summary's claim section: groups (paper and sanity apart), per-verdict counts, arm health."""
    paper = [g.to_dict() for g in analysis.paper] if analysis else []
    sanity = [g.to_dict() for g in analysis.sanity_groups] if analysis else []
    counts = {v: sum(g["verdict"] == v for g in paper) for v in VERDICTS}
    return {
        "claims": paper,
        "sanity": sanity,
        "claims_total": len(paper),
        "claims_held": counts["holds"],
        "claims_failed": counts["fails"],
        "claims_not_resolved": counts["not resolved"],
        "claims_not_evaluable": counts["not evaluable"],
        "sanity_total": len(sanity),
        "sanity_failed": sum(g["verdict"] == "fails" for g in sanity),
        "arms": {a: h.to_dict() for a, h in analysis.health.items()} if analysis else {},
    }

"""The ``tdlab results`` commands' operations (publish, check, re-judge) on the records of
:mod:`tdlab.records`: the ones that need the experiments.

:func:`publish` copies a finished run's record to ``results/PROFILE/NAME.json``; a run written by a tdlab
that kept no record is analysed again by the current code (its measurements read from its stored metrics and
arrays) and says so (``judged_commit``, :func:`record_of_run`). :func:`load_record` reads a published record
and checks it against the experiments: a known experiment and profile, its file named for them
(:class:`~tdlab.records.RecordError`, one line naming the file and field). :func:`is_current` says whether it
was made at its profile's config as the code defines it now, and :func:`rejudge` judges its stored
measurements again with the current claims layer, without training (``tdlab results check``).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from tdlab.claims.serial import SerialError, health_from_json, measurements_from_json
from tdlab.config import echo, validate_config
from tdlab.records import (
    RECORD_NAME,
    Record,
    RecordError,
    jsonable,
    make_record,
    parse_record,
    record_path,
    record_text,
)
from tdlab.runs import Run, config_hash, source_commit
from tdlab.safeio import atomic_write

__all__ = [
    "is_current",
    "load_record",
    "load_records",
    "profile_config_hash",
    "publish",
    "record_of_run",
    "rejudge",
    "rejudged",
]


def record_of_run(run_dir: Path, commit: str | None = None) -> dict[str, Any]:
    """The record of the finished run ``run_dir``: its ``record.json``, or, for a run a tdlab that kept no
    record wrote, one made now by analysing the run with the current code (``commit``: the commit that
    trained it, when known)."""
    from tdlab.experiments.base import stored_experiment
    from tdlab.run_view import RunView

    run = Run(Path(run_dir))
    own = run.path / RECORD_NAME
    if own.is_file() and not own.is_symlink():
        return parse_record(own).model_dump()  # python mode: NaN stays NaN (JSON mode would make it null)
    summary = run.summary
    if not summary.get("claims") and summary.get("status") != "diverged":
        raise RecordError(f"{run.path}: no summary.json with claims; rebuild it with `tdlab report {run.path}`")
    exp, cfg = stored_experiment(run.path)
    analysis = None
    if summary.get("status", "done") == "done":
        analysis = exp.analyse(cfg, RunView(run), confidence=(summary.get("decide") or {}).get("confidence", 0.95))
        from tdlab.runner import claim_counts

        summary = {**summary, **claim_counts(analysis), "measurements": analysis.measurements}
    return make_record(run, summary, analysis, commit, source_commit())


def publish(run_dirs: Sequence[Path], results: Path, commit: str | None = None) -> list[Path]:
    """Write the record of each finished run in ``run_dirs`` to ``results/PROFILE/NAME.json`` (replacing the
    one there, atomically); returns the paths written. Every run is read and checked before any is written."""
    from tdlab.experiments.base import get

    docs = [record_of_run(d, commit) for d in run_dirs]
    for d, doc in zip(run_dirs, docs, strict=True):
        Record.model_validate(doc)
        if doc["profile"] not in get(doc["experiment"]).profiles:
            raise RecordError(f"{d}: profile {echo(doc['profile'])} is not one of {doc['experiment']}'s")
    written = []
    for doc in docs:
        path = record_path(results, doc["profile"], doc["experiment"])
        path.parent.mkdir(parents=True, exist_ok=True)
        atomic_write(path, record_text(doc))
        written.append(path)
    return written


def load_record(path: Path) -> Record:
    """A published record, checked: schema, known experiment and profile, its file named for them."""
    from tdlab.experiments.base import registry

    rec = parse_record(path)
    exps = registry()
    if rec.experiment not in exps:
        raise RecordError(f"{path}: experiment {echo(rec.experiment)} is not one tdlab has")
    if rec.profile not in exps[rec.experiment].profiles:
        raise RecordError(f"{path}: profile {echo(rec.profile)} is not one of {rec.experiment}'s")
    if Path(path).stem != rec.experiment:
        raise RecordError(f"{path}: holds {rec.experiment}'s record; a record is named for its experiment")
    return rec


def load_records(folder: Path) -> dict[str, Record]:
    """Every record in ``folder`` (``results/PROFILE``), by experiment; ``{}`` when the folder is absent."""
    folder = Path(folder)
    if not folder.is_dir():
        return {}
    return {rec.experiment: rec for rec in (load_record(p) for p in sorted(folder.glob("*.json")))}


def profile_config_hash(experiment: str, profile: str, sets: Sequence[str] = (), cfg: Any = None) -> str:
    """The config hash a run of ``experiment`` at ``profile`` (with ``sets``; ``cfg``: that config, built
    already) has with the current code: a record or a stopped run whose hash differs was made at a config the
    profile no longer has (the profile changed since, or it ran with ``--set``)."""
    from tdlab.experiments.base import get

    exp = get(experiment)
    cfg = exp.make_config(profile, list(sets)) if cfg is None else cfg
    return config_hash({"experiment": experiment, "profile": profile, "config": cfg.model_dump(mode="json")})


def is_current(rec: Record, sets: Sequence[str] = ()) -> bool:
    """Whether ``rec`` was made at the config its profile (with ``sets``) has with the current code."""
    return rec.config_hash == profile_config_hash(rec.experiment, rec.profile, sets)


def rejudged(rec: Record) -> Record:
    """``rec`` with its paper and sanity groups as the current claims layer judges its stored measurements
    (:func:`rejudge`), its settings diff against the current manifest, and ``judged_commit`` this source's
    commit; the numbers it was trained to are kept."""
    from tdlab.experiments.base import get

    groups = [g.to_dict() for g in rejudge(rec)]
    exp = get(rec.experiment)
    doc = rec.model_dump()
    doc.update(
        claims=[g for g in groups if g["kind"] == "paper"],
        sanity=[g for g in groups if g["kind"] == "sanity"],
        judged_commit=source_commit(),
        settings_diff=exp.settings_diff(validate_config(exp.Config, rec.config)),
    )
    return Record.model_validate(json.loads(json.dumps(doc, default=jsonable)))


def rejudge(rec: Record) -> list[Any]:
    """The record's paper and sanity groups judged again by the current claims layer on its stored
    measurements (no training): :class:`~tdlab.claims.judge.GroupResult` s in declaration order."""
    from tdlab.claims.judge import judge
    from tdlab.experiments.base import get
    from tdlab.rounds import lengths

    if rec.measured is None:
        raise RecordError(f"{rec.experiment}: a {rec.status} run has no measurements to judge")
    exp = get(rec.experiment)
    cfg = validate_config(exp.Config, rec.config)
    try:
        measured = measurements_from_json(rec.measured)
        health = health_from_json(rec.arms)
    except SerialError as exc:
        raise RecordError(f"{rec.experiment}: {exc}") from None
    return judge(exp.claims, measured, cfg, health, rec.confidence, lengths(exp, cfg))

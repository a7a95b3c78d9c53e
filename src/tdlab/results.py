"""Published results: one small record per finished run of a named profile, committed under
``results/PROFILE/NAME.json`` and read by ``tdlab findings --results`` and the documentation site.

A record holds what a reader of the verdicts needs and nothing of the arrays: the experiment, profile,
seed and members, the device, threads and wall time, the tdlab version and commit that trained it (and
the commit that judged it), the hash of its config and the config itself, every paper and sanity group
with its rows (numbers, intervals, causes), the arms' health and **the measurements the judge read**
(:mod:`tdlab.claims.serial`), so a later rule re-judges the run without training it again
(:func:`rejudge`).

Every finished run writes its record into its run directory (``record.json``, beside ``summary.json``);
``tdlab results publish RUN_DIR...`` (and ``tdlab batch``) copies it to ``results/PROFILE/NAME.json``. A
run written by a tdlab that kept no record is analysed again by the current code (its measurements read
from its stored metrics and arrays) and says so (``judged_commit``). A record is checked on load: its
schema, a known experiment and profile, verdicts and commits of the right form
(:class:`RecordError`, one line naming the file and field).
"""

from __future__ import annotations

import datetime as _dt
import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from tdlab.claims import VERDICTS
from tdlab.claims.serial import SerialError, health_from_json, health_to_json, measurements_from_json, measurements_to_json
from tdlab.config import echo, one_line, validate_config
from tdlab.runs import COMMIT_FORM, Run, RunDirError, config_hash, source_commit
from tdlab.safeio import atomic_write

__all__ = ["FORMAT", "RECORD_NAME", "Record", "RecordError", "make_record", "write_record", "record_text", "record_of_run",
           "publish", "load_record", "load_records", "rejudge", "rejudged", "record_path"]

FORMAT = "tdlab-record/1"
RECORD_NAME = "record.json"  # inside a run directory
_MAX_BYTES = 16 << 20  # a record holds numbers and text, never arrays


class RecordError(RunDirError):
    """A record that is missing, unreadable or not what tdlab writes (one line naming the file)."""


class Record(BaseModel):
    """A published record's schema (see the module)."""

    model_config = ConfigDict(extra="forbid")

    format: Literal["tdlab-record/1"]
    experiment: str
    paper: str
    figure: str
    profile: str
    seed: int
    members: int = Field(ge=1)
    status: Literal["done", "diverged"]
    error: str | None = None
    device: str
    gpu: str | None = None
    threads: int | None = None
    wall_time_s: float = Field(ge=0)
    tdlab_version: str
    commit: str | None  # the commit that trained it (None: the tdlab that ran it did not record one)
    judged_commit: str | None  # the commit whose claims layer judged it
    config_hash: str = Field(pattern=r"^[0-9a-f]{64}$")
    config: dict[str, Any]
    confidence: float = Field(gt=0.5, lt=1.0)
    claims: list[dict[str, Any]]
    sanity: list[dict[str, Any]]
    arms: dict[str, Any]
    measured: dict[str, Any] | None  # None: a diverged run, judged on nothing
    measurements: dict[str, Any] = Field(default_factory=dict)  # the summary's tables (values the report shows)
    created: str

    @field_validator("commit", "judged_commit")
    @classmethod
    def _commit_form(cls, v: str | None) -> str | None:
        if v is not None and not COMMIT_FORM.match(v):
            raise ValueError("a git commit: 7-40 lowercase hex digits, '+dirty' when the tree had changes")
        return v

    @field_validator("claims", "sanity")
    @classmethod
    def _groups(cls, groups: list[dict[str, Any]]) -> list[dict[str, Any]]:
        for g in groups:
            if not isinstance(g.get("id"), str) or g.get("verdict") not in VERDICTS or not isinstance(g.get("rows"), list) \
                    or not all(isinstance(r, dict) and isinstance(r.get("id"), str) and r.get("verdict") in VERDICTS
                               for r in g["rows"]):
                raise ValueError(f"each claim group needs an id (text), a verdict ({', '.join(VERDICTS)}) and rows with "
                                 f"an id and a verdict")
        return groups

    def counts(self) -> dict[str, int]:
        """Paper groups per verdict."""
        return {v: sum(g["verdict"] == v for g in self.claims) for v in VERDICTS}


def make_record(run: Run, summary: dict[str, Any], analysis: Any | None, commit: str | None,
                judged_commit: str | None) -> dict[str, Any]:
    """The record of a finished ``run`` from its ``summary`` and the ``analysis`` that judged it (``commit``:
    the commit that trained it, ``judged_commit``: the one that judged it)."""
    import tdlab

    conf = run.config
    env = summary.get("env") or {}
    decide = summary.get("decide") or {}
    doc = {
        "format": FORMAT, "experiment": summary["experiment"], "paper": summary["paper"], "figure": summary["figure"],
        "profile": str(summary.get("profile", conf.get("profile", "?"))), "seed": int(summary["seed"]),
        "members": int(summary["members"]), "status": summary.get("status", "done"), "error": summary.get("error"),
        "device": str(env.get("device", "?")), "gpu": env.get("gpu"), "threads": env.get("torch_threads"),
        "wall_time_s": float(summary.get("wall_time_s", 0.0)), "tdlab_version": str(env.get("tdlab", tdlab.__version__)),
        "commit": commit, "judged_commit": judged_commit, "config_hash": config_hash(conf),
        "config": conf.get("config", {}), "confidence": float(decide.get("confidence", 0.95)),
        "claims": summary.get("claims", []), "sanity": summary.get("sanity", []), "arms": summary.get("arms", {}),
        "measured": measurements_to_json(analysis.measured) if analysis is not None and analysis.measured is not None else None,
        "measurements": summary.get("measurements", {}),
        "created": _dt.datetime.now(_dt.timezone.utc).replace(microsecond=0).isoformat(),
    }
    if analysis is not None:
        doc["arms"] = health_to_json(analysis.health)
    return json.loads(json.dumps(doc, default=_jsonable))  # what load_record will read back


def _jsonable(x: Any) -> Any:
    try:
        return float(x)
    except (TypeError, ValueError):
        return str(x)


def record_of_run(run_dir: Path, commit: str | None = None) -> dict[str, Any]:
    """The record of the finished run ``run_dir``: its ``record.json``, or, for a run a tdlab that kept no
    record wrote, one made now by analysing the run with the current code (``commit``: the commit that
    trained it, when known)."""
    from tdlab.experiments.base import get
    from tdlab.experiments.view import RunView

    run = Run(Path(run_dir))
    own = run.path / RECORD_NAME
    if own.is_file() and not own.is_symlink():
        return _parse(own).model_dump()  # python mode: NaN stays NaN (JSON mode would make it null)
    summary = run.summary
    if not summary.get("claims") and summary.get("status") != "diverged":
        raise RecordError(f"{run.path}: no summary.json with claims; rebuild it with `tdlab report {run.path}`")
    conf = run.config
    exp = get(conf["experiment"])
    analysis = None
    if summary.get("status", "done") == "done":
        cfg = validate_config(exp.Config, conf.get("config", {}))
        analysis = exp.analyse(cfg, RunView(run), confidence=(summary.get("decide") or {}).get("confidence", 0.95))
        from tdlab.experiments.runner import claim_counts

        summary = {**summary, **claim_counts(analysis), "measurements": analysis.measurements}
    return make_record(run, summary, analysis, commit, source_commit())


def record_text(doc: dict[str, Any]) -> str:
    """A record as committed: one field a line (readable diffs), the per-member measurements (``measured``,
    ``measurements``) compact on theirs."""
    lines = [f" {json.dumps(k)}: {json.dumps(v, allow_nan=True, separators=(',', ':')) if k in ('measured', 'measurements') else json.dumps(v, indent=1, allow_nan=True)}"
             for k, v in doc.items()]
    return "{\n" + ",\n".join(lines) + "\n}\n"


def write_record(run: Run, summary: dict[str, Any], analysis: Any | None) -> None:
    """``record.json`` of a run being reported: trained by the commit its environment names, judged now."""
    doc = make_record(run, summary, analysis, (summary.get("env") or {}).get("commit"), source_commit())
    atomic_write(run.path / RECORD_NAME, record_text(doc))


def record_path(results: Path, profile: str, experiment: str) -> Path:
    """``results/PROFILE/NAME.json``."""
    return Path(results) / profile / f"{experiment}.json"


def publish(run_dirs: Sequence[Path], results: Path, commit: str | None = None) -> list[Path]:
    """Write the record of each finished run in ``run_dirs`` to ``results/PROFILE/NAME.json`` (replacing the
    one there, atomically); returns the paths written. Every run is read and checked before any is written."""
    from tdlab.experiments.base import registry

    docs = [record_of_run(d, commit) for d in run_dirs]
    for d, doc in zip(run_dirs, docs):
        Record.model_validate(doc)
        if doc["profile"] not in registry()[doc["experiment"]].profiles:
            raise RecordError(f"{d}: profile {echo(doc['profile'])} is not one of {doc['experiment']}'s")
    written = []
    for doc in docs:
        path = record_path(results, doc["profile"], doc["experiment"])
        path.parent.mkdir(parents=True, exist_ok=True)
        atomic_write(path, record_text(doc))
        written.append(path)
    return written


def _parse(path: Path) -> Record:
    path = Path(path)
    if path.is_symlink() or not path.is_file():
        raise RecordError(f"{path}: not a record (not a regular file)")
    if path.stat().st_size > _MAX_BYTES:
        raise RecordError(f"{path}: {path.stat().st_size} bytes, more than a record ever holds ({_MAX_BYTES})")
    try:
        doc = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError, RecursionError) as exc:
        raise RecordError(f"{path}: not a JSON record ({one_line(str(exc))[:120]})") from None
    try:
        return Record.model_validate(doc)
    except ValidationError as exc:
        err = exc.errors()[0]
        field = ".".join(str(p) for p in err["loc"]) or "(record)"
        raise RecordError(f"{path}: '{field}' {err['msg']}") from None


def load_record(path: Path) -> Record:
    """A published record, checked: schema, known experiment and profile, its file named for them."""
    from tdlab.experiments.base import registry

    rec = _parse(path)
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


def rejudged(rec: Record) -> Record:
    """``rec`` with its paper and sanity groups as the current claims layer judges its stored measurements
    (:func:`rejudge`), and ``judged_commit`` this source's commit; the numbers it was trained to are kept."""
    groups = [g.to_dict() for g in rejudge(rec)]
    doc = rec.model_dump()
    doc.update(claims=[g for g in groups if g["kind"] == "paper"], sanity=[g for g in groups if g["kind"] == "sanity"],
               judged_commit=source_commit())
    return Record.model_validate(json.loads(json.dumps(doc, default=_jsonable)))


def rejudge(rec: Record) -> list[Any]:
    """The record's paper and sanity groups judged again by the current claims layer on its stored
    measurements (no training): :class:`~tdlab.claims.judge.GroupResult` s in declaration order."""
    from tdlab.claims.judge import judge
    from tdlab.experiments.base import get

    if rec.measured is None:
        raise RecordError(f"{rec.experiment}: a {rec.status} run has no measurements to judge")
    exp = get(rec.experiment)
    cfg = validate_config(exp.Config, rec.config)
    try:
        measured = measurements_from_json(rec.measured)
        health = health_from_json(rec.arms)
    except SerialError as exc:
        raise RecordError(f"{rec.experiment}: {exc}") from None
    return judge(exp.claims, measured, cfg, health, rec.confidence)

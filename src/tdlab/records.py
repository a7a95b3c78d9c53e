"""The one module that holds records: a finished run's record, its schema, how it is made from the run and
written as text, where it is stored once published and how it is read back.

Every finished run writes its record into its run directory (``record.json``, beside ``summary.json``, as
the runner reports it); ``tdlab results publish RUN_DIR...`` (and ``tdlab batch``) copies it to
``results/PROFILE/NAME.json`` (:func:`record_path`), committed and read by ``tdlab findings --results`` and
the documentation site. A record holds what a reader of the verdicts needs and nothing of the arrays: the
experiment, profile, seed and members, the device, threads and wall time, the tdlab version and commit that
trained it (and the commit that judged it), the hash of its config and the config itself, every paper and
sanity group with its rows (numbers, intervals, causes), the arms' health and **the measurements the judge
read** (:mod:`tdlab.claims.serial`), so a later rule re-judges the run without training it again. A record is
checked as it is read (:func:`parse_record`): its schema, verdicts and commits of the right form
(:class:`RecordError`, one line naming the file and field).

This module needs no experiment (the runner writes records without importing one); what does — publishing a
run's record, checking a published one against the experiments, re-judging it — is :mod:`tdlab.results`.
"""

from __future__ import annotations

import datetime as _dt
import json
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from tdlab.claims import VERDICTS
from tdlab.claims.serial import health_to_json, measurements_to_json
from tdlab.config import one_line
from tdlab.runs import COMMIT_FORM, Run, RunDirError, config_hash, source_commit
from tdlab.safeio import atomic_write

__all__ = [
    "FORMAT",
    "RECORD_NAME",
    "Record",
    "RecordError",
    "jsonable",
    "make_record",
    "parse_record",
    "record_path",
    "record_text",
    "write_record",
]

FORMAT = "tdlab-record/1"
RECORD_NAME = "record.json"  # inside a run directory
_MAX_BYTES = 16 << 20  # a record holds numbers and text, never arrays


class RecordError(RunDirError):
    """A record that is missing, unreadable or not what tdlab writes (one line naming the file)."""


class Segment(BaseModel):
    """One process's part of a resumed run: the commit, device and threads that ran it (``None``: a part run
    before segments were kept) and its wall seconds."""

    model_config = ConfigDict(extra="forbid")

    commit: str | None
    device: str | None
    threads: int | None
    wall_s: float = Field(ge=0)

    @field_validator("commit")
    @classmethod
    def _commit_form(cls, v: str | None) -> str | None:
        return _checked_commit(v)


def _checked_commit(v: str | None) -> str | None:
    if v is not None and not COMMIT_FORM.match(v):
        raise ValueError("a git commit: 7-40 lowercase hex digits, '+dirty' when the tree had changes")
    return v


def paper_vocabulary(doc: Any) -> Any:
    """``doc`` (a record as read) in today's words: records written before the paper was called the paper in code
    named it "seed" in four places (a row's ``provenance``, in the groups and the measurements; the cause ``no seed
    rows``; a settings diff's ``seed`` value; the measurement ``lr_vs_seed``, now ``lr_vs_paper``); "seed" is now
    only ever a random seed. Anything else is returned as it is."""
    if not isinstance(doc, dict):
        return doc
    doc = dict(doc)
    for key in ("claims", "sanity"):
        groups = doc.get(key)
        if isinstance(groups, list):
            doc[key] = [_group_in_paper_words(g) for g in groups]
    measured = doc.get("measured")
    if isinstance(measured, dict) and isinstance(measured.get("rows"), dict):
        doc["measured"] = {
            **measured,
            "rows": {
                claim: [_row_in_paper_words(r) for r in rows] if isinstance(rows, list) else rows
                for claim, rows in measured["rows"].items()
            },
        }
    values = doc.get("measurements")
    if isinstance(values, dict) and "lr_vs_seed" in values:
        doc["measurements"] = {("lr_vs_paper" if k == "lr_vs_seed" else k): v for k, v in values.items()}
    diff = doc.get("settings_diff")
    if isinstance(diff, list):
        doc["settings_diff"] = [
            {("paper" if k == "seed" else k): v for k, v in d.items()} if isinstance(d, dict) else d for d in diff
        ]
    return doc


def _group_in_paper_words(group: Any) -> Any:
    if not isinstance(group, dict):
        return group
    group = dict(group)
    if group.get("cause") == "no seed rows":
        group["cause"] = "no paper rows"
    rows = group.get("rows")
    if isinstance(rows, list):
        group["rows"] = [_row_in_paper_words(r) for r in rows]
    return group


def _row_in_paper_words(row: Any) -> Any:
    return {**row, "provenance": "paper"} if isinstance(row, dict) and row.get("provenance") == "seed" else row


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
    # a run stopped and resumed (tdlab batch, --until): the processes that trained it, in order; the commit
    # above is the last one's
    segments: list[Segment] | None = None
    # the fields where the config departs from the settings the paper states, ``{field, paper, run, where}``
    # (tdlab.experiments.manifest); empty: at the seed's settings; None: written before manifests were kept
    settings_diff: list[dict[str, Any]] | None = None
    # what made the numbers besides the code (a float sum's order, and so the last bits, depend on them):
    # platform, processor, Python, torch, numpy, BLAS, the parallel backend; None: written before they were kept
    machine: dict[str, Any] | None = None

    @model_validator(mode="before")
    @classmethod
    def _in_paper_words(cls, doc: Any) -> Any:
        return paper_vocabulary(doc)

    @field_validator("commit", "judged_commit")
    @classmethod
    def _commit_form(cls, v: str | None) -> str | None:
        return _checked_commit(v)

    def trained_by(self) -> str:
        """The commit that trained the run, as tables print it (12 digits); a resumed run trained by several
        commits names each, in order, with the hours it ran (``not recorded`` for a part run before segments
        were kept)."""
        parts: list[tuple[str, float]] = []
        for g in self.segments or []:
            name = (g.commit or "not recorded")[:12]
            if parts and parts[-1][0] == name:
                parts[-1] = (name, parts[-1][1] + g.wall_s)
            else:
                parts.append((name, g.wall_s))
        if len(parts) < 2:
            return (self.commit or "not recorded")[:12]
        return ", ".join(f"{c} ({s / 3600:.1f} h)" for c, s in parts)

    @field_validator("claims", "sanity")
    @classmethod
    def _groups(cls, groups: list[dict[str, Any]]) -> list[dict[str, Any]]:
        for g in groups:
            if (
                not isinstance(g.get("id"), str)
                or g.get("verdict") not in VERDICTS
                or not isinstance(g.get("rows"), list)
                or not all(
                    isinstance(r, dict) and isinstance(r.get("id"), str) and r.get("verdict") in VERDICTS
                    for r in g["rows"]
                )
            ):
                raise ValueError(
                    f"each claim group needs an id (text), a verdict ({', '.join(VERDICTS)}) and rows with "
                    f"an id and a verdict"
                )
        return groups

    def counts(self) -> dict[str, int]:
        """Paper groups per verdict."""
        return {v: sum(g["verdict"] == v for g in self.claims) for v in VERDICTS}


def make_record(
    run: Run, summary: dict[str, Any], analysis: Any | None, commit: str | None, judged_commit: str | None
) -> dict[str, Any]:
    """The record of a finished ``run`` from its ``summary`` and the ``analysis`` that judged it (``commit``:
    the commit that trained it, ``judged_commit``: the one that judged it)."""
    import tdlab

    conf = run.config
    env = summary.get("env") or {}
    decide = summary.get("decide") or {}
    doc = {
        "format": FORMAT,
        "experiment": summary["experiment"],
        "paper": summary["paper"],
        "figure": summary["figure"],
        "profile": str(summary.get("profile", conf.get("profile", "?"))),
        "seed": int(summary["seed"]),
        "members": int(summary["members"]),
        "status": summary.get("status", "done"),
        "error": summary.get("error"),
        "device": str(env.get("device", "?")),
        "gpu": env.get("gpu"),
        "threads": env.get("torch_threads"),
        "wall_time_s": float(summary.get("wall_time_s", 0.0)),
        "tdlab_version": str(env.get("tdlab", tdlab.__version__)),
        "commit": commit,
        "judged_commit": judged_commit,
        "config_hash": config_hash(conf),
        "config": conf.get("config", {}),
        "confidence": float(decide.get("confidence", 0.95)),
        "claims": summary.get("claims", []),
        "sanity": summary.get("sanity", []),
        "arms": summary.get("arms", {}),
        "measured": measurements_to_json(analysis.measured)
        if analysis is not None and analysis.measured is not None
        else None,
        "measurements": summary.get("measurements", {}),
        "created": _dt.datetime.now(_dt.UTC).replace(microsecond=0).isoformat(),
    }
    if summary.get("segments"):
        doc["segments"] = summary["segments"]
    keys = ("platform", "processor", "cpu", "python", "torch", "numpy", "blas", "parallel")
    if any(k in env for k in keys):
        doc["machine"] = {k: env.get(k) for k in keys}
    if summary.get("settings_diff") is not None:
        doc["settings_diff"] = summary["settings_diff"]
    if analysis is not None:
        doc["arms"] = health_to_json(analysis.health)
    return json.loads(json.dumps(doc, default=jsonable))  # what load_record will read back


def jsonable(x: Any) -> Any:
    """What ``json.dumps`` cannot write, as a number where it is one (numpy scalars), else as text."""
    try:
        return float(x)
    except (TypeError, ValueError):
        return str(x)


def parse_record(path: Path) -> Record:
    """A record file read and checked against the schema (:class:`RecordError`, one line naming the field)."""
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


def record_path(results: Path, profile: str, experiment: str) -> Path:
    """``results/PROFILE/NAME.json``: where the record of ``experiment`` at ``profile`` is published."""
    return Path(results) / profile / f"{experiment}.json"


def record_text(doc: dict[str, Any]) -> str:
    """A record as committed: one field a line (readable diffs), the per-member measurements (``measured``,
    ``measurements``) compact on theirs."""
    lines = [
        f" {json.dumps(k)}: {json.dumps(v, allow_nan=True, separators=(',', ':')) if k in ('measured', 'measurements') else json.dumps(v, indent=1, allow_nan=True)}"
        for k, v in doc.items()
    ]
    return "{\n" + ",\n".join(lines) + "\n}\n"


def write_record(run: Run, summary: dict[str, Any], analysis: Any | None) -> None:
    """``record.json`` of a run being reported: trained by the commit its environment names, judged now."""
    doc = make_record(run, summary, analysis, (summary.get("env") or {}).get("commit"), source_commit())
    atomic_write(run.path / RECORD_NAME, record_text(doc))

"""The run directory: one per run, written atomically.

Layout::

    RUN/config.yaml        the full validated config (experiment, profile, seed, members, ...)
    RUN/metrics.parquet    long format: arm, step, member, name, value
    RUN/arrays/ARM.safetensors   final parameters of every member of an arm (member axis first)
    RUN/figures/*.png
    RUN/summary.json       status, claims (expected / measured / holds), measurements, environment
    RUN/report.html

A run is built in a hidden staging folder ``OUT/.staging-ID`` and renamed into place when it ends
(done, or stopped by a diverging loss: then ``status`` says so), so a run directory that exists is
never half-written. Single files are replaced with temp-file + rename, and every file gets the mode
a plainly created file would (``0o666 & ~umask``). A run killed mid-way leaves its staging folder,
with checkpoints (JSON + safetensors, never pickles: :mod:`tdlab.train.checkpoint`), for ``tdlab run
--resume OUT/ID``; a finished run whose final rename fails keeps its staging folder whole. A stopped
run's staging folder also keeps ``elapsed.json``, the wall seconds its segments ran, so a run resumed
across machines reports its whole wall time (a segment killed outright adds none).

While a process writes a run (a new one or ``--resume``) it holds an exclusive lock (``flock``) on
the staging folder, released when the run ends or the process dies: a second ``tdlab run`` of the
same run id, or a ``--resume`` of it, is refused with "is running" (:class:`RunBusyError`) instead of
writing into the same folder.

Reading a run never follows a symlink inside it and never reads more than a run file can hold
(:func:`tdlab.safeio.open_inside`).

A run id is one plain folder name (:func:`check_run_id`): letters, digits, ``_ . -``, not starting
with ``.``, so it can neither leave ``OUT`` nor pass for a staging folder.
"""

from __future__ import annotations

import contextlib
import datetime as _dt
import errno
import fcntl
import hashlib
import json
import os
import platform
import re
import shutil
import stat
import subprocess
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import TYPE_CHECKING, Any

import yaml

from tdlab.config import ECHO_CHARS, ConfigError, deep_merge, echo, one_line, parse_overrides
from tdlab.safeio import (
    RunDirError,
    YamlBombError,
    atomic_write,
    copy_inside,
    file_mode,
    legacy_pickles,
    load_yaml,
    read_inside,
    refuse_pickle,
)

__all__ = [
    "METRIC_COLUMNS",
    "Run",
    "RunBusyError",
    "RunDirError",
    "RunNotMovedError",
    "RunWriter",
    "arm_files",
    "arm_stem",
    "arrays_file",
    "atomic_write",
    "check_run_id",
    "config_hash",
    "copy_arrays",
    "environment",
    "file_mode",
    "fit_checkpoint",
    "list_runs",
    "read_arrays",
    "segment_ok",
    "staged_done",
    "staged_elapsed",
    "staged_progress",
    "staged_segments",
    "staging_path",
]

METRIC_COLUMNS = ["arm", "step", "member", "name", "value"]
MAX_TEXT_BYTES = 1 << 30  # config.yaml and summary.json: a larger one is not a file tdlab wrote
if TYPE_CHECKING:  # torch, pandas, pyarrow and safetensors are imported where used: `tdlab list` needs none
    import pandas as pd
    import pyarrow as pa
    import torch


class RunBusyError(RunDirError):
    """A run directory another tdlab process is writing right now (it holds the run's lock)."""


class RunNotMovedError(RuntimeError):
    """A finished run whose staging folder could not be renamed into place; the folder is kept
    intact, checkpoints included (the CLI prints one line naming it and exits with code 1)."""


# A run id is one plain folder name under --out: no separators, no '..', not hidden (staging
# folders are hidden), not empty.
RUN_ID_PATTERN = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,199}")


def check_run_id(run_id: str) -> str:
    """``run_id`` if it matches :data:`RUN_ID_PATTERN`; otherwise a one-line :class:`ConfigError`."""
    if not isinstance(run_id, str) or not RUN_ID_PATTERN.fullmatch(run_id):
        raise ConfigError(
            f"--run-id: {echo(run_id)} is not allowed; a run id is 1-200 letters, digits, '_', '.', '-', "
            f"starting with a letter or digit (no '/', no leading '.')"
        )
    return run_id


# What identifies a ``--decide`` run besides its config: its plan (not the rounds it went through).
DECIDE_IDENTITY = ("looks", "alpha", "growth", "max_members", "budget_s")


def config_hash(conf: dict[str, Any]) -> str:
    """SHA-256 of a run's identity: ``experiment``, ``profile`` and the full ``config`` of a
    ``config.yaml`` mapping (key order and YAML formatting do not matter). A ``--decide`` run is the
    run that was asked for: its config with the first look's members, and its plan (the members its
    rounds reached, and the training length they grew to, are not part of its identity, so a sweep finds
    a decided point again)."""
    config = conf.get("config", {})
    ident = {"experiment": conf.get("experiment"), "profile": conf.get("profile"), "config": config}
    decide = conf.get("decide")
    if isinstance(decide, dict):
        schedule = decide.get("schedule")
        if isinstance(schedule, list) and schedule and isinstance(config, dict):
            ident["config"] = {**config, "members": schedule[0]}
        first = decide.get("first_length")
        if isinstance(first, dict) and first and isinstance(ident["config"], dict):  # the training length it began with
            with contextlib.suppress(ConfigError):  # a damaged block: the identity keeps the stored length
                ident["config"] = deep_merge(
                    ident["config"], parse_overrides(f"{k}={json.dumps(v)}" for k, v in first.items())
                )
        ident["decide"] = {k: decide.get(k) for k in DECIDE_IDENTITY}
    return hashlib.sha256(json.dumps(ident, sort_keys=True, default=str).encode()).hexdigest()


def environment(device: str) -> dict[str, Any]:
    """Versions and machine facts recorded with every run."""
    import numpy

    import tdlab

    env = {
        "tdlab": tdlab.__version__,
        "python": platform.python_version(),
        "torch": torch_module().__version__,
        "numpy": numpy.__version__,
        "platform": platform.platform(),
        "processor": platform.machine(),
        "cpu": cpu_model(),
        "cpu_count": os.cpu_count(),
        "torch_threads": torch_module().get_num_threads(),
        **_math_libraries(),
        "device": device,
        "commit": source_commit(),
    }
    if device.startswith("cuda") and torch_module().cuda.is_available():
        env["gpu"] = torch_module().cuda.get_device_name(0)
    return env


def cpu_model() -> str:
    """The CPU's model name (``/proc/cpuinfo`` on Linux, else :func:`platform.processor`): two machines of one
    platform string may still round differently, since the BLAS picks its kernels by the CPU's features."""
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def _math_libraries() -> dict[str, str]:
    """The BLAS and the parallel backend torch was built with (a float sum's order, and so a number's last
    bits, depends on them and on the thread count)."""
    torch = torch_module()
    blas = re.search(r"BLAS_INFO=([\w.-]+)", torch.__config__.show())
    backend = re.search(r"ATen parallel backend: ([^\n]+)", torch.__config__.parallel_info())
    return {
        "blas": blas.group(1) if blas else "unknown",
        "parallel": backend.group(1).strip() if backend else "unknown",
    }


# A git commit as records and environments name it: 7-40 hex digits, "+dirty" when the tree had changes.
COMMIT_FORM = re.compile(r"^[0-9a-f]{7,40}(\+dirty)?$")


@lru_cache(maxsize=1)
def source_commit() -> str | None:
    """The git commit of the tdlab source that is running (``+dirty`` when the package's folder has uncommitted
    changes), ``TDLAB_COMMIT`` when set (a copy of the tree without ``.git``), ``None`` when unknown (an
    installed wheel). Read once per process."""
    env = os.environ.get("TDLAB_COMMIT", "").strip()
    if env:
        return env if COMMIT_FORM.match(env) else None
    src = Path(__file__).resolve().parent
    try:
        head = subprocess.run(["git", "-C", str(src), "rev-parse", "HEAD"], capture_output=True, text=True, timeout=10)
        if head.returncode != 0:
            return None
        dirty = subprocess.run(
            ["git", "-C", str(src), "status", "--porcelain", "--", "."], capture_output=True, text=True, timeout=10
        )
    except (OSError, subprocess.SubprocessError):
        return None
    commit = head.stdout.strip()
    if not COMMIT_FORM.match(commit):
        return None
    return commit + ("+dirty" if dirty.returncode == 0 and dirty.stdout.strip() else "")


def torch_module() -> Any:
    import torch

    return torch


def _metrics_table(rows: Iterable[tuple[str, int, int, str, float]]) -> pa.Table:
    arm, step, member, name, value = zip(*rows, strict=True) if rows else ([], [], [], [], [])
    import pyarrow as pa

    schema = pa.schema(
        [
            ("arm", pa.string()),
            ("step", pa.int64()),
            ("member", pa.int64()),
            ("name", pa.string()),
            ("value", pa.float64()),
        ]
    )
    return pa.Table.from_arrays(
        [
            pa.array(arm, pa.string()),
            pa.array(step, pa.int64()),
            pa.array(member, pa.int64()),
            pa.array(name, pa.string()),
            pa.array(value, pa.float64()),
        ],
        schema=schema,
    )


class RunWriter:
    """Builds a run directory in its staging folder ``OUT/.staging-RUN_ID``; :meth:`finish` moves
    it into place as ``OUT/RUN_ID``.

    Use as a context manager. On an exception the staging folder is removed unless it holds
    checkpoints (then it is kept for ``tdlab run --resume``) or :meth:`finish` could not move it
    into place (then it holds a finished run); a process killed outright leaves it too. A diverged
    run finishes with ``status="diverged"`` and is kept.
    """

    def __init__(self, out: Path, experiment: str, run_id: str | None = None) -> None:
        self.out = Path(out)
        stamp = _dt.datetime.now().strftime("%Y-%m-%dT%H-%M-%S-%f")
        self.run_id = check_run_id(run_id) if run_id is not None else f"{stamp}_{experiment}"
        self.final = self.out / self.run_id
        if self.final.exists():
            raise RunDirError(f"run directory {self.final} already exists")
        self.path = staging_path(self.final)
        self.rows: list[tuple[str, int, int, str, float]] = []
        self.finished = self.keep = False
        self._lock: int | None = None
        self.out.mkdir(parents=True, exist_ok=True)
        try:
            self.path.mkdir()
        except FileExistsError:
            raise self._taken() from None
        self._lock = _try_lock(self.path)
        if self._lock is None:  # another process created the same staging folder this very moment
            raise self._taken()

    def _taken(self) -> RunDirError:
        """The error for a staging folder that already exists: running (locked) or interrupted."""
        if staging_busy(self.path):
            return _busy(self.final, self.path)
        if not (self.path / "config.yaml").is_file():
            return RunDirError(
                f"{self.path} exists but holds no config.yaml (a run that failed as it started); "
                f"remove it, or choose another --run-id"
            )
        return RunDirError(f"{self.path} exists: an interrupted run; resume it with `tdlab run --resume {self.final}`")

    @classmethod
    def reopen(cls, final: Path) -> RunWriter:
        """The writer of an interrupted run (its staging folder), with the metrics it had stored."""
        final = Path(final)
        staging = final if final.name.startswith(".staging-") else staging_path(final)
        if staging.name.startswith(".staging-"):
            final = staging.with_name(staging.name[len(".staging-") :])
        if (final.exists() or final.is_symlink()) and not staging.exists():
            Run(final)  # not a run directory at all: says why
            raise RunDirError(f"{final} is a finished run; nothing to resume")
        if not (staging / "config.yaml").is_file():
            raise RunDirError(f"{final}: no interrupted run to resume (expected {staging}/config.yaml)")
        for part in ("checkpoints", "arrays"):  # what a resume writes into: folders of the run's own, or absent
            p = staging / part
            if os.path.lexists(p) and (p.is_symlink() or not p.is_dir()):
                raise RunDirError(
                    f"{p}: not a folder (a file or a link where the run keeps its {part}); the staging folder is "
                    "kept as it is: move that away to resume"
                )
        for pickled in legacy_pickles(staging / "checkpoints"):  # refused before anything is read
            raise refuse_pickle(pickled)
        self = cls.__new__(cls)
        self.out, self.run_id, self.final, self.path = final.parent, final.name, final, staging
        self.finished = False
        # a resumed staging folder holds an earlier process's work: whatever goes wrong now, it is never deleted
        self.keep = True
        self.rows = []
        self._lock = _try_lock(staging)
        if self._lock is None:
            raise _busy(final, staging)
        if (staging / "metrics.parquet").is_file():
            df = Run.read_metrics(staging / "metrics.parquet")
            self.rows = list(df[METRIC_COLUMNS].itertuples(index=False, name=None))
        return self

    def __enter__(self) -> RunWriter:
        return self

    def __exit__(self, exc_type, exc, tb) -> None:
        if not self.finished and not self.keep and not (self.path / "checkpoints").is_dir():
            shutil.rmtree(self.path, ignore_errors=True)
        self.release()

    def release(self) -> None:
        """Give up the run's lock (done at the end of the ``with`` block and by :meth:`finish`)."""
        fd, self._lock = getattr(self, "_lock", None), None
        if fd is not None:
            os.close(fd)  # closing the descriptor drops the flock

    __del__ = release  # a writer dropped without its ``with`` block must not keep the run locked

    def config_hash(self) -> str:
        """:func:`config_hash` of the staged ``config.yaml`` (stored in checkpoints: a resume of an
        edited config is refused)."""
        return config_hash(Run.read_config(self.path / "config.yaml"))

    def write_config(self, config: dict[str, Any]) -> None:
        atomic_write(self.path / "config.yaml", yaml.safe_dump(config, sort_keys=False))

    def save_segments(self, segments: list[dict[str, Any]]) -> None:
        """Keep the segments this run has run so far (:func:`staged_segments`: one per process, with its commit,
        device, threads and wall seconds) and their total wall time in its staging folder (a stop; a resume adds
        its own)."""
        total = float(sum(g["wall_s"] for g in segments))
        atomic_write(self.path / ELAPSED_FILE, json.dumps({"wall_time_s": total, "segments": segments}) + "\n")

    def add_metrics(self, arm: str, rows: Iterable[tuple[int, int, str, float]]) -> None:
        self.rows.extend((arm, int(s), int(m), str(n), float(v)) for s, m, n, v in rows)
        self.flush_metrics()

    def arm_rows(self, arm: str) -> list[tuple[int, int, str, float]]:
        """Stored metrics of ``arm`` as ``(step, member, name, value)``."""
        return [(s, m, n, v) for a, s, m, n, v in self.rows if a == arm]

    def flush_metrics(self) -> None:
        tmp = self.path / ".metrics.parquet.tmp"
        import pyarrow.parquet as pq

        pq.write_table(_metrics_table(self.rows), tmp)
        os.replace(tmp, self.path / "metrics.parquet")

    def clear_staged(self) -> None:
        """Drop the staged metrics, arrays and checkpoints (``config.yaml`` stays): the run is built
        again in the same staging folder (a ``--decide`` round)."""
        self.rows = []
        self.flush_metrics()
        for folder in ("arrays", "checkpoints"):
            for f in (self.path / folder).glob("*"):
                f.unlink()

    def arrays_path(self, arm: str) -> Path:
        return arrays_file(self.path, arm)

    def save_arrays(self, arm: str, states: list[dict[str, torch.Tensor]]) -> None:
        """Stack per-member states along a leading member axis and save them as safetensors."""
        if not states:
            return
        from safetensors.torch import save

        torch = torch_module()
        stacked = {k: torch.stack([s[k] for s in states]).contiguous() for k in states[0]}
        atomic_write(self.arrays_path(arm), save(stacked))  # save_file would make it 0600

    def load_arrays(self, arm: str) -> list[dict[str, torch.Tensor]]:
        """Per-member states saved for ``arm`` (the inverse of :meth:`save_arrays`), read as :func:`read_arrays`
        reads them (a damaged file, a link or a folder in its place is a :class:`RunDirError`, one line)."""
        stacked = read_arrays(self.path, arm)
        n = next(iter(stacked.values())).shape[0] if stacked else 0
        return [{k: v[i] for k, v in stacked.items()} for i in range(n)]

    def finish(self) -> Run:
        """Move the staged run into place, then drop its checkpoints; returns the finished :class:`Run`.

        Nothing is deleted before the rename succeeded: when it fails (``--out`` made read-only,
        the final name taken meanwhile) the staging folder is kept as it is, checkpoints included.

        Raises:
            RunNotMovedError: the rename failed; names the staging folder and the cause.
        """
        self.flush_metrics()
        (self.path / ELAPSED_FILE).unlink(missing_ok=True)  # the summary's wall time holds it now
        try:
            os.replace(self.path, self.final)
        except OSError as exc:
            self.keep = True
            raise RunNotMovedError(
                f"run {self.run_id} finished but could not be moved into place ({exc.strerror or type(exc).__name__}: "
                f"{self.final}); everything is kept in {self.path}; rename it to {self.final.name} or run "
                f"`tdlab run --resume {self.final}`"
            ) from None
        self.finished = True
        shutil.rmtree(self.final / "checkpoints", ignore_errors=True)
        self.release()
        return Run(self.final)


def staging_busy(staging: Path) -> bool:
    """Whether a process holds the run lock of the staging folder ``staging`` (a run still building there)."""
    fd = _try_lock(staging)
    if fd is None:
        return True
    os.close(fd)
    return False


def _try_lock(folder: Path) -> int | None:
    """A descriptor of ``folder`` holding an exclusive ``flock`` on it; ``None`` when another open
    descriptor (another process, or another writer in this one) holds it."""
    fd = os.open(folder, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        os.close(fd)
        return None
    return fd


def _busy(final: Path, staging: Path) -> RunBusyError:
    return RunBusyError(
        f"run {final.name} is running: another tdlab process is writing {staging} (it holds the "
        f"run's lock); wait for it to finish (`tdlab runs --out {final.parent}` lists it then), or "
        f"choose another --run-id"
    )


def arrays_file(folder: Path, arm: str) -> Path:
    """The final parameters of ``arm`` in the run folder ``folder`` (:meth:`RunWriter.save_arrays`)."""
    return Path(folder) / "arrays" / f"{arm_stem(arm)}.safetensors"


def arm_stem(arm: str) -> str:
    """The file name stem an arm is stored under (``sec2/standard`` -> ``sec2__standard``)."""
    return arm.replace("/", "__")


def fit_checkpoint(folder: Path, arm: str, k: int = 0) -> Path:
    """The trainer checkpoint of ``arm`` in the run folder ``folder`` (``+K``: the members after the K a
    ``--decide`` round reused)."""
    return Path(folder) / "checkpoints" / f"{arm_stem(arm)}{f'+{k}' if k else ''}.json"


def _checkpoint_meta(checkpoint: Path) -> Any:
    """The ``meta`` of a checkpoint's JSON, read inside its folder; ``None`` where it does not read."""
    try:
        return json.loads(read_inside(checkpoint.parent, checkpoint.name))["meta"]
    except (OSError, ValueError, KeyError, TypeError, RunDirError):
        return None


def staged_progress(staging: Path) -> str:
    """What a stopped run's staging folder ``staging`` holds: the arms it finished (their arrays, which a
    resume reloads) and the fits and memos it checkpointed mid-way (a stored fit keeps no checkpoint), with
    the step each trainer's fit reached (``sec2/standard at step 1,866 of 8,000``)."""
    arms = [f for f in (staging / "arrays").glob("*.safetensors") if "@" not in f.name]
    mid = sorted((staging / "checkpoints").glob("*.json"))
    where = [w for w in map(_fit_step, mid) if w]
    return f"{len(arms)} arm(s) finished, {len(mid)} checkpointed mid-way" + (f": {', '.join(where)}" if where else "")


def _step_of(meta: Any) -> tuple[int, int] | None:
    """``(step, steps)`` of a fit's checkpoint meta: a trainer's running chunk (``meta.chunk.step``), or a
    regression fit's, whose members train as one (``kind: regression``, ``meta.step``); ``None`` for another
    kind (a memo) or what does not read."""
    try:
        step = meta["step"] if meta.get("kind") == "regression" else meta["chunk"]["step"]
        steps = meta["config"]["steps"]
    except (KeyError, TypeError, AttributeError):
        return None
    if not all(isinstance(v, int) and not isinstance(v, bool) for v in (step, steps)):
        return None
    return step, steps


def _fit_step(checkpoint: Path) -> str | None:
    """``FIT at step S of N`` for a fit's checkpoint (:func:`_step_of`; the fit's name is the arm's, ``/``
    stored as ``__``); ``None`` for another kind (a memo) or a file that does not read."""
    at = _step_of(_checkpoint_meta(checkpoint))
    return None if at is None else f"{checkpoint.stem.replace('__', '/')} at step {at[0]:,} of {at[1]:,}"


def staged_done(staging: Path, arms: Sequence[str]) -> float:
    """The fraction of the training of ``arms`` (trainer fits of one length) that the stopped run's staging
    folder ``staging`` holds, from 0 to 1: an arm with its arrays stored counts whole, a checkpointed one by its
    members finished and its running chunk's step over its length, ``(finished + members x step / steps) /
    seeds`` (a regression fit, its members as one: ``step / steps``), any other none (as does a checkpoint that
    does not read: what it holds is not known)."""

    def one(arm: str) -> float:
        if arrays_file(staging, arm).is_file():
            return 1.0
        checkpoint = fit_checkpoint(staging, arm)
        if not checkpoint.is_file():
            return 0.0
        meta = _checkpoint_meta(checkpoint)
        if isinstance(meta, dict) and meta.get("kind") == "regression":
            at = _step_of(meta)
            return 0.0 if at is None or at[1] <= 0 else min(1.0, max(0.0, at[0] / at[1]))
        try:
            seeds, finished, chunk = len(meta["seeds"]), meta["finished"], meta["chunk"]
            running = 0.0 if chunk is None else chunk["members"] * chunk["step"] / meta["config"]["steps"]
            return min(1.0, max(0.0, (finished + running) / seeds))
        except (KeyError, TypeError, ZeroDivisionError):
            return 0.0

    return sum(map(one, arms)) / len(arms) if arms else 0.0


ELAPSED_FILE = "elapsed.json"


def staged_segments(staging: Path) -> list[dict[str, Any]]:
    """The earlier segments of a stopped run (``elapsed.json`` of its staging folder), one per process that ran
    it: ``{"commit", "device", "threads", "wall_s"}``. A folder written before segments were kept gives one
    segment of its whole wall time with the commit, device and threads unknown (``None``); none where nothing
    is readable (a new run, or one whose segments were all killed before they could say)."""
    try:
        doc = json.loads(read_inside(Path(staging), ELAPSED_FILE, 1 << 20).decode())
        total = doc["wall_time_s"]
    except (OSError, ValueError, KeyError, TypeError, RunDirError):
        return []
    if not isinstance(total, (int, float)) or not 0 <= total < float("inf"):
        return []
    segments = doc.get("segments")
    if isinstance(segments, list) and all(isinstance(g, dict) and _seconds(g.get("wall_s")) for g in segments):
        return [_segment_read(g) for g in segments]
    return [{"commit": None, "device": None, "threads": None, "wall_s": float(total)}] if total > 0 else []


def segment_ok(g: Any) -> bool:
    """Whether ``g`` is a segment as tdlab writes it (:func:`staged_segments`), every field of its form."""
    # the read form equals the stored one only where every field (and no other) is of its form
    return isinstance(g, dict) and _seconds(g.get("wall_s")) and _segment_read(g) == g


def _segment_read(g: dict[str, Any]) -> dict[str, Any]:
    """A stored segment with every field of the right form, else unknown (``None``): what a record accepts."""
    commit, device, threads = g.get("commit"), g.get("device"), g.get("threads")
    return {
        "commit": commit if isinstance(commit, str) and COMMIT_FORM.match(commit) else None,
        "device": device if isinstance(device, str) else None,
        "threads": threads if isinstance(threads, int) and not isinstance(threads, bool) and threads > 0 else None,
        "wall_s": float(g["wall_s"]),
    }


def _seconds(x: Any) -> bool:
    return isinstance(x, (int, float)) and not isinstance(x, bool) and 0 <= x < float("inf")


def staged_elapsed(staging: Path) -> float:
    """Wall seconds the earlier segments of a stopped run ran (:func:`staged_segments`, summed); 0 where none."""
    return float(sum(g["wall_s"] for g in staged_segments(staging)))


def read_arrays(root: Path, arm: str) -> dict[str, torch.Tensor]:
    """The saved parameters of ``arm`` in the run (or staging) folder ``root``, each with a leading member axis:
    a regular file of the folder read without following a link and never past its size (a FIFO, a link to
    ``/dev/zero`` or a folder in its place is refused, not waited on or read forever), loaded by safetensors.

    Raises:
        RunDirError: one line naming the file: missing, not a regular file, or damaged.
    """
    rel = Path("arrays", f"{arm.replace('/', '__')}.safetensors")
    f = Path(root) / rel
    if not os.path.lexists(f):
        raise RunDirError(f"{f}: no saved arrays for arm {arm!r}")
    blob = read_inside(Path(root), rel)
    try:
        from safetensors.torch import load

        return load(blob)
    except Exception as exc:  # safetensors raises its own error types for a damaged file
        raise RunDirError(f"{f} is corrupt: {_reason(exc)}") from None


def staging_path(final: Path) -> Path:
    """Where the run that will become ``final`` is built."""
    return Path(final).with_name(f".staging-{Path(final).name}")


@dataclass
class Run:
    """A finished run directory, read back.

    Every reader checks what it reads: a file that is missing, unreadable, not UTF-8, not the
    format or not the shape tdlab writes raises :class:`RunDirError` with one line naming the file.
    """

    path: Path

    def __post_init__(self) -> None:
        self.path = Path(self.path)
        try:
            os.stat(self.path)
        except OSError as exc:
            what = "a symlink loop" if exc.errno == errno.ELOOP else "no such folder"
            raise RunDirError(f"{self.path}: not a run directory ({what})") from None
        if not self.path.is_dir():
            raise RunDirError(f"{self.path}: not a run directory (not a folder)")
        for need in ("config.yaml", "metrics.parquet"):
            try:
                st = os.lstat(self.path / need)
            except OSError:
                raise RunDirError(f"{self.path}: not a run directory ({need} is missing)") from None
            if not stat.S_ISREG(st.st_mode):
                raise RunDirError(
                    f"{self.path}: not a run directory ({need} is not a regular file: a symlink, "
                    f"folder or device; tdlab never follows symlinks in a run directory)"
                )

    @property
    def config(self) -> dict[str, Any]:
        """``{"experiment", "profile", "config"}`` as written at the start of the run."""
        return self.read_config(self.path / "config.yaml")

    @staticmethod
    def read_config(path: Path) -> dict[str, Any]:
        """``config.yaml``: a mapping with a string ``experiment``, a mapping ``config`` and a string
        ``profile`` (both optional), a string or null ``sweep``, for a ``--decide`` run a mapping ``decide``, an
        integer ``threads`` (the count it began on) and, for an experiment of ``--include``, its path as text."""
        path = Path(path)
        try:
            cfg = load_yaml(read_inside(path.parent, path.name, MAX_TEXT_BYTES).decode("utf-8"))
        except RunDirError:
            raise
        except (OSError, UnicodeDecodeError, yaml.YAMLError, RecursionError, YamlBombError) as exc:
            raise RunDirError(f"{path} is unreadable or corrupt: {_reason(exc)}") from None
        if not isinstance(cfg, dict) or "experiment" not in cfg:
            raise RunDirError(f"{path} is corrupt: expected a mapping with an 'experiment' key")
        for key, types, what in (
            ("experiment", (str,), "a string"),
            ("profile", (str,), "a string"),
            ("config", (dict,), "a mapping"),
            ("sweep", (str, type(None)), "a string or null"),
            ("decide", (dict, type(None)), "a mapping or null"),
            ("include", (str,), "a string"),
        ):
            if key in cfg and not isinstance(cfg[key], types):
                raise RunDirError(f"{path} is corrupt: '{key}' must be {what}, got {echo(cfg[key])}")
        return cfg

    def metrics(self) -> pd.DataFrame:
        """Long-format metrics: columns ``arm, step, member, name, value``."""
        return self.read_metrics(self.path / "metrics.parquet")

    @staticmethod
    def read_metrics(path: Path) -> pd.DataFrame:
        """The metrics table, checked: the five columns, ``arm``/``name`` strings, ``step``/``member``
        integers, ``value`` numbers."""
        path = Path(path)
        data = read_inside(path.parent, path.name)
        try:
            import pandas.api.types as ptypes
            import pyarrow as pa
            import pyarrow.parquet as pq

            df = pq.read_table(pa.BufferReader(data)).to_pandas()
        except Exception as exc:  # pyarrow raises several types for a damaged file
            raise RunDirError(f"{path} is corrupt: {_reason(exc)}") from None
        missing = set(METRIC_COLUMNS) - set(df.columns)
        if missing:
            raise RunDirError(f"{path} is corrupt: missing columns {sorted(missing)}")
        for col, ok, what in (
            ("step", ptypes.is_integer_dtype, "integers"),
            ("member", ptypes.is_integer_dtype, "integers"),
            ("value", _is_number_dtype, "numbers"),
            ("arm", _is_string_column, "strings"),
            ("name", _is_string_column, "strings"),
        ):
            if not ok(df[col]):
                raise RunDirError(f"{path} is corrupt: column '{col}' must hold {what}, it holds {df[col].dtype}")
        return df

    def arrays(self, arm: str) -> dict[str, torch.Tensor]:
        """Saved parameters of ``arm``, each with a leading member axis."""
        return read_arrays(self.path, arm)

    @property
    def summary(self) -> dict[str, Any]:
        """``summary.json`` (``{}`` when there is none yet); it must be a JSON object."""
        f = self.path / "summary.json"
        if not f.exists() and not f.is_symlink():
            return {}
        try:
            data = json.loads(read_inside(self.path, f.name, MAX_TEXT_BYTES))
        except RunDirError:
            raise
        except (OSError, ValueError, RecursionError) as exc:  # JSONDecodeError, UnicodeDecodeError are ValueErrors
            raise RunDirError(f"{f} is corrupt: {_reason(exc)}") from None
        if not isinstance(data, dict):
            raise RunDirError(f"{f} is corrupt: expected a JSON object, got {echo(data)}")
        for key, kinds, what in _SUMMARY_FIELDS:
            if key in data and (isinstance(data[key], bool) or not isinstance(data[key], kinds)):
                raise RunDirError(f"{f} is corrupt: '{key}' must be {what}, got {echo(data[key])}")
        return data

    def write_summary(self, summary: dict[str, Any]) -> None:
        atomic_write(self.path / "summary.json", json.dumps(summary, indent=2, default=float))

    @contextmanager
    def preserved(self) -> Iterator[None]:
        """Leave the run directory as it was if the block raises: files it wrote are removed, files
        it changed get their old bytes back (so a failed ``tdlab report`` changes nothing)."""
        before = {f: f.read_bytes() for f in self.path.rglob("*") if f.is_file()}
        try:
            yield
        except BaseException:
            for f in sorted(self.path.rglob("*"), reverse=True):
                if f not in before and f.is_file():
                    f.unlink()
                elif f.is_dir() and not any(f.iterdir()) and not any(g.is_relative_to(f) for g in before):
                    f.rmdir()
            for f, data in before.items():
                if not f.is_file() or f.read_bytes() != data:
                    atomic_write(f, data)
            raise


# The run facts of summary.json that are read back (rebuild, the index): key, types, what is allowed.
_SUMMARY_FIELDS = (
    ("experiment", (str,), "a string"),
    ("run_id", (str,), "a string"),
    ("profile", (str,), "a string"),
    ("status", (str,), "a string"),
    ("error", (str, type(None)), "a string or null"),
    ("wall_time_s", (int, float), "a number"),
    ("env", (dict,), "a mapping"),
    ("member", (int, type(None)), "an integer or null"),
    ("step", (int, type(None)), "an integer or null"),
)


def _reason(exc: BaseException) -> str:
    """An exception's message for a one-line error: whitespace collapsed, cut to a few echo widths."""
    text = one_line(getattr(exc, "problem", None) or str(exc)) or type(exc).__name__
    return text if len(text) <= 4 * ECHO_CHARS else text[: 4 * ECHO_CHARS - 3] + "..."


def _is_number_dtype(col: pd.Series) -> bool:
    import pandas.api.types as ptypes

    return ptypes.is_numeric_dtype(col) and not ptypes.is_bool_dtype(col)


def _is_string_column(col: pd.Series) -> bool:
    import pandas.api.types as ptypes

    return ptypes.is_string_dtype(col) and all(isinstance(v, str) for v in col)


def list_runs(out: Path, warn: Callable[[str], None] | None = None) -> list[Run]:
    """Finished runs under ``out`` (staging folders and foreign folders are skipped), oldest first.

    Skipped with one line to ``warn`` each: a symlink in the place of a run folder (it may lead anywhere,
    ``/etc`` included, so nothing through it is read) and a run folder whose name is not a run id
    (:data:`RUN_ID_PATTERN`: the index refuses such a row, so indexing it would corrupt the index)."""
    out = Path(out)
    if not out.is_dir():
        return []
    runs = []
    for p in sorted(out.iterdir()):
        if p.name.startswith("."):
            continue
        if p.is_symlink():
            if warn is not None:
                warn(f"{p}: skipped, a symlink (a run folder is read where it lies, never through a symlink)")
            continue
        if not p.is_dir():
            continue
        try:
            run = Run(p)
        except RunDirError:
            continue
        if not RUN_ID_PATTERN.fullmatch(p.name):
            if warn is not None:
                warn(
                    f"{p}: skipped, {echo(p.name)} is not a run id (1-200 letters, digits, '_', '.', '-', "
                    f"starting with a letter or digit); rename the folder to index it"
                )
            continue
        runs.append(run)
    return runs


def arm_files(run_dir: Path, arm: str) -> list[Path]:
    """The stored arrays of ``arm`` in the run ``run_dir``, as paths relative to it: ``arrays/ARM.safetensors``
    and its ``ARM@init`` / ``ARM@stepN`` companions, sorted. Entries are listed without following
    symlinks (a symlink is then refused by :func:`copy_arrays`).

    Raises:
        RunDirError: ``ARM.safetensors`` is not there (naming the folder).
    """
    stem = arm.replace("/", "__")
    folder = Path(run_dir) / "arrays"
    try:
        names = sorted(e.name for e in os.scandir(folder))
    except OSError:
        names = []
    if f"{stem}.safetensors" not in names:
        raise RunDirError(f"{folder}: no saved arrays for arm {arm!r}")
    return [
        Path("arrays", n)
        for n in names
        if n.endswith(".safetensors") and (n == f"{stem}.safetensors" or n.startswith(f"{stem}@"))
    ]


def copy_arrays(run_dir: Path, rel: Path, dst: Path) -> None:
    """Copy the arrays file ``run_dir/rel`` to ``dst``: a regular file of the run reached through no
    symlink, never more bytes than it had when opened (:func:`tdlab.safeio.copy_inside`), and a
    safetensors file (its header parsed; nothing in it is executed).

    Raises:
        RunDirError: naming the source file (the copy is removed): a symlink, not a regular file, too
            large, or not safetensors.
    """
    copy_inside(run_dir, rel, dst)
    try:
        from safetensors import safe_open

        with safe_open(str(dst), "pt"):
            pass
    except Exception as exc:  # safetensors raises its own error types for a foreign file
        Path(dst).unlink(missing_ok=True)
        raise RunDirError(
            f"{Path(run_dir) / rel} is not a safetensors arrays file ({_reason(exc)}); a run's "
            f"arrays are only ever safetensors (tdlab never unpickles)"
        ) from None

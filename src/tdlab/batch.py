"""``tdlab batch``: a queue of runs whose state is its output folder, for machines lent for minutes.

``tdlab batch --profile paper [NAME...] [--device cuda] [--until 9m] [--jobs N] [--out DIR]`` runs every named
experiment (default: all) at the profile as ``OUT/NAME``, each a ``tdlab run`` process. What the folder holds
is the whole state:

- ``OUT/NAME`` (a finished run directory): done; its record is published to ``RESULTS/PROFILE/NAME.json``
  (:mod:`tdlab.records`) if it is not there yet.
- ``OUT/.staging-NAME`` (an interrupted run): resumed from its checkpoints (``tdlab run --resume``), to the
  numbers it would have had uninterrupted (bit for bit on the CPU; tested).
- nothing: started.

So invoking the batch again, on this machine or another that has the folder, continues it. Every run
checkpoints by wall time (``--checkpoint-every``, :mod:`tdlab.train.stopping`); at ``--until`` (or on SIGTERM /
Ctrl-C to the batch) each running run gets SIGTERM ``grace`` seconds before the end, checkpoints after the step
it is in and exits 3; one still running at the end is killed (SIGKILL), and continues from its last
checkpoint next time.

Runs are ordered by a cost model (:func:`estimates`), shortest first, so a batch cut off by ``--until`` has
finished as many runs as it could (``--order named``: as named). On a GPU several runs share the device up to its free memory
(:func:`tdlab.train.memory.estimate` of each run's config), at most ``--jobs``. ``--backend ray --address
HOST:PORT`` spreads the same queue over a Ray cluster whose nodes see ``OUT``: each run a task asking for
``--threads`` CPUs and its share of a GPU.
"""

from __future__ import annotations

import json
import math
import os
import signal
import statistics
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path
from typing import Any, Literal

from tdlab.cluster import check_address, connect, disconnect
from tdlab.config import ConfigError, build_config, echo, read_field
from tdlab.runs import (
    Run,
    RunDirError,
    config_hash,
    staged_done,
    staged_elapsed,
    staged_progress,
    staging_busy,
    staging_path,
)
from tdlab.safeio import atomic_write, check_output_folder

__all__ = [
    "BATCH_FILE",
    "ORDERS",
    "Job",
    "Order",
    "Outcome",
    "estimates",
    "plan_batch",
    "run_batch",
    "run_job",
    "status_table",
]

BATCH_FILE = "batch.json"
FORMAT = "tdlab-batch/1"
STOPPED = 3  # tdlab.train.stopping.STOPPED_EXIT_CODE (not imported: that module's users import torch)
DEFAULT_SECONDS = 600.0  # the prior of an experiment with no quick time measured
# A stopped run's estimate left is its estimate less what its segments ran, and at least this fraction of
# it: a run that outran its estimate is not done, and the estimate was low by an unknown amount, so that
# fraction is a floor (Job.floor), shown as "≥" and summed into an "at least".
MIN_LEFT = 0.1
# A stopped run that declares its fits is timed at its own pace once it has done this fraction of them (less
# is too little of a run to time: its first minutes, or work before its fits, would read as its pace).
MIN_DONE = 0.02

# where a job of the queue is; "stale": a run of the folder made at a config the profile no longer has
State = Literal["done", "diverged", "stopped", "new", "failed", "busy", "stale"]
# the order runs start in: shortest first by the estimates, or as named (the caller's own priorities)
Order = Literal["shortest", "named"]
ORDERS: tuple[Order, ...] = ("shortest", "named")


@dataclass
class Job:
    """One run of the queue: its experiment, what it is now, its estimated seconds."""

    name: str
    state: State
    estimate_s: float
    wall_s: float | None = None
    note: str = ""
    memory_bytes: float = 0.0
    floor: bool = False  # estimate_s is a lower bound: the run already outran its estimate
    total_s: float = 0.0  # the whole run's estimate, before any segment ran (what estimate_s is left of)
    fit_arms: tuple[str, ...] = ()  # its trainer fits of one length (tdlab.costs.work): its own pace, once stopped

    def left_text(self) -> str:
        """The estimate left as the table prints it: ``≥ 10 min`` where it is a floor."""
        return ("≥ " if self.floor else "") + _duration(self.estimate_s)


@dataclass
class Outcome:
    """What one ``tdlab run`` process ended with."""

    name: str
    rc: int
    wall_s: float
    tail: str = ""
    stopped_by_batch: bool = False  # the batch sent SIGTERM (its deadline, or it was asked to stop)


# ---------------------------------------------------------------------------------------------------------
# The cost model


def _prior(name: str, profile: str, quick: Mapping[str, float] | None = None) -> float | None:
    """Seconds predicted from the quick profile's measured time (:func:`tdlab.costs.quick_times.quick_times`,
    else ``quick[name]``: a published quick record's wall time on the CPU) times the profile's training length
    over quick's (in optimiser steps: epochs times steps per epoch where the length is in epochs), times its
    arithmetic per step over quick's (:func:`tdlab.train.compute.step_flops`: members x batch x sequence x
    (d² and sequence x d per layer), what a transformer step's work grows with; else its activations,
    :func:`tdlab.train.memory.estimate`; the members' ratio where neither applies), times its separate trainings
    over quick's (:func:`tdlab.costs.work.fit_work`), or by its own count of the work where it gives one
    (:func:`tdlab.costs.work.work`); ``None`` where quick was never measured."""
    from tdlab.costs.quick_times import quick_times as shipped
    from tdlab.costs.work import fit_work, work
    from tdlab.experiments.base import get
    from tdlab.rounds import length_field
    from tdlab.train.compute import step_flops
    from tdlab.train.memory import estimate

    exp = get(name)
    if name in shipped():
        seconds = shipped()[name].seconds
    elif quick and name in quick:
        seconds = quick[name]
    else:
        return None
    q = build_config(exp.Config, exp.profiles["quick"])
    p = build_config(exp.Config, exp.profiles.get(profile, {}))
    wq, wp = work(exp, q), work(exp, p)
    if wq is not None and wp is not None and wq > 0:  # the experiment counts its own work
        return seconds * wp / wq
    # a step's arithmetic (the matrix products grow with d², which activations, d, miss), else its activations
    fq, fp = step_flops(q), step_flops(p)
    bq, bp = (fq, fp) if fq and fp else (estimate(q).bytes, estimate(p).bytes)
    scale = bp / bq if bq > 0 and bp > 0 else p.members / q.members
    # the separate trainings (markov-tying: quick's 3 cells x 2 tyings, the seed's 25 x 2)
    scale *= fit_work(exp, p) / fit_work(exp, q)
    length = length_field(exp)
    if length is not None:
        scale *= float(read_field(p, length)) / float(read_field(q, length))
        # a length in epochs: the optimiser steps are epochs x steps per epoch, and the seed's data set is often
        # larger than quick's (anchors-mlp: 200 -> 9,900 steps per epoch)
        sq, sp = getattr(q, "steps_per_epoch", None), getattr(p, "steps_per_epoch", None)
        if length.endswith("epochs") and isinstance(sq, int) and isinstance(sp, int) and sq > 0:
            scale *= sp / sq
    return seconds * scale


def _device_kind(device: str) -> str:
    return "cuda" if str(device).startswith("cuda") else "cpu"


def measured_times(out: Path, results: Path | None, profile: str, device: str) -> dict[str, float]:
    """Wall seconds of finished runs of ``profile`` on this kind of device: the batch folder's runs, then the
    published records (a run of the folder wins)."""
    from tdlab.results import load_records

    times: dict[str, float] = {}
    kind = _device_kind(device)
    if results is not None:
        for name, rec in load_records(Path(results) / profile).items():
            if _device_kind(rec.device) == kind and rec.status == "done":
                times[name] = rec.wall_time_s
    for d in sorted(Path(out).iterdir()) if Path(out).is_dir() else []:
        if d.name.startswith(".") or not (d / "summary.json").is_file():
            continue
        try:
            s = Run(d).summary
        except RunDirError:
            continue
        if (
            s.get("profile") == profile
            and _device_kind((s.get("env") or {}).get("device", "cpu")) == kind
            and isinstance(s.get("wall_time_s"), (int, float))
        ):
            times[str(s.get("experiment", d.name))] = float(s["wall_time_s"])
    return times


def estimates(
    names: Sequence[str], profile: str, measured: dict[str, float], quick: Mapping[str, float] | None = None
) -> dict[str, float]:
    """Seconds each run is expected to take: its own measured time where one exists, else its prior times
    the median ratio measured / prior over the runs that have both (the model fitted to this kind of device;
    1 before anything was measured); :data:`DEFAULT_SECONDS` for a run with neither. ``quick``: published quick
    records' CPU wall times, the prior's quick time where the shipped quick times have none (:func:`quick_times`)."""
    priors = {n: _prior(n, profile, quick) for n in set(names) | set(measured)}
    ratios = [measured[n] / p for n in measured if (p := priors[n]) is not None and p > 0]
    scale = statistics.median(ratios) if ratios else 1.0
    # An experiment whose quick time was never measured has no prior: DEFAULT_SECONDS, not scaled by a fit
    # it took no part in.

    def from_prior(n: str) -> float:
        p = priors[n]
        return DEFAULT_SECONDS if p is None else p * scale

    return {n: measured[n] if n in measured else from_prior(n) for n in names}


# ---------------------------------------------------------------------------------------------------------
# The queue


def _state(out: Path, name: str) -> tuple[State, float | None, str]:
    """``(state, wall seconds, note)`` of ``name`` in the batch folder."""
    final = out / name
    if final.exists() or final.is_symlink():
        try:
            s = Run(final).summary
        except RunDirError as exc:
            return "failed", None, str(exc)
        status = s.get("status")
        if status in ("done", "diverged"):
            return (
                ("done" if status == "done" else "diverged"),
                float(s.get("wall_time_s", 0.0)),
                str(s.get("error") or ""),
            )
        return "failed", None, f"{final}/summary.json has no status done or diverged"
    staging = staging_path(final)
    if (staging / "config.yaml").is_file():
        if staging_busy(staging):
            return "busy", None, "running in another process"
        spent = staged_elapsed(staging)
        ran = f"; ran {_duration(spent)} so far" if spent > 0 else ""
        return "stopped", None, f"resumes from its checkpoints ({staged_progress(staging)}{ran})"
    return "new", None, ""


def _stale(
    out: Path, name: str, now: str, state: State, wall: float | None, note: str
) -> tuple[State, float | None, str]:
    """``stale`` (with why) for a finished or stopped run of the folder whose config hash is not ``now``, the
    one the profile and ``--set`` give with the current code (the profile changed since it started: a
    resume would finish the old config, a finished run would publish it); else the state as it was."""
    folder = staging_path(out / name) if state == "stopped" else out / name
    try:
        had = config_hash(Run.read_config(folder / "config.yaml"))
    except RunDirError as exc:
        return "failed", None, str(exc)
    if had == now:
        return state, wall, note
    return "stale", None, f"made at a config the profile no longer has ({had[:8]}, now {now[:8]}): runs again"


def _stale_aside(out: Path, name: str) -> Path:
    """Move a stale run (finished or staged) out of the way, kept: ``OUT/.stale-NAME-<config hash>`` (``-2``, ``-3``,
    ... where one of that config was set aside before: nothing set aside is ever deleted or overwritten)."""
    folder = out / name if (out / name).exists() else staging_path(out / name)
    had = config_hash(Run.read_config(folder / "config.yaml"))
    aside = out / f".stale-{name}-{had[:16]}"
    n = 1
    while os.path.lexists(aside):  # a run set aside before (or a link of that name) is kept: never replaced
        n += 1
        aside = out / f".stale-{name}-{had[:16]}-{n}"
    os.replace(folder, aside)
    return aside


def _check_folder(out: Path, profile: str, device: str, sets: Sequence[str], write: bool = True) -> None:
    """The batch folder's ``batch.json``: written on first use (``write``); a folder of another profile, other
    ``--set`` overrides or another kind of device is refused (its runs would not be the runs asked for)."""
    f = out / BATCH_FILE
    not_ours = f"--out {out}: {BATCH_FILE} is not what tdlab batch writes; use another --out"
    if os.path.lexists(f) and (f.is_symlink() or not f.is_file()):
        raise ConfigError(
            f"--out {out}: {BATCH_FILE} is not a regular file (a folder, a link or a device); use another --out"
        )
    if f.is_file():
        try:
            if f.stat().st_size > 1 << 20:
                raise ValueError("larger than a batch file")
            doc = json.loads(f.read_text(encoding="utf-8"))
        except (OSError, ValueError, RecursionError):
            raise ConfigError(not_ours) from None
        if (
            not isinstance(doc, dict)
            or doc.get("format") != FORMAT
            or not isinstance(doc.get("profile"), str)
            or not isinstance(doc.get("device", ""), str)
            or not (isinstance(doc.get("set", []), list) and all(isinstance(x, str) for x in doc.get("set", [])))
        ):
            raise ConfigError(not_ours)
        if doc.get("profile") != profile:
            raise ConfigError(
                f"--profile: {echo(profile)}, but {out} holds a batch of profile "
                f"{echo(str(doc.get('profile')))}; use that profile or another --out"
            )
        had = str(doc.get("device", device))  # a folder written before the device was kept: any
        if _device_kind(had) != _device_kind(device):
            raise ConfigError(
                f"--device: {echo(device)}, but {out} holds a batch run on {echo(had)} (its checkpoints, random "
                f"streams included, resume on that kind of device); use --device {echo(had)} or another --out"
            )
        if doc.get("set", []) != list(sets):
            raise ConfigError(
                f"--set: {echo(' '.join(sets)) or 'none'}, but {out} holds a batch run with "
                f"{echo(' '.join(map(str, doc.get('set', [])))) or 'none'}; use the same --set or another --out"
            )
        return
    if write:
        atomic_write(
            f, json.dumps({"format": FORMAT, "profile": profile, "set": list(sets), "device": device}, indent=1) + "\n"
        )


def quick_times(results: Path | None) -> dict[str, float]:
    """Wall seconds of the published quick records made on the CPU (``results/quick``), by experiment."""
    from tdlab.results import load_records

    if results is None:
        return {}
    recs = load_records(Path(results) / "quick")
    return {n: r.wall_time_s for n, r in recs.items() if _device_kind(r.device) == "cpu" and r.status == "done"}


def plan_batch(
    names: Sequence[str],
    profile: str,
    out: Path,
    device: str,
    results: Path | None,
    sets: Sequence[str] = (),
    order: Order = "shortest",
) -> list[Job]:
    """The queue: every experiment in ``names`` with its state in ``out`` and its estimate, the runs still
    to do ordered shortest first (``order="named"``: in the order of ``names``, e.g. the runs a machine's lanes
    are to keep on, then one to start when a lane frees, whatever their estimates). Reads ``out``, writes
    nothing (``tdlab batch --plan`` prints it); a folder of another profile or ``--set`` is refused."""
    from tdlab.costs.work import fit_arms
    from tdlab.experiments.base import get
    from tdlab.results import profile_config_hash
    from tdlab.train.memory import estimate

    if Path(out).is_dir():
        _check_folder(Path(out), profile, device, sets, write=False)
    elif Path(out).exists():  # what the batch itself refuses (check_output_folder), --plan refuses too
        raise ConfigError(f"--out {echo(str(out))}: not a folder (a file or device); give a folder")

    measured = measured_times(out, results, profile, device)
    est = estimates(names, profile, measured, quick_times(results))
    jobs = []
    for n in names:
        state, wall, note = _state(out, n)
        exp = get(n)
        if profile not in exp.profiles:
            raise ConfigError(f"--profile: unknown profile {echo(profile)} for {n}; allowed: {', '.join(exp.profiles)}")
        cfg = exp.make_config(profile, sets)  # a bad --set or profile is refused before anything runs
        mem = float(estimate(cfg).bytes) if _device_kind(device) == "cuda" else 0.0
        if state in ("done", "diverged", "stopped"):
            state, wall, note = _stale(out, n, profile_config_hash(n, profile, cfg=cfg), state, wall, note)
        job = Job(n, state, est[n], wall, note, mem, False, est[n], tuple(fit_arms(exp, cfg) or ()))
        if state in ("stopped", "busy"):  # what earlier segments ran is done
            job.note += _left_of(job, staging_path(Path(out) / n))
        jobs.append(job)
    finished = [j for j in jobs if j.state in ("done", "diverged")]
    todo = [j for j in jobs if j.state not in ("done", "diverged")]
    if order == "shortest":
        todo.sort(key=lambda j: j.estimate_s)
    return finished + todo


def published(names: Sequence[str], profile: str, results: Path, sets: Sequence[str] = ()) -> list[str]:
    """The experiments in ``names`` with a current record under ``results/PROFILE``: one made at the config
    the profile (with ``sets``) has now. A record of an older config is not current: its run is to do again."""
    from tdlab.records import record_path
    from tdlab.results import is_current, load_record

    paths = {n: record_path(results, profile, n) for n in names}
    return [n for n, path in paths.items() if path.is_file() and is_current(load_record(path), sets)]


def check_names(names: Sequence[str]) -> list[str]:
    """The experiments to run (default: every one), each known and named once."""
    from tdlab.experiments.base import get, registry

    known = list(registry())
    if not names:
        return known
    unknown = [n for n in names if n not in known]
    if unknown:
        get(unknown[0])  # raises the one line that says what is known, the nearest name and how to register one
    return list(dict.fromkeys(names))


def _command(
    job: Job, profile: str, out: Path, device: str, every: str, sets: Sequence[str], lanes: int | None = None
) -> list[str]:
    base = [sys.executable, "-m", "tdlab.cli", "run"]
    tail = ["--device", device, "--quiet", "--checkpoint-every", every, *(["--lanes", str(lanes)] if lanes else [])]
    if job.state == "stopped":
        return [*base, "--resume", str(out / job.name), *tail]
    return [
        *base,
        job.name,
        "--profile",
        profile,
        "--out",
        str(out),
        "--run-id",
        job.name,
        *(a for s in sets for a in ("--set", s)),
        *tail,
    ]


def _check_logs(out: Path, names: Sequence[str]) -> None:
    """``OUT/logs`` a folder (or absent) and each run's ``NAME.log`` / ``NAME.pid`` a regular file (or absent):
    a link there would have the batch append to, or overwrite, a file outside the batch folder."""
    logs = out / "logs"
    if os.path.lexists(logs) and (logs.is_symlink() or not logs.is_dir()):
        raise ConfigError(f"--out {out}: logs is not a folder (a file or a link); remove it or use another --out")
    for name in names:
        for suffix in (".log", ".pid"):
            f = logs / f"{name}{suffix}"
            if os.path.lexists(f) and (f.is_symlink() or not f.is_file()):
                raise ConfigError(
                    f"--out {out}: logs/{name}{suffix} is not a regular file (a link or a folder), which the batch "
                    "would write through; remove it or use another --out"
                )


def _open_own(path: str | Path, flags: int) -> int:
    """``os.open`` of a file the batch writes, never through a symlink (``O_NOFOLLOW``)."""
    return os.open(path, flags | os.O_CREAT | os.O_WRONLY | getattr(os, "O_NOFOLLOW", 0), 0o644)


def run_job(
    name: str,
    cmd: list[str],
    env: dict[str, str],
    log: str,
    deadline: float | None,
    grace: float,
    stop_file: str | None = None,
) -> Outcome:
    """Run one ``tdlab run`` process, its output appended to ``log``. With ``deadline`` (``time.time()``):
    SIGTERM ``grace`` seconds before it (the run checkpoints and exits 3), SIGKILL at it. Once ``stop_file``
    exists (the batch was asked to stop), the same with the deadline ``grace`` seconds from then. Runs on a
    batch thread, or as a Ray task on a cluster node that sees the batch folder."""
    t0 = time.time()
    with os.fdopen(_open_own(log, os.O_APPEND), "ab") as fh:
        # Its own session: a Ctrl-C at the batch's terminal reaches the batch, which stops its runs cleanly.
        proc = subprocess.Popen(
            cmd, env={**os.environ, **env}, stdout=fh, stderr=subprocess.STDOUT, start_new_session=True
        )
        pid_file = Path(log).with_suffix(".pid")  # what is running now, for a person (or a test) to see
        with os.fdopen(_open_own(pid_file, os.O_TRUNC), "w") as pf:
            pf.write(f"{proc.pid}\n")
        termed = False
        while True:
            try:
                rc = proc.wait(timeout=1.0)
                break
            except subprocess.TimeoutExpired:
                pass
            now = time.time()
            if stop_file is not None and not termed and os.path.exists(stop_file):
                deadline = now + grace if deadline is None else min(deadline, now + grace)
            if deadline is not None and not termed and now >= deadline - grace:
                proc.send_signal(signal.SIGTERM)
                termed = True
            if deadline is not None and now >= deadline:
                proc.kill()
                rc = proc.wait()
                break
    pid_file.unlink(missing_ok=True)
    return Outcome(name, rc, time.time() - t0, _tail(Path(log)), termed)


def _tail(log: Path, lines: int = 3) -> str:
    try:
        text = log.read_bytes()[-4000:].decode("utf-8", "replace")
    except OSError:
        return ""
    return " | ".join(line.strip() for line in text.strip().splitlines()[-lines:] if line.strip())


@dataclass
class _Local:
    """Runs on this machine: a thread per running job, each waiting on its process."""

    jobs: int
    pool: ThreadPoolExecutor = field(init=False)

    def __post_init__(self) -> None:
        self.pool = ThreadPoolExecutor(max_workers=max(1, self.jobs))

    def submit(self, *args: Any) -> Future:
        return self.pool.submit(run_job, *args)

    def wait(self, handles: list[Any], timeout: float) -> list[tuple[Any, Outcome]]:
        done, _ = wait(handles, timeout=timeout, return_when=FIRST_COMPLETED)
        return [(h, h.result()) for h in done]

    def close(self) -> None:
        self.pool.shutdown(wait=True)


class _Ray:
    """Runs on a Ray cluster: each run a task asking for ``threads`` CPUs and ``gpu`` of a GPU."""

    def __init__(self, address: str | None, threads: int, gpu: float) -> None:
        self.ray, self.started = connect(address)
        self.remote = self.ray.remote(num_cpus=threads, num_gpus=gpu, max_retries=0)(run_job)

    def submit(self, *args: Any) -> Any:
        return self.remote.remote(*args)

    def wait(self, handles: list[Any], timeout: float) -> list[tuple[Any, Outcome]]:
        ready, _ = self.ray.wait(handles, num_returns=1, timeout=timeout)
        out = []
        for h in ready:
            try:
                out.append((h, self.ray.get(h)))
            except Exception as exc:
                out.append((h, Outcome("?", -1, 0.0, f"{type(exc).__name__}: {exc}")))
        return out

    def close(self) -> None:
        disconnect(self.ray, self.started)


@cache
def _gpu_free_bytes(device: str) -> float:
    """The device's free memory when the batch first asked (before its runs allocated any): the running runs'
    estimates are counted against it, not against what they left free."""
    import torch

    free, _ = torch.cuda.mem_get_info(torch.device(device))
    return float(free)


def run_batch(
    names: Sequence[str],
    profile: str,
    out: Path,
    *,
    device: str = "cpu",
    until_s: float | None = None,
    jobs: int | None = None,
    threads: int | None = None,
    results: Path | None = Path("results"),
    checkpoint_every: str = "3m",
    backend: Literal["local", "ray"] = "local",
    address: str | None = None,
    grace_s: float | None = None,
    sets: Sequence[str] = (),
    order: Order = "shortest",
    say: Callable[[str], None] = print,
) -> list[Job]:
    """Run the queue (see the module; ``order`` as :func:`plan_batch`) until every run finished, ``until_s``
    passed or a run failed to start again; publish each finished run's record to ``results`` (``None``: do not).
    Returns the jobs with their final states."""
    from tdlab.cores import usable_cores
    from tdlab.records import record_path
    from tdlab.results import publish

    names = check_names(names)
    queue = plan_batch(names, profile, Path(out), device, results, sets, order)  # every config checked first
    if backend == "ray":
        check_address(address)  # a wrong address is one line before anything is written, not minutes of retries
    out = check_output_folder(out, "--out")
    _check_logs(out, [j.name for j in queue])  # before batch.json is written: a refusal leaves nothing behind
    _check_folder(out, profile, device, sets)
    left = sum(j.state in ("new", "stopped", "stale") for j in queue)  # stale ones run again
    jobs, threads, lanes = share_cores(usable_cores(), left, jobs, threads, device, backend)
    deadline = None if until_s is None else time.time() + until_s
    grace = grace_s if grace_s is not None else (60.0 if until_s is None else min(60.0, 0.2 * until_s))
    (out / "logs").mkdir(exist_ok=True)
    env = {"TDLAB_THREADS": str(threads), "OMP_NUM_THREADS": str(threads), "OMP_WAIT_POLICY": "PASSIVE"}
    runner = (
        _Ray(address, threads, 1.0 / jobs if _device_kind(device) == "cuda" else 0.0)
        if backend == "ray"
        else _Local(jobs)
    )
    by_name = {j.name: j for j in queue}
    for j in queue:
        if j.state == "stale":  # kept aside, not deleted; the run starts anew at the current config
            aside = _stale_aside(out, j.name)
            say(f"stale    {j.name}: {j.note}; the old run is kept as {aside.name}")
            j.state, j.note = "new", ""
    todo = [j for j in queue if j.state in ("new", "stopped")]
    say(
        f"batch {out} ({profile}, {device}, {backend}): {len(queue)} runs, "
        f"{sum(j.state in ('done', 'diverged') for j in queue)} finished, {len(todo)} to run on {jobs} jobs x {threads} "
        f"threads{f' (and {lanes} one-thread lanes each for the fits of an experiment that has them)' if lanes else ''}; "
        f"estimated: {_total(todo, jobs)}"
    )

    def publish_one(job: Job, replace: bool) -> None:
        if results is None or job.state not in ("done", "diverged"):
            return
        if not replace and record_path(results, profile, job.name).is_file():
            return
        try:
            publish([out / job.name], results)
        except (RunDirError, ConfigError) as exc:
            job.note = f"record not published: {exc}"

    for j in queue:  # runs that finished while no batch watched them
        publish_one(j, replace=False)
    running: dict[Any, Job] = {}
    stop_file = out / "logs" / ".stop"
    stop_file.unlink(missing_ok=True)
    asked = threading.Event()
    main = threading.current_thread() is threading.main_thread()
    old = {s: signal.getsignal(s) for s in (signal.SIGTERM, signal.SIGINT)} if main else {}
    for s in old:
        signal.signal(s, lambda signum, frame: asked.set())
    stopping = False
    try:
        while todo or running:
            if asked.is_set() and not stopping:  # every running run checkpoints within grace seconds and exits
                stopping = True
                stop_file.touch()
                say(
                    f"stopping: every running run checkpoints within {grace:.0f} s and exits; run the batch again to continue"
                )
            past = stopping or (deadline is not None and time.time() >= deadline - grace)
            while todo and len(running) < jobs and not past and _fits(todo[0], running, device):
                job = todo.pop(0)
                cmd = _command(job, profile, out, device, checkpoint_every, sets, lanes)
                handle = runner.submit(
                    job.name, cmd, env, str(out / "logs" / f"{job.name}.log"), deadline, grace, str(stop_file)
                )
                running[handle] = job
                say(f"start    {job.name} ({'resume' if job.state == 'stopped' else 'new'}; ~{job.left_text()})")
                job.state = "busy"
            if not running:
                break
            for handle, outcome in runner.wait(list(running), timeout=2.0):
                job = running.pop(handle)
                job.wall_s = outcome.wall_s
                job.state, job.note = _after(out, job.name, outcome)
                if job.state == "stopped":  # what is left now, as the next batch's plan will say
                    job.note += _left_of(job, staging_path(out / job.name))
                say(
                    f"{job.state:8} {job.name} (exit code {outcome.rc}, {_duration(outcome.wall_s)})"
                    + (f": {job.note}" if job.note else "")
                )
                publish_one(job, replace=True)
    finally:
        for s, h in old.items():
            signal.signal(s, h)
        runner.close()
        stop_file.unlink(missing_ok=True)
    for j in todo:
        j.note = j.note or "not started: the batch stopped"
    return [by_name[j.name] for j in queue]


def share_cores(
    cores: int, left: int, jobs: int | None, threads: int | None, device: str, backend: str = "local"
) -> tuple[int, int, int | None]:
    """``(jobs, threads, lanes)`` of a batch with ``left`` runs to run: ``--jobs`` runs at once (default: cores
    / threads on the CPU, 8 on a GPU), each with ``--threads`` torch threads (default: cores / jobs), and
    ``lanes`` for ``tdlab run --lanes`` (``None``: the run's default, its threads).

    On this machine's CPU, the cores that the runs at once (``min(left, jobs)``) leave idle at ``threads``
    each (fewer runs left than jobs; or ``--jobs 1 --threads 1`` on 2 cores: one run at a time, the first
    finished sooner) go to the runs as lanes, not threads: an experiment that trains its fits on one-thread
    lanes trains that many at once with the numbers of one lane, bit for bit (:mod:`tdlab.train.lanes`),
    where more torch threads would change the float reductions of every other experiment between a run's
    segments."""
    cpu = _device_kind(device) == "cpu"
    if jobs is None:
        jobs = max(1, cores // (threads or 1)) if cpu else 8
    threads = threads or max(1, cores // jobs)
    per_run = cores // max(1, min(left, jobs))  # the cores each of the runs at once could have
    lanes = per_run if backend == "local" and cpu and left > 0 and per_run > threads else None
    return jobs, threads, lanes


def _fits(job: Job, running: dict[Any, Job], device: str) -> bool:
    """Whether ``job`` may start beside ``running``: always on the CPU (``--jobs`` caps it); on a GPU while the
    running runs' estimated memory plus its own stays under 80 % of the device's free memory before the batch."""
    if _device_kind(device) == "cpu" or not running:
        return True
    return job.memory_bytes + sum(j.memory_bytes for j in running.values()) <= 0.8 * _gpu_free_bytes(device)


def _after(out: Path, name: str, outcome: Outcome) -> tuple[State, str]:
    """The job's state after its process ended."""
    state, _, note = _state(out, name)
    if state in ("done", "diverged"):
        return state, note
    if outcome.rc == 2:  # bad input (a corrupt checkpoint, a config refused): resuming it again would fail again
        return "failed", f"exit code 2 (refused its input): {outcome.tail}"
    if state == "new" and (outcome.stopped_by_batch or outcome.rc in (STOPPED, 130, -2, -9, -15)):
        return "new", f"stopped (exit code {outcome.rc}) before it stored anything to resume; starts anew next time"
    if state == "stopped":
        if outcome.stopped_by_batch:
            return "stopped", "stopped by the batch; resumes from its checkpoints next time"
        if outcome.rc in (STOPPED, 130, -2, -9, -15):
            return (
                "stopped",
                f"stopped from outside the batch (exit code {outcome.rc}); resumes from its checkpoints next time",
            )
        return "stopped", f"exit code {outcome.rc}: {outcome.tail}"
    return "failed", f"exit code {outcome.rc}: {outcome.tail}"


def _duration(seconds: float) -> str:
    if not math.isfinite(seconds):
        return "?"
    if seconds < 90:
        return f"{seconds:.0f} s"
    if seconds < 5400:
        return f"{seconds / 60:.0f} min"
    return f"{seconds / 3600:.1f} h"


def status_table(jobs: Sequence[Job], parallel: int) -> tuple[list[tuple[str, str, str, str, str]], str]:
    """Rows ``(experiment, state, wall, estimate left, note)`` and the line under them: finished, left, and
    the estimated time to finish on ``parallel`` jobs."""
    rows: list[tuple[str, str, str, str, str]] = []
    for j in jobs:
        to_go = "" if j.state in ("done", "diverged") else j.left_text()
        rows.append((j.name, j.state, _duration(j.wall_s) if j.wall_s is not None else "", to_go, j.note))
    left = [j for j in jobs if j.state not in ("done", "diverged")]
    line = f"{len(jobs) - len(left)} finished, {len(left)} left" + (
        f"; {_total(left, parallel)} more on {parallel} jobs" if left else ""
    )
    return rows, line


def _left_of(job: Job, staging: Path) -> str:
    """Set the estimate left of the stopped ``job`` (staged in ``staging``) and say how it was read, for its note.

    Where the run declares its fits (:attr:`Job.fit_arms`) and has done at least :data:`MIN_DONE` of them and not
    all, its own pace: what ran over what it did, ``spent x (1 - done) / done`` (its evaluations and any work
    before the fits count as its pace; not a run busy in another process, whose checkpoints hold work its segments
    do not yet count). Else the cost model's estimate less what ran (:func:`_left`)."""
    spent = staged_elapsed(staging)
    done = staged_done(staging, job.fit_arms) if job.fit_arms and job.state == "stopped" else 0.0
    if spent > 0 and MIN_DONE <= done < 1:
        job.estimate_s, job.floor = spent * (1 - done) / done, False
        return f"; {done:.0%} of its fits done, so ~{_duration(job.estimate_s)} more at its own pace"
    job.estimate_s, job.floor = _left(job.total_s, spent)
    return f"; past its estimate of {_duration(job.total_s)}, so how long is left is not known" if job.floor else ""


def _left(total: float, spent: float) -> tuple[float, bool]:
    """``(seconds left, whether that is a floor)`` of a run estimated at ``total`` whose segments ran ``spent``:
    the estimate less what ran, and at least :data:`MIN_LEFT` of it, a floor once the run outran it."""
    return max(total - spent, MIN_LEFT * total), total - spent < MIN_LEFT * total


def _total(jobs: Sequence[Job], parallel: int) -> str:
    """The estimated time to run ``jobs`` on ``parallel`` jobs: ``about 2.1 h``, or ``at least 2.1 h`` where
    an estimate in it is a floor. The batch's own schedule: each run in the queue's order starts in the first
    job slot that frees, and the time is when the last one ends (a run is not split over slots, so two runs of
    7 h and 12 h on 2 jobs take 12 h, not their mean)."""
    slots = [0.0] * max(1, parallel)
    for j in jobs:
        first = min(range(len(slots)), key=slots.__getitem__)
        slots[first] += j.estimate_s
    return ("at least " if any(j.floor for j in jobs) else "about ") + _duration(max(slots))

"""``tdlab batch``: a queue whose state is its folder. Stopped by ``--until`` (exit 3, checkpoints kept),
killed outright (SIGKILL, the batch and its run), and invoked again, it finishes with the numbers of an
uninterrupted run, bit for bit on the CPU (also with its folder moved elsewhere in between), and publishes the run's record. Its cost model, order and bad
input."""

from __future__ import annotations

import json
import math
import os
import shutil
import signal
import statistics
import subprocess
import sys
import time
from pathlib import Path

import pandas as pd
import pytest
from safetensors.torch import load_file
from typer.testing import CliRunner

from tdlab.batch import DEFAULT_SECONDS, Job, _prior, estimates, plan_batch, status_table
from tdlab.cli import app
from tdlab.runs import Run, staged_elapsed, staging_path

# A markov-init run long enough to be stopped mid-training (two arms, a few thousand tiny steps).
SETS = [
    "train.steps=8000",  # long enough that a --until of 20 s stops it on a fast idle machine
    "train.seq_len=16",
    "train.eval_every=250",
    "train.eval_batches=1",
    "archs=[sec2]",
    "members=2",
]


def _cli(*args: str):
    return CliRunner().invoke(app, list(args), env={"COLUMNS": "250"})


def _batch_cmd(out: Path, results: Path, *extra: str) -> list[str]:
    cmd = [
        sys.executable,
        "-m",
        "tdlab.cli",
        "batch",
        "markov-init",
        "--profile",
        "quick",
        "--out",
        str(out),
        "--results",
        str(results),
        "--jobs",
        "1",
        "--threads",
        "1",
        *extra,
    ]
    for s in SETS:
        cmd += ["--set", s]
    return cmd


def _metrics(run_dir: Path) -> pd.DataFrame:
    return Run(run_dir).metrics().sort_values(["arm", "name", "member", "step"]).reset_index(drop=True)


def _same_run(a: Path, b: Path) -> None:
    pd.testing.assert_frame_equal(_metrics(a), _metrics(b), check_exact=True)
    files = sorted(p.name for p in (a / "arrays").glob("*.safetensors"))
    assert files and files == sorted(p.name for p in (b / "arrays").glob("*.safetensors"))
    for f in files:
        x, y = load_file(str(a / "arrays" / f)), load_file(str(b / "arrays" / f))
        assert x.keys() == y.keys() and all((x[k] == y[k]).all() for k in x), f


@pytest.fixture(scope="module")
def uninterrupted(tmp_path_factory):
    out = tmp_path_factory.mktemp("plain")
    args = ["run", "markov-init", "--quiet", "--out", str(out), "--run-id", "plain"]
    for s in SETS:
        args += ["--set", s]
    env = {**os.environ, "TDLAB_THREADS": "1", "OMP_NUM_THREADS": "1"}
    proc = subprocess.run([sys.executable, "-m", "tdlab.cli", *args], env=env, capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr[-2000:]
    return out / "plain"


def test_a_batch_stopped_then_killed_then_run_again_ends_with_the_numbers_of_one_never_stopped(tmp_path, uninterrupted):
    out, results = tmp_path / "batch", tmp_path / "results"
    staging = staging_path(out / "markov-init")
    # 1. --until: the run checkpoints and exits 3; the batch says what is left and exits 3.
    first = subprocess.run(
        _batch_cmd(out, results, "--until", "20s", "--checkpoint-every", "1m"),
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert first.returncode == 3, first.stdout[-2000:] + first.stderr[-2000:]
    assert "0 finished, 1 left" in first.stdout and "stopped" in first.stdout
    assert list((staging / "checkpoints").glob("*.json")), "the stopped run kept its checkpoints"
    first_segment = staged_elapsed(staging)
    assert first_segment > 0, "the stopped run kept the wall time it ran"
    # the table at the stop says what is left as the next plan does: the estimate less what ran
    [planned] = plan_batch(["markov-init"], "quick", out, "cpu", results, SETS)
    assert planned.estimate_s < planned.total_s
    row = next(ln for ln in first.stdout.splitlines() if ln.startswith("│ markov-init"))
    assert row.split("│")[4].strip() == planned.left_text(), row
    assert not (out / "markov-init").exists() and not (results / "quick" / "markov-init.json").exists()
    # The folder carried to another place (another machine, with only the folder): the batch continues it there.
    moved = tmp_path / "elsewhere"
    shutil.move(out, moved)
    out, staging = moved, staging_path(moved / "markov-init")
    # 2. Invoked again and killed outright (the batch and its run) once a newer checkpoint was written.
    before = {p: p.stat().st_mtime_ns for p in (staging / "checkpoints").glob("*.json")}
    proc = subprocess.Popen(
        _batch_cmd(out, results, "--checkpoint-every", "1s"), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
    )
    deadline = time.monotonic() + 240
    pid_file = out / "logs" / "markov-init.pid"
    try:
        while True:
            assert proc.poll() is None, "the batch ended before it could be killed"
            assert time.monotonic() < deadline, "no newer checkpoint appeared"
            now = {p: p.stat().st_mtime_ns for p in (staging / "checkpoints").glob("*.json")}
            if pid_file.is_file() and any(before.get(p) != t for p, t in now.items()):
                break
            time.sleep(0.05)
        child = int(pid_file.read_text())
        os.kill(proc.pid, signal.SIGKILL)
        os.kill(child, signal.SIGKILL)
    finally:
        if proc.poll() is None:
            proc.kill()
        proc.wait()
    assert staging.is_dir() and not (out / "markov-init").exists()
    # 3. Invoked again: resumed to the end, the record published, exit 0.
    last = subprocess.run(_batch_cmd(out, results), capture_output=True, text=True, timeout=600)
    assert last.returncode == 0, last.stdout[-2000:] + last.stderr[-2000:]
    assert "resume" in last.stdout and "1 finished, 0 left" in last.stdout
    _same_run(out / "markov-init", uninterrupted)
    assert not (out / "markov-init" / "elapsed.json").exists()
    summary = Run(out / "markov-init").summary
    assert summary["wall_time_s"] > first_segment  # every segment that could say
    # which process ran which part: the stopped segment and the last one (the killed one could not say)
    segments = summary["segments"]
    assert len(segments) == 2 and segments[0]["wall_s"] == pytest.approx(first_segment)
    assert sum(g["wall_s"] for g in segments) == pytest.approx(summary["wall_time_s"])
    assert all(g["device"] == "cpu" and g["threads"] == 1 and g["commit"] == summary["env"]["commit"] for g in segments)
    record = json.loads((results / "quick" / "markov-init.json").read_text())
    assert record["experiment"] == "markov-init" and record["members"] == 2
    assert record["segments"] == segments
    # 4. Once more: nothing to do.
    again = subprocess.run(_batch_cmd(out, results), capture_output=True, text=True, timeout=300)
    assert again.returncode == 0 and "0 to run" in again.stdout


def test_the_cost_model_uses_measured_times_and_scales_the_rest_by_their_median_ratio():
    names = ["markov-rank", "topics-wv", "markov-landscape"]
    prior = {n: _prior(n, "paper") for n in names}
    assert prior["markov-rank"] > 59  # quick's 59 s, grown by the paper's longer sequences
    measured = {"markov-rank": 2 * prior["markov-rank"]}
    est = estimates(names, "paper", measured)
    assert est["markov-rank"] == measured["markov-rank"]
    assert est["topics-wv"] == pytest.approx(2 * prior["topics-wv"])  # the fitted factor, 2
    assert est == estimates(names, "paper", measured)
    assert estimates(names, "paper", {})["topics-wv"] == pytest.approx(prior["topics-wv"])
    # markov-landscape has no measured quick time: no prior, the default, never part of the fit
    assert prior["markov-landscape"] is None and est["markov-landscape"] == DEFAULT_SECONDS
    assert estimates(names, "paper", {"markov-landscape": 5.0})["topics-wv"] == pytest.approx(prior["topics-wv"])


def test_the_queue_runs_shortest_first_after_what_finished(tmp_path):
    jobs = plan_batch(["markov-init", "topics-wv", "markov-rank"], "paper", tmp_path, "cpu", None)
    assert [j.state for j in jobs] == ["new"] * 3
    assert [j.estimate_s for j in jobs] == sorted(j.estimate_s for j in jobs)
    rows, line = status_table([*jobs, Job("x", "done", 10.0, 12.0)], 2)
    assert line.startswith("1 finished, 3 left; about") and rows[-1][1] == "done"
    # the time to finish is the batch's schedule: runs in the queue's order, each in the first slot that frees
    hours = [Job(n, "new", h * 3600.0) for n, h in (("a", 1), ("b", 1), ("c", 10))]
    assert status_table(hours, 2)[1] == "0 finished, 3 left; about 11.0 h more on 2 jobs"  # a, then c in a's slot
    assert status_table(hours[::-1], 2)[1] == "0 finished, 3 left; about 10.0 h more on 2 jobs"
    assert status_table(hours, 1)[1] == "0 finished, 3 left; about 12.0 h more on 1 jobs"
    # as named: the runs a machine keeps on first, then the one to start when a lane frees, whatever the estimates
    named = ["markov-init", "topics-wv", "markov-rank"]
    assert [j.name for j in jobs] != named
    assert [j.name for j in plan_batch(named, "paper", tmp_path, "cpu", None, order="named")] == named
    res = _cli("batch", *named, "--plan", "--order", "named", "--out", str(tmp_path / "b"), "--results", "")
    assert res.exit_code == 0, res.output
    assert [c for ln in res.output.splitlines() if "│" in ln and (c := ln.split("│")[1].strip())] == named


@pytest.mark.parametrize(
    "args, message",
    [
        (["nope"], "experiment: unknown experiment"),
        (["markov-rank", "--profile", "huge"], "--profile: unknown profile"),
        (["markov-rank", "--until", "soon"], "--until"),
        (["markov-rank", "--backend", "slurm"], "--backend: unknown backend"),
        (["markov-rank", "--order", "longest"], "--order: unknown order 'longest'; allowed: shortest, named"),
        (["markov-rank", "--set", "train.steps=-1"], "train.steps"),
    ],
)
@pytest.mark.parametrize("plan", [[], ["--plan"]])
def test_bad_input_exits_2_in_one_line_and_writes_nothing(tmp_path, args, message, plan):
    out = tmp_path / "b"
    res = _cli("batch", *args, *plan, "--out", str(out), "--results", str(tmp_path / "r"))
    assert res.exit_code == 2 and message in res.output, res.output
    assert not out.exists() and not (tmp_path / "r").exists()


@pytest.mark.parametrize("plan", [[], ["--plan"]])
def test_an_out_that_is_a_file_exits_2_and_is_left_as_it_was(tmp_path, plan):
    out = tmp_path / "b"
    out.write_text("mine")
    res = _cli("batch", "markov-rank", *plan, "--out", str(out), "--results", "")
    assert res.exit_code == 2 and "not a folder" in res.output, res.output
    assert out.read_text() == "mine"


def test_plan_prints_the_queue_with_estimates_and_runs_nothing(tmp_path):
    """``--plan``: every named run with its state and estimate, shortest first, the time to finish; no folder,
    no record, no process. On a folder it reads the runs' states, and refuses a folder of another profile."""
    import yaml

    from tdlab.experiments.base import get

    out = tmp_path / "b"
    res = _cli("batch", "markov-init", "markov-rank", "--plan", "--out", str(out), "--results", "")
    assert res.exit_code == 0, res.output
    lines = [ln for ln in res.output.splitlines() if "│ markov-" in ln]
    assert [ln.split("│")[1].strip() for ln in lines] == ["markov-rank", "markov-init"]  # shortest first
    assert all(ln.split("│")[2].strip() == "new" for ln in lines)
    assert "0 finished, 2 left; about" in res.output and not out.exists()
    out.mkdir()
    (out / "batch.json").write_text(json.dumps({"format": "tdlab-batch/1", "profile": "paper", "set": []}))
    (out / ".staging-markov-rank").mkdir()
    (out / ".staging-markov-rank" / "config.yaml").write_text("{}")
    res = _cli("batch", "markov-rank", "--plan", "--out", str(out), "--results", "")
    assert res.exit_code == 0 and "│ failed" in res.output and "is corrupt" in res.output, res.output
    cfg = get("markov-rank").make_config("paper", [])
    conf = {"experiment": "markov-rank", "profile": "paper", "config": cfg.model_dump(mode="json")}
    (out / ".staging-markov-rank" / "config.yaml").write_text(yaml.safe_dump(conf, sort_keys=False))
    res = _cli("batch", "markov-rank", "--plan", "--out", str(out), "--results", "")
    assert res.exit_code == 0 and "0 arm(s) finished, 0 checkpointed mid-way" in res.output, res.output
    # what a checkpoint says of its fit: a trainer's the step it reached; a memo's (no step), and one that does
    # not read, only that they are there
    from tdlab.batch import plan_batch

    ckpt = out / ".staging-markov-rank" / "checkpoints"
    ckpt.mkdir()
    (ckpt / "sec2__standard.json").write_text(
        json.dumps({"meta": {"chunk": {"step": 1866}, "config": {"steps": 8000}}})
    )
    (ckpt / "landscape.json").write_text(json.dumps({"meta": {"points": 3}}))
    (ckpt / "broken.json").write_text("{")
    [stopped] = plan_batch(["markov-rank"], "paper", out, "cpu", None)
    assert "0 arm(s) finished, 3 checkpointed mid-way: sec2/standard at step 1,866 of 8,000" in stopped.note
    for f in ckpt.iterdir():
        f.unlink()
    ckpt.rmdir()
    res = _cli("batch", "markov-rank", "--plan", "--profile", "quick", "--out", str(out), "--results", "")
    assert res.exit_code == 2 and "holds a batch of profile 'paper'" in res.output, res.output
    assert sorted(p.name for p in out.iterdir()) == [".staging-markov-rank", "batch.json"]
    # What a stopped run's segments ran is taken off its estimate, down to a tenth of it; unreadable: none.
    from tdlab.batch import MIN_LEFT, plan_batch, status_table

    def job():
        return plan_batch(["markov-rank"], "paper", out, "cpu", None)[0]

    full, elapsed = job().estimate_s, out / ".staging-markov-rank" / "elapsed.json"
    elapsed.write_text('{"wall_time_s": 30}')
    assert job().estimate_s == pytest.approx(max(full - 30, MIN_LEFT * full)) and "ran 30 s so far" in job().note
    assert not job().floor and "about" in status_table([job()], 1)[1]
    elapsed.write_text(json.dumps({"wall_time_s": 10 * full}))
    # Outran its estimate: what is left is a floor, and says so in its note, its column and the total.
    late = job()
    assert late.estimate_s == pytest.approx(MIN_LEFT * full) and late.floor and "past its estimate" in late.note
    assert late.left_text().startswith("≥ ") and "; at least " in status_table([late], 1)[1]
    elapsed.write_text("not json")
    assert job().estimate_s == full and "so far" not in job().note


def test_only_missing_leaves_out_what_is_published_at_the_current_config(tmp_path):
    """``--only-missing``: an experiment with a record made at its profile's current config is left out; a
    record of another config (the profile changed since) is not current, so its experiment runs again; with
    every one published there is nothing to run and nothing is written."""
    repo = Path(__file__).resolve().parents[1] / "results" / "paper"
    results = tmp_path / "r"
    (results / "paper").mkdir(parents=True)
    for name in ("topics-landscape", "markov-landscape"):
        (results / "paper" / f"{name}.json").write_text((repo / f"{name}.json").read_text())
    out = tmp_path / "b"
    args = ["--plan", "--only-missing", "--out", str(out), "--results", str(results)]
    res = _cli("batch", "topics-landscape", "markov-landscape", "markov-landscape-3d", *args)
    assert res.exit_code == 0, res.output
    assert "left out: topics-landscape, markov-landscape" in res.output
    assert [ln.split("│")[1].strip() for ln in res.output.splitlines() if "│ " in ln and "-land" in ln] == [
        "markov-landscape-3d"
    ]
    stale = json.loads((results / "paper" / "markov-landscape.json").read_text())
    stale["config_hash"] = "0" * 64
    (results / "paper" / "markov-landscape.json").write_text(json.dumps(stale))
    res = _cli("batch", "topics-landscape", "markov-landscape", *args)
    assert res.exit_code == 0 and "left out: topics-landscape\n" in res.output, res.output
    assert "│ markov-landscape " in res.output
    res = _cli("batch", "topics-landscape", "--only-missing", "--out", str(out), "--results", str(results))
    assert res.exit_code == 0 and "nothing to run" in res.output, res.output
    assert not out.exists()
    res = _cli("batch", "topics-landscape", "--only-missing", "--out", str(out), "--results", "")
    assert res.exit_code == 2 and "--only-missing" in res.output and not out.exists(), res.output


def test_a_folder_of_another_profile_or_set_is_refused(tmp_path):
    out = tmp_path / "b"
    out.mkdir()
    (out / "batch.json").write_text(json.dumps({"format": "tdlab-batch/1", "profile": "paper", "set": []}))
    res = _cli("batch", "markov-landscape", "--profile", "quick", "--out", str(out), "--results", "")
    assert res.exit_code == 2 and "holds a batch of profile 'paper'" in res.output, res.output
    res = _cli(
        "batch", "markov-landscape", "--profile", "paper", "--set", "n_traj=3", "--out", str(out), "--results", ""
    )
    assert res.exit_code == 2 and "--set" in res.output, res.output
    (out / "batch.json").write_text(
        json.dumps({"format": "tdlab-batch/1", "profile": "paper", "set": [], "device": "cuda"})
    )
    res = _cli("batch", "markov-landscape", "--profile", "paper", "--out", str(out), "--results", "")
    assert res.exit_code == 2 and "holds a batch run on 'cuda'" in res.output, res.output
    assert sorted(p.name for p in out.iterdir()) == ["batch.json"]


def test_ray_backend_runs_the_queue_as_tasks_and_publishes(tmp_path):
    from tdlab.batch import run_batch

    out, results = tmp_path / "b", tmp_path / "results"
    tiny = [
        "train.steps=20",
        "train.seq_len=16",
        "train.eval_every=10",
        "train.eval_batches=1",
        "archs=[sec2]",
        "members=2",
    ]
    said: list[str] = []
    jobs = run_batch(
        ["markov-init"], "quick", out, jobs=1, threads=1, results=results, backend="ray", sets=tiny, say=said.append
    )
    assert [j.state for j in jobs] == ["done"], [j.note for j in jobs]
    assert "ray" in said[0] and (results / "quick" / "markov-init.json").is_file()
    assert Run(out / "markov-init").summary["status"] == "done"


@pytest.mark.parametrize(
    "cores, left, jobs, threads, device, backend, want",
    [
        (2, 1, None, None, "cpu", "local", (2, 1, 2)),  # the last run of a 2-core machine gets both cores as lanes
        (2, 1, 2, 1, "cpu", "local", (2, 1, 2)),
        (2, 2, 2, 1, "cpu", "local", (2, 1, None)),  # as many runs as jobs: each its own core
        (2, 5, None, None, "cpu", "local", (2, 1, None)),
        (8, 3, 4, 2, "cpu", "local", (4, 2, None)),  # 8 // 3 = 2 cores a run: no more than its threads
        (8, 1, 4, 2, "cpu", "local", (4, 2, 8)),
        (2, 1, 1, 2, "cpu", "local", (1, 2, None)),  # one job already has every core
        (2, 0, 2, 1, "cpu", "local", (2, 1, None)),  # nothing left to run
        (2, 3, 1, 1, "cpu", "local", (1, 1, 2)),  # one run at a time on one thread: the other core is its lane
        (4, 3, 2, 1, "cpu", "local", (2, 1, 2)),  # two runs at once on 4 cores, one thread each: a lane spare each
        (16, 1, None, None, "cuda", "local", (8, 2, None)),  # a GPU's runs: packed by memory, no lanes
        (2, 1, 2, 1, "cpu", "ray", (2, 1, None)),  # a cluster's cores are Ray's to share
    ],
)
def test_a_batch_gives_the_cores_of_the_runs_it_does_not_have_to_the_ones_it_has_as_lanes(
    cores, left, jobs, threads, device, backend, want
):
    from tdlab.batch import share_cores

    assert share_cores(cores, left, jobs, threads, device, backend) == want


def test_the_last_run_of_a_batch_is_started_with_lanes_for_the_idle_cores_and_the_same_threads(tmp_path, monkeypatch):
    """One run left of a 2-job batch on 2 cores: ``tdlab run --lanes 2`` with one torch thread, so that an
    experiment training on one-thread lanes uses both cores with the numbers of one (the threads, which every
    other experiment's float reductions depend on, are those of the batch's flags). Two runs: no ``--lanes``;
    two runs one at a time (``--jobs 1 --threads 1``): each with ``--lanes 2``."""
    import tdlab.batch as batch
    import tdlab.cores as cores

    monkeypatch.setattr(cores, "usable_cores", lambda: 2)
    started = []

    def run_job(name, cmd, env, *rest):
        started.append((name, cmd, env))
        return batch.Outcome(name, 1, 0.0, "not run by the test")

    monkeypatch.setattr(batch, "run_job", run_job)
    two = ["markov-rank", "markov-landscape"]
    for names, at_once, lanes in ((["markov-rank"], 2, ["--lanes", "2"]), (two, 2, []), (two, 1, ["--lanes", "2"])):
        started.clear()
        out = tmp_path / f"{'-'.join(names)}-{at_once}"
        jobs = batch.run_batch(names, "quick", out, jobs=at_once, threads=1, results=None, say=lambda line: None)
        assert [j.state for j in jobs] == ["failed"] * len(names)
        assert len(started) == len(names)
        for _, cmd, env in started:
            assert env["TDLAB_THREADS"] == env["OMP_NUM_THREADS"] == "1"
            assert cmd[cmd.index("--lanes") : cmd.index("--lanes") + 2] == lanes if lanes else "--lanes" not in cmd


def test_runs_share_a_gpu_while_their_estimated_memory_fits(monkeypatch):
    import tdlab.batch as batch

    monkeypatch.setattr(batch, "_gpu_free_bytes", lambda device: 10e9)
    a, b, big = (
        Job("a", "new", 1.0, memory_bytes=3e9),
        Job("b", "new", 1.0, memory_bytes=4e9),
        Job("c", "new", 1.0, memory_bytes=9e9),
    )
    assert batch._fits(a, {}, "cuda")  # the first run always starts
    assert batch._fits(b, {"h1": a}, "cuda")  # 7 GB of 8 (80 % of the free 10)
    assert not batch._fits(big, {"h1": a}, "cuda") and batch._fits(big, {}, "cuda")
    assert not batch._fits(Job("d", "new", 1.0, memory_bytes=2e9), {"h1": a, "h2": b}, "cuda")  # 9 GB > 8
    assert batch._fits(big, {"h1": a, "h2": b}, "cpu")  # the CPU: --jobs alone caps it


def test_a_length_in_epochs_counts_optimiser_steps():
    """anchors-mlp: quick 40 epochs of 200 steps, the seed 1000 epochs of 9,900: the prior grows by the
    optimiser steps' ratio (1,237.5x), not by the epochs' alone (25x), beside the activations' ratio."""
    from tdlab.config import build_config
    from tdlab.costs.quick_times import quick_times
    from tdlab.experiments.base import get
    from tdlab.train.memory import estimate

    exp = get("anchors-mlp")
    q, p = (build_config(exp.Config, exp.profiles[k]) for k in ("quick", "paper"))
    act = estimate(p).bytes / estimate(q).bytes
    steps = (p.schedule.epochs * p.steps_per_epoch) / (q.schedule.epochs * q.steps_per_epoch)
    assert steps == pytest.approx(1000 * 9900 / (40 * 200))
    assert _prior("anchors-mlp", "paper") == pytest.approx(quick_times()["anchors-mlp"].seconds * act * steps)


def test_an_experiment_without_a_quick_time_takes_its_published_quick_records():
    """markov-landscape has no shipped quick time: its prior comes from its published quick record's wall time
    (scaled like any prior), not the flat DEFAULT_SECONDS a run with no measurement gets."""
    from tdlab.batch import quick_times

    quick = quick_times(Path(__file__).resolve().parents[1] / "results")
    assert "markov-landscape" in quick and quick["markov-landscape"] > 0
    assert _prior("markov-landscape", "paper") is None
    assert _prior("markov-landscape", "paper", quick) == pytest.approx(
        _prior("markov-landscape", "paper", {"markov-landscape": 1.0}) * quick["markov-landscape"]
    )
    est = estimates(["markov-landscape"], "paper", {}, quick)
    assert est["markov-landscape"] != DEFAULT_SECONDS
    assert quick_times(None) == {}


def test_the_prior_counts_the_separate_trainings():
    """markov-icl-depth trains 2 cells of depths 1 and 2 in quick and the seed's 36 (k 1..3 x depth 1..3 x 4
    position encodings) in paper: the prior grows by the cells' layers, 72 / 3 = 24x, beside the length's and
    the per-step arithmetic's ratios (the 63-minute estimate that took 12 hours). An experiment whose arms do not change
    between the profiles keeps a work ratio of 1. Where no length field gives the training length (markov-bridge's
    budgets, anchors-flows' flow times), the experiment's own count does."""
    from tdlab.config import build_config
    from tdlab.costs.quick_times import quick_times
    from tdlab.costs.work import fit_work, work
    from tdlab.experiments.base import get
    from tdlab.rounds import length_field
    from tdlab.train.compute import step_flops

    def per_step(q, p):  # a step's arithmetic, paper over quick
        return step_flops(p) / step_flops(q)

    exp = get("markov-icl-depth")
    q, p = (build_config(exp.Config, exp.profiles[k]) for k in ("quick", "paper"))
    assert (fit_work(exp, q), fit_work(exp, p)) == (3.0, 72.0)
    act = per_step(q, p)
    length = p.train.steps / q.train.steps
    assert _prior("markov-icl-depth", "paper") == pytest.approx(
        quick_times()["markov-icl-depth"].seconds * act * length * 24
    )
    tying = get("markov-tying")
    q, p = (build_config(tying.Config, tying.profiles[k]) for k in ("quick", "paper"))
    assert (fit_work(tying, q), fit_work(tying, p)) == (6.0, 50.0)
    # markov-bridge has no single length: every (cell, budget) is a fit as long as its budget, so its work is
    # the optimiser steps of all of them: quick 4 cells x (500 + 3000), the seed's 13 x (2000 + 8000), 9.3x
    # (in units of each profile's first budget it read 2.3x, and put a run of ~33 h on one thread at 7 h)
    bridge = get("markov-bridge")
    q, p = (build_config(bridge.Config, bridge.profiles[k]) for k in ("quick", "paper"))
    steps = [len(c.grid) * sum(c.budgets) for c in (q, p)]
    assert steps == [14_000, 130_000] and fit_work(bridge, p) / fit_work(bridge, q) == pytest.approx(130 / 14)
    assert length_field(bridge) is None
    act = per_step(q, p)
    assert _prior("markov-bridge", "paper", {"markov-bridge": 1.0}) == pytest.approx(act * 130 / 14)
    # anchors-flows has neither a length field nor activations to scale: its own count, 10x the sequences and
    # 101 / 41 the gradient evaluations (its paper run took 3,236 s on one thread; read as quick's 96 s before)
    flows = get("anchors-flows")
    q, p = (build_config(flows.Config, flows.profiles[k]) for k in ("quick", "paper"))
    assert work(flows, p) / work(flows, q) == pytest.approx(10 * 101 / 41)
    assert _prior("anchors-flows", "paper", {"anchors-flows": 1.0}) == pytest.approx(10 * 101 / 41)
    # anchors-labels: three arms whose steps per epoch grow with the data set (quick 200 x (1 + 12 + 12) epochs,
    # the seed's 1,980 x (50 + 1000 + 1000)): 812x the steps, times a step's arithmetic (measured ~220 steps/min)
    labels = get("anchors-labels")
    q, p = (build_config(labels.Config, labels.profiles[k]) for k in ("quick", "paper"))
    assert work(labels, p) / work(labels, q) == pytest.approx(4_059_000 / 5_000 * per_step(q, p))
    topics = get("topics-wv")
    assert fit_work(topics, build_config(topics.Config, topics.profiles["paper"])) == 1.0
    assert work(topics, build_config(topics.Config, topics.profiles["paper"])) is None


# Whole paper runs measured on one CPU thread (docs/batch.md), hours, and the prior when it read a step's work
# from its activations (tdlab 568b437), hours.
MEASURED_CPU_HOURS = {
    "topics-real": (80.0, 5.81),  # the MLM's steps measured for ~2 h, extrapolated
    "topics-real-two-stage": (5.0, 0.67),  # its CPU cross-check, two members in ~3.3 h
    "anchors-labels": (300.0, 60.6),  # the groups arm's steps for 7 h; the mem arms are 1,980,000 steps each
    "markov-init": (11.0, 6.38),  # ~48 steps/min over its 4 x 8,000 steps
    "markov-bridge": (33.0, 32.6),  # its fits of 1,000 steps, timed
}
WIDENED = ("topics-real", "topics-real-two-stage", "anchors-labels")  # d 64 -> 512, 64 -> 512, 64 -> 200


def test_the_prior_reads_a_steps_arithmetic_so_wider_models_are_not_under_read():
    """The seed's real-text runs widen d 64 -> 512 and anchors-labels 64 -> 200: a step's matrix products grow
    with d², its activations with d. Read from activations, the prior put these runs 5-14x short while the runs
    that keep their width (markov-init, markov-bridge) were within 1.5x; read from the arithmetic, each widened
    run's measured / prior lies closer to the others' (the factor the batch fits per device)."""
    from tdlab.batch import quick_times

    quick = quick_times(Path(__file__).resolve().parents[1] / "results")
    now = {n: h * 3600 / _prior(n, "paper", quick) for n, (h, _) in MEASURED_CPU_HOURS.items()}
    before = {n: h / old for n, (h, old) in MEASURED_CPU_HOURS.items()}
    for ratio in (now, before):  # the width-keeping runs' factor, under either prior
        ratio["kept"] = statistics.geometric_mean(v for n, v in ratio.items() if n not in WIDENED)
    for n in WIDENED:
        assert abs(math.log(now[n] / now["kept"])) < abs(math.log(before[n] / before["kept"])), (n, now, before)


def test_an_experiment_that_counts_its_own_work_is_scaled_by_that_count():
    """icl-landscape's pre-LN panel grows with prompts x context x (GD steps + map points): ~300x from quick to
    paper, where length x activations saw ~4x and predicted minutes for a day's CPU work. Its own count is
    what the prior scales quick's time by, and it keeps quick's measured split (~45 % pre-LN)."""
    from tdlab.config import build_config
    from tdlab.costs.quick_times import quick_times
    from tdlab.costs.work import work
    from tdlab.experiments.base import get

    exp = get("icl-landscape")
    q, p = (build_config(exp.Config, exp.profiles[k]) for k in ("quick", "paper"))
    wq, wp = work(exp, q), work(exp, p)
    no_ln = work(exp, q.model_copy(update={"panels": [x for x in q.panels if not x.pre_ln]}))
    longer = work(exp, p.model_copy(update={"ln_steps": 2 * p.ln_steps}))
    assert wq and wp and no_ln and longer
    prior = _prior("icl-landscape", "paper")
    assert prior == pytest.approx(quick_times()["icl-landscape"].seconds * wp / wq) and prior > 5 * 3600
    assert 1 - no_ln / wq == pytest.approx(0.45, abs=0.01)
    assert longer > 1.5 * wp


def test_a_run_made_at_a_config_its_profile_no_longer_has_is_set_aside_and_run_again(tmp_path, uninterrupted):
    """A profile changed after a batch folder's run started or finished (members raised, say): resuming it
    would finish the old config and publishing it would put a run nobody can make any more under
    results/. The batch calls it stale, keeps it aside as ``.stale-NAME-<config hash>`` and runs it anew."""
    import shutil

    import yaml

    from tdlab.batch import run_batch

    out = tmp_path / "b"
    out.mkdir()
    (out / "batch.json").write_text(json.dumps({"format": "tdlab-batch/1", "profile": "quick", "set": SETS}))
    shutil.copytree(uninterrupted, out / "markov-init")
    [job] = plan_batch(["markov-init"], "quick", out, "cpu", None, SETS)
    assert job.state == "done"  # the folder's run is the profile with these sets
    for where in (out / "markov-init", staging_path(out / "markov-init")):
        conf = yaml.safe_load((where / "config.yaml").read_text())
        conf["config"]["members"] = 3  # what the profile gave when this run started
        (where / "config.yaml").write_text(yaml.safe_dump(conf, sort_keys=False))
        [job] = plan_batch(["markov-init"], "quick", out, "cpu", None, SETS)
        assert job.state == "stale" and "no longer has" in job.note, job
        said: list[str] = []
        [job] = run_batch(["markov-init"], "quick", out, until_s=0, results=None, sets=SETS, say=said.append)
        assert job.state == "new" and any(s.startswith("stale    markov-init") for s in said), said
        [aside] = out.glob(".stale-markov-init-*")
        assert yaml.safe_load((aside / "config.yaml").read_text())["config"]["members"] == 3
        assert not where.exists()
        if where == out / "markov-init":  # again as a stopped run: its staging folder
            shutil.rmtree(aside)
            shutil.copytree(uninterrupted, staging_path(out / "markov-init"))


def test_a_stopped_run_that_declares_its_fits_is_timed_at_its_own_pace(tmp_path):
    """A stopped ``markov-init`` (4 fits of 8,000 steps) that ran an hour, with one fit stored and the next
    checkpointed half-way, has done (1 + 1/2) / 4 of its fits: 6,000 s more at that pace, whatever the cost model
    said. With nothing done (its first minutes) the cost model's estimate less what ran stands."""
    import yaml

    from tdlab.batch import plan_batch
    from tdlab.costs.work import fit_arms
    from tdlab.experiments.base import get

    out, exp = tmp_path / "b", get("markov-init")
    cfg = exp.make_config("paper", [])
    staging = out / ".staging-markov-init"
    (staging / "arrays").mkdir(parents=True)
    (staging / "checkpoints").mkdir()
    (out / "batch.json").write_text(json.dumps({"format": "tdlab-batch/1", "profile": "paper", "set": []}))
    conf = {"experiment": "markov-init", "profile": "paper", "config": cfg.model_dump(mode="json")}
    (staging / "config.yaml").write_text(yaml.safe_dump(conf, sort_keys=False))
    (staging / "elapsed.json").write_text(json.dumps({"wall_time_s": 3600.0}))
    [first, second, *_] = [a.replace("/", "__") for a in fit_arms(exp, cfg)]
    (staging / "arrays" / f"{first}.safetensors").write_bytes(b"")
    meta = {"seeds": [1, 2, 3, 4, 5], "finished": 0, "chunk": {"members": 5, "step": 4000}, "config": {"steps": 8000}}
    (staging / "checkpoints" / f"{second}.json").write_text(json.dumps({"meta": meta}))
    [job] = plan_batch(["markov-init"], "paper", out, "cpu", None)
    assert job.state == "stopped" and job.estimate_s == pytest.approx(6000.0) and not job.floor
    assert "38% of its fits done, so ~1.7 h more at its own pace" in job.note, job.note
    for f in [*(staging / "arrays").iterdir(), *(staging / "checkpoints").iterdir()]:
        f.unlink()
    [job] = plan_batch(["markov-init"], "paper", out, "cpu", None)
    assert job.estimate_s == pytest.approx(max(job.total_s - 3600.0, 0.1 * job.total_s))
    assert "at its own pace" not in job.note

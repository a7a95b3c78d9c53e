"""Sweeps: a grid of ordinary runs (local process pool and Ray), status, summary table and phase
diagrams, skipping finished points, a worker that dies, and specs refused before anything runs."""

from __future__ import annotations

import json
import math
import signal
import sys
import time
from pathlib import Path

import pandas as pd
import pytest
import yaml
from typer.testing import CliRunner

import tdlab.sweep as sweep_mod
from tdlab.cli import app
from tdlab.config import ConfigError
from tdlab.index import RunIndex
from tdlab.runs import Run
from tdlab.sweep import load_spec, plan, run_sweep

TINY = {
    "train.steps": 20,
    "train.seq_len": 16,
    "train.eval_every": 10,
    "train.eval_batches": 1,
    "archs": ["sec2"],
    "inits": ["local-to-global"],
}
CLAIM = "proposed-init-ends-at-global-minimum/sec2"  # a claim row: the sec2 arm's gap to the Bayes predictor


def _spec_file(folder: Path, **fields) -> Path:
    spec = {
        "name": "pq",
        "experiment": "markov-init",
        "profile": "quick",
        "seeds": 2,
        "set": TINY,
        "grid": {"task.p": [0.3, 0.7], "task.q": [0.4, 0.8]},
    }
    spec.update(fields)
    f = folder / f"{spec['name']}.yaml"
    f.write_text(yaml.safe_dump(spec, sort_keys=False))
    return f


def _run_dirs(out: Path) -> list[str]:
    """Finished run directories under ``out`` (and any staging folder)."""
    if not out.is_dir():
        return []
    return sorted(p.name for p in out.iterdir() if p.is_dir() and p.name != "sweeps")


def _entropy_rate(p: float, q: float) -> float:
    """Entropy rate of the chain [[1-p, p], [q, 1-q]] in nats, written independently of tdlab."""
    h = lambda x: -x * math.log(x) - (1 - x) * math.log(1 - x)  # noqa: E731
    pi1 = p / (p + q)
    return (1 - pi1) * h(p) + pi1 * h(q)


# ------------------------------------------------------------------------------------------------
# A 2x2 local sweep, then the same sweep again.


@pytest.fixture(scope="module")
def grid_sweep(tmp_path_factory):
    root = tmp_path_factory.mktemp("sweep")
    out = root / "runs"
    spec = load_spec(_spec_file(root))
    first_msgs: list[str] = []
    first = run_sweep(spec, out, "local", workers=2, echo=first_msgs.append)
    dirs_after_first = _run_dirs(out)
    status_after_first = json.loads((out / "sweeps" / "pq" / "status.json").read_text())
    mtimes = {d: (out / d / "summary.json").stat().st_mtime_ns for d in dirs_after_first}
    summary_after_first = pd.read_parquet(out / "sweeps" / "pq" / "summary.parquet")
    again_msgs: list[str] = []
    again = run_sweep(load_spec(_spec_file(root)), out, "local", workers=2, echo=again_msgs.append)
    return {
        "out": out,
        "spec": spec,
        "first": first,
        "first_msgs": first_msgs,
        "dirs": dirs_after_first,
        "status": status_after_first,
        "summary": summary_after_first,
        "mtimes": mtimes,
        "again": again,
        "again_msgs": again_msgs,
    }


def test_sweep_makes_one_run_directory_per_point(grid_sweep):
    out, spec, first = grid_sweep["out"], grid_sweep["spec"], grid_sweep["first"]
    assert [p.status for p in first] == ["done"] * 4
    assert [p.error for p in first] == [None] * 4
    assert grid_sweep["dirs"] == sorted(p.run_id for p in plan(spec))
    assert {tuple(sorted(p.overrides.items())) for p in first} == {
        (("task.p", p), ("task.q", q)) for p in (0.3, 0.7) for q in (0.4, 0.8)
    }
    for p in first:
        run = Run(out / p.run_id)
        cfg = run.config
        assert cfg["sweep"] == "pq"
        assert cfg["config"]["task"] == {"p": p.overrides["task.p"], "q": p.overrides["task.q"]}
        assert cfg["config"]["train"]["steps"] == 20 and cfg["config"]["members"] == 2
        assert run.summary["status"] == "done"
    assert "4 points, 0 already done, 4 to run" in grid_sweep["first_msgs"][0]
    assert any("4 done, 0 failed" in m for m in grid_sweep["first_msgs"])


def test_sweep_status_json_lists_every_point_done(grid_sweep):
    status = grid_sweep["status"]
    assert len(status) == 4
    assert [s["index"] for s in status] == [0, 1, 2, 3]
    assert [s["status"] for s in status] == ["done"] * 4
    assert [s["run_id"] for s in status] == [p.run_id for p in grid_sweep["first"]]
    assert all(s["error"] is None for s in status)


def test_sweep_points_are_indexed_with_the_sweep_tag(grid_sweep):
    rows = RunIndex(grid_sweep["out"]).query("sweep = 'pq'")
    assert sorted(r["run_id"] for r in rows) == grid_sweep["dirs"]
    assert all(r["status"] == "done" and r["claims_total"] == len(r["summary"]["claims"]) >= 1 for r in rows)
    assert len(RunIndex(grid_sweep["out"]).query("sweep = 'pq' AND config.task.p = 0.7")) == 2


def test_sweep_summary_table_has_one_row_per_point_with_claims(grid_sweep):
    sdir = grid_sweep["out"] / "sweeps" / "pq"
    df = grid_sweep["summary"]  # as written by the first sweep
    assert len(df) == 4
    assert sorted(df["run_id"]) == grid_sweep["dirs"]
    for col in ("task.p", "task.q", "status", f"{CLAIM}.measured", f"{CLAIM}.expected", f"{CLAIM}.verdict"):
        assert col in df.columns, col
    assert set(df["status"]) == {"done"}
    for _, row in df.iterrows():
        run = Run(grid_sweep["out"] / row["run_id"])
        (claim,) = [r for g in run.summary["claims"] for r in g["rows"] if r["id"] == CLAIM]
        assert row[f"{CLAIM}.measured"] == pytest.approx(claim["mean"])
        assert row[f"{CLAIM}.verdict"] == claim["verdict"]
        assert row[f"{CLAIM}.expected"] == 0.0  # the gap to the Bayes predictor on the same batches
        # the measurements belong to the row's own (p, q)
        assert row["m.entropy_rate"] == pytest.approx(_entropy_rate(row["task.p"], row["task.q"]), abs=1e-9)
    assert (sdir / "spec.yaml").is_file()
    assert yaml.safe_load((sdir / "spec.yaml").read_text())["grid"] == {"task.p": [0.3, 0.7], "task.q": [0.4, 0.8]}


def test_sweep_writes_a_phase_diagram_per_metric_and_an_html_summary(grid_sweep):
    sdir = grid_sweep["out"] / "sweeps" / "pq"
    df = pd.read_parquet(sdir / "summary.parquet")
    metrics = [c for c in df.columns if c.endswith(".measured") or c.startswith("m.")]
    assert f"{CLAIM}.measured" in metrics and "m.entropy_rate" in metrics
    want = {"".join(ch if ch.isalnum() or ch in "-_." else "_" for ch in m) + ".png" for m in metrics}
    figs = {f.name for f in (sdir / "figures").glob("*.png")}
    assert figs == want
    for f in (sdir / "figures").glob("*.png"):
        assert f.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and f.stat().st_size > 1000
    html = (sdir / "summary.html").read_text()
    assert "<table" in html and "sweep pq" in html
    for name in figs:
        assert f"figures/{name}" in html
    for run_id in grid_sweep["dirs"]:
        assert run_id in html


def test_starting_the_same_sweep_again_skips_every_point(grid_sweep):
    out = grid_sweep["out"]
    assert "4 points, 4 already done, 0 to run" in grid_sweep["again_msgs"][0]
    assert [p.status for p in grid_sweep["again"]] == ["skipped"] * 4
    assert [p.run_id for p in grid_sweep["again"]] == [p.run_id for p in grid_sweep["first"]]
    assert _run_dirs(out) == grid_sweep["dirs"]
    assert {d: (out / d / "summary.json").stat().st_mtime_ns for d in grid_sweep["dirs"]} == grid_sweep["mtimes"]
    assert len(RunIndex(out).query("sweep = 'pq'")) == 4
    df = pd.read_parquet(out / "sweeps" / "pq" / "summary.parquet")
    assert len(df) == 4 and set(df["status"]) == {"skipped"}
    # skipped points still report their claims, the same numbers as before
    cols = ["run_id", f"{CLAIM}.measured", f"{CLAIM}.verdict", "m.entropy_rate"]
    pd.testing.assert_frame_equal(df[cols], grid_sweep["summary"][cols])
    status = json.loads((out / "sweeps" / "pq" / "status.json").read_text())
    assert [s["status"] for s in status] == ["skipped"] * 4


def test_plan_is_deterministic_and_depends_on_the_spec(tmp_path):
    a = plan(load_spec(_spec_file(tmp_path)))
    b = plan(load_spec(_spec_file(tmp_path)))
    assert [p.run_id for p in a] == [p.run_id for p in b]
    assert len({p.run_id for p in a}) == 4 and all(p.run_id.startswith("pq__p") for p in a)
    c = plan(load_spec(_spec_file(tmp_path, set={**TINY, "train.steps": 21})))
    assert not {p.run_id for p in a} & {p.run_id for p in c}
    d = plan(load_spec(_spec_file(tmp_path, points=[{"task.p": 0.9, "task.q": 0.9}])))
    assert len(d) == 5 and d[4].overrides == {"task.p": 0.9, "task.q": 0.9}


def test_a_sweep_with_decide_runs_every_point_with_decide_and_its_budget(tmp_path):
    from tdlab.sweep import _command

    spec = load_spec(_spec_file(tmp_path, decide="10m"))
    cmd = _command(spec, plan(spec)[0], tmp_path / "runs")
    assert cmd[-3:] == ["--decide", "--budget", "10m"]
    assert "--decide" not in _command(load_spec(_spec_file(tmp_path)), plan(spec)[0], tmp_path / "runs")


# ------------------------------------------------------------------------------------------------
# A point whose worker dies.


def test_a_point_whose_worker_is_killed_fails_and_the_sweep_goes_on(tmp_path, monkeypatch):
    out = tmp_path / "runs"
    spec = load_spec(_spec_file(tmp_path, name="dies", grid={"task.p": [0.3, 0.7]}))
    victim = plan(spec)[0].run_id
    real = sweep_mod.run_point
    seen: list[list[str]] = []

    def run_point(cmd, threads):
        seen.append(cmd)
        if victim in cmd:  # this point's worker is killed outright
            cmd = [sys.executable, "-c", "import os, signal; os.kill(os.getpid(), signal.SIGKILL)"]
        return real(cmd, threads)

    monkeypatch.setattr(sweep_mod, "run_point", run_point)
    msgs: list[str] = []
    points = run_sweep(spec, out, "local", workers=2, echo=msgs.append)
    assert len(seen) == 2
    assert [p.index for p in points] == [0, 1]
    assert points[0].status == "failed" and points[1].status == "done"
    assert f"exit code {-signal.SIGKILL}" in points[0].error
    assert _run_dirs(out) == [points[1].run_id]
    status = json.loads((out / "sweeps" / "dies" / "status.json").read_text())
    assert [s["status"] for s in status] == ["failed", "done"]
    assert "exit code" in status[0]["error"]
    df = pd.read_parquet(out / "sweeps" / "dies" / "summary.parquet")
    assert list(df["status"]) == ["failed", "done"]
    assert pd.isna(df.loc[0, f"{CLAIM}.measured"]) and not pd.isna(df.loc[1, f"{CLAIM}.measured"])
    assert any("failed" in m and "exit code" in m for m in msgs)
    assert any("1 done, 1 failed" in m for m in msgs)


# ------------------------------------------------------------------------------------------------
# Specs refused before anything runs.


@pytest.mark.parametrize(
    "fields, message",
    [
        ({"experiment": "no-such-experiment"}, "unknown experiment"),
        ({"grid": {"task.x": [0.1, 0.2]}}, "task.x"),
        ({"grid": {"task.p": [0.5, 1.5]}}, "task.p"),
        ({"points": [{"train.steps": 0}]}, "train.steps"),
        ({"set": {**TINY, "archs": ["lstm"]}}, "archs"),
        ({"grid": {"task.p": []}}, "no values"),
        ({"name": "has space"}, "name"),
        ({"bogus": 1}, "bogus"),
        ({"profile": "huge"}, "profile"),
        ({"decide": "soon"}, "decide"),
    ],
)
def test_bad_spec_is_refused_before_any_run(tmp_path, fields, message):
    f = _spec_file(tmp_path, **fields)
    out = tmp_path / "runs"
    with pytest.raises(ConfigError, match=message):
        load_spec(f)
    res = CliRunner().invoke(app, ["sweep", str(f), "--out", str(out)], env={"COLUMNS": "250"})
    assert res.exit_code == 2, res.output
    assert message in res.output and "Traceback" not in res.output
    assert _run_dirs(out) == []


def test_unreadable_spec_and_bad_backend_exit_2(tmp_path):
    f = tmp_path / "list.yaml"
    f.write_text("- a\n- b\n")
    res = CliRunner().invoke(app, ["sweep", str(f), "--out", str(tmp_path / "runs")])
    assert res.exit_code == 2 and "expected a mapping" in res.output
    res = CliRunner().invoke(app, ["sweep", str(tmp_path / "missing.yaml"), "--out", str(tmp_path / "runs")])
    assert res.exit_code == 2 and "cannot read" in res.output
    res = CliRunner().invoke(
        app, ["sweep", str(_spec_file(tmp_path)), "--backend", "slurm", "--out", str(tmp_path / "runs")]
    )
    assert res.exit_code == 2 and "backend" in res.output
    assert _run_dirs(tmp_path / "runs") == []


# ------------------------------------------------------------------------------------------------
# Sizes: no empty specs, a limit on points checked before any point is built, validation once.


def _stderr_lines(res) -> list[str]:
    return [line for line in res.stderr.splitlines() if line.strip()]


@pytest.mark.parametrize("fields", [{"grid": {}}, {"grid": {}, "points": []}])
def test_spec_without_points_is_refused(tmp_path, fields):
    f = _spec_file(tmp_path, **fields)
    with pytest.raises(ConfigError, match="no points"):
        load_spec(f)
    res = CliRunner().invoke(app, ["sweep", str(f), "--out", str(tmp_path / "runs")], env={"COLUMNS": "250"})
    assert res.exit_code == 2 and len(_stderr_lines(res)) == 1 and "no points" in res.stderr, res.output
    assert _run_dirs(tmp_path / "runs") == []


def test_huge_grid_is_refused_from_its_size_before_any_point_is_built(tmp_path, monkeypatch):
    built = []
    monkeypatch.setattr(sweep_mod, "_points", lambda spec: built.append(1) or [])
    f = _spec_file(
        tmp_path,
        grid={"task.p": [0.1 + i * 1e-6 for i in range(1000)], "train.lr": [1e-3] * 1000, "seed": list(range(1000))},
    )  # 10^9 points
    t0 = time.monotonic()
    res = CliRunner().invoke(app, ["sweep", str(f), "--out", str(tmp_path / "runs")], env={"COLUMNS": "250"})
    assert res.exit_code == 2 and len(_stderr_lines(res)) == 1, res.output
    assert "1000000000 points, more than the limit of 10000" in res.stderr and "--max-points" in res.stderr
    assert built == [] and time.monotonic() - t0 < 10
    small = _spec_file(tmp_path, grid={"task.p": [0.2, 0.4, 0.6]}, points=[{"task.q": 0.3}])
    with pytest.raises(ConfigError, match="4 points, more than the limit of 3"):
        load_spec(small, max_points=3)
    res = CliRunner().invoke(app, ["sweep", str(small), "--max-points", "3", "--out", str(tmp_path / "runs")])
    assert res.exit_code == 2 and "limit of 3" in res.stderr
    assert _run_dirs(tmp_path / "runs") == []


def test_points_are_validated_once(tmp_path, monkeypatch):
    from tdlab.experiments.base import Experiment

    calls = []
    real = Experiment.make_config
    monkeypatch.setattr(Experiment, "make_config", lambda self, *a, **k: calls.append(1) or real(self, *a, **k))
    monkeypatch.setattr(sweep_mod, "run_point", lambda cmd, threads: (1, "not run in this test"))
    spec = load_spec(_spec_file(tmp_path, grid={"task.p": [0.2, 0.4, 0.6]}, points=[{"task.q": 0.3}]))
    run_sweep(spec, tmp_path / "runs", "local", workers=1, echo=lambda m: None)
    assert len(calls) == 4


# ------------------------------------------------------------------------------------------------
# Only what matches is adopted: a foreign run under a point's run id fails the point.


def _plant_run(out: Path, run_id: str, overrides: dict, staging: bool = False) -> Path:
    """A run folder ``out/run_id`` (or its staging folder) whose config.yaml holds the sweep's fixed
    settings with ``overrides``, written without training; finished ones get a summary."""
    from tdlab.experiments.base import get
    from tdlab.runs import RunWriter

    exp = get("markov-init")
    sets = [f"{k}={json.dumps(v)}" for k, v in {**TINY, **overrides}.items()]
    cfg = exp.make_config("quick", sets, members=2)
    w = RunWriter(out, exp.name, run_id)
    w.write_config({"experiment": exp.name, "profile": "quick", "config": cfg.model_dump(mode="json"), "sweep": "pq"})
    if staging:
        (w.path / "checkpoints").mkdir()
        return w.path
    run = w.finish()
    run.write_summary({"experiment": exp.name, "status": "done", "run_id": run_id, "claims": [], "measurements": {}})
    return run.path


def test_foreign_finished_run_under_a_points_run_id_is_not_adopted(tmp_path, monkeypatch):
    launched = []
    monkeypatch.setattr(
        sweep_mod, "run_point", lambda cmd, threads: launched.append(cmd) or (1, "not run in this test")
    )
    spec = load_spec(_spec_file(tmp_path, grid={}, points=[{"task.p": 0.2}]))
    (point,) = plan(spec)
    out = tmp_path / "runs"
    foreign = _plant_run(out, point.run_id, {"task.p": 0.5})
    before = {f.name: f.read_bytes() for f in foreign.iterdir() if f.is_file()}
    (got,) = run_sweep(spec, out, "local", workers=1, echo=lambda m: None)
    assert got.status == "failed" and str(foreign) in got.error and "another config" in got.error
    assert launched == []  # neither adopted as done nor run over it
    assert {f.name: f.read_bytes() for f in foreign.iterdir() if f.is_file()} == before
    res = CliRunner().invoke(
        app,
        ["sweep", str(_spec_file(tmp_path, grid={}, points=[{"task.p": 0.2}])), "--out", str(out)],
        env={"COLUMNS": "400"},
    )
    assert res.exit_code == 1 and "another config" in res.stdout and "0 done, 1 failed" in res.stdout, res.output
    assert launched == []


def test_matching_finished_run_is_adopted(tmp_path, monkeypatch):
    monkeypatch.setattr(sweep_mod, "run_point", lambda cmd, threads: pytest.fail("a finished point was run again"))
    spec = load_spec(_spec_file(tmp_path, grid={}, points=[{"task.p": 0.2}]))
    (point,) = plan(spec)
    _plant_run(tmp_path / "runs", point.run_id, {"task.p": 0.2})
    (got,) = run_sweep(spec, tmp_path / "runs", "local", workers=1, echo=lambda m: None)
    assert got.status == "skipped" and got.error is None


def test_foreign_staging_folder_is_not_resumed(tmp_path, monkeypatch):
    launched = []
    monkeypatch.setattr(
        sweep_mod, "run_point", lambda cmd, threads: launched.append(cmd) or (1, "not run in this test")
    )
    spec = load_spec(_spec_file(tmp_path, grid={}, points=[{"task.p": 0.2}]))
    (point,) = plan(spec)
    staging = _plant_run(tmp_path / "runs", point.run_id, {"task.p": 0.5}, staging=True)
    (got,) = run_sweep(spec, tmp_path / "runs", "local", workers=1, echo=lambda m: None)
    assert got.status == "failed" and str(staging) in got.error and launched == []
    assert staging.is_dir() and (staging / "checkpoints").is_dir()


# ------------------------------------------------------------------------------------------------
# Ray: a local Ray instance, one task per point.


def test_ray_backend_runs_and_indexes_every_point(tmp_path):
    out = tmp_path / "runs"
    spec = load_spec(_spec_file(tmp_path, name="raypq", grid={"task.q": [0.4, 0.8]}, set={**TINY, "task.p": 0.6}))
    msgs: list[str] = []
    points = run_sweep(spec, out, "ray", workers=2, echo=msgs.append)
    assert [p.status for p in points] == ["done", "done"], [p.error for p in points]
    assert "(ray)" in msgs[0]
    rows = RunIndex(out).query("sweep = 'raypq'")
    assert sorted(r["run_id"] for r in rows) == sorted(p.run_id for p in points)
    assert {r["config"]["task"]["q"] for r in rows} == {0.4, 0.8}
    assert all(r["config"]["task"]["p"] == 0.6 and r["status"] == "done" for r in rows)
    assert _run_dirs(out) == sorted(p.run_id for p in points)
    df = pd.read_parquet(out / "sweeps" / "raypq" / "summary.parquet")
    assert len(df) == 2 and set(df["status"]) == {"done"}
    # 1-D grid: a line per metric
    assert (out / "sweeps" / "raypq" / "figures" / "m.entropy_rate.png").is_file()

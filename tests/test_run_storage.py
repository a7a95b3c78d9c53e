"""The run directory on disk: run ids that stay one folder under --out, one file mode for every file,
and no finished run lost when the final rename fails or the run index is corrupt."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from typer.testing import CliRunner

import tdlab.runs as runs_mod
from tdlab.cli import app
from tdlab.config import ConfigError
from tdlab.index import INDEX_NAME, RunIndex
from tdlab.runs import RunNotMovedError, RunWriter, atomic_write, file_mode, staging_path

SETS = {
    "train.steps": 20,
    "train.seq_len": 16,
    "train.eval_every": 10,
    "train.eval_batches": 1,
    "archs": ["sec2"],
    "inits": ["standard"],
}


def _cli(*args: str):
    return CliRunner().invoke(app, list(args), env={"COLUMNS": "400"})


def _stderr_lines(res) -> list[str]:
    return [line for line in res.stderr.splitlines() if line.strip()]


def _tree(root: Path) -> list[str]:
    return sorted(str(p.relative_to(root)) for p in root.rglob("*"))


@pytest.mark.parametrize(
    "run_id", ["../x", "/tmp/abs-run", "a/b", "", ".staging-x", ".hidden", "..", "a\nb", "x" * 201]
)
def test_bad_run_ids_are_refused_and_write_nothing(tmp_path, run_id):
    before = _tree(tmp_path)
    res = _cli("run", "markov-init", "--run-id", run_id, "--out", str(tmp_path / "runs"), "--quiet")
    assert res.exit_code == 2 and len(_stderr_lines(res)) == 1 and "--run-id" in res.stderr, res.output
    assert _tree(tmp_path) == before and not Path("/tmp/abs-run").exists()
    with pytest.raises(ConfigError, match="--run-id"):
        RunWriter(tmp_path / "runs", "e", run_id)
    assert not (tmp_path / "x").exists() and not (tmp_path / "runs").exists()


@pytest.mark.parametrize("run_id", ["a", "0", "pq__p000-1a2b3c4d", "run.v2_final-3", "x" * 200])
def test_good_run_ids_are_accepted(tmp_path, run_id):
    w = RunWriter(tmp_path, "e", run_id)
    assert w.path == tmp_path / f".staging-{run_id}" and w.path.is_dir()


def test_atomic_write_gives_the_umask_mode_not_mkstemps_0600(tmp_path):
    old = os.umask(0o022)
    os.umask(old)
    assert file_mode() == 0o666 & ~old
    atomic_write(tmp_path / "a.json", "{}")
    with open(tmp_path / "b.txt", "w") as f:  # what a plainly written file gets
        f.write("x")
    assert (tmp_path / "a.json").stat().st_mode & 0o777 == (tmp_path / "b.txt").stat().st_mode & 0o777 == file_mode()


def test_finish_that_cannot_rename_keeps_the_staging_folder(tmp_path, monkeypatch):
    w = RunWriter(tmp_path, "e", "r")
    w.write_config({"experiment": "e"})
    (w.path / "checkpoints").mkdir()
    (w.path / "checkpoints" / "arm.json").write_text("{}")
    real = os.replace
    monkeypatch.setattr(runs_mod.os, "replace", lambda a, b: _refuse_dir(a, b, real))
    with pytest.raises(RunNotMovedError, match=r"\.staging-r"), w:
        w.finish()
    assert (w.path / "checkpoints" / "arm.json").is_file() and (w.path / "config.yaml").is_file()
    assert not (tmp_path / "r").exists()


def _refuse_dir(src, dst, real):
    """``os.replace`` as on an --out made read-only: a folder cannot be renamed; files still can."""
    if Path(src).is_dir():
        raise PermissionError(13, "Permission denied")
    return real(src, dst)


def test_no_finished_run_is_lost(tmp_path, monkeypatch):
    """A run whose final rename fails is kept whole (one line, exit 1), and resumes into place; a
    corrupt index then does not lose it (one warning line, exit 0, indexed by --reindex), nor does it
    fail ``tdlab report``."""
    out = tmp_path / "runs"
    args = ["run", "markov-init", "--seeds", "1", "--quiet", "--run-id", "r", "--out", str(out)]
    for k, v in SETS.items():
        args += ["--set", f"{k}={json.dumps(v)}"]
    real = os.replace
    monkeypatch.setattr(runs_mod.os, "replace", lambda a, b: _refuse_dir(a, b, real))
    res = _cli(*args)
    assert res.exit_code == 1, res.output
    (line,) = _stderr_lines(res)
    staging = staging_path(out / "r")
    assert str(staging) in line and "Permission denied" in line
    assert (staging / "summary.json").is_file() and (staging / "arrays").is_dir()
    # every fit stored (its checkpoint went once it was): the resume reloads them, trains nothing
    assert list((staging / "arrays").glob("*.safetensors")) and not (out / "r").exists()

    monkeypatch.setattr(runs_mod.os, "replace", real)
    garbage = b"not a database" * 100
    (out / INDEX_NAME).write_bytes(garbage)
    res = _cli("run", "--resume", str(out / "r"), "--quiet")
    assert res.exit_code == 0, res.output
    (line,) = _stderr_lines(res)
    assert str(out / "r") in line and "not indexed" in line and "--reindex" in line
    assert (out / "r" / "summary.json").is_file() and not staging.exists() and not (out / "r" / "checkpoints").exists()
    modes = {
        f.relative_to(out / "r").as_posix(): f.stat().st_mode & 0o777 for f in (out / "r").rglob("*") if f.is_file()
    }
    assert {"config.yaml", "summary.json", "report.html", "metrics.parquet"} <= modes.keys()
    assert set(modes.values()) == {file_mode()}, modes  # one mode for the whole run directory

    res = _cli("runs", "--out", str(out), "--reindex")
    assert res.exit_code == 0 and "moved aside" in res.stderr
    assert [r["run_id"] for r in RunIndex(out).query()] == ["r"]

    (out / INDEX_NAME).write_bytes(garbage)  # `tdlab report` rebuilds the run and only warns about the index
    res = _cli("report", str(out / "r"))
    assert res.exit_code == 0, res.output
    (line,) = _stderr_lines(res)
    assert "not indexed" in line and (out / "r" / "report.html").is_file()

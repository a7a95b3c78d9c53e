"""The run store: atomic writes, staging folder, corrupt-dir errors, parquet and safetensors round trips."""

from __future__ import annotations

import json

import pandas as pd
import pytest
import torch
import yaml

from tdlab.runs import METRIC_COLUMNS, Run, RunDirError, RunWriter, atomic_write, list_runs


def _entries(folder):
    return sorted(p.name for p in folder.iterdir())


def test_atomic_write_replaces_content_and_leaves_no_temp_files(tmp_path):
    f = tmp_path / "sub" / "a.txt"
    atomic_write(f, "one")
    atomic_write(f, b"two")
    assert f.read_bytes() == b"two"
    assert _entries(f.parent) == ["a.txt"]


def test_atomic_write_failure_keeps_old_file_and_removes_temp(tmp_path):
    f = tmp_path / "a.txt"
    atomic_write(f, "old")
    with pytest.raises(TypeError):
        atomic_write(f, 12345)  # not bytes/str: the write fails after the temp file exists
    assert f.read_text() == "old"
    assert _entries(tmp_path) == ["a.txt"]


def _rows():
    return [(0, 0, "test_loss", 0.69), (0, 1, "test_loss", 0.70), (10, 0, "train_loss", 0.6), (10, 1, "lr", 1e-3)]


def test_finished_run_moves_into_place_without_staging(tmp_path):
    with RunWriter(tmp_path, "exp", run_id="r1") as w:
        w.write_config({"experiment": "exp", "config": {"seed": 3}})
        w.add_metrics("arm/a", _rows())
        assert w.path.parent == tmp_path and w.path.name.startswith(".staging-") and "r1" in w.path.name
        assert not (tmp_path / "r1").exists()  # nothing visible before finish
        run = w.finish()
    assert run.path == tmp_path / "r1"
    assert _entries(tmp_path) == ["r1"]
    assert not any(p.name.endswith(".tmp") for p in run.path.iterdir())
    assert run.config == {"experiment": "exp", "config": {"seed": 3}}
    assert [r.path.name for r in list_runs(tmp_path)] == ["r1"]


def test_failing_run_leaves_no_run_directory_and_no_staging(tmp_path):
    with pytest.raises(RuntimeError, match="boom"):
        with RunWriter(tmp_path, "exp", run_id="r2") as w:
            w.write_config({"experiment": "exp"})
            w.add_metrics("a", _rows())
            w.save_arrays("a", [{"w": torch.ones(2)}])
            raise RuntimeError("boom")
    assert _entries(tmp_path) == []
    assert list_runs(tmp_path) == []


def test_existing_run_id_is_refused(tmp_path):
    (tmp_path / "r3").mkdir()
    with pytest.raises(RunDirError, match="already exists"):
        RunWriter(tmp_path, "exp", run_id="r3")
    assert _entries(tmp_path) == ["r3"]


def test_default_run_ids_are_unique_and_name_the_experiment(tmp_path):
    a = RunWriter(tmp_path, "exp-a")
    b = RunWriter(tmp_path, "exp-a")
    assert a.run_id != b.run_id and a.run_id.endswith("_exp-a")
    for w in (a, b):
        w.__exit__(None, None, None)
    assert _entries(tmp_path) == []


def test_metrics_parquet_round_trip(tmp_path):
    with RunWriter(tmp_path, "exp", run_id="r") as w:
        w.write_config({"experiment": "exp"})
        w.add_metrics("a", _rows()[:2])
        w.add_metrics("b/c", _rows()[2:])
        run = w.finish()
    df = run.metrics()
    assert list(df.columns) == METRIC_COLUMNS
    expected = pd.DataFrame(
        [("a", *_rows()[0]), ("a", *_rows()[1]), ("b/c", *_rows()[2]), ("b/c", *_rows()[3])], columns=METRIC_COLUMNS
    )
    pd.testing.assert_frame_equal(df, expected, check_dtype=False)
    assert str(df["step"].dtype) == "int64" and str(df["member"].dtype) == "int64"
    assert str(df["value"].dtype) == "float64"


def test_empty_metrics_round_trip(tmp_path):
    with RunWriter(tmp_path, "exp", run_id="r") as w:
        w.write_config({"experiment": "exp"})
        run = w.finish()
    df = run.metrics()
    assert list(df.columns) == METRIC_COLUMNS and len(df) == 0


def test_arrays_round_trip_with_member_axis(tmp_path):
    g = torch.Generator().manual_seed(0)
    states = [{"w": torch.randn(3, 2, generator=g), "b": torch.randn(4, generator=g)} for _ in range(3)]
    with RunWriter(tmp_path, "exp", run_id="r") as w:
        w.write_config({"experiment": "exp"})
        w.save_arrays("sec2__standard", states)
        w.save_arrays("nothing", [])
        run = w.finish()
    arr = run.arrays("sec2__standard")
    assert set(arr) == {"w", "b"} and arr["w"].shape == (3, 3, 2) and arr["b"].shape == (3, 4)
    for e, s in enumerate(states):
        assert torch.equal(arr["w"][e], s["w"]) and torch.equal(arr["b"][e], s["b"])
    with pytest.raises(RunDirError, match="no saved arrays"):
        run.arrays("nothing")


def test_summary_round_trip(tmp_path):
    with RunWriter(tmp_path, "exp", run_id="r") as w:
        w.write_config({"experiment": "exp"})
        run = w.finish()
    assert run.summary == {}
    run.write_summary({"status": "done", "claims": [{"holds": True, "measured": [0.5]}]})
    assert run.summary == {"status": "done", "claims": [{"holds": True, "measured": [0.5]}]}
    assert _entries(run.path) == ["config.yaml", "metrics.parquet", "summary.json"]


def _good_run(tmp_path, name="r"):
    with RunWriter(tmp_path, "exp", run_id=name) as w:
        w.write_config({"experiment": "exp"})
        w.add_metrics("a", _rows())
        return w.finish().path


def test_missing_and_incomplete_directories_raise(tmp_path):
    with pytest.raises(RunDirError, match="no such folder"):
        Run(tmp_path / "nope")
    path = _good_run(tmp_path)
    (path / "metrics.parquet").unlink()
    with pytest.raises(RunDirError, match="metrics.parquet is missing"):
        Run(path)
    path = _good_run(tmp_path, "r2")
    (path / "config.yaml").unlink()
    with pytest.raises(RunDirError, match="config.yaml is missing"):
        Run(path)


@pytest.mark.parametrize("text", ["experiment: [unclosed", "- just\n- a list\n", "seed: 3\n"])
def test_corrupt_config_raises(tmp_path, text):
    path = _good_run(tmp_path)
    (path / "config.yaml").write_text(text)
    with pytest.raises(RunDirError, match=r"config\.yaml.* corrupt"):
        Run(path).config


def test_corrupt_metrics_and_summary_raise(tmp_path):
    path = _good_run(tmp_path)
    (path / "metrics.parquet").write_bytes(b"PAR1 this is not parquet")
    (path / "summary.json").write_text("{not json")
    run = Run(path)
    with pytest.raises(RunDirError, match=r"metrics\.parquet.* corrupt"):
        run.metrics()
    with pytest.raises(RunDirError, match=r"summary\.json.* corrupt"):
        run.summary
    # A parquet file with the wrong columns is corrupt too.
    pd.DataFrame({"step": [1], "value": [0.5]}).to_parquet(path / "metrics.parquet")
    with pytest.raises(RunDirError, match="missing columns"):
        run.metrics()


def test_list_runs_skips_staging_foreign_and_broken_folders(tmp_path):
    _good_run(tmp_path, "a")
    _good_run(tmp_path, "b")
    (tmp_path / ".staging-c-xyz").mkdir()
    (tmp_path / "foreign").mkdir()
    (tmp_path / "file.txt").write_text("x")
    assert [r.path.name for r in list_runs(tmp_path)] == ["a", "b"]
    assert list_runs(tmp_path / "missing") == []
    assert json.loads(json.dumps(yaml.safe_load((tmp_path / "a" / "config.yaml").read_text()))) == {"experiment": "exp"}

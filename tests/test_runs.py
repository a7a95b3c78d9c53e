"""The run store: atomic writes, staging folder, corrupt-dir errors, parquet and safetensors round trips."""

from __future__ import annotations

import json
import os
import re

import pandas as pd
import pytest
import torch
import yaml

from tdlab.runs import (
    METRIC_COLUMNS,
    Run,
    RunDirError,
    RunWriter,
    atomic_write,
    list_runs,
    staged_done,
    staged_elapsed,
    staged_progress,
    staged_segments,
)


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
    with pytest.raises(RuntimeError, match="boom"), RunWriter(tmp_path, "exp", run_id="r2") as w:
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
    with pytest.raises(RunDirError, match=re.escape("metrics.parquet is missing")):
        Run(path)
    path = _good_run(tmp_path, "r2")
    (path / "config.yaml").unlink()
    with pytest.raises(RunDirError, match=re.escape("config.yaml is missing")):
        Run(path)


@pytest.mark.parametrize("text", ["experiment: [unclosed", "- just\n- a list\n", "seed: 3\n"])
def test_corrupt_config_raises(tmp_path, text):
    path = _good_run(tmp_path)
    (path / "config.yaml").write_text(text)
    with pytest.raises(RunDirError, match=r"config\.yaml.* corrupt"):
        _ = Run(path).config


def test_corrupt_metrics_and_summary_raise(tmp_path):
    path = _good_run(tmp_path)
    (path / "metrics.parquet").write_bytes(b"PAR1 this is not parquet")
    (path / "summary.json").write_text("{not json")
    run = Run(path)
    with pytest.raises(RunDirError, match=r"metrics\.parquet.* corrupt"):
        run.metrics()
    with pytest.raises(RunDirError, match=r"summary\.json.* corrupt"):
        _ = run.summary
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


# --- every reader checks what it reads -------------------------------------------------


@pytest.mark.parametrize(
    "data, words",
    [
        (bytes(range(256)), "utf-8"),  # a binary config.yaml
        (b"experiment: [a, b]\n", "'experiment' must be a string"),
        (b"experiment: exp\nconfig: 7\n", "'config' must be a mapping"),
        (b"experiment: exp\nprofile: [quick]\n", "'profile' must be a string"),
        (b"experiment: exp\nsweep: {a: 1}\n", "'sweep' must be a string or null"),
        (b"experiment: exp\n  bad: indent\n", "corrupt"),
    ],
)
def test_config_of_the_wrong_shape_raises_one_line(tmp_path, data, words):
    path = _good_run(tmp_path)
    (path / "config.yaml").write_bytes(data)
    with pytest.raises(RunDirError, match=r"config\.yaml") as err:
        _ = Run(path).config
    assert words in str(err.value) and "\n" not in str(err.value)


@pytest.mark.parametrize(
    "text, words",
    [
        ("null", "got None"),
        ("7", "got 7"),
        ("[1]", "got [1]"),
        ('{"status": [1]}', "'status' must be a string"),
        ('{"wall_time_s": "slow"}', "'wall_time_s' must be a number"),
        ('{"member": true}', "'member' must be an integer or null"),
    ],
)
def test_summary_that_is_not_an_object_of_the_right_shape_raises(tmp_path, text, words):
    path = _good_run(tmp_path)
    (path / "summary.json").write_text(text)
    with pytest.raises(RunDirError, match=r"summary\.json is corrupt") as err:
        _ = Run(path).summary
    assert words in str(err.value)
    (path / "summary.json").write_bytes(b"\xff\xfe{")  # not UTF-8
    with pytest.raises(RunDirError, match=r"summary\.json is corrupt"):
        _ = Run(path).summary


@pytest.mark.parametrize(
    "change, column",
    [
        (lambda df: df.assign(step=df["step"].astype(str)), "step"),  # a string step column
        (lambda df: df.assign(member=df["member"] + 0.5), "member"),
        (lambda df: df.assign(value=df["value"].astype(str)), "value"),
        (lambda df: df.assign(value=True), "value"),
        (lambda df: df.assign(arm=1), "arm"),
        (lambda df: df.assign(name=None), "name"),
    ],
)
def test_metrics_columns_of_the_wrong_type_raise(tmp_path, change, column):
    path = _good_run(tmp_path)
    change(pd.read_parquet(path / "metrics.parquet")).to_parquet(path / "metrics.parquet")
    with pytest.raises(RunDirError, match=rf"metrics\.parquet is corrupt: column '{column}'"):
        Run(path).metrics()


def test_corrupt_arrays_raise(tmp_path):
    with RunWriter(tmp_path, "exp", run_id="r") as w:
        w.write_config({"experiment": "exp"})
        w.save_arrays("arm", [{"w": torch.zeros(2)}])
        run = w.finish()
    (run.path / "arrays" / "arm.safetensors").write_bytes(b"garbage")
    with pytest.raises(RunDirError, match=r"arm\.safetensors is corrupt"):
        run.arrays("arm")


def test_preserved_restores_the_directory_when_the_block_fails(tmp_path):
    path = _good_run(tmp_path)
    run = Run(path)
    run.write_summary({"status": "done"})
    before = {p.relative_to(path): p.read_bytes() for p in path.rglob("*") if p.is_file()}
    with pytest.raises(ZeroDivisionError), run.preserved():
        run.write_summary({"status": "rewritten"})
        (path / "figures").mkdir()
        (path / "figures" / "new.png").write_bytes(b"png")
        (path / "metrics.parquet").unlink()
        raise ZeroDivisionError("planted: preserved() must restore the run")
    after = {p.relative_to(path): p.read_bytes() for p in path.rglob("*") if p.is_file()}
    assert after == before and not (path / "figures").exists()
    with run.preserved():  # success keeps what the block wrote
        run.write_summary({"status": "kept"})
    assert run.summary == {"status": "kept"}


def _digest(folder):
    return {p.relative_to(folder): (p.read_bytes() if p.is_file() else None) for p in folder.rglob("*")}


@pytest.mark.parametrize(
    "change, words",
    [
        (lambda df: df.iloc[:0], "holds no rows"),
        (lambda df: df.assign(name="junk"), "do not hold what markov-init reads|no metric 'test_loss'"),
        (lambda df: df[df["name"] != "test_loss"], "do not hold what markov-init reads|no metric 'test_loss'"),
    ],
)
def test_rebuild_refuses_metrics_without_what_the_experiment_reads_and_writes_nothing(make_markov_run, change, words):
    from tdlab.runner import rebuild

    _, path = make_markov_run(0.5, 0.8, {}, [0, 10, 20], members=2)
    change(pd.read_parquet(path / "metrics.parquet")).to_parquet(path / "metrics.parquet")
    before = _digest(path.parent)
    with pytest.raises(RunDirError, match=words) as err:
        rebuild(path)
    assert "\n" not in str(err.value) and "metrics.parquet" in str(err.value)
    assert _digest(path.parent) == before  # nothing written into the run directory, no index made


def test_rebuild_names_config_yaml_for_an_unknown_experiment_or_a_bad_config(make_markov_run):
    from tdlab.runner import rebuild

    _, path = make_markov_run(0.5, 0.8, {}, [0, 10], members=1)
    conf = yaml.safe_load((path / "config.yaml").read_text())
    for edit, words in [
        ({"experiment": "no-such"}, r"config\.yaml: its experiment 'no-such' is not registered here; .*--include"),
        (
            {"config": {**conf["config"], "train": {**conf["config"]["train"], "steps": True}}},
            r"config\.yaml does not hold a valid config: .*train\.steps",
        ),
    ]:
        (path / "config.yaml").write_text(yaml.safe_dump({**conf, **edit}))
        with pytest.raises(RunDirError, match=words):
            rebuild(path)


def test_a_config_yaml_without_its_config_is_refused_not_read_as_the_defaults(make_markov_run):
    """The experiment's defaults are not what ran: a rebuild, a record and an export refuse the run."""
    from tdlab.experiments.base import stored_experiment
    from tdlab.results import record_of_run
    from tdlab.runner import rebuild

    _, path = make_markov_run(0.5, 0.8, {}, [0, 10], members=1)
    conf = yaml.safe_load((path / "config.yaml").read_text())
    assert stored_experiment(path)[1].model_dump(mode="json") == conf["config"]
    rebuild(path)  # its summary, so that a record can be made from the run itself once record.json is gone
    (path / "record.json").unlink(missing_ok=True)
    (path / "config.yaml").write_text(yaml.safe_dump({k: v for k, v in conf.items() if k != "config"}))
    before = _digest(path.parent)
    for read in (stored_experiment, rebuild, record_of_run):
        with pytest.raises(RunDirError, match=r"config\.yaml is corrupt: it holds no 'config' mapping"):
            read(path)
    assert _digest(path.parent) == before


# ---- a running run holds a lock -------------------------------------------------------------------


def test_a_running_run_is_locked_against_a_second_writer_and_a_resume(tmp_path):
    """Two `tdlab run --run-id X` at once: the second is told X is running (not "resume it"), and a
    --resume while it runs is refused the same way, so following the advice cannot break the first."""
    from tdlab.runs import RunBusyError

    with RunWriter(tmp_path, "exp", run_id="X") as first:
        first.write_config({"experiment": "exp"})
        (first.path / "checkpoints").mkdir()
        with pytest.raises(RunBusyError, match="run X is running") as err:
            RunWriter(tmp_path, "exp", run_id="X")
        assert "\n" not in str(err.value) and "resume" not in str(err.value)
        with pytest.raises(RunBusyError, match="run X is running"):
            RunWriter.reopen(tmp_path / "X")
        first.add_metrics("a", [(0, 0, "test_loss", 1.0)])
        assert first.path.is_dir()
    # the first ended (killed: checkpoints kept): now it is an interrupted run, and --resume may take it
    with pytest.raises(RunDirError, match="an interrupted run; resume it"):
        RunWriter(tmp_path, "exp", run_id="X")
    again = RunWriter.reopen(tmp_path / "X")
    assert again.rows == [("a", 0, 0, "test_loss", 1.0)]
    run = again.finish()
    assert run.path.is_dir() and not (tmp_path / ".staging-X").exists()
    again.release()  # idempotent


def test_the_lock_is_released_when_the_run_finishes_or_is_dropped(tmp_path):
    from tdlab.runs import _try_lock

    w = RunWriter(tmp_path, "exp", run_id="r")
    w.write_config({"experiment": "exp"})
    staging = w.path
    assert _try_lock(staging) is None
    del w  # a writer dropped without its with-block (a test, a crash handler) gives the run up
    fd = _try_lock(staging)
    assert fd is not None
    os.close(fd)


def test_a_lock_holder_in_another_process_is_seen(tmp_path):
    """flock is per open file: a child process holding the staging folder blocks this one."""
    w = RunWriter(tmp_path, "exp", run_id="r")
    w.write_config({"experiment": "exp"})
    (w.path / "checkpoints").mkdir()
    w.release()  # before the fork: a forked child would share this descriptor's lock
    pid = os.fork()
    if pid == 0:  # the child takes its own lock on the run, as a second tdlab process would
        import time

        from tdlab.runs import _try_lock

        deadline = time.time() + 30
        while time.time() < deadline:
            fd = _try_lock(tmp_path / ".staging-r")
            if fd is not None:
                (tmp_path / "child-holds").touch()
                time.sleep(30)
                os._exit(0)
            time.sleep(0.02)
        os._exit(1)
    try:
        import time

        deadline = time.time() + 30
        while not (tmp_path / "child-holds").exists() and time.time() < deadline:
            time.sleep(0.02)
        from tdlab.runs import RunBusyError

        with pytest.raises(RunBusyError, match="is running"):
            RunWriter.reopen(tmp_path / "r")
    finally:
        os.kill(pid, 9)
        os.waitpid(pid, 0)
    RunWriter.reopen(tmp_path / "r").release()  # the holder died: the lock went with it


# ---- from_run: copying another run's arrays ------------------------------------------------------


def _source_run(tmp_path, arrays: dict[str, object]):
    """A finished run ``tmp_path/src`` with arm "a"'s metric rows and the given arrays files
    (name -> bytes, or a callable making the entry)."""
    from safetensors.torch import save

    with RunWriter(tmp_path, "exp", run_id="src") as w:
        w.write_config({"experiment": "exp"})
        w.add_metrics("a", [(0, 0, "test_loss", 1.0)])
        run = w.finish()
    (run.path / "arrays").mkdir()
    good = save({"w": torch.ones(2, 3)})
    for name, what in arrays.items():
        f = run.path / "arrays" / name
        if callable(what):
            what(f)
        else:
            f.write_bytes(good if what is None else what)
    return run.path


def _context(tmp_path):
    from tdlab.run_context import RunContext

    w = RunWriter(tmp_path / "out", "probe", run_id="p")
    w.write_config({"experiment": "probe"})
    return w, RunContext(w, progress=False)


def test_copy_arms_copies_an_arm_its_companions_and_its_rows(tmp_path):
    src = _source_run(
        tmp_path,
        {"a.safetensors": None, "a@init.safetensors": None, "a@step4.safetensors": None, "ab.safetensors": None},
    )
    w, ctx = _context(tmp_path)
    ctx.copy_arms(src, ["a"])
    assert sorted(p.name for p in (w.path / "arrays").iterdir()) == [
        "a.safetensors",
        "a@init.safetensors",
        "a@step4.safetensors",
    ]
    assert w.arm_rows("a") == [(0, 0, "test_loss", 1.0)]
    assert torch.equal(w.load_arrays("a")[0]["w"], torch.ones(3))
    w.release()


@pytest.mark.parametrize(
    "entry, words",
    [
        (lambda f: os.symlink("/dev/zero", f), "symlink"),  # copied without end before: a disk filled
        (lambda f: os.symlink("/etc/passwd", f), "symlink"),
        (lambda f: os.symlink(f.name, f), "symlink"),  # a loop: a traceback before
        (lambda f: os.mkfifo(f), "not a regular file"),
        (b"\x80\x04\x95planted pickle", "not a safetensors arrays file"),  # named the deleted staging copy before
        (b"", "not a safetensors arrays file"),
    ],
)
def test_copy_arms_refuses_what_a_run_never_holds_naming_the_source(tmp_path, entry, words):
    src = _source_run(tmp_path, {"a.safetensors": None, "a@init.safetensors": entry})
    w, ctx = _context(tmp_path)
    with pytest.raises(RunDirError, match=words) as err:
        ctx.copy_arms(src, ["a"])
    msg = str(err.value)
    assert "\n" not in msg and str(src / "arrays" / "a@init.safetensors") in msg and ".staging-" not in msg
    assert not (w.path / "arrays" / "a@init.safetensors").exists()
    w.release()


def test_copy_arms_of_a_missing_arm_names_the_arrays_folder(tmp_path):
    src = _source_run(tmp_path, {"b.safetensors": None})
    w, ctx = _context(tmp_path)
    with pytest.raises(RunDirError, match="no saved arrays for arm 'a'"):
        ctx.copy_arms(src, ["a"])
    w.release()


def test_a_run_read_through_a_symlinked_file_is_refused(tmp_path):
    src = _source_run(tmp_path, {"a.safetensors": None})
    (src / "summary.json").unlink(missing_ok=True)
    os.symlink("/dev/zero", src / "summary.json")
    with pytest.raises(RunDirError, match=r"summary\.json.*symlink"):
        _ = Run(src).summary
    os.symlink("/etc/passwd", tmp_path / "cfg")
    (src / "config.yaml").unlink()
    os.symlink(tmp_path / "cfg", src / "config.yaml")
    with pytest.raises(RunDirError, match=re.escape("config.yaml is not a regular file")):
        Run(src)
    loop = tmp_path / "loop"
    os.symlink(loop.name, loop)
    with pytest.raises(RunDirError, match="symlink loop"):
        Run(loop)


@pytest.mark.parametrize(
    "text, segments",
    [
        ('{"wall_time_s": 30}', [{"commit": None, "device": None, "threads": None, "wall_s": 30.0}]),  # before segments
        (
            '{"wall_time_s": 5, "segments": [{"commit": "abcdef1", "device": "cpu", "threads": 1, "wall_s": 2},'
            ' {"commit": "abcdef2", "device": "cpu", "threads": 2, "wall_s": 3}]}',
            [
                {"commit": "abcdef1", "device": "cpu", "threads": 1, "wall_s": 2},
                {"commit": "abcdef2", "device": "cpu", "threads": 2, "wall_s": 3},
            ],
        ),
        ('{"wall_time_s": 0}', []),
        ('{"wall_time_s": -4}', []),
        ("not json", []),
        (
            '{"wall_time_s": 5, "segments": [{"wall_s": "x"}]}',
            [{"commit": None, "device": None, "threads": None, "wall_s": 5.0}],
        ),
        (  # a field of the wrong form is unknown, not passed on to the record
            '{"wall_time_s": 2, "segments": [{"commit": "HEAD", "device": 3, "threads": true, "wall_s": 2}]}',
            [{"commit": None, "device": None, "threads": None, "wall_s": 2.0}],
        ),
    ],
)
def test_a_stopped_run_keeps_which_process_ran_each_segment(tmp_path, text, segments):
    (tmp_path / "elapsed.json").write_text(text)
    assert staged_segments(tmp_path) == segments
    assert staged_elapsed(tmp_path) == sum(g["wall_s"] for g in segments)


def test_saved_segments_read_back_with_their_total(tmp_path):
    with RunWriter(tmp_path, "exp", run_id="r1") as w:
        segs = [{"commit": "abcdef1", "device": "cpu", "threads": 1, "wall_s": 2.5}] * 2
        w.save_segments(segs)
        assert staged_segments(w.path) == segs and staged_elapsed(w.path) == 5.0
        assert json.loads((w.path / "elapsed.json").read_text())["wall_time_s"] == 5.0


def test_a_rebuilt_report_keeps_a_resumed_runs_segments_and_refuses_damaged_ones(make_markov_run):
    from tdlab.runner import rebuild

    _, path = make_markov_run(0.5, 0.8, {}, [0, 10], members=1)
    rebuild(path)  # the summary of a finished run
    summary = json.loads((path / "summary.json").read_text())
    segs = [
        {"commit": None, "device": None, "threads": None, "wall_s": 3.0},
        {"commit": "abcdef1", "device": "cpu", "threads": 1, "wall_s": 4.5},
    ]
    (path / "summary.json").write_text(json.dumps({**summary, "segments": segs}))
    rebuild(path)
    assert json.loads((path / "summary.json").read_text())["segments"] == segs
    assert json.loads((path / "record.json").read_text())["segments"] == segs
    for bad in ([{"commit": "HEAD", "device": "cpu", "threads": 1, "wall_s": 1.0}], [{"wall_s": 1.0}], ["x"]):
        (path / "summary.json").write_text(json.dumps({**summary, "segments": bad}))
        with pytest.raises(RunDirError, match="'segments' holds a part that is not a segment"):
            rebuild(path)


def test_a_staging_folder_says_which_arms_it_finished_and_where_each_checkpointed_fit_is(tmp_path):
    from tdlab.cli import _kept

    final = tmp_path / "r"
    staging = tmp_path / ".staging-r"
    for name in ("train__a", "train__a@init", "train__b"):  # an initial state is no arm of its own
        atomic_write(staging / "arrays" / f"{name}.safetensors", b"")
    doc = {"meta": {"chunk": {"step": 1866}, "config": {"steps": 8000}}}
    atomic_write(staging / "checkpoints" / "train__c.json", json.dumps(doc).encode())
    atomic_write(staging / "checkpoints" / "memo.json", b"{}")  # a memo: counted, no step
    said = "2 arm(s) finished, 2 checkpointed mid-way: train/c at step 1,866 of 8,000"
    assert staged_progress(staging) == said
    assert _kept(final).startswith(f"interrupted: {said}, kept in {staging}; `tdlab run --resume {final}`")
    for f in (staging / "checkpoints").iterdir():  # finished arms alone are kept too: a resume reloads them
        f.unlink()
    assert _kept(final).startswith("interrupted: 2 arm(s) finished, 0 checkpointed mid-way, kept in")
    for f in (staging / "arrays").iterdir():
        f.unlink()
    assert _kept(final) == "interrupted: no fit had finished or saved a checkpoint, so nothing was kept"


def test_what_a_staging_folder_has_done_of_its_fits_counts_stored_arms_and_checkpointed_members(tmp_path):
    arms = ["a/x", "a/y", "a/z", "a/w"]
    atomic_write(tmp_path / "arrays" / "a__x.safetensors", b"")  # stored: whole
    meta = {"seeds": [1, 2, 3, 4, 5], "finished": 2, "chunk": {"members": 3, "step": 2000}, "config": {"steps": 8000}}
    atomic_write(tmp_path / "checkpoints" / "a__y.json", json.dumps({"meta": meta}))  # (2 + 3 / 4) / 5
    atomic_write(tmp_path / "checkpoints" / "a__z.json", b"{")  # does not read: not known, none
    assert staged_done(tmp_path, arms) == pytest.approx((1 + 0.55) / 4)
    meta["chunk"] = None  # between chunks: the finished members alone
    atomic_write(tmp_path / "checkpoints" / "a__y.json", json.dumps({"meta": meta}))
    assert staged_done(tmp_path, arms) == pytest.approx((1 + 0.4) / 4)
    assert staged_done(tmp_path, []) == 0.0 and staged_done(tmp_path / "none", arms) == 0.0
    # a regression fit (icl-unrestricted's GD arms) trains its members as one: its step over its length
    reg = {"kind": "regression", "seeds": [1, 2], "finished": False, "step": 2155, "config": {"steps": 3000}}
    atomic_write(tmp_path / "checkpoints" / "a__w.json", json.dumps({"meta": reg}))
    assert staged_done(tmp_path, arms) == pytest.approx((1 + 0.4 + 2155 / 3000) / 4)
    assert staged_progress(tmp_path).endswith("a/w at step 2,155 of 3,000")


def test_the_environment_names_the_cpu_model(monkeypatch, tmp_path):
    import builtins

    from tdlab.runs import cpu_model, environment

    info = tmp_path / "cpuinfo"
    info.write_text("processor\t: 0\nmodel name\t: Test CPU 9000 @ 3.00GHz\nflags\t: avx2\n")
    real_open = builtins.open
    monkeypatch.setattr(builtins, "open", lambda f, *a, **k: real_open(info if f == "/proc/cpuinfo" else f, *a, **k))
    assert cpu_model() == "Test CPU 9000 @ 3.00GHz"
    assert environment("cpu")["cpu"] == "Test CPU 9000 @ 3.00GHz"
    monkeypatch.setattr(builtins, "open", lambda f, *a, **k: (_ for _ in ()).throw(OSError("no /proc")))
    assert cpu_model()  # falls back to platform.processor() (or "unknown"), never raises

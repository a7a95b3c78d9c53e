"""The fourth hardening round: one test per input the review found mishandled, each refused in one line with
exit code 2, nothing written outside the named output and nothing followed through a symlink.

Here: the batch folder (``OUT/logs`` and its files as links or files, a tampered ``batch.json``, ``--jobs`` and
``--threads`` past any machine, ``TDLAB_THREADS`` that is no count), work set aside never lost, a run that stops
before it stored anything, a run refused its input not retried as "stopped"; the borrowed machine's state
(``tests/test_borrowed_batch.py``); ``results check --write`` into the folder it checks (``tests/test_results.py``).
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from typer.testing import CliRunner

from tdlab import batch
from tdlab.cli import app

NAME = "markov-landscape"


def _batch(out: Path, *more: str, env: dict[str, str] | None = None):
    return CliRunner().invoke(
        app, ["batch", NAME, "--profile", "quick", "--out", str(out), "--results", "", *more], env=env
    )


def _one_line_refusal(res, *words: str) -> None:
    assert res.exit_code == 2, res.output
    assert "Traceback" not in res.output and len(res.output.strip().splitlines()) == 1, res.output
    for w in words:
        assert w in res.output, res.output


@pytest.mark.parametrize("suffix", [".log", ".pid"])
def test_a_log_or_pid_file_that_is_a_link_is_never_written_through(tmp_path, suffix):
    outside = tmp_path / "outside.txt"
    outside.write_text("not the batch's")
    out = tmp_path / "b"
    (out / "logs").mkdir(parents=True)
    (out / "logs" / f"{NAME}{suffix}").symlink_to(outside)
    res = _batch(out)
    _one_line_refusal(res, f"logs/{NAME}{suffix}", "link")
    assert outside.read_text() == "not the batch's" and not (out / "batch.json").exists()


def test_the_batch_opens_its_own_files_without_following_a_link(tmp_path):
    """Defence in depth: a link made after the check (a race) is refused by the open itself."""
    outside = tmp_path / "outside.txt"
    outside.write_text("x")
    (tmp_path / "a.log").symlink_to(outside)
    with pytest.raises(OSError):
        batch._open_own(tmp_path / "a.log", os.O_APPEND)
    assert outside.read_text() == "x"


@pytest.mark.parametrize("kind", ["file", "link"])
def test_logs_that_is_not_a_folder_is_refused(tmp_path, kind):
    out = tmp_path / "b"
    out.mkdir()
    if kind == "file":
        (out / "logs").write_text("x")
    else:
        (tmp_path / "elsewhere").mkdir()
        (out / "logs").symlink_to(tmp_path / "elsewhere")
    _one_line_refusal(_batch(out), "logs is not a folder")
    assert not list((tmp_path / "elsewhere").iterdir()) if kind == "link" else True


@pytest.mark.parametrize(
    "content",
    [
        '{"format": "tdlab-batch/1", "profile": "quick", "set": 5}',
        '{"format": "tdlab-batch/1", "profile": "quick", "set": [1, 2]}',
        "[" * 100_000 + "]" * 100_000,
        "folder",
    ],
    ids=["int-set", "int-items", "deep-nesting", "a-folder"],
)
def test_a_tampered_batch_file_is_refused(tmp_path, content):
    out = tmp_path / "b"
    out.mkdir()
    if content == "folder":
        (out / "batch.json").mkdir()
    else:
        (out / "batch.json").write_text(content)
    _one_line_refusal(_batch(out), "batch.json")


@pytest.mark.parametrize("option", ["--jobs", "--threads"])
def test_a_count_past_any_machine_is_refused_and_writes_nothing(tmp_path, option):
    out = tmp_path / "b"
    res = _batch(out, option, "99999999999999999999999")
    assert res.exit_code == 2 and "Traceback" not in res.output and option in res.output
    assert not (out / "batch.json").exists()


@pytest.mark.parametrize("value", ["²", "99999999999999999999", "0", "two"])
def test_tdlab_threads_that_is_no_count_is_one_line(value):
    res = CliRunner().invoke(app, ["list"], env={"TDLAB_THREADS": value})
    _one_line_refusal(res, "TDLAB_THREADS")


def _finished(folder: Path, seed: int) -> None:
    folder.mkdir(parents=True)
    (folder / "config.yaml").write_text(f"experiment: {NAME}\nprofile: quick\nconfig: {{seed: {seed}}}\n")
    (folder / "summary.json").write_text("{}")


def test_work_set_aside_is_never_deleted_or_followed(tmp_path):
    """A finished run set aside as ``.stale-…`` stays when a staging of the same config is set aside after it,
    and a link of that name is not followed."""
    out = tmp_path / "b"
    _finished(out / NAME, 0)
    first = batch._stale_aside(out, NAME)
    assert (first / "summary.json").is_file()
    _finished(batch.staging_path(out / NAME), 0)  # the same config, unfinished
    second = batch._stale_aside(out, NAME)
    assert second != first and (first / "summary.json").is_file() and second.name.endswith("-2")
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    third_name = second.with_name(second.name[: -len("-2")] + "-3")
    third_name.symlink_to(elsewhere)
    _finished(out / NAME, 0)
    third = batch._stale_aside(out, NAME)
    assert third.name.endswith("-4") and third_name.is_symlink() and not list(elsewhere.iterdir())


def test_a_run_refused_its_input_fails_and_one_stopped_before_it_stored_anything_is_new(tmp_path):
    out = tmp_path / "b"
    staged = batch.staging_path(out / NAME)
    staged.mkdir(parents=True)
    (staged / "config.yaml").write_text(f"experiment: {NAME}\nprofile: quick\nconfig: {{}}\n")
    state, note = batch._after(out, NAME, batch.Outcome(NAME, 2, 1.0, "error: a checkpoint is corrupt"))
    assert state == "failed" and "corrupt" in note  # not "stopped": resuming would fail again
    state, note = batch._after(tmp_path / "empty", NAME, batch.Outcome(NAME, -9, 1.0, "an older line", True))
    assert state == "new" and "before it stored anything" in note and "older line" not in note


def _alias_bomb(levels: int) -> str:
    """A "billion laughs" YAML document: ``levels`` anchors, each nine aliases of the one before."""
    lines = ['a0: &a0 ["x", "x", "x", "x", "x", "x", "x", "x", "x"]']
    lines += [f"a{i}: &a{i} [" + ", ".join([f"*a{i - 1}"] * 9) + "]" for i in range(1, levels)]
    return "\n".join(lines) + "\n"


def test_load_yaml_refuses_an_alias_bomb_and_a_document_that_contains_itself():
    from tdlab.safeio import YamlBombError, load_yaml

    with pytest.raises(YamlBombError, match="alias bomb"):
        load_yaml(_alias_bomb(9))
    with pytest.raises(YamlBombError, match="refers to itself"):
        load_yaml("a: &a [*a]\n")
    shared = load_yaml("x: &x {p: 0.5}\ny: *x\n")  # aliases themselves are fine
    assert shared == {"x": {"p": 0.5}, "y": {"p": 0.5}}


def test_a_sweep_spec_whose_set_is_an_alias_bomb_is_one_line_at_once(tmp_path):
    import time

    spec = tmp_path / "spec.yaml"
    bomb = _alias_bomb(9).replace("\n", "\n  ")
    spec.write_text(f"name: s\nexperiment: {NAME}\nset:\n  {bomb}points: [{{t_end: 500.0}}]\n")
    t0 = time.monotonic()
    res = CliRunner().invoke(app, ["sweep", str(spec), "--out", str(tmp_path / "out")])
    _one_line_refusal(res, "alias bomb")
    assert time.monotonic() - t0 < 30 and not (tmp_path / "out").exists()


def test_a_staged_config_that_is_an_alias_bomb_is_one_line_on_resume_and_in_a_batch_plan(tmp_path):
    out = tmp_path / "runs"
    staged = batch.staging_path(out / "x")
    staged.mkdir(parents=True)
    (staged / "config.yaml").write_text(
        f"experiment: {NAME}\nprofile: quick\nconfig:\n  " + _alias_bomb(10).replace("\n", "\n  ")
    )
    res = CliRunner().invoke(app, ["run", "--resume", str(out / "x"), "--quiet"])
    _one_line_refusal(res, "config.yaml")
    folder = tmp_path / "b"
    staged = batch.staging_path(folder / NAME)
    staged.mkdir(parents=True)
    (staged / "config.yaml").write_text((batch.staging_path(out / "x") / "config.yaml").read_text())
    plan = _batch(folder, "--plan")
    assert plan.exit_code == 0 and "Traceback" not in plan.output and "failed" in plan.output, plan.output


@pytest.fixture(scope="module")
def stopped(tmp_path_factory):
    """A run stopped at --until with a checkpoint of its fit in training: ``(out, run_id)``; copy before use."""
    out = tmp_path_factory.mktemp("stopped") / "runs"
    res = CliRunner().invoke(
        app,
        ["run", "markov-init", "--out", str(out), "--run-id", "s", "--until", "2s", "--quiet",
         "--set", "train.steps=3000", "--set", "train.seq_len=32", "--set", "archs=[sec2]"],
    )  # fmt: skip
    assert res.exit_code == 3, res.output
    assert list((batch.staging_path(out / "s") / "checkpoints").glob("*.safetensors"))
    return out


def _copy_of(stopped: Path, tmp_path: Path) -> tuple[Path, Path]:
    import shutil

    out = tmp_path / "runs"
    shutil.copytree(stopped, out, symlinks=True)
    return out, batch.staging_path(out / "s")


def _resume(out: Path):
    return CliRunner().invoke(app, ["run", "--resume", str(out / "s"), "--quiet"])


@pytest.mark.parametrize("kind", ["fifo", "dev-zero", "outside-link"])
def test_a_checkpoint_tensor_that_is_no_regular_file_is_refused_without_waiting(stopped, tmp_path, kind):
    """A FIFO in place of a checkpoint's tensor file hung the resume (and SIGTERM never ended it); a link to
    /dev/zero was read forever: both are refused at once, nothing followed, the staging folder kept."""
    import time

    out, staging = _copy_of(stopped, tmp_path)
    (tensor,) = list((staging / "checkpoints").glob("*.safetensors"))[:1]
    tensor.unlink()
    if kind == "fifo":
        os.mkfifo(tensor)
    elif kind == "dev-zero":
        tensor.symlink_to("/dev/zero")
    else:
        (tmp_path / "elsewhere.safetensors").write_bytes(b"x")
        tensor.symlink_to(tmp_path / "elsewhere.safetensors")
    t0 = time.monotonic()
    res = _resume(out)
    _one_line_refusal(res, tensor.name)
    assert time.monotonic() - t0 < 60 and (staging / "config.yaml").is_file()


@pytest.mark.parametrize("part", ["checkpoints", "arrays"])
def test_a_file_where_a_staging_folder_keeps_its_checkpoints_is_refused_and_the_staging_kept(stopped, tmp_path, part):
    """It made --resume delete the whole staging folder (config, metrics, stored fits)."""
    import shutil

    out, staging = _copy_of(stopped, tmp_path)
    if (staging / part).is_dir():
        shutil.rmtree(staging / part)
    (staging / part).write_text("junk")
    res = _resume(out)
    _one_line_refusal(res, part, "not a folder")
    assert (staging / "config.yaml").is_file() and (staging / part).read_text() == "junk"


def test_a_resume_that_fails_keeps_the_staging_folder(stopped, tmp_path):
    out, staging = _copy_of(stopped, tmp_path)
    (ck,) = [p for p in (staging / "checkpoints").glob("*.json")][:1]
    ck.write_text("{not json")
    res = _resume(out)
    assert res.exit_code == 2 and "Traceback" not in res.output
    assert (staging / "config.yaml").is_file() and ck.read_text() == "{not json"


def test_publish_to_writes_only_into_a_folder_of_ours(tmp_path):
    import shutil

    src = Path(__file__).resolve().parents[2] / "results" / "quick" / f"{NAME}.json"
    run = tmp_path / "runs" / "r"
    run.mkdir(parents=True)  # a finished run directory: a record.json is all publish reads of it here
    (run / "record.json").write_text(src.read_text())
    (run / "config.yaml").write_text(f"experiment: {NAME}\nprofile: quick\nconfig: {{}}\n")
    (run / "summary.json").write_text("{}")
    (run / "metrics.parquet").write_bytes(b"")
    file = tmp_path / "a-file"
    file.write_text("x")
    for to, words in ((file, "not a folder"), (Path("/dev/null"), "not a folder"), (run / "figures", "inside the run")):
        res = CliRunner().invoke(app, ["results", "publish", str(run), "--to", str(to)])
        _one_line_refusal(res, "--to", words)
    assert file.read_text() == "x" and not (run / "figures").exists()
    shutil.rmtree(run)


def test_a_marker_in_a_records_text_cannot_end_a_section_and_a_files_mode_is_kept(tmp_path):
    import stat

    from tdlab.report.findings import replace_between_markers
    from tdlab.safeio import RunDirError

    page = tmp_path / "findings.md"
    page.write_text("a\n<!-- paper-scale:start -->\nold\n<!-- paper-scale:end -->\nb\n")
    page.chmod(0o600)
    replace_between_markers(page, "| `x<!-- paper-scale:end -->` | holds |\n", "paper-scale")
    replace_between_markers(page, "new\n", "paper-scale")  # a later rewrite still finds its own end marker
    assert page.read_text() == "a\n<!-- paper-scale:start -->\nnew\n<!-- paper-scale:end -->\nb\n"
    assert stat.S_IMODE(page.stat().st_mode) == 0o600
    fifo = tmp_path / "fifo.md"
    os.mkfifo(fifo)
    for bad, words in ((fifo, "a device, FIFO or socket"), (Path("/dev/null"), "a device, FIFO or socket")):
        with pytest.raises(RunDirError, match=words):
            replace_between_markers(bad, "x", "paper-scale")


@pytest.fixture(scope="module")
def stored_fits(tmp_path_factory):
    """A staging folder whose fits are all stored (a finished tiny run, moved back to be staged): a resume
    reloads its fits from ``arrays/``. ``(out, run_id)``; copy before use."""
    import shutil

    out = tmp_path_factory.mktemp("stored") / "runs"
    res = CliRunner().invoke(
        app,
        ["run", "markov-init", "--out", str(out), "--run-id", "s", "--quiet", "--seeds", "1",
         "--set", "train.steps=4", "--set", "train.seq_len=8", "--set", "train.eval_every=2",
         "--set", "train.eval_batches=1", "--set", "archs=[sec2]"],
    )  # fmt: skip
    assert res.exit_code == 0, res.output
    staged = batch.staging_path(out / "s")
    (out / "s").rename(staged)
    for f in ("summary.json", "record.json", "report.html"):
        (staged / f).unlink(missing_ok=True)
    shutil.rmtree(staged / "figures", ignore_errors=True)
    assert _resume_ok(out, tmp_path_factory.mktemp("check"))  # as it is, the resume reloads and finishes
    return out


def _resume_ok(out: Path, where: Path) -> bool:
    import shutil

    copy = where / "runs"
    shutil.copytree(out, copy, symlinks=True)
    return _resume(copy).exit_code == 0


@pytest.mark.parametrize("damage", ["cut-short", "a-folder", "link-to-dev-zero"])
def test_a_stored_fit_that_is_damaged_or_no_regular_file_is_one_line_on_resume(stored_fits, tmp_path, damage):
    out, staging = _copy_of(stored_fits, tmp_path)
    f = staging / "arrays" / "sec2__standard.safetensors"
    if damage == "cut-short":
        f.write_bytes(f.read_bytes()[:100])
    elif damage == "a-folder":
        f.unlink()
        f.mkdir()
    else:
        f.unlink()
        f.symlink_to("/dev/zero")
    _one_line_refusal(_resume(out), "sec2__standard.safetensors")
    assert (staging / "config.yaml").is_file() and os.path.lexists(f)


def test_load_yaml_never_takes_a_loader_that_builds_objects():
    import yaml

    from tdlab.safeio import load_yaml

    with pytest.raises(TypeError, match="SafeLoader"):
        load_yaml("a: 1", yaml.UnsafeLoader)
    assert load_yaml("a: 1") == {"a": 1}

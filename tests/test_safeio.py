"""tdlab.safeio: reading never leaves a folder through a symlink nor reads past a file's size, output
targets are checked (no device, no run directory, no missing folder), and the import circle between
the run directory and the checkpoints is gone."""

from __future__ import annotations

import ast
import os
import stat
from pathlib import Path

import pytest

from tdlab.config import ConfigError
from tdlab.safeio import (
    RunDirError,
    check_output_file,
    check_output_folder,
    copy_inside,
    enclosing_run,
    file_mode,
    folder_mode,
    open_inside,
    read_inside,
)

SRC = Path(__file__).resolve().parents[1] / "src" / "tdlab"


@pytest.fixture
def root(tmp_path: Path) -> Path:
    r = tmp_path / "run"
    (r / "arrays").mkdir(parents=True)
    (r / "arrays" / "a.safetensors").write_bytes(b"0123456789")
    return r


def test_a_regular_file_is_read_and_copied_whole(root, tmp_path):
    assert read_inside(root, "arrays/a.safetensors") == b"0123456789"
    copy_inside(root, "arrays/a.safetensors", tmp_path / "out" / "a.safetensors")
    dst = tmp_path / "out" / "a.safetensors"
    assert dst.read_bytes() == b"0123456789" and stat.S_IMODE(dst.stat().st_mode) == file_mode()
    assert not list((tmp_path / "out").glob(".*.tmp"))


@pytest.mark.parametrize(
    "plant, words",
    [
        (lambda r: os.symlink("/dev/zero", r / "arrays" / "z.safetensors"), "symlink"),
        (lambda r: os.symlink("/etc/passwd", r / "arrays" / "z.safetensors"), "symlink"),
        (lambda r: os.symlink("z.safetensors", r / "arrays" / "z.safetensors"), "symlink"),  # a loop
        (lambda r: os.mkfifo(r / "arrays" / "z.safetensors"), "not a regular file"),  # must not wait for a writer
        (lambda r: (r / "arrays" / "z.safetensors").mkdir(), "not a regular file"),
        (lambda r: None, "No such file"),
    ],
)
def test_anything_but_a_regular_file_of_the_folder_is_refused_in_one_line(root, tmp_path, plant, words):
    plant(root)
    for read in (
        lambda: read_inside(root, "arrays/z.safetensors"),
        lambda: copy_inside(root, "arrays/z.safetensors", tmp_path / "copy"),
    ):
        with pytest.raises(RunDirError, match=words) as err:
            read()
        assert "\n" not in str(err.value) and "z.safetensors" in str(err.value)
    assert not (tmp_path / "copy").exists() and not list(tmp_path.glob(".copy*"))


def test_a_symlinked_folder_inside_the_root_is_not_followed(root, tmp_path):
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "a.safetensors").write_bytes(b"secret")
    (root / "arrays" / "a.safetensors").unlink()
    (root / "arrays").rmdir()
    os.symlink(outside, root / "arrays")
    with pytest.raises(RunDirError, match=r"symlink|not a folder"):
        read_inside(root, "arrays/a.safetensors")
    with pytest.raises(RunDirError, match="inside"):
        read_inside(root, "../outside/a.safetensors")


def test_the_root_itself_may_be_a_symlink(root, tmp_path):
    os.symlink(root, tmp_path / "link")
    assert read_inside(tmp_path / "link", "arrays/a.safetensors") == b"0123456789"


def test_reads_are_bounded_by_the_limit_and_by_the_size_when_opened(root):
    with pytest.raises(RunDirError, match="more than 4 allowed"):
        read_inside(root, "arrays/a.safetensors", limit=4)
    fd, size = open_inside(root, "arrays/a.safetensors")
    try:
        assert size == 10
        with open(root / "arrays" / "a.safetensors", "ab") as f:  # grows while it is read
            f.write(b"more")
        from tdlab.safeio import _chunks

        with pytest.raises(RunDirError, match="grew while it was read"):
            b"".join(_chunks(fd, size, root / "a", 1 << 20))
    finally:
        os.close(fd)


def test_enclosing_run_finds_finished_runs_and_staging_folders(tmp_path):
    run = tmp_path / "runs" / "r"
    (run / "arrays").mkdir(parents=True)
    (run / "config.yaml").write_text("experiment: x\n")
    assert enclosing_run(run / "arrays" / "x") is None  # no metrics.parquet yet: not a finished run
    (run / "metrics.parquet").write_bytes(b"x")
    assert enclosing_run(run / "arrays" / "x.safetensors") == run.resolve()
    assert enclosing_run(run) == run.resolve() and enclosing_run(tmp_path / "runs") is None
    staging = tmp_path / "runs" / ".staging-s"
    staging.mkdir()
    (staging / "config.yaml").write_text("experiment: x\n")
    assert enclosing_run(staging / "figures" / "f.png") == staging.resolve()


def test_output_files(tmp_path):
    (tmp_path / "file").write_text("x")
    (tmp_path / "dir").mkdir()
    assert check_output_file(tmp_path / "new.st") == tmp_path / "new.st"
    assert check_output_file(tmp_path / "file") == tmp_path / "file"  # an existing regular file is rewritten
    os.mkfifo(tmp_path / "fifo")
    os.symlink(tmp_path / "file", tmp_path / "link")
    bad = {
        tmp_path / "fifo": "FIFO",
        tmp_path / "link": "symlink",
        tmp_path / "dir": "folder",
        tmp_path / "nodir" / "x": "does not exist",
        tmp_path / "file" / "x": "not a folder",
        f"{tmp_path / 'newdir'}/": "no such folder",
    }
    if os.geteuid() == 0:
        os.mknod(tmp_path / "null", 0o666 | stat.S_IFCHR, os.makedev(1, 3))
        bad[tmp_path / "null"] = "device"
        bad["/dev/null"] = "device"
    for path, words in bad.items():
        with pytest.raises(ConfigError, match=words) as err:
            check_output_file(path, "--out")
        assert str(err.value).startswith("--out ")
    assert not (tmp_path / "newdir").exists() and not (tmp_path / "nodir").exists()


def test_output_folders(tmp_path):
    assert check_output_folder(tmp_path / "a" / "b", "--runs").is_dir()
    assert stat.S_IMODE((tmp_path / "a").stat().st_mode) == folder_mode()
    (tmp_path / "file").write_text("x")
    for path, words in (
        (tmp_path / "file", "not a folder"),
        ("/proc/tdlab-x", "cannot write there"),
        (tmp_path / "file" / "x", "cannot write there"),
    ):
        with pytest.raises(ConfigError, match=words) as err:
            check_output_folder(path, "--runs")
        assert str(err.value).startswith("--runs ")


def test_no_target_inside_a_run_directory(tmp_path):
    run = tmp_path / "r"
    run.mkdir()
    (run / "config.yaml").write_text("experiment: x\n")
    (run / "metrics.parquet").write_bytes(b"x")
    for check in (
        lambda: check_output_file(run / "arrays.st"),
        lambda: check_output_folder(run / "sub"),
        lambda: check_output_folder(run),
    ):
        with pytest.raises(ConfigError, match="read-only to every command but"):
            check()
    assert sorted(p.name for p in run.iterdir()) == ["config.yaml", "metrics.parquet"]


def _imports(path: Path) -> set[str]:
    """Modules a source file imports, at any depth (lazy imports count)."""
    out = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.module:
            out.add(node.module)
        elif isinstance(node, ast.Import):
            out.update(a.name for a in node.names)
    return out


def test_the_run_directory_and_the_checkpoints_do_not_import_each_other():
    assert "tdlab.train.checkpoint" not in _imports(SRC / "runs.py")
    assert "tdlab.runs" not in _imports(SRC / "train" / "checkpoint.py")
    assert not {m for m in _imports(SRC / "safeio.py") if m.startswith("tdlab.") and m != "tdlab.config"}

"""Where ``tdlab export`` may write: a regular file or a new name in an existing folder, never a device
node, a missing folder ``DIR/`` or a file inside a run directory (the trained weights it exports)."""

from __future__ import annotations

import os
import stat

import pytest
from rich.console import Console
from typer.testing import CliRunner

import tdlab.cli as cli

TINY = [
    "--set",
    "train.steps=4",
    "--set",
    "train.seq_len=8",
    "--set",
    "train.eval_every=2",
    "--set",
    "train.eval_batches=1",
    "--seeds",
    "1",
    "--set",
    "archs=[gpt2]",
    "--set",
    "inits=[standard]",
    "--quiet",
]
ARM = "gpt2/standard"


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    out = tmp_path_factory.mktemp("export-out") / "runs"
    res = CliRunner().invoke(cli.app, ["run", "markov-init", *TINY, "--run-id", "r", "--out", str(out)])
    assert res.exit_code == 0, res.output
    return out / "r"


@pytest.fixture
def export(monkeypatch, run):
    monkeypatch.setattr(cli, "err_console", Console(stderr=True, width=400))

    def go(out):
        return CliRunner().invoke(cli.app, ["export", str(run), "--arm", ARM, "--member", "0", "--out", str(out)])

    return go


def _tree(folder):
    return {str(p.relative_to(folder)): p.read_bytes() if p.is_file() else "/" for p in sorted(folder.rglob("*"))}


def _refused(res, words):
    assert res.exit_code == 2, res.output
    lines = res.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: --out ") and words in lines[0], res.stderr
    assert "Traceback" not in res.output


def test_a_device_node_is_never_replaced(export, tmp_path):
    node = tmp_path / "fn"
    if os.geteuid() == 0:
        os.mknod(node, 0o666 | stat.S_IFCHR, os.makedev(1, 3))  # `mknod /tmp/fn c 1 3`: a /dev/null of our own
    else:
        os.mkfifo(node)
    _refused(export(node), "a device, FIFO or socket")
    assert not stat.S_ISREG(os.lstat(node).st_mode)


def test_a_name_ending_in_slash_is_a_folder_that_must_exist(export, tmp_path):
    _refused(export(f"{tmp_path / 'newdir'}/"), "no such folder")
    assert not (tmp_path / "newdir").exists()
    (tmp_path / "newdir").mkdir()
    res = export(f"{tmp_path / 'newdir'}/")
    assert res.exit_code == 0 and [p.name for p in (tmp_path / "newdir").iterdir()] == [
        "r.gpt2_standard.m0.tl.safetensors"
    ]


def test_the_run_directory_is_read_only_to_export(export, run):
    """`--out R/arrays/A.safetensors` overwrote the trained weights, rc 0."""
    before = _tree(run)
    for out in (run / "arrays" / "gpt2__standard.safetensors", run / "arrays" / "new.safetensors", run, run / "arrays"):
        _refused(export(out), "read-only to every command but")
    assert _tree(run) == before


def test_folders_that_cannot_be_written_are_refused_before_any_work(export, tmp_path):
    (tmp_path / "file").write_text("x")
    _refused(export("/proc/tdlab-export.safetensors"), "cannot write there")
    _refused(export(tmp_path / "nodir" / "x.safetensors"), "does not exist")
    _refused(export(tmp_path / "file" / "x.safetensors"), "not a folder")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["file"]


def test_an_earlier_export_is_rewritten_and_a_folder_gets_the_default_name(export, tmp_path):
    assert export(tmp_path / "old.safetensors").exit_code == 0
    before = (tmp_path / "old.safetensors").stat().st_mtime_ns
    assert export(tmp_path / "old.safetensors").exit_code == 0
    assert (tmp_path / "old.safetensors").stat().st_mtime_ns >= before
    assert export(tmp_path).exit_code == 0 and (tmp_path / "r.gpt2_standard.m0.tl.safetensors").is_file()


def test_an_existing_file_is_replaced_only_when_it_is_an_export_of_ours(export, tmp_path):
    mine = tmp_path / "notes.txt"
    mine.write_text("my notes")
    _refused(export(mine), "not a tdlab TransformerLens export")
    assert mine.read_text() == "my notes"
    first = tmp_path / "m.safetensors"
    assert export(first).exit_code == 0
    assert export(first).exit_code == 0  # an export of ours: replaced


def test_the_filesystem_root_is_refused(export):
    _refused(export("/"), "the filesystem's root")
    assert not any(p.name.endswith(".tl.safetensors") for p in __import__("pathlib").Path("/").iterdir())

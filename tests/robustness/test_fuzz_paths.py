"""Fuzz every path a command or a config key reads or writes with paths that are bad by construction:
missing, a folder where a file is read (or a file where a folder is), a device node, a FIFO, a symlink
to ``/dev/zero``, a symlink loop, a path under a file, a missing folder ``DIR/``, a place inside a run
directory (for outputs), ``/proc``, binary garbage, non-UTF-8 text, an empty file.

Surfaces: ``export RUN`` and ``--out``, ``report``, ``findings``, ``run --resume``, ``run``/``sweep``/
``runs --out``, ``atlas build --runs``/``--out``, ``atlas run --runs``, and the keys ``data.stories``,
``data.prontoqa``, ``data.path``, ``corpus.path``, ``model.checkpoint``, ``from_run``. Each (surface,
kind) drawn must be refused as the README promises (conftest.check_refused): one line naming the
option or key, exit 2, the folder it was given unchanged, no run directory left. Training and sweeps
are replaced by a failure, so a path wrongly accepted fails fast.
"""

from __future__ import annotations

import os
import stat
from collections.abc import Callable
from pathlib import Path
from unittest import mock

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import tdlab.sweep
from tdlab import runner

INPUT_KINDS = ["missing", "folder", "device", "fifo", "zero-link", "loop", "under-file", "binary", "latin1", "empty"]
RUN_KINDS = ["missing", "folder", "file", "device", "fifo", "zero-link", "loop", "under-file"]  # a run folder expected
OUT_FOLDER_KINDS = ["file", "device", "fifo", "zero-link", "under-file", "in-run", "proc"]  # a folder to write in
OUT_FILE_KINDS = ["device", "fifo", "zero-link", "loop", "under-file", "slash-missing", "in-run", "proc"]


def make_path(kind: str, w: Path, run: Path, folder_wanted: bool) -> Path | str:
    """A path of ``kind`` under ``w`` (``run``: a finished run directory, for "in-run")."""
    p = w / "target"
    if kind == "missing":
        return p
    if kind == "folder":
        p.mkdir()
    elif kind in ("file", "under-file"):
        p.write_text("x")
        return p / "x" if kind == "under-file" else p
    elif kind == "device":
        if os.geteuid() == 0:
            os.mknod(p, 0o666 | stat.S_IFCHR, os.makedev(1, 3))
        else:  # mknod needs root: a FIFO is the special file anyone can make
            os.mkfifo(p)
    elif kind == "fifo":
        os.mkfifo(p)
    elif kind == "zero-link":
        os.symlink("/dev/zero", p)
    elif kind == "loop":
        os.symlink(p.name, p)
    elif kind == "binary":
        p.write_bytes(bytes(range(256)) * 8)
    elif kind == "latin1":
        p.write_bytes("caf\xe9 na\xefve <|endoftext|>\n".encode("latin-1") * 20)
    elif kind == "empty":
        p.write_bytes(b"")
    elif kind == "slash-missing":
        return f"{p}/"
    elif kind == "in-run":
        return run / "arrays" if folder_wanted else run / "arrays" / "x.safetensors"
    elif kind == "proc":
        return "/proc/tdlab-fuzz/x" if folder_wanted else "/proc/tdlab-fuzz"
    return p


def _refuse_to_run(*args, **kwargs):
    raise AssertionError("a bad path was accepted and would have run")


# surface -> (kinds that must be refused, argv(path, run, w), names the line may give, folder wanted,
#             what to replace by a failure: "train", "sweep" or None)
Surface = tuple[list[str], Callable[[str, Path, Path], list[str]], list[str], bool, str | None]
SURFACES: dict[str, Surface] = {
    "export RUN": (
        RUN_KINDS,
        lambda p, r, w: ["export", p, "--arm", "a", "--member", "0", "--out", w / "x.st"],
        ["target"],
        True,
        None,
    ),
    "export --out": (
        OUT_FILE_KINDS,
        lambda p, r, w: ["export", r, "--arm", "a", "--member", "0", "--out", p],
        ["--out"],
        False,
        None,
    ),
    "report": (RUN_KINDS, lambda p, r, w: ["report", p], ["target"], True, None),
    "findings": (RUN_KINDS, lambda p, r, w: ["findings", p], ["target"], True, None),
    "run --resume": (RUN_KINDS, lambda p, r, w: ["run", "--resume", p, "--quiet"], ["target"], True, None),
    "run --out": (
        OUT_FOLDER_KINDS,
        lambda p, r, w: ["run", "markov-init", "--quiet", "--out", p],
        ["--out"],
        True,
        "train",
    ),
    "sweep --out": (OUT_FOLDER_KINDS, lambda p, r, w: ["sweep", w / "spec.yaml", "--out", p], ["--out"], True, "sweep"),
    "runs --out": (
        ["file", "device", "fifo", "zero-link", "under-file", "in-run"],
        lambda p, r, w: ["runs", "--out", p],
        ["--out"],
        True,
        None,
    ),
    "atlas build --runs": (
        RUN_KINDS,
        lambda p, r, w: ["atlas", "build", "--runs", p, "--out", w / "site"],
        ["--runs", "target"],
        True,
        None,
    ),
    "atlas build --out": (
        [*OUT_FOLDER_KINDS, "loop"],
        lambda p, r, w: ["atlas", "build", "--runs", r.parent, "--out", p],
        ["--out"],
        True,
        None,
    ),
    "atlas run --runs": (
        OUT_FOLDER_KINDS,
        lambda p, r, w: ["atlas", "run", "markov-init", "--runs", p],
        ["--runs"],
        True,
        "sweep",
    ),
    "data.stories": (
        INPUT_KINDS,
        lambda p, r, w: ["run", "anchors-text", "--quiet", "--set", f"data.stories={p}", "--out", w / "out"],
        ["data.stories"],
        False,
        "train",
    ),
    "data.prontoqa": (
        INPUT_KINDS,
        lambda p, r, w: ["run", "anchors-text", "--quiet", "--set", f"data.prontoqa={p}", "--out", w / "out"],
        ["data.prontoqa"],
        False,
        "train",
    ),
    "data.path": (
        INPUT_KINDS,
        lambda p, r, w: [
            "run",
            "icl-avdigits",
            "--quiet",
            "--seeds",
            "1",
            "--set",
            f"data.path={p}",
            "--out",
            w / "out",
        ],
        ["data.path"],
        False,
        None,
    ),
    "corpus.path": (
        INPUT_KINDS,
        lambda p, r, w: [
            "run",
            "topics-real",
            "--quiet",
            "--seeds",
            "1",
            "--set",
            f"corpus.path={p}",
            "--set",
            "corpus.min_count=1",
            "--out",
            w / "out",
        ],
        ["corpus.path"],
        False,
        None,
    ),
    "from_run": (
        [*INPUT_KINDS, "file"],
        lambda p, r, w: ["run", "anchors-embedding", "--quiet", "--set", f"from_run={p}", "--out", w / "out"],
        ["from_run"],
        True,
        "train",
    ),
}
CASES = sorted((surface, kind) for surface, (kinds, *_) in SURFACES.items() for kind in kinds)


def test_every_surface_has_cases():
    assert {s for s, _ in CASES} == set(SURFACES) and len(CASES) > 100


@settings(max_examples=max(10, settings.default.max_examples))
@given(case=st.sampled_from(CASES))
def test_bad_paths_are_refused(fz, tiny_run, tmp_path_factory, case):
    surface, kind = case
    _kinds, argv, names, folder_wanted, replace = SURFACES[surface]
    w = tmp_path_factory.mktemp("fuzz-path", numbered=True)
    run = fz.copy_run(tiny_run, w / "runs")
    (w / "spec.yaml").write_text("name: fz\nexperiment: markov-init\nset: {train.steps: 3}\npoints: [{task.p: 0.3}]\n")
    if surface == "atlas build --out":  # the runs folder it reads is a valid one: only --out is bad
        from tdlab.index import RunIndex
        from tdlab.runs import Run

        RunIndex(w / "runs").add_run(Run(run))
    path = make_path(kind, w, run, folder_wanted)
    before = fz.digest(w)
    patches = {"train": (runner, "_execute"), "sweep": (tdlab.sweep, "run_sweep")}
    with mock.patch.object(*patches[replace], _refuse_to_run) if replace else _nothing():
        result = fz.invoke([str(a) for a in argv(str(path), run, w)])
    if (w / "out").is_dir() and not any((w / "out").iterdir()):
        (w / "out").rmdir()  # a run refused once it started leaves --out made, empty (nothing in it)
    fz.refused(f"path: {surface}", result, names, before, w, key=case)


class _nothing:
    def __enter__(self) -> None:
        return None

    def __exit__(self, *exc: object) -> None:
        return None


@pytest.mark.parametrize("surface", sorted(SURFACES))
def test_a_valid_path_is_not_among_the_bad_ones(surface):
    """What the fuzz calls bad is bad: a new file name (export --out), a new folder (outputs), are not drawn."""
    kinds = SURFACES[surface][0]
    if surface == "export --out":
        assert "missing" not in kinds and "folder" not in kinds and "file" not in kinds
    if surface.endswith(("--out", "--runs")) and surface != "atlas build --runs":
        assert "missing" not in kinds

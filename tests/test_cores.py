"""Sharing cores: passive OpenMP unless chosen, a thread count from the cores other tdlab processes do not
hold (dead processes' counts ignored), ``--threads`` wins, and a run gives its threads back."""

from __future__ import annotations

import os
import subprocess
import sys

from typer.testing import CliRunner

from tdlab.cli import app
from tdlab.cores import claim_threads, held_by_others, passive_openmp, release_threads, usable_cores


def test_passive_openmp_unless_the_environment_chose(monkeypatch):
    monkeypatch.delenv("OMP_WAIT_POLICY", raising=False)
    passive_openmp()
    assert os.environ["OMP_WAIT_POLICY"] == "PASSIVE"
    monkeypatch.setenv("OMP_WAIT_POLICY", "ACTIVE")
    passive_openmp()
    assert os.environ["OMP_WAIT_POLICY"] == "ACTIVE"


def test_the_cli_sets_passive_waiting_before_torch_is_imported():
    code = (
        "import os, sys; os.environ.pop('OMP_WAIT_POLICY', None); import tdlab.cli; "
        "print(os.environ['OMP_WAIT_POLICY'], 'torch' in sys.modules)"
    )
    out = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        env={k: v for k, v in os.environ.items() if k != "OMP_WAIT_POLICY"},
    ).stdout.split()
    assert out == ["PASSIVE", "False"]


def test_a_share_is_what_other_live_processes_leave(tmp_path):
    folder = tmp_path / "cores"
    folder.mkdir()
    sleeper = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        (folder / f"{sleeper.pid}.threads").write_text("1\n")
        (folder / "999999999.threads").write_text("8\n")  # a process that is gone: ignored
        (folder / "junk.threads").write_text("x")  # not tdlab's: ignored
        assert held_by_others(folder) == 1
        assert claim_threads(None, folder) == max(1, usable_cores() - 1)
        assert (folder / f"{os.getpid()}.threads").read_text().strip() == str(max(1, usable_cores() - 1))
        assert held_by_others(folder) == 1  # this process's own count is never counted against it
        assert claim_threads(3, folder) == 3  # --threads wins
        (folder / f"{sleeper.pid}.threads").write_text(f"{usable_cores() + 5}\n")
        assert claim_threads(None, folder) == 1  # at least one
    finally:
        sleeper.kill()
        sleeper.wait()
    release_threads(folder)
    assert not (folder / f"{os.getpid()}.threads").exists()


def test_run_threads_is_checked_and_the_run_gives_its_threads_back(tmp_path, monkeypatch):
    import torch

    monkeypatch.setenv("TDLAB_CORES_DIR", str(tmp_path / "cores"))
    bad = CliRunner().invoke(app, ["run", "markov-landscape", "--threads", "0", "--out", str(tmp_path / "r")])
    assert bad.exit_code == 2 and "--threads" in bad.output
    before = torch.get_num_threads()
    ok = CliRunner().invoke(
        app,
        [
            "run",
            "markov-init",
            "--threads",
            "1",
            "--quiet",
            "--out",
            str(tmp_path / "r"),
            "--set",
            "train.steps=5",
            "--set",
            "train.seq_len=8",
            "--set",
            "archs=[sec2]",
            "--set",
            "members=1",
            "--set",
            "train.eval_every=5",
            "--set",
            "train.eval_batches=1",
        ],
    )
    assert ok.exit_code in (0, 1), ok.output  # done (verdicts of 5 steps are beside the point)
    assert torch.get_num_threads() == before and not list((tmp_path / "cores").glob("*.threads"))


def test_the_suite_counts_its_threads_whatever_other_processes_hold(tmp_path):
    """Another process holding both cores in the shared registry changes no thread count in the suite: it has a
    registry of its own and one count for every run it starts (conftest), so its numbers never depend on what
    else runs on the machine."""
    import tempfile
    from pathlib import Path

    from tdlab.cli import _cores_share
    from tdlab.cores import registry

    shared = Path(tempfile.gettempdir()) / f"tdlab-cores-{os.getuid()}"  # where a tdlab outside the suite holds cores
    holder = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    held = shared / f"{holder.pid}.threads"
    try:
        shared.mkdir(parents=True, exist_ok=True)
        held.write_text(f"{usable_cores()}\n")
        assert held_by_others(shared) >= usable_cores()  # both cores held out there
        assert registry() != shared and held_by_others() == 0
        assert _cores_share() == 2 and claim_threads(_cores_share()) == 2
    finally:
        held.unlink(missing_ok=True)
        holder.kill()
        holder.wait()
        release_threads()


def test_a_resume_trains_on_the_threads_its_run_began_with(tmp_path, monkeypatch):
    """A run stopped at --until and resumed with no --threads takes the count it began with, though other
    processes now hold every core (a count taken from the registry would change the numbers' last bits)."""
    out = tmp_path / "r"
    sets = ["--set", "train.steps=400", "--set", "train.eval_every=100", "--set", "train.seq_len=32"]
    monkeypatch.delenv("TDLAB_THREADS", raising=False)
    started = CliRunner().invoke(
        app,
        ["run", "markov-init", "--threads", "1", "--quiet", "--until", "1s", "--run-id", "x", "--out", str(out), *sets],
    )
    assert started.exit_code == 3, started.output
    holder = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"])
    from tdlab.cores import registry

    held = registry() / f"{holder.pid}.threads"
    try:
        registry().mkdir(parents=True, exist_ok=True)
        held.write_text(f"{usable_cores()}\n")
        resumed = CliRunner().invoke(app, ["run", "--resume", str(out / "x"), "--quiet"])
    finally:
        held.unlink(missing_ok=True)
        holder.kill()
        holder.wait()
    assert resumed.exit_code == 0, resumed.output
    from tdlab.runs import Run

    summary = Run(out / "x").summary
    assert summary["env"]["torch_threads"] == 1
    assert [g["threads"] for g in summary["segments"]] == [1, 1]

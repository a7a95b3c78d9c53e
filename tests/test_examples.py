"""The scripts in examples/ run as a user would run them (a subprocess, small arguments), finish, print a
verdict of the claims layer, and write nothing where they run."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

EXAMPLES = Path(__file__).resolve().parents[1] / "examples"
VERDICT = re.compile(r"^verdict: (holds|fails|not resolved|not evaluable)$", re.MULTILINE)
DESCRIBED = re.compile(r"^\[(HOLDS|FAILS|NOT RESOLVED|NOT EVALUABLE)\] ", re.MULTILINE)

# Small arguments: the whole file stays well under a minute on one core.
CASES = {
    "markov_entropy_rate.py": ["--steps", "60", "--members", "3", "--seq-len", "32"],
    "direction_claim.py": ["--steps", "40", "--members", "3", "--seq-len", "32"],
    "custom_probe.py": ["--steps", "30", "--members", "2", "--seq-len", "32"],
    "linear_icl.py": ["--prompts", "1000", "--members", "3"],
}


def test_every_example_is_listed() -> None:
    """A new example gets a case here and a line in examples/README.md."""
    scripts = sorted(p.name for p in EXAMPLES.glob("*.py"))
    assert scripts == sorted(CASES)
    listed = (EXAMPLES / "README.md").read_text()
    assert all(f"`{name}`" in listed for name in scripts)


@pytest.mark.parametrize("script", sorted(CASES))
def test_example_runs_and_prints_a_verdict(script: str, tmp_path: Path) -> None:
    env = {**os.environ, "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}
    done = subprocess.run(
        [sys.executable, str(EXAMPLES / script), *CASES[script]],
        check=False,
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert VERDICT.search(done.stdout), done.stdout
    assert DESCRIBED.search(done.stdout), done.stdout
    assert list(tmp_path.iterdir()) == []  # wrote nothing where it ran


@pytest.mark.parametrize("script", sorted(CASES))
def test_example_documents_itself(script: str) -> None:
    """A docstring on top that names the seed it touches; short enough to read."""
    text = (EXAMPLES / script).read_text()
    assert text.startswith('"""') and re.search(r"[Ss]eed 00\d", text.split('"""')[1])
    assert len(text.splitlines()) <= 90


# The "add a paper" example (docs/contributing.md): a seed package with its task, experiment, claims and
# tests, beside a script that runs it through the real `tdlab run`.
PAPER = EXAMPLES / "add_a_paper"


def test_add_a_paper_runs_through_tdlab_run(tmp_path: Path) -> None:
    env = {**os.environ, "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1", "COLUMNS": "200"}
    done = subprocess.run(
        [sys.executable, str(PAPER / "run.py"), "--set", "train.steps=40", "--seeds", "2"],
        check=False,
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr[-3000:] + done.stdout[-3000:]
    assert "sticky-copy (Eq. 1) — status done" in done.stdout, done.stdout
    assert re.search(r"^  (HOLDS|FAILS|NOT RESOLVED|NOT EVALUABLE) +ends-at-entropy-rate: ", done.stdout, re.M)
    assert list(tmp_path.iterdir()) == []  # the run went to a temporary folder, removed after


def test_add_a_paper_tests_pass(tmp_path: Path) -> None:
    env = {**os.environ, "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1", "PYTHONPATH": str(PAPER)}
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", str(PAPER)],
        check=False,
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=240,
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert re.search(r"\b5 passed\b", done.stdout), done.stdout

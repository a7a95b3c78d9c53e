"""The fuzz suite's machinery: hypothesis profiles (fresh examples every run, the seed printed for
replay), the bad-input promise as one check, a tiny finished run built once per session, and the
tally of inputs tried / handled as promised / failed.

The promise (README, "Bad input"): one line on stderr naming the field or file and what is allowed,
exit code 2, no traceback, no run directory (or staging folder) written or changed, and the run
index (if any) still passing ``PRAGMA integrity_check``.

``--fuzz-long`` (tests/conftest.py) runs many more examples per property.
"""

from __future__ import annotations

import hashlib
import os
import random
import shutil
import sqlite3
import traceback
from collections import defaultdict
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from types import SimpleNamespace
from unittest import mock

import pytest
from hypothesis import HealthCheck, settings
from hypothesis import core as hypothesis_core
from typer.testing import CliRunner

import tdlab.cli as cli
from tdlab import runner

# Examples that rebuild a report are slow by nature; some strategies filter out valid values. Fresh
# examples every run (no derandomize): the seed is printed at the end for replay.
_QUIET = [HealthCheck.too_slow, HealthCheck.filter_too_much]
settings.register_profile("fuzz-ci", max_examples=25, deadline=None, suppress_health_check=_QUIET)
settings.register_profile("fuzz-long", max_examples=400, deadline=None, suppress_health_check=_QUIET)

# category -> distinct inputs tried, and of them those that broke the promise / were refused with exit 2.
# A failing input is counted, then its test fails (hypothesis's shrinking adds the smaller inputs it tries).
TRIED: defaultdict[str, set[str]] = defaultdict(set)
FAILED: defaultdict[str, set[str]] = defaultdict(set)
REFUSED: defaultdict[str, set[str]] = defaultdict(set)
SEED: list[int] = []


def record(category: str, key: str, ok: bool, refused: bool) -> None:
    """Count one input of ``category`` (``key`` identifies it): tried, and failed or refused."""
    TRIED[category].add(key)
    if not ok:
        FAILED[category].add(key)
    elif refused:
        REFUSED[category].add(key)


def pytest_configure(config: pytest.Config) -> None:
    """Load the profile before the test modules are imported (``@given`` reads it then), and fix the
    seed of this run: ``--hypothesis-seed`` or ``TDLAB_FUZZ_SEED`` replays one, else a fresh one."""
    settings.load_profile("fuzz-long" if config.getoption("--fuzz-long", False) else "fuzz-ci")
    given_seed = config.getoption("--hypothesis-seed", None) or os.environ.get("TDLAB_FUZZ_SEED")
    seed = int(given_seed) if given_seed is not None else random.SystemRandom().randrange(2**32)
    hypothesis_core.global_force_seed = seed  # what --hypothesis-seed sets: every @given draws from it
    SEED.append(seed)


def pytest_terminal_summary(terminalreporter, exitstatus, config) -> None:
    """The numbers to quote: inputs tried, handled as promised and failed, per category; the seed."""
    if not TRIED:
        return
    tr = terminalreporter
    tr.section("bad-input fuzz: inputs tried / handled as promised")
    for cat in sorted(TRIED):
        tried, failed = len(TRIED[cat]), len(FAILED[cat])
        tr.write_line(
            f"{cat:36} {tried - failed:5d} / {tried:5d}   failed {failed:3d}   (refused with exit 2: "
            f"{len(REFUSED[cat])})"
        )
    tried, failed = sum(map(len, TRIED.values())), sum(map(len, FAILED.values()))
    tr.write_line(f"{'total':36} {tried - failed:5d} / {tried:5d}   failed {failed:3d}")
    if SEED:
        tr.write_line(f"fuzz seed {SEED[0]}: replay with TDLAB_FUZZ_SEED={SEED[0]} (or --hypothesis-seed={SEED[0]})")
    if getattr(config, "cache", None) is not None:  # pytest-cache holds the last numbers for quoting
        config.cache.set(
            "tdlab/fuzz",
            {
                "seed": SEED[:1],
                "tried": {k: len(v) for k, v in TRIED.items()},
                "failed": {k: len(v) for k, v in FAILED.items()},
            },
        )


def tree_digest(folder: Path) -> dict[str, str]:
    """``relative path -> sha1`` of every file under ``folder`` (folders as ``/``): to prove nothing changed."""
    if not folder.exists():
        return {}
    out = {}
    for root, dirs, files in os.walk(folder):  # symlinks are entries, never followed (a loop, /dev/zero)
        for name in dirs + files:
            if name.endswith(("-wal", "-shm")):  # SQLite's bookkeeping beside index.sqlite (a reader may make it)
                continue
            p = Path(root, name)
            rel = str(p.relative_to(folder))
            if p.is_symlink():
                out[rel] = "-> " + os.readlink(p)
            elif p.is_file():
                out[rel] = hashlib.sha1(p.read_bytes()).hexdigest()
            else:
                out[rel] = "/" if p.is_dir() else "special"
    return dict(sorted(out.items()))


def index_ok(out: Path) -> bool:
    """The run index under ``out``, if there is one, passes ``PRAGMA integrity_check``."""
    db = out / "index.sqlite"
    if not db.exists():
        return True
    with sqlite3.connect(f"file:{db}?mode=ro", uri=True) as con:
        return con.execute("PRAGMA integrity_check").fetchone()[0] == "ok"


@dataclass
class Outcome:
    exit_code: int
    stdout: str
    stderr: str


def invoke(args: Sequence[str]) -> Outcome:
    """``tdlab ARGS`` in-process (the real command group, console script behaviour included)."""
    r = CliRunner().invoke(cli.app, list(args))
    err = r.stderr
    if r.exception is not None and not isinstance(r.exception, SystemExit):  # a traceback: the check counts it
        err += "".join(traceback.format_exception(r.exception))
    return Outcome(r.exit_code, r.stdout, err)


def check_refused(
    category: str,
    result: Outcome,
    names: Sequence[str],
    before: dict[str, str],
    out: Path,
    allow_ok: bool = False,
    key: object = None,
) -> None:
    """Assert the promise for one input and count it (``key``: the input, for the tally).

    ``names``: the line must contain one of them (the field or the file). ``before``: the digest of
    ``out`` before the command; a refusal must leave it as it was. ``allow_ok``: the input may be
    valid after all (a truncated file that still parses): then exit 0 without an error line is fine.
    """
    ident = repr(key if key is not None else (names, result.stderr[:300]))
    try:
        refused = _promise(result, names, before, out, allow_ok)
    except AssertionError:
        record(category, ident, ok=False, refused=False)
        raise
    record(category, ident, ok=True, refused=refused)


def _promise(result: Outcome, names: Sequence[str], before: dict[str, str], out: Path, allow_ok: bool) -> bool:
    """The checks of :func:`check_refused`; True when the input was refused (exit 2)."""
    text = result.stdout + result.stderr
    assert "Traceback" not in text, text[-2000:]
    if allow_ok and result.exit_code == 0:
        assert "error:" not in result.stderr, result.stderr
        return False
    assert result.exit_code == 2, f"exit {result.exit_code}: {text[-2000:]}"
    lines = result.stderr.splitlines()
    assert len(lines) == 1, f"{len(lines)} lines on stderr: {result.stderr[:3000]!r}"
    line = lines[0]
    assert line.startswith("error: "), line
    assert any(n in line for n in names), f"none of {list(names)!r} named in: {line[:500]!r}"
    assert tree_digest(out) == before, "the command changed the output folder"
    assert not list(out.glob(".staging-*")) if out.exists() else True
    assert index_ok(out)
    return True


@pytest.fixture(scope="session")
def fz() -> SimpleNamespace:
    """The helpers of this suite, for the test modules (conftest modules are not importable)."""
    return SimpleNamespace(
        invoke=invoke,
        refused=check_refused,
        digest=tree_digest,
        copy_run=copy_run,
        index_ok=index_ok,
        no_training=no_training,
        record=record,
    )


@contextmanager
def no_training() -> Iterator[None]:
    """Make an accepted ``tdlab run`` fail loudly instead of training: the fuzz only feeds bad input,
    and an input the CLI wrongly accepts must show up as a failure, not as minutes of training."""

    def refuse_to_train(*args, **kwargs):
        raise AssertionError("a bad input was accepted and would have trained")

    with mock.patch.object(runner, "execute", refuse_to_train):
        yield


TINY_RUN = [
    "run",
    "markov-init",
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
    "archs=[sec2]",
    "--set",
    "inits=[standard]",
    "--quiet",
    "--run-id",
    "tiny",
]


@pytest.fixture(scope="session")
def tiny_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A small finished ``markov-init`` run (one arm, one member, 4 steps), built once; copy it with
    :func:`copy_run` before changing it."""
    out = tmp_path_factory.mktemp("fuzz-origin")
    r = invoke([*TINY_RUN, "--out", str(out)])
    assert r.exit_code == 0, r.stdout + r.stderr
    return out / "tiny"


def copy_run(run: Path, dest: Path) -> Path:
    """A copy of the run directory ``run`` as ``dest/NAME`` (the index is not copied)."""
    target = dest / run.name
    shutil.copytree(run, target)
    return target

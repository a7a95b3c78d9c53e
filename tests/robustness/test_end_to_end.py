"""The promise through the real console script (a subprocess), for the two ways in: a usage error
that click raises and a config error that tdlab raises. The fuzz suite calls the same command
group in-process; these check that the installed ``tdlab`` behaves the same."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

TDLAB = shutil.which("tdlab")


@pytest.mark.skipif(TDLAB is None, reason="the tdlab console script is not installed")
@pytest.mark.parametrize(
    "args, named",
    [
        (["run", "markov-init", "--seeds", "abc"], "--seeds"),  # click: a value it cannot convert
        (["run", "markov-init", "--set", "train.steps=&a [*a, *a]"], "train.steps"),  # tdlab: a YAML alias
    ],
    ids=["click-usage-error", "tdlab-config-error"],
)
def test_console_script_prints_one_line_and_exits_2(tmp_path: Path, args: list[str], named: str) -> None:
    out = tmp_path / "runs"
    proc = subprocess.run([TDLAB, *args, "--out", str(out)], capture_output=True, text=True, timeout=120, cwd=tmp_path)
    assert proc.returncode == 2, proc.stderr
    lines = proc.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: ") and named in lines[0], proc.stderr
    assert "Traceback" not in proc.stdout + proc.stderr
    assert proc.stdout == ""
    assert not out.exists() and list(tmp_path.iterdir()) == []

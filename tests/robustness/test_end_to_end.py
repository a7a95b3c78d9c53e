"""The promise through the real console script (a subprocess). The fuzz suite calls the same
command group in-process; this checks that the installed ``tdlab`` behaves the same."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

TDLAB = shutil.which("tdlab")


@pytest.mark.skipif(TDLAB is None, reason="the tdlab console script is not installed")
def test_console_script_prints_one_line_and_exits_2(tmp_path: Path) -> None:
    """A click usage error: the entry point goes through tdlab's command group, as the in-process
    fuzz does (a process start costs 10-20 s on a busy machine: one is enough here)."""
    out = tmp_path / "runs"
    named = "'--seeds'"
    proc = subprocess.run(
        [TDLAB, "run", "markov-init", "--seeds", "abc", "--out", str(out)],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=tmp_path,
    )
    assert proc.returncode == 2, proc.stderr
    lines = proc.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: ") and named in lines[0], proc.stderr
    assert "Traceback" not in proc.stdout + proc.stderr
    assert proc.stdout == ""
    assert not out.exists() and list(tmp_path.iterdir()) == []

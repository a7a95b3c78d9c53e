"""Run seed 999's ``sticky-copy`` (an example paper) through the real ``tdlab run`` command.

``tdlab run NAME`` finds an experiment by name in tdlab's catalog; an experiment defined outside tdlab is
found once its module is imported (here: the paper package beside this script), so this script imports it
and hands the command line to tdlab's own CLI. The run directory goes to a temporary folder unless
``--out`` is given.

    python examples/add_a_paper/run.py                       # quick profile: 3 members, 150 steps
    python examples/add_a_paper/run.py --set train.steps=40  # any `tdlab run` option
"""

from __future__ import annotations

import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))  # the paper package beside this script

import paper999_sticky  # noqa: F401  (registers sticky-copy)

from tdlab.cli import app


def main() -> None:
    args = sys.argv[1:]
    with tempfile.TemporaryDirectory() as tmp:
        out = [] if "--out" in args else ["--out", tmp]
        app(["run", "sticky-copy", *out, *args], prog_name="tdlab")


if __name__ == "__main__":
    main()

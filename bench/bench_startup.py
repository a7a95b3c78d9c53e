"""Benchmark: how long a fresh ``tdlab`` process takes to start, in fresh subprocesses.

Cases (each a new interpreter, so every import is paid again; the operating system's file cache is warm):

* ``import tdlab.experiments`` — the experiments package;
* ``get('markov-init')`` — one experiment by name (``tdlab run NAME`` does this);
* ``registry()`` — every experiment (``tdlab atlas``, tests);
* ``run NAME --help`` — the experiment's config keys;
* ``tiny run`` — ``tdlab run markov-init --quiet --out TMP --set train.steps=20 --set train.seq_len=16
  --set archs=[sec2] --seeds 1``, the whole process: imports, 2 arms × 20 steps, claims, figures, report;
* ``import torch`` — the floor no tdlab change can go below.

With ``--baseline-src DIR`` (the ``src`` folder of another checkout, e.g. ``git worktree add /tmp/before
HEAD~1``) each case also runs against that code (``PYTHONPATH``), alternating with this checkout's run
by run so both see the same load, and prints medians and the ratio baseline / this checkout. Timings
are printed, never asserted.

    python bench/bench_startup.py --repeats 7
    python bench/bench_startup.py --baseline-src /tmp/before/src --repeats 7
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE_SRC = Path(__file__).resolve().parents[1] / "src"
TINY_RUN = [
    "run",
    "markov-init",
    "--quiet",
    "--set",
    "train.steps=20",
    "--set",
    "train.seq_len=16",
    "--set",
    "archs=[sec2]",
    "--seeds",
    "1",
]
CASES: dict[str, list[str]] = {
    "import tdlab.experiments": ["-c", "import tdlab.experiments"],
    "get('markov-init')": ["-c", "from tdlab.experiments.base import get; get('markov-init')"],
    "registry()": ["-c", "from tdlab.experiments.base import registry; registry()"],
    "run markov-init --help": ["-m", "tdlab.cli", "run", "markov-init", "--help"],
    "tiny run": ["-m", "tdlab.cli", *TINY_RUN],  # --out is added per run
    "import torch": ["-c", "import torch"],
}
# What a process imports (printed once per code base): modules of the paper packages (experiments and
# their shared set-ups; named seedNNN_* before they were paperNNN_*, so a baseline of older code counts too),
# and libraries it should import only when it uses them.
PROBE = """
import json, sys
{action}
own = ("tdlab.experiments.paper", "tdlab.experiments.seed")
papers = [m for m, mod in sys.modules.items() if m.startswith(own) and not hasattr(mod, "__path__")]
print(json.dumps({{"paper-package modules": len(papers), "torch._dynamo": "torch._dynamo" in sys.modules,
                  "matplotlib": "matplotlib" in sys.modules, "scipy.stats": "scipy.stats" in sys.modules}}))
"""
TINY_ACTION = """
from tdlab.cli import app
try:
    app({args!r}, standalone_mode=False)
except SystemExit:
    pass
"""


def _env(src: Path) -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = str(src)  # ahead of the editable install's path
    return env


def _once(args: list[str], src: Path) -> float:
    """Wall seconds of one fresh ``python ARGS`` process on the code in ``src``."""
    out = None
    if args[-len(TINY_RUN) :] == TINY_RUN:
        out = tempfile.mkdtemp(prefix="tdlab-bench-startup-")
        args = [*args, "--out", out]
    try:
        t0 = time.perf_counter()
        subprocess.run(
            [sys.executable, *args], env=_env(src), check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
        )
        return time.perf_counter() - t0
    finally:
        if out is not None:
            shutil.rmtree(out, ignore_errors=True)


def _probe(src: Path, action: str) -> dict:
    out = subprocess.run(
        [sys.executable, "-c", PROBE.format(action=action)], env=_env(src), check=True, capture_output=True, text=True
    )
    return json.loads(out.stdout.strip().splitlines()[-1])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeats", type=int, default=5, help="timed runs per case and code base (median shown)")
    ap.add_argument("--baseline-src", type=Path, default=None, help="src folder of the code to compare with")
    ap.add_argument("--cases", nargs="*", default=list(CASES), choices=list(CASES), metavar="CASE")
    args = ap.parse_args()
    trees = {"this": HERE_SRC}
    if args.baseline_src is not None:
        trees = {"baseline": args.baseline_src.resolve(), **trees}
    print(
        f"python {platform.python_version()}, {os.cpu_count()} CPUs, {args.repeats} runs per case; "
        + ", ".join(f"{k} = {v}" for k, v in trees.items())
    )
    tiny_out = tempfile.mkdtemp(prefix="tdlab-bench-startup-")
    try:
        for name, src in trees.items():  # an untimed first run writes the bytecode caches
            for case in args.cases:
                _once(CASES[case], src)
            get = _probe(src, "from tdlab.experiments.base import get; get('markov-init')")
            tiny = _probe(src, TINY_ACTION.format(args=[*TINY_RUN, "--out", tiny_out]))
            print(f"  {name}: get('markov-init') imports {get}; tiny run imports {tiny}")
    finally:
        shutil.rmtree(tiny_out, ignore_errors=True)
    times: dict[tuple[str, str], list[float]] = {(c, t): [] for c in args.cases for t in trees}
    for _ in range(args.repeats):
        for case in args.cases:
            for name, src in trees.items():  # alternating, so a change of load hits both alike
                times[case, name].append(_once(CASES[case], src))
    print(
        f"\n{'case':<26}"
        + "".join(f"{name + ' (s)':>16}" for name in trees)
        + ("   baseline / this" if len(trees) > 1 else "")
    )
    for case in args.cases:
        med = {name: statistics.median(times[case, name]) for name in trees}
        line = f"{case:<26}" + "".join(f"{med[name]:>16.2f}" for name in trees)
        if len(trees) > 1:
            line += f"   {med['baseline'] / med['this']:.2f}x"
        print(line)


if __name__ == "__main__":
    main()

"""Runs that share a machine: one ``tdlab run`` alone vs three started together, as whole processes.

The work: ``markov-init`` quick with 400 steps (the issue's measurement: 16 s alone, 380 s for three at once
before passive OpenMP waiting and thread shares). Each run is a fresh ``python -m tdlab.cli run`` process;
the script times one alone, then three started together (until the last exits), and prints the ratio
three-at-once / alone for:

- ``now``: tdlab as it is (passive OpenMP waiting unless the environment chose, each run's thread count from
  the cores the other tdlab processes leave);
- ``before`` (``--before``): each run with ``OMP_WAIT_POLICY=ACTIVE`` and every usable core as its threads,
  as every run was started before.

Timings are printed, never asserted. Run it on an otherwise idle machine::

    python bench/bench_sharing.py [--before] [--steps 400] [--repeats 1]
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path


def _cmd(out: Path, run_id: str, steps: int, threads: int | None) -> list[str]:
    cmd = [
        sys.executable,
        "-m",
        "tdlab.cli",
        "run",
        "markov-init",
        "--quiet",
        "--out",
        str(out),
        "--run-id",
        run_id,
        "--set",
        f"train.steps={steps}",
    ]
    return cmd + (["--threads", str(threads)] if threads else [])


def _timed(n: int, steps: int, before: bool, folder: Path, tag: str) -> float:
    env = dict(os.environ)
    threads = None
    if before:
        env["OMP_WAIT_POLICY"] = "ACTIVE"
        threads = os.cpu_count() or 1
    else:
        env.pop("OMP_WAIT_POLICY", None)
    t0 = time.perf_counter()
    procs = [
        subprocess.Popen(
            _cmd(folder, f"{tag}-{i}", steps, threads), env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
        )
        for i in range(n)
    ]
    codes = [p.wait() for p in procs]
    wall = time.perf_counter() - t0
    if any(c not in (0, 1) for c in codes):
        raise SystemExit(f"a run failed: exit codes {codes}")
    return wall


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--before", action="store_true", help="also time the runs as they were started before")
    ap.add_argument("--steps", type=int, default=400)
    ap.add_argument("--repeats", type=int, default=1)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        modes = ["now"] + (["before"] if args.before else [])
        print(f"markov-init quick, {args.steps} steps; cores: {os.cpu_count()}; load: {os.getloadavg()[0]:.2f}")
        for mode in modes:
            for r in range(args.repeats):
                alone = _timed(1, args.steps, mode == "before", Path(tmp), f"{mode}{r}a")
                three = _timed(3, args.steps, mode == "before", Path(tmp), f"{mode}{r}b")
                print(f"{mode:6}: one alone {alone:6.1f} s, three at once {three:6.1f} s: {three / alone:5.2f}x")


if __name__ == "__main__":
    main()

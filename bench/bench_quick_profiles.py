"""Benchmark: every experiment's quick profile as a whole process, before -> after, with its verdicts.

Each run is a fresh ``python -m tdlab.cli run NAME --quiet`` process (imports, training, claims, figures,
report), timed from outside. "After" is this checkout. "Before" is either another checkout's ``src``
(``--before-src DIR``, e.g. ``git worktree add /tmp/before COMMIT``) or this checkout with other
``tdlab run`` options (``--before-args "--lanes 1"``: the fits one after another). Before and after
alternate (before first in odd pairs, after first in even ones), so a change of load hits both alike. Per
experiment the table gives the median wall time of each side, the ratio before / after, both runs' paper
verdicts (groups held / failed / not resolved / not evaluable) and whether every paper group's verdict
and every row's measured values are the same. The load average before each run is recorded: quote idle
timings only (two jobs on two cores slow a run 5-20x). Timings are printed, never asserted.

``--json FILE`` keeps every run's record as it ends, and a later call with the same file runs only what
is missing (a long table can be built over several calls). ``--write-quick-times FILE`` puts each named
experiment's median "after" time into the quick-times data file (default: the one shipped,
``src/tdlab/costs/quick_seconds.json``, which the ``standard`` profile, the batch's cost prior and the profiles
page read), with its note: ``idle`` (every run's load average at most 1.8) or ``shared``, the date and the runs.

    python bench/bench_quick_profiles.py markov-icl-depth --before-args "--lanes 1"
    python bench/bench_quick_profiles.py --before-src /tmp/before/src --json quick.json --markdown
    python bench/bench_quick_profiles.py --after-only --json quick.json --markdown   # this checkout only
    python bench/bench_quick_profiles.py markov-rank --after-only --write-quick-times   # re-measure one quick time
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE_SRC = Path(__file__).resolve().parents[1] / "src"
QUICK_TIMES = HERE_SRC / "tdlab" / "costs" / "quick_seconds.json"
IDLE_LOAD = 1.8  # a load average above it: another job shared the cores (docs/performance.md)


def run_once(name: str, src: Path, extra: list[str], out: Path) -> dict:
    """One quick run of ``name`` on the code in ``src``: wall seconds, load average before it, status,
    paper verdicts and measured values per row."""
    load = os.getloadavg()[0]
    env = {**os.environ, "PYTHONPATH": str(src)}  # ahead of the editable install's path
    t0 = time.perf_counter()
    proc = subprocess.run(
        [sys.executable, "-m", "tdlab.cli", "run", name, "--quiet", "--out", str(out), "--run-id", "r", *extra],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    wall = time.perf_counter() - t0
    summary_file = out / "r" / "summary.json"
    if not summary_file.is_file():
        return {"wall": wall, "load": load, "status": f"exit {proc.returncode}: {proc.stderr.strip()[-300:]}"}
    s = json.loads(summary_file.read_text())
    paper = [g for g in s["claims"] if g.get("kind", "paper") == "paper"]
    return {
        "wall": wall,
        "load": load,
        "status": s["status"],
        "verdicts": {g["id"]: g["verdict"] for g in paper},
        "measured": {r["id"]: r.get("measured") for g in paper for r in g.get("rows", [])},
    }


def counts(verdicts: dict[str, str]) -> str:
    """``held/failed/not resolved/not evaluable`` of the paper groups."""
    v = list(verdicts.values())
    return "/".join(str(v.count(x)) for x in ("holds", "fails", "not resolved", "not evaluable"))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("names", nargs="*", help="experiments (default: every one, in catalog order)")
    ap.add_argument("--before-src", type=Path, help="src folder of the code to compare with (default: this checkout)")
    ap.add_argument("--before-args", default="", help="extra `tdlab run` options of the before runs, one string")
    ap.add_argument("--after-args", default="", help="extra `tdlab run` options of the after runs, one string")
    ap.add_argument("--pairs", type=int, default=1, help="before/after pairs per experiment (median shown)")
    ap.add_argument("--after-only", action="store_true", help="time this checkout only (no before runs)")
    ap.add_argument("--json", type=Path, help="keep every record here; runs already in it are not run again")
    ap.add_argument("--markdown", action="store_true", help="print the table as Markdown")
    ap.add_argument(
        "--write-quick-times",
        type=Path,
        nargs="?",
        const=QUICK_TIMES,
        help=f"put the median after times into this quick-times file (no FILE: {QUICK_TIMES.relative_to(HERE_SRC.parent)})",
    )
    args = ap.parse_args()
    from tdlab.experiments.catalog import CATALOG

    names = args.names or list(CATALOG)
    unknown = [n for n in names if n not in CATALOG]
    if unknown:
        ap.error(f"unknown experiments {unknown}; see `tdlab list`")
    sides = {
        "before": ((args.before_src or HERE_SRC).resolve(), shlex.split(args.before_args)),
        "after": (HERE_SRC, shlex.split(args.after_args)),
    }
    records: dict[str, dict] = json.loads(args.json.read_text()) if args.json and args.json.is_file() else {}
    for name in names:
        rec: dict[str, list] = records.setdefault(name, {"before": [], "after": []})
        for pair in range(args.pairs):
            order = ("before", "after") if pair % 2 == 0 else ("after", "before")
            for side in ("after",) if args.after_only else order:
                if len(rec[side]) > pair:
                    continue  # kept from an earlier call
                out = Path(tempfile.mkdtemp(prefix="tdlab-bench-quick-"))
                try:
                    rec[side].append(run_once(name, *sides[side], out))
                finally:
                    shutil.rmtree(out, ignore_errors=True)
                print(
                    f"{name} {side}: {rec[side][-1]['wall']:.1f} s (load {rec[side][-1]['load']:.2f}) "
                    f"{rec[side][-1]['status']}",
                    file=sys.stderr,
                    flush=True,
                )
                if args.json:
                    args.json.write_text(json.dumps(records, indent=1))
    sep = " | " if args.markdown else "  "
    head = [
        "experiment",
        "before (s)",
        "after (s)",
        "before / after",
        "load",
        "verdicts before",
        "verdicts after",
        "same",
    ]
    if args.markdown:
        print("| " + " | ".join(head) + " |\n|" + "---|" * len(head))
    else:
        print(sep.join(head))
    for name in names:
        rec = {side: runs for side, runs in records[name].items() if runs}
        med = {side: statistics.median(r["wall"] for r in rec[side]) for side in rec}
        load = max(r["load"] for side in rec for r in rec[side])
        first = {side: rec[side][0] for side in rec}
        v = {
            side: counts(first[side]["verdicts"]) if "verdicts" in first[side] else first[side]["status"]
            for side in rec
        }
        if len(rec) < 2 or any("verdicts" not in r for r in first.values()):
            same = "—"
        else:
            same = "yes" if first["before"]["verdicts"] == first["after"]["verdicts"] else "verdicts differ"
            if same == "yes" and json.dumps(first["before"]["measured"]) != json.dumps(
                first["after"]["measured"]
            ):  # NaN too
                same = "verdicts; values differ"
        ratio = f"{med['before'] / med['after']:.2f}×" if len(med) == 2 else "—"
        cells = [
            name,
            f"{med['before']:.0f}" if "before" in med else "—",
            f"{med['after']:.0f}",
            ratio,
            f"≤ {load:.1f}",
            v.get("before", "—"),
            v["after"],
            same,
        ]
        print(("| " if args.markdown else "") + sep.join(cells) + (" |" if args.markdown else ""))
    if args.write_quick_times:
        write_times(args.write_quick_times, {name: records[name]["after"] for name in names})


def write_times(path: Path, runs: dict[str, list[dict]]) -> None:
    """Each experiment's median wall time over its finished ``runs`` into the quick-times file at ``path``."""
    from tdlab.costs.quick_times import QuickTime, write_quick_times

    new = {}
    for name, done in runs.items():
        done = [r for r in done if r.get("status") == "done"]
        if not done:
            print(f"{name}: no finished run, its quick time is left as it was", file=sys.stderr)
            continue
        load = max(r["load"] for r in done)
        how = "idle" if load <= IDLE_LOAD else "shared"
        note = f"{how}, bench_quick_profiles.py, {time.strftime('%Y-%m-%d')}, {len(done)} run(s), load <= {load:.1f}"
        new[name] = QuickTime(round(statistics.median(r["wall"] for r in done), 1), note)
    write_quick_times(path, new)
    print(f"wrote {', '.join(new) or 'nothing'} to {path}", file=sys.stderr)


if __name__ == "__main__":
    main()

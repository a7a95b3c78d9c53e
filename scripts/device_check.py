"""Run every experiment end to end on one device at a shortened length, and compare two devices.

Why: the quick profiles are tested on the CPU; ``--device cuda`` must train, measure and judge every
experiment too (a tensor left on the CPU, a host-only op, a dtype the GPU refuses). Each experiment
runs its quick profile with ``--seeds 2`` and its training-length field (``tdlab.rounds.length_field``:
its table, else the atlas's steps/epochs axis) scaled by ``--scale``; the record per experiment is the status,
wall time, paper verdict counts and a digest of the metrics (each arm/metric's last logged value,
averaged over members). ``--compare A.json B.json`` prints, per experiment, the largest relative
difference between two records' digests (same config, two devices): a reading, not a gate, since
float summation order differs between devices and training amplifies it, and per-step data drawn on
the device differ from the CPU's (fixed data sets are drawn on the CPU, so they are the same).

Wall times include the seed-002 reference optima (L-BFGS on the CPU, kept in ``$TDLAB_CACHE``): a
machine with a warm cache skips them. ``--cache DIR`` points every worker at DIR (an empty folder
gives a cold-cache timing, comparable between machines).

    python scripts/device_check.py run --device cuda --out /tmp/dc --json cuda.json [--scale 0.1] [--jobs 6]
    python scripts/device_check.py compare cpu.json cuda.json
"""

from __future__ import annotations

import argparse
import json
import math
import multiprocessing
import os
import sys
import tempfile
import time
import traceback
from concurrent.futures import ProcessPoolExecutor, as_completed
from pathlib import Path
from typing import Any


def shortened(name: str, scale: float) -> list[str]:
    """The ``--set`` override that scales ``name``'s training length (none when it has no such field).

    A length the config refuses (a snapshot epoch past the end, say) is doubled until it is valid."""
    from tdlab.config import ConfigError, read_field
    from tdlab.experiments.base import get
    from tdlab.rounds import length_field

    exp = get(name)
    field = length_field(exp)
    if field is None or scale >= 1:
        return []
    full = read_field(exp.make_config("quick"), field)
    length = max(2, math.ceil(full * scale))
    while length < full:
        try:
            exp.make_config("quick", [f"{field}={length}"])
            return [f"{field}={length}"]
        except ConfigError:
            length *= 2
    return []


def check_one(name: str, device: str, out: str, scale: float, threads: int) -> dict[str, Any]:
    """Run ``name`` once on ``device``; never raises (a failure is the record's ``error``)."""
    import torch

    torch.set_num_threads(threads)
    t0 = time.perf_counter()
    rec: dict[str, Any] = {"experiment": name, "device": device, "scale": scale}
    try:
        from tdlab.experiments.base import get
        from tdlab.runner import execute

        exp = get(name)
        overrides = shortened(name, scale)
        rec["overrides"] = overrides
        cfg = exp.make_config("quick", overrides, members=2)
        run = execute(
            exp, cfg, "quick", Path(out), device=device, progress=False, run_id=f"{name}-{device.replace(':', '')}"
        )
        s = run.summary
        rec.update(
            status=s["status"],
            error=s["error"],
            verdicts={
                k: s[k]
                for k in (
                    "claims_total",
                    "claims_held",
                    "claims_failed",
                    "claims_not_resolved",
                    "claims_not_evaluable",
                    "sanity_failed",
                )
            },
        )
        m = run.metrics()
        last = m.sort_values("step").groupby(["arm", "name", "member"]).tail(1)
        rec["digest"] = {f"{a}|{k}": float(v) for (a, k), v in last.groupby(["arm", "name"])["value"].mean().items()}
    except BaseException as exc:
        rec.update(status="error", error=f"{type(exc).__name__}: {exc}", traceback=traceback.format_exc()[-3000:])
    rec["wall_s"] = round(time.perf_counter() - t0, 1)
    return rec


def run_all(args: argparse.Namespace) -> int:
    from tdlab.experiments.catalog import CATALOG

    if args.cache:
        os.environ["TDLAB_CACHE"] = str(Path(args.cache).resolve())  # inherited by the spawned workers
    names = args.only or list(CATALOG)
    out = args.out or tempfile.mkdtemp(prefix="device_check_")
    records = []
    with ProcessPoolExecutor(
        max_workers=args.jobs, mp_context=multiprocessing.get_context("spawn")
    ) as pool:  # CUDA needs spawn
        futs = {pool.submit(check_one, n, args.device, out, args.scale, args.threads): n for n in names}
        for fut in as_completed(futs):
            rec = fut.result()
            records.append(rec)
            Path(args.json).write_text(json.dumps(sorted(records, key=lambda r: r["experiment"]), indent=1))
            v = rec.get("verdicts", {})
            print(
                f"{rec['experiment']:28s} {rec['status']:8s} {rec['wall_s']:7.1f} s  "
                f"{v.get('claims_held', '-')}/{v.get('claims_total', '-')} hold  {rec.get('error') or ''}"[:220],
                flush=True,
            )
    records.sort(key=lambda r: r["experiment"])
    Path(args.json).write_text(json.dumps(records, indent=1))
    bad = [r["experiment"] for r in records if r["status"] == "error"]
    print(f"{len(records) - len(bad)}/{len(records)} ran on {args.device}; errors: {', '.join(bad) or 'none'}")
    return 1 if bad else 0


def compare(a_path: str, b_path: str) -> int:
    a = {r["experiment"]: r for r in json.loads(Path(a_path).read_text())}
    b = {r["experiment"]: r for r in json.loads(Path(b_path).read_text())}
    print(f"{'experiment':28s} {'wall A':>8s} {'wall B':>8s} {'max rel diff':>13s}  verdicts A -> B")
    for name in sorted(set(a) & set(b)):
        da, db = a[name].get("digest", {}), b[name].get("digest", {})
        keys = [k for k in set(da) & set(db) if math.isfinite(da[k]) and math.isfinite(db[k])]
        rel = max((abs(da[k] - db[k]) / max(abs(da[k]), abs(db[k]), 1e-6) for k in keys), default=float("nan"))
        va, vb = a[name].get("verdicts", {}), b[name].get("verdicts", {})

        def fmt(v):
            return f"{v.get('claims_held', '-')}h/{v.get('claims_failed', '-')}f/{v.get('claims_not_resolved', '-')}nr"

        print(f"{name:28s} {a[name]['wall_s']:8.1f} {b[name]['wall_s']:8.1f} {rel:13.2e}  {fmt(va)} -> {fmt(vb)}")
    return 0


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = p.add_subparsers(dest="cmd", required=True)
    r = sub.add_parser("run", help="run every experiment (or --only ...) on one device")
    r.add_argument("--device", default="cpu")
    r.add_argument("--out", default=None, help="runs folder (default: a new temporary folder)")
    r.add_argument("--json", required=True, help="where to write the records")
    r.add_argument("--scale", type=float, default=0.1, help="training length as a fraction of the quick profile's")
    r.add_argument("--jobs", type=int, default=2, help="experiments run at once, one process each")
    r.add_argument("--threads", type=int, default=1, help="CPU threads per process")
    r.add_argument("--only", nargs="*", default=None)
    r.add_argument("--cache", default=None, help="reference cache folder (TDLAB_CACHE) for every worker")
    c = sub.add_parser("compare", help="compare two records")
    c.add_argument("a")
    c.add_argument("b")
    args = p.parse_args()
    return run_all(args) if args.cmd == "run" else compare(args.a, args.b)


if __name__ == "__main__":
    sys.exit(main())

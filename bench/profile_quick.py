"""Where a quick run's time goes, per experiment family: data, forward, backward, optimiser, evaluation,
probes, logging, I/O, analysis, report and what no phase covers (Python between the marks, set-up).

Each family's representative experiment runs in this process under a :class:`tdlab.train.phases.PhaseClock`
(the trainers mark their phases; unmarked time is "other"), into a temporary folder. The whole quick profile
takes minutes per family on 2 cores; ``--set`` shortens it (the shares shift towards set-up and analysis, say
so when you quote them). Timings are printed, never asserted.

    python bench/profile_quick.py                          # every family, quick profile
    python bench/profile_quick.py markov anchors --threads 2
    python bench/profile_quick.py --experiment topics-wv --set train.steps=200
    python bench/profile_quick.py --markdown               # the README's table
    python bench/profile_quick.py markov-kth --lanes 1     # a grid's fits one after another
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

import torch

from tdlab import runner
from tdlab.experiments.base import get
from tdlab.train.lanes import limited_to
from tdlab.train.phases import PhaseClock

# One experiment per model family (the one whose quick run is most typical of the family's training).
FAMILIES: dict[str, str] = {
    "markov": "markov-init",  # seed 000: one-layer GPT on a Markov chain
    "markov-kth": "markov-icl-depth",  # seed 003: k-th order / in-context chains, depth
    "icl-regression": "icl-lsa-vs-lca",  # seed 002: LSA / LCA regression trainer
    "avdigits": "icl-avdigits",  # seed 002 Table 1: multimodal CA on digits
    "anchors": "anchors-bias",  # seed 001: post-LN transformer on anchor functions
    "topics": "topics-wv",  # seed 004: one-layer topic attention
    "topics-real": "topics-real",  # seed 004: BERT-shaped encoder on Wikipedia text
}
PHASES = (
    "data",
    "forward",
    "backward",
    "optimiser",
    "evaluation",
    "probes",
    "logging",
    "checkpoint",
    "io",
    "analysis",
    "report",
    "other",
)


def profile(name: str, overrides: list[str], out: Path) -> PhaseClock:
    """Run ``name``'s quick profile (with ``overrides``) under a phase clock; returns the clock."""
    exp = get(name)
    cfg = exp.make_config("quick", overrides)
    with PhaseClock() as clock:
        runner.execute(exp, cfg, "quick", out, progress=False)
    return clock


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("families", nargs="*", help=f"among {list(FAMILIES)} (default: all)")
    ap.add_argument("--experiment", help="profile this experiment instead of the families' representatives")
    ap.add_argument("--set", dest="overrides", action="append", default=[], help="config override, as tdlab run --set")
    ap.add_argument("--threads", type=int, default=torch.get_num_threads())
    ap.add_argument(
        "--lanes",
        type=int,
        default=None,
        help="cap the lanes (as tdlab run --lanes); phases on concurrent lanes add up over the lanes, "
        "so with more than one the shares of the wall time can sum past 100 %%",
    )
    ap.add_argument("--markdown", action="store_true", help="print one Markdown table (seconds and shares)")
    args = ap.parse_args()
    if args.lanes is not None and args.lanes < 1:
        ap.error(f"--lanes must be >= 1 (got {args.lanes})")
    unknown = [f for f in args.families if f not in FAMILIES]
    if unknown:
        ap.error(f"unknown families {unknown}; allowed: {list(FAMILIES)}")
    torch.set_num_threads(args.threads)
    names = [args.experiment] if args.experiment else [FAMILIES[f] for f in (args.families or FAMILIES)]
    rows = []
    with tempfile.TemporaryDirectory() as tmp, limited_to(args.lanes):
        for name in names:
            t0 = time.perf_counter()
            clock = profile(name, args.overrides, Path(tmp))
            secs = {p: clock.seconds.get(p, 0.0) for p in PHASES[:-1]} | {"other": clock.other}
            rows.append((name, time.perf_counter() - t0, secs))
            if not args.markdown:
                print(f"{name}: {clock.total:.1f} s ({args.threads} threads)")
                for p, s in sorted(secs.items(), key=lambda kv: -kv[1]):
                    if s >= 0.005 * clock.total:
                        print(f"  {p:11s} {s:8.2f} s  {100 * s / clock.total:5.1f} %")
    if args.markdown:
        shown = [p for p in PHASES if any(r[2][p] >= 0.01 * r[1] for r in rows)]
        print("| experiment | wall (s) | " + " | ".join(shown) + " |")
        print("|---|---|" + "---|" * len(shown))
        for name, wall, secs in rows:
            print(f"| {name} | {wall:.0f} | " + " | ".join(f"{100 * secs[p] / wall:.0f} %" for p in shown) + " |")


if __name__ == "__main__":
    main()

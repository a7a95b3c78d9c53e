"""Run a published record again and say, row by row, whether its numbers came back (``tdlab results reproduce``).

A record (:mod:`tdlab.records`) names the config, root seed, commit, thread count and machine that made
it. :func:`reproduce` trains that config again here, on the record's thread count, and compares every
claim row's per-member values: **identical** (bit for bit), **within float rounding** (no value further
from the record's than :data:`ROUNDING` of the row's scale — the larger of the two values, the expected
value and the tolerance, so a conservation error of 1e-12 that moves by 4e-15 is rounding: a float sum
taken in another order), or **differ**; and it
names which of the commit, platform, processor, Python, torch, BLAS and thread count differ from the
record's, the usual reasons for the last two.
"""

from __future__ import annotations

import math
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tdlab.config import ConfigError, validate_config

__all__ = ["ROUNDING", "Reproduction", "RowMatch", "compare_rows", "reproduce"]

# The relative difference a float32 computation's order can make in a trained value: a few ulps of float32
# (1.2e-7) through a short training; beyond it the numbers are different numbers.
ROUNDING = 1e-5


@dataclass
class RowMatch:
    """One claim row of the record against the same row of the re-run."""

    id: str
    status: str  # identical | within float rounding | differ | missing
    max_rel: float
    verdict: str | None = None  # the record's
    verdict_now: str | None = None


@dataclass
class Reproduction:
    """What :func:`reproduce` found: every row's match, and what differs from the record's making."""

    experiment: str
    profile: str
    rows: list[RowMatch] = field(default_factory=list)
    differs: dict[str, tuple[Any, Any]] = field(default_factory=dict)  # what -> (record's, now)
    run_dir: Path | None = None

    @property
    def counts(self) -> dict[str, int]:
        out: dict[str, int] = {}
        for r in self.rows:
            out[r.status] = out.get(r.status, 0) + 1
        return out

    @property
    def reproduced(self) -> bool:
        return all(r.status in ("identical", "within float rounding") for r in self.rows)


def _rel(a: float, b: float, scale: float = 0.0) -> float:
    """``|a − b|`` relative to the larger of ``|a|``, ``|b|`` and the row's ``scale``."""
    if a == b or (math.isnan(a) and math.isnan(b)):
        return 0.0
    if not (math.isfinite(a) and math.isfinite(b)):
        return math.inf
    return abs(a - b) / max(abs(a), abs(b), scale, 1e-300)


def compare_rows(before: list[dict[str, Any]], after: list[dict[str, Any]]) -> list[RowMatch]:
    """Every row of the groups ``before`` (the record's) against the same row in ``after``."""
    now = {r["id"]: r for g in after for r in g["rows"]}
    out = []
    for g in before:
        for r in g["rows"]:
            other = now.get(r["id"])
            if other is None or len(other["measured"]) != len(r["measured"]):
                out.append(RowMatch(r["id"], "missing", math.inf, r["verdict"], other["verdict"] if other else None))
                continue
            values = [(float(x), float(y)) for x, y in zip(r["measured"], other["measured"], strict=True)]
            ref_a, ref_b = r.get("reference") or [], other.get("reference") or []
            values += [(float(x), float(y)) for x, y in zip(ref_a, ref_b, strict=False)]
            same = all(x == y or (math.isnan(x) and math.isnan(y)) for x, y in values) and len(ref_a) == len(ref_b)
            scale = max(abs(float(r.get("expected") or 0.0)), abs(float(r.get("tolerance") or 0.0)))
            worst = max((_rel(x, y, scale) for x, y in values), default=0.0)
            status = "identical" if same else ("within float rounding" if worst <= ROUNDING else "differ")
            out.append(RowMatch(r["id"], status, worst, r["verdict"], other["verdict"]))
    return out


def reproduce(rec: Any, out: Path | None = None, progress: bool = False) -> Reproduction:
    """Train the record ``rec``'s config again (on its thread count, into ``out`` or a temporary folder) and
    compare every claim row. Raises :class:`ConfigError` for a record that cannot run here (a diverged one,
    one whose config this code no longer accepts)."""
    import torch

    from tdlab.experiments.base import get
    from tdlab.runner import execute
    from tdlab.runs import environment, source_commit

    if rec.measured is None:
        raise ConfigError(f"record: {rec.experiment}'s record is of a {rec.status} run: nothing to reproduce")
    exp = get(rec.experiment)
    cfg = validate_config(exp.Config, rec.config)
    before = torch.get_num_threads()
    if rec.threads:
        torch.set_num_threads(int(rec.threads))
    try:
        run = execute(
            exp, cfg, rec.profile, Path(out or tempfile.mkdtemp(prefix="tdlab-reproduce-")), progress=progress
        )
        env = environment(rec.device)
    finally:
        torch.set_num_threads(before)
    summary = run.summary
    result = Reproduction(rec.experiment, rec.profile, run_dir=run.path)
    result.rows = compare_rows(rec.claims + rec.sanity, summary.get("claims", []) + summary.get("sanity", []))
    machine = rec.machine or {}
    facts = {
        "commit": (
            (rec.commit or "not recorded").removesuffix("+dirty"),
            (source_commit() or "unknown").removesuffix("+dirty"),
        ),
        "threads": (rec.threads, env["torch_threads"]),
        **{
            k: (machine.get(k, "not recorded"), env.get(k))
            for k in ("platform", "processor", "cpu", "python", "torch", "blas")
        },
    }
    result.differs = {k: v for k, v in facts.items() if v[0] != v[1]}
    return result

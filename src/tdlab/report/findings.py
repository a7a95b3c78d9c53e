"""The README's findings table, generated from run directories (never typed by hand).

``tdlab findings RUN_DIR... --readme README.md`` renders one row per run (experiment, seed paper and
figure, paper-claim verdict counts, sanity counts, wall time) and, under it, one line per claim group
with its verdict and the numbers that decided it, and writes them between the markers
``<!-- findings:start -->`` and ``<!-- findings:end -->`` of the README.
"""

from __future__ import annotations

import math
import re
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from tdlab.runs import Run, RunDirError, atomic_write

__all__ = ["findings_markdown", "group_line", "row_summary", "replace_between_markers", "START", "END"]

START, END = "<!-- findings:start -->", "<!-- findings:end -->"
_ORDER = ("holds", "fails", "not resolved", "not evaluable")


def _fmt(x: Any) -> str:
    if isinstance(x, (int, float)) and math.isfinite(x):
        return f"{x:.4g}"
    return "—"


def row_summary(r: dict[str, Any]) -> str:
    """The numbers that decided one claim row (from ``summary.json``): ``mean [lo, hi] vs expected ±
    tol``, ``Δ lo…hi`` for a comparison, or the reason when the row is not evaluable."""
    if r["verdict"] == "not evaluable":
        return r.get("reason") or "no measurement"
    iv = r.get("interval") or [None, None]
    if r.get("test") == "compare":
        return f"Δ {_fmt(iv[0])}…{_fmt(iv[1])}"
    return f"{_fmt(r.get('mean'))} [{_fmt(iv[0])}, {_fmt(iv[1])}] vs {_fmt(r.get('expected'))} ± {_fmt(r.get('tolerance'))}"


def group_line(g: dict[str, Any]) -> str:
    """``**verdict** `id` — statement: the deciding numbers`` for one claim group (markdown)."""
    rows = g.get("rows", [])
    parts = []
    for r in rows[:8]:
        name = r["id"].split("/", 1)[1] if "/" in r["id"] else r["id"]
        parts.append(f"{name}: {row_summary(r)} → {r['verdict']}")
    more = f"; … {len(rows) - 8} more rows" if len(rows) > 8 else ""
    return f"**{g['verdict']}** `{g['id']}` — {g['statement']}. " + "; ".join(parts) + more


def _counts(groups: Sequence[dict[str, Any]]) -> str:
    c = {v: sum(g["verdict"] == v for g in groups) for v in _ORDER}
    return f"{c['holds']}/{len(groups)}" + "".join(f", {c[v]} {v}" for v in _ORDER[1:] if c[v])


def findings_markdown(run_dirs: Sequence[Path]) -> str:
    """The findings table and per-group lines of ``run_dirs``, in the order given."""
    runs = []
    for d in run_dirs:
        run = Run(Path(d))
        s = run.summary
        if not s or "claims" not in s:
            raise RunDirError(f"{d}: no summary.json with claims (rebuild it with `tdlab report {d}`)")
        runs.append((run, s))
    lines = ["| experiment | seed, figure | profile | paper claims held | sanity held | wall |",
             "|---|---|---|---|---|---|"]
    for run, s in runs:
        lines.append(f"| `{s['experiment']}` | {s['paper']}, {s['figure']} | {s.get('profile', '?')} | "
                     f"{_counts(s['claims'])} | {_counts(s.get('sanity', []))} | {s.get('wall_time_s', 0):.0f} s |")
    for run, s in runs:
        lines += ["", f"**`{s['experiment']}`** (run `{run.path.name}`, {s.get('members', '?')} members, "
                      f"seed {s.get('seed', '?')}, {s.get('env', {}).get('device', '?')}):", ""]
        for arm, h in (s.get("arms") or {}).items():
            if not h.get("trained", True):
                lines.append(f"- arm `{arm}` **{h['status']}**: {'; '.join(h.get('reasons', []))}")
        lines += [f"- {group_line(g)}" for g in s["claims"]]
        if s.get("sanity"):
            lines.append("- sanity: " + "; ".join(f"`{g['id']}` {g['verdict']}" for g in s["sanity"]))
    return "\n".join(lines) + "\n"


def replace_between_markers(path: Path, text: str) -> None:
    """Replace what lies between :data:`START` and :data:`END` in ``path`` with ``text``."""
    doc = Path(path).read_text()
    pattern = re.compile(re.escape(START) + r".*?" + re.escape(END), re.S)
    if not pattern.search(doc):
        raise RunDirError(f"{path}: no {START} … {END} markers to replace")
    atomic_write(Path(path), pattern.sub(lambda _: f"{START}\n{text}{END}", doc, count=1))

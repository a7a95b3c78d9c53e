"""The findings table of docs/findings.md, generated from run directories (never typed by hand).

``tdlab findings RUN_DIR... --into docs/findings.md`` renders one row per run (experiment, seed paper and
figure, paper-claim verdict counts, what left groups failing or undecided, sanity counts, wall time)
and, under it, one line per claim group with its verdict, the cause the claims layer recorded and the
numbers that decided it, and writes them between the markers ``<!-- findings:start -->`` and
``<!-- findings:end -->`` of that page. ``--before DIR`` adds, per experiment, the groups whose
verdict differs from the run of the same experiment under ``DIR`` (an earlier state of the code).
"""

from __future__ import annotations

import math
import re
import stat
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from tdlab.report.mdtext import md_cell, md_code, md_text
from tdlab.runs import Run, RunDirError, atomic_write
from tdlab.safeio import path_kind

__all__ = [
    "END",
    "START",
    "changes_markdown",
    "check_groups",
    "decided_by",
    "findings_markdown",
    "group_line",
    "read_summary",
    "replace_between_markers",
    "row_summary",
    "summaries_markdown",
]

START, END = "<!-- findings:start -->", "<!-- findings:end -->"
_ORDER = ("holds", "fails", "not resolved", "not evaluable")
# A failing group, as the layer decided it, is a finding about the paper's claim in a faithful run.
_CAUSE_WORDS = {"decided": "finding", "stage not reached": "stage not reached", "not trained": "arm not trained"}


def _fmt(x: Any) -> str:
    if isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(x):
        return f"{x:.4g}"
    return "—"


def _bound(x: Any, side: int) -> str:
    if x is None:
        return "−∞" if side < 0 else "+∞"
    return _fmt(x)


def row_summary(r: Mapping[str, Any]) -> str:
    """The numbers that decided one claim row (from ``summary.json``): ``mean [lo, hi] vs expected ±
    tol``, ``Δ lo…hi`` for a comparison, or the reason when the row is not evaluable (plain text: a
    markdown writer escapes it)."""
    if r.get("verdict") == "not evaluable":
        return str(r.get("reason") or "no measurement")
    iv = r.get("interval") or [None, None]
    if r.get("test") == "compare":
        return f"Δ {_bound(iv[0], -1)}…{_bound(iv[1], 1)}"
    return (
        f"{_fmt(r.get('mean'))} [{_bound(iv[0], -1)}, {_bound(iv[1], 1)}] vs {_fmt(r.get('expected'))} "
        f"± {_fmt(r.get('tolerance'))}"
    )


def cause_word(g: Mapping[str, Any]) -> str:
    """What left a group failing or undecided, in the findings' words (empty for a group that holds)."""
    if g.get("verdict") == "holds":
        return ""
    cause = str(g.get("cause") or "")
    return _CAUSE_WORDS.get(cause, cause)


def group_line(g: Mapping[str, Any]) -> str:
    """``**verdict** (cause) `id` — statement: the deciding numbers`` for one claim group (markdown; every
    text read from the run is escaped, :mod:`tdlab.report.mdtext`)."""
    rows = g.get("rows", [])
    parts = []
    for r in rows[:8]:
        rid = str(r["id"])
        name = rid.split("/", 1)[1] if "/" in rid else rid
        tag = " \\[ours\\]" if r.get("provenance") == "ours" else ""
        parts.append(f"{md_text(name)}{tag}: {md_text(row_summary(r))} → {md_text(r['verdict'])}")
    more = f"; … {len(rows) - 8} more rows" if len(rows) > 8 else ""
    cause = cause_word(g)
    why = f" ({md_text(cause)})" if cause else ""
    extra = f" {md_text(g['reason'])}." if g.get("reason") else ""
    return (
        f"**{md_text(g['verdict'])}**{why} `{md_code(g['id'])}` — {md_text(g.get('statement', ''))}.{extra} "
        + "; ".join(parts)
        + more
    )


def _counts(groups: Sequence[Mapping[str, Any]]) -> str:
    c = {v: sum(g["verdict"] == v for g in groups) for v in _ORDER}
    return f"{c['holds']}/{len(groups)}" + "".join(f", {c[v]} {v}" for v in _ORDER[1:] if c[v])


def _causes(groups: Sequence[Mapping[str, Any]]) -> str:
    tally: dict[str, int] = {}
    for g in groups:
        w = cause_word(g)
        if w:
            tally[w] = tally.get(w, 0) + 1
    return ", ".join(f"{n} {w}" for w, n in tally.items()) or "—"


def decided_by(s: Mapping[str, Any]) -> str:
    """What settled a run's paper groups: its profile's single pass, or the ``--decide`` rounds (members,
    the training length and a reference's draws when they grew, looks, and whether groups were left undecided when the rounds stopped)."""
    d = s.get("decide")
    if not isinstance(d, dict) or not isinstance(d.get("rounds"), list) or not d["rounds"]:
        return str(s.get("profile", "?"))
    last = d["rounds"][-1] if isinstance(d["rounds"][-1], dict) else {}
    left = sum(g.get("verdict") not in ("holds", "fails") for g in s.get("claims", []) if isinstance(g, dict))
    tail = f", {left} undecided ({d.get('stopped', '?')})" if left else ""
    first = d.get("first_length") if isinstance(d.get("first_length"), dict) else {}
    length = last.get("length")
    steps = (
        f", {next(iter(first))} {next(iter(first.values()))} → {length:g}"
        if first and isinstance(length, (int, float)) and length != next(iter(first.values()))
        else ""
    )
    first_draws = d["rounds"][0].get("draws") if isinstance(d["rounds"][0], dict) else None
    draws = (
        f", reference draws {first_draws} → {last['draws']}"
        if isinstance(first_draws, int) and isinstance(last.get("draws"), int) and last["draws"] != first_draws
        else ""
    )
    return (
        f"decide: {last.get('members', '?')} members{steps}{draws}, {len(d['rounds'])} looks at "
        f"{d.get('confidence', 0):.4g}{tail}"
    )


def _is_row(r: Any) -> bool:
    """A claim row as the findings read it: a text id, a known verdict, an interval of two bounds or none."""
    iv = r.get("interval") if isinstance(r, dict) else None
    return (
        isinstance(r, dict)
        and isinstance(r.get("id"), str)
        and r.get("verdict") in _ORDER
        and (iv is None or (isinstance(iv, list) and len(iv) == 2))
    )


def read_summary(run_dir: Path) -> tuple[Run, dict[str, Any]]:
    """A run and its ``summary.json``, checked for what the findings read: a claims list of groups,
    each with an id, a verdict and its rows. Anything else: :class:`RunDirError`, one line."""
    run = Run(Path(run_dir))
    s = run.summary
    where = run.path / "summary.json"
    if not s or "claims" not in s:
        raise RunDirError(f"{run_dir}: no summary.json with claims (rebuild it with `tdlab report {run_dir}`)")
    check_groups(s, str(where))
    for key in ("experiment", "paper", "figure"):
        if not isinstance(s.get(key), str):
            raise RunDirError(f"{where}: '{key}' is missing or not text")
    return run, s


def check_groups(s: Mapping[str, Any], where: str) -> None:
    """A summary's ``claims`` and ``sanity`` (when there) as the findings read them: lists of claim groups,
    each with a text id, a verdict and rows of :func:`_is_row`'s form. Anything else: :class:`RunDirError`
    naming ``where`` (the file, or the index row) and the field."""
    for key in ("claims", "sanity"):
        groups = s.get(key, [])
        if not isinstance(groups, list):
            raise RunDirError(f"{where}: '{key}' is not a list of claim groups")
        for g in groups:
            if (
                not isinstance(g, dict)
                or not isinstance(g.get("id"), str)
                or g.get("verdict") not in _ORDER
                or not isinstance(g.get("rows", []), list)
                or not all(_is_row(r) for r in g.get("rows", []))
            ):
                raise RunDirError(
                    f"{where}: a claim group of '{key}' lacks a text id, a verdict ({', '.join(_ORDER)}) "
                    f"or rows of that form (a text id, a verdict, an interval of two bounds or none)"
                )


def findings_markdown(run_dirs: Sequence[Path]) -> str:
    """The findings table and per-group lines of ``run_dirs``, in the order given."""
    return summaries_markdown([(f"run `{md_code(run.path.name)}`", s) for run, s in map(read_summary, run_dirs)])


def summaries_markdown(runs: Sequence[tuple[str, Mapping[str, Any]]]) -> str:
    """The findings table and per-group lines of ``(label, summary)`` pairs (a run's ``summary.json``, or a
    published record, which carries the same fields), in the order given; ``label`` says where each came from."""
    lines = [
        "| experiment | seed, figure | profile | paper claims held | not holding, by cause | decided by | sanity held | wall |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for _label, s in runs:
        wall = s.get("wall_time_s", 0)
        lines.append(
            f"| `{md_code(s['experiment'])}` | {md_cell(s['paper'])}, {md_cell(s['figure'])} | "
            f"{md_cell(s.get('profile', '?'))} | {_counts(s['claims'])} | {md_cell(_causes(s['claims']))} | "
            f"{md_cell(decided_by(s))} | {_counts(s.get('sanity', []))} | "
            f"{f'{wall:.0f}' if isinstance(wall, (int, float)) and math.isfinite(wall) else '—'} s |"
        )
    for label, s in runs:
        device = (s.get("env") or {}).get("device", s.get("device", "?"))
        lines += [
            "",
            f"**`{md_code(s['experiment'])}`** ({label}, {md_text(s.get('members', '?'))} "
            f"members, seed {md_text(s.get('seed', '?'))}, {md_text(device)}):",
            "",
        ]
        for arm, h in (s.get("arms") or {}).items():
            if isinstance(h, dict) and not h.get("trained", True):
                lines.append(
                    f"- arm `{md_code(arm)}` **{md_text(h.get('status', 'not trained'))}**: "
                    f"{md_text('; '.join(map(str, h.get('reasons', []))))}"
                )
        lines += [f"- {group_line(g)}" for g in s["claims"]]
        if s.get("sanity"):
            lines.append("- sanity: " + "; ".join(f"`{md_code(g['id'])}` {md_text(g['verdict'])}" for g in s["sanity"]))
    return "\n".join(lines) + "\n"


def changes_markdown(run_dirs: Sequence[Path], before: Path) -> str:
    """Per experiment, the paper groups whose verdict differs from the run of the same experiment
    found under ``before`` (one run directory per experiment, matched by name): ``id: before → after
    (cause)``, and groups that appeared or went."""
    old: dict[str, dict[str, Any]] = {}
    for d in sorted(Path(before).iterdir()) if Path(before).is_dir() else []:
        if d.is_dir() and (d / "summary.json").is_file():
            _, s = read_summary(d)
            old[s["experiment"]] = s
    if not old:
        raise RunDirError(f"--before {before}: no run directories with a summary.json there")
    lines = [
        "| experiment | paper groups before → after | groups that changed verdict (before → after, cause) |",
        "|---|---|---|",
    ]
    for d in run_dirs:
        _, s = read_summary(d)
        prev = old.get(s["experiment"])
        if prev is None:
            lines.append(f"| `{md_code(s['experiment'])}` | — → {_counts(s['claims'])} | new experiment |")
            continue
        was = {g["id"]: g["verdict"] for g in prev["claims"]}
        now = {g["id"]: g for g in s["claims"]}
        moved = []
        for gid, g in now.items():
            if gid not in was:
                moved.append(f"`{md_code(gid)}` new: {md_cell(g['verdict'])}")
            elif was[gid] != g["verdict"]:
                cause = cause_word(g)
                moved.append(
                    f"`{md_code(gid)}` {md_cell(was[gid])} → {md_cell(g['verdict'])}"
                    f"{f' ({md_cell(cause)})' if cause else ''}"
                )
        sanity = {g["id"] for g in s.get("sanity", [])}
        moved += [
            f"`{md_code(gid)}` was {md_cell(v)}, {'now a sanity check' if gid in sanity else 'restated or dropped'}"
            for gid, v in was.items()
            if gid not in now
        ]
        lines.append(
            f"| `{md_code(s['experiment'])}` | {_counts(prev['claims'])} → {_counts(s['claims'])} | "
            f"{'; '.join(moved) or 'no change'} |"
        )
    return "\n".join(lines) + "\n"


def replace_between_markers(path: Path, text: str, section: str = "findings") -> None:
    """Replace what lies between the markers ``<!-- SECTION:start -->`` and ``<!-- SECTION:end -->``
    (:data:`START` and :data:`END` for the default section) in ``path`` with ``text``.

    A missing file, a directory, a file that is not UTF-8 text, or one without both markers is
    refused with one line (:class:`RunDirError`) and left as it was."""
    start, end = f"<!-- {section}:start -->", f"<!-- {section}:end -->"
    path = Path(path)
    if path.is_symlink() or not path.is_file():
        raise RunDirError(f"--readme {path}: {path_kind(path) if not path.is_symlink() else 'a symlink'}; give the "
                          "markdown file to write into (a regular file)")  # fmt: skip
    try:
        doc = path.read_text(encoding="utf-8")
    except UnicodeDecodeError:
        raise RunDirError(f"--readme {path}: not UTF-8 text") from None
    except OSError as exc:
        raise RunDirError(f"--readme {path}: cannot read it ({exc.strerror or type(exc).__name__})") from None
    pattern = re.compile(re.escape(start) + r".*?" + re.escape(end), re.S)
    if not pattern.search(doc):
        raise RunDirError(f"{path}: no {start} … {end} markers to replace")
    # text from records (a claim's id, a note) never carries a comment that could pass for a marker: every later
    # rewrite would stop at it
    text = text.replace("<!--", "&lt;!--")
    atomic_write(path, pattern.sub(lambda _: f"{start}\n{text}{end}", doc, count=1), stat.S_IMODE(path.stat().st_mode))

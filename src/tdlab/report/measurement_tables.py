"""The measurements of a run as tables: every entry that maps names to numbers (an arm's per-member values,
say) joins the table of the entries with the same names, one row each; what is left stays a tree.

``measure()`` writes ``values[arm] = {"z": [per member], "final_test_loss": [...], ...}`` for each arm; the
report shows those as one table (arms × quantities), members separated by ``/``, instead of a dump per arm.
One level deeper, ``values["cells"] = {cell: {"loss": ..., "gap": ...}, ...}`` is a table titled ``cells``, one
row per cell.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

MAX_MEMBERS = 8  # cells list at most this many member values, then say how many there are


@dataclass
class Table:
    """Rows ``(name, cells)`` over ``columns``; each cell is already formatted. ``title`` names the entry whose
    rows these are, where they were nested one level down (``""`` for the top level's rows)."""

    columns: tuple[str, ...]
    rows: list[tuple[str, list[str]]] = field(default_factory=list)
    title: str = ""


def _number(x: Any) -> bool:
    return isinstance(x, (int, float)) and not isinstance(x, bool)


def _cell_value(x: Any) -> bool:
    """A number, or a flat list of numbers (one per member); ``None`` stands for a value not measured."""
    if x is None or _number(x):
        return True
    return isinstance(x, list) and bool(x) and all(v is None or _number(v) for v in x)


def format_cell(x: Any) -> str:
    """``1.23`` for a number, ``1.23/1.31`` for per-member values (the first :data:`MAX_MEMBERS`, then the count),
    ``—`` where nothing was measured."""
    if x is None:
        return "—"
    if _number(x):
        return f"{x:.4g}"
    shown = "/".join("—" if v is None else f"{v:.3g}" for v in x[:MAX_MEMBERS])
    return shown if len(x) <= MAX_MEMBERS else f"{shown}/… ({len(x)} in all)"


def _row(v: Any) -> bool:
    """A mapping of at least two names to numbers or per-member lists."""
    return isinstance(v, Mapping) and len(v) >= 2 and all(_cell_value(x) for x in v.values())


def _rows(v: Any) -> bool:
    """A non-empty mapping of names to rows (:func:`_row`)."""
    return isinstance(v, Mapping) and bool(v) and all(_row(r) for r in v.values())


def measurement_tables(values: Mapping[str, Any]) -> tuple[list[Table], dict[str, Any]]:
    """Split ``values`` (a run's measurements) into tables and the rest.

    An entry is a row when its value is a mapping of at least two names to numbers or per-member lists; entries
    with the same names (in the same order) share a table, in the order they first appear. An entry whose value
    maps names to such rows (every one of them a row) gives tables titled by the entry's name, one row per inner
    name (rows with other names: another table of that title). Returns ``(tables, rest)``: ``rest`` holds every
    other entry, unchanged and in order."""
    tables: dict[tuple[str, tuple[str, ...]], Table] = {}
    rest: dict[str, Any] = {}

    def add(title: str, name: Any, row: Mapping[str, Any]) -> None:
        cols = tuple(str(k) for k in row)
        table = tables.setdefault((title, cols), Table(cols, title=title))
        table.rows.append((str(name), [format_cell(x) for x in row.values()]))

    for name, v in values.items():
        if _row(v):
            add("", name, v)
        elif _rows(v):
            for inner, row in v.items():
                add(str(name), inner, row)
        else:
            rest[str(name)] = v
    return list(tables.values()), rest

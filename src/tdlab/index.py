"""The run index: one SQLite database (WAL mode) per runs folder (the store of :mod:`tdlab.runs`), safe under
concurrent writers.

Several sweeps with several workers each write to it at once; SQLite's write-ahead log and busy
timeout serialise the writes, and ``run_id`` is the primary key, so a run is never listed twice.
``tdlab runs --where 'claims.failed > 0'`` filters it; dotted names map to columns or to JSON paths
into the stored config and summary (``config.task.p``, ``summary.status``).

A ``--where`` condition is SQL, so it is run with no power beyond reading: on a read-only
connection, under an SQLite authorizer that allows only ``SELECT``, reading the ``runs`` table's
columns and the functions of :data:`ALLOWED_FUNCTIONS` (no other table, ``sqlite_master`` included;
no ``PRAGMA``, ``ATTACH``, recursive CTE or write), and under a progress handler that stops it after
:data:`QUERY_TIME_LIMIT_S` seconds. A refused or stopped condition is a one-line :class:`ConfigError`.

Rows are checked as they are read, as every file tdlab reads is: a run id that ``--run-id`` would
refuse (``../x``: it names folders) or a config/summary that is not a JSON object is a
:class:`CorruptIndexError`, as is an index file that is not an SQLite database or fails its
integrity check. ``tdlab runs --reindex`` moves such an index aside (:func:`set_aside_if_corrupt`)
and rebuilds it from the run directories.
"""

from __future__ import annotations

import json
import re
import sqlite3
import time
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from tdlab.config import ConfigError, echo
from tdlab.runs import RUN_ID_PATTERN, RunDirError, check_run_id

__all__ = [
    "ALLOWED_FUNCTIONS",
    "INDEX_NAME",
    "QUERY_TIME_LIMIT_S",
    "CorruptIndexError",
    "RunIndex",
    "set_aside_if_corrupt",
]

INDEX_NAME = "index.sqlite"
QUERY_TIME_LIMIT_S = 5.0  # a --where query running longer than this is stopped
ALLOWED_FUNCTIONS = frozenset(
    {
        "json_extract",
        "abs",
        "lower",
        "upper",
        "length",
        "coalesce",
        "ifnull",
        "min",
        "max",
        "round",
        "like",
        "glob",
        "instr",
        "substr",
    }
)
_CORRUPT = {"SQLITE_NOTADB", "SQLITE_CORRUPT"}


class CorruptIndexError(RunDirError):
    """The index file is not a readable SQLite database (CLI: one line, exit code 2)."""


_COLUMNS = [
    "run_id",
    "path",
    "experiment",
    "profile",
    "status",
    "created",
    "wall_time_s",
    "seed",
    "members",
    "claims_total",
    "claims_failed",
    "sweep",
    "config",
    "summary",
]
# Claim counts are over paper claim groups; a group holds, fails, is not resolved or is not evaluable,
# so "held" is its own count, not total − failed.
_ALIASES = {
    "claims.failed": "claims_failed",
    "claims.total": "claims_total",
    "claims.held": "json_extract(summary, '$.claims_held')",
    "claims.not_resolved": "json_extract(summary, '$.claims_not_resolved')",
    "claims.not_evaluable": "json_extract(summary, '$.claims_not_evaluable')",
    "wall_time": "wall_time_s",
    "id": "run_id",
}
_DOTTED = re.compile(
    r"\b(config|summary)((?:\.[A-Za-z_][A-Za-z0-9_\-]*)+)\b"
    r"|\b(claims\.(?:failed|total|held|not_resolved|not_evaluable))\b"
)


class RunIndex:
    """``RunIndex(OUT)`` opens (or creates) ``OUT/index.sqlite``."""

    def __init__(self, out: Path, timeout: float = 60.0) -> None:
        self.path = Path(out) / INDEX_NAME
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self.timeout = timeout
        try:
            con = self._connect()
        except sqlite3.DatabaseError as exc:
            if _is_corrupt(exc):
                raise self._corrupt(exc) from exc
            raise
        try:  # closed here, not when collected: a connection kept alive by a traceback keeps the WAL unmerged
            con.execute(
                "CREATE TABLE IF NOT EXISTS runs (run_id TEXT PRIMARY KEY, path TEXT, experiment TEXT, profile TEXT, "
                "status TEXT, created REAL, wall_time_s REAL, seed INTEGER, members INTEGER, claims_total INTEGER, "
                "claims_failed INTEGER, sweep TEXT, config TEXT, summary TEXT)"
            )
        except sqlite3.DatabaseError as exc:
            if _is_corrupt(exc):
                raise self._corrupt(exc) from exc
            raise
        finally:
            con.close()

    def _corrupt(self, exc: BaseException) -> CorruptIndexError:
        return CorruptIndexError(
            f"{self.path} is corrupt ({exc}); `tdlab runs --reindex --out {self.path.parent}` "
            f"moves it aside and rebuilds it from the run directories"
        )

    def _connect(self) -> sqlite3.Connection:
        con = sqlite3.connect(self.path, timeout=self.timeout, isolation_level=None)
        con.execute(f"PRAGMA busy_timeout={int(self.timeout * 1000)}")
        # Switching a new database to WAL takes an exclusive lock, and SQLite answers SQLITE_BUSY at once
        # there instead of calling the busy handler: when several processes open a fresh index together
        # (a sweep's first points), all but one see "database is locked". Retry until the timeout; once
        # the file is in WAL mode (persistent) the pragma is a no-op.
        deadline = time.monotonic() + self.timeout
        while True:
            try:
                con.execute("PRAGMA journal_mode=WAL")
                return con
            except sqlite3.Error as err:  # closed before raising: a corrupt file's error must not keep it open
                if (
                    not isinstance(err, sqlite3.OperationalError)
                    or "locked" not in str(err)
                    or time.monotonic() > deadline
                ):
                    con.close()
                    raise
                time.sleep(0.01)

    def add(self, record: dict[str, Any]) -> None:
        """Insert or replace one run (keyed by ``run_id``)."""
        self.add_many([record])

    def add_many(self, records: Iterable[dict[str, Any]]) -> None:
        rows = []
        for r in records:
            row = {c: r.get(c) for c in _COLUMNS}
            for c in ("config", "summary"):
                if not isinstance(row[c], str) and row[c] is not None:
                    row[c] = json.dumps(row[c], default=float)
            row["created"] = row["created"] if row["created"] is not None else time.time()
            rows.append(tuple(row[c] for c in _COLUMNS))
        con = self._connect()
        try:
            con.execute("BEGIN IMMEDIATE")
            con.executemany(
                f"INSERT OR REPLACE INTO runs ({', '.join(_COLUMNS)}) VALUES ({', '.join('?' * len(_COLUMNS))})", rows
            )
            con.execute("COMMIT")
        finally:
            con.close()

    def add_run(self, run: Any, sweep: str | None = None) -> None:
        """Index a finished :class:`tdlab.runs.Run` from its summary and config."""
        s, conf = run.summary, run.config
        self.add(
            {
                "run_id": run.path.name,
                "path": str(run.path.resolve()),
                "experiment": conf.get("experiment"),
                "profile": conf.get("profile"),
                "status": s.get("status"),
                "wall_time_s": s.get("wall_time_s"),
                "seed": s.get("seed"),
                "members": s.get("members"),
                "claims_total": s.get("claims_total", 0),
                "claims_failed": s.get("claims_failed", 0),
                "sweep": sweep,
                "config": conf.get("config", {}),
                "summary": s,
            }
        )

    @staticmethod
    def _translate(where: str) -> str:
        """``where`` with dotted names (``config.task.p``, ``claims.held``) replaced by SQL."""

        def repl(m: re.Match) -> str:
            if m.group(3):
                return _ALIASES[m.group(3)]
            return f"json_extract({m.group(1)}, '${m.group(2)}')"

        return _DOTTED.sub(repl, where)

    def query(
        self, where: str | None = None, order: str = "created", time_limit: float = QUERY_TIME_LIMIT_S
    ) -> list[dict[str, Any]]:
        """Runs matching the SQL condition ``where`` (dotted names allowed), ordered by the column
        ``order`` (oldest first by default).

        Raises:
            ConfigError: ``where`` is not one valid condition, does more than read the runs table
                (see the module), or ran longer than ``time_limit`` seconds.
            CorruptIndexError: the index file is damaged.
        """
        if order not in _COLUMNS:
            raise ValueError(f"order: unknown column {order!r}")
        sql = f"SELECT {', '.join(_COLUMNS)} FROM runs"
        if where:
            sql += f" WHERE {self._translate(where)}"
        sql += f" ORDER BY {order}"
        con = self._connect_readonly()
        deadline = time.monotonic() + time_limit
        con.set_authorizer(_authorize)
        con.set_progress_handler(lambda: time.monotonic() > deadline, 1000)  # nonzero return aborts the query
        try:
            rows = con.execute(sql).fetchall()
        except sqlite3.Error as exc:
            raise self._query_error(exc, where, time_limit) from None
        finally:
            con.close()
        return [self._row(row) for row in rows]

    def _row(self, row: tuple[Any, ...]) -> dict[str, Any]:
        """One stored row as a dict, checked as every file tdlab reads is: the run id is one that
        ``--run-id`` would accept (it names a folder), config and summary are JSON objects.

        Raises:
            CorruptIndexError: naming the index and the bad value (a row tdlab never writes).
        """
        d = dict(zip(_COLUMNS, row, strict=True))
        try:
            check_run_id(d["run_id"])
        except ConfigError:
            raise CorruptIndexError(
                f"{self.path} is corrupt: run id {echo(d['run_id'])} is not a run id (1-200 letters, "
                f"digits, '_', '.', '-', no '/', no leading '.'); `tdlab runs --reindex --out "
                f"{self.path.parent}` moves it aside and rebuilds it from the run directories"
            ) from None
        for c in ("config", "summary"):
            try:
                d[c] = json.loads(d[c]) if d[c] else {}
            except (TypeError, ValueError, RecursionError):
                d[c] = None
            if not isinstance(d[c], dict):
                raise CorruptIndexError(
                    f"{self.path} is corrupt: the {c} of run {d['run_id']} is not a JSON object; "
                    f"`tdlab runs --reindex --out {self.path.parent}` rebuilds it"
                )
        return d

    def _connect_readonly(self) -> sqlite3.Connection:
        """A connection that cannot write, whatever it executes (SQLite's ``mode=ro``)."""
        try:
            return sqlite3.connect(
                f"{self.path.resolve().as_uri()}?mode=ro", uri=True, timeout=self.timeout, isolation_level=None
            )
        except sqlite3.DatabaseError as exc:
            if _is_corrupt(exc):
                raise self._corrupt(exc) from exc
            raise

    def _query_error(self, exc: sqlite3.Error, where: str | None, time_limit: float) -> Exception:
        """The one-line error for a failed query: corrupt index, stopped, refused, or invalid SQL."""
        if _is_corrupt(exc):
            return self._corrupt(exc)
        if getattr(exc, "sqlite_errorname", "") == "SQLITE_INTERRUPT":
            return ConfigError(f"--where: the query ran longer than {time_limit:g} s and was stopped: {where!r}")
        if getattr(exc, "sqlite_errorname", "") == "SQLITE_AUTH" or "not authorized" in str(exc):
            return ConfigError(
                f"--where: {where!r} is refused ({exc}): a condition may only read the runs table's "
                f"columns, with the functions {', '.join(sorted(ALLOWED_FUNCTIONS))}"
            )
        if isinstance(exc, sqlite3.ProgrammingError) and "one statement" in str(exc):
            return ConfigError(f"--where: one condition expected, not several SQL statements: {where!r}")
        return ConfigError(f"--where: invalid condition {where!r}: {exc}")

    def count(self) -> int:
        con = self._connect()
        try:
            return con.execute("SELECT COUNT(*) FROM runs").fetchone()[0]
        finally:
            con.close()


def _authorize(action: int, arg1: str | None, arg2: str | None, db: str | None, trigger: str | None) -> int:
    """SQLite authorizer of ``--where`` queries: a SELECT, reading the runs table's columns, calling
    an allowed function; everything else (other tables, PRAGMA, ATTACH, recursive CTEs, writes) denied."""
    if action == sqlite3.SQLITE_SELECT:
        return sqlite3.SQLITE_OK
    if (
        action == sqlite3.SQLITE_READ and arg1 == "runs" and (arg2 in _COLUMNS or arg2 == "")
    ):  # "": a join reading no column
        return sqlite3.SQLITE_OK
    if action == sqlite3.SQLITE_FUNCTION and (arg2 or "").lower() in ALLOWED_FUNCTIONS:
        return sqlite3.SQLITE_OK
    return sqlite3.SQLITE_DENY


def _is_corrupt(exc: BaseException) -> bool:
    """True for SQLite's "not a database" and "disk image is malformed" errors."""
    return getattr(exc, "sqlite_errorname", "") in _CORRUPT


def _rows_ok(con: sqlite3.Connection) -> bool:
    """Every stored run id is one tdlab could have written (see :meth:`RunIndex._row`)."""
    try:
        ids = con.execute("SELECT run_id FROM runs").fetchall()
    except sqlite3.OperationalError:  # no runs table yet: nothing wrong in it
        return True
    return all(isinstance(i, str) and RUN_ID_PATTERN.fullmatch(i) for (i,) in ids)


def set_aside_if_corrupt(out: Path) -> Path | None:
    """Move ``OUT/index.sqlite`` (and its WAL files) aside when it is not a sound SQLite database, so
    that a fresh index can be built; returns where it went (``None`` when the index is fine or absent)."""
    path = Path(out) / INDEX_NAME
    if not path.is_file():
        return None
    try:
        con = sqlite3.connect(f"{path.resolve().as_uri()}?mode=ro", uri=True)
        try:
            ok = con.execute("PRAGMA quick_check").fetchone()[0] == "ok" and _rows_ok(con)
        finally:
            con.close()
    except sqlite3.DatabaseError as exc:
        if not _is_corrupt(exc):
            raise
        ok = False
    if ok:
        return None
    aside = path.with_name(f"{INDEX_NAME}.corrupt-{time.strftime('%Y%m%dT%H%M%S')}")
    for suffix in ("", "-wal", "-shm"):  # a stale WAL must not be replayed into the new database
        if Path(f"{path}{suffix}").exists():
            Path(f"{path}{suffix}").rename(f"{aside}{suffix}")
    return aside

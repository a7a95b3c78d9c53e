"""The run index: one SQLite database (WAL mode) per runs folder, safe under concurrent writers.

Several sweeps with several workers each write to it at once; SQLite's write-ahead log and busy
timeout serialise the writes, and ``run_id`` is the primary key, so a run is never listed twice.
``tdlab runs --where 'claims.failed > 0'`` filters it; dotted names map to columns or to JSON paths
into the stored config and summary (``config.task.p``, ``summary.status``).
"""

from __future__ import annotations

import json
import re
import sqlite3
import time
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from tdlab.config import ConfigError

__all__ = ["RunIndex", "INDEX_NAME"]

INDEX_NAME = "index.sqlite"

_COLUMNS = ["run_id", "path", "experiment", "profile", "status", "created", "wall_time_s", "seed", "members",
            "claims_total", "claims_failed", "sweep", "config", "summary"]
# Claim counts are over paper claim groups; a group holds, fails, is not resolved or is not evaluable,
# so "held" is its own count, not total − failed.
_ALIASES = {"claims.failed": "claims_failed", "claims.total": "claims_total",
            "claims.held": "json_extract(summary, '$.claims_held')",
            "claims.not_resolved": "json_extract(summary, '$.claims_not_resolved')",
            "claims.not_evaluable": "json_extract(summary, '$.claims_not_evaluable')",
            "wall_time": "wall_time_s", "id": "run_id"}
_DOTTED = re.compile(r"\b(config|summary)((?:\.[A-Za-z_][A-Za-z0-9_\-]*)+)\b"
                     r"|\b(claims\.(?:failed|total|held|not_resolved|not_evaluable))\b")


class RunIndex:
    """``RunIndex(OUT)`` opens (or creates) ``OUT/index.sqlite``."""

    def __init__(self, out: Path, timeout: float = 60.0) -> None:
        self.path = Path(out) / INDEX_NAME
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self.timeout = timeout
        with self._connect() as con:
            con.execute(
                "CREATE TABLE IF NOT EXISTS runs (run_id TEXT PRIMARY KEY, path TEXT, experiment TEXT, profile TEXT, "
                "status TEXT, created REAL, wall_time_s REAL, seed INTEGER, members INTEGER, claims_total INTEGER, "
                "claims_failed INTEGER, sweep TEXT, config TEXT, summary TEXT)"
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
            except sqlite3.OperationalError as err:
                if "locked" not in str(err) or time.monotonic() > deadline:
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
            con.executemany(f"INSERT OR REPLACE INTO runs ({', '.join(_COLUMNS)}) VALUES ({', '.join('?' * len(_COLUMNS))})", rows)
            con.execute("COMMIT")
        finally:
            con.close()

    def add_run(self, run: Any, sweep: str | None = None) -> None:
        """Index a finished :class:`tdlab.runs.Run` from its summary and config."""
        s, conf = run.summary, run.config
        self.add({"run_id": run.path.name, "path": str(run.path.resolve()), "experiment": conf.get("experiment"),
                  "profile": conf.get("profile"), "status": s.get("status"), "wall_time_s": s.get("wall_time_s"),
                  "seed": s.get("seed"), "members": s.get("members"), "claims_total": s.get("claims_total", 0),
                  "claims_failed": s.get("claims_failed", 0), "sweep": sweep, "config": conf.get("config", {}),
                  "summary": s})

    @staticmethod
    def _translate(where: str) -> str:
        if ";" in where:
            raise ConfigError("--where: a single condition expected (no ';')")

        def repl(m: re.Match) -> str:
            if m.group(3):
                return _ALIASES[m.group(3)]
            return f"json_extract({m.group(1)}, '${m.group(2)}')"

        return _DOTTED.sub(repl, where)

    def query(self, where: str | None = None, order: str = "created") -> list[dict[str, Any]]:
        """Runs matching the SQL condition ``where`` (dotted names allowed), oldest first."""
        sql = f"SELECT {', '.join(_COLUMNS)} FROM runs"
        if where:
            sql += f" WHERE {self._translate(where)}"
        sql += f" ORDER BY {order}"
        con = self._connect()
        try:
            rows = con.execute(sql).fetchall()
        except sqlite3.Error as exc:
            raise ConfigError(f"--where: invalid condition {where!r}: {exc}") from None
        finally:
            con.close()
        out = []
        for row in rows:
            d = dict(zip(_COLUMNS, row))
            for c in ("config", "summary"):
                d[c] = json.loads(d[c]) if d[c] else {}
            out.append(d)
        return out

    def count(self) -> int:
        con = self._connect()
        try:
            return con.execute("SELECT COUNT(*) FROM runs").fetchone()[0]
        finally:
            con.close()

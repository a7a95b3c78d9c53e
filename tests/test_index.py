"""The run index: concurrent writers, no duplicates, ``--where`` filtering (columns, aliases, JSON paths)."""

from __future__ import annotations

import multiprocessing as mp
import re
import sqlite3
import time
from pathlib import Path

import pytest
from typer.testing import CliRunner

from tdlab.cli import app
from tdlab.config import ConfigError
from tdlab.index import INDEX_NAME, QUERY_TIME_LIMIT_S, RunIndex

WRITERS, PER_WRITER = 8, 200
P_VALUES = [0.1, 0.3, 0.5, 0.7, 0.9]


def _record(writer: int, i: int) -> dict:
    """A deterministic synthetic run record; the test recomputes the same records to check queries."""
    k = writer * PER_WRITER + i
    total = 2 + k % 3
    return {
        "run_id": f"w{writer}-r{i:03d}",
        "path": f"/nowhere/w{writer}-r{i:03d}",
        "experiment": "markov-init" if k % 2 else "markov-icl",
        "profile": "quick",
        "status": "done" if k % 10 else "diverged",
        "wall_time_s": float(k),
        "seed": k,
        "members": 2,
        "claims_total": total,
        "claims_failed": (k % 7 == 0) + (k % 11 == 0),
        "sweep": f"s{writer}" if i % 4 == 0 else None,
        "config": {"task": {"p": P_VALUES[k % 5], "q": 0.8}, "train": {"steps": 10 + k % 4}},
        "summary": {
            "status": "done" if k % 10 else "diverged",
            "k": k,
            # groups neither held nor failed are not resolved (k % 3 == 1: one of them)
            "claims_held": total - ((k % 7 == 0) + (k % 11 == 0)) - (k % 3 == 1),
        },
    }


def _all_records() -> list[dict]:
    return [_record(w, i) for w in range(WRITERS) for i in range(PER_WRITER)]


def _writer(out: str, writer: int, barrier) -> None:
    barrier.wait()  # every writer opens a fresh index at the same moment (table creation, WAL switch)
    index = RunIndex(Path(out))
    for i in range(PER_WRITER):  # one transaction per run, as concurrent `tdlab run`s do
        index.add(_record(writer, i))


@pytest.fixture(scope="module")
def filled(tmp_path_factory) -> Path:
    """An index written by 8 processes at once, 200 runs each."""
    out = tmp_path_factory.mktemp("index") / "runs"
    ctx = mp.get_context("fork" if "fork" in mp.get_all_start_methods() else "spawn")
    barrier = ctx.Barrier(WRITERS)
    procs = [ctx.Process(target=_writer, args=(str(out), w, barrier)) for w in range(WRITERS)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(timeout=120)
    assert [p.exitcode for p in procs] == [0] * WRITERS, "a writer crashed (database locked?)"
    return out


def _ids(rows: list[dict]) -> set[str]:
    return {r["run_id"] for r in rows}


def test_concurrent_writers_lose_nothing_and_duplicate_nothing(filled):
    index = RunIndex(filled)
    assert index.count() == WRITERS * PER_WRITER
    rows = index.query()
    assert len(rows) == WRITERS * PER_WRITER
    assert _ids(rows) == {r["run_id"] for r in _all_records()}
    con = sqlite3.connect(filled / INDEX_NAME)
    try:
        assert con.execute("SELECT COUNT(DISTINCT run_id), COUNT(*) FROM runs").fetchone() == (1600, 1600)
        assert con.execute("PRAGMA journal_mode").fetchone()[0].lower() == "wal"
    finally:
        con.close()


def test_stored_fields_round_trip(filled):
    want = _record(3, 17)
    (got,) = RunIndex(filled).query("run_id = 'w3-r017'")
    for key in (
        "path",
        "experiment",
        "profile",
        "status",
        "wall_time_s",
        "seed",
        "members",
        "claims_total",
        "claims_failed",
        "sweep",
        "config",
        "summary",
    ):
        assert got[key] == want[key], key
    assert isinstance(got["created"], float)


def test_where_claims_failed_returns_exactly_the_failing_runs(filled):
    index = RunIndex(filled)
    want = {r["run_id"] for r in _all_records() if r["claims_failed"] > 0}
    assert 0 < len(want) < WRITERS * PER_WRITER
    assert _ids(index.query("claims.failed > 0")) == want
    assert _ids(index.query("claims_failed > 0")) == want  # the column name works too
    assert _ids(index.query("claims.failed = 2")) == {r["run_id"] for r in _all_records() if r["claims_failed"] == 2}
    held = {r["run_id"] for r in _all_records() if r["summary"]["claims_held"] >= 3}
    assert held != {r["run_id"] for r in _all_records() if r["claims_total"] - r["claims_failed"] >= 3}
    assert _ids(index.query("claims.held >= 3")) == held


def test_where_json_paths_into_config_and_summary(filled):
    index = RunIndex(filled)
    recs = _all_records()
    assert _ids(index.query("config.task.p >= 0.5")) == {r["run_id"] for r in recs if r["config"]["task"]["p"] >= 0.5}
    assert _ids(index.query("config.task.p = 0.3")) == {r["run_id"] for r in recs if r["config"]["task"]["p"] == 0.3}
    both = index.query("config.task.p > 0.6 AND config.train.steps = 11 AND experiment = 'markov-init'")
    assert _ids(both) == {
        r["run_id"]
        for r in recs
        if r["config"]["task"]["p"] > 0.6 and r["config"]["train"]["steps"] == 11 and r["experiment"] == "markov-init"
    }
    assert both and all(r["config"]["task"]["p"] > 0.6 for r in both)
    assert _ids(index.query("summary.status = 'diverged'")) == {r["run_id"] for r in recs if r["status"] == "diverged"}
    assert _ids(index.query("sweep = 's5'")) == {r["run_id"] for r in recs if r["sweep"] == "s5"}
    assert index.query("config.task.nothing_here = 1") == []


@pytest.mark.parametrize(
    "where", ["claims.failed >", "no_such_column > 1", "1; DROP TABLE runs", "config.task.p >>> 2", "status = 'done"]
)
def test_bad_where_is_a_config_error_and_harms_nothing(filled, where):
    index = RunIndex(filled)
    with pytest.raises(ConfigError, match="--where"):
        index.query(where)
    assert index.count() == WRITERS * PER_WRITER


def test_readding_a_run_id_replaces_it(tmp_path):
    index = RunIndex(tmp_path)
    index.add(_record(0, 1))
    first = index.query()[0]["created"]
    changed = {**_record(0, 1), "claims_failed": 5, "status": "done", "config": {"task": {"p": 0.99}}}
    index.add(changed)
    index.add_many([changed, _record(0, 2)])
    rows = index.query()
    assert [r["run_id"] for r in rows] == ["w0-r001", "w0-r002"]
    assert rows[0]["claims_failed"] == 5 and rows[0]["config"] == {"task": {"p": 0.99}}
    assert rows[0]["created"] >= first
    assert index.count() == 2
    assert _ids(index.query("config.task.p > 0.9")) == {"w0-r001"}


def test_reopening_an_index_keeps_its_runs(tmp_path):
    RunIndex(tmp_path).add_many([_record(1, i) for i in range(5)])
    again = RunIndex(tmp_path)
    assert again.count() == 5
    assert (tmp_path / INDEX_NAME).is_file()


def _cli(*args):
    return CliRunner().invoke(app, list(args), env={"COLUMNS": "250", "TDLAB_THREADS": ""})


def test_cli_runs_where_filters_the_table(tmp_path):
    out = tmp_path / "runs"
    recs = [_record(2, i) for i in range(30)]
    RunIndex(out).add_many(recs)
    res = _cli("runs", "--out", str(out), "--where", "claims.failed > 0")
    assert res.exit_code == 0, res.output
    want = {r["run_id"] for r in recs if r["claims_failed"] > 0}
    assert want and len(want) < len(recs)
    shown = {r["run_id"] for r in recs if r["run_id"] in res.output}
    assert shown == want
    assert f"{len(want)} run(s)" in res.output

    res = _cli("runs", "--out", str(out), "--where", "config.task.p = 0.1")
    assert res.exit_code == 0, res.output
    want = {r["run_id"] for r in recs if r["config"]["task"]["p"] == 0.1}
    assert {r["run_id"] for r in recs if r["run_id"] in res.output} == want
    assert f"{len(want)} run(s)" in res.output

    res = _cli("runs", "--out", str(out))
    assert res.exit_code == 0 and f"{len(recs)} run(s)" in res.output


@pytest.mark.parametrize("where", ["claims.failed >", "bogus_column = 1"])
def test_cli_runs_bad_where_exits_2(tmp_path, where):
    out = tmp_path / "runs"
    RunIndex(out).add(_record(0, 0))
    res = _cli("runs", "--out", str(out), "--where", where)
    assert res.exit_code == 2
    assert "--where" in res.output
    assert "Traceback" not in res.output


def _open_and_add(out: str, writer: int, barrier) -> None:
    barrier.wait()
    RunIndex(Path(out)).add(_record(writer, 0))


def test_many_processes_creating_a_fresh_index_at_once_never_crash(tmp_path):
    # Regression: SQLite answers the WAL switch of a new database with SQLITE_BUSY at once (no busy
    # handler), so writers opening a fresh index together crashed with "database is locked" (seen
    # in ~1 of 3 fresh 8-writer starts). Twenty fresh starts, 8 writers each.
    ctx = mp.get_context("fork" if "fork" in mp.get_all_start_methods() else "spawn")
    for rep in range(20):
        out = tmp_path / f"runs{rep}"
        barrier = ctx.Barrier(WRITERS)
        procs = [ctx.Process(target=_open_and_add, args=(str(out), w, barrier)) for w in range(WRITERS)]
        for p in procs:
            p.start()
        for p in procs:
            p.join(timeout=60)
        assert [p.exitcode for p in procs] == [0] * WRITERS, f"fresh start {rep}: a writer crashed"
        with sqlite3.connect(out / INDEX_NAME) as con:
            assert con.execute("SELECT COUNT(*) FROM runs").fetchone()[0] == WRITERS
            assert con.execute("PRAGMA journal_mode").fetchone()[0] == "wal"


# ------------------------------------------------------------------------------------------------
# --where is SQL with no power beyond reading the runs table, and a time limit.


def _stderr_lines(res) -> list[str]:
    return [line for line in res.stderr.splitlines() if line.strip()]


@pytest.fixture()
def small(tmp_path) -> Path:
    out = tmp_path / "runs"
    RunIndex(out).add_many(
        [_record(4, i) for i in range(30)] + [{**_record(5, 0), "run_id": "semi", "experiment": "a;b"}]
    )
    return out


@pytest.mark.parametrize(
    "where",
    [
        "1 UNION SELECT name, sql, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1 FROM sqlite_master",
        "run_id IN (SELECT name FROM sqlite_master)",
        "run_id IN (SELECT rowid FROM runs)",
        "hex(run_id) = '00'",
        "load_extension('x') = 1",
    ],
)
def test_where_reading_other_tables_or_calling_other_functions_is_refused(small, where):
    with pytest.raises(ConfigError, match="refused"):
        RunIndex(small).query(where)
    res = _cli("runs", "--out", str(small), "--where", where)
    assert res.exit_code == 2 and len(_stderr_lines(res)) == 1 and "refused" in res.stderr, res.stderr
    assert "CREATE TABLE" not in res.stdout + res.stderr  # sqlite_master's sql never shown


def test_where_recursive_cte_is_stopped_within_the_time_limit(small):
    cte = "run_id IN (WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x+1 FROM c) SELECT x FROM c)"
    t0 = time.monotonic()
    res = _cli("runs", "--out", str(small), "--where", cte)
    elapsed = time.monotonic() - t0
    assert res.exit_code == 2 and len(_stderr_lines(res)) == 1, res.stderr
    assert elapsed < QUERY_TIME_LIMIT_S, elapsed


def test_slow_where_is_stopped_by_the_progress_handler(small):
    # Allowed by the authorizer (six reads of runs), but 31^6 ~ 9e8 rows: only the time limit ends it.
    join = "run_id IN (SELECT a.run_id FROM runs a, runs b, runs c, runs d, runs e, runs f)"
    t0 = time.monotonic()
    with pytest.raises(ConfigError, match=re.escape("longer than 0.3 s and was stopped")):
        RunIndex(small).query(join, time_limit=0.3)
    assert 0.3 <= time.monotonic() - t0 < 3.0


def test_where_may_contain_a_semicolon_in_a_string_but_not_two_statements(small):
    assert [r["run_id"] for r in RunIndex(small).query("experiment = 'a;b'")] == ["semi"]
    res = _cli("runs", "--out", str(small), "--where", "experiment = 'a;b'")
    assert res.exit_code == 0 and "1 run(s)" in res.stdout, res.output
    with pytest.raises(ConfigError, match="one condition expected"):
        RunIndex(small).query("1; DELETE FROM runs")
    assert RunIndex(small).count() == 31


def test_where_queries_never_write(small):
    before = (small / INDEX_NAME).read_bytes()
    for where in ("1) ; DELETE FROM runs; SELECT (1", "run_id IN (SELECT 1 FROM pragma_table_info('runs'))"):
        with pytest.raises(ConfigError):
            RunIndex(small).query(where)
    assert RunIndex(small).count() == 31 and (small / INDEX_NAME).read_bytes() == before


# ------------------------------------------------------------------------------------------------
# A corrupt index: one line naming --reindex; --reindex moves it aside and rebuilds it.


def _finished_run(out: Path, run_id: str) -> None:
    """A minimal finished run directory (config, empty metrics, summary), written without training."""
    from tdlab.runs import RunWriter

    w = RunWriter(out, "markov-init", run_id)
    w.write_config({"experiment": "markov-init", "profile": "quick", "config": {"seed": 3}, "sweep": None})
    w.finish().write_summary({"status": "done", "run_id": run_id, "claims_total": 2, "claims_failed": 1})


def test_corrupt_index_is_one_line_and_reindex_rebuilds_it(tmp_path):
    out = tmp_path / "runs"
    _finished_run(out, "kept")
    garbage = bytes(range(256)) * 64
    (out / INDEX_NAME).write_bytes(garbage)
    res = _cli("runs", "--out", str(out))
    assert res.exit_code == 2 and len(_stderr_lines(res)) == 1 and "--reindex" in res.stderr, res.stderr
    assert "Traceback" not in res.output
    res = _cli("runs", "--out", str(out), "--reindex")
    assert res.exit_code == 0, res.output
    assert len(_stderr_lines(res)) == 1 and "moved aside" in res.stderr
    (aside,) = out.glob(f"{INDEX_NAME}.corrupt-*")
    assert aside.read_bytes() == garbage  # kept, not deleted
    assert "kept" in res.stdout and "1 run(s)" in res.stdout
    assert [r["run_id"] for r in RunIndex(out).query()] == ["kept"]
    res = _cli("runs", "--out", str(out), "--reindex")  # a sound index is not moved
    assert res.exit_code == 0 and not _stderr_lines(res) and len(list(out.glob(f"{INDEX_NAME}.corrupt-*"))) == 1


def test_a_row_tdlab_never_writes_is_a_corrupt_index_and_reindex_sets_it_aside(tmp_path):
    """Run ids are read back as the CLI reads --run-id: one that names other folders (../x) is refused."""
    import sqlite3

    from tdlab.index import CorruptIndexError, set_aside_if_corrupt

    out = tmp_path / "runs"
    RunIndex(out).add_many([_record(4, 0)])
    assert set_aside_if_corrupt(out) is None
    con = sqlite3.connect(out / INDEX_NAME)
    with con:
        con.execute("INSERT INTO runs (run_id, config, summary) VALUES ('../../../tmp/x', '{}', '{}')")
    con.close()
    with pytest.raises(CorruptIndexError, match=r"is corrupt: run id '../../../tmp/x' is not a run id") as err:
        RunIndex(out).query()
    assert "\n" not in str(err.value) and "--reindex" in str(err.value)
    assert set_aside_if_corrupt(out) is not None and not (out / INDEX_NAME).exists()

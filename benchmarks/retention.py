"""History at scale: the sweeper's query with and without its index, and pruning, over a million
old rows.

    python -m benchmarks.retention                           # 1,000,000 rows each, MariaDB
    python -m benchmarks.retention --rows 20000 --database sqlite

Fills a fresh database with `--rows` commit leases that ended more than the retention ago, a
few live and a few expired-but-unswept ones, and `--rows` events older than the retention spread
over `--tables` tables (half of which also have a recent event). Then:

    sweep        the sweeper's query over commit leases (`expired_commit_tables`, the part of
                 `state.tables_due_for_sweep` that reads them; median and max of `--repeats`)
                 at migration 0002 (only the index that starts with table_name) and at 0003
                 (adds (ended_at, expires_at)), and how long that migration took on the filled
                 table; the state gauges' count of live commit leases alongside. Then the
                 database goes on to the head.
    prune        one `retention.prune` pass as the service runs it (a pause as long as each
                 batch): rows/s, and p50, p99 and max of its batch transactions; meanwhile a
                 probe writes a lease and an event every 10 ms and reports its p99 and max
                 latency, against the same probe on the idle database just before

It prints one JSON object; `--json` writes it to a file too.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Callable, Sequence
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

from sqlalchemy import Engine, func, insert, select, text
from sqlalchemy.engine import Connection

from benchmarks.lease_throughput import DEFAULT_MARIADB_URL, percentile
from service.lock import migrate
from service.lock.db import commit_leases_t, events_t, make_engine, now
from service.lock.retention import prune
from testkit import fresh_database

__all__ = ["fill", "main", "probe_writes", "time_query"]

RETENTION = timedelta(days=30)
CHUNK = 100_000  # rows per INSERT ... SELECT, so no one fill transaction grows huge


def _numbers(dialect: str, count: int) -> str:
    """A subquery yielding n = 0 .. count-1."""
    if dialect == "sqlite":
        return (
            f"(WITH RECURSIVE seq(n) AS (SELECT 0 UNION ALL SELECT n + 1 FROM seq "
            f"WHERE n < {count - 1}) SELECT n FROM seq)"
        )
    return f"(SELECT CAST(seq AS SIGNED) AS n FROM seq_0_to_{count - 1})"  # MariaDB SEQUENCE engine


def _seconds_before(dialect: str, base: str, seconds: str) -> str:
    """SQL for the instant `seconds` before the bound `base`, as the column stores it."""
    if dialect == "sqlite":
        # SQLAlchemy stores SQLite datetimes as text with six fractional digits
        return f"strftime('%Y-%m-%d %H:%M:%S', {base}, (-({seconds})) || ' seconds') || '.000000'"
    return f"{base} - INTERVAL ({seconds}) SECOND"


def _concat(dialect: str, prefix: str, number: str) -> str:
    return f"'{prefix}' || ({number})" if dialect == "sqlite" else f"CONCAT('{prefix}', {number})"


def fill(engine: Engine, *, rows: int, tables: int) -> dict[str, int]:
    """Old ended leases and old events, plus the recent rows a live system has."""
    dialect = engine.dialect.name
    end = engine.dialect.identifier_preparer.quote("end")  # a keyword on both
    with engine.connect() as conn:
        clock = now(conn)
    # the newest old row ended a day past the retention; older ones a second apart before it
    base = (clock - RETENTION - timedelta(days=1)).strftime("%Y-%m-%d %H:%M:%S")
    for start in range(0, rows, CHUNK):
        count = min(CHUNK, rows - start)
        # offsets so that ids and instants both grow along the fill: oldest first
        age = f"{rows} - ({start} + n)"
        with engine.begin() as conn:
            conn.execute(
                text(
                    "INSERT INTO lakelock_commit_leases (id, table_name, holder, request_id, "
                    f"ttl_s, acquired_at, expires_at, ended_at, {end}) "
                    f"SELECT {_concat(dialect, 'old-', f'{start} + n')}, "
                    f"{_concat(dialect, 'bench.db.t', f'({start} + n) % {tables}')}, "
                    f"'ingest-1', {_concat(dialect, 'r-', f'{start} + n')}, 30, "
                    f"{_seconds_before(dialect, ':base', f'{age} + 2')}, "
                    f"{_seconds_before(dialect, ':base', f'{age} - 28')}, "
                    f"{_seconds_before(dialect, ':base', age)}, 'released' "
                    f"FROM {_numbers(dialect, count)} AS s"
                ),
                {"base": base},
            )
            conn.execute(
                text(
                    "INSERT INTO lakelock_events (at, table_name, event, kind, holder) "
                    f"SELECT {_seconds_before(dialect, ':base', age)}, "
                    f"{_concat(dialect, 'bench.db.t', f'({start} + n) % {tables}')}, "
                    f"'lease.released', 'commit', 'ingest-1' FROM {_numbers(dialect, count)} AS s"
                ),
                {"base": base},
            )
    recent = range(0, tables, 2)
    with engine.begin() as conn:
        conn.execute(
            insert(events_t),
            [{"at": clock, "table_name": f"bench.db.t{t}", "event": "switch.set"} for t in recent],
        )
        live = [_lease(f"bench.db.t{t}", clock, ttl_s=600) for t in range(50)]
        due = [_lease(f"bench.db.t{t}", clock - timedelta(minutes=5), ttl_s=30) for t in range(5)]
        conn.execute(insert(commit_leases_t), live + due)
    if dialect != "sqlite":
        with engine.begin() as conn:
            conn.execute(text("ANALYZE TABLE lakelock_commit_leases, lakelock_events"))
    return {"old_rows": rows, "tables": tables, "recent_events": len(recent), "due": len(due)}


def _lease(table: str, acquired_at: datetime, *, ttl_s: float) -> dict[str, Any]:
    lease_id = str(uuid.uuid4())
    return {
        "id": lease_id,
        "table_name": table,
        "holder": "ingest-1",
        "request_id": lease_id,
        "ttl_s": ttl_s,
        "acquired_at": acquired_at,
        "expires_at": acquired_at + timedelta(seconds=ttl_s),
    }


def expired_commit_tables(conn: Connection) -> list[str]:
    """The sweeper's question over commit leases: tables with one expired but not ended."""
    c = commit_leases_t.c
    query = select(c.table_name).where(c.ended_at.is_(None), c.expires_at <= now(conn))
    return sorted(conn.execute(query.distinct()).scalars())


def live_commit_count(conn: Connection) -> int:
    """The state gauges' count of live commit leases."""
    c = commit_leases_t.c
    live = select(func.count()).where(c.ended_at.is_(None), c.expires_at > now(conn))
    return int(conn.execute(live).scalar_one())


def time_query(engine: Engine, query: Callable[[Any], Any], *, repeats: int) -> dict[str, Any]:
    """Median and max milliseconds of `query(conn)`, each on a pooled connection."""
    took, result = [], None
    for _ in range(repeats):
        with engine.connect() as conn:
            started = time.perf_counter()
            result = query(conn)
            took.append(time.perf_counter() - started)
    return {
        "median_ms": round(statistics.median(took) * 1000, 2),
        "max_ms": round(max(took) * 1000, 2),
        "result": result,
    }


class probe_writes:
    """Every 10 ms, one short transaction that writes a lease and an event, as a grant does;
    the latencies are in `.took` once the block ends."""

    def __init__(self, engine: Engine) -> None:
        self.engine = engine
        self.took: list[float] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self._stop.wait(0.01):
            started = time.perf_counter()
            with self.engine.begin() as conn:
                at = now(conn)
                conn.execute(insert(commit_leases_t), _lease("bench.db.probe", at, ttl_s=30))
                conn.execute(
                    insert(events_t).values(at=at, table_name="bench.db.probe", event="probe")
                )
            self.took.append(time.perf_counter() - started)

    def __enter__(self) -> probe_writes:
        self._thread.start()
        return self

    def __exit__(self, *_exc: object) -> None:
        self._stop.set()
        self._thread.join()

    def summary(self) -> dict[str, float]:
        return {
            "writes": len(self.took),
            "p99_ms": round(percentile(self.took, 0.99) * 1000, 2),
            "max_ms": round(max(self.took, default=float("nan")) * 1000, 2),
        }


class PauseLikeTheService:
    """The service's pause between batches (as long as the batch took), noting each batch."""

    def __init__(self) -> None:
        self.batches: list[float] = []

    def __call__(self, took: float) -> bool:
        self.batches.append(took)
        time.sleep(took)
        return False


def run(url: str, *, rows: int, tables: int, repeats: int, batch_rows: int) -> dict[str, Any]:
    engine = make_engine(url)
    try:
        started = time.perf_counter()
        filled = fill(engine, rows=rows, tables=tables)
        filled["fill_s"] = round(time.perf_counter() - started, 1)

        engine.dispose()
        migrate.downgrade(url, "0002")
        sweep_before = time_query(engine, expired_commit_tables, repeats=repeats)
        state_before = time_query(engine, live_commit_count, repeats=repeats)
        started = time.perf_counter()
        migrate.upgrade(url, "0003")
        migration_s = round(time.perf_counter() - started, 2)
        engine.dispose()
        sweep_after = time_query(engine, expired_commit_tables, repeats=repeats)
        state_after = time_query(engine, live_commit_count, repeats=repeats)
        assert sweep_before["result"] == sweep_after["result"], "the index changed the answer"
        migrate.upgrade(url)
        engine.dispose()

        with probe_writes(engine) as idle:
            time.sleep(5)
        with probe_writes(engine) as busy:
            started = time.perf_counter()
            pause = PauseLikeTheService()
            pruned = prune(engine, retention=RETENTION, batch_rows=batch_rows, pause=pause)
            prune_s = time.perf_counter() - started
        deleted = pruned.events + pruned.commit_leases
        return {
            "database": engine.dialect.name,
            **filled,
            "sweep": {
                "due_tables": len(sweep_after["result"]),
                "at_0002_median_ms": sweep_before["median_ms"],
                "at_0002_max_ms": sweep_before["max_ms"],
                "at_0003_median_ms": sweep_after["median_ms"],
                "at_0003_max_ms": sweep_after["max_ms"],
                "migration_0003_s": migration_s,
            },
            "state_gauges": {
                "at_0002_median_ms": state_before["median_ms"],
                "at_0003_median_ms": state_after["median_ms"],
                "live": state_after["result"],
            },
            "prune": {
                "batch_rows": batch_rows,
                "events_deleted": pruned.events,
                "commit_leases_deleted": pruned.commit_leases,
                "batches": pruned.batches,
                "seconds": round(prune_s, 1),
                "rows_per_s": round(deleted / prune_s),
                "batch_p50_ms": round(percentile(pause.batches, 0.50) * 1000, 1),
                "batch_p99_ms": round(percentile(pause.batches, 0.99) * 1000, 1),
                "longest_batch_ms": round(pruned.longest_batch_s * 1000, 1),
            },
            "probe_idle": idle.summary(),
            "probe_while_pruning": busy.summary(),
        }
    finally:
        engine.dispose()


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.retention")
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--tables", type=int, default=1000)
    parser.add_argument("--repeats", type=int, default=20)
    parser.add_argument("--batch-rows", type=int, default=1000)
    parser.add_argument("--database", choices=["sqlite", "mariadb"], default="mariadb")
    parser.add_argument("--mariadb-url", default=DEFAULT_MARIADB_URL)
    parser.add_argument("--json", type=Path)
    args = parser.parse_args(argv)
    if args.rows < 1 or args.tables < 10 or args.repeats < 1 or args.batch_rows < 1:
        parser.error("--rows, --repeats and --batch-rows must be >= 1, --tables >= 10")
    with (
        tempfile.TemporaryDirectory() as folder,
        fresh_database(args.database, mariadb_url=args.mariadb_url, workdir=Path(folder)) as url,
    ):
        result = run(
            url,
            rows=args.rows,
            tables=args.tables,
            repeats=args.repeats,
            batch_rows=args.batch_rows,
        )
    print(json.dumps(result))
    if args.json:
        args.json.write_text(json.dumps(result, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())

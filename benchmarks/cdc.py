"""A MySQL change stream into Iceberg through lakelock: changes per second, end-to-end lag.

    python -m benchmarks.cdc                          # 60 s at 20 transactions/s, then 20000
    python -m benchmarks.cdc --seconds 30 --rate 10 --backlog 1000 --out var/cdc-small

A private MariaDB (row binlog) runs the shop workload (demo/shop.py: inserts, updates, key
changes, deletes on user_member and orders, 1-4 statements per transaction); the binlog reader
(demo/binlog.py) writes Debezium lines into the landing folder; the ingest job applies the
orders changes (partitioned by day, merge key (order_id, created_at), partition-scoped commit
leases) through a lakelock service while the compactor (partition scope, the demo's
thresholds) runs every `--compact-every-s` on the same table. Two phases:

    lag         the workload at `--rate` transactions/s for `--seconds`, the stream running
                (1 s trigger): for every transaction that wrote orders, the time from its
                MySQL COMMIT to the commit of the Iceberg snapshot that holds it (the batch
                whose files reach the reader's file for it), p50/p99/max
    throughput  `--backlog` transactions committed with the stream stopped, then drained by
                one available-now run: changes applied per second of the drain, twice: with
                the gate and the compactor, and without either (the idle table, no lakelock:
                the real limit of this path)

At the end: delete files per partition (the `partitions` metadata table), what the per-batch
read of the table's schema costs (the job's price for picking up an ALTER TABLE at the next
batch), and the equality check of the Iceberg table (read with pyiceberg) against SELECT * of
MySQL's. Writes `results.json`.
"""

from __future__ import annotations

import argparse
import bisect
import json
import shutil
import statistics
import sys
import threading
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from service.wire.figures import quantile

__all__ = ["main"]

TABLE = "local.db.orders"


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.cdc", description=__doc__)
    parser.add_argument("--seconds", type=float, default=60.0, help="lag phase length")
    parser.add_argument("--rate", type=float, default=20.0, help="transactions/s in the lag phase")
    parser.add_argument("--backlog", type=int, default=20000, help="transactions to drain")
    parser.add_argument("--compact-every-s", type=float, default=10.0)
    parser.add_argument("--out", type=Path, default=Path("var/cdc-benchmark"))
    return parser


class Stream:
    """The ingest query on the orders landing folder, and when each batch became visible."""

    def __init__(self, spark: Any, values: dict[str, Any]) -> None:
        from ingest_gate.job.config import load_config
        from ingest_gate.job.record import BatchHooks
        from ingest_gate.job.run import run

        self.visible: list[tuple[str, float]] = []  # (last source file, commit time)
        self._last: dict[int, str | None] = {}

        def committed(batch_id: int, _pass: Any) -> None:
            self.visible.append((str(batch_id), time.time()))

        self.handle = run(
            load_config(overrides=values), spark=spark, hooks=BatchHooks(after_merge=committed)
        )

    def files_visible(self) -> list[tuple[str, float]]:
        """(last source file, commit time) of each committed batch, in commit order."""
        at = dict(self.visible)
        return [
            (r.last_source or "", at[str(r.batch_id)])
            for r in self.handle.records
            if str(r.batch_id) in at and r.last_source
        ]


def _lags(workload: Any, reader: Any, visible: list[tuple[str, float]], since: int) -> list[float]:
    """Seconds from each orders transaction's COMMIT (from `since` on) to the Iceberg commit of
    the first batch that read the reader's file holding it."""
    flushes = [(pos, paths) for _, pos, paths in reader.flushed]
    positions = [pos for pos, _ in flushes]
    lags = []
    for at, position, tables in workload.commits[since:]:
        if "orders" not in tables:
            continue
        i = bisect.bisect_left(positions, position)
        if i == len(flushes):
            continue  # not written by the reader before the end: not measured
        files = [p for p in flushes[i][1] if "/orders/" in p]
        if not files:
            continue
        name = Path(files[0]).name
        seen = [t for last, t in visible if Path(last.split(":", 1)[-1]).name >= name]
        if seen:
            lags.append(min(seen) - at)
    return lags


def _drain(spark: Any, values: dict[str, Any], *, compact: Any = None) -> dict[str, Any]:
    from ingest_gate.job.config import load_config
    from ingest_gate.job.run import run

    handle = run(load_config(overrides={**values, "available_now": True}), spark=spark)
    started = time.monotonic()
    stop = threading.Event()
    thread = None
    if compact is not None:
        thread = threading.Thread(target=compact, args=(stop,), daemon=True)
        thread.start()
    records = handle.wait()
    elapsed = time.monotonic() - started
    stop.set()
    if thread is not None:
        thread.join()
    changes = sum(r.changes for r in records)
    return {
        "changes": changes,
        "seconds": round(elapsed, 1),
        "changes_per_s": round(changes / elapsed, 1),
        "batches": len(records),
        "failed_batches": sum(r.outcome == "failed" for r in records),
    }


def main(argv: Sequence[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    from benchmarks.convergence import demo_table_config
    from compactor.report import publish
    from compactor.run import run_table
    from demo.binlog import BinlogReader
    from demo.mariadb import PrivateMariaDB
    from demo.shop import (
        TABLES,
        Workload,
        create_source,
        create_targets,
        differences,
        iceberg_rows,
        source_rows,
    )
    from jobkit.spark import CatalogConfig, build_session
    from service.client import LeaseClient
    from testkit import LocalService

    shutil.rmtree(args.out, ignore_errors=True)
    args.out.mkdir(parents=True)
    out = args.out.resolve()
    warehouse = out / "warehouse"
    spark = build_session(
        CatalogConfig(warehouse=str(warehouse)),
        app_name="lakelock-cdc",
        master="local[2]",
        extra_conf={"spark.sql.shuffle.partitions": "2"},
    )
    spark.sparkContext.setLogLevel("ERROR")
    service = LocalService.start(
        db_url=f"sqlite:///{out / 'lakelock.db'}", log_path=out / "service.log"
    )
    database = PrivateMariaDB.start(out / "mariadb")
    conn = database.connect()
    stop_reader = threading.Event()
    try:
        create_source(conn)
        spark.sql("CREATE NAMESPACE IF NOT EXISTS local.db")
        table = create_targets(spark, "local.db", suffix="")["orders"]
        assert table == TABLE
        reader = BinlogReader(
            database.settings(),
            landing=out / "landing",
            state=out / "binlog.json",
            schema="shop",
            formats=("debezium",),
        )
        reader_thread = threading.Thread(target=reader.follow, args=(stop_reader,), daemon=True)
        reader_thread.start()
        workload = Workload(conn, seed=1)
        values = {
            "table": TABLE,
            "catalog": {"warehouse": str(warehouse)},
            "format": "debezium",
            "key_columns": list(TABLES["orders"].key),
            "landing_path": str(out / "landing" / "debezium" / "orders"),
            "dead_letter_path": str(out / "dead-letter"),
            "checkpoint_path": str(out / "checkpoint"),
            "trigger_interval_s": 1.0,
            "lakelock_url": service.url,
            "lakelock_token": service.token("job"),
            "holder": "benchmark-ingest",
            "lease_ttl_s": 20.0,
            "max_hold_s": 120.0,
            "poll_s": 1.0,
        }
        compactions: list[str] = []
        client = LeaseClient(service.url, token=service.token("job"))

        def compact(stop: threading.Event) -> None:
            config = demo_table_config(TABLE)
            while not stop.wait(args.compact_every_s):
                report = run_table(spark, client=client, config=config, holder="benchmark")
                publish(report, client=client)
                compactions.append(str(report.outcome))

        # -- lag: a steady workload, the stream and the compactor running
        workload.run(20, position=database.position)  # tables and files exist before the stream
        stream = Stream(spark, values)
        stop_compactor = threading.Event()
        compactor = threading.Thread(target=compact, args=(stop_compactor,), daemon=True)
        compactor.start()
        since = len(workload.commits)
        started = time.monotonic()
        interval = 1.0 / args.rate
        while time.monotonic() - started < args.seconds:
            tick = time.monotonic()
            workload.run(1, position=database.position)
            time.sleep(max(0.0, interval - (time.monotonic() - tick)))
        target = database.position()
        deadline = time.monotonic() + 300
        while not reader.caught_up(target) and time.monotonic() < deadline:
            time.sleep(0.1)
        last_file = max((p for _, _, paths in reader.flushed for p in paths if "/orders/" in p))
        while time.monotonic() < deadline and not any(
            Path(f.split(":", 1)[-1]).name >= Path(last_file).name
            for f, _ in stream.files_visible()
        ):
            time.sleep(0.2)
        stream.handle.stop()
        stop_compactor.set()
        compactor.join()
        lags = _lags(workload, reader, stream.files_visible(), since)
        lag = {
            "transactions": len(workload.commits) - since,
            "orders_transactions_measured": len(lags),
            "p50_s": quantile(lags, 0.5, ndigits=2),
            "p99_s": quantile(lags, 0.99, ndigits=2),
            "max_s": round(max(lags), 2) if lags else None,
            "batches": len(stream.handle.records),
            "compactions": compactions[:],
        }
        print(f"lag: {json.dumps(lag)}", flush=True)

        # -- throughput: a backlog drained once with lakelock and the compactor, once without
        throughput = {}
        for mode in ("gated, compactor running", "no gate, no compactor"):
            before = len(workload.commits)
            workload.run(args.backlog)
            target = database.position()
            while not reader.caught_up(target):
                time.sleep(0.1)
            compactions.clear()
            gated = mode.startswith("gated")
            figures = _drain(
                spark,
                {**values, "gate_enabled": gated},
                compact=compact if gated else None,
            )
            figures["transactions"] = len(workload.commits) - before
            figures["compactions"] = compactions[:]
            throughput[mode] = figures
            print(f"throughput ({mode}): {json.dumps(figures)}", flush=True)

        rows = spark.sql(
            f"SELECT partition, position_delete_file_count AS deletes, file_count AS files "
            f"FROM {TABLE}.partitions"
        ).collect()
        deletes = sorted(int(r["deletes"]) for r in rows)
        files = sorted(int(r["files"]) for r in rows)
        # what each batch pays to notice a schema change: one read of the table from the catalog
        from ingest_gate.job.target import read_target

        reads = []
        for _ in range(21):
            started = time.perf_counter()
            read_target(spark, TABLE, catalog=CatalogConfig(warehouse=str(warehouse)))
            reads.append((time.perf_counter() - started) * 1000)
        problems = differences(
            source_rows(conn, "orders"), iceberg_rows(warehouse, TABLE), TABLES["orders"]
        )
        results = {
            "lag": lag,
            "throughput": throughput,
            "workload": workload.counts,
            "partitions": len(rows),
            "delete_files_per_partition": {
                "median": statistics.median(deletes) if deletes else 0,
                "max": max(deletes, default=0),
                "total": sum(deletes),
            },
            "data_files_per_partition": {
                "median": statistics.median(files) if files else 0,
                "max": max(files, default=0),
            },
            "schema_read_ms": {
                "p50": quantile(reads, 0.5, ndigits=1),
                "max": round(max(reads), 1),
            },
            "equal_to_mysql": not problems,
            "problems": problems,
        }
        (out / "results.json").write_text(json.dumps(results, indent=2) + "\n")
        print(json.dumps(results, indent=2))
        return 0 if not problems else 1
    finally:
        stop_reader.set()
        for query in spark.streams.active:
            query.stop()
        spark.stop()
        conn.close()
        database.stop()
        service.stop()


if __name__ == "__main__":
    sys.exit(main())

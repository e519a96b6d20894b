"""Does the compactor leave ingest alone once a table is healthy? Leases taken on a quiet table.

    python -m benchmarks.convergence                          # 24 upsert batches, then 6 ticks
    python -m benchmarks.convergence --batches 12 --ticks 4 --out var/convergence-small

A merge-on-read table like the demo's (partitioned by dt and hr, file-scoped position deletes)
gets `--batches` upsert micro-batches through the ingest job's MERGE, with keys that repeat, so
each batch writes position deletes against the files of the ones before. Then no more commits
arrive, and the compactor, with the demo's thresholds and a real lakelock service, ticks
`--ticks` times. A compactor that converges takes the maintenance lease once (or not at all)
and skips every later tick; one that does not takes it at every tick and changes nothing.

Reported, from the run reports and the service's audit trail: maintenance leases taken, how
many of them changed nothing (goal: 0), the total seconds ingest was held by maintenance (from
the intent or the grant to the release), the outcome of each tick, and the data, delete and
dangling delete files at the end. Writes `results.json` and `report.md` into `--out`.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from benchmarks.conflicts import ingest_held_s
from benchmarks.lake import local_lake
from compactor.config import TableConfig
from compactor.report import changed_anything, publish
from compactor.run import run_table
from service.client import LeaseClient
from service.wire import EventName

__all__ = ["demo_table_config", "main", "upsert_batches"]

TABLE = "local.db.events"


def demo_table_config(table: str) -> TableConfig:
    """The demo's compactor config (KB-sized files, not the 128 MiB of a real table): the
    benchmark measures what the demo runs."""
    from demo.options import PipelineOptions

    return PipelineOptions(table=table).table_config()


def upsert_batches(spark: Any, table: str, *, batches: int, rows: int = 40) -> None:
    """`batches` MERGE upserts into `table`; keys repeat across batches over three hours of one
    day, so from the second batch on each writes position deletes."""
    from demo.generate import create_events_table
    from ingest_gate.job.merge import merge_sql

    create_events_table(spark, table)
    for batch in range(batches):
        spark.sql(
            f"""
            SELECT CAST(id % {rows * 2} AS STRING) AS event_id, id AS user_id,
                   concat('p', id % 7) AS product_id, 'view' AS event_type,
                   TIMESTAMP '2024-06-20 10:00:00' + make_interval(0, 0, 0, 0, 0, 0, {batch})
                       AS event_time,
                   DATE '2024-06-20' AS dt, CAST(10 + id % 3 AS INT) AS hr,
                   CAST({batch} AS DOUBLE) AS amount
            FROM range({batch * rows // 2}, {batch * rows // 2 + rows})
            """
        ).createOrReplaceTempView("batch")
        spark.sql(
            merge_sql(
                target=table,
                source="batch",
                key_columns=("event_id", "dt", "hr"),
                event_time_column="event_time",
            )
        )


def _files(spark: Any, table: str) -> dict[str, int]:
    counts = {
        r["content"]: r["n"]
        for r in spark.sql(
            f"SELECT content, count(*) AS n FROM {table}.files GROUP BY content"
        ).collect()
    }
    return {"data_files": counts.get(0, 0), "delete_files": counts.get(1, 0) + counts.get(2, 0)}


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.convergence", description=__doc__)
    parser.add_argument("--batches", type=int, default=24, help="upsert batches before the ticks")
    parser.add_argument("--ticks", type=int, default=6, help="compactor ticks, no commits between")
    parser.add_argument("--out", type=Path, default=Path("var/convergence"))
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    with local_lake(args.out, app_name="lakelock-convergence") as (spark, service):
        upsert_batches(spark, TABLE, batches=args.batches)
        before = _files(spark, TABLE)
        print(f"after {args.batches} upsert batches: {before}", flush=True)
        config = demo_table_config(TABLE)
        reports = []
        with LeaseClient(service.url, token=service.token("job")) as client:
            for tick in range(1, args.ticks + 1):
                report = run_table(spark, client=client, config=config, holder="benchmark")
                publish(report, client=client)
                reports.append(report)
                after = report.after or report.before or {}
                print(
                    f"  tick {tick}: {report.outcome}, data files {after.get('data_files')}, "
                    f"delete files {after.get('delete_files')}, "
                    f"dangling {after.get('dangling_delete_files', 'not counted')}",
                    flush=True,
                )
            events = client.events(table=TABLE, limit=1000)
        leases = sum(
            1
            for e in events
            if e["kind"] == "maintenance" and e["event"] == EventName.LEASE_ACQUIRED
        )
        figures = {
            "batches": args.batches,
            "ticks": args.ticks,
            "outcomes": [str(r.outcome) for r in reports],
            "maintenance_leases": leases,
            "no_change_leases": sum(
                1 for r in reports if r.lease_id is not None and not changed_anything(r)
            ),
            "ingest_held_s": ingest_held_s(events) or 0.0,
            "files_before": before,
            "files_at_end": _files(spark, TABLE),
        }
    command = "python -m benchmarks.convergence " + " ".join(argv or sys.argv[1:])
    (args.out / "results.json").write_text(json.dumps(figures, indent=2) + "\n")
    report_md = "\n".join(
        [
            "# Leases on a quiet table",
            "",
            f"`{command.strip()}`",
            "",
            "| | |",
            "| --- | ---: |",
            f"| maintenance leases taken in {args.ticks} ticks | {figures['maintenance_leases']} |",
            f"| leases that changed nothing (goal 0) | {figures['no_change_leases']} |",
            f"| ingest held by maintenance, total (s) | {figures['ingest_held_s']} |",
            f"| outcomes | {', '.join(figures['outcomes'])} |",
            f"| data / delete files before | {before['data_files']} / {before['delete_files']} |",
            f"| data / delete files at the end | {figures['files_at_end']['data_files']} / "
            f"{figures['files_at_end']['delete_files']} |",
        ]
    )
    (args.out / "report.md").write_text(report_md + "\n")
    print(report_md)
    return 0


if __name__ == "__main__":
    sys.exit(main())

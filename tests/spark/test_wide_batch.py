"""A micro-batch over a thousand partitions through the ingest job, at Spark's default driver
heap (1 GiB; local mode, so the write tasks run in the driver too): it commits with the right
rows, its commit lease names exactly its partitions, and its MERGE is limited by the per-field
superset. With Iceberg's fanout writer such a batch ran the heap out in its one write task and
took the streaming query down; the job now writes the table with the clustered writer."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from demo.generate import format_time, write_lines
from ingest_gate.job.record import BatchHooks
from ingest_gate.job.run import run
from ingest_gate.job.table import FANOUT_PROPERTY, table_properties
from jobkit.partition import partition_names, read_spec
from service.ops.iceberg_audit import metadata_file
from tests.spark.conftest import ingest_config

pytestmark = pytest.mark.spark

PARTITIONS = 1000  # hour partitions, each batch touches every one
START = datetime(2024, 5, 1, tzinfo=UTC)
WAIT_S = 900  # two batches of 1,000 partitions each on a shared 2-core machine


def event(hour: int, name: str, *, minute: int, amount: float) -> dict[str, Any]:
    moment = START + timedelta(hours=hour, minutes=minute)
    return {
        "event_id": f"e{hour:04d}-{name}",
        "user_id": hour,
        "product_id": f"p{hour % 7}",
        "event_type": "view",
        "event_time": format_time(moment),
        "dt": moment.strftime("%Y-%m-%d"),
        "hr": moment.hour,
        "amount": amount,
    }


def write(folder: str, events: list[dict[str, Any]], sequence: int) -> None:
    lines = [json.dumps(e, separators=(",", ":")) for e in events]
    write_lines(folder, lines, prefix="wide", sequence=sequence)


def pyiceberg_rows(warehouse: Any, table: str) -> list[tuple[Any, ...]]:
    """(event_id, dt, hr, event_time, amount) of every row, as pyiceberg reads the table."""
    from pyiceberg.table import StaticTable

    scan = StaticTable.from_metadata(str(metadata_file(warehouse, table))).scan(
        selected_fields=("event_id", "dt", "hr", "event_time", "amount")
    )
    return sorted(
        (r["event_id"], r["dt"].isoformat(), r["hr"], r["event_time"], r["amount"])
        for r in scan.to_arrow().to_pylist()
    )


def as_row(e: dict[str, Any]) -> tuple[Any, ...]:
    at = datetime.fromisoformat(e["event_time"].replace("Z", "+00:00"))  # a timestamptz
    return (e["event_id"], e["dt"], e["hr"], at, e["amount"])


def test_a_batch_over_a_thousand_partitions_commits_at_the_default_heap(
    spark, spark_warehouse, tmp_path, lakelock_server
):
    heap_mib = spark._jvm.java.lang.Runtime.getRuntime().maxMemory() / 2**20
    assert heap_mib <= 1024, f"this test is about the default 1 GiB heap, the JVM has {heap_mib}"
    config = ingest_config(
        spark, tmp_path, lakelock_server, "wide", available_now=True, lease_ttl_s=60.0
    )
    # a table made before the job wrote its tables clustered: the property is not set
    spark.sql(f"ALTER TABLE {config.table} UNSET TBLPROPERTIES ('{FANOUT_PROPERTY}')")
    assert FANOUT_PROPERTY not in table_properties(spark, config.table)
    first = [event(h, "a", minute=1, amount=1.0) for h in range(PARTITIONS)]
    updates = [event(h, "a", minute=30, amount=2.0) for h in range(PARTITIONS)]
    new = [event(h, "b", minute=45, amount=3.0) for h in range(PARTITIONS)]
    write(config.landing_path, first, 0)  # batch 0: 1,000 rows, one per partition
    write(config.landing_path, updates + new, 1)  # batch 1: an update and a new key in each
    leased: list[tuple[str, ...]] = []
    hooks = BatchHooks(before_merge=lambda _, gate_pass: leased.append(gate_pass.lease.partitions))

    records = run(config, spark=spark, hooks=hooks).wait(timeout=WAIT_S)

    assert [(r.outcome, r.rows_in_merge, r.merge_filter) for r in records] == [
        ("committed", PARTITIONS, "superset"),
        ("committed", 2 * PARTITIONS, "superset"),
    ]
    spec = read_spec(spark, config.table)
    hours = [START + timedelta(hours=h) for h in range(PARTITIONS)]
    names = partition_names(spec, [(at.date(), at.hour) for at in hours])
    assert len(names) == PARTITIONS
    assert [list(p) for p in leased] == [names, names]  # exactly the batch's partitions
    assert [r.scope for r in records] == [names, names]
    assert [r.rows_merged for r in records] == [PARTITIONS, 2 * PARTITIONS]
    assert pyiceberg_rows(spark_warehouse, config.table) == sorted(map(as_row, updates + new))
    assert table_properties(spark, config.table)[FANOUT_PROPERTY] == "false"

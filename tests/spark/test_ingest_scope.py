"""Partition-scoped commit leases (docs/design.md §4) against a real lakelock service: the gate
leases exactly the partitions a batch writes, so maintenance on other partitions does not hold
ingest, and maintenance on a partition the batch writes does."""

from __future__ import annotations

import logging
import time
from datetime import UTC, datetime
from typing import Any

import pytest

from demo.generate import EventGenerator
from ingest_gate.job.merge import merge_sql
from ingest_gate.job.record import BatchHooks
from ingest_gate.job.run import run
from jobkit.partition import batch_partition_values, read_spec, table_partition_names
from jobkit.predicate import partition_predicate
from service.client import Lease, LeaseClient
from tests.spark.conftest import ingest_config, snapshots, table_rows, wait_held_at_the_service

pytestmark = pytest.mark.spark

WAIT_S = 180  # generous bound for a handful of tiny batches on a shared 2-core machine
COLD = "dt=2024-05-01/hr=10"  # EventGenerator's default start; 10 events stay within the hour
HOT = "dt=2024-05-01/hr=12"


def cold_events(seed: int) -> EventGenerator:
    return EventGenerator(seed=seed)


def hot_events(seed: int) -> EventGenerator:
    return EventGenerator(seed=seed, start=datetime(2024, 5, 1, 12, 0, tzinfo=UTC))


def expected(*generators: EventGenerator) -> list[dict[str, Any]]:
    rows = [row for gen in generators for row in gen.expected_rows()]
    return sorted(rows, key=lambda r: (r["event_id"], r["dt"], r["hr"]))


def maintenance_on(operator: LeaseClient, table: str, partitions: list[str]) -> Lease:
    lease = operator.acquire_maintenance(
        table, holder="compactor-test", ttl_s=120, partitions=partitions
    )
    assert isinstance(lease, Lease), lease  # no commit lease on these partitions is live
    assert lease.partitions == tuple(partitions)
    return lease


def leases_asked() -> tuple[list[tuple[Any, ...]], BatchHooks]:
    """Hooks noting, per batch, the partitions asked for and the partitions granted."""
    asked: list[tuple[Any, ...]] = []

    def note(batch_id: int, gate_pass: Any) -> None:
        asked.append((batch_id, gate_pass.partitions, gate_pass.lease.partitions))

    return asked, BatchHooks(before_merge=note)


def test_commit_lease_names_exactly_the_batch_partitions_and_the_merge_prunes(
    spark, tmp_path, lakelock_server
):
    config = ingest_config(
        spark, tmp_path, lakelock_server, "scope_names", available_now=True, max_files_per_trigger=2
    )
    cold, hot = cold_events(41), hot_events(42)
    cold.write_file(config.landing_path, 10)
    hot.write_file(config.landing_path, 10)  # one batch of both files: two partitions
    asked, hooks = leases_asked()

    records = run(config, spark=spark, hooks=hooks).wait(timeout=WAIT_S)

    spec = read_spec(spark, config.table)
    names = table_partition_names(spark, config.table, spec)  # the `partitions` table's names
    assert names == [COLD, HOT]
    assert asked == [(0, (COLD, HOT), (COLD, HOT))]  # byte-identical, asked and granted
    assert [(r.outcome, r.scope) for r in records] == [("committed", [COLD, HOT])]
    assert table_rows(spark, config.table) == expected(cold, hot)

    # the filter the gate adds to the MERGE reaches Iceberg's scan: only the hot partition
    spark.table(config.table).where("hr = 12").limit(1).createOrReplaceTempView("one_hot_row")
    values = batch_partition_values(spark.table("one_hot_row"), spec, catalog="local")
    statement = merge_sql(
        target=config.table,
        source="one_hot_row",
        key_columns=config.key_columns,
        event_time_column=config.event_time_column,
        partition_filter=partition_predicate(spec, values, catalog="local"),
    )
    plan = spark.sql("EXPLAIN " + statement).collect()[0][0]
    scan = next(line for line in plan.splitlines() if "BatchScan " + config.table in line)
    assert "dt = 19844" in scan and "hr = 12" in scan, scan  # 19844: days to 2024-05-01


def test_maintenance_on_a_cold_partition_does_not_hold_hot_ingest(
    spark, tmp_path, lakelock_server, operator
):
    config = ingest_config(spark, tmp_path, lakelock_server, "scope_cold")
    cold, hot = cold_events(43), hot_events(44)
    cold.write_file(config.landing_path, 10)
    asked, hooks = leases_asked()
    handle = run(config, spark=spark, hooks=hooks)
    try:
        assert handle.writer.wait_for(1, timeout=WAIT_S)
        lease = maintenance_on(operator, config.table, [COLD])
        for _ in range(3):
            hot.write_file(config.landing_path, 10)
        # three hot batches commit while the cold partition's maintenance lease is live
        assert handle.writer.wait_for(4, timeout=WAIT_S)
        state = operator.state(config.table)
        operator.release(lease)
    finally:
        handle.stop()

    records = handle.records
    assert [(r.outcome, r.scope) for r in records] == [("committed", [COLD])] + [
        ("committed", [HOT])
    ] * 3
    assert all(r.wait_reasons == [] for r in records)
    assert [m["lease_id"] for m in state["maintenance_leases"]] == [lease.lease_id]
    assert [p for _, p, _ in asked] == [(COLD,), (HOT,), (HOT,), (HOT,)]
    assert len(snapshots(spark, config.table)) == 4
    assert table_rows(spark, config.table) == expected(cold, hot)


def test_maintenance_on_a_partition_the_batch_writes_holds_it_until_release(
    spark, tmp_path, lakelock_server, operator
):
    config = ingest_config(spark, tmp_path, lakelock_server, "scope_hot")
    cold, hot = cold_events(45), hot_events(46)
    cold.write_file(config.landing_path, 10)
    handle = run(config, spark=spark)
    try:
        assert handle.writer.wait_for(1, timeout=WAIT_S)
        lease = maintenance_on(operator, config.table, [HOT])
        hot.write_file(config.landing_path, 10)
        deadline = time.monotonic() + WAIT_S
        while handle.writer.in_progress != (1, "gate"):
            assert time.monotonic() < deadline, "the hot batch never reached the gate"
            assert handle.query.isActive, handle.query.exception()
            time.sleep(0.1)
        # the gate's ask waits at the service: released now, it is answered by the release
        wait_held_at_the_service(lakelock_server)
        assert len(snapshots(spark, config.table)) == 1  # only the cold batch so far
        released_ms = time.time() * 1000
        operator.release(lease)
        assert handle.writer.wait_for(2, timeout=WAIT_S)
    finally:
        handle.stop()

    hot_batch = handle.records[1]
    assert (hot_batch.outcome, hot_batch.scope) == ("committed", [HOT])
    assert "maintenance" in hot_batch.wait_reasons
    committed_ms = [s["committed_at"].timestamp() * 1000 for s in snapshots(spark, config.table)]
    assert committed_ms[1] >= released_ms
    assert table_rows(spark, config.table) == expected(cold, hot)


def test_key_without_partition_columns_leases_the_whole_table_and_says_why_once(
    spark, tmp_path, lakelock_server, caplog
):
    config = ingest_config(
        spark,
        tmp_path,
        lakelock_server,
        "scope_fallback",
        available_now=True,
        key_columns=["event_id"],
    )
    cold, hot = cold_events(47), hot_events(48)
    cold.write_file(config.landing_path, 10)
    hot.write_file(config.landing_path, 10)
    asked, hooks = leases_asked()

    with caplog.at_level(logging.WARNING, logger="ingest_gate.job.run"):
        records = run(config, spark=spark, hooks=hooks).wait(timeout=WAIT_S)

    assert [(r.outcome, r.scope) for r in records] == [("committed", "table")] * 2
    assert asked == [(0, None, None), (1, None, None)]
    reasons = [r.getMessage() for r in caplog.records if "cover the whole table" in r.getMessage()]
    assert reasons == [
        "commit leases on local.db.scope_fallback cover the whole table, not partitions: "
        "merge key (event_id) lacks partition source columns dt, hr: a batch row could match "
        "a row in another partition"
    ]
    assert table_rows(spark, config.table) == expected(cold, hot)

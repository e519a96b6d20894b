"""One compactor process over many tables: patterns, the rank (no Spark job for a healthy
table), what it remembers between ticks, claims; and two processes sharing one lake."""

from __future__ import annotations

import json
import os
import subprocess
from collections import defaultdict
from datetime import timedelta
from pathlib import Path

import pytest

from compactor.catalog import read_summary, spark_jobs
from compactor.config import CompactorConfig, FleetConfig
from compactor.fleet import Fleet
from compactor.report import Outcome
from tests.spark.conftest import lease_intervals
from tests.support.helpers import HANG_GUARD_S, installed, unactivated_env

pytestmark = pytest.mark.spark

ROOT = Path(__file__).resolve().parents[2]


def create(spark, table: str, *, files: int = 1, deletes: bool = False) -> str:
    """A merge-on-read v2 table partitioned by day: `files` small data files of two rows in
    one partition (one INSERT of as many slices, no write distribution), and with `deletes` a
    DELETE of one row that writes one position delete file."""
    spark.sql(
        f"""
        CREATE TABLE {table} (id BIGINT, dt DATE, payload STRING) USING iceberg
        PARTITIONED BY (dt)
        TBLPROPERTIES ('format-version' = '2', 'write.delete.mode' = 'merge-on-read',
                       'write.update.mode' = 'merge-on-read',
                       'write.merge.mode' = 'merge-on-read',
                       'write.delete.granularity' = 'file',
                       'write.distribution-mode' = 'none')
        """
    )
    if files:
        spark.sql(
            f"INSERT INTO {table} SELECT id, DATE '2024-05-01', sha2(CAST(id AS STRING), 256) "
            f"FROM range(0, {2 * files}, 1, {files})"
        )
    if deletes:
        spark.sql(f"DELETE FROM {table} WHERE id = 0")
    return table


def debt_table(spark, table: str) -> str:
    """A table a plan compacts: 12 small files in one partition and a position delete."""
    return create(spark, table, files=12, deletes=True)


def fleet(spark, client, selection, **fleet_values) -> Fleet:
    values = {"max_concurrent": 2, "claim_ttl": timedelta(seconds=15), **fleet_values}
    config = CompactorConfig(fleet=FleetConfig(**values))
    return Fleet(spark, client=client, config=config, selection=selection)


def test_the_job_counter_counts_jobs(spark):
    create(spark, "local.counted.t")
    before = spark_jobs(spark)
    spark.sql("SELECT count(*) FROM local.counted.t WHERE payload > ''").collect()
    assert spark_jobs(spark) > before


def test_a_tick_over_healthy_tables_starts_no_spark_job(spark, job_client, operator):
    names = [create(spark, f"local.healthy.t{i}", files=2) for i in range(8)]
    create(spark, "local.healthy.empty", files=0)
    the_fleet = fleet(spark, job_client, ["local.healthy.*"])

    before = spark_jobs(spark)
    tick = the_fleet.tick()

    assert spark_jobs(spark) == before
    assert tick.rank_spark_jobs == 0
    assert (tick.tables, tick.healthy, tick.queued) == (9, 9, [])
    assert tick.outcomes == {} and tick.exit_code == 0
    for name in names:
        assert job_client.runs(name) == []
        assert operator.events(table=name) == []


def test_reading_a_summary_starts_no_spark_job_and_sees_the_last_commit(spark):
    table = create(spark, "local.summary.t", files=3, deletes=True)

    before = spark_jobs(spark)
    summary = read_summary(spark, table)

    assert spark_jobs(spark) == before
    assert (summary.data_files, summary.delete_files, summary.records) == (3, 1, 6)
    assert summary.snapshots == 2
    current = spark.sql(f"SELECT snapshot_id FROM {table}.refs WHERE name = 'main'").first()[0]
    assert summary.snapshot_id == current


def test_a_pattern_picks_up_new_tables_at_the_next_tick_and_plans_only_those_with_debt(
    spark, job_client
):
    create(spark, "local.grow.a", files=2)
    the_fleet = fleet(spark, job_client, ["local.grow.*"])
    first = the_fleet.tick()
    debt = debt_table(spark, "local.grow.b")

    second = the_fleet.tick()
    third = the_fleet.tick()

    assert (first.tables, first.queued) == (1, [])
    assert (second.tables, second.queued) == (2, [debt])
    assert second.outcomes == {debt: str(Outcome.COMPACTED)}
    # compacted: its summary is healthy now, and reading it cost no job
    assert (third.tables, third.queued, third.rank_spark_jobs) == (2, [], 0)
    assert [r["outcome"] for r in job_client.runs(debt)] == ["compacted"]
    # the service holds the debt the run left: one data file, no delete file
    reported = job_client.state(debt)["debt"]
    current = spark.sql(f"SELECT snapshot_id FROM {debt}.refs WHERE name = 'main'").first()[0]
    assert reported["snapshot_id"] == current
    assert (reported["data_files"], reported["small_files"], reported["delete_files"]) == (1, 1, 0)
    assert reported["partitions_over_target"] == 0 and reported["records"] == 23


def test_a_plan_that_found_nothing_is_not_repeated_until_the_snapshot_changes(spark, job_client):
    # one delete file over 8 data files: below every threshold of the planner
    table = create(spark, "local.quiet.t", files=8, deletes=True)
    the_fleet = fleet(spark, job_client, ["local.quiet.t"])

    planned = the_fleet.tick()
    before = spark_jobs(spark)
    unchanged = the_fleet.tick()
    jobs_unchanged = spark_jobs(spark) - before
    spark.sql(f"INSERT INTO {table} VALUES (100, DATE '2024-05-01', 'new')")  # a new snapshot
    changed = the_fleet.tick()

    assert planned.queued == [table] and planned.outcomes == {table: "skipped"}
    assert unchanged.queued == [] and jobs_unchanged == 0
    assert changed.queued == [table]
    assert [r["outcome"] for r in job_client.runs(table)] == ["skipped", "skipped"]


def test_a_table_claimed_elsewhere_is_left_to_its_holder_at_once(spark, job_client, operator):
    table = debt_table(spark, "local.held.t")
    other = job_client.claim(table, holder="compactor@elsewhere:1", ttl_s=30)
    try:
        tick = fleet(spark, job_client, ["local.held.*"]).tick()
    finally:
        job_client.release(other)

    assert tick.queued == [table]
    assert tick.left_to_others == {table: "compactor@elsewhere:1"}
    assert tick.outcomes == {} and tick.exit_code == 0
    assert not [e for e in operator.events(table=table) if e["kind"] == "maintenance"]


def test_at_most_max_concurrent_tables_run_at_once(spark, job_client, operator):
    tables = [debt_table(spark, f"local.busy.t{i}") for i in range(3)]

    tick = fleet(spark, job_client, ["local.busy.*"], max_concurrent=2).tick()

    assert tick.outcomes == {t: str(Outcome.COMPACTED) for t in tables}
    claims = [interval for t in tables for interval in lease_intervals(operator, t, "claim")]
    assert len(claims) == 3
    assert max_overlap(claims) <= 2
    for table in tables:
        # the claim covers the plan and every maintenance lease of the run
        (claim,) = lease_intervals(operator, table, "claim")
        maintenance = lease_intervals(operator, table, "maintenance")
        assert maintenance
        assert all(claim[0] < m[0] and m[1] <= claim[1] for m in maintenance)


# -- two processes ---------------------------------------------------------------------------


def max_overlap(intervals: list[tuple]) -> int:
    points = sorted([(s, 1) for s, _, _ in intervals] + [(e, -1) for _, e, _ in intervals])
    live = most = 0
    for _, step in points:
        live += step
        most = max(most, live)
    return most


def overlapping_other_holders(intervals: list[tuple]) -> list[tuple]:
    return [
        (a, b)
        for i, a in enumerate(intervals)
        for b in intervals[i + 1 :]
        if a[2] != b[2] and a[0] < b[1] and b[0] < a[1]
    ]


def test_two_processes_on_one_pattern_compact_each_table_with_debt_exactly_once(
    spark, spark_warehouse, lakelock_server, operator, tmp_path
):
    debts = [debt_table(spark, f"local.duo.d{i}") for i in range(6)]
    healthy = [create(spark, f"local.duo.h{i}", files=2) for i in range(2)]
    config = tmp_path / "compactor.toml"
    config.write_text(
        f"""
        [service]
        url = "{lakelock_server.url}"
        [catalog]
        name = "local"
        warehouse = "{spark_warehouse}"
        [spark]
        master = "local[1]"
        [fleet]
        max_concurrent = 2
        claim_ttl = "20s"
        [[tables]]
        name = "local.duo.*"
        lease = {{ ttl = "20s" }}
        """
    )
    env = unactivated_env(LAKELOCK_TOKEN=lakelock_server.token("job"))
    logs = [tmp_path / f"compactor-{i}.log" for i in range(2)]
    processes = [
        subprocess.Popen(
            [installed("lakelock-compactor"), "run", "--once", "--config", str(config)],
            cwd=tmp_path,
            env=env,
            stdout=log.open("wb"),
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        for log in logs
    ]
    try:
        codes = [p.wait(HANG_GUARD_S * 2) for p in processes]
    finally:
        for p in processes:
            if p.poll() is None:
                os.killpg(p.pid, 9)
                p.wait()
    assert codes == [0, 0], "\n".join(log.read_text()[-3000:] for log in logs)

    ticks = [tick_line(log) for log in logs]
    compacted = defaultdict(list)
    for i, tick in enumerate(ticks):
        for table, outcome in tick["outcomes"].items():
            if outcome == "compacted":
                compacted[table].append(i)
    # every table with debt compacted, each by one process once
    assert sorted(compacted) == debts
    assert all(len(by) == 1 for by in compacted.values()), compacted
    # a table the other process held is named with its holder
    left = {t: h for tick in ticks for t, h in tick["left_to_others"].items()}
    assert all(h and h.startswith("compactor@") for h in left.values())
    for table in debts + healthy:
        claims = lease_intervals(operator, table, "claim")
        maintenance = lease_intervals(operator, table, "maintenance")
        assert not overlapping_other_holders(claims), (table, claims)
        assert not overlapping_other_holders(maintenance), (table, maintenance)
        # the Iceberg side: one compaction run's snapshots, no second
        runs = {
            r["summary"].get("lakelock.run-uid")
            for r in spark.sql(
                f"SELECT summary FROM {table}.snapshots WHERE operation = 'replace'"
            ).collect()
        }
        assert len(runs) == (1 if table in debts else 0), (table, runs)
    for table in healthy:
        assert lease_intervals(operator, table, "claim") == []


def tick_line(log: Path) -> dict:
    """The `compactor.tick` JSON line of a compactor's log."""
    for line in log.read_text().splitlines():
        if '"event": "compactor.tick"' in line:
            return json.loads(line[line.index("{") :])
    raise AssertionError(f"no tick line in {log}:\n{log.read_text()[-3000:]}")

"""The compactor on local Spark and the real Iceberg runtime, against a real lakelock service."""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import threading
import time
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from compactor.config import LeaseConfig, PlanConfig, TableConfig
from compactor.job import run_once, run_scheduled
from compactor.procedure_config import ExpireSnapshotsConfig, RewriteDataFilesConfig
from compactor.report import Outcome, publish
from compactor.run import run_table
from service.client import LeaseClient
from service.wire.errors import Locked, NotFound
from tests.support.helpers import backdate, installed, unactivated_env, wait_until

pytestmark = pytest.mark.spark

ROOT = Path(__file__).resolve().parents[2]
WAIT_S = 60  # generous bound for anything the service or a tiny Spark job does here


def make_table(spark, name: str, *, days: int = 3, commits: int = 3, deletes: bool = True) -> str:
    """A merge-on-read v2 table with many small data files and file-scoped position deletes.

    Each commit writes one file per partition from each of four input slices (no write
    distribution), so a few commits make dozens of small files.
    """
    table = f"local.db.{name}"
    spark.sql(
        f"""
        CREATE TABLE {table} (event_id BIGINT, dt DATE, hr INT, payload STRING)
        USING iceberg PARTITIONED BY (dt)
        TBLPROPERTIES ('format-version' = '2',
                       'write.merge.mode' = 'merge-on-read',
                       'write.update.mode' = 'merge-on-read',
                       'write.delete.mode' = 'merge-on-read',
                       'write.delete.granularity' = 'file',
                       'write.distribution-mode' = 'none')
        """
    )
    rows = 200
    for i in range(commits):
        spark.sql(
            f"""
            INSERT INTO {table}
            SELECT id, date_add(DATE '2024-05-01', CAST(id % {days} AS INT)),
                   CAST(id % 24 AS INT), sha2(CAST(id AS STRING), 256)
            FROM range({i * rows}, {(i + 1) * rows}, 1, 4)
            """
        )
    if deletes:
        # merge-on-read: one position delete file per data file it touches
        spark.sql(
            f"""
            MERGE INTO {table} t
            USING (SELECT id AS event_id FROM range(0, {commits * rows}, 7)) s
            ON t.event_id = s.event_id
            WHEN MATCHED AND t.event_id % 2 = 0 THEN DELETE
            WHEN MATCHED THEN UPDATE SET t.payload = 'updated'
            """
        )
    return table


def table_config(table: str, **overrides) -> TableConfig:
    return replace(
        TableConfig(table, lease=LeaseConfig(ttl=timedelta(seconds=15))),
        **overrides,
    )


def rows(spark, table: str) -> list[tuple]:
    return sorted(tuple(r) for r in spark.table(table).collect())


def file_counts(spark, table: str) -> dict[int, int]:
    counts = spark.sql(f"SELECT content, count(*) AS n FROM {table}.files GROUP BY content")
    return {r["content"]: r["n"] for r in counts.collect()}


def current_snapshot(spark, table: str) -> int:
    return spark.sql(f"SELECT snapshot_id FROM {table}.refs WHERE name = 'main'").first()[0]


def lease_events(operator: LeaseClient, table: str) -> list[str]:
    return [
        e["event"]
        for e in operator.events(table=table, limit=200)
        if e["event"].startswith(("lease.", "intent."))
    ]


def test_compaction_leaves_few_data_files_no_delete_files_and_the_same_rows(
    spark, job_client, operator
):
    table = make_table(spark, "events")
    before_rows = rows(spark, table)
    before = file_counts(spark, table)
    assert before[0] >= 36 and before[1] >= 30  # many small data files, many delete files

    report = run_table(spark, client=job_client, config=table_config(table))
    run_id = publish(report, client=job_client)

    assert report.outcome == Outcome.COMPACTED, report.error
    after = file_counts(spark, table)
    assert after.get(0, 0) <= 3  # one per partition
    assert after.get(1, 0) == 0
    assert rows(spark, table) == before_rows
    totals = report.totals()
    assert totals["rewritten_data_files"] == before[0]
    assert report.before["data_files"] == before[0]
    assert report.after["data_files"] == after[0]
    assert report.after["delete_files"] == 0
    assert report.hold_s is not None and report.lease_wait_s is not None
    # the commits carry the fencing token and the lease id
    summary = spark.sql(
        f"SELECT summary FROM {table}.snapshots WHERE operation = 'replace' ORDER BY committed_at"
    ).collect()
    assert summary, "no replace snapshot"
    for row in summary:
        assert row["summary"]["lakelock.token"] == str(report.token)
        assert row["summary"]["lakelock.lease-id"] == report.lease_id
    # the service keeps the report, and the lease was released
    stored = job_client.runs(table)[0]
    assert stored["run_id"] == run_id
    assert stored["run_uid"] == report.run_uid
    assert stored["outcome"] == "compacted"
    assert stored["summary"]["rewritten_data_files"] == before[0]
    assert job_client.state(table)["maintenance_lease"] is None
    assert "lease.released" in lease_events(operator, table)


def test_recent_days_rewrite_only_recent_partitions_sorted_as_configured(spark, job_client):
    table = make_table(spark, "recent", days=3, commits=2)  # dt 2024-05-01 .. 2024-05-03
    before_rows = rows(spark, table)
    config = table_config(
        table,
        plan=PlanConfig(recent_days=1),
        rewrite_data_files=RewriteDataFilesConfig(strategy="sort", sort_order="event_id DESC"),
    )

    report = run_table(
        spark,
        client=job_client,
        config=config,
        now=lambda: datetime(2024, 5, 3, 12, 0, tzinfo=UTC),
    )

    assert report.outcome == Outcome.COMPACTED, report.error
    assert report.where == "dt >= '2024-05-02'"
    per_day = spark.sql(
        f"SELECT CAST(partition.dt AS STRING) AS dt, count(*) AS n FROM {table}.files "
        "WHERE content = 0 GROUP BY 1"
    ).collect()
    files = {r["dt"]: r["n"] for r in per_day}
    assert files["2024-05-02"] == files["2024-05-03"] == 1
    assert files["2024-05-01"] >= 5  # out of scope: left as it was
    assert rows(spark, table) == before_rows


def test_a_healthy_table_is_skipped_without_taking_a_lease(spark, job_client, operator):
    table = make_table(spark, "healthy", days=1, commits=1, deletes=False)
    snapshot = current_snapshot(spark, table)

    report = run_table(spark, client=job_client, config=table_config(table))

    assert report.outcome == Outcome.SKIPPED
    assert report.reason == "below_thresholds"
    assert report.lease_id is None
    assert lease_events(operator, table) == []
    assert current_snapshot(spark, table) == snapshot


def test_no_commit_lease_is_granted_during_the_run_and_one_is_after(spark, job_client):
    table = make_table(spark, "held", commits=2)
    refusals: list[str] = []

    def try_commit(step) -> None:
        with pytest.raises(Locked) as caught:
            job_client.acquire_commit(table, holder="ingest-probe", ttl_s=5)
        refusals.append(f"{step.procedure}:{caught.value.extra.get('reason')}")

    report = run_table(spark, client=job_client, config=table_config(table), before_step=try_commit)

    assert report.outcome == Outcome.COMPACTED, report.error
    assert refusals == [
        "rewrite_data_files:maintenance",
        "rewrite_position_delete_files:maintenance",
    ]
    lease = job_client.acquire_commit(table, holder="ingest-probe", ttl_s=5)
    job_client.release(lease)


def test_the_run_waits_for_in_flight_commits_and_blocks_new_ones_meanwhile(spark, job_client):
    table = make_table(spark, "drained", commits=2)
    in_flight = job_client.acquire_commit(table, holder="ingest-1", ttl_s=30)
    reports = []
    runner = threading.Thread(
        target=lambda: reports.append(
            run_table(spark, client=job_client, config=table_config(table))
        )
    )
    runner.start()
    try:
        deadline = time.monotonic() + WAIT_S
        while job_client.state(table)["intent"] is None and time.monotonic() < deadline:
            time.sleep(0.05)
        with pytest.raises(Locked) as caught:
            job_client.acquire_commit(table, holder="ingest-2", ttl_s=5)
        assert caught.value.extra["reason"] == "intent"
        assert runner.is_alive() and not reports  # no lease while a commit is in flight
    finally:
        job_client.release(in_flight)
    runner.join(WAIT_S * 2)

    assert reports[0].outcome == Outcome.COMPACTED, reports[0].error
    assert reports[0].lease_wait_s > 0


def test_a_run_is_skipped_when_maintenance_is_off_held_or_commits_do_not_drain(
    spark, job_client, operator
):
    table = make_table(spark, "contended", commits=2)
    snapshot = current_snapshot(spark, table)
    config = table_config(table)

    operator.set_switch(table, maintenance="disabled", reason="test: freeze")
    off = run_table(spark, client=job_client, config=config)
    operator.set_switch(table, maintenance="enabled", reason="test: thaw")

    other = job_client.acquire_maintenance(table, holder="compactor-other", ttl_s=30)
    held = run_table(spark, client=job_client, config=config)
    job_client.release(other)

    in_flight = job_client.acquire_commit(table, holder="ingest-slow", ttl_s=30)
    short_wait = replace(config, lease=LeaseConfig(max_wait=timedelta(seconds=1)))
    undrained = run_table(spark, client=job_client, config=short_wait)
    job_client.release(in_flight)

    assert (off.outcome, off.reason) == (Outcome.SKIPPED, "maintenance_off")
    assert (held.outcome, held.reason) == (Outcome.SKIPPED, "maintenance_held")
    assert (undrained.outcome, undrained.reason) == (Outcome.SKIPPED, "drain_timeout")
    assert "1 commit lease(s) still in flight" in undrained.error
    assert current_snapshot(spark, table) == snapshot


def test_a_stop_ends_a_runs_wait_for_the_drain_and_withdraws_its_intent(
    spark, job_client, operator
):
    """A compactor stopping (SIGTERM on a container) while a run waits for in-flight commits
    to drain does not wait out `lease.max_wait`: the run ends `stopped`, its groups left for the
    next run, its intent withdrawn so ingest is not held by it."""
    table = make_table(spark, "stopped", commits=2)
    snapshot = current_snapshot(spark, table)
    in_flight = job_client.acquire_commit(table, holder="ingest-slow", ttl_s=60)
    long_wait = replace(table_config(table), lease=LeaseConfig(max_wait=timedelta(minutes=10)))
    stop, reports = threading.Event(), []
    runner = threading.Thread(
        target=lambda: reports.append(
            run_table(spark, client=job_client, config=long_wait, stop=stop)
        ),
        daemon=True,
    )
    runner.start()
    wait_until(lambda: operator.state(table)["intents"], "the run's drain to begin")
    stop.set()
    runner.join(WAIT_S)
    assert [(r.outcome, r.reason) for r in reports] == [(Outcome.SKIPPED, "stopped")]
    assert reports[0].left_for_next_run and None not in reports[0].left_for_next_run
    assert operator.state(table)["intents"] == []
    # ingest is not held by the stopped run: a new commit lease is granted at once
    job_client.release(job_client.acquire_commit(table, holder="ingest-next", ttl_s=30))
    job_client.release(in_flight)
    assert current_snapshot(spark, table) == snapshot


def test_a_stop_before_a_run_whose_steps_take_no_lease_skips_it(spark, job_client, operator):
    """A plan with nothing to rewrite, only snapshots to expire (a step without a lease), and
    the compactor stopping as it starts: the run ends skipped (`stopped`), expiring nothing."""
    table = "local.db.stopped_unleased"
    spark.sql(
        f"CREATE TABLE {table} (id BIGINT, dt DATE) USING iceberg PARTITIONED BY (dt) "
        "TBLPROPERTIES ('format-version'='2')"
    )
    for i in range(8):
        spark.sql(f"INSERT INTO {table} VALUES ({i}, DATE'2024-06-20')")
    snapshots = spark.sql(f"SELECT snapshot_id FROM {table}.snapshots").count()
    config = table_config(
        table,
        plan=PlanConfig(max_snapshots=1),
        expire_snapshots=ExpireSnapshotsConfig(older_than=timedelta(days=1), retain_last=5),
    )
    ahead = lambda: datetime.now(UTC) + timedelta(days=6)  # noqa: E731
    stop = threading.Event()
    stop.set()

    report = run_table(spark, client=job_client, config=config, now=ahead, stop=stop)

    assert report.plan_reasons and not report.groups, "a plan of unleased steps only"
    assert (report.outcome, report.reason) == (Outcome.SKIPPED, "stopped"), report.error
    assert report.steps == []
    assert spark.sql(f"SELECT snapshot_id FROM {table}.snapshots").count() == snapshots
    assert lease_events(operator, table) == []


def test_an_unreachable_service_means_no_compaction(spark):
    table = make_table(spark, "unreachable", commits=2)
    snapshot = current_snapshot(spark, table)
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        closed_port = sock.getsockname()[1]  # nothing listens once the socket is closed
    with LeaseClient(f"http://127.0.0.1:{closed_port}", retries=1, backoff_s=0.01) as client:
        report = run_table(spark, client=client, config=table_config(table))

    assert report.outcome == Outcome.UNAVAILABLE
    assert report.lease_id is None
    assert current_snapshot(spark, table) == snapshot


def test_a_failing_procedure_releases_the_lease_and_reports_icebergs_message(
    spark, job_client, operator
):
    table = make_table(spark, "failing", commits=2)
    snapshot = current_snapshot(spark, table)
    broken = RewriteDataFilesConfig(strategy="sort", sort_order="no_such_column ASC")

    report = run_table(
        spark, client=job_client, config=table_config(table, rewrite_data_files=broken)
    )

    assert report.outcome == Outcome.FAILED
    assert "no_such_column" in report.error
    assert report.lease_id is not None
    assert current_snapshot(spark, table) == snapshot
    assert job_client.state(table)["maintenance_lease"] is None
    assert lease_events(operator, table)[0] == "lease.released"  # newest first
    lease = job_client.acquire_commit(table, holder="ingest-probe", ttl_s=5)
    job_client.release(lease)


# A lease revoked while its rewrite runs (its Spark jobs cancelled, nothing committed) is
# tests/spark/test_cluster.py's claim, on a cluster's executors.


def test_a_lease_revoked_between_procedures_stops_the_run_before_the_next(
    spark, job_client, operator
):
    table = make_table(spark, "between", commits=2)

    def revoke_after_the_data_rewrite(step) -> None:
        if step.procedure == "rewrite_position_delete_files":
            lease_id = job_client.state(table)["maintenance_lease"]["lease_id"]
            operator.revoke(lease_id, reason="test: operator takes the table back")

    report = run_table(
        spark,
        client=job_client,
        config=table_config(table),
        before_step=revoke_after_the_data_rewrite,
    )

    assert report.outcome == Outcome.LEASE_LOST
    assert [s["procedure"] for s in report.steps] == ["rewrite_data_files"]
    operations = [
        r["operation"]
        for r in spark.sql(
            f"SELECT operation FROM {table}.snapshots ORDER BY committed_at"
        ).collect()
    ]
    assert operations.count("replace") == 1  # the data rewrite; no delete-file rewrite after it
    assert file_counts(spark, table).get(1, 0) > 0


def test_retention_below_its_floor_is_refused_before_any_lease(spark, job_client, operator):
    table = make_table(spark, "refused", commits=2)
    expire = ExpireSnapshotsConfig(older_than=timedelta(minutes=30))

    report = run_table(
        spark, client=job_client, config=table_config(table, expire_snapshots=expire)
    )

    assert report.outcome == Outcome.REFUSED
    assert "expire_snapshots.older_than=30m is below the floor of 24h" in report.error
    assert lease_events(operator, table) == []


def test_once_mode_exits_non_zero_when_a_run_fails_or_is_refused(spark, job_client):
    healthy = make_table(spark, "once", days=1, commits=1, deletes=False)
    refusing = table_config(healthy, expire_snapshots=ExpireSnapshotsConfig(retain_last=1))

    assert run_once(spark, client=job_client, tables=[table_config(healthy)]) == 0
    assert run_once(spark, client=job_client, tables=[table_config("local.db.nope")]) == 1
    assert run_once(spark, client=job_client, tables=[refusing]) == 2
    assert job_client.runs("local.db.nope")[0]["outcome"] == "failed"


def test_scheduled_mode_reports_a_failed_table_and_goes_on_ticking(spark, job_client, operator):
    healthy = make_table(spark, "ticking", days=1, commits=1, deletes=False)
    missing = "local.db.no_such_table"

    ticks = run_scheduled(
        spark,
        client=job_client,
        tables=[table_config(missing), table_config(healthy)],
        every_s=0.2,
        stop=threading.Event(),
        ticks=2,
    )

    assert ticks == 2
    failed = job_client.runs(missing)
    assert [r["outcome"] for r in failed] == ["failed", "failed"]
    assert "no_such_table" in failed[0]["error"]
    # healthy by its summary: never planned, nothing reported, no lease
    assert job_client.runs(healthy) == []
    assert lease_events(operator, healthy) == []


def test_plan_command_prints_the_decision_and_touches_nothing(
    spark, spark_warehouse, operator, tmp_path
):
    table = make_table(spark, "planned", commits=2)
    snapshot = current_snapshot(spark, table)

    result = subprocess.run(
        [
            installed("lakelock-compactor"),
            "plan",
            "--table",
            table,
            "--warehouse",
            str(spark_warehouse),
            "--master",
            "local[1]",
        ],
        cwd=tmp_path,
        env=unactivated_env(),
        capture_output=True,
        text=True,
        timeout=300,
    )

    assert result.returncode == 0, result.stderr[-3000:]
    assert result.stdout.startswith(f"{table}: run (incremental)")
    assert "step: rewrite_data_files" in result.stdout
    assert current_snapshot(spark, table) == snapshot
    assert lease_events(operator, table) == []


def test_a_killed_compactor_loses_its_lease_after_the_ttl(
    spark, spark_warehouse, lakelock_server, job_client, tmp_path
):
    table = make_table(spark, "killed", days=3, commits=2)
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
        [[tables]]
        name = "{table}"
        lease = {{ ttl = "30s" }}
        rewrite_data_files = {{ options = {{ "max-concurrent-file-group-rewrites" = 1 }} }}
        """
    )
    log = (tmp_path / "compactor.log").open("wb")
    env = unactivated_env(LAKELOCK_TOKEN=lakelock_server.token("job"))
    process = subprocess.Popen(
        [installed("lakelock-compactor"), "run", "--once", "--config", str(config)],
        cwd=tmp_path,
        env=env,
        stdout=log,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    try:
        deadline = time.monotonic() + 240
        lease = None
        while lease is None and process.poll() is None and time.monotonic() < deadline:
            # NotFound: the compactor has not asked for its lease yet, the table is unknown
            with contextlib.suppress(NotFound):
                lease = job_client.state(table)["maintenance_lease"]
            time.sleep(0.05)
        assert lease is not None, (tmp_path / "compactor.log").read_text()[-3000:]
        # the whole process group: the Python driver and the Spark JVM it started
        os.killpg(process.pid, signal.SIGKILL)
        process.wait(WAIT_S)
    finally:
        if process.poll() is None:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait(WAIT_S)
        log.close()

    # nobody renews it now, yet it holds the table until its TTL runs out
    with pytest.raises(Locked):
        job_client.acquire_commit(table, holder="ingest-probe", ttl_s=5)
    # its 30 s run out at once (a killed holder's lease is only ever let go by its expiry),
    # which the service judges by itself
    backdate(lakelock_server.db_url, {**lease, "kind": "maintenance"}, seconds=60)
    commit = None
    deadline = time.monotonic() + WAIT_S
    while commit is None and time.monotonic() < deadline:
        try:
            commit = job_client.acquire_commit(table, holder="ingest-probe", ttl_s=5, wait_s=1)
        except Locked:
            time.sleep(0.2)
    assert commit is not None and commit.kind == "commit"
    job_client.release(commit)
    grant = job_client.acquire_maintenance(table, holder="compactor-next", ttl_s=5)
    assert grant.token > lease["token"]
    job_client.release(grant)


def test_expiry_keeps_a_live_readers_snapshot_and_the_later_ones_until_it_lets_go(
    spark, job_client
):
    """A job streaming out of the table holds its position (snapshot 3 of 8); the compactor's
    expire_snapshots (run with its clock six days ahead, so every snapshot is past the 1-day
    age and only `retain_last` 5 and the reader keep any) leaves snapshot 3 and removes the two
    before it; once the reader lets go, snapshot 3 goes too."""
    table = "local.db.read_out"
    spark.sql(
        f"CREATE TABLE {table} (id BIGINT) USING iceberg TBLPROPERTIES ('format-version'='2')"
    )
    for i in range(8):
        spark.sql(f"INSERT INTO {table} VALUES ({i})")

    def snapshot_ids() -> list[int]:
        found = spark.sql(f"SELECT snapshot_id FROM {table}.snapshots ORDER BY committed_at")
        return [r[0] for r in found.collect()]

    ids = snapshot_ids()
    config = table_config(
        table,
        plan=PlanConfig(max_snapshots=1, min_small_files=1000),
        expire_snapshots=ExpireSnapshotsConfig(older_than=timedelta(days=1), retain_last=5),
    )
    ahead = lambda: datetime.now(UTC) + timedelta(days=6)  # noqa: E731
    job_client.hold_reader(table, "summary@test", snapshot_id=ids[2], ttl_s=300)

    held = run_table(spark, client=job_client, config=config, now=ahead)
    assert held.outcome is Outcome.COMPACTED, held.error
    assert snapshot_ids() == ids[2:]  # the reader's and every later one
    (step,) = [s for s in held.steps if s["procedure"] == "expire_snapshots"]
    assert "keeping 6 for readers" in step["reason"]

    assert job_client.release_reader(table, "summary@test")
    released = run_table(spark, client=job_client, config=config, now=ahead)
    assert released.outcome is Outcome.COMPACTED, released.error
    assert snapshot_ids() == ids[3:]  # the last five


def test_a_streaming_reader_followed_by_its_hold_stands_at_the_snapshot_it_read_to(
    spark, job_client, tmp_path
):
    """jobkit.reader.follow: a query reading the table (`readStream.format("iceberg")`)
    advances its hold after each batch to the end snapshot it read."""
    from jobkit.reader import follow
    from service.client import ReaderLease

    table = "local.db.read_stream"
    spark.sql(f"CREATE TABLE {table} (id BIGINT) USING iceberg")
    for i in range(3):
        spark.sql(f"INSERT INTO {table} VALUES ({i})")
    current = current_snapshot(spark, table)
    with ReaderLease(job_client, table, "follower", ttl_s=300) as hold:
        query = (
            spark.readStream.format("iceberg")
            .load(table)
            .writeStream.foreachBatch(lambda batch, batch_id: batch.count())
            .option("checkpointLocation", str(tmp_path / "checkpoint"))
            .trigger(availableNow=True)
            .start()
        )
        listener = follow(spark, query, hold)
        try:
            query.awaitTermination(WAIT_S)
            deadline = time.monotonic() + WAIT_S  # progress events arrive after the batch
            while hold.snapshot_id != current and time.monotonic() < deadline:
                time.sleep(0.1)
        finally:
            spark.streams.removeListener(listener)
        (shown,) = job_client.state(table)["readers"]
        assert (shown["reader"], shown["snapshot_id"]) == ("follower", current)
    assert job_client.state(table)["readers"] == []

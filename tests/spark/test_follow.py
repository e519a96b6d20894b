"""A compactor that follows the stream, against a real service and a real Spark: the streaming
job's commits make a partition due, the follower's long-poll wakes, and it rewrites exactly that
partition; two followers share their tables by claims. What Iceberg wrote is read back with
pyiceberg from the table's metadata (an independent reader)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import threading
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import httpx
import pytest

from compactor.config import CompactorConfig, FleetConfig, LeaseConfig, TableConfig
from compactor.fleet import Fleet
from compactor.follow import Follower
from compactor.report import Outcome
from demo.generate import format_time, write_lines
from ingest_gate.gate import Gate
from ingest_gate.job.run import run
from ingest_gate.job.snapshots import (
    batch_properties,
    committed_snapshot,
    partition_counts,
    with_commit_properties,
)
from service.client import LeaseClient
from service.ops.iceberg_audit import metadata_file
from tests.spark.conftest import ingest_config, lease_intervals
from tests.support.helpers import HANG_GUARD_S, installed, metric, unactivated_env, wait_until

pytestmark = [pytest.mark.spark, pytest.mark.timeout(900)]

HOT = "dt=2024-05-01/hr=10"
COLD = "dt=2024-05-01/hr=11"


def files_by_partition(warehouse: Path, table: str) -> dict[str, tuple[int, int]]:
    """(data, delete) files per partition of the current snapshot, read with pyiceberg."""
    from demo.health import sample

    return {name: (f.data, f.deletes) for name, f in sample(warehouse, table).partitions.items()}


def pyiceberg_rows(warehouse: Path, table: str) -> list[dict[str, Any]]:
    """Every row of the table's current snapshot, read with pyiceberg (deletes applied)."""
    from pyiceberg.table import StaticTable

    rows = StaticTable.from_metadata(str(metadata_file(warehouse, table))).scan().to_arrow()
    return sorted(rows.select(["event_id", "amount"]).to_pylist(), key=lambda r: r["event_id"])


def follower(
    spark: Any, client: LeaseClient, tables: list[str], holder: str, **values: Any
) -> Follower:
    # exact names get a short lease; a pattern's tables the defaults
    configs = tuple(
        TableConfig(name, lease=LeaseConfig(ttl=timedelta(seconds=20)))
        for name in tables
        if "*" not in name
    )
    fleet = Fleet(
        spark,
        client=client,
        config=CompactorConfig(
            tables=configs, fleet=FleetConfig(max_concurrent=1, claim_ttl=timedelta(seconds=20))
        ),
        selection=tables,
        holder=holder,
    )
    return Follower(fleet, every_s=None, **values)


class Events:
    """Click events of two hours, written as landing files: each file a few new keys of the hot
    hour and updates of the keys the file before added, the first file also a row of the cold
    hour; `expected` is the table's rows after them (event_id -> amount)."""

    def __init__(self, landing: Path) -> None:
        self.landing = landing
        self.at = datetime(2024, 5, 1, 10, 0, tzinfo=UTC)
        self.expected: dict[str, float] = {}
        self.previous: list[str] = []
        self.files = 0

    def event(self, key: str, hour: int, amount: float) -> str:
        self.at += timedelta(seconds=1)
        moment = self.at.replace(hour=hour)
        self.expected[key] = amount
        return json.dumps(
            {
                "event_id": key,
                "user_id": 1,
                "product_id": "p0001",
                "event_type": "view",
                "event_time": format_time(moment),
                "dt": "2024-05-01",
                "hr": hour,
                "amount": amount,
            }
        )

    def write(self) -> None:
        self.files += 1
        n = self.files
        keys = [f"k{n}-{i}" for i in range(3)]
        lines = [self.event(k, 10, float(n)) for k in keys]
        lines += [self.event(k, 10, 100.0 + n) for k in self.previous]  # updates: deletes
        if n == 1:
            lines.append(self.event("cold-1", 11, 1.0))
        self.previous = keys
        write_lines(self.landing, lines, prefix="events", sequence=n)


def test_the_follower_wakes_when_the_stream_makes_a_partition_due_and_compacts_only_it(
    spark, spark_warehouse, tmp_path, lakelock_server, job_client
):
    table = "local.db.followed"
    config = ingest_config(spark, tmp_path, lakelock_server, "followed", holder="ingest-followed")
    events = Events(tmp_path / "landing")
    for _ in range(3):
        events.write()
    handle = run(config, spark=spark)
    reader = httpx.Client(base_url=lakelock_server.url, headers=lakelock_server.headers("reader"))
    try:
        assert handle.writer.wait_for(3, HANG_GUARD_S)
        assert {r.outcome for r in handle.records} == {"committed"}
        # each commit told the service what it added: three data files in the hot hour, one
        # short of the service's threshold (4)
        assert all(r.written_partitions for r in handle.records)
        assert job_client.state(table)["due"]["partitions_due"] == 0

        follow = follower(spark, job_client, [table], "compactor@follow:1", poll_s=60)
        stop = threading.Event()
        reports: list[Any] = []
        thread = threading.Thread(target=lambda: reports.extend(follow.round(stop)), daemon=True)
        thread.start()
        # the follower waits on the service, not on a timer of its own
        wait_until(lambda: metric(reader, "lakelock_due_followers_waiting") >= 1, "poll parked")
        assert reports == []

        events.write()  # the fourth batch: the hot hour is due
        assert handle.writer.wait_for(4, HANG_GUARD_S)
        thread.join(HANG_GUARD_S)
        assert not thread.is_alive()
    finally:
        handle.stop()
        reader.close()

    (report,) = reports
    assert report.outcome == Outcome.COMPACTED, report.as_dict()
    assert report.mode == "follow" and report.compacted == [HOT]
    assert [g["partitions"] for g in report.groups] == [[HOT]]
    # only the hot hour was rewritten: one data file left, its deletes applied and dropped
    files = files_by_partition(spark_warehouse, table)
    assert files[HOT] == (1, 0)
    assert files[COLD] == (1, 0)
    # the service's counts of the hot hour went back to zero with the release: what it counts
    # now is the cold hour's one file
    due = job_client.state(table)["due"]
    assert due["partitions_due"] == 0 and due["partitions_counted"] == 1
    assert (due["data_files"], due["delete_files"]) == (1, 0)
    assert due["compacted_last_hour"] == 1
    # the rewrite's commits carry the lease, the token and the mode
    replaces = spark.sql(
        f"SELECT summary FROM {table}.snapshots WHERE operation = 'replace'"
    ).collect()
    assert replaces
    for row in replaces:
        assert row["summary"]["lakelock.mode"] == "follow"
        assert row["summary"]["lakelock.lease-id"] == report.lease_id
        assert row["summary"]["lakelock.token"] == str(report.token)
    # and the table holds exactly the latest row of every key
    got = pyiceberg_rows(spark_warehouse, table)
    assert got == [{"event_id": k, "amount": v} for k, v in sorted(events.expected.items())]


# -- two followers -----------------------------------------------------------------------------


def gated_writes(spark: Any, client: LeaseClient, table: str, batches: int) -> None:
    """`batches` commits into partition dt=2024-05-01 of `table` through the gate, each telling
    the service what it added, as the streaming job does."""
    gate = Gate(client, holder=f"writer-{table}", ttl_s=20.0, poll_s=1.0)
    for n in range(batches):
        with gate.commit(table, partitions=["dt=2024-05-01"]) as gate_pass:
            props = batch_properties(query_id="w", batch_id=n, lease_id=gate_pass.lease.lease_id)
            with_commit_properties(
                spark,
                props,
                lambda n=n: spark.sql(
                    f"INSERT INTO {table} VALUES ({n}, DATE '2024-05-01', 'row {n}')"
                ),
            )
            found = committed_snapshot(spark, table, query_id="w", batch_id=n)
            assert found is not None
            gate_pass.wrote(partition_counts(found[1]) or {})


def create(spark: Any, table: str) -> str:
    spark.sql(
        f"""
        CREATE TABLE {table} (id BIGINT, dt DATE, payload STRING) USING iceberg
        PARTITIONED BY (dt)
        TBLPROPERTIES ('format-version' = '2', 'write.summary.partition-limit' = '100')
        """
    )
    return table


def test_two_followers_share_the_due_tables_by_claims(spark, lakelock_server, job_client, operator):
    tables = [create(spark, f"local.shared.t{i}") for i in range(3)]
    for table in tables:
        gated_writes(spark, job_client, table, 4)
    due = job_client.due(tables, holder="look", wait_s=0)
    assert sorted(d.table for d in due) == tables

    with (
        LeaseClient(lakelock_server.url, token=lakelock_server.token("job")) as one,
        LeaseClient(lakelock_server.url, token=lakelock_server.token("job")) as two,
    ):
        followers = [
            follower(spark, one, ["local.shared.*"], "compactor@one:1", poll_s=2),
            follower(spark, two, ["local.shared.*"], "compactor@two:2", poll_s=2),
        ]
        stop = threading.Event()
        threads = [threading.Thread(target=f.run, args=(stop,), daemon=True) for f in followers]
        for thread in threads:
            thread.start()
        try:
            # driven by counts: until every table's due partition was compacted
            wait_until(
                lambda: sum(f.stats.compacted for f in followers) >= len(tables),
                "every due partition compacted",
            )
        finally:
            stop.set()
            for thread in threads:
                thread.join(HANG_GUARD_S)

    assert sum(f.stats.compacted for f in followers) == len(tables)
    assert job_client.due(tables, holder="look", wait_s=0) == []
    for table in tables:
        claims = lease_intervals(operator, table, "claim")
        leases = lease_intervals(operator, table, "maintenance")
        # never two holders' claims, or maintenance leases, on one table at once
        for kind in (claims, leases):
            for i, a in enumerate(kind):
                for b in kind[i + 1 :]:
                    assert not (a[2] != b[2] and a[0] < b[1] and b[0] < a[1]), (table, a, b)
        # one maintenance lease compacted it, by one follower, under that follower's claim
        (lease,) = leases
        assert any(c[2] == lease[2] and c[0] <= lease[0] and lease[1] <= c[1] for c in claims)
        runs = {
            r["summary"]["lakelock.run-uid"]
            for r in spark.sql(
                f"SELECT summary FROM {table}.snapshots WHERE operation = 'replace'"
            ).collect()
        }
        assert len(runs) == 1, (table, runs)
        assert spark.sql(f"SELECT count(*) FROM {table}.data_files").first()[0] == 1


# -- the command -------------------------------------------------------------------------------


def test_run_follow_waits_on_the_service_and_stops_cleanly_on_sigterm(
    spark, spark_warehouse, tmp_path, lakelock_server
):
    """`lakelock-compactor run --follow`: a process that long-polls (parked on the service, no
    asks in a loop) until SIGTERM, then exits 0 at once, saying what it did."""
    table = create(spark, "local.cli.t")
    log = tmp_path / "follow.log"
    process = subprocess.Popen(
        [
            installed("lakelock-compactor"),
            "run",
            "--follow",
            "--poll",
            "60",
            "--every",
            "1h",
            "--table",
            table,
            "--warehouse",
            str(spark_warehouse),
            "--master",
            "local[1]",
            "--service-url",
            lakelock_server.url,
        ],
        cwd=tmp_path,
        env=unactivated_env(LAKELOCK_TOKEN=lakelock_server.token("job")),
        stdout=log.open("wb"),
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    reader = httpx.Client(base_url=lakelock_server.url, headers=lakelock_server.headers("reader"))
    try:
        # its signal handlers are set once it says it follows (other tests' polls may be
        # parked on this service too: the log says it is this process's)
        wait_until(
            lambda: process.poll() is not None or f"following {table}" in log.read_text(),
            "the follower started",
        )
        assert process.poll() is None, log.read_text()[-3000:]
        wait_until(
            lambda: metric(reader, "lakelock_due_followers_waiting") >= 1,
            "the follower's long-poll parked on the service",
        )
        process.send_signal(signal.SIGTERM)
        stopped = time.monotonic()
        code = process.wait(HANG_GUARD_S)
        took = time.monotonic() - stopped
    finally:
        reader.close()
        if process.poll() is None:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait()
    text = log.read_text()
    assert code == 0, text[-3000:]
    # it did not wait out its 60 s long-poll; the Spark session's stop is most of what is left
    assert took < 30, took
    assert '"event": "compactor.follow"' in text and '"polls": 0' in text

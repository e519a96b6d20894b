"""The upsert job against a real lakelock service: leases decide when batches commit."""

from __future__ import annotations

import time

import pytest

from demo.generate import EventGenerator
from ingest_gate.gate import GateTimeout, LeaseLost
from ingest_gate.job.record import BatchHooks
from ingest_gate.job.run import run
from ingest_gate.job.snapshots import LEASE_ID
from service.client import Lease, LeaseClient
from tests.spark.conftest import ingest_config, snapshots, table_rows, wait_held_at_the_service

pytestmark = pytest.mark.spark

WAIT_S = 120  # generous bound for a handful of tiny batches on a shared 2-core machine


def _maintenance(operator: LeaseClient, table: str, ttl_s: float = 60.0) -> Lease:
    lease = operator.acquire_maintenance(table, holder="compactor-test", ttl_s=ttl_s)
    assert isinstance(lease, Lease), lease  # nothing else holds the table yet
    return lease


def _wait_at_gate(handle) -> None:
    deadline = time.monotonic() + WAIT_S
    while handle.writer.in_progress != (0, "gate"):
        assert time.monotonic() < deadline, "the first batch never reached the gate"
        assert handle.query.isActive, handle.query.exception()
        time.sleep(0.1)


def _commit_times_ms(spark, table: str) -> list[int]:
    rows = spark.sql(f"SELECT unix_millis(committed_at) AS t FROM {table}.snapshots").collect()
    return sorted(row["t"] for row in rows)


def test_no_ingest_commit_while_a_maintenance_lease_is_held(
    spark, tmp_path, lakelock_server, operator
):
    config = ingest_config(spark, tmp_path, lakelock_server, "proto_maint")
    gen = EventGenerator(seed=31, update_ratio=0.3)
    for _ in range(2):
        gen.write_file(config.landing_path, 10)
    lease = _maintenance(operator, config.table)
    held_from_ms = time.time() * 1000
    groups: list[str | None] = []

    def note_job_group(batch_id, gate_pass):
        # the MERGE runs on the query's thread, in the group the gate cancels on a lost lease
        groups.append(spark.sparkContext.getLocalProperty("spark.jobGroup.id"))

    handle = run(config, spark=spark, hooks=BatchHooks(before_merge=note_job_group))
    try:
        _wait_at_gate(handle)
        wait_held_at_the_service(lakelock_server)
        assert _commit_times_ms(spark, config.table) == []
        released_ms = time.time() * 1000
        operator.release(lease)
        assert handle.writer.wait_for(2, timeout=WAIT_S)
    finally:
        handle.stop()

    commits = _commit_times_ms(spark, config.table)
    assert len(commits) == 2
    assert all(t >= released_ms for t in commits), (held_from_ms, released_ms, commits)
    first = handle.records[0]
    assert first.outcome == "committed" and "maintenance" in first.wait_reasons
    assert first.gate_wait_s > 0
    assert table_rows(spark, config.table) == gen.expected_rows()
    assert len(groups) == 2 and all(g and g.startswith("lakelock-") for g in groups), groups


def test_paused_ingest_commits_nothing_until_resumed(spark, tmp_path, lakelock_server, operator):
    config = ingest_config(spark, tmp_path, lakelock_server, "proto_pause")
    gen = EventGenerator(seed=32)
    gen.write_file(config.landing_path, 10)
    operator.set_switch(config.table, ingest="paused", reason="test: pause ingest")

    handle = run(config, spark=spark)
    try:
        _wait_at_gate(handle)
        wait_held_at_the_service(lakelock_server)
        assert _commit_times_ms(spark, config.table) == []
        assert handle.records == []
        operator.set_switch(config.table, ingest="running", reason="test: resume ingest")
        assert handle.writer.wait_for(1, timeout=WAIT_S)
    finally:
        handle.stop()

    assert handle.records[0].outcome == "committed"
    assert "paused" in handle.records[0].wait_reasons
    assert table_rows(spark, config.table) == gen.expected_rows()


def _revoke_and_wait_until_lost(operator: LeaseClient):
    def before_merge(batch_id, gate_pass):
        operator.revoke(gate_pass.lease.lease_id, reason="test: revoke mid-batch")
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            if gate_pass.lost_reason is not None:
                return  # the renewer noticed; what happens next is up to the policy
            time.sleep(0.2)
        raise AssertionError("the gate never noticed the revoked lease")

    return before_merge


def test_revoked_lease_keeps_the_batch_from_committing_and_a_restart_recovers(
    spark, tmp_path, lakelock_server, operator
):
    config = ingest_config(spark, tmp_path, lakelock_server, "proto_revoke", available_now=True)
    gen = EventGenerator(seed=33)
    gen.write_file(config.landing_path, 10)

    first = run(
        config, spark=spark, hooks=BatchHooks(before_merge=_revoke_and_wait_until_lost(operator))
    )
    with pytest.raises(LeaseLost):
        first.wait(timeout=WAIT_S)
    assert first.records[0].outcome == "lease_lost"
    assert snapshots(spark, config.table) == []

    second = run(config, spark=spark)  # policy fail: the query restarts and replays the batch
    assert [r.outcome for r in second.wait(timeout=WAIT_S)] == ["committed"]
    assert table_rows(spark, config.table) == gen.expected_rows()


def test_revoked_lease_under_policy_proceed_commits_anyway(
    spark, tmp_path, lakelock_server, operator
):
    config = ingest_config(
        spark,
        tmp_path,
        lakelock_server,
        "proto_revoke_proceed",
        available_now=True,
        policy="proceed",
    )
    gen = EventGenerator(seed=34)
    gen.write_file(config.landing_path, 10)

    hooks = BatchHooks(before_merge=_revoke_and_wait_until_lost(operator))
    records = run(config, spark=spark, hooks=hooks).wait(timeout=WAIT_S)

    assert records[0].outcome == "proceeded_after_lease_lost"
    assert records[0].snapshot_id is not None
    assert table_rows(spark, config.table) == gen.expected_rows()


def test_max_hold_under_policy_fail_fails_the_query_without_committing(
    spark, tmp_path, lakelock_server, operator
):
    config = ingest_config(
        spark, tmp_path, lakelock_server, "proto_hold_fail", available_now=True, max_hold_s=2.0
    )
    EventGenerator(seed=35).write_file(config.landing_path, 5)
    lease = _maintenance(operator, config.table)
    try:
        handle = run(config, spark=spark)
        with pytest.raises(GateTimeout):
            handle.wait(timeout=WAIT_S)
    finally:
        operator.release(lease)
    assert handle.records[0].outcome == "timed_out"
    assert "maintenance" in handle.records[0].wait_reasons
    assert snapshots(spark, config.table) == []


def test_max_hold_under_policy_proceed_commits_without_a_lease(
    spark, tmp_path, lakelock_server, operator
):
    config = ingest_config(
        spark,
        tmp_path,
        lakelock_server,
        "proto_hold_proceed",
        available_now=True,
        max_hold_s=2.0,
        policy="proceed",
    )
    gen = EventGenerator(seed=36)
    gen.write_file(config.landing_path, 5)
    lease = _maintenance(operator, config.table)
    try:
        records = run(config, spark=spark).wait(timeout=WAIT_S)
    finally:
        operator.release(lease)
    assert records[0].outcome == "proceeded_without_lease"
    assert [s["summary"][LEASE_ID] for s in snapshots(spark, config.table)] == ["none"]
    assert table_rows(spark, config.table) == gen.expected_rows()

"""The compactor with partition scope on a real partitioned table and a real lakelock service:
one scoped maintenance lease per group of cold partitions, named as the `partitions` metadata
table names them, while a writer keeps its commit lease on a hot partition; a due partition
under a commit in flight is drained and compacted, not skipped."""

from __future__ import annotations

import threading
from dataclasses import replace
from datetime import timedelta

import pytest

from compactor.claim import take
from compactor.config import LeaseConfig, PlanConfig, TableConfig
from compactor.procedure_config import RewriteManifestsConfig
from compactor.report import Outcome
from compactor.run import run_table
from jobkit.partition import read_spec, table_partition_names
from service.client import LeaseClient
from service.wire.errors import Locked
from tests.spark.test_compactor_converges import read_with_pyiceberg
from tests.support.helpers import HANG_GUARD_S, wait_until

pytestmark = pytest.mark.spark


HOURS = (10, 11, 12, 13)
HOT = "dt=2024-06-20/hr=13"


def make_hourly_table(spark, name: str) -> str:
    """Partitions dt=2024-06-20/hr=10..13, each with 12 small files (3 commits x 4 slices)."""
    table = f"local.db.{name}"
    spark.sql(
        f"""
        CREATE TABLE {table} (event_id BIGINT, dt DATE, hr INT, payload STRING)
        USING iceberg PARTITIONED BY (dt, hr)
        TBLPROPERTIES ('format-version' = '2', 'write.distribution-mode' = 'none')
        """
    )
    for i in range(3):
        spark.sql(
            f"""
            INSERT INTO {table}
            SELECT id, DATE '2024-06-20', CAST({HOURS[0]} + id % {len(HOURS)} AS INT),
                   sha2(CAST(id AS STRING), 256)
            FROM range({i * 400}, {(i + 1) * 400}, 1, 4)
            """
        )
    return table


def files_per_partition(spark, table: str) -> dict[str, int]:
    rows = spark.sql(
        f"SELECT partition.hr AS hr, count(*) AS n FROM {table}.files WHERE content = 0 GROUP BY 1"
    ).collect()
    return {f"dt=2024-06-20/hr={r['hr']}": r["n"] for r in rows}


def maintenance_grants(operator: LeaseClient, table: str) -> list[dict]:
    """The service's audit trail of maintenance grants on `table`, oldest first."""
    return [
        e
        for e in reversed(operator.events(table=table, limit=500))
        if e["kind"] == "maintenance" and e["event"] == "lease.acquired"
    ]


def scope(event: dict) -> list[str] | None:
    """The scope an audit event carries (None: the whole table)."""
    if "partitions" in event:
        return event["partitions"]
    return event["detail"]["partitions"]


def test_cold_partitions_are_compacted_in_scoped_groups_while_a_hot_one_keeps_committing(
    spark, job_client, operator
):
    table = make_hourly_table(spark, "scoped")
    names = table_partition_names(spark, table, read_spec(spark, table))
    assert names == [f"dt=2024-06-20/hr={h}" for h in HOURS]
    before_files = files_per_partition(spark, table)
    assert min(before_files.values()) >= 10
    before_rows = read_with_pyiceberg(spark, table)
    config = replace(
        TableConfig(table, lease=LeaseConfig(ttl=timedelta(seconds=15))),
        # 12 small files a partition, below the trigger: the hot one is not due
        plan=PlanConfig(
            hot_window=timedelta(0), max_partitions_per_group=2, trigger_small_files=13
        ),
    )
    # a writer on the newest hour: the planner sees its commit lease, the partition is hot
    writer = job_client.acquire_commit(table, holder="ingest-hot", ttl_s=60, partitions=[HOT])
    granted_meanwhile = []

    def commit_on_the_hot_partition(step) -> None:
        held = job_client.state(table)["maintenance_leases"]
        assert [tuple(m["partitions"]) for m in held] == [step.partitions]
        lease = job_client.acquire_commit(table, holder="ingest-late", ttl_s=5, partitions=[HOT])
        granted_meanwhile.append(lease.partitions)
        job_client.release(lease)

    try:
        report = run_table(
            spark, client=job_client, config=config, before_step=commit_on_the_hot_partition
        )
    finally:
        job_client.release(writer)

    assert report.outcome == Outcome.COMPACTED, report.as_dict()
    cold = [n for n in names if n != HOT]
    assert [g["partitions"] for g in report.groups] == [cold[:2], cold[2:]]
    assert all(g["outcome"] == "compacted" for g in report.groups)
    assert [s["procedure"] for g in report.groups for s in g["steps"]] == ["rewrite_data_files"] * 2
    grants = maintenance_grants(operator, table)
    assert [g["lease_id"] for g in grants] == [g["lease_id"] for g in report.groups]
    assert [scope(g) for g in grants] == [cold[:2], cold[2:]]
    tokens = [g["token"] for g in report.groups]
    assert tokens == sorted(tokens) and len(set(tokens)) == 2
    assert all(g["held_s"] > 0 for g in report.groups)
    # the writer of the hot partition was granted during every step of the run
    assert granted_meanwhile == [(HOT,), (HOT,)]
    after_files = files_per_partition(spark, table)
    assert all(after_files[n] == 1 for n in cold)
    assert after_files[HOT] == before_files[HOT]
    assert read_with_pyiceberg(spark, table) == before_rows
    assert job_client.state(table)["maintenance_leases"] == []


def test_a_due_partition_under_a_commit_in_flight_is_compacted_once_it_drains(
    spark, job_client, operator
):
    """A commit in flight is a reason to wait, not to skip (docs/jobs.md §3): the run drains
    the writer of the due partition and compacts it, the hot group first (most debt)."""
    table = make_hourly_table(spark, "drained")
    spark.sql(f"INSERT INTO {table} SELECT id, DATE '2024-06-20', 13, 'x' FROM range(0, 40, 1, 4)")
    config = replace(
        TableConfig(table, lease=LeaseConfig(ttl=timedelta(seconds=15))),
        plan=PlanConfig(hot_window=timedelta(0), max_partitions_per_group=3),
    )
    writer = job_client.acquire_commit(table, holder="ingest-hot", ttl_s=120, partitions=[HOT])
    drained = threading.Event()

    def commit_lands_when_asked() -> None:
        # the writer's batch ends once the run's intent holds the partition: drive by state
        wait_until(lambda: job_client.state(table)["intents"], "the run's intent on the hot hour")
        job_client.release(writer)
        drained.set()

    ender = threading.Thread(target=commit_lands_when_asked, daemon=True)
    ender.start()
    report = run_table(spark, client=job_client, config=config)
    ender.join(timeout=HANG_GUARD_S)

    assert drained.is_set()
    assert report.outcome == Outcome.COMPACTED, report.as_dict()
    assert report.groups[0]["partitions"] == [HOT] and report.groups[0]["hot"]
    assert report.groups[0]["lease_wait_s"] > 0
    due = "4 partitions due: dt=2024-06-20/hr=13 (hot): 16 small files (trigger 12)"
    assert any(r.startswith(due) for r in report.plan_reasons), report.plan_reasons
    assert set(files_per_partition(spark, table).values()) == {1}
    assert set(report.partition_hold_s) == set(
        table_partition_names(spark, table, read_spec(spark, table))
    )


def test_partitions_past_the_hard_bound_hold_their_writers_until_their_group_runs(
    spark, job_client, operator
):
    """Backpressure (docs/jobs.md §3): under its claim, the run holds the commits to every
    partition past the bound from before its first group until that partition's group holds
    its lease; then lets go."""
    table = make_hourly_table(spark, "pressed")
    config = replace(
        TableConfig(table, lease=LeaseConfig(ttl=timedelta(seconds=15))),
        # 12 small files a partition: past a bound of 12; one partition a group
        plan=PlanConfig(stop_small_files=12, max_partitions_per_group=1),
    )
    names = table_partition_names(spark, table, read_spec(spark, table))
    seen: list[tuple[str, dict[str, str]]] = []

    def try_every_partition(step) -> None:
        # inside a group's lease: its own partition is held by the lease, the ones whose
        # groups are still to come by backpressure, the ones done are free again
        answers = {}
        for name in names:
            try:
                lease = job_client.acquire_commit(
                    table, holder="ingest", ttl_s=5, partitions=[name]
                )
            except Locked as exc:
                answers[name] = exc.extra["reason"]
            else:
                job_client.release(lease)
                answers[name] = "granted"
        seen.append((step.partitions[0], answers))

    with take(job_client, table, holder="compactor-pressed", ttl_s=60) as claim:
        report = run_table(
            spark,
            client=job_client,
            config=config,
            holder="compactor-pressed",  # the run holds back as a run under its claim
            claim=claim.lease,
            before_step=try_every_partition,
        )

    assert report.outcome == Outcome.COMPACTED, report.as_dict()
    assert sorted(report.backpressure) == names
    order = [g["partitions"][0] for g in report.groups]
    for i, (current, answers) in enumerate(seen):
        assert current == order[i]
        assert answers[current] == "maintenance"
        assert all(answers[n] == "backpressure" for n in order[i + 1 :]), answers
        assert all(answers[n] == "granted" for n in order[:i]), answers
    # after the run nothing is held, and the trail says why each was held and how it ended
    for name in names:
        job_client.release(
            job_client.acquire_commit(table, holder="ingest", ttl_s=5, partitions=[name])
        )
    trail = operator.events(table=table, limit=1000)
    assert [e["event"] for e in trail].count("backpressure.on") == 1
    fulfilled = [e for e in trail if e["event"] == "intent.fulfilled"]
    assert sum(e["detail"].get("cause") == "backpressure" for e in fulfilled) == len(names)
    assert set(files_per_partition(spark, table).values()) == {1}


def test_a_skipped_group_lets_its_partitions_writers_go_at_once(spark, job_client, operator):
    """A group skipped (here: an operator's maintenance lease holds its partition) rewrites
    nothing, so its partitions' backpressure ends then, not at the run's end."""
    table = make_hourly_table(spark, "pressed_skipped")
    first = f"dt=2024-06-20/hr={HOURS[0]}"
    # one more commit: hr=10 has the most debt, so its group comes first
    spark.sql(
        f"INSERT INTO {table} SELECT id, DATE '2024-06-20', {HOURS[0]}, 'x' FROM range(0, 8, 1, 4)"
    )
    config = replace(
        TableConfig(table, lease=LeaseConfig(ttl=timedelta(seconds=15))),
        plan=PlanConfig(stop_small_files=12, max_partitions_per_group=1),
    )
    other = job_client.acquire_maintenance(
        table, holder="operator-job", ttl_s=120, partitions=[first]
    )
    seen: list[str] = []

    def after_the_skip(step) -> None:
        if not seen:
            job_client.release(other)
            try:
                lease = job_client.acquire_commit(
                    table, holder="ingest", ttl_s=5, partitions=[first]
                )
            except Locked as exc:
                seen.append(exc.extra["reason"])
            else:
                job_client.release(lease)
                seen.append("granted")

    with take(job_client, table, holder="compactor-skipped", ttl_s=60) as claim:
        report = run_table(
            spark,
            client=job_client,
            config=config,
            holder="compactor-skipped",
            claim=claim.lease,
            before_step=after_the_skip,
        )

    assert report.groups[0]["partitions"] == [first], report.as_dict()
    assert report.groups[0]["reason"] == "maintenance_held"
    assert first in report.backpressure
    assert seen == ["granted"]  # in the next group's lease, before the run ended
    withdrawn = [
        e
        for e in operator.events(table=table, limit=1000)
        if e["event"] == "intent.withdrawn" and e["detail"].get("cause") == "backpressure"
    ]
    assert [e["detail"]["partitions"] for e in withdrawn] == [[first]]
    assert first in report.partition_hold_s  # its wait, until the skip, is reported


def test_a_spent_run_budget_leaves_the_rest_for_the_next_run(spark, job_client):
    table = make_hourly_table(spark, "budget")
    config = replace(
        TableConfig(table, lease=LeaseConfig(ttl=timedelta(seconds=15))),
        plan=PlanConfig(max_partitions_per_group=1, run_budget=timedelta(microseconds=1)),
        rewrite_manifests=RewriteManifestsConfig(min_small_manifests=1),
    )

    first = run_table(spark, client=job_client, config=config)
    second = run_table(spark, client=job_client, config=config)

    # the first group always runs; no other partition group starts once the budget is spent,
    # the manifests' rewrite (last) still does
    assert first.outcome == Outcome.COMPACTED, first.as_dict()
    assert [g["partitions"] for g in first.groups] == [first.groups[0]["partitions"], None]
    assert [s["procedure"] for s in first.groups[1]["steps"]] == ["rewrite_manifests"]
    assert len(first.left_for_next_run) == 3 and None not in first.left_for_next_run
    assert second.groups[0]["partitions"] == first.left_for_next_run[0]
    assert sorted(files_per_partition(spark, table).values()) == [1, 1, 12, 12]


def test_scope_table_takes_one_whole_table_lease(spark, job_client, operator):
    table = make_hourly_table(spark, "whole")
    config = TableConfig(table, lease=LeaseConfig(ttl=timedelta(seconds=15), scope="table"))

    report = run_table(spark, client=job_client, config=config)

    assert report.outcome == Outcome.COMPACTED, report.as_dict()
    assert [g["partitions"] for g in report.groups] == [None]
    assert [scope(g) for g in maintenance_grants(operator, table)] == [None]
    assert set(files_per_partition(spark, table).values()) == {1}


def test_the_full_plan_reports_what_it_compacted_and_corrects_the_services_counts(
    spark, job_client
):
    """The fleet's run releases each group's lease with the partitions it rewrote, and its
    debt report replaces what the service counted as commits landed (docs/jobs.md §3)."""
    from compactor.config import CompactorConfig
    from compactor.fleet import Fleet
    from ingest_gate.gate import Gate

    table = make_hourly_table(spark, "counted")
    spark.sql(f"ALTER TABLE {table} SET TBLPROPERTIES ('write.summary.partition-limit' = '100')")
    gate = Gate(job_client, holder="ingest-counted", ttl_s=15.0, poll_s=1.0)
    hour = "dt=2024-06-20/hr=10"
    for n in range(4):  # four commits through the gate, each telling what it added
        with gate.commit(table, partitions=[hour]) as gate_pass:
            spark.sql(f"INSERT INTO {table} VALUES ({10_000 + n}, DATE '2024-06-20', 10, 'x')")
            gate_pass.wrote({hour: (1, 0)})
    assert [d.partition for d in job_client.due([table], holder="look", wait_s=0)] == [hour]
    fleet = Fleet(
        spark,
        client=job_client,
        config=CompactorConfig(
            tables=(TableConfig(table, lease=LeaseConfig(ttl=timedelta(seconds=15))),)
        ),
        selection=[table],
    )
    reports = []
    fleet.on_run = reports.append

    tick = fleet.tick()

    assert tick.outcomes == {table: "compacted"}
    (report,) = reports
    names = [f"dt=2024-06-20/hr={h}" for h in HOURS]
    assert sorted(report.compacted) == names
    assert sorted(n for g in report.groups for n in g["partitions"] or ()) == names
    # the plan's debt report made every hour due (12 small files each, measured), the releases
    # compacted all four; the debt measured after the run replaced the counts: one small file
    # a partition, none due
    due = job_client.state(table)["due"]
    assert due["partitions_due"] == 0 and due["compacted_last_hour"] == 4
    assert (due["partitions_counted"], due["data_files"], due["delete_files"]) == (4, 4, 0)
    assert job_client.state(table)["debt"]["data_files"] == 4

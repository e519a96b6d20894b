"""plan() per partition, on plain stats: the triggers that make a partition due, most debt
first, cold partitions grouped, hot ones (the hot window, live commit leases) compacted when due
in small groups, the hard bound, rewrite_manifests on the whole table, expiry without a lease,
and the whole-table fallbacks. No Spark."""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime, timedelta

from compactor.config import LeaseConfig, PlanConfig, TableConfig
from compactor.plan import plan
from compactor.stats import PartitionStats, SnapshotStats, TableStats

NOW = datetime(2024, 6, 20, 14, 0, tzinfo=UTC)
MIB = 1 << 20


def config(*, scope: str = "partitions", **plan_values) -> TableConfig:
    plan_values.setdefault("hot_window", timedelta(minutes=15))
    plan_values.setdefault("min_small_files", 5)
    return TableConfig(
        "local.db.events", lease=LeaseConfig(scope=scope), plan=PlanConfig(**plan_values)
    )


def hour(hr: int, *, small=0, pos=0, dangling_pos=0, age=timedelta(hours=3)) -> PartitionStats:
    """Partition `dt=2024-06-20/hr=<hr>`, last updated `age` before NOW."""
    return PartitionStats(
        {"dt": "2024-06-20", "hr": hr},
        name=f"dt=2024-06-20/hr={hr}",
        last_updated_at=NOW - age,
        data_files=max(small, 1),
        data_bytes=max(small, 1) * MIB,
        small_files=small,
        position_delete_files=pos,
        dangling_position_delete_files=dangling_pos,
    )


def stats(*partitions: PartitionStats, refusal: str | None = None, manifests=(), snapshots=()):
    return TableStats(
        table="local.db.events",
        partitions=tuple(partitions),
        snapshots=tuple(snapshots),
        small_file_bytes=config().small_file_bytes,
        manifest_bytes=tuple(manifests),
        scope_refusal=refusal,
    )


def leases(p) -> list[tuple[str, ...] | None]:
    return [g.partitions for g in p.groups]


def test_cold_partitions_with_small_files_are_rewritten_under_one_scoped_lease():
    p = plan(stats(hour(10, small=8), hour(11, small=8), hour(12, small=2)), config(), NOW)

    assert p.run and p.whole_table is None
    # hr=12 has too few small files for a file group: it is not leased
    assert leases(p) == [("dt=2024-06-20/hr=10", "dt=2024-06-20/hr=11")]
    rewrite = p.groups[0].steps[0]
    assert rewrite.procedure == "rewrite_data_files"
    assert rewrite.partitions == ("dt=2024-06-20/hr=10", "dt=2024-06-20/hr=11")
    assert rewrite.partition_values == (
        {"dt": "2024-06-20", "hr": 10},
        {"dt": "2024-06-20", "hr": 11},
    )


def test_a_hot_partition_that_is_due_goes_first_in_a_group_of_its_own():
    fresh = hour(13, small=30, age=timedelta(minutes=5))

    p = plan(stats(hour(10, small=8), hour(11, small=8), fresh), config(), NOW)

    # most debt first: the hot partition's group, then the cold ones
    assert leases(p) == [("dt=2024-06-20/hr=13",), ("dt=2024-06-20/hr=10", "dt=2024-06-20/hr=11")]
    assert [g.hot for g in p.groups] == [True, False]
    states = {q.name: (q.hot is not None, q.group, q.due) for q in p.partitions}
    assert states["dt=2024-06-20/hr=13"] == (True, 0, ("30 small files (trigger 12)",))
    assert any(
        "1 partitions due: dt=2024-06-20/hr=13 (hot): 30 small files" in r for r in p.reasons
    )


def test_a_hot_partition_below_its_triggers_is_left_alone_and_says_why():
    warm = hour(13, small=8, pos=3, age=timedelta(minutes=5))

    p = plan(stats(hour(10, small=8), hour(11, small=8), warm), config(), NOW)

    assert leases(p) == [("dt=2024-06-20/hr=10", "dt=2024-06-20/hr=11")]
    assert any("1 hot partitions with debt left alone: none is due yet" in r for r in p.reasons)


def test_hot_small_files_below_the_trigger_do_not_make_the_run_pay_off():
    # 10 small files, all in a hot partition: the cold thresholds see none, no trigger fires
    p = plan(stats(hour(13, small=10, age=timedelta(minutes=1)), hour(9)), config(), NOW)

    assert not p.run and p.groups == ()


def test_due_hot_partitions_are_rewritten_in_small_groups_most_debt_first():
    hot = [
        hour(13, small=60, age=timedelta(minutes=1)),
        hour(12, small=55, age=timedelta(minutes=2)),
        hour(14, small=20, age=timedelta(minutes=1)),
    ]

    p = plan(stats(hour(10, small=8), hour(11, small=8), *hot), config(), NOW)

    assert leases(p) == [
        ("dt=2024-06-20/hr=13", "dt=2024-06-20/hr=12"),
        ("dt=2024-06-20/hr=14",),
        ("dt=2024-06-20/hr=10", "dt=2024-06-20/hr=11"),
    ]
    assert [g.hot for g in p.groups] == [True, True, False]


def test_a_commit_in_flight_is_no_reason_to_skip_a_due_partition():
    """The partition a live commit lease covers is compacted when due: the scoped maintenance
    lease drains that commit first (the run waits a second, it does not skip)."""
    p = plan(
        stats(hour(10, small=2), hour(11, small=14, pos=3)),
        config(hot_window=timedelta(0)),
        NOW,
        leased={"dt=2024-06-20/hr=11"},
    )

    assert p.run
    assert leases(p) == [("dt=2024-06-20/hr=11",)]
    assert p.partitions[1].hot == "a live commit lease covers it"


def test_each_trigger_makes_a_partition_due():
    def due(**counts):
        part = PartitionStats(
            {"dt": "2024-06-20", "hr": 1}, name="dt=2024-06-20/hr=1", last_updated_at=NOW, **counts
        )
        p = plan(stats(part), config(min_small_files=100, min_delete_files=100), NOW)
        return p.run, p.partitions[0].due

    assert due(data_files=12, small_files=12) == (True, ("12 small files (trigger 12)",))
    assert due(data_files=11, small_files=11) == (False, ())
    # 10 of 100 rows position-deleted, by 2 delete files
    ratio = due(data_files=2, data_records=100, position_delete_files=2, position_delete_records=10)
    assert ratio == (True, ("10% of its rows position-deleted (trigger 10%)",))
    assert (
        due(data_files=2, data_records=100, position_delete_files=2, position_delete_records=9)[1]
        == ()
    )
    assert due(data_files=3, equality_delete_files=1)[1] == ("1 equality delete files (trigger 1)",)
    assert due(data_files=3, position_delete_files=6, dangling_position_delete_files=6)[1] == (
        "12 delete files (trigger 12)",
    )


def test_partitions_past_the_hard_bound_are_named_most_debt_first():
    p = plan(
        stats(
            hour(10, small=24),
            hour(11, small=13, pos=30),
            hour(12, small=23, pos=0),
        ),
        config(),
        NOW,
    )

    assert p.over_bound == (
        ("dt=2024-06-20/hr=11", "30 delete files (bound 24)"),
        ("dt=2024-06-20/hr=10", "24 small files (bound 24)"),
    )
    assert {q.name: q.over_bound for q in p.partitions}["dt=2024-06-20/hr=12"] is None
    assert "over the hard bound: dt=2024-06-20/hr=11 (30 delete files (bound 24))" in p.describe()


def test_partitions_past_the_hard_bound_are_rewritten_first_whatever_the_others_debt():
    """Their writers are held from the run's start until their group: behind no other group."""
    fresh = timedelta(minutes=1)
    p = plan(
        stats(
            hour(10, small=20, pos=20, age=fresh),
            hour(11, small=19, pos=19, age=fresh),
            hour(12, small=25, pos=0, age=fresh),
        ),
        config(),
        NOW,
    )

    assert [name for name, _ in p.over_bound] == ["dt=2024-06-20/hr=12"]
    assert leases(p)[0] == ("dt=2024-06-20/hr=12", "dt=2024-06-20/hr=10")
    assert leases(p)[1] == ("dt=2024-06-20/hr=11",)


def test_cold_partitions_are_grouped_coldest_first_up_to_the_group_size():
    parts = [hour(h, small=6, age=timedelta(hours=30 - h)) for h in range(5)]

    p = plan(stats(*reversed(parts)), config(max_partitions_per_group=2), NOW)

    assert leases(p) == [
        ("dt=2024-06-20/hr=0", "dt=2024-06-20/hr=1"),
        ("dt=2024-06-20/hr=2", "dt=2024-06-20/hr=3"),
        ("dt=2024-06-20/hr=4",),
    ]


def test_each_group_plans_only_the_steps_its_partitions_need():
    small = [hour(h, small=6) for h in range(2)]
    dangling = hour(5, dangling_pos=3)

    p = plan(stats(*small, dangling), config(max_partitions_per_group=2), NOW)

    assert [[s.procedure for s in g.steps] for g in p.groups] == [
        ["rewrite_data_files"],
        ["rewrite_position_delete_files"],  # hr=5: nothing to compact, dangling deletes only
    ]


def test_manifests_take_a_whole_table_lease_and_expiry_none():
    snaps = [SnapshotStats(i, NOW - timedelta(days=30 - i / 100), "overwrite") for i in range(600)]

    p = plan(stats(hour(10, small=8), manifests=[1000] * 60, snapshots=snaps), config(), NOW)

    assert leases(p) == [("dt=2024-06-20/hr=10",), None]
    assert [s.procedure for s in p.groups[1].steps] == ["rewrite_manifests"]
    assert [s.procedure for s in p.unleased] == ["expire_snapshots"]
    assert [s.procedure for s in p.steps][-1] == "expire_snapshots"


def test_scope_table_takes_one_whole_table_lease_for_every_step():
    snaps = [SnapshotStats(i, NOW - timedelta(days=30 - i / 100), "overwrite") for i in range(600)]
    fresh = hour(13, small=30, age=timedelta(minutes=1))

    p = plan(stats(hour(10, small=8), fresh, snapshots=snaps), config(scope="table"), NOW)

    assert leases(p) == [None]
    assert [s.procedure for s in p.groups[0].steps] == ["rewrite_data_files", "expire_snapshots"]
    assert p.unleased == ()
    assert p.whole_table == "lease.scope is table"
    assert p.groups[0].steps[0].partitions == ()  # the whole table, hot partition included


def test_a_table_that_cannot_use_partition_scope_says_why_and_leases_the_whole_table():
    refusal = "live files are written with partition specs [0] besides the current spec 1"

    p = plan(stats(hour(10, small=8), refusal=refusal), config(), NOW)

    assert leases(p) == [None]
    assert p.whole_table == refusal
    assert f"leases: whole table, because {refusal}" in p.describe()


def test_partitions_lakelock_cannot_name_still_count_past_the_hard_bound():
    """An unpartitioned table, or transforms without a name: the debt report and its alert see
    them, by their values."""
    from compactor.debt import debt_of

    unnamed = replace(hour(10, small=30), name=None)
    refusal = "the table is not partitioned"
    whole = replace(unnamed, partition={})
    for part, label in ((unnamed, "dt=2024-06-20/hr=10"), (whole, "the table")):
        s = stats(part, refusal=refusal)
        p = plan(s, config(), NOW)
        assert p.over_bound == ((label, "30 small files (bound 24)"),)
        assert debt_of(s, config(), measured_at=NOW)["partitions_over_bound"] == 1
        assert f"1 partitions due: {label}: 30 small files" in " ".join(p.reasons)


def test_the_debt_counts_past_the_bound_only_what_the_plan_looks_at():
    """With `plan.recent_days`, late data in an old partition waits for the daily rewrite-all:
    the compactor is not behind on it, and the alert on partitions_over_bound stays quiet."""
    from compactor.debt import debt_of

    old = replace(
        hour(10, small=30), partition={"dt": "2024-06-01", "hr": 10}, name="dt=2024-06-01/hr=10"
    )
    s = stats(old, hour(11, small=30))
    assert debt_of(s, config(), measured_at=NOW)["partitions_over_bound"] == 2
    recent = config(recent_days=2)
    assert debt_of(s, recent, measured_at=NOW)["partitions_over_bound"] == 1
    assert [name for name, _ in plan(s, recent, NOW).over_bound] == ["dt=2024-06-20/hr=11"]


def test_the_plan_shows_partitions_hot_and_cold_and_the_groups():
    fresh = hour(13, small=3, age=timedelta(minutes=5))

    p = plan(stats(hour(10, small=8), hour(11), fresh), config(), NOW)
    text = p.describe()

    assert "partition dt=2024-06-20/hr=10: cold, 8 data files (8 small)" in text
    assert "group 1" in text and "partition dt=2024-06-20/hr=13: hot (updated at" in text
    assert "group 1 (lease on cold: dt=2024-06-20/hr=10)" in text
    assert "1 more, cold, with nothing to rewrite" in text
    groups = p.as_dict()["groups"]
    assert groups == [
        {"partitions": ["dt=2024-06-20/hr=10"], "hot": False, "steps": groups[0]["steps"]}
    ]


def test_after_the_cold_groups_are_compacted_the_next_plan_is_empty():
    fresh = hour(13, small=10, age=timedelta(minutes=5))
    compacted = [replace(hour(h, small=1)) for h in (10, 11)]

    p = plan(stats(*compacted, fresh), config(), NOW)

    assert not p.run


def test_a_due_partition_makes_a_whole_table_plan_run_too():
    p = plan(
        stats(hour(10, small=13), hour(11, small=1)),
        config(scope="table", min_small_files=50),
        NOW,
    )

    assert p.run and leases(p) == [None]
    assert any(
        r.startswith("1 partitions due: dt=2024-06-20/hr=10: 13 small files") for r in p.reasons
    )

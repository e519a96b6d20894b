"""plan() per partition, on plain stats: cold partitions preferred and grouped, the hot window
and live commit leases, hot partitions only above their thresholds and alone, rewrite_manifests
on the whole table, expiry without a lease, and the whole-table fallbacks. No Spark."""

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


def test_a_partition_updated_within_the_hot_window_is_left_alone_below_its_threshold():
    fresh = hour(13, small=30, age=timedelta(minutes=5))

    p = plan(stats(hour(10, small=8), hour(11, small=8), fresh), config(), NOW)

    assert leases(p) == [("dt=2024-06-20/hr=10", "dt=2024-06-20/hr=11")]
    states = {q.name: (q.hot is not None, q.group) for q in p.partitions}
    assert states["dt=2024-06-20/hr=13"] == (True, None)
    assert any("1 hot partitions left alone" in r for r in p.reasons)


def test_hot_small_files_do_not_make_the_run_pay_off():
    # 30 small files, all in a hot partition: the cold thresholds see none of them
    p = plan(stats(hour(13, small=30, age=timedelta(minutes=1)), hour(9)), config(), NOW)

    assert not p.run and p.groups == ()


def test_a_hot_partition_above_its_threshold_is_rewritten_alone_after_the_cold_groups():
    hot = hour(13, small=60, age=timedelta(minutes=1))
    also_hot = hour(12, small=55, age=timedelta(minutes=2))

    p = plan(stats(hour(10, small=8), hour(11, small=8), hot, also_hot), config(), NOW)

    assert leases(p) == [
        ("dt=2024-06-20/hr=10", "dt=2024-06-20/hr=11"),
        ("dt=2024-06-20/hr=12",),
        ("dt=2024-06-20/hr=13",),
    ]
    assert [g.hot for g in p.groups] == [False, True, True]
    assert any("hot partition dt=2024-06-20/hr=13" in r and "alone" in r for r in p.reasons)


def test_a_partition_a_live_commit_lease_covers_is_hot_whatever_its_age():
    p = plan(
        stats(hour(10, small=8), hour(11, small=8)),
        config(hot_window=timedelta(0)),
        NOW,
        leased={"dt=2024-06-20/hr=11"},
    )

    assert leases(p) == [("dt=2024-06-20/hr=10",)]
    assert p.partitions[1].hot == "a live commit lease covers it"


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
    dangling = hour(5, dangling_pos=12)

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
    fresh = hour(13, small=30, age=timedelta(minutes=5))
    compacted = [replace(hour(h, small=1)) for h in (10, 11)]

    p = plan(stats(*compacted, fresh), config(), NOW)

    assert not p.run

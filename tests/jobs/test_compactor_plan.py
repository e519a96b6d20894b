"""plan(stats, config, now) on plain stats: thresholds, recent partitions, the daily rewrite-all,
retention floors and which snapshots may expire. No Spark."""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime, time, timedelta

import pytest

from compactor.config import PlanConfig, TableConfig
from compactor.plan import Mode, full_rewrite_due, plan, recent_where, snapshot_expiry
from compactor.procedure_config import (
    ExpireSnapshotsConfig,
    RemoveOrphanFilesConfig,
    RetentionRefused,
)
from compactor.stats import PartitionStats, SnapshotStats, TableStats

NOW = datetime(2024, 5, 10, 12, 0, tzinfo=UTC)
MIB = 1 << 20


def config(**plan_values) -> TableConfig:
    return TableConfig("local.db.events", plan=PlanConfig(**plan_values))


def stats(
    *partitions: PartitionStats, snapshots=(), cfg: TableConfig | None = None, manifests=()
) -> TableStats:
    cfg = cfg or config()
    return TableStats(
        table="local.db.events",
        partitions=tuple(partitions),
        snapshots=tuple(snapshots),
        current_snapshot_id=snapshots[-1].snapshot_id if snapshots else None,
        small_file_bytes=cfg.small_file_bytes,
        manifest_bytes=tuple(manifests),
    )


def part(
    dt: str, *, data=10, small=0, pos=0, eq=0, dangling_pos=0, dangling_eq=0
) -> PartitionStats:
    return PartitionStats(
        {"dt": dt},
        name=f"dt={dt}",
        data_files=data,
        data_bytes=data * 120 * MIB,
        small_files=small,
        position_delete_files=pos,
        equality_delete_files=eq,
        dangling_position_delete_files=dangling_pos,
        dangling_equality_delete_files=dangling_eq,
    )


def snap(snapshot_id: int, age: timedelta, query_id: str | None = None) -> SnapshotStats:
    summary = {"lakelock.query-id": query_id} if query_id else {}
    return SnapshotStats(snapshot_id, NOW - age, "overwrite", summary)


def procedures(p) -> list[str]:
    return [s.procedure for s in p.steps]


# -- thresholds ------------------------------------------------------------------------------


def test_healthy_table_is_skipped_with_the_numbers_that_say_why():
    p = plan(stats(part("2024-05-09", small=2), part("2024-05-10", small=1)), config(), NOW)

    assert not p.run
    assert p.steps == ()
    assert any("3 small files" in r for r in p.reasons)
    assert any("0 delete files" in r for r in p.reasons)


def test_many_small_files_in_one_partition_plan_a_data_rewrite():
    p = plan(stats(part("2024-05-10", data=30, small=30)), config(), NOW)

    assert p.run and p.mode is Mode.INCREMENTAL
    assert procedures(p)[:1] == ["rewrite_data_files"]
    rewrite = p.steps[0]
    assert rewrite.options["target-file-size-bytes"] == "134217728"
    assert rewrite.options["min-input-files"] == "5"
    assert rewrite.strategy == "binpack"
    assert "rewrite_position_delete_files" not in procedures(p)  # no delete files to rewrite


def test_small_files_spread_below_min_input_files_per_partition_are_skipped():
    # 4 small files in each of 10 partitions: rewrite_data_files (min-input-files 5) would
    # rewrite nothing, so holding ingest would not pay off
    parts = [part(f"2024-05-{d:02d}", small=4) for d in range(1, 11)]

    p = plan(stats(*parts), config(min_small_files=10), NOW)

    assert not p.run


def test_small_file_cut_follows_the_fraction_of_the_target_size():
    cfg = config(small_file_fraction=0.5)

    assert cfg.small_file_bytes == 64 * MIB
    with pytest.raises(ValueError, match="small files"):
        plan(stats(part("2024-05-10"), cfg=config()), cfg, NOW)


def test_many_delete_files_plan_a_rewrite_that_applies_them_and_drops_them():
    p = plan(stats(part("2024-05-10", data=40, pos=12)), config(), NOW)

    assert p.run
    assert procedures(p) == ["rewrite_data_files", "rewrite_position_delete_files"]
    assert any("12 delete files" in r for r in p.reasons)
    assert p.steps[0].options["delete-file-threshold"] == "1"
    # Iceberg 1.9.2 drops dangling position deletes only this way (see compactor.plan.steps)
    assert p.steps[1].options["rewrite-all"] == "true"


def test_dangling_deletes_do_not_count_as_deletes():
    # the demo's table after a data rewrite: 12 delete files, every one naming a file now gone
    p = plan(
        stats(part("2024-05-10", data=5, dangling_pos=12)),
        config(min_delete_files=20, trigger_delete_files=20, stop_delete_files=20),
        NOW,
    )

    assert not p.run
    assert any("0 delete files" in r for r in p.reasons)
    assert any("12 dangling delete files" in r for r in p.reasons)


def test_many_dangling_deletes_plan_a_run_that_drops_them():
    p = plan(stats(part("2024-05-10", data=5, dangling_pos=12)), config(), NOW)

    assert p.run
    assert procedures(p) == ["rewrite_position_delete_files"]


def test_equality_deletes_are_applied_by_the_data_rewrite_then_dropped_by_a_step_of_their_own():
    p = plan(stats(part("2024-05-10", data=6, eq=2)), config(), NOW)

    assert p.run
    # no position deletes: no rewrite_position_delete_files
    assert procedures(p) == ["rewrite_data_files", "remove_dangling_deletes"]
    options = p.steps[0].options
    assert options["delete-file-threshold"] == "1"
    # Iceberg would make that commit itself, without the lease's properties
    assert "remove-dangling-deletes" not in options


def test_position_deletes_alone_plan_no_table_wide_dangling_step():
    p = plan(stats(part("2024-05-10", data=40, pos=12, dangling_pos=3)), config(), NOW)

    assert procedures(p) == ["rewrite_data_files", "rewrite_position_delete_files"]


def test_remove_dangling_deletes_in_config_is_a_step_not_an_option():
    cfg = config()
    on = {**cfg.rewrite_data_files.options, "remove-dangling-deletes": "true"}
    off = {**cfg.rewrite_data_files.options, "remove-dangling-deletes": "false"}
    table = stats(part("2024-05-10", data=40, pos=12, eq=2))

    asked = plan(
        table, replace(cfg, rewrite_data_files=replace(cfg.rewrite_data_files, options=on)), NOW
    )
    refused = plan(
        table, replace(cfg, rewrite_data_files=replace(cfg.rewrite_data_files, options=off)), NOW
    )

    assert "remove_dangling_deletes" in procedures(asked)
    assert "remove_dangling_deletes" not in procedures(refused)
    assert all("remove-dangling-deletes" not in s.options for s in asked.steps + refused.steps)


def test_a_delete_threshold_set_in_config_is_kept():
    cfg = config()
    rdf = replace(
        cfg.rewrite_data_files,
        options={**cfg.rewrite_data_files.options, "delete-file-threshold": "3"},
    )

    p = plan(stats(part("2024-05-10", pos=12)), replace(cfg, rewrite_data_files=rdf), NOW)

    assert p.steps[0].options["delete-file-threshold"] == "3"


def test_a_high_delete_ratio_pays_off_below_the_delete_file_count():
    p = plan(stats(part("2024-05-10", data=4, pos=2)), config(min_delete_files=10), NOW)

    assert p.run  # 0.5 delete files per data file > 0.25


def test_many_expirable_snapshots_pay_off_when_expiry_is_enabled():
    snaps = [snap(i, timedelta(days=30 - i / 100)) for i in range(30)]

    p = plan(stats(part("2024-05-10"), snapshots=snaps), config(max_snapshots=20), NOW)

    assert p.run
    assert procedures(p) == ["expire_snapshots"]
    assert any("20 of 30 snapshots can be expired" in r for r in p.reasons)  # 10 retained


def test_many_young_snapshots_are_no_reason_to_run():
    snaps = [snap(i, timedelta(hours=1 + i / 100)) for i in range(600)]

    p = plan(stats(part("2024-05-10"), snapshots=snaps), config(), NOW)

    assert not p.run
    assert any("0 of 600 snapshots can be expired" in r for r in p.reasons)


# -- manifests -------------------------------------------------------------------------------


def test_few_manifests_are_not_rewritten():
    p = plan(stats(part("2024-05-10", small=30), manifests=[20_000] * 49), config(), NOW)

    assert p.run
    assert "rewrite_manifests" not in procedures(p)


def test_many_small_manifests_plan_a_manifest_rewrite_on_their_own():
    manifests = [20_000] * 50 + [7 * MIB] * 10

    p = plan(stats(part("2024-05-10"), manifests=manifests), config(), NOW)

    assert p.run
    assert procedures(p) == ["rewrite_manifests"]  # the data files are fine
    assert any("50 of 60 manifests under 6.0 MiB" in r for r in p.reasons)


# -- recent partitions -----------------------------------------------------------------------


def test_recent_days_builds_a_utc_date_filter():
    late_evening_elsewhere = datetime(2024, 5, 10, 23, 30, tzinfo=UTC)

    where, cutoff = recent_where(PlanConfig(recent_days=3), now=late_evening_elsewhere)

    assert where == "dt >= '2024-05-07'"
    assert cutoff.isoformat() == "2024-05-07"
    assert recent_where(PlanConfig(), now=NOW) is None


def test_old_partitions_full_of_small_files_are_out_of_scope_with_recent_days():
    old = part("2024-04-01", data=50, small=50)
    recent = part("2024-05-09", small=1)

    p = plan(stats(old, recent), config(recent_days=3), NOW)

    assert not p.run
    assert p.where == "dt >= '2024-05-07'"
    assert p.scope.partitions == 1
    assert p.total.partitions == 2


def test_recent_small_files_are_rewritten_with_the_where_filter():
    p = plan(stats(part("2024-04-01"), part("2024-05-10", small=20)), config(recent_days=1), NOW)

    assert p.run
    assert p.where == "dt >= '2024-05-09'"
    # partition scope: the rewrite is limited to the recent partition it picked
    assert p.steps[0].partitions == ("dt=2024-05-10",)


# -- daily rewrite-all -----------------------------------------------------------------------


def test_full_rewrite_is_due_once_a_day_at_or_after_its_time():
    cfg = PlanConfig(full_rewrite_at=time(3, 0))
    today_3am = datetime(2024, 5, 10, 3, 0, tzinfo=UTC)

    assert not full_rewrite_due(cfg, last=None, now=today_3am - timedelta(minutes=1))
    assert full_rewrite_due(cfg, last=None, now=today_3am)
    assert full_rewrite_due(
        cfg, last=today_3am - timedelta(hours=1), now=NOW
    )  # last one was yesterday's
    assert not full_rewrite_due(cfg, last=today_3am + timedelta(minutes=5), now=NOW)  # done today
    assert full_rewrite_due(cfg, last=today_3am + timedelta(minutes=5), now=NOW + timedelta(days=1))
    assert not full_rewrite_due(PlanConfig(), last=None, now=NOW)


def test_a_due_rewrite_all_runs_on_a_healthy_table_without_where():
    cfg = config(full_rewrite_at=time(3, 0), recent_days=2)

    p = plan(stats(part("2024-05-10")), cfg, NOW)

    assert p.run and p.mode is Mode.REWRITE_ALL
    assert p.where is None
    assert p.steps[0].options["rewrite-all"] == "true"
    assert p.steps[0].where is None


def test_a_rewrite_all_committed_today_is_not_repeated():
    cfg = config(full_rewrite_at=time(3, 0))
    done = SnapshotStats(7, NOW - timedelta(hours=8), "replace", {"lakelock.mode": "rewrite-all"})

    p = plan(stats(part("2024-05-10"), snapshots=[done]), cfg, NOW)

    assert not p.run and p.mode is Mode.INCREMENTAL


def test_rewrite_all_of_an_empty_table_is_skipped():
    p = plan(stats(cfg=config()), config(full_rewrite_at=time(0, 0)), NOW)

    assert not p.run


# -- retention floors ------------------------------------------------------------------------


def test_snapshot_expiry_younger_than_its_floor_is_refused():
    cfg = replace(config(), expire_snapshots=ExpireSnapshotsConfig(older_than=timedelta(hours=1)))

    with pytest.raises(RetentionRefused) as caught:
        plan(stats(part("2024-05-10", small=30)), cfg, NOW)

    message = str(caught.value)
    assert "expire_snapshots.older_than=1h is below the floor of 24h" in message
    assert "replay guard" in message


def test_retaining_fewer_snapshots_than_the_floor_is_refused():
    cfg = replace(config(), expire_snapshots=ExpireSnapshotsConfig(retain_last=1))

    with pytest.raises(RetentionRefused, match="retain_last=1 is below the floor"):
        plan(stats(part("2024-05-10")), cfg, NOW)


def test_orphan_removal_younger_than_a_day_is_refused():
    orphans = RemoveOrphanFilesConfig(enabled=True, older_than=timedelta(hours=2))
    cfg = replace(config(), remove_orphan_files=orphans)

    with pytest.raises(
        RetentionRefused,
        match=r"remove_orphan_files.older_than=2h is below the floor of 24h",
    ):
        plan(stats(part("2024-05-10")), cfg, NOW)


# -- snapshot expiry -------------------------------------------------------------------------


def test_expiry_keeps_the_last_n_the_young_and_the_newest_per_streaming_query():
    snaps = [
        snap(1, timedelta(days=30), "q-old"),  # newest of a query that stopped long ago: kept
        snap(2, timedelta(days=20), "q-live"),
        snap(3, timedelta(days=19)),
        snap(4, timedelta(days=18), "q-live"),
        snap(5, timedelta(days=10)),
        snap(6, timedelta(days=9), "q-live"),  # newest of q-live: kept
        snap(7, timedelta(days=8)),
        snap(8, timedelta(days=7)),  # last 2: kept
        snap(9, timedelta(hours=2)),  # younger than older_than: kept
    ]
    cfg = ExpireSnapshotsConfig(
        older_than=timedelta(days=3), retain_last=2, restart_point_age=timedelta(days=40)
    )

    expiry = snapshot_expiry(snaps, current_snapshot_id=9, config=cfg, now=NOW)

    assert sorted(expiry.expired) == [2, 3, 4, 5, 7]
    assert expiry.kept_for_queries == (1, 6)
    # Iceberg keeps whatever is at or after `older_than` by itself: it must reach back to
    # the oldest kept snapshot, and expired ones after that must be named one by one
    assert expiry.older_than == NOW - timedelta(days=30)
    assert sorted(expiry.snapshot_ids) == [2, 3, 4, 5, 7]


def flink(snapshot_id: int, age: timedelta, job: str, checkpoint: int) -> SnapshotStats:
    """A snapshot a Flink job's committer wrote, as Iceberg's Flink sink writes its summary."""
    summary = {
        "flink.job-id": job,
        "flink.operator-id": "committer-1",
        "flink.max-committed-checkpoint-id": str(checkpoint),
    }
    return SnapshotStats(snapshot_id, NOW - age, "overwrite", summary)


def test_expiry_keeps_each_flink_jobs_newest_checkpoint_snapshot():
    """A Flink job restarting from its checkpoint reads the newest snapshot carrying its
    `flink.max-committed-checkpoint-id` to skip what it committed; expiring it would commit a
    checkpoint twice. A snapshot that names no checkpoint is no restart point."""
    snaps = [
        flink(1, timedelta(days=30), "job-a", 7),  # job-a's newest: kept
        flink(2, timedelta(days=20), "job-b", 3),
        flink(3, timedelta(days=19), "job-b", 4),  # job-b's newest: kept
        SnapshotStats(4, NOW - timedelta(days=18), "overwrite", {"flink.job-id": "job-c"}),
        snap(5, timedelta(days=10)),
        snap(6, timedelta(days=9)),  # the last: kept
    ]
    cfg = ExpireSnapshotsConfig(
        older_than=timedelta(days=3), retain_last=1, restart_point_age=timedelta(days=40)
    )

    expiry = snapshot_expiry(snaps, current_snapshot_id=6, config=cfg, now=NOW)

    assert sorted(expiry.expired) == [2, 4, 5]
    assert expiry.kept_for_queries == (1, 3)
    # one job's committers are told apart by operator: each keeps its own
    other = SnapshotStats(
        7,
        NOW - timedelta(days=8),
        "overwrite",
        {**snaps[1].summary, "flink.operator-id": "committer-2"},
    )
    expiry = snapshot_expiry([*snaps, other], current_snapshot_id=7, config=cfg, now=NOW)
    assert expiry.kept_for_queries == (1, 3, 7)


def test_restart_points_are_kept_for_a_bounded_age_and_for_the_newest_committers_only():
    """Made-up job ids, or a Flink job redeployed under a new id, pin nothing for good: a
    committer's restart point goes once older than `restart_point_age`, and only the newest
    `restart_points` committers keep one (each a snapshot and the files it holds)."""
    snaps = [
        flink(1, timedelta(days=16), "redeployed-away", 9),  # past the default 15 days: goes
        *(flink(10 + i, timedelta(days=14, hours=-i), f"made-up-{i}", 1) for i in range(12)),
        snap(30, timedelta(days=4), "q-live"),  # a query's point counts among the committers
        snap(31, timedelta(hours=1)),
    ]
    cfg = ExpireSnapshotsConfig(older_than=timedelta(days=3), retain_last=1)
    assert cfg.restart_point_age == timedelta(days=15) and cfg.restart_points == 8

    expiry = snapshot_expiry(snaps, current_snapshot_id=31, config=cfg, now=NOW)

    # the newest 8 committers: q-live and the 7 newest made-up ids (made-up-11 .. made-up-5)
    assert expiry.kept_for_queries == (15, 16, 17, 18, 19, 20, 21, 30)
    assert sorted(expiry.expired) == [1, 10, 11, 12, 13, 14]

    none = ExpireSnapshotsConfig(older_than=timedelta(days=3), retain_last=1, restart_points=0)
    assert (
        snapshot_expiry(snaps, current_snapshot_id=31, config=none, now=NOW).kept_for_queries == ()
    )


def test_expiry_without_streaming_queries_lets_iceberg_expire_by_age():
    snaps = [snap(i, timedelta(days=20 - i)) for i in range(1, 11)]
    cfg = ExpireSnapshotsConfig(older_than=timedelta(days=5), retain_last=3)

    expiry = snapshot_expiry(snaps, current_snapshot_id=10, config=cfg, now=NOW)

    assert sorted(expiry.expired) == list(range(1, 8))
    assert expiry.older_than == snaps[7].committed_at  # the oldest of the last three
    assert expiry.snapshot_ids == ()


def test_a_live_reader_keeps_its_snapshot_and_every_later_one_until_it_lets_go():
    snaps = [snap(i, timedelta(days=20 - i)) for i in range(1, 11)]
    cfg = ExpireSnapshotsConfig(older_than=timedelta(days=5), retain_last=1)

    held = snapshot_expiry(snaps, current_snapshot_id=10, config=cfg, now=NOW, readers=[4, 7])
    assert sorted(held.expired) == [1, 2, 3]  # before the oldest reader's position
    assert held.kept_for_readers == tuple(range(4, 11))
    assert held.older_than == snaps[3].committed_at  # Iceberg keeps 4 and later by age alone

    gone = snapshot_expiry(snaps, current_snapshot_id=10, config=cfg, now=NOW, readers=[])
    assert 4 in gone.expired and 7 in gone.expired  # released or lapsed: they go
    unknown = snapshot_expiry(snaps, current_snapshot_id=10, config=cfg, now=NOW, readers=[99])
    assert unknown.expired == gone.expired  # a position the table no longer has holds nothing


def test_the_expire_step_says_what_it_keeps_for_readers():
    snaps = [snap(i, timedelta(days=30) - timedelta(minutes=i)) for i in range(1, 701)]
    p = plan(stats(part("2024-05-10"), snapshots=snaps), config(), NOW, readers=[650])
    (step,) = [s for s in p.steps if s.procedure == "expire_snapshots"]
    assert step.reason.endswith(f"keeping {700 - 650 + 1} for readers")


def test_nothing_to_expire_plans_no_expire_step():
    snaps = [snap(i, timedelta(hours=10 - i)) for i in range(1, 6)]

    p = plan(stats(part("2024-05-10", small=30), snapshots=snaps), config(), NOW)

    assert p.run
    assert "expire_snapshots" not in procedures(p)


def test_plan_describes_its_decision_for_a_person():
    p = plan(stats(part("2024-05-10", small=30, pos=12)), config(recent_days=2), NOW)

    text = p.describe()

    assert text.startswith("local.db.events: run (incremental)")
    assert "where: dt >= '2024-05-08'" in text
    assert "step: rewrite_data_files" in text
    assert p.as_dict()["steps"][0]["procedure"] == "rewrite_data_files"


def test_naive_now_is_rejected():
    with pytest.raises(ValueError, match="aware"):
        plan(stats(part("2024-05-10")), config(), NOW.replace(tzinfo=None))

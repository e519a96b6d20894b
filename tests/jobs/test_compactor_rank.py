"""Which tables a tick plans, from their snapshot summaries and what earlier plans saw. No Spark."""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime, time, timedelta

from hypothesis import given
from hypothesis import strategies as st

from compactor.config import LeaseConfig, PlanConfig, TableConfig
from compactor.plan import plan
from compactor.rank import Look, Summary, Track, advance, assess, rank, score
from compactor.stats import PartitionStats, TableStats

NOW = datetime(2024, 6, 20, 14, 0, tzinfo=UTC)
MIB = 1 << 20
CONFIG = TableConfig("lake.db.t")  # small files: under 96 MiB; thresholds 10 small, 5 a group
BIG = 128 * MIB


def summary(
    *, snapshot_id=7, data_files=20, delete_files=0, avg=BIG, snapshots=3, table="lake.db.t", **kw
) -> Summary:
    return Summary(
        table,
        snapshot_id=snapshot_id,
        committed_at=kw.pop("committed_at", NOW - timedelta(minutes=5)),
        data_files=data_files,
        delete_files=delete_files,
        records=1000,
        files_bytes=int(avg * (data_files + delete_files)),
        snapshots=snapshots,
        **kw,
    )


def judged(s: Summary, track: Track | None = None, *, config=CONFIG, replan_after=None, now=NOW):
    return assess(s, config, track, now, replan_after=replan_after)


def looked(*, snapshot_id=7, found_work=False, data_files=20, small_files=0, **kw) -> Track:
    look = Look(snapshot_id, NOW - timedelta(minutes=10), found_work, data_files, small_files, **kw)
    return Track(first_seen_at=NOW - timedelta(hours=1), looked=look)


def test_the_summary_is_read_from_the_snapshot_json_iceberg_writes():
    snapshot = {
        "sequence-number": 4,
        "snapshot-id": 3051729675574597004,
        "parent-snapshot-id": 3051729675574597003,
        "timestamp-ms": 1718892000000,
        "summary": {
            "operation": "overwrite",
            "added-data-files": "4",
            "total-data-files": "40",
            "total-delete-files": "9",
            "total-records": "1200",
            "total-files-size": "41943040",
            "lakelock.mode": "incremental",
        },
        "manifest-list": "file:/wh/db/t/metadata/snap-1.avro",
        "schema-id": 0,
    }

    s = Summary.of("lake.db.t", snapshot, snapshots=12)

    assert s.snapshot_id == 3051729675574597004
    assert s.committed_at == datetime(2024, 6, 20, 14, 0, tzinfo=UTC)
    assert (s.data_files, s.delete_files, s.records, s.files_bytes) == (40, 9, 1200, 40 * MIB)
    assert s.snapshots == 12 and s.mode == "incremental"
    assert s.avg_file_bytes == 40 * MIB / 49


def test_a_table_of_big_files_without_deletes_is_left_alone():
    a = judged(summary(data_files=500))

    assert not a.debt
    assert a.healthy.startswith("no debt in its summary: 500 data files (avg 128.00 MiB)")


def test_any_delete_file_plans_the_table():
    a = judged(summary(delete_files=1))

    assert a.debt == ("1 delete files",)


def test_small_files_by_the_average_plan_the_table_from_the_threshold_on():
    assert judged(summary(data_files=10, avg=MIB)).debt == (
        "~10 small files of 10 (avg 1.00 MiB, small < 96.0 MiB; threshold 10)",
    )
    assert not judged(summary(data_files=9, avg=MIB)).debt
    # min-input-files above min_small_files raises the bar
    config = replace(
        CONFIG,
        rewrite_data_files=replace(
            CONFIG.rewrite_data_files,
            options={**CONFIG.rewrite_data_files.options, "min-input-files": "12"},
        ),
    )
    assert not judged(summary(data_files=11, avg=MIB), config=config).debt


def test_a_table_below_min_small_files_is_planned_when_one_partition_could_be_due():
    """A partition is due at plan.trigger_small_files whatever the table's total (the plan's
    triggers): a table-wide min_small_files above it must not hide it from the fleet."""
    config = replace(CONFIG, plan=replace(CONFIG.plan, min_small_files=20))
    assert judged(summary(data_files=12, avg=MIB), config=config).debt == (
        "~12 small files of 12 (avg 1.00 MiB, small < 96.0 MiB; threshold 12)",
    )
    assert not judged(summary(data_files=11, avg=MIB), config=config).debt


def test_files_added_since_the_last_plan_count_as_small():
    # big on average, but the last plan counted 6 small files and 5 files came since
    track = looked(snapshot_id=6, data_files=100, small_files=6)

    a = judged(summary(data_files=105), track)

    assert a.small_files == 11
    assert a.debt and a.debt[0].startswith("~11 small files of 105")
    assert not judged(summary(data_files=103), track).debt


def test_an_unchanged_snapshot_whose_plan_found_nothing_is_not_planned_again():
    track = looked(snapshot_id=7, found_work=False)

    same = judged(summary(snapshot_id=7, delete_files=3), track)
    changed = judged(summary(snapshot_id=8, delete_files=3), track)

    assert not same.debt
    assert same.healthy == "unchanged since its plan at 2024-06-20 13:50:00 found nothing to do"
    assert changed.debt == ("3 delete files",)


def test_an_unchanged_snapshot_whose_plan_found_work_is_planned_again():
    # e.g. its groups were held by another maintenance lease, or its run failed
    assert judged(summary(delete_files=3), looked(found_work=True)).debt == ("3 delete files",)


def test_many_snapshots_plan_the_table_unless_expiry_is_off():
    many = summary(snapshots=500)
    off = replace(CONFIG, expire_snapshots=replace(CONFIG.expire_snapshots, enabled=False))

    assert judged(many).debt == ("500 snapshots kept (max_snapshots 500)",)
    assert not judged(summary(snapshots=499)).debt
    assert not judged(many, config=off).debt


def test_the_daily_full_rewrite_plans_the_table_even_when_its_snapshot_is_unchanged():
    config = replace(CONFIG, plan=PlanConfig(full_rewrite_at=time(3, 0)))
    track = looked(found_work=False)

    due = judged(summary(), track, config=config)
    done_today = judged(
        summary(),
        replace(track, looked=replace(track.looked, last_full_rewrite_at=NOW - timedelta(hours=2))),
        config=config,
    )
    # without a plan to go by, the current snapshot tells when it is the rewrite's own
    committed = judged(
        summary(mode="rewrite-all", committed_at=NOW - timedelta(hours=1)), config=config
    )

    assert due.debt == ("daily rewrite-all due at 03:00 UTC",)
    assert not done_today.debt
    assert not committed.debt


def test_hot_partitions_left_alone_are_looked_at_again_once_the_window_passed():
    track = looked(found_work=False, recheck_at=NOW - timedelta(seconds=1))
    not_yet = looked(found_work=False, recheck_at=NOW + timedelta(minutes=1))

    assert judged(summary(delete_files=3), track).debt == (
        "hot partitions left alone at the last plan have had time to cool",
    )
    assert not judged(summary(delete_files=3), not_yet).debt


def test_a_table_not_planned_for_replan_after_is_planned_whatever_its_summary():
    seen = Track(first_seen_at=NOW - timedelta(hours=7))

    assert judged(summary(), seen, replan_after=timedelta(hours=6)).debt == (
        "not planned for 7.0h (replan_after)",
    )
    assert not judged(summary(), seen, replan_after=None).debt
    recently = looked(found_work=False)
    assert not judged(summary(), recently, replan_after=timedelta(hours=6)).debt


def test_an_empty_table_is_left_alone_and_one_without_totals_is_planned():
    assert judged(Summary("lake.db.t", snapshots=0)).healthy == "no snapshot: never written"
    unknown = Summary("lake.db.t", snapshot_id=1, committed_at=NOW, snapshots=1)
    assert judged(unknown).debt == ("the snapshot summary has no totals: only a plan can tell",)


def test_most_small_files_and_deletes_first_then_the_oldest_snapshot_then_the_healthy():
    a = judged(summary(table="lake.db.a", data_files=40, avg=MIB))
    b = judged(summary(table="lake.db.b", data_files=12, avg=MIB, delete_files=30))
    c = judged(summary(table="lake.db.c", data_files=12, avg=MIB))
    d = judged(summary(table="lake.db.d", data_files=12, avg=MIB, committed_at=NOW - timedelta(1)))
    healthy = judged(summary(table="lake.db.0"))

    assert [x.table for x in rank([healthy, c, a, d, b])] == [
        "lake.db.b",
        "lake.db.a",
        "lake.db.d",
        "lake.db.c",
        "lake.db.0",
    ]


def test_debt_that_waits_grows_until_it_comes_first():
    old = Track(first_seen_at=NOW - timedelta(days=2), debt_seen_at=NOW - timedelta(hours=40))
    waiting = judged(summary(table="lake.db.small", data_files=10, avg=MIB), old)
    fresh = judged(summary(table="lake.db.big", data_files=400, avg=MIB))

    assert [x.table for x in rank([fresh, waiting])] == ["lake.db.small", "lake.db.big"]


@given(
    small=st.integers(0, 10_000),
    deletes=st.integers(0, 10_000),
    rival=st.floats(0, 1e9, allow_nan=False),
)
def test_no_table_starves_behind_debt_that_keeps_coming_back(small, deletes, rival):
    # however high a fresh rival scores, waiting long enough outranks it
    hours = rival / (small + deletes + 1) + 1
    assert score(small, deletes, age=timedelta(hours=hours)) > rival


def test_the_track_keeps_when_debt_was_first_seen_until_it_is_gone():
    debt = judged(summary(delete_files=3))
    track = advance(None, debt, NOW)
    later = advance(track, debt, NOW + timedelta(hours=1))
    cleared = advance(later, judged(summary()), NOW + timedelta(hours=2))

    assert track == Track(first_seen_at=NOW, debt_seen_at=NOW)
    assert later.debt_seen_at == NOW
    assert cleared == Track(first_seen_at=NOW, debt_seen_at=None)


def _hour(hr: int, *, small: int, age: timedelta) -> PartitionStats:
    return PartitionStats(
        {"hr": hr},
        name=f"hr={hr}",
        last_updated_at=NOW - age,
        data_files=small,
        data_bytes=small * MIB,
        small_files=small,
    )


def test_a_plan_that_left_hot_partitions_is_looked_at_again_after_the_hot_window():
    config = TableConfig(
        "lake.db.t",
        lease=LeaseConfig(scope="partitions"),
        plan=PlanConfig(hot_window=timedelta(minutes=15), min_small_files=5),
    )
    stats = TableStats(
        "lake.db.t",
        partitions=(_hour(1, small=8, age=timedelta(minutes=5)),),
        current_snapshot_id=7,
        small_file_bytes=config.small_file_bytes,
    )
    cold = replace(stats, partitions=(_hour(1, small=8, age=timedelta(hours=2)),))

    hot_look = Look.of_plan(stats, plan(stats, config, NOW), NOW, hot_window=timedelta(minutes=15))
    cold_look = Look.of_plan(cold, plan(cold, config, NOW), NOW, hot_window=timedelta(minutes=15))

    assert not hot_look.found_work and hot_look.recheck_at == NOW + timedelta(minutes=15)
    assert (hot_look.snapshot_id, hot_look.data_files, hot_look.small_files) == (7, 8, 8)
    assert cold_look.found_work and cold_look.recheck_at is None


def test_a_run_that_did_all_it_planned_leaves_its_new_snapshot_judged():
    after = TableStats("lake.db.t", current_snapshot_id=9, small_file_bytes=1)

    done = Look.after_run(None, after, NOW, done=True)
    held = Look.after_run(None, after, NOW, done=False)

    assert (done.snapshot_id, done.found_work) == (9, False)
    assert held.found_work
    track = Track(first_seen_at=NOW, looked=done)
    assert not judged(summary(snapshot_id=9, delete_files=2), track).debt

"""Which data commits can conflict with a rewrite in flight (docs/catalog-front.md §3), decided
from the files a commit's manifests add and remove: only those the front holds under a
maintenance lease or a drain; and how long a held writer is told to wait."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from pyiceberg.manifest import DataFile, DataFileContent

from service.catalog.changes import can_conflict
from service.catalog.manifests import DELETE_FILE_PATH_ID, PartitionFiles
from service.lock.refusals import _expected_s
from service.lock.rows import IntentRow, LeaseRow
from tests.support.iceberg_commits import counted

OLD = "file:/lake/db/t/data/old.parquet"
NEW = "file:/lake/db/t/data/new.parquet"


def data(path: str) -> DataFile:
    return DataFile.from_args(content=DataFileContent.DATA, file_path=path, record_count=3)


def position_deletes(*targets: str) -> DataFile:
    """A position delete file whose `file_path` bounds span `targets` (none: no bounds)."""
    bounds = {}
    if targets:
        lower, upper = min(targets).encode(), max(targets).encode()
        bounds = {"lower_bounds": {DELETE_FILE_PATH_ID: lower}}
        bounds["upper_bounds"] = {DELETE_FILE_PATH_ID: upper}
    return DataFile.from_args(
        content=DataFileContent.POSITION_DELETES,
        file_path="file:/lake/db/t/data/pos.parquet",
        record_count=1,
        **bounds,
    )


def equality_deletes() -> DataFile:
    return DataFile.from_args(
        content=DataFileContent.EQUALITY_DELETES,
        file_path="file:/lake/db/t/data/eq.parquet",
        record_count=1,
    )


def test_equality_deletes_are_counted_apart_among_a_partitions_delete_files():
    """What the front adds to a partition's due counts (docs/design.md §5.1): data, delete,
    data deleted, equality deletes among the delete files."""
    upsert = counted((data(NEW), True), (equality_deletes(), True), (position_deletes(NEW), True))
    assert list(upsert.by_partition.values()) == [
        PartitionFiles(data_added=1, deletes_added=2, equality_added=1)
    ]
    rewrite = counted((data(OLD), False), (data(NEW), True), (equality_deletes(), False))
    assert list(rewrite.by_partition.values()) == [
        PartitionFiles(data_added=1, data_deleted=1, deletes_removed=1)
    ]


def test_appends_and_equality_deletes_cannot_conflict():
    assert not can_conflict([counted((data(NEW), True))])
    assert not can_conflict([counted((data(NEW), True), (equality_deletes(), True))])


def test_position_deletes_against_the_commits_own_new_file_cannot_conflict():
    """A Flink upsert: a key written twice in one checkpoint deletes its first row by
    position, in the file the same commit adds."""
    upsert = counted((data(NEW), True), (equality_deletes(), True), (position_deletes(NEW), True))
    assert not can_conflict([upsert])
    # the file may come from another snapshot of the same commit
    assert not can_conflict([counted((data(NEW), True)), counted((position_deletes(NEW), True))])


def test_position_deletes_against_an_older_file_or_an_unknown_one_can_conflict():
    """Spark's merge-on-read MERGE: its position deletes point at files a rewrite may be
    replacing; a file whose bounds span several data files, or have none, is not known to be
    harmless."""
    assert can_conflict([counted((data(NEW), True), (position_deletes(OLD), True))])
    assert can_conflict([counted((position_deletes(NEW, OLD), True), (data(NEW), True))])
    assert can_conflict([counted((data(NEW), True), (position_deletes(), True))])


def test_a_commit_that_removes_data_or_delete_files_can_conflict():
    """A copy-on-write MERGE, an overwrite, a delete of whole files."""
    assert can_conflict([counted((data(NEW), True), (data(OLD), False))])
    assert can_conflict([counted((data(OLD), False))])
    assert can_conflict([counted((equality_deletes(), False), (data(NEW), True))])


def test_a_held_writer_is_told_the_holds_expected_remaining_time():
    """Retry-After from the table's recent maintenance holds: their median, less what the
    blocking lease has held, no later than its expiry; 1 s without a history."""
    at = datetime(2024, 6, 20, 12, tzinfo=UTC)
    lease = LeaseRow(
        id="m1",
        table="db.t",
        kind="maintenance",
        holder="compactor-1",
        request_id="q1",
        partitions=None,
        ttl_s=60.0,
        token=1,
        acquired_at=at - timedelta(seconds=4),
        expires_at=at + timedelta(seconds=30),
    )
    assert _expected_s(lease, [], at) == 1.0
    assert _expected_s(lease, [10.0, 12.0, 40.0], at) == 8.0  # median 12, held 4
    assert _expected_s(lease, [2.0], at) == 1.0  # overdue: ask again soon
    assert _expected_s(lease, [100.0], at) == 30.0  # its lease expires first
    drain = IntentRow(
        table="db.t",
        request_id="r1",
        holder="compactor-1",
        partitions=None,
        opened_at=at,
        expires_at=at + timedelta(seconds=5),
    )
    assert _expected_s(drain, [10.0, 12.0, 40.0], at) == 12.0  # the drain, then the hold

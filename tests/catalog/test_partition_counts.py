"""What a commit through the front adds to its partitions' due counts (docs/design.md §5.1),
counted by the front's own manifest reader (service.catalog.manifests) and named by
service.catalog.partitions: net of what the commit deleted, over all its snapshots, never below
zero, as the gate's counts are."""

from __future__ import annotations

from pyiceberg.manifest import DataFile, DataFileContent
from pyiceberg.partitioning import PartitionField, PartitionSpec
from pyiceberg.schema import Schema
from pyiceberg.table.metadata import new_table_metadata
from pyiceberg.table.sorting import UNSORTED_SORT_ORDER
from pyiceberg.transforms import IdentityTransform
from pyiceberg.typedef import Record
from pyiceberg.types import DateType, LongType, NestedField

from service.catalog.partitions import per_partition
from service.lock.due import Files
from tests.support.iceberg_commits import counted

METADATA = new_table_metadata(
    Schema(NestedField(1, "id", LongType(), required=True), NestedField(2, "dt", DateType())),
    PartitionSpec(PartitionField(2, 1000, IdentityTransform(), "dt")),
    UNSORTED_SORT_ORDER,
    "file:/lake/db/t",
)
DAY = 19894  # 2024-06-20
PARTITION = "dt=2024-06-20"


def _file(content: DataFileContent, name: str, day: int = DAY) -> DataFile:
    return DataFile.from_args(
        content=content,
        file_path=f"file:/lake/db/t/data/{name}",
        record_count=1,
        partition=Record(day),
    )


def data(name: str, day: int = DAY) -> DataFile:
    return _file(DataFileContent.DATA, name, day)


def vector(name: str) -> DataFile:
    return _file(DataFileContent.POSITION_DELETES, name)


def equality(name: str) -> DataFile:
    return _file(DataFileContent.EQUALITY_DELETES, name)


def test_an_append_counts_its_files_and_an_upsert_its_equality_deletes_among_them():
    upsert = counted((data("a"), True), (equality("e"), True), (vector("p"), True))
    assert per_partition(METADATA, [upsert]) == ({PARTITION: Files(1, 2, 1)}, frozenset())


def test_a_copy_on_write_commit_over_two_snapshots_adds_nothing_to_count():
    """pyiceberg's overwrite: a snapshot that deletes the partition's file, one that appends
    its replacement. The partition was rewritten; its count did not grow."""
    deleted, appended = counted((data("old"), False)), counted((data("new"), True))
    assert per_partition(METADATA, [deleted, appended]) == ({}, frozenset({PARTITION}))


def test_a_merge_that_replaces_a_deletion_vector_adds_no_delete_file():
    """Version 3: a MERGE deleting more rows of a data file writes its vector anew and removes
    the old one; the new rows it inserts are one data file more."""
    merge = counted((data("new"), True), (vector("dv-2"), True), (vector("dv-1"), False))
    assert per_partition(METADATA, [merge]) == ({PARTITION: Files(1, 0, 0)}, frozenset())


def test_a_commit_that_deletes_more_than_it_adds_counts_nothing_below_zero():
    shrink = counted(
        (data("a"), False), (data("b"), False), (data("c"), True), (equality("e"), False)
    )
    grow = counted((data("d", day=DAY + 1), True))
    assert per_partition(METADATA, [shrink, grow]) == (
        {"dt=2024-06-21": Files(1, 0, 0)},
        frozenset({PARTITION}),
    )

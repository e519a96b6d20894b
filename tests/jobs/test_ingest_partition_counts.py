"""What a commit added per partition, read from the summaries Iceberg 1.9.2 wrote (copied from
real snapshots: a table with `write.summary.partition-limit` set, an INSERT, a merge-on-read
MERGE, a DELETE, and the two rewrites of a compaction)."""

import pytest

from ingest_gate.job.snapshots import partition_counts

# the MERGE of three rows into two hours of the click-event table: an insert and an update
# in hour 13, an update in hour 14
MERGE = {
    "added-data-files": "2",
    "added-delete-files": "2",
    "added-files-size": "5490",
    "added-position-delete-files": "2",
    "added-position-deletes": "2",
    "added-records": "3",
    "changed-partition-count": "2",
    "engine-name": "spark",
    "iceberg-version": "Apache Iceberg 1.9.2 (commit 071d5606bc6199a0be9b3f274ec7fbf111d88821)",
    "partition-summaries-included": "true",
    "partitions.dt=2024-06-20/hr=13": "added-data-files=1,added-position-delete-files=1,"
    "added-delete-files=1,added-records=2,added-files-size=2793,added-position-deletes=1",
    "partitions.dt=2024-06-20/hr=14": "added-data-files=1,added-position-delete-files=1,"
    "added-delete-files=1,added-records=1,added-files-size=2697,added-position-deletes=1",
    "lakelock.query-id": "3b1c",
    "lakelock.batch-id": "7",
    "total-data-files": "5",
    "total-delete-files": "2",
}


def test_a_merge_counts_its_data_and_delete_files_per_partition():
    assert partition_counts(MERGE) == {
        "dt=2024-06-20/hr=13": (1, 1),
        "dt=2024-06-20/hr=14": (1, 1),
    }


def test_an_insert_counts_data_files_only_and_keeps_the_escaped_partition_path():
    summary = {
        "changed-partition-count": "1",
        "partition-summaries-included": "true",
        "partitions.name=a+b%2Fc%3Dd": "added-data-files=1,added-records=2,added-files-size=761",
    }
    # the path as Iceberg's partitionToPath escapes it: lakelock's partition name
    assert partition_counts(summary) == {"name=a+b%2Fc%3Dd": (1, 0)}


def test_a_delete_counts_its_delete_file():
    summary = {
        "partition-summaries-included": "true",
        "partitions.name=x": "added-position-delete-files=1,added-delete-files=1,"
        "added-files-size=1530,added-position-deletes=1",
    }
    assert partition_counts(summary) == {"name=x": (0, 1)}


def test_a_commit_that_removes_files_adds_nothing_to_count():
    """A rewrite (two files into one) and a position-delete rewrite: the files a partition
    holds shrank, and a count never goes below zero."""
    rewrite = {
        "partition-summaries-included": "true",
        "partitions.name=x": "added-data-files=1,deleted-data-files=2,added-records=2,"
        "deleted-records=3,added-files-size=781,removed-files-size=1469",
    }
    deletes = {
        "partition-summaries-included": "true",
        "partitions.name=x": "removed-position-delete-files=1,removed-delete-files=1,"
        "removed-files-size=1530,removed-position-deletes=1",
    }
    assert partition_counts(rewrite) == {}
    assert partition_counts(deletes) == {}


def test_a_copy_on_write_commit_counts_net_files():
    summary = {
        "partition-summaries-included": "true",
        "partitions.dt=2024-06-20": "added-data-files=3,deleted-data-files=1,added-records=9",
    }
    assert partition_counts(summary) == {"dt=2024-06-20": (2, 0)}


def test_no_counts_without_the_partition_summaries():
    """The table's `write.summary.partition-limit` is 0 (Iceberg's default), or the commit
    changed more partitions than it: Iceberg writes the count of partitions only."""
    over_the_limit = {k: v for k, v in MERGE.items() if not k.startswith("partition")}
    assert "changed-partition-count" in over_the_limit
    assert partition_counts(over_the_limit) is None
    assert partition_counts({}) is None


def test_a_malformed_entry_is_refused_with_its_key():
    summary = {"partition-summaries-included": "true", "partitions.dt=a": "added-data-files"}
    with pytest.raises(ValueError, match=r"partitions\.dt=a"):
        partition_counts(summary)

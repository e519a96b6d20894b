"""The names of the partitions a commit touched, as lakelock's scopes name them
(docs/design.md §4, "Scopes"; docs/catalog-front.md §3, "What a commit is").

    partition_name(spec, partition, schema) -> str
        one partition's name: the Iceberg partition path (`dt=2024-06-20/hr=13`)
    touched(metadata, written) -> Scope
        the names of the partitions the snapshots' new manifests add files to or delete files
        from; None (the whole table) when a file is in an unpartitioned or unknown spec
    per_partition(metadata, written) -> (dict[str, Files], frozenset[str])
        the data and delete files (of them equality deletes) added less those deleted, per
        partition name (docs/design.md §5.1), and the names of the partitions whose data
        files were deleted

A partition's name is the Iceberg partition path, `PartitionSpec.partitionToPath`. pyiceberg's
`partition_to_path` escapes with Python's `quote_plus`, which differs from Java's URLEncoder in
two characters (`~` and `*`); those are mapped back here.
"""

from __future__ import annotations

from pyiceberg.partitioning import PartitionSpec
from pyiceberg.schema import Schema
from pyiceberg.table.metadata import TableMetadata
from pyiceberg.typedef import Record

from service.catalog.manifests import PartitionFiles, Written
from service.lock.due import Files
from service.wire.scope import Scope

__all__ = ["partition_name", "per_partition", "touched"]


def partition_name(spec: PartitionSpec, partition: Record, schema: Schema) -> str:
    """`partition`'s name in `spec`, as Java's `PartitionSpec.partitionToPath` writes it."""
    return _java_escaped(spec.partition_to_path(partition, schema))


def touched(metadata: TableMetadata, written: list[Written]) -> Scope:
    """The partition names the snapshots' new manifests add files to or delete files from;
    None (the whole table) when a file is in an unpartitioned spec."""
    names: set[str] = set()
    specs = metadata.specs()
    schema = metadata.schema()
    for w in written:
        for (spec_id, _), partition in w.partitions.items():
            spec = specs.get(spec_id)
            if spec is None or spec.is_unpartitioned():
                return None  # a spec the table does not know is no smaller than the table
            names.add(partition_name(spec, partition, schema))
    return frozenset(names)


def per_partition(
    metadata: TableMetadata, written: list[Written]
) -> tuple[dict[str, Files], frozenset[str]]:
    """The files the snapshots added per partition name, and the partitions whose data files
    they deleted (docs/design.md §5.1). Counted over the whole commit, net of what it deleted
    or removed, none below zero, as the gate's counts are (ingest_gate.job.snapshots): a
    copy-on-write MERGE that rewrites a partition's data file adds no data file to it, a
    MERGE that replaces a data file's deletion vector no delete file. A partition whose counts
    did not grow is left out, and a file of an unpartitioned spec is in no partition: it is
    counted in none."""
    specs = metadata.specs()
    schema = metadata.schema()
    sums: dict[str, PartitionFiles] = {}
    for w in written:
        for key, counts in w.by_partition.items():
            spec = specs.get(key[0])
            if spec is None or spec.is_unpartitioned():
                continue
            name = partition_name(spec, w.partitions[key], schema)
            sums[name] = sums.get(name, PartitionFiles()).plus(counts)
    added = {name: files for name, c in sums.items() if (files := _net(c))}
    rewritten = frozenset(name for name, c in sums.items() if c.data_deleted)
    return added, rewritten


def _net(counts: PartitionFiles) -> Files:
    deletes = max(counts.deletes_added - counts.deletes_removed, 0)
    return Files(
        max(counts.data_added - counts.data_deleted, 0),
        deletes,
        min(counts.equality_added, deletes),
    )


def _java_escaped(path: str) -> str:
    # quote_plus keeps "~" and escapes "*"; Java's URLEncoder escapes "~" and keeps "*"
    return path.replace("~", "%7E").replace("%2A", "*")

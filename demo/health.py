"""A table's health as a reader finds it: live data and delete files per partition, read with
pyiceberg from the current metadata file (no Spark, no lakelock code in the way).

    h = sample(warehouse, "local.db.events")
    h = sample_at(metadata_location)        # a catalog's table: its current metadata file
    h.data_files, h.delete_files, h.bytes   # the whole table
    h.worst                                 # ("dt=2024-06-20/hr=13", Files(data=9, deletes=7))
    h.line()                                # "files 45 data + 31 delete, worst dt=.../hr=13 9+7"

Reads the manifests of the current snapshot only (pyiceberg's Avro reader, no pyarrow): a few
milliseconds for the demo's tables, so the demo's live lines and the streaming-health benchmark
sample it every few seconds while the stream runs.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

__all__ = ["Files", "Health", "sample", "sample_at", "static_table"]


@dataclass(frozen=True)
class Files:
    """The live files of one partition (or of the table)."""

    data: int = 0
    deletes: int = 0
    bytes: int = 0

    @property
    def total(self) -> int:
        """Data plus delete files: what a reader opens."""
        return self.data + self.deletes

    def plus(self, other: Files) -> Files:
        return Files(
            self.data + other.data,
            self.deletes + other.deletes,
            self.bytes + other.bytes,
        )


@dataclass(frozen=True)
class Health:
    """One sample: `at` (time.time()), the snapshot read, the files of each partition."""

    at: float
    snapshot_id: int | None
    partitions: Mapping[str, Files] = field(default_factory=dict)

    @property
    def table(self) -> Files:
        total = Files()
        for files in self.partitions.values():
            total = total.plus(files)
        return total

    @property
    def data_files(self) -> int:
        return self.table.data

    @property
    def delete_files(self) -> int:
        return self.table.deletes

    @property
    def bytes(self) -> int:
        return self.table.bytes

    @property
    def worst(self) -> tuple[str, Files] | None:
        """The partition with the most files (data plus delete), or None when empty."""
        if not self.partitions:
            return None
        return max(self.partitions.items(), key=lambda kv: (kv[1].total, kv[0]))

    def line(self) -> str:
        worst = self.worst
        where = f", worst {worst[0]} {worst[1].data}+{worst[1].deletes}" if worst else ""
        return f"files {self.data_files} data + {self.delete_files} delete{where}"

    def as_dict(self) -> dict[str, Any]:
        worst = self.worst
        return {
            "at": round(self.at, 3),
            "snapshot_id": self.snapshot_id,
            "data_files": self.data_files,
            "delete_files": self.delete_files,
            "bytes": self.bytes,
            "partitions": len(self.partitions),
            "worst_partition": None if worst is None else worst[0],
            "worst_data_files": None if worst is None else worst[1].data,
            "worst_delete_files": None if worst is None else worst[1].deletes,
            "per_partition": {
                name: [f.data, f.deletes] for name, f in sorted(self.partitions.items())
            },
        }


def sample(warehouse: Path, table: str) -> Health:
    """The live files now, per partition path (Iceberg's `dt=.../hr=...`), of a Hadoop-catalog
    table under `warehouse`.

    Raises:
        FileNotFoundError: the table has no metadata yet.
    """
    from service.ops.iceberg_audit import metadata_file

    return sample_at(str(metadata_file(warehouse, table)))


def sample_at(metadata_location: str, properties: Mapping[str, str] | None = None) -> Health:
    """The live files now, per partition path, of the table whose current metadata file is
    `metadata_location`: a table of any catalog, its metadata file as the catalog names it (on
    S3 with pyiceberg's `properties`: `s3.endpoint`, ...)."""
    return sample_table(static_table(metadata_location, properties))


def sample_table(iceberg: Any) -> Health:
    """The live files now, per partition path, of a pyiceberg table as loaded."""
    from pyiceberg.manifest import ManifestContent

    at = time.time()
    snapshot = iceberg.current_snapshot()
    if snapshot is None:
        return Health(at, None)
    schema, specs = iceberg.schema(), iceberg.specs()
    partitions: dict[str, Files] = {}
    for manifest in snapshot.manifests(iceberg.io):
        spec = specs[manifest.partition_spec_id]
        deletes = manifest.content == ManifestContent.DELETES
        for entry in manifest.fetch_manifest_entry(iceberg.io, discard_deleted=True):
            f = entry.data_file
            name = spec.partition_to_path(f.partition, schema) if spec.fields else ""
            size = f.file_size_in_bytes
            files = Files(deletes=1, bytes=size) if deletes else Files(data=1, bytes=size)
            partitions[name] = partitions.get(name, Files()).plus(files)
    return Health(at, snapshot.snapshot_id, partitions)


def static_table(metadata_location: str, properties: Mapping[str, str] | None = None) -> Any:
    """pyiceberg's read-only table at `metadata_location` (a StaticTable), through fsspec's file
    IO: the demo's install has no pyarrow (metadata and manifests only)."""
    from pyiceberg.table import StaticTable

    return StaticTable.from_metadata(
        metadata_location,
        properties={**(properties or {}), "py-io-impl": "pyiceberg.io.fsspec.FsspecFileIO"},
    )

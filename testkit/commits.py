"""Iceberg commits made by hand, for the tests and benchmarks of the catalog front: data files,
manifest entries, manifests and manifest lists written with pyiceberg into a table's folder, and
the body of a commit that adds a snapshot of them, as Iceberg's clients send it.

    manifest = new_manifest(table, snapshot_id, [entry(snapshot_id, data_file(table, "1", "f"),
                                                        ManifestEntryStatus.ADDED)])
    listed = manifest_list(table, snapshot_id, head.snapshot_id, seq, [manifest])
    body = snapshot_commit(table, snapshot_id, head.snapshot_id, listed, "append")

The tables are partitioned by one identity field; `data_file` names its partition value.
"""

from __future__ import annotations

import json
import time
import uuid
from typing import Any

from pyiceberg.manifest import (
    DataFile,
    DataFileContent,
    FileFormat,
    ManifestEntry,
    ManifestEntryStatus,
    ManifestFile,
    write_manifest,
    write_manifest_list,
)
from pyiceberg.typedef import Record

__all__ = ["data_file", "entry", "manifest_list", "new_manifest", "rest_body", "snapshot_commit"]


def data_file(
    table: Any, partition: str, name: str, content: DataFileContent = DataFileContent.DATA
) -> DataFile:
    path = f"{table.location()}/data/p={partition}/{name}.parquet"
    return DataFile.from_args(
        content=content,
        file_path=path,
        file_format=FileFormat.PARQUET,
        partition=Record(partition),
        record_count=1,
        file_size_in_bytes=100,
        _table_format_version=2,
    )


def entry(snapshot_id: int, file: DataFile, status: ManifestEntryStatus, seq: int | None = None):
    return ManifestEntry.from_args(
        status=status,
        snapshot_id=snapshot_id,
        sequence_number=seq,
        file_sequence_number=seq,
        data_file=file,
    )


def new_manifest(
    table: Any, snapshot_id: int, entries: list[ManifestEntry], compression: str = "null"
) -> ManifestFile:
    """A manifest of `entries` in the table's metadata folder (`compression`: an Avro codec,
    pyiceberg's names: null, deflate, ...)."""
    path = f"{table.location()}/metadata/{uuid.uuid4()}-m0.avro"
    with write_manifest(
        format_version=2,
        spec=table.spec(),
        schema=table.schema(),
        output_file=table.io.new_output(path),
        snapshot_id=snapshot_id,
        avro_compression=compression,  # type: ignore[arg-type]
    ) as writer:
        for e in entries:
            writer.add_entry(e)
    return writer.to_manifest_file()


def manifest_list(
    table: Any, snapshot_id: int, parent: int, seq: int, manifests: list[ManifestFile]
) -> str:
    path = f"{table.location()}/metadata/snap-{snapshot_id}-{uuid.uuid4()}.avro"
    with write_manifest_list(
        format_version=2,
        output_file=table.io.new_output(path),
        snapshot_id=snapshot_id,
        parent_snapshot_id=parent,
        sequence_number=seq,
        avro_compression="null",
    ) as writer:
        writer.add_manifests(manifests)
    return path


def snapshot_commit(
    table: Any, snapshot_id: int, parent: int, listed: str, operation: str, **summary: str
) -> dict[str, Any]:
    head = table.current_snapshot().snapshot_id
    return {
        "requirements": [{"type": "assert-ref-snapshot-id", "ref": "main", "snapshot-id": head}],
        "updates": [
            {
                "action": "add-snapshot",
                "snapshot": {
                    "snapshot-id": snapshot_id,
                    "parent-snapshot-id": parent,
                    "sequence-number": table.metadata.last_sequence_number + 1,
                    "timestamp-ms": int(time.time() * 1000),
                    "manifest-list": listed,
                    "summary": {"operation": operation, **summary},
                    "schema-id": table.schema().schema_id,
                },
            },
            {
                "action": "set-snapshot-ref",
                "ref-name": "main",
                "type": "branch",
                "snapshot-id": snapshot_id,
            },
        ],
    }


def rest_body(tx: Any) -> dict[str, Any]:
    """The REST commit body of a pyiceberg transaction, as pyiceberg sends it (its files
    written already), for a test to send itself."""
    return {
        "requirements": [json.loads(r.model_dump_json()) for r in tx._requirements],
        "updates": [json.loads(u.model_dump_json()) for u in tx._updates],
    }

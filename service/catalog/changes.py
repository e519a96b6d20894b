"""What a catalog commit is, read from its updates and the manifests its snapshots wrote.

    change = read_change(table, base, updated, updates, principal=..., headers=...)
    change.kind          "maintenance" | "data" | "table"
    change.partitions    the partition names its snapshots' new manifests add or delete in

A commit is maintenance when one of its snapshots has operation `replace` (rewrite of data
files, of position delete files, of manifests), or removes delete files and adds nothing (a
removal of dangling deletes), or when it removes snapshots (`expire_snapshots`). It is data when
a snapshot appends, overwrites or deletes; else it changes the table only (schema, properties,
refs). The lease it names: `lakelock.lease-id` and `lakelock.token` in the summary of its
snapshot, else the `X-Lakelock-Lease-Id` and `X-Lakelock-Token` headers (a commit that removes
snapshots carries no summary).

Partitions are named as lakelock names them (docs/design.md §4): the Iceberg partition path,
`PartitionSpec.partitionToPath`. pyiceberg's `partition_to_path` escapes with Python's
`quote_plus`, which differs from Java's URLEncoder in two characters (`~` and `*`); those are
mapped back here.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Mapping, Sequence

from pyiceberg.io import FileIO
from pyiceberg.manifest import ManifestEntryStatus
from pyiceberg.table.metadata import TableMetadata
from pyiceberg.table.snapshots import Snapshot
from pyiceberg.table.update import AddSnapshotUpdate, RemoveSnapshotsUpdate, TableUpdate

from service.lock.fence import Change, ChangeKind
from service.wire.errors import InvalidRequest
from service.wire.scope import Scope

__all__ = ["read_change", "LEASE_HEADER", "TOKEN_HEADER", "LEASE_ID", "TOKEN"]

LEASE_ID, TOKEN = "lakelock.lease-id", "lakelock.token"
LEASE_HEADER, TOKEN_HEADER = "x-lakelock-lease-id", "x-lakelock-token"

_MAINTENANCE_OPS = {"replace"}
_DATA_OPS = {"append", "overwrite", "delete"}
# the summary totals a commit's event carries and a data commit adds to the table's debt
_COUNTED = (
    "added-data-files",
    "deleted-data-files",
    "added-delete-files",
    "removed-delete-files",
    "added-records",
    "deleted-records",
)


def read_change(
    table: str,
    updated: TableMetadata,
    updates: Sequence[TableUpdate],
    io: FileIO,
    *,
    principal: str,
    headers: Mapping[str, str],
    held: Callable[[], bool],
) -> Change:
    """The commit `updates`, which make `updated`, as service.lock.fence judges it.

    The partitions a data commit touched are named only when `held()` says a maintenance lease
    or intent may be live on the table, so that the fence needs them: reading a snapshot's
    manifest list is most of what a commit costs the service (about 10 ms at 200 manifests).
    Otherwise they are left unnamed (the whole table, to the fence) and the event carries the
    summary's `changed-partition-count`."""
    snapshots = [u.snapshot for u in updates if isinstance(u, AddSnapshotUpdate)]
    removes = any(isinstance(u, RemoveSnapshotsUpdate) for u in updates)
    operations = [_operation(s) for s in snapshots] + (["remove-snapshots"] if removes else [])
    kind = _kind(snapshots, removes)
    summary = {}
    for snapshot in snapshots:
        summary.update(snapshot.summary.additional_properties if snapshot.summary else {})
    lease_id = _lease_id(summary.get(LEASE_ID) or headers.get(LEASE_HEADER))
    token_text = summary.get(TOKEN) or headers.get(TOKEN_HEADER)
    counts: dict[str, int] = {}
    for name in _COUNTED:
        total = sum(int(summary_of(s).get(name, 0)) for s in snapshots)
        if total:
            counts[name] = total
    changed = [int(summary_of(s).get("changed-partition-count", 0)) for s in snapshots]
    if any(changed):  # several snapshots of one commit may change the same partitions
        counts["changed-partition-count"] = max(changed)
    named = kind != "data" or held()
    if not snapshots:
        partitions: Scope = frozenset()
    else:
        partitions = touched(updated, snapshots, io) if named else None
    return Change(
        table=table,
        kind=kind,
        principal=principal,
        operations=tuple(operations),
        snapshot_id=snapshots[-1].snapshot_id if snapshots else None,
        lease_id=lease_id,
        token=_int(token_text),
        partitions=partitions,
        named=named,
        counts=counts,
    )


def _lease_id(text: str | None) -> str | None:
    """The lease a commit names: None for none (the ingest job writes `none` when it committed
    without one); anything else must be a lease id.

    Raises:
        InvalidRequest: not a lease id (a UUID).
    """
    if text in (None, "", "none"):
        return None
    try:
        return str(uuid.UUID(text))
    except ValueError:
        raise InvalidRequest(
            f"{LEASE_ID} (or {LEASE_HEADER}) is {text[:60]!r}: send the lease_id lakelock "
            "granted (a UUID), or none"
        ) from None


def summary_of(snapshot: Snapshot) -> dict[str, str]:
    return dict(snapshot.summary.additional_properties) if snapshot.summary else {}


def _operation(snapshot: Snapshot) -> str:
    return snapshot.summary.operation.value if snapshot.summary else "unknown"


def _kind(snapshots: list[Snapshot], removes: bool) -> ChangeKind:
    ops = {_operation(s) for s in snapshots}
    if removes or ops & _MAINTENANCE_OPS or any(_only_removes_deletes(s) for s in snapshots):
        return "maintenance"
    if ops & _DATA_OPS:
        return "data"
    return "table"


def _only_removes_deletes(snapshot: Snapshot) -> bool:
    s = summary_of(snapshot)
    removed = int(s.get("removed-delete-files", 0))
    others = sum(
        int(s.get(name, 0))
        for name in ("added-data-files", "deleted-data-files", "added-delete-files")
    )
    return removed > 0 and others == 0


def _int(text: str | None) -> int | None:
    try:
        return None if text is None else int(text)
    except ValueError:
        return None


def touched(metadata: TableMetadata, snapshots: list[Snapshot], io: FileIO) -> Scope:
    """The partitions the snapshots' own manifests add files to or delete files from; None
    (the whole table) when a file is in an unpartitioned spec."""
    names: set[str] = set()
    specs = metadata.specs()
    schema = metadata.schema()
    for snapshot in snapshots:
        for manifest in snapshot.manifests(io):
            if manifest.added_snapshot_id != snapshot.snapshot_id:
                continue  # carried over from the parent: nothing of this commit
            spec = specs[manifest.partition_spec_id]
            if spec.is_unpartitioned():
                return None
            for entry in manifest.fetch_manifest_entry(io, discard_deleted=False):
                if entry.status in (ManifestEntryStatus.ADDED, ManifestEntryStatus.DELETED):
                    names.add(
                        _java_escaped(spec.partition_to_path(entry.data_file.partition, schema))
                    )
    return frozenset(names)


def _java_escaped(path: str) -> str:
    # quote_plus keeps "~" and escapes "*"; Java's URLEncoder escapes "~" and keeps "*"
    return path.replace("~", "%7E").replace("%2A", "*")

"""What kind of commit a catalog commit is, read from its updates and what its snapshots wrote:
the `Change` service.lock.fence judges (docs/catalog-front.md §3, "What a commit is").

    read_change(table, base, updated, updates, io, *, principal, headers) -> Change
        the commit: its kind ("maintenance" | "data" | "table"), the partitions it touched,
        its counts, the files it added per partition (docs/design.md §5.1), the partitions it
        rewrote, whether it can conflict with a rewrite, and the lease it names
    named_lease(updates, headers) -> (lease id | None, token | None)
        the lease a commit names
    can_conflict(written) -> bool
        whether a commit that writes `written` can conflict with a rewrite in flight
    summary_of(snapshot) -> dict[str, str]
        a snapshot summary's properties (none: {})

What a snapshot did comes from the entries of its new manifests (service.catalog.manifests),
never from its summary, which the client writes as it likes: the summary's `operation` counts
only where it says `replace`. The partitions are named by service.catalog.partitions. The lease
a commit names: `lakelock.lease-id` and `lakelock.token` in the summary of its snapshot, else
the `X-Lakelock-Lease-Id` and `X-Lakelock-Token` headers (a commit that removes snapshots
carries no summary).
"""

from __future__ import annotations

import uuid
from collections.abc import Iterable, Mapping, Sequence

from pyiceberg.io import FileIO
from pyiceberg.table.metadata import TableMetadata
from pyiceberg.table.refs import SnapshotRefType
from pyiceberg.table.snapshots import Snapshot
from pyiceberg.table.update import (
    AddSnapshotUpdate,
    RemoveSnapshotRefUpdate,
    RemoveSnapshotsUpdate,
    SetSnapshotRefUpdate,
    TableUpdate,
)

from service.catalog.manifests import Written, check_lists, read_written
from service.catalog.partitions import per_partition, touched
from service.lock.fence import Change, ChangeKind
from service.wire import MAX_TOKEN
from service.wire.errors import InvalidRequest
from service.wire.scope import Scope

__all__ = [
    "LEASE_HEADER",
    "LEASE_ID",
    "TOKEN",
    "TOKEN_HEADER",
    "can_conflict",
    "named_lease",
    "read_change",
    "summary_of",
]

LEASE_ID, TOKEN = "lakelock.lease-id", "lakelock.token"
LEASE_HEADER, TOKEN_HEADER = "x-lakelock-lease-id", "x-lakelock-token"

_DATA_OPS = {"append", "overwrite", "delete"}


def read_change(
    table: str,
    base: TableMetadata | None,
    updated: TableMetadata,
    updates: Sequence[TableUpdate],
    io: FileIO,
    *,
    principal: str,
    headers: Mapping[str, str],
) -> Change:
    """The commit `updates`, which make `updated` of `base`, as service.lock.fence judges it.

    Every snapshot's new manifests are read (typically one to three small files, and the
    parent's manifest list, remembered from the commit that made it): what a snapshot is, and
    which partitions it touched, depend on them. The partitions are always named, so the fence
    judges every commit on what it touched, whatever was granted since it was read."""
    snapshots = [u.snapshot for u in updates if isinstance(u, AddSnapshotUpdate)]
    removes = any(isinstance(u, RemoveSnapshotsUpdate) for u in updates)
    check_lists(snapshots, updated.location)  # before any is read
    befores = _befores(snapshots, updates, base, updated)
    new_ids = {s.snapshot_id for s in snapshots}
    written = [
        read_written(s, befores[s.snapshot_id], io, updated.location, new_ids) for s in snapshots
    ]
    kind = _kind(snapshots, written, removes)
    lease_id, token = named_lease(updates, headers)
    partitions: Scope = touched(updated, written) if snapshots else frozenset()
    added, rewritten = per_partition(updated, written)
    conflicts = can_conflict(written)
    if _moves_a_branch(updates, {s.snapshot_id for s in snapshots}, base):
        # a branch set to a snapshot this commit did not add (a rollback, a cherry-pick), or
        # removed: what it changes is no manifest's to say, so it counts as the whole table
        kind = "data" if kind == "table" else kind
        partitions = None
        conflicts = True
    return Change(
        table=table,
        kind=kind,
        principal=principal,
        operations=tuple(
            [_operation(s) for s in snapshots] + (["remove-snapshots"] if removes else [])
        ),
        snapshot_id=snapshots[-1].snapshot_id if snapshots else None,
        lease_id=lease_id,
        token=token,
        partitions=partitions,
        counts=_counts(written),
        conflicts=conflicts,
        added=added,
        rewritten=rewritten,
    )


def named_lease(
    updates: Sequence[TableUpdate], headers: Mapping[str, str]
) -> tuple[str | None, int | None]:
    """The lease id and token a commit names: `lakelock.lease-id` and `lakelock.token` in the
    summaries of the snapshots it adds (the last one's where several say), else the headers.

    Raises:
        InvalidRequest: a lease id that is no UUID, a token no fencing token can be.
    """
    summary: dict[str, str] = {}
    for update in updates:
        if isinstance(update, AddSnapshotUpdate):
            summary.update(summary_of(update.snapshot))
    return (
        _lease_id(summary.get(LEASE_ID) or headers.get(LEASE_HEADER)),
        _int(summary.get(TOKEN) or headers.get(TOKEN_HEADER)),
    )


def can_conflict(written: Iterable[Written]) -> bool:
    """Whether a commit that writes `written` can conflict with a rewrite in flight
    (docs/catalog-front.md §3): it removes data or delete files, or adds position deletes
    against a data file it did not add itself. Appends, equality deletes, and position deletes
    against its own new files (a Flink upsert's) cannot: a rewrite keeps its inputs' sequence
    numbers, so deletes newer than them still apply to the rows it wrote again."""
    snapshots = list(written)
    added = set().union(*(w.added_paths for w in snapshots))
    return any(
        w.deleted_data
        or w.removed_deletes
        or any(target is None or target not in added for target in w.position_targets)
        for w in snapshots
    )


def _counts(written: list[Written]) -> dict[str, int]:
    """The commit's totals, those not zero; the partitions changed is the most any one
    snapshot changed (several snapshots of one commit may change the same partitions)."""
    counts: dict[str, int] = {}
    for w in written:
        for name, value in w.counts().items():
            counts[name] = counts.get(name, 0) + value
    changed = max((len(w.partitions) for w in written), default=0)
    counts["changed-partition-count"] = changed
    return {name: value for name, value in counts.items() if value}


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


def _kind(snapshots: list[Snapshot], written: list[Written], removes: bool) -> ChangeKind:
    kinds = {_snapshot_kind(s, w) for s, w in zip(snapshots, written, strict=True)}
    if removes or "maintenance" in kinds:
        return "maintenance"
    return "data" if "data" in kinds else "table"


def _snapshot_kind(snapshot: Snapshot, w: Written) -> ChangeKind:
    """Maintenance: labelled `replace`; a file added with a data sequence number older than
    its manifest's (only a rewrite keeps its inputs' numbers: `_sequence`); delete files
    removed and nothing else; data files replaced by others holding as many records, with no
    delete file added (a rewrite, whatever its label); new manifests that add and delete
    nothing (their rewrite). Data: any other file added or removed, or an append, overwrite or
    delete of nothing. Else the table only."""
    if _operation(snapshot) == "replace" or w.older_sequence:
        return "maintenance"
    if w.removed_deletes and not (w.added_data or w.deleted_data or w.added_deletes):
        return "maintenance"
    if (
        w.added_data
        and w.deleted_data
        and not w.added_deletes
        and w.added_records == w.deleted_records
    ):
        return "maintenance"
    if w.new_manifests and not w.files:
        return "maintenance"
    if w.files or _operation(snapshot) in _DATA_OPS:
        return "data"
    return "table"


def _int(text: str | None) -> int | None:
    """The fencing token a commit names (None: none, or not a number: no token).

    Raises:
        InvalidRequest: a number no fencing token can be.
    """
    if text is None:
        return None
    try:
        value = int(text)
    except ValueError:
        return None
    if not 0 <= value <= MAX_TOKEN:
        raise InvalidRequest(
            f"{TOKEN} (or {TOKEN_HEADER}) is {text[:40]!r}: send the token lakelock granted "
            f"(an integer from 1 to {MAX_TOKEN})"
        )
    return value


def _befores(
    snapshots: list[Snapshot],
    updates: Sequence[TableUpdate],
    base: TableMetadata | None,
    updated: TableMetadata,
) -> dict[int, Snapshot | None]:
    """For each snapshot the commit adds, the snapshot it is judged against: for a chain of
    new snapshots that a branch is set to, the branch's head in the table as it was (not the
    parent the client declares: a client that names an older parent would hide what its
    manifest list dropped), each later one against the one before it; a snapshot no branch is
    set to (staged) against its declared parent."""
    added = {s.snapshot_id: s for s in snapshots}
    befores: dict[int, Snapshot | None] = {}
    for update in updates:
        if not (
            isinstance(update, SetSnapshotRefUpdate)
            and update.type == SnapshotRefType.BRANCH
            and update.snapshot_id in added
        ):
            continue
        ref = base.refs.get(update.ref_name) if base is not None else None
        head = base.snapshot_by_id(ref.snapshot_id) if base is not None and ref else None
        current = added[update.snapshot_id]
        while current.parent_snapshot_id in added and current.snapshot_id not in befores:
            befores[current.snapshot_id] = added[current.parent_snapshot_id]
            current = added[current.parent_snapshot_id]
        befores.setdefault(current.snapshot_id, head)
    for snapshot in snapshots:
        if snapshot.snapshot_id not in befores:
            befores[snapshot.snapshot_id] = _parent(snapshot, updated, base)
    return befores


def _moves_a_branch(
    updates: Sequence[TableUpdate], added: set[int], base: TableMetadata | None
) -> bool:
    """Whether the commit sets a branch to a snapshot it did not add, or removes a branch."""
    refs = base.refs if base is not None else {}
    for update in updates:
        if isinstance(update, SetSnapshotRefUpdate) and update.type == SnapshotRefType.BRANCH:
            old = refs.get(update.ref_name)
            if update.snapshot_id not in added and (
                old is None or old.snapshot_id != update.snapshot_id
            ):
                return True
        if isinstance(update, RemoveSnapshotRefUpdate):
            old = refs.get(update.ref_name)
            if old is not None and old.snapshot_ref_type == SnapshotRefType.BRANCH:
                return True
    return False


def _parent(
    snapshot: Snapshot, updated: TableMetadata, base: TableMetadata | None
) -> Snapshot | None:
    """The snapshot `snapshot` builds on: in the new metadata, or in the base when the same
    commit removed it; None for a first snapshot (or a parent no one knows: all is new)."""
    if snapshot.parent_snapshot_id is None:
        return None
    found = updated.snapshot_by_id(snapshot.parent_snapshot_id)
    if found is None and base is not None:
        found = base.snapshot_by_id(snapshot.parent_snapshot_id)
    return found

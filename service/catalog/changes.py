"""What a catalog commit is, read from its updates and the manifests its snapshots wrote
(docs/catalog-front.md, "What a commit is").

    change = read_change(table, base, updated, updates, io, principal=..., headers=...)
    change.kind          "maintenance" | "data" | "table"
    change.partitions    the partition names its snapshots' new manifests add or delete in
    change.counts        files and records added and removed, counted in those manifests
    change.added         data and delete files added per partition (docs/design.md §5.1)
    change.rewritten     the partitions whose data files it replaced or deleted

What a snapshot did is read from the entries of its new manifests (those its manifest list
names and its parent's does not), never from its summary, which the client writes as it likes:
the summary's `operation` counts only where it says `replace`. The lease a commit names:
`lakelock.lease-id` and `lakelock.token` in the summary of its snapshot, else the
`X-Lakelock-Lease-Id` and `X-Lakelock-Token` headers (a commit that removes snapshots carries
no summary).

Partitions are named as lakelock names them (docs/design.md §4): the Iceberg partition path,
`PartitionSpec.partitionToPath`. pyiceberg's `partition_to_path` escapes with Python's
`quote_plus`, which differs from Java's URLEncoder in two characters (`~` and `*`); those are
mapped back here.
"""

from __future__ import annotations

import logging
import threading
import uuid
from collections import OrderedDict
from collections.abc import Callable, Collection, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TypeVar

from pyiceberg.avro.file import AvroFile
from pyiceberg.io import FileIO
from pyiceberg.manifest import (
    DEFAULT_READ_VERSION,
    MANIFEST_ENTRY_SCHEMAS,
    DataFile,
    DataFileContent,
    FileFormat,
    ManifestContent,
    ManifestEntry,
    ManifestEntryStatus,
    ManifestFile,
    _inherit_from_manifest,
)
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
from pyiceberg.typedef import Record

from service.catalog.locations import inside
from service.catalog.storage import TooLarge
from service.lock.due import Files
from service.lock.fence import Change, ChangeKind
from service.wire import MAX_TOKEN
from service.wire.errors import InvalidRequest, StorageFault
from service.wire.scope import Scope

__all__ = [
    "LEASE_HEADER",
    "LEASE_ID",
    "TOKEN",
    "TOKEN_HEADER",
    "Written",
    "named_lease",
    "read_change",
]

LEASE_ID, TOKEN = "lakelock.lease-id", "lakelock.token"
LEASE_HEADER, TOKEN_HEADER = "x-lakelock-lease-id", "x-lakelock-token"

_DATA_OPS = {"append", "overwrite", "delete"}
# the field id of a position delete file's `file_path` column (Iceberg's MetadataColumns
# DELETE_FILE_PATH): equal lower and upper bounds name the one data file its deletes point at
DELETE_FILE_PATH_ID = 2147483546
LISTED_KEPT = 64  # manifest lists remembered (their manifests): a branch head is read once

log = logging.getLogger("lakelock.catalog")


@dataclass
class Written:
    """What one snapshot's new manifests add and delete, counted from their entries."""

    added_data: int = 0
    deleted_data: int = 0
    added_deletes: int = 0
    removed_deletes: int = 0
    added_records: int = 0
    deleted_records: int = 0
    new_manifests: int = 0
    older_sequence: bool = False  # a file added with a data sequence number before its manifest's
    partitions: dict[tuple[int, str], Record] = field(default_factory=dict)
    # per partition (keyed as `partitions`): data files added, delete files added, data files
    # deleted, equality delete files added (of the delete files)
    by_partition: dict[tuple[int, str], list[int]] = field(default_factory=dict)
    added_paths: set[str] = field(default_factory=set)  # the data files it adds
    # the one data file each added position delete file points at (None: several, or unknown)
    position_targets: list[str | None] = field(default_factory=list)

    @property
    def files(self) -> int:
        return self.added_data + self.deleted_data + self.added_deletes + self.removed_deletes

    def counts(self) -> dict[str, int]:
        return {
            "added-data-files": self.added_data,
            "deleted-data-files": self.deleted_data,
            "added-delete-files": self.added_deletes,
            "removed-delete-files": self.removed_deletes,
            "added-records": self.added_records,
            "deleted-records": self.deleted_records,
        }


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
    for snapshot in snapshots:  # before any is read: a snapshot may be another's `before`
        _own(
            snapshot.manifest_list,
            updated.location,
            f"snapshot {snapshot.snapshot_id}'s manifest list",
        )
    befores = _befores(snapshots, updates, base, updated)
    new_ids = {s.snapshot_id for s in snapshots}
    written = [
        _written(s, befores[s.snapshot_id], io, updated.location, new_ids) for s in snapshots
    ]
    kind = _kind(snapshots, written, removes)
    lease_id, token = named_lease(updates, headers)
    partitions: Scope = _named(updated, written) if snapshots else frozenset()
    added, rewritten = _per_partition(updated, written)
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


class _Listed:
    """Manifest lists already read, as their manifests by path: a commit's branch head is
    usually the snapshot the last commit through this process added (files never change)."""

    def __init__(self) -> None:
        self._kept: OrderedDict[str, Mapping[str, ManifestFile]] = OrderedDict()
        self._lock = threading.Lock()

    def manifests(self, snapshot: Snapshot, io: FileIO) -> Mapping[str, ManifestFile]:
        with self._lock:
            found = self._kept.get(snapshot.manifest_list)
        if found is None:
            found = self.remember(snapshot.manifest_list, snapshot.manifests(io))
        return found

    def remember(
        self, manifest_list: str, manifests: Iterable[ManifestFile]
    ) -> Mapping[str, ManifestFile]:
        by_path = {m.manifest_path: m for m in manifests}
        with self._lock:
            self._kept[manifest_list] = by_path
            self._kept.move_to_end(manifest_list)
            while len(self._kept) > LISTED_KEPT:
                self._kept.popitem(last=False)
        return by_path


_listed = _Listed()


def _written(
    snapshot: Snapshot,
    before: Snapshot | None,
    io: FileIO,
    location: str,
    new_ids: Collection[int] = (),
) -> Written:
    """What `snapshot` changed against `before`: the entries of its new manifests (listed by
    it and not by `before`), and the live files of the manifests it dropped (listed by
    `before` and not by it). A dropped manifest's file must come back in a new manifest,
    as carried (`EXISTING`) or deleted; one that does not was deleted all the same, and an
    `EXISTING` entry no dropped manifest held is a file this commit brings in: both count as
    what they are, whatever the entries say.

    The service reads a manifest list or manifest a client names only inside the table's own
    folder (`location`), where its writers put them (docs/design.md §6): never a path or a
    host of the client's choosing. `before` is the client's too when this commit adds it
    (its id in `new_ids`): the manifests its list names are then read as the client's.

    Raises:
        InvalidRequest: a manifest list or new manifest outside the table's folder, too large,
            or one that cannot be read; a new manifest that says another snapshot added it;
            a file with a negative record count.
    """
    _own(snapshot.manifest_list, location, f"snapshot {snapshot.snapshot_id}'s manifest list")
    manifests = _readable(lambda: snapshot.manifests(io), snapshot.manifest_list)
    listed = _listed.remember(snapshot.manifest_list, manifests)
    kept, carried = _before(before, listed, io, location, new_ids)
    written = Written()
    new: list[ManifestFile] = []
    for manifest in manifests:
        if manifest.manifest_path in kept:
            continue
        _own(manifest.manifest_path, location, f"snapshot {snapshot.snapshot_id}'s manifest")
        if manifest.added_snapshot_id != snapshot.snapshot_id:
            raise InvalidRequest(
                f"snapshot {snapshot.snapshot_id} lists the new manifest "
                f"{manifest.manifest_path} as added by snapshot {manifest.added_snapshot_id}; "
                "a manifest a snapshot adds names that snapshot"
            )
        written.new_manifests += 1
        new.append(manifest)
    floor = _data_floor(snapshot, kept, listed, new, io)
    for manifest in new:
        for entry in _entries(manifest, io):
            was = carried.pop(entry.data_file.file_path, None)
            if entry.status == ManifestEntryStatus.EXISTING and was is not None:
                continue  # carried into a rewritten manifest: nothing this commit wrote
            added = entry.status != ManifestEntryStatus.DELETED
            if not added and _applies_to_nothing(entry, floor):
                continue
            _count(written, entry, manifest.manifest_path, manifest.partition_spec_id, added)
            _sequence(written, entry, manifest, added)
    for path, (spec_id, entry) in carried.items():
        if not _applies_to_nothing(entry, floor):
            _count(written, entry, path, spec_id, added=False)  # dropped without a word
    return written


def _before(
    before: Snapshot | None,
    listed: Mapping[str, ManifestFile],
    io: FileIO,
    location: str,
    new_ids: Collection[int],
) -> tuple[Mapping[str, ManifestFile], dict[str, tuple[int, ManifestEntry]]]:
    """The manifests `before` lists, and the live files of those a snapshot listing `listed`
    dropped; read like the client's files (inside `location`) when `before` is new too."""
    if before is None:
        return {}, {}
    kept = _readable(lambda: _listed.manifests(before, io), before.manifest_list)
    dropped = [m for path, m in kept.items() if path not in listed]
    if before.snapshot_id in new_ids:
        for manifest in dropped:
            _own(manifest.manifest_path, location, f"snapshot {before.snapshot_id}'s manifest")
    return kept, _readable(lambda: _live_files(dropped, io), before.manifest_list)


def _data_floor(
    snapshot: Snapshot,
    kept: Mapping[str, ManifestFile],
    listed: Mapping[str, ManifestFile],
    new: list[ManifestFile],
    io: FileIO,
) -> int:
    """The oldest data sequence number of a live data file in `snapshot`: of the data
    manifests it keeps, as the list the table held said (`kept`, not what the commit's own list
    claims); of its new data manifests, read from their live entries. A delete file older than
    that applies to no live row, and Iceberg drops such files from any partition with any
    commit (`MergingSnapshotProducer.apply`), so a rewrite of one partition may carry them."""
    floor = (snapshot.sequence_number or 0) - 1  # no live data: all older deletes are moot
    for path, manifest in kept.items():
        oldest = manifest.min_sequence_number
        if path in listed and manifest.content == ManifestContent.DATA and (oldest or 0) >= 0:
            floor = min(floor, oldest or 0)
    for manifest in new:
        for entry in _entries(manifest, io):
            if (
                entry.status != ManifestEntryStatus.DELETED
                and entry.data_file.content == DataFileContent.DATA
            ):
                floor = min(floor, entry.sequence_number or 0)
    return floor


def _applies_to_nothing(entry: ManifestEntry, floor: int) -> bool:
    """A delete file whose data sequence number is older than every live data file's (`floor`):
    its removal changes no row and touches no partition (docs/catalog-front.md §3)."""
    return (
        entry.data_file.content != DataFileContent.DATA
        and entry.sequence_number is not None
        and entry.sequence_number < floor
    )


def _live_files(dropped: list[ManifestFile], io: FileIO) -> dict[str, tuple[int, ManifestEntry]]:
    """The live files (added or existing) of the `dropped` manifests, by path, with their
    manifest's spec. Read only when a commit drops manifests (a merge of small manifests, a
    rewrite of them, a delete that rewrites one)."""
    live: dict[str, tuple[int, ManifestEntry]] = {}
    for manifest in dropped:
        for entry in manifest.fetch_manifest_entry(io, discard_deleted=True):
            live[entry.data_file.file_path] = (manifest.partition_spec_id, entry)
    return live


def _entries(manifest: ManifestFile, io: FileIO) -> Iterator[ManifestEntry]:
    """A new manifest's entries, deleted ones too, one at a time: never a list of them all
    (pyiceberg's `fetch_manifest_entry` makes one). Read as `_readable` reads: through the
    commit reader, scanned and bounded (service.catalog.limits.Budget), from the storage's
    cache when a pass reads it again; a file that changed between two passes is refused.

    Raises:
        InvalidRequest: the manifest cannot be read (`_readable`).
        StorageFault: the storage failed.
    """
    avro = AvroFile[ManifestEntry](
        io.new_input(manifest.manifest_path),
        MANIFEST_ENTRY_SCHEMAS[DEFAULT_READ_VERSION],
        read_types={-1: ManifestEntry, 2: DataFile},
        read_enums={0: ManifestEntryStatus, 101: FileFormat, 134: DataFileContent},
    )
    reader = _readable(avro.__enter__, manifest.manifest_path)  # its __exit__ does nothing
    entries = iter(reader)
    while True:
        entry = _readable(lambda: next(entries, None), manifest.manifest_path)
        if entry is None:
            return
        yield _inherit_from_manifest(entry, manifest)


def _own(path: str, location: str, what: str) -> None:
    """Refuse a `path` the commit names outside the table's folder `location`."""
    if not inside(path, location):
        raise InvalidRequest(
            f"{what} {path[:300]} is outside the table's folder {location}; write manifest "
            "lists and manifests under the table's location"
        )


T = TypeVar("T")


def _readable(read: Callable[[], T], path: str) -> T:
    """`read()` of a file a client named, through the commit reader (service.catalog.storage:
    one bounded read of a regular file); a file that is missing, too large, or no Iceberg file
    is the client's mistake (400), a storage fault is not.

    Raises:
        InvalidRequest: as above; the message names the cause.
        StorageFault: the storage failed.
    """
    try:
        return read()
    except (StorageFault, InvalidRequest):  # the storage's fault, or a bound the read met
        raise
    except TooLarge as exc:
        raise InvalidRequest(
            f"{path[:300]} has more than the {exc.limit} bytes a commit's manifest list or "
            "manifest may have here; split it"
        ) from exc
    except FileNotFoundError as exc:
        raise InvalidRequest(
            f"{path[:300]} does not exist or is not a regular file; write it before committing"
        ) from exc
    except Exception as exc:
        # what a client wrote decides what the Avro reader raises (Cython's SystemError among
        # them): logged for the operator, answered as the client's to fix
        log.warning("%s cannot be read as an Iceberg file: %r", path[:300], exc)
        raise InvalidRequest(
            f"{path[:300]} cannot be read as an Iceberg file ({type(exc).__name__}); commit "
            "the files Iceberg wrote"
        ) from exc


def _count(
    written: Written, entry: ManifestEntry, manifest: str, spec_id: int, added: bool
) -> None:
    """One file the commit adds (`added`) or deletes, with its partition."""
    file = entry.data_file
    records = file.record_count
    if records is None or records < 0:
        raise InvalidRequest(
            f"manifest {manifest} lists {file.file_path} with record_count "
            f"{records}: a file holds zero or more records"
        )
    if file.content == DataFileContent.DATA:
        if added:
            written.added_data += 1
            written.added_records += records
            written.added_paths.add(file.file_path)
        else:
            written.deleted_data += 1
            written.deleted_records += records
    elif added:
        written.added_deletes += 1
        if file.content == DataFileContent.POSITION_DELETES:
            written.position_targets.append(_referenced(file))
    else:
        written.removed_deletes += 1
    key = (spec_id, repr(file.partition))
    written.partitions.setdefault(key, file.partition)
    counts = written.by_partition.setdefault(key, [0, 0, 0, 0])
    if added:
        counts[0 if file.content == DataFileContent.DATA else 1] += 1
        if file.content == DataFileContent.EQUALITY_DELETES:
            counts[3] += 1
    elif file.content == DataFileContent.DATA:
        counts[2] += 1


def _referenced(file: DataFile) -> str | None:
    """The one data file a position delete file points at: its `file_path` column's bounds
    when they are equal (Iceberg writes them in full for position deletes); else None, and the
    commit counts as one that can conflict (a deletion vector of format v3 among them, whose
    `referenced_data_file` this reader does not surface)."""
    lower = (file.lower_bounds or {}).get(DELETE_FILE_PATH_ID)
    upper = (file.upper_bounds or {}).get(DELETE_FILE_PATH_ID)
    if lower is None or lower != upper:
        return None
    return lower.decode("utf-8", errors="replace")


def _sequence(written: Written, entry: ManifestEntry, manifest: ManifestFile, added: bool) -> None:
    """A file added with a data sequence number before its manifest's: only a rewrite keeps
    its inputs' numbers (so that older deletes still apply to the rows it wrote again), and it
    writes them into each entry. An entry without one inherits its manifest's, which may be
    older than the snapshot's: Iceberg's Java client, retrying a commit on fresh metadata
    (after a 409), lists the new manifests with the sequence number of its first try; that is
    an append still, not a rewrite."""
    if (
        added
        and entry.sequence_number is not None
        and manifest.sequence_number is not None
        and entry.sequence_number < manifest.sequence_number
    ):
        written.older_sequence = True


def _named(metadata: TableMetadata, written: list[Written]) -> Scope:
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
            names.add(_java_escaped(spec.partition_to_path(partition, schema)))
    return frozenset(names)


def _per_partition(
    metadata: TableMetadata, written: list[Written]
) -> tuple[dict[str, Files], frozenset[str]]:
    """The data, delete and equality delete files the snapshots added per partition name, and
    the partitions whose data files they deleted (docs/design.md §5.1). A file of an
    unpartitioned spec is in no partition: it is counted in none."""
    specs = metadata.specs()
    schema = metadata.schema()
    added: dict[str, Files] = {}
    rewritten: set[str] = set()
    for w in written:
        for key, (data, deletes, deleted, equality) in w.by_partition.items():
            spec = specs.get(key[0])
            if spec is None or spec.is_unpartitioned():
                continue
            name = _java_escaped(spec.partition_to_path(w.partitions[key], schema))
            if data or deletes:
                added[name] = added.get(name, Files()).plus(Files(data, deletes, equality))
            if deleted:
                rewritten.add(name)
    return added, frozenset(rewritten)


def _java_escaped(path: str) -> str:
    # quote_plus keeps "~" and escapes "*"; Java's URLEncoder escapes "~" and keeps "*"
    return path.replace("~", "%7E").replace("%2A", "*")

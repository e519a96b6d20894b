"""Reading the manifest lists and manifests a commit names, bounded: what each of its snapshots
added and deleted, counted from the entries of its new manifests (docs/catalog-front.md §3,
"What a commit is"; §5, "What the front never obeys", for the folder and the bounds).

    Written
        what one snapshot's new manifests add and delete: files and records, per partition
        (`partitions`, `by_partition`: a PartitionFiles each), the data files it adds, the one
        data file each of its position delete files points at; `.counts()` -> {name: count}
    check_lists(snapshots, location) -> None
        refuses (InvalidRequest) a commit whose snapshot's manifest list lies outside the
        table's folder
    read_written(snapshot, before, io, location, new_ids=()) -> Written
        what `snapshot` changed against `before` (the branch head it is judged against): the
        entries of its new manifests, and the live files of the manifests it dropped

What a snapshot did is read from the entries of its new manifests (those its manifest list
names and its parent's does not), never from its summary, which the client writes as it likes.
The service reads a manifest list or manifest a client names only inside the table's own folder
(docs/design.md §6), each through the commit reader (service.catalog.storage), scanned and
bounded before pyiceberg parses it (service.catalog.avro, service.catalog.limits.Budget). A
manifest list already read is remembered (`LISTED_KEPT` of them): a commit's branch head is
usually the snapshot the last commit through this process added.
"""

from __future__ import annotations

import logging
import threading
from collections import OrderedDict
from collections.abc import Callable, Collection, Iterable, Iterator, Mapping
from dataclasses import astuple, dataclass, field
from typing import TypeVar

from pyiceberg.avro.file import AvroFile
from pyiceberg.io import FileIO
from pyiceberg.manifest import (
    DATA_FILE_TYPE,
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
from pyiceberg.table.snapshots import Snapshot
from pyiceberg.typedef import Record

from service.catalog.locations import inside
from service.catalog.storage import TooLarge
from service.wire.errors import InvalidRequest, StorageFault

__all__ = [
    "DELETE_FILE_PATH_ID",
    "LISTED_KEPT",
    "PartitionFiles",
    "Written",
    "check_lists",
    "read_written",
]

# the field id of a position delete file's `file_path` column (Iceberg's MetadataColumns
# DELETE_FILE_PATH): equal lower and upper bounds name the one data file its deletes point at
DELETE_FILE_PATH_ID = 2147483546
LISTED_KEPT = 64  # manifest lists remembered (their manifests): a branch head is read once
# manifests are read with version 3's entry schema, whose fields beyond version 2's are optional
# (absent from older manifests, read as None): a deletion vector's data file and its place in
# its Puffin file, which pyiceberg's DataFile has no accessor for, read by position
READ_VERSION = 3
_POSITION = {f.name: i for i, f in enumerate(DATA_FILE_TYPE[READ_VERSION].fields)}

log = logging.getLogger("lakelock.catalog")


@dataclass
class PartitionFiles:
    """The files one or more snapshots added to and deleted from one partition."""

    data_added: int = 0
    deletes_added: int = 0
    equality_added: int = 0  # of the delete files added, those that delete by equality
    data_deleted: int = 0
    deletes_removed: int = 0

    def plus(self, other: PartitionFiles) -> PartitionFiles:
        return PartitionFiles(*(a + b for a, b in zip(astuple(self), astuple(other), strict=True)))


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
    # per partition, keyed as `partitions`
    by_partition: dict[tuple[int, str], PartitionFiles] = field(default_factory=dict)
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


def check_lists(snapshots: Iterable[Snapshot], location: str) -> None:
    """Refuse the commit when a snapshot's manifest list lies outside the table's folder
    `location`; checked for all of a commit's snapshots before any is read (a snapshot may be
    another's `before`).

    Raises:
        InvalidRequest: one does.
    """
    for snapshot in snapshots:
        _own(
            snapshot.manifest_list,
            location,
            f"snapshot {snapshot.snapshot_id}'s manifest list",
        )


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


def read_written(
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
            was = carried.pop(_key(entry.data_file), None)
            if entry.status == ManifestEntryStatus.EXISTING and was is not None:
                continue  # carried into a rewritten manifest: nothing this commit wrote
            added = entry.status != ManifestEntryStatus.DELETED
            if not added and _applies_to_nothing(entry, floor):
                continue
            _count(written, entry, manifest.manifest_path, manifest.partition_spec_id, added)
            _sequence(written, entry, manifest, added)
    for (path, _), (spec_id, entry) in carried.items():
        if not _applies_to_nothing(entry, floor):
            _count(written, entry, path, spec_id, added=False)  # dropped without a word
    return written


def _key(file: DataFile) -> tuple[str, object]:
    """What names one file of a manifest: its path, and for a deletion vector its offset in
    the Puffin file, which holds the vectors of several data files (one entry each)."""
    return file.file_path, _read_at_3(file, "content_offset")


def _read_at_3(file: DataFile, name: str) -> object:
    """A field version 3 added to a data file (None in a record of an older version's shape)."""
    position = _POSITION[name]
    return file[position] if position < len(file) else None


def _before(
    before: Snapshot | None,
    listed: Mapping[str, ManifestFile],
    io: FileIO,
    location: str,
    new_ids: Collection[int],
) -> tuple[Mapping[str, ManifestFile], dict[tuple[str, object], tuple[int, ManifestEntry]]]:
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


def _live_files(
    dropped: list[ManifestFile], io: FileIO
) -> dict[tuple[str, object], tuple[int, ManifestEntry]]:
    """The live files (added or existing) of the `dropped` manifests, by `_key`, with their
    manifest's spec. Read only when a commit drops manifests (a merge of small manifests, a
    rewrite of them, a delete that rewrites one)."""
    live: dict[tuple[str, object], tuple[int, ManifestEntry]] = {}
    for manifest in dropped:
        for entry in _entries(manifest, io):
            if entry.status != ManifestEntryStatus.DELETED:
                live[_key(entry.data_file)] = (manifest.partition_spec_id, entry)
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
        MANIFEST_ENTRY_SCHEMAS[READ_VERSION],
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
    counts = written.by_partition.setdefault(key, PartitionFiles())
    data = file.content == DataFileContent.DATA
    if added and data:
        counts.data_added += 1
    elif added:
        counts.deletes_added += 1
        counts.equality_added += file.content == DataFileContent.EQUALITY_DELETES
    elif data:
        counts.data_deleted += 1
    else:
        counts.deletes_removed += 1


def _referenced(file: DataFile) -> str | None:
    """The one data file a position delete file or deletion vector points at: its
    `referenced_data_file` (a vector's always); else its `file_path` column's bounds when they
    are equal (Iceberg writes them in full for position deletes); else None, and the commit
    counts as one that can conflict."""
    referenced = _read_at_3(file, "referenced_data_file")
    if isinstance(referenced, str):
        return referenced
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

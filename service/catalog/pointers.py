"""The table pointers: the JdbcCatalog's two tables in lakelock's database.

    pointers = Pointers("lakelock", engine, warehouse="file:///data/warehouse")
    pointers.load_table(("db", "events"))            # a pyiceberg Table (metadata cached)
    staged = pointers.stage(current, ("db", "events"), requirements, updates)  # nothing written
    swapped = pointers.swap(conn, ("db", "events"), old, new)   # in the caller's transaction

pyiceberg's `SqlCatalog` reads and writes exactly the tables Iceberg's `JdbcCatalog` keeps
(`iceberg_tables`, `iceberg_namespace_properties`, created by migration 0011); here it runs over
the service's own engine, for namespaces, create, load, drop and rename. Commits do not go
through it: `swap` is the compare-and-swap of the metadata pointer, run by service.lock.fence
inside the transaction that checked the leases.

Differences from pyiceberg's defaults. A table's default location is
`<warehouse>/<namespace levels>/<table>` (Iceberg's JdbcCatalog), not `<namespace>.db/<table>`.
Metadata files are cached by location, parsed and as their JSON text (a metadata file is never
rewritten), so a load or a commit reads a file once and answers with the text it read or wrote,
serialized once. Files are reached with the catalog's own properties only, never a table's, and
a table's metadata file is always written in `<location>/metadata/`, so its location is known
from its pointer and no table property chooses a class or a folder here
(service.catalog.locations; docs/catalogs.md, "Where tables live").
"""

from __future__ import annotations

import io
import logging
import os
import threading
from collections import OrderedDict
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from pyiceberg.catalog import Catalog
from pyiceberg.catalog.sql import IcebergTables, SqlCatalog
from pyiceberg.exceptions import NoSuchNamespaceError, NoSuchTableError, TableAlreadyExistsError
from pyiceberg.io import FileIO
from pyiceberg.serializers import Compressor
from pyiceberg.table import StagedTable, Table
from pyiceberg.table.metadata import TableMetadata, TableMetadataUtil
from pyiceberg.table.update import (
    RemovePropertiesUpdate,
    SetPropertiesUpdate,
    TableRequirement,
    TableUpdate,
    _apply_table_update,
    _TableMetadataUpdateContext,
    _update_table_metadata_log,
    update_table_metadata,
)
from pyiceberg.typedef import EMPTY_DICT, Identifier, Properties
from pyiceberg.utils.datetime import datetime_to_millis
from sqlalchemy import Engine, and_, delete, func, insert, or_, select, update
from sqlalchemy.engine import Connection
from sqlalchemy.exc import IntegrityError

from service.catalog import locations
from service.catalog.storage import Storage, TooLarge
from service.lock.db import iceberg_namespaces_t, iceberg_tables_t
from service.wire.errors import (
    AlreadyExists,
    CommitConflict,
    InvalidRequest,
    ServerError,
    StorageFault,
)

__all__ = ["CACHED_METADATA", "Pointers", "Purge", "applied"]

log = logging.getLogger("lakelock.catalog")
PURGE_SAMPLE = 5  # file names a purge's log line shows of those it left

# the largest metadata file the catalog reads (its own are capped when written, at
# LAKELOCK_CATALOG_MAX_METADATA_BYTES; a table made by another catalog may be larger)
METADATA_READ_BYTES = 1024 * 1024 * 1024
CACHED_METADATA = 256  # metadata files kept parsed, the latest used
CACHED_CHARS = (
    64 * 1024 * 1024
)  # and their JSON text, at most (the parsed form is a few times more)


# the rows that are tables: Iceberg's JdbcCatalog keeps its views in the same table (`VIEW`),
# and rows of its older schema have no type
_TABLES = or_(iceberg_tables_t.c.iceberg_type == "TABLE", iceberg_tables_t.c.iceberg_type.is_(None))


class Pointers(SqlCatalog):
    def __init__(
        self, name: str, engine: Engine, *, warehouse: str, storage: Storage | None = None
    ) -> None:
        Catalog.__init__(
            self, name, warehouse=warehouse.rstrip("/")
        )  # not SqlCatalog's: no engine of its own
        self.engine = engine
        self.storage = storage or Storage(self.warehouse)
        self._schema_version = "v1"  # migration 0011 made the tables with `iceberg_type`
        self._cache: OrderedDict[str, tuple[TableMetadata, str]] = OrderedDict()
        self._cached_chars = 0
        self._lock = threading.Lock()

    @property
    def warehouse(self) -> str:
        warehouse: str = self.properties["warehouse"]
        return warehouse

    def _get_default_warehouse_location(self, database_name: str, table_name: str) -> str:
        levels = "/".join(database_name.split("."))
        return f"{self.warehouse}/{levels}/{table_name}"

    def _load_file_io(
        self, properties: Properties = EMPTY_DICT, location: str | None = None
    ) -> FileIO:
        """The catalog's own file access (service.catalog.storage): a table's properties
        never reach it (they would choose its class, endpoints and credentials)."""
        return self.storage.io

    def read_metadata(self, location: str) -> tuple[TableMetadata, str]:
        """The metadata file at `location`, parsed and as its JSON text; read once.

        Raises:
            FileNotFoundError: no file there.
            StorageFault: the storage failed.
        """
        with self._lock:
            found = self._cache.get(location)
            if found is not None:
                self._cache.move_to_end(location)
                return found
        try:
            data = self.storage.read(location, limit=METADATA_READ_BYTES)
        except TooLarge as exc:
            raise ServerError(
                f"{location} has more than {METADATA_READ_BYTES} bytes, more than the catalog "
                "reads as a table's metadata"
            ) from exc
        raw = Compressor.get_compressor(location).stream_decompressor(io.BytesIO(data)).read()
        text = raw.decode("utf-8")
        metadata = TableMetadataUtil.parse_raw(text)
        self._remember(location, metadata, text)
        return metadata, text

    def write_metadata(self, metadata: TableMetadata, location: str, text: str, raw: bytes) -> None:
        """Write `metadata` to a new file at `location`: `raw`, its JSON `text` encoded, as
        serialized once for the size check, the file and the client's answer.

        Raises:
            FileExistsError: a file is at `location` already.
            StorageFault: the storage failed.
        """
        data = Compressor.get_compressor(location).bytes_compressor()(raw)
        self.storage.create(location, data)
        self._remember(location, metadata, text)

    def _remember(self, location: str, metadata: TableMetadata, text: str) -> None:
        with self._lock:
            if location not in self._cache:
                self._cached_chars += len(text)
            self._cache[location] = (metadata, text)
            self._cache.move_to_end(location)
            # bounded by count and by size: a large table's metadata runs to megabytes
            while len(self._cache) > 1 and (
                len(self._cache) > CACHED_METADATA or self._cached_chars > CACHED_CHARS
            ):
                _, (_, dropped) = self._cache.popitem(last=False)
                self._cached_chars -= len(dropped)

    # -- staging a commit ----------------------------------------------------------------------
    # Staging is where the front reaches pyiceberg's protected API, and `stage` (with
    # `metadata_version`) is the one way in: the front calls these, never pyiceberg's names.
    # Touched here: the hook `MetastoreCatalog._update_and_stage_table(current_table,
    # table_identifier, requirements, updates) -> StagedTable`, which `stage` replaces (so
    # pyiceberg's own `SqlCatalog.commit_table` stages the same way), the static helpers
    # `_empty_table_metadata` and `_parse_metadata_version`, and, in `applied` below,
    # `pyiceberg.table.update`'s `_apply_table_update`, `_TableMetadataUpdateContext` and
    # `_update_table_metadata_log`. They are used, not copied, so that a commit is validated
    # and applied exactly as pyiceberg applies it; being protected, they may change in any
    # release. Checked against pyiceberg 0.12.0, the line the `service` extra pins
    # (pyproject.toml: >=0.12,<0.13); check them again when that pin moves.

    def stage(
        self,
        current_table: Table | None,
        table_identifier: Identifier,
        requirements: tuple[TableRequirement, ...],
        updates: tuple[TableUpdate, ...],
    ) -> StagedTable:
        """The table as `updates` make it when `requirements` hold (`current_table` None: a
        create), with the location of its new metadata file; nothing written.

        pyiceberg's `_update_and_stage_table`, for an existing table without the deep copy of
        the whole metadata that its `update_table_metadata` ends with (`applied`); a create is
        validated by pyiceberg's `update_table_metadata`. The new metadata file goes where
        `locations.metadata_file` says, never where a table property would put it.

        Raises:
            CommitFailedException: a requirement failed.
            ValueError: an update that cannot apply (pyiceberg's word for it).
        """
        base = current_table.metadata.properties if current_table is not None else {}
        updates = _absent_removals_dropped(base, updates)
        if current_table is None:
            for requirement in requirements:
                requirement.validate(None)
            metadata = update_table_metadata(
                self._empty_table_metadata(), updates, enforce_validation=True
            )
            version = 0
        else:
            for requirement in requirements:
                requirement.validate(current_table.metadata)
            metadata = applied(current_table.metadata, updates, current_table.metadata_location)
            version = self.metadata_version(current_table.metadata_location) + 1
        location = locations.metadata_file(metadata.location, version)
        return StagedTable(
            identifier=table_identifier,
            metadata=metadata,
            metadata_location=location,
            io=self._load_file_io(location=location),
            catalog=self,
        )

    # pyiceberg's hook, for its own commit path (`SqlCatalog.commit_table`, which the front
    # does not use): staged as the front stages
    _update_and_stage_table = stage

    @classmethod
    def metadata_version(cls, location: str) -> int:
        """The version in a metadata file's name (`<version>-<uuid>.metadata.json`; -1 for
        a name without one), as pyiceberg's `_parse_metadata_version` reads it."""
        return cls._parse_metadata_version(location)

    def _convert_orm_to_iceberg(self, orm_table: IcebergTables) -> Table:
        location = orm_table.metadata_location
        if not location:
            return super()._convert_orm_to_iceberg(orm_table)  # raises NoSuchTableError
        metadata, _ = self.read_metadata(location)
        return Table(
            identifier=(
                *Catalog.identifier_to_tuple(orm_table.table_namespace),
                orm_table.table_name,
            ),
            metadata=metadata,
            metadata_location=location,
            io=self._load_file_io(location=location),
            catalog=self,
        )

    def pointer(self, conn: Connection, identifier: Identifier) -> str | None:
        """The metadata file `identifier` points at now; None when there is no such table."""
        t = iceberg_tables_t.c
        return conn.execute(
            select(t.metadata_location).where(*self._key(identifier))
        ).scalar_one_or_none()

    def _key(self, identifier: Identifier) -> tuple[Any, ...]:
        t = iceberg_tables_t.c
        return (
            t.catalog_name == self.name,
            t.table_namespace == Catalog.namespace_to_string(identifier[:-1]),
            t.table_name == identifier[-1],
        )

    def swap(
        self,
        conn: Connection,
        identifier: Identifier,
        old: str | None,
        new: str,
        *,
        moved: str | None = None,
    ) -> bool:
        """Point `identifier` at `new` if it still points at `old` (None: create its row);
        False when it moved meanwhile (or, creating, a row exists). `moved`: the table's
        location, when this creates the table or changes its location; checked first
        (`settle`).

        Raises:
            InvalidRequest: `moved` overlaps another table's location.
            AlreadyExists: creating, and another table's name differs from this one in case
                only (`namesake`).
        """
        if moved is not None:
            self.settle(conn, identifier, moved)
        if old is None:
            # in the creating transaction, after `settle` locked the namespace: a check
            # before it (Front.create) cannot see a create that commits meanwhile
            self.check_case(conn, identifier)
        namespace = Catalog.namespace_to_string(identifier[:-1])
        t = iceberg_tables_t.c
        key = and_(*self._key(identifier))
        if old is None:
            exists = conn.execute(iceberg_tables_t.select().where(key)).first()
            if exists is not None:
                return False
            conn.execute(
                insert(iceberg_tables_t).values(
                    catalog_name=self.name,
                    table_namespace=namespace,
                    table_name=identifier[-1],
                    metadata_location=new,
                    previous_metadata_location=None,
                    iceberg_type="TABLE",
                )
            )
            return True
        changed = conn.execute(
            update(iceberg_tables_t)
            .where(key, t.metadata_location == old)
            .values(metadata_location=new, previous_metadata_location=old)
        )
        return changed.rowcount == 1

    def check_drop(self, conn: Connection, identifier: Identifier) -> None:
        """That `identifier` is a table here (a view is not), before anything of a drop is
        written in the caller's transaction.

        Raises:
            NoSuchTableError: no such table.
        """
        if not self._is_table(conn, identifier):
            raise NoSuchTableError(f"no table {'.'.join(identifier)}")

    def drop_pointer(self, conn: Connection, identifier: Identifier) -> None:
        """Delete `identifier`'s pointer, in the caller's transaction (SqlCatalog.drop_table's
        runs in one of its own), after `check_drop`.

        Raises:
            NoSuchTableError: it went meanwhile.
        """
        gone = conn.execute(delete(iceberg_tables_t).where(*self._key(identifier), _TABLES))
        if gone.rowcount != 1:
            raise NoSuchTableError(f"no table {'.'.join(identifier)}")

    def check_rename(self, conn: Connection, source: Identifier, destination: Identifier) -> None:
        """That `source` can be renamed `destination`, before anything of the rename is written
        in the caller's transaction.

        Raises:
            NoSuchTableError: no table `source`.
            NoSuchNamespaceError: no namespace `destination[:-1]`.
            TableAlreadyExistsError: a table or view `destination` exists.
            AlreadyExists: another table's name differs from `destination` in case only.
        """
        self.check_drop(conn, source)
        namespace = Catalog.namespace_to_string(destination[:-1])
        if not self._namespace_known(conn, namespace):
            raise NoSuchNamespaceError(f"no namespace {namespace}")
        self.check_case(conn, destination, besides=source)
        same = [x.lower() for x in destination] == [x.lower() for x in source]
        if not same and self.pointer(conn, destination) is not None:
            raise TableAlreadyExistsError(f"table {'.'.join(destination)} exists")

    def rename_pointer(self, conn: Connection, source: Identifier, destination: Identifier) -> None:
        """Give `source`'s pointer the name `destination`, in the caller's transaction
        (SqlCatalog.rename_table's runs in one of its own), after `check_rename`.

        Raises:
            NoSuchTableError: `source` went meanwhile.
            TableAlreadyExistsError: `destination` was created meanwhile.
        """
        try:
            moved = conn.execute(
                update(iceberg_tables_t)
                .where(*self._key(source), _TABLES)
                .values(
                    table_namespace=Catalog.namespace_to_string(destination[:-1]),
                    table_name=destination[-1],
                )
            )
        except IntegrityError as exc:
            raise TableAlreadyExistsError(f"table {'.'.join(destination)} exists") from exc
        if moved.rowcount != 1:
            raise NoSuchTableError(f"no table {'.'.join(source)}")

    def _is_table(self, conn: Connection, identifier: Identifier) -> bool:
        t = iceberg_tables_t.c
        found = select(t.table_name).where(*self._key(identifier), _TABLES)
        return conn.execute(found).first() is not None

    def _namespace_known(self, conn: Connection, namespace: str) -> bool:
        """A namespace with a row of its own, or one known only by its tables (an older
        JdbcCatalog's), as SqlCatalog.namespace_exists."""
        n, t = iceberg_namespaces_t.c, iceberg_tables_t.c
        own = select(n.namespace).where(n.catalog_name == self.name, n.namespace == namespace)
        held = select(t.table_name).where(
            t.catalog_name == self.name, t.table_namespace == namespace
        )
        return any(conn.execute(q.limit(1)).first() is not None for q in (own, held))

    # -- where tables live (docs/catalogs.md, "Where tables live") -----------------------------

    def settle(self, conn: Connection, identifier: Identifier, location: str) -> None:
        """In the transaction that creates `identifier` at `location` or moves it there:
        lock its namespace (every create and move of a location in a namespace's folder does,
        so two cannot both pass this check), then check that no other table's location
        overlaps it.

        Raises:
            InvalidRequest: another table's location is, contains or lies in `location`.
            CommitConflict: another process made the namespace's row at the same instant.
        """
        self._lock_namespace(conn, identifier[:-1])
        holder = self.holder(conn, location, besides=identifier)
        if holder is not None:
            raise self._taken(location, holder)

    def holder(
        self, conn: Connection, location: str, *, besides: Identifier | None = None
    ) -> Identifier | None:
        """A table of this catalog, other than `besides`, whose location overlaps `location`
        (each table's location as its pointer shows it: `locations.location_of_metadata`)."""
        t = iceberg_tables_t.c
        found = conn.execute(
            select(t.table_namespace, t.table_name, t.metadata_location).where(
                t.catalog_name == self.name, t.metadata_location.is_not(None)
            )
        )
        for namespace, name, metadata_location in found:
            identifier = (*Catalog.identifier_to_tuple(namespace), name)
            if identifier == besides:
                continue
            if locations.overlap(location, locations.location_of_metadata(metadata_location)):
                return identifier
        return None

    def namesake(
        self, conn: Connection, identifier: Identifier, *, besides: Identifier | None = None
    ) -> Identifier | None:
        """A table of this catalog, other than `identifier` itself and `besides`, whose name
        equals `identifier`'s but for letter case. lakelock names a table in lower case (its
        leases, switch and events), so two such tables would share all of them; the
        JdbcCatalog's key compares names as the database's collation does (exactly on SQLite,
        without case on MariaDB), so this is checked here."""
        t = iceberg_tables_t.c
        namespace = Catalog.namespace_to_string(identifier[:-1])
        found = conn.execute(
            select(t.table_namespace, t.table_name).where(
                t.catalog_name == self.name,
                func.lower(t.table_namespace) == namespace.lower(),
                func.lower(t.table_name) == identifier[-1].lower(),
            )
        )
        for other_namespace, name in found:
            other = (*Catalog.identifier_to_tuple(other_namespace), name)
            if other not in (identifier, besides):
                return other
        return None

    def check_case(
        self, conn: Connection, identifier: Identifier, *, besides: Identifier | None = None
    ) -> None:
        """Refuse `identifier` when another table's name differs from it in case only.

        Raises:
            AlreadyExists: one does (`namesake`).
        """
        other = self.namesake(conn, identifier, besides=besides)
        if other is None:
            return
        raise AlreadyExists(
            f"table {'.'.join(other)} exists, and lakelock names tables in lower case (their "
            f"leases, switch and events), so {'.'.join(identifier)} would be the same table "
            "to it; load that table, or pick a name that differs in more than letter case"
        )

    @staticmethod
    def _taken(location: str, holder: Identifier) -> InvalidRequest:
        return InvalidRequest(
            f"location {location} overlaps table {'.'.join(holder)}'s: a table's location is "
            "a folder no other table's location is, contains or lies in; send another "
            "location (or none, for the default)"
        )

    def _lock_namespace(self, conn: Connection, namespace: Identifier) -> None:
        """Lock the namespace's rows; a namespace known only by its tables (made by an older
        JdbcCatalog) gets the `exists` row the JdbcCatalog writes for a new namespace."""
        n = iceberg_namespaces_t.c
        key = and_(
            n.catalog_name == self.name, n.namespace == Catalog.namespace_to_string(namespace)
        )
        if conn.execute(select(n.property_key).where(key).with_for_update()).first() is not None:
            return
        try:  # a failed insert ends only itself: the transaction goes on to its refusal
            conn.execute(
                insert(iceberg_namespaces_t).values(
                    catalog_name=self.name,
                    namespace=Catalog.namespace_to_string(namespace),
                    property_key="exists",
                    property_value="true",
                )
            )
        except IntegrityError as exc:
            raise CommitConflict(
                f"namespace {'.'.join(namespace)} changed meanwhile; send the request again"
            ) from exc

    # -- purge ---------------------------------------------------------------------------------

    def purge_plan(self, table: Table) -> Purge:
        """What a purge of `table` deletes, read before its pointer is dropped (so a storage
        fault changes nothing, and nothing written later, by a new table in the same folder
        above all, is on the list): on S3 every object under its location, markers included;
        on local storage the files its metadata names that lie in its location and are
        regular files. Files elsewhere (another table's, added by `add_files`) are left. A
        local table whose location goes through a symbolic link (`locations.through_link`,
        made after it was created) has nothing deleted: its files are another folder's.

        Raises:
            StorageFault: the storage failed.
        """
        own = table.metadata.location
        name = ".".join(table.name())
        if self.storage.on_s3:
            # every key of the listing, odd ones too: the listing is of the folder's prefix
            return Purge(name, own, self.storage.listing(own), [])
        files, left = [], []
        linked = locations.through_link(own, self.warehouse)
        if linked:
            log.warning(
                "purge of %s deletes nothing: its location %s goes through a symbolic link",
                name,
                own,
            )
        with self.storage.faults(table.metadata_location, "read"):
            named = sorted(set(_files_of(table.metadata, table.metadata_location, self.storage.io)))
        for path in named:
            if linked or not locations.inside(path, own) or not _plain_file(path):
                left.append(path)
            else:
                files.append(path)
        return Purge(name, own, files, left)

    def purge(self, plan: Purge) -> tuple[int, list[str]]:
        """Delete the files of `plan`, after the drop was answered: on S3 in batches of 1,000
        keys a request; locally one by one, each checked again to be a regular file. A file
        that cannot be deleted is logged and left, the others are still deleted: the pointer
        is gone already, so stopping would orphan them. The number deleted, and those left
        (the plan's and the refused)."""
        left = list(plan.left)
        if self.storage.on_s3:
            deleted, refused = self.storage.delete(plan.files)
            left.extend(refused)
        else:
            deleted = 0
            for path in plan.files:
                if not _plain_file(path):
                    left.append(path)
                    continue
                try:
                    deleted += self.storage.delete_file(path)
                except StorageFault as exc:
                    log.warning("purge of %s could not delete %s: %s", plan.table, path, exc)
                    left.append(path)
        if left:
            log.warning(
                "purge of %s left %d files outside its location %s, not regular files or not "
                "deletable, e.g. %s",
                plan.table,
                len(left),
                plan.location,
                ", ".join(left[:PURGE_SAMPLE]),
                extra={"deleted": deleted, "left": len(left)},
            )
        log.info(
            "table purged",
            extra={"table": plan.table, "deleted": deleted, "left": len(left)},
        )
        return deleted, left


@dataclass(frozen=True)
class Purge:
    """The files a purge deletes (`files`) and leaves (`left`), of the table named `table`
    (its identifier, dotted) at `location`."""

    table: str
    location: str
    files: list[str]
    left: list[str]


def _plain_file(uri: str) -> bool:
    """Whether a purge may delete `uri`: on `file:` storage a regular file that is no
    symbolic link, or nothing at all (a file removed before); other storage has only files."""
    path = locations.local_path(uri)
    if path is None or not os.path.lexists(path):
        return True
    return os.path.isfile(path) and not os.path.islink(path)


def _files_of(metadata: TableMetadata, metadata_location: str, io: FileIO) -> Iterator[str]:
    """Every file `metadata` names: its metadata files, each snapshot's manifest list, its
    manifests and the data and delete files they list. A manifest list or manifest that is
    gone (deleted by hand, an expiry cut short) names nothing more: the rest is named still."""
    yield metadata_location
    yield from (entry.metadata_file for entry in metadata.metadata_log)
    manifests = {}
    for snapshot in metadata.snapshots:
        yield snapshot.manifest_list
        try:
            for manifest in snapshot.manifests(io):
                manifests[manifest.manifest_path] = manifest
        except FileNotFoundError:
            log.warning("%s is gone: the files it names are not purged", snapshot.manifest_list)
    for path, manifest in manifests.items():
        yield path
        try:
            entries = manifest.fetch_manifest_entry(io, discard_deleted=False)
        except FileNotFoundError:
            log.warning("%s is gone: the files it names are not purged", path)
            continue
        for entry in entries:
            yield entry.data_file.file_path


def _absent_removals_dropped(
    properties: Iterable[str], updates: Sequence[TableUpdate]
) -> tuple[TableUpdate, ...]:
    """`updates` with each `remove-properties` naming only the keys the table has at that
    point of the commit: removing an absent property changes nothing, as in Iceberg's own
    `TableMetadata.Builder.removeProperties` (pyiceberg's raises KeyError on one)."""
    present = set(properties)
    kept: list[TableUpdate] = []
    for change in updates:
        if isinstance(change, SetPropertiesUpdate):
            present |= set(change.updates)
        elif isinstance(change, RemovePropertiesUpdate):
            removals = [key for key in change.removals if key in present]
            if len(removals) != len(change.removals):
                change = change.model_copy(update={"removals": removals})
            present -= set(removals)
        kept.append(change)
    return tuple(kept)


def applied(base: TableMetadata, updates: Sequence[TableUpdate], location: str) -> TableMetadata:
    """`updates` applied to the metadata of an existing table, as pyiceberg's
    `update_table_metadata` applies them, less its closing `model_copy(deep=True)`: with 200
    snapshots that copy was most of a commit's time in the service (benchmarks.catalog_front).
    It protects nothing here: the metadata models are frozen, each update builds new
    containers, and a cached metadata is only ever read."""
    context = _TableMetadataUpdateContext()
    metadata = base
    for change in updates:
        metadata = _apply_table_update(change, metadata, context)
    if context.has_changes():
        metadata = _update_table_metadata_log(metadata, location, base.last_updated_ms)
        if base.last_updated_ms == metadata.last_updated_ms:
            now_ms = datetime_to_millis(datetime.now().astimezone())
            metadata = metadata.model_copy(update={"last_updated_ms": now_ms})
    metadata.spec().check_compatible(metadata.schema())
    metadata.sort_order().check_compatible(metadata.schema())
    return metadata

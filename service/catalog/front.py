"""The catalog's operations over the pointers, each commit fenced (service.lock.fence).

    front = Front(pointers, transact=runtime.transact_sync, read=runtime.read_sync)
    front.commit(("db", "events"), requirements, updates, principal="ingest", headers={})

A commit: load the table's current metadata (cached by location), check the commit's
requirements against it and apply its updates (Pointers.stage), read what the commit is
(service.catalog.changes), write the new metadata file, then in one transaction check the
leases and swap the pointer. A refused commit or a moved pointer deletes the metadata file it
wrote, so a refusal leaves nothing behind but its audit event; an unknown outcome keeps it.
The data and manifest files a refused writer wrote are the writer's to clean up (Iceberg
clients do on 403 and on 409 after their retries).

Names: a table served here is `<catalog name>.<namespace>.<table>` in lakelock's leases,
switch and events, the names the jobs use when their Spark catalog has the same name, in lower
case; so no two tables' names differ in letter case only (`_check_case`, Pointers.namesake).

What a client may not choose (docs/catalogs.md, "What the front refuses"): a class, or another
client's file access (table properties naming one or configuring it: service.catalog.limits;
stored ones are left out of every answer, `_answered`), a folder outside its table's own
(service.catalog.locations), sizes past the caps (`Limits`).
"""

from __future__ import annotations

import json
import logging
import re
from collections.abc import Callable, Mapping, Sequence
from datetime import timedelta
from functools import partial
from typing import Protocol, TypeVar

from pyiceberg.catalog.rest import CreateTableRequest
from pyiceberg.exceptions import (
    CommitFailedException,
    NamespaceAlreadyExistsError,
    NamespaceNotEmptyError,
    NoSuchNamespaceError,
    NoSuchTableError,
    TableAlreadyExistsError,
)
from pyiceberg.partitioning import UNPARTITIONED_PARTITION_SPEC
from pyiceberg.table import StagedTable, Table, TableProperties
from pyiceberg.table.metadata import (
    SUPPORTED_TABLE_FORMAT_VERSION,
    TableMetadata,
    TableMetadataV3,
    new_table_metadata,
)
from pyiceberg.table.sorting import UNSORTED_SORT_ORDER
from pyiceberg.table.update import (
    AssertCreate,
    AssertRefSnapshotId,
    SetPropertiesUpdate,
    TableRequirement,
    TableUpdate,
    UpgradeFormatVersionUpdate,
)
from pyiceberg.typedef import IcebergBaseModel, Identifier
from sqlalchemy.engine import Connection

from service.catalog import limits, locations
from service.catalog.changes import named_lease, read_change
from service.catalog.limits import Limits
from service.catalog.pointers import Pointers
from service.lock import drops, due, fence, idempotency, intents
from service.lock.db import DatabaseError, PoolExhausted, is_unavailable
from service.wire import TABLE_PATTERN
from service.wire.errors import (
    AlreadyExists,
    CommitConflict,
    CommitHeld,
    InvalidRequest,
    LakelockError,
    NoSuchNamespace,
    NoSuchTable,
    NotEmpty,
    StorageFault,
)

__all__ = ["Front", "Loaded"]

# the newest table format version the front writes (3: deletion vectors, row lineage); and the
# newest an upgrade reaches, pyiceberg's, which applies the updates (docs/catalog-front.md §1)
WRITTEN_FORMAT_VERSION = 3
UPGRADED_FORMAT_VERSION = SUPPORTED_TABLE_FORMAT_VERSION
FORMAT_VERSION = "format-version"  # the table property a create asks for a version with

log = logging.getLogger("lakelock.catalog")
T = TypeVar("T")


class Run(Protocol):
    """How the front reaches the lock database: `run(fn)` calls `fn(conn)` in one transaction
    (the service's `Runtime.transact_sync`) or on a read-only connection (`read_sync`)."""

    def __call__(self, fn: Callable[[Connection], T], /) -> T: ...


# a table as the catalog answers it: its metadata location (None when staged), the metadata,
# and the metadata's JSON text (the file's, when there is one)
Loaded = tuple[str | None, TableMetadata, str]


class Front:
    def __init__(
        self,
        pointers: Pointers,
        *,
        transact: Run,
        read: Run,
        caps: Limits | None = None,
        trigger: due.Trigger | None = None,
        turn: timedelta = timedelta(0),
    ) -> None:
        self.pointers = pointers
        self._transact = transact
        self._read = read
        self.limits = caps or Limits()
        self.trigger = trigger or due.Trigger()  # when a partition's counted files are due
        # how long a maintenance commit that lost the head has the next turn of it (0: never;
        # LAKELOCK_CATALOG_HEAD_TURN_S, docs/catalog-front.md §4)
        self.turn = turn

    @property
    def name(self) -> str:
        return self.pointers.name

    def table_name(self, identifier: Identifier) -> str:
        """lakelock's name of a table served here: lower case, as every lakelock name (Spark
        resolves Iceberg identifiers case-insensitively)."""
        return ".".join((self.name, *identifier)).lower()

    # -- namespaces -------------------------------------------------------------------------

    def list_namespaces(self, parent: Identifier = ()) -> list[Identifier]:
        try:
            return self.pointers.list_namespaces(parent)
        except NoSuchNamespaceError as exc:
            raise _no_namespace(parent) from exc

    def create_namespace(self, namespace: Identifier, properties: Mapping[str, str]) -> None:
        self._check_namespace_name(namespace)
        limits.check_namespace_properties(self.limits, properties)
        limits.check_property_count(
            self.limits, len(properties), what=f"namespace {'.'.join(namespace)}"
        )
        try:
            self.pointers.create_namespace(namespace, dict(properties))
        except NamespaceAlreadyExistsError as exc:
            raise AlreadyExists(f"namespace {'.'.join(namespace)} exists") from exc

    def namespace_properties(self, namespace: Identifier) -> dict[str, str]:
        try:
            return dict(self.pointers.load_namespace_properties(namespace))
        except NoSuchNamespaceError as exc:
            raise _no_namespace(namespace) from exc

    def update_namespace(
        self, namespace: Identifier, removals: set[str], updates: Mapping[str, str]
    ) -> dict[str, list[str]]:
        limits.check_namespace_properties(self.limits, updates)
        kept = set(self.namespace_properties(namespace)) - removals
        limits.check_property_count(
            self.limits, len(kept | set(updates)), what=f"namespace {'.'.join(namespace)}"
        )
        try:
            summary = self.pointers.update_namespace_properties(namespace, removals, dict(updates))
        except NoSuchNamespaceError as exc:
            raise _no_namespace(namespace) from exc
        return {"updated": summary.updated, "removed": summary.removed, "missing": summary.missing}

    def drop_namespace(self, namespace: Identifier) -> None:
        try:
            self.pointers.drop_namespace(namespace)
        except NoSuchNamespaceError as exc:
            raise _no_namespace(namespace) from exc
        except NamespaceNotEmptyError as exc:
            raise NotEmpty(f"namespace {'.'.join(namespace)} still holds tables") from exc

    def _check_namespace_name(self, namespace: Identifier) -> None:
        for level in namespace:
            limits.check_name(self.limits, level, what="namespace level")
        joined = ".".join(namespace)
        if len(joined) > limits.NAMESPACE_CHARS:
            raise InvalidRequest(
                f"namespace {joined[:80]!r}...: its levels joined with dots are "
                f"{len(joined)} characters, more than the catalog's {limits.NAMESPACE_CHARS}"
            )

    # -- tables -----------------------------------------------------------------------------

    def _check_name(self, identifier: Identifier) -> None:
        """A table lakelock can lease: its name fits lakelock's table names (one namespace
        level, identifiers of at most 64 characters), so its leases, switch and events name
        it. Other tables are loaded, listed and dropped, never created or committed here."""
        if self._leased_name(identifier) is None:
            raise InvalidRequest(
                f"{'.'.join(identifier)[:200]}: lakelock serves tables it can lease, named "
                f"{self.name}.<namespace>.<table> with one namespace level, each a letter or _ "
                "then letters, digits or _ (at most 64); pick such a name"
            )

    def list_tables(self, namespace: Identifier) -> list[Identifier]:
        try:
            return self.pointers.list_tables(namespace)
        except NoSuchNamespaceError as exc:
            raise _no_namespace(namespace) from exc

    def load(self, identifier: Identifier) -> Loaded:
        try:
            table = self.pointers.load_table(identifier)
        except NoSuchTableError as exc:
            raise self._no_table(identifier) from exc
        metadata, text = self.pointers.read_metadata(table.metadata_location)
        return _answered(table.metadata_location, metadata, text)

    def create(
        self,
        namespace: Identifier,
        request: CreateTableRequest,
        *,
        principal: str,
        key: idempotency.Key | None = None,
    ) -> Loaded:
        """A new table; staged (`stage-create`): its metadata only, nothing stored, and the
        client's commit with `assert-create` creates it. `key`: as in `commit`."""
        identifier = (*namespace, request.name)
        self._check_name(identifier)
        self._check_namespace_name(namespace)
        limits.check_name(self.limits, request.name, what="table name")
        properties = dict(request.properties)
        self._check_properties(identifier, properties, len(properties))
        if not self.pointers.namespace_exists(namespace):
            raise _no_namespace(namespace)
        if self.pointers.table_exists(identifier):
            raise AlreadyExists(f"table {'.'.join(identifier)} exists")
        self._check_case(identifier)
        location = self._location(identifier, request.location)
        locations.check_paths(properties, location)
        asked = _asked_format_version(properties)
        _check_format_version(identifier, asked, created=True)
        if request.stage_create and asked > UPGRADED_FORMAT_VERSION:
            raise InvalidRequest(_staged_version(identifier, asked))
        try:
            metadata = new_table_metadata(
                schema=request.table_schema,
                partition_spec=request.partition_spec or UNPARTITIONED_PARTITION_SPEC,
                sort_order=request.write_order or UNSORTED_SORT_ORDER,
                location=location,
                properties=properties,
            )
        except ValueError as exc:  # pyiceberg's word for a table it cannot make
            raise InvalidRequest(f"{'.'.join(identifier)}: {exc}") from exc
        if isinstance(metadata, TableMetadataV3) and metadata.next_row_id is None:
            # row lineage starts at row 0 (Iceberg reads no version 3 table without it)
            metadata = metadata.model_copy(update={"next_row_id": 0})
        text, raw = self._serialized(identifier, metadata, before=0)
        if request.stage_create:
            return _answered(None, metadata, text)
        new = locations.metadata_file(location, 0)
        self._write(identifier, metadata, new, text, raw)
        try:
            created = self._transact(
                lambda conn: self._swap(conn, identifier, None, new, moved=location, key=key)
            )
        except (LakelockError, idempotency.KeyTaken):
            self._delete(new)
            raise
        if not created:
            self._delete(new)
            raise AlreadyExists(f"table {'.'.join(identifier)} exists")
        log.info("table created", extra={"table": self.table_name(identifier), "actor": principal})
        return _answered(new, metadata, text)

    def _check_case(self, identifier: Identifier, *, besides: Identifier | None = None) -> None:
        """No other table's name differs from `identifier` in letter case only
        (Pointers.namesake); checked again in the transaction that creates the pointer.

        Raises:
            AlreadyExists: one does.
        """
        self._read(lambda conn: self.pointers.check_case(conn, identifier, besides=besides))

    def _location(self, identifier: Identifier, requested: str | None) -> str:
        """Where a new table goes: the location asked for, if allowed and free; else the
        default, or a fresh folder beside it when another table (renamed from this name)
        keeps the default's, or files are in it (a table dropped without purge).

        Raises:
            InvalidRequest: the location asked for is not allowed, or not free (another
                table's, or a folder holding files); a symbolic link stands where the
                default's folder would be.
        """
        warehouse, namespace = self.pointers.warehouse, identifier[:-1]
        # the default is placed too: a symbolic link may stand where its folder would be
        wanted = requested or locations.default_location(warehouse, namespace, identifier[-1])
        location = locations.place(warehouse, namespace, wanted)
        holder = self._read(lambda conn: self.pointers.holder(conn, location, besides=identifier))
        if holder is None and not self.pointers.storage.holds_objects(location):
            return location
        if requested:
            if holder is not None:
                raise self.pointers._taken(location, holder)
            raise _not_empty(location)
        fresh = locations.fresh_location(warehouse, namespace, identifier[-1])
        return locations.place(warehouse, namespace, fresh)

    def _check_properties(
        self, identifier: Identifier, properties: Mapping[str, str], total: int
    ) -> None:
        limits.check_table_properties(self.limits, properties)
        limits.check_property_count(self.limits, total, what=f"table {'.'.join(identifier)}")

    def _serialized(
        self, identifier: Identifier, metadata: TableMetadata, *, before: int
    ) -> tuple[str, bytes]:
        """The metadata's JSON text and its bytes, once for the cap, the file and the answer.

        Raises:
            InvalidRequest: it grew past LAKELOCK_CATALOG_MAX_METADATA_BYTES; it is of a
                format version the front does not write.
        """
        _check_format_version(identifier, metadata.format_version, created=before == 0)
        text = _metadata_json(identifier, metadata)
        raw = text.encode("utf-8")
        limits.check_metadata_size(self.limits, len(raw), before, ".".join(identifier))
        return text, raw

    def _write(
        self, identifier: Identifier, metadata: TableMetadata, location: str, text: str, raw: bytes
    ) -> None:
        try:
            self.pointers.write_metadata(metadata, location, text, raw)
        except FileExistsError as exc:
            raise CommitConflict(
                f"{'.'.join(identifier)}: {location} exists; commit again"
            ) from exc

    def commit(
        self,
        identifier: Identifier,
        requirements: Sequence[TableRequirement],
        updates: Sequence[TableUpdate],
        *,
        principal: str,
        headers: Mapping[str, str],
        park: fence.Park | None = None,
        key: idempotency.Key | None = None,
    ) -> Loaded:
        """Apply `updates` if `requirements` hold, fenced; the table as it is now. A commit
        parked while a hold refuses it (service.catalog.park) carries its `park`
        (service.lock.fence.Park); one sent with an Idempotency-Key keeps its answer in the
        transaction that swaps the pointer (`key`: service.lock.idempotency).

        Raises:
            NoSuchTable: no such table, and the commit does not create it.
            CommitConflict: a requirement failed, or the table moved meanwhile; a commit of a
                maintenance lease's holder that lost the head so gets the next turn of it.
            Fenced, CommitHeld: service.lock.fence refused it.
        """
        self._check_name(identifier)
        self._check_updates(identifier, updates)
        try:
            current: Table | None = self.pointers.load_table(identifier)
        except NoSuchTableError:
            if not any(isinstance(r, AssertCreate) for r in requirements):
                raise self._no_table(identifier) from None
            current = None
        try:
            staged = self.pointers.stage(current, identifier, tuple(requirements), tuple(updates))
        except CommitFailedException as exc:
            if current is not None and _head_moved(requirements, current.metadata):
                self._lost_head(identifier, updates, principal, headers)
            raise CommitConflict(f"{'.'.join(identifier)}: {exc}") from exc
        except ValueError as exc:  # pyiceberg's word for an update that cannot apply
            raise InvalidRequest(f"{'.'.join(identifier)}: {exc}") from exc
        old = current.metadata_location if current is not None else None
        metadata, new, moved = self._placed(identifier, current, staged, updates)
        text, raw = self._serialized(
            identifier, metadata, before=len(self.pointers.read_metadata(old)[1]) if old else 0
        )
        table = self.table_name(identifier)
        change = read_change(
            table,
            current.metadata if current is not None else None,
            metadata,
            updates,
            self.pointers.storage.reader(limits.Budget(self.limits).check),
            principal=principal,
            headers=headers,
        )
        self._write(identifier, metadata, new, text, raw)
        if park is not None:
            park.base = old  # what a hold met now was read against (still_held)

        def check_swap_record(conn: Connection) -> None:
            checked = fence.check(conn, change, park=park)
            if not self._swap(conn, identifier, old, new, moved=moved, key=key):
                fence.lost(conn, checked, turn=self.turn)
            fence.landed(conn, checked, trigger=self.trigger)

        try:
            self._transact(check_swap_record)
        except (LakelockError, idempotency.KeyTaken):
            # refused or lost, or the copy of a keyed request sent at the same time was
            # answered first: the transaction did not swap (or rolled back); the file is no one's
            self._delete(new)
            raise
        # any other failure (a connection lost during the commit) leaves the outcome unknown:
        # the pointer may name the file, so it stays (an orphan at worst)
        return _answered(new, metadata, text)

    def _swap(
        self,
        conn: Connection,
        identifier: Identifier,
        old: str | None,
        new: str,
        *,
        moved: str | None,
        key: idempotency.Key | None,
    ) -> bool:
        """Pointers.swap, keeping the answer of a request sent with an Idempotency-Key (the new
        metadata file) in the same transaction when it swapped.

        Raises:
            KeyTaken: another request with the key was answered first; raised out of the
                transaction, it rolls the swap back.
        """
        swapped = self.pointers.swap(conn, identifier, old, new, moved=moved)
        if swapped and key is not None:
            idempotency.remember(conn, key, status=200, location=new)
        return swapped

    def _lost_head(
        self,
        identifier: Identifier,
        updates: Sequence[TableUpdate],
        principal: str,
        headers: Mapping[str, str],
    ) -> None:
        """A commit whose base is no longer the head is answered 409 (the client retries on
        fresh metadata); one naming a maintenance lease gives it the next turn of the head, in
        a transaction of its own, when it is the holder's (service.lock.intents.open_turn). The
        409 stands whatever becomes of that: a lease named wrongly, or a database that fails
        now, costs the turn only."""
        if self.turn <= timedelta(0):
            return
        try:
            lease_id, token = named_lease(updates, headers)
        except InvalidRequest:
            return  # the retry on fresh metadata is refused for it (400)
        if lease_id is None:
            return
        table = self.table_name(identifier)
        try:
            self._transact(
                lambda conn: intents.open_turn(
                    conn,
                    table=table,
                    lease_id=lease_id,
                    token=token,
                    principal=principal,
                    turn=self.turn,
                )
            )
        except (DatabaseError, PoolExhausted) as exc:
            if isinstance(exc, DatabaseError) and not is_unavailable(exc):
                raise  # a fault, not an outage
            log.warning("no turn of the head for %s, the database is unavailable: %s", table, exc)

    def still_held(self, identifier: Identifier, park: fence.Park) -> CommitHeld | None:
        """A parked commit judged again without a try: the hold that refuses it now, while the
        table's pointer still names the base its last held try was read against; None when
        a whole try must answer it (the hold ended, another refusal, or the base moved)
        (service.lock.fence.held). Reads no file."""
        change = park.held
        if change is None:
            return None

        def look(conn: Connection) -> CommitHeld | None:
            if self.pointers.pointer(conn, identifier) != park.base:
                return None
            return fence.held(conn, change)

        return self._transact(look)

    def gave_up(self, park: fence.Park, held: CommitHeld) -> None:
        """service.catalog.park stopped parking a held commit without a last try (its client
        left, or no room to park it): record its one refusal (service.lock.fence.gave_up)."""
        self._transact(lambda conn: fence.gave_up(conn, park, held))

    def _check_updates(self, identifier: Identifier, updates: Sequence[TableUpdate]) -> None:
        """The properties a commit sets are within the limits, and it upgrades the table to no
        format version the front does not write."""
        for update in updates:
            if isinstance(update, SetPropertiesUpdate):
                limits.check_table_properties(self.limits, update.updates)
                if FORMAT_VERSION in update.updates:
                    raise InvalidRequest(
                        f"{'.'.join(identifier)}: '{FORMAT_VERSION}' is a reserved property, "
                        "read at create only: upgrade a table with an upgrade-format-version "
                        "update instead (Iceberg's clients send one for it)"
                    )
            elif isinstance(update, UpgradeFormatVersionUpdate):
                _check_format_version(identifier, update.format_version, created=True)
                if update.format_version > UPGRADED_FORMAT_VERSION:
                    raise InvalidRequest(_staged_version(identifier, update.format_version))

    def _placed(
        self,
        identifier: Identifier,
        current: Table | None,
        staged: StagedTable,
        updates: Sequence[TableUpdate],
    ) -> tuple[TableMetadata, str, str | None]:
        """The new metadata, its file's location, and the table's location when the commit
        creates the table or moves it (in canonical form, checked against the warehouse; the
        swap checks it against the other tables). Path properties are checked against the
        table's location when either may have changed, the count when properties changed.

        Raises:
            InvalidRequest: a location or path property outside what is allowed; too many
                properties.
        """
        metadata, new, moved = staged.metadata, staged.metadata_location, None
        if current is None or metadata.location != current.metadata.location:
            moved = locations.place(self.pointers.warehouse, identifier[:-1], metadata.location)
            if (
                current is not None
                and not locations.overlap(moved, current.metadata.location)  # its own files
                and self.pointers.storage.holds_objects(moved)
            ):
                raise _not_empty(moved)
            if moved != metadata.location:
                metadata = metadata.model_copy(update={"location": moved})
                version = self.pointers.metadata_version(new)
                new = locations.metadata_file(moved, version)
        setting = [u.updates for u in updates if isinstance(u, SetPropertiesUpdate)]
        if moved is not None or any(set(s) & set(locations.PATH_PROPERTIES) for s in setting):
            locations.check_paths(metadata.properties, metadata.location)
        if setting:
            limits.check_property_count(
                self.limits, len(metadata.properties), what=f"table {'.'.join(identifier)}"
            )
        return metadata, new, moved

    def drop(
        self, identifier: Identifier, *, purge: bool, principal: str
    ) -> Callable[[], object] | None:
        """Forget the table's pointer and, in the same transaction, its lock state
        (service.lock.drops.dropped); with `purge`, the rest of the drop, to run after it was
        answered (a large table's files take longer than a client waits): the deletion of its
        files, listed first (Pointers.purge_plan: those in its own location; another table's
        are never on the list), what is left logged (Pointers.purge).

        Raises:
            NoSuchTable: no such table.
            InUse: a lease, claim or intent of the table is live: nothing was dropped.
            StorageFault: purging, its files could not be listed: nothing was dropped.
        """
        table = self._leased_name(identifier)

        def drop_forget(conn: Connection) -> None:
            # every refusal before the first write: a refusal commits what came before it
            self.pointers.check_drop(conn, identifier)
            if table is not None:
                drops.dropped(conn, table=table, actor=principal)
            self.pointers.drop_pointer(conn, identifier)

        try:
            plan = self.pointers.purge_plan(self.pointers.load_table(identifier)) if purge else None
            self._transact(drop_forget)
        except NoSuchTableError as exc:
            raise self._no_table(identifier) from exc
        return partial(self.pointers.purge, plan) if plan is not None else None

    def rename(self, source: Identifier, destination: Identifier, *, principal: str) -> None:
        """A new name, and the table's lock state moved to it in the same transaction
        (service.lock.drops.renamed); the table keeps its location (and a later table of the
        old name gets a folder of its own: `_location`).

        Raises:
            NoSuchTable, NoSuchNamespace: no such source, no such destination namespace.
            AlreadyExists: the destination exists, or differs from a table's name in case only.
            InUse: a lease, claim or intent of either name is live: nothing was renamed.
        """
        self._check_namespace_name(destination[:-1])
        limits.check_name(self.limits, destination[-1], what="table name")
        old, new = self._leased_name(source), self._leased_name(destination)

        def rename_move(conn: Connection) -> None:
            # every refusal before the first write: a refusal commits what came before it
            self.pointers.check_rename(conn, source, destination)
            if new is not None:
                drops.renamed(conn, source=old, destination=new, actor=principal)
            elif old is not None:  # to a name lakelock leases nothing under: no home for it
                drops.dropped(conn, table=old, actor=principal)
            self.pointers.rename_pointer(conn, source, destination)

        try:
            self._transact(rename_move)
        except NoSuchTableError as exc:
            raise self._no_table(source) from exc
        except NoSuchNamespaceError as exc:
            raise _no_namespace(destination[:-1]) from exc
        except TableAlreadyExistsError as exc:
            raise AlreadyExists(f"table {'.'.join(destination)} exists") from exc

    def _leased_name(self, identifier: Identifier) -> str | None:
        """The table's name in lakelock's leases, switch and events; None for a name lakelock
        leases none under (`_check_name`)."""
        name = self.table_name(identifier)
        return name if re.fullmatch(TABLE_PATTERN, name) else None

    def _no_table(self, identifier: Identifier) -> NoSuchTable:
        return NoSuchTable(f"no table {'.'.join(identifier)} in catalog {self.name}")

    def _delete(self, location: str) -> None:
        try:
            self.pointers.storage.delete_file(location)
        except StorageFault:
            log.exception("could not delete the unused metadata file %s", location)


def _asked_format_version(properties: Mapping[str, str]) -> int:
    """The format version a create's properties ask for (pyiceberg's default, 2, if none).

    Raises:
        InvalidRequest: it is no integer.
    """
    asked = properties.get(FORMAT_VERSION, str(TableProperties.DEFAULT_FORMAT_VERSION)).strip()
    if not asked.isdigit() or int(asked) < 1:
        raise InvalidRequest(f"'{FORMAT_VERSION}' = {asked!r}: send 1, 2 or 3")
    return int(asked)


def _check_format_version(identifier: Identifier, version: int, *, created: bool) -> None:
    """Raises InvalidRequest when a table's metadata would be of a version the front does not
    write (WRITTEN_FORMAT_VERSION): a table `created` or upgraded so, or one of that version
    from another catalog, committed to."""
    if version <= WRITTEN_FORMAT_VERSION:
        return
    name, served = ".".join(identifier), f"versions 1 to {WRITTEN_FORMAT_VERSION}"
    if created:
        raise InvalidRequest(
            f"{name}: the catalog front writes table metadata of format {served} only, and "
            f"this would be version {version}: create the table with '{FORMAT_VERSION}' = "
            f"'{WRITTEN_FORMAT_VERSION}' or less"
        )
    raise InvalidRequest(
        f"{name} is of format version {version}, and the catalog front writes table metadata "
        f"of format {served} only: it is read through the front, and committed to through a "
        "catalog outside it (docs/catalog-front.md §1)"
    )


def _staged_version(identifier: Identifier, version: int) -> str:
    """What to do instead of a staged create or an upgrade to `version`: pyiceberg, which
    applies a commit's updates, upgrades a table to UPGRADED_FORMAT_VERSION at most, and a
    staged create's commit is such an upgrade (from the empty table)."""
    return (
        f"{'.'.join(identifier)}: the catalog front makes a table of format version {version} "
        "by a create only (CREATE TABLE ... TBLPROPERTIES ('format-version' = "
        f"'{version}'), not CREATE TABLE AS SELECT, which is staged), and upgrades a table "
        f"to version {UPGRADED_FORMAT_VERSION} at most: create a new table of version "
        f"{version} and copy the rows into it (docs/catalog-front.md §1)"
    )


def _metadata_json(identifier: Identifier, metadata: TableMetadata) -> str:
    """The metadata file's text. pyiceberg's model holds every field Iceberg writes at version
    3 (row lineage: the table's next-row-id, each snapshot's first-row-id and added-rows;
    column defaults), but its serializer refuses that version (apache/iceberg-python#1551):
    the model's own fields are serialized as at version 2, by the base model.

    Raises:
        InvalidRequest: a version 3 table's commit added a snapshot without added-rows, so
            its next row id is lost (Iceberg's clients send it with each snapshot).
    """
    if isinstance(metadata, TableMetadataV3):
        if metadata.next_row_id is None:
            raise InvalidRequest(
                f"{'.'.join(identifier)} is of format version 3: send each snapshot with its "
                "first-row-id and added-rows (row lineage), as Iceberg's clients do"
            )
        return IcebergBaseModel.model_dump_json(metadata, exclude_none=True)
    return metadata.model_dump_json(exclude_none=True)


def _head_moved(requirements: Sequence[TableRequirement], base: TableMetadata) -> bool:
    """Whether a requirement on a branch's head fails on `base`: another commit moved it since
    the commit's own base (docs/catalog-front.md §4)."""
    for requirement in requirements:
        if isinstance(requirement, AssertRefSnapshotId):
            try:
                requirement.validate(base)
            except CommitFailedException:
                return True
    return False


def _answered(location: str | None, metadata: TableMetadata, text: str) -> Loaded:
    """A table as a client is shown it: without the properties that choose a class or
    configure file access (limits.answered), which a table written by another catalog may
    hold. pyiceberg builds a loaded table's FileIO from its properties, so such a property
    would reach every client that loads the table. The metadata file keeps them, and a
    client's `remove-properties` still removes them; a table without them (every table the
    front created) is answered with its stored text, serialized once."""
    shown = limits.answered(metadata.properties)
    if shown is None:
        return location, metadata, text
    # the stored text without them, not the model serialized again: a table another catalog
    # wrote may hold fields pyiceberg's model does not know, and a load shows them as written
    document = json.loads(text)
    document["properties"] = shown
    metadata = metadata.model_copy(update={"properties": shown})
    return location, metadata, json.dumps(document, separators=(",", ":"))


def _not_empty(location: str) -> InvalidRequest:
    """A table is never placed in a folder that holds files: they would be its own to a purge
    (another table's that moved away, a table's dropped without purge)."""
    return InvalidRequest(
        f"location {location} holds files already (a table's that moved away or was dropped "
        "without purge): a table's location is an empty folder; send another (or none, for "
        "the default)"
    )


def _no_namespace(namespace: Identifier) -> NoSuchNamespace:
    return NoSuchNamespace(f"no namespace {'.'.join(namespace)}; create it first")

"""The catalog's operations over the pointers, each commit fenced (service.lock.fence).

    front = Front(pointers, transact=runtime.transact_sync, read=runtime.read_sync)
    front.commit(("db", "events"), requirements, updates, principal="ingest", headers={})

A commit: load the table's current metadata (cached by location), check the commit's
requirements against it, apply its updates (service.catalog.pointers.applied), read what the
commit is (service.catalog.changes), write the new metadata file, then in one transaction check
the leases and swap the pointer. A refused commit or a moved pointer deletes the metadata file
it wrote, so a refusal leaves nothing behind but its audit event; an unknown outcome keeps it.
The data and manifest files a refused writer wrote are the writer's to clean up (Iceberg
clients do on 403 and on 409 after their retries).

Names: a table served here is `<catalog name>.<namespace>.<table>` in lakelock's leases,
switch and events, the names the jobs use when their Spark catalog has the same name.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Callable, Mapping, Sequence
from typing import Any, TypeVar

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
from pyiceberg.table import Table
from pyiceberg.table.metadata import TableMetadata
from pyiceberg.table.sorting import UNSORTED_SORT_ORDER
from pyiceberg.table.update import AssertCreate, TableRequirement, TableUpdate
from pyiceberg.typedef import Identifier
from sqlalchemy.engine import Connection

from service.catalog.changes import read_change
from service.catalog.pointers import Pointers
from service.lock import fence
from service.wire import TABLE_PATTERN
from service.wire.errors import (
    AlreadyExists,
    CommitConflict,
    InvalidRequest,
    LakelockError,
    NoSuchNamespace,
    NoSuchTable,
    NotEmpty,
)

__all__ = ["Front", "Loaded"]

log = logging.getLogger("lakelock.catalog")
T = TypeVar("T")
# a table as the catalog answers it: its metadata location (None when staged), the metadata,
# and the metadata's JSON text (the file's, when there is one)
Loaded = tuple[str | None, TableMetadata, str]


class Front:
    def __init__(
        self,
        pointers: Pointers,
        *,
        transact: Callable[[Callable[[Connection], T]], T],
        read: Callable[[Callable[[Connection], T]], T],
    ) -> None:
        self.pointers = pointers
        self._transact = transact
        self._read = read

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

    # -- tables -----------------------------------------------------------------------------

    def _check_name(self, identifier: Identifier) -> None:
        """A table lakelock can lease: its name fits lakelock's table names (one namespace
        level, identifiers of at most 64 characters), so its leases, switch and events name
        it. Other tables are loaded, listed and dropped, never created or committed here."""
        if not re.fullmatch(TABLE_PATTERN, self.table_name(identifier)):
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
        return table.metadata_location, metadata, text

    def create(
        self, namespace: Identifier, request: CreateTableRequest, *, principal: str
    ) -> Loaded:
        """A new table; staged (`stage-create`): its metadata only, nothing stored, and the
        client's commit with `assert-create` creates it."""
        identifier = (*namespace, request.name)
        self._check_name(identifier)
        if not self.pointers.namespace_exists(namespace):
            raise _no_namespace(namespace)
        if self.pointers.table_exists(identifier):
            raise AlreadyExists(f"table {'.'.join(identifier)} exists")
        table_spec = (
            identifier,
            request.table_schema,
            request.location,
            request.partition_spec or UNPARTITIONED_PARTITION_SPEC,
            request.write_order or UNSORTED_SORT_ORDER,
            request.properties,
        )
        if request.stage_create:
            staged = self.pointers._create_staged_table(*table_spec)
            return None, staged.metadata, staged.metadata.model_dump_json(exclude_none=True)
        try:
            table = self.pointers.create_table(*table_spec)
        except TableAlreadyExistsError as exc:
            raise AlreadyExists(f"table {'.'.join(identifier)} exists") from exc
        log.info("table created", extra={"table": self.table_name(identifier), "actor": principal})
        metadata, text = self.pointers.read_metadata(table.metadata_location)
        return table.metadata_location, metadata, text

    def commit(
        self,
        identifier: Identifier,
        requirements: Sequence[TableRequirement],
        updates: Sequence[TableUpdate],
        *,
        principal: str,
        headers: Mapping[str, str],
    ) -> Loaded:
        """Apply `updates` if `requirements` hold, fenced; the table as it is now.

        Raises:
            NoSuchTable: no such table, and the commit does not create it.
            CommitConflict: a requirement failed, or the table moved meanwhile.
            Fenced, CommitHeld: service.lock.fence refused it.
        """
        self._check_name(identifier)
        try:
            current: Table | None = self.pointers.load_table(identifier)
        except NoSuchTableError:
            if not any(isinstance(r, AssertCreate) for r in requirements):
                raise self._no_table(identifier) from None
            current = None
        try:
            staged = self.pointers._update_and_stage_table(
                current, identifier, tuple(requirements), tuple(updates)
            )
        except CommitFailedException as exc:
            raise CommitConflict(f"{'.'.join(identifier)}: {exc}") from exc
        except ValueError as exc:  # pyiceberg's word for an update that cannot apply
            raise InvalidRequest(f"{'.'.join(identifier)}: {exc}") from exc
        old = current.metadata_location if current is not None else None
        new = staged.metadata_location
        table = self.table_name(identifier)
        change = read_change(
            table,
            staged.metadata,
            updates,
            staged.io,
            principal=principal,
            headers=headers,
            held=lambda: self._read(lambda conn: fence.may_be_held(conn, table)),
        )
        try:
            text = self.pointers.write_metadata(staged.metadata, staged.io, new)
        except FileExistsError as exc:
            raise CommitConflict(f"{'.'.join(identifier)}: {new} exists; commit again") from exc
        try:
            self._transact(
                lambda conn: fence.commit(
                    conn, change, swap=lambda c: self.pointers.swap(c, identifier, old, new)
                )
            )
        except LakelockError:
            # refused or lost: the transaction did not swap; the file is no one's
            self._delete(staged.io, new)
            raise
        # any other failure (a connection lost during the commit) leaves the outcome unknown:
        # the pointer may name the file, so it stays (an orphan at worst)
        return new, staged.metadata, text

    def drop(self, identifier: Identifier, *, purge: bool) -> None:
        """Forget the table's pointer; with `purge`, its files too where the catalog can."""
        try:
            if purge:
                self.pointers.purge_table(identifier)
            else:
                self.pointers.drop_table(identifier)
        except NoSuchTableError as exc:
            raise self._no_table(identifier) from exc

    def rename(self, source: Identifier, destination: Identifier) -> None:
        try:
            self.pointers.rename_table(source, destination)
        except NoSuchTableError as exc:
            raise self._no_table(source) from exc
        except NoSuchNamespaceError as exc:
            raise _no_namespace(destination[:-1]) from exc
        except TableAlreadyExistsError as exc:
            raise AlreadyExists(f"table {'.'.join(destination)} exists") from exc

    def _no_table(self, identifier: Identifier) -> NoSuchTable:
        return NoSuchTable(f"no table {'.'.join(identifier)} in catalog {self.name}")

    @staticmethod
    def _delete(io: Any, location: str) -> None:
        try:
            io.delete(location)
        except FileNotFoundError:
            pass
        except OSError:
            log.exception("could not delete the unused metadata file %s", location)


def _no_namespace(namespace: Identifier) -> NoSuchNamespace:
    return NoSuchNamespace(f"no namespace {'.'.join(namespace)}; create it first")

"""The table pointers: the JdbcCatalog's two tables in lakelock's database.

    pointers = Pointers("lakelock", engine, warehouse="file:///data/warehouse")
    pointers.load_table(("db", "events"))            # a pyiceberg Table (metadata cached)
    swapped = pointers.swap(conn, ("db", "events"), old, new)   # in the caller's transaction

pyiceberg's `SqlCatalog` reads and writes exactly the tables Iceberg's `JdbcCatalog` keeps
(`iceberg_tables`, `iceberg_namespace_properties`, created by migration 0011); here it runs over
the service's own engine, for namespaces, create, load, drop and rename. Commits do not go
through it: `swap` is the compare-and-swap of the metadata pointer, run by service.lock.fence
inside the transaction that checked the leases.

Two differences from pyiceberg's defaults, both to match the JdbcCatalog a site may already
have: a table's default location is `<warehouse>/<namespace levels>/<table>` (Iceberg's
JdbcCatalog), not `<namespace>.db/<table>`; and metadata files are cached by location, parsed
and as their JSON text (a metadata file is never rewritten), so a load or a commit reads a file
once and answers with the text it read or wrote, serialized once.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Sequence
from datetime import datetime

from pyiceberg.catalog import Catalog
from pyiceberg.catalog.sql import SqlCatalog
from pyiceberg.io import FileIO, load_file_io
from pyiceberg.serializers import Compressor
from pyiceberg.table import StagedTable, Table
from pyiceberg.table.locations import load_location_provider
from pyiceberg.table.metadata import TableMetadata, TableMetadataUtil
from pyiceberg.table.update import (
    TableRequirement,
    TableUpdate,
    _apply_table_update,
    _TableMetadataUpdateContext,
    _update_table_metadata_log,
)
from pyiceberg.typedef import Identifier
from pyiceberg.utils.datetime import datetime_to_millis
from sqlalchemy import Engine, and_, insert, update
from sqlalchemy.engine import Connection

from service.lock.db import iceberg_tables_t

__all__ = ["Pointers", "CACHED_METADATA", "applied"]

CACHED_METADATA = 256  # metadata files kept parsed, the latest used
CACHED_CHARS = (
    64 * 1024 * 1024
)  # and their JSON text, at most (the parsed form is a few times more)


class Pointers(SqlCatalog):
    def __init__(self, name: str, engine: Engine, *, warehouse: str) -> None:
        Catalog.__init__(
            self, name, warehouse=warehouse.rstrip("/")
        )  # not SqlCatalog's: no engine of its own
        self.engine = engine
        self._schema_version = "v1"  # migration 0011 made the tables with `iceberg_type`
        self._cache: OrderedDict[str, tuple[TableMetadata, str]] = OrderedDict()
        self._cached_chars = 0
        self._lock = threading.Lock()

    def _get_default_warehouse_location(self, database_name: str, table_name: str) -> str:
        levels = "/".join(database_name.split("."))
        return f"{self.properties['warehouse']}/{levels}/{table_name}"

    def read_metadata(self, location: str) -> tuple[TableMetadata, str]:
        """The metadata file at `location`, parsed and as its JSON text; read once."""
        with self._lock:
            found = self._cache.get(location)
            if found is not None:
                self._cache.move_to_end(location)
                return found
        io = load_file_io(properties=self.properties, location=location)
        with io.new_input(location).open() as stream:
            raw = Compressor.get_compressor(location).stream_decompressor(stream).read()
        text = raw.decode("utf-8")
        metadata = TableMetadataUtil.parse_raw(text)
        self._remember(location, metadata, text)
        return metadata, text

    def write_metadata(self, metadata: TableMetadata, io: FileIO, location: str) -> str:
        """Write `metadata` to a new file at `location`; its JSON text, serialized once for
        the file and the client's answer.

        Raises:
            FileExistsError: a file is at `location` already.
        """
        text = metadata.model_dump_json(exclude_none=True)
        data = Compressor.get_compressor(location).bytes_compressor()(text.encode("utf-8"))
        with io.new_output(location).create(overwrite=False) as stream:
            stream.write(data)
        self._remember(location, metadata, text)
        return text

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

    def _update_and_stage_table(  # type: ignore[override]
        self,
        current_table: Table | None,
        table_identifier: Identifier,
        requirements: tuple[TableRequirement, ...],
        updates: tuple[TableUpdate, ...],
    ) -> StagedTable:
        """pyiceberg's, for an existing table without the deep copy of the whole metadata
        that its `update_table_metadata` ends with (`applied`). A create goes through
        pyiceberg's own, which validates the new metadata."""
        if current_table is None:
            return super()._update_and_stage_table(None, table_identifier, requirements, updates)
        base = current_table.metadata
        for requirement in requirements:
            requirement.validate(base)
        metadata = applied(base, updates, current_table.metadata_location)
        version = self._parse_metadata_version(current_table.metadata_location) + 1
        provider = load_location_provider(metadata.location, metadata.properties)
        location = provider.new_table_metadata_file_location(version)
        return StagedTable(
            identifier=table_identifier,
            metadata=metadata,
            metadata_location=location,
            io=self._load_file_io(properties=metadata.properties, location=location),
            catalog=self,
        )

    def _convert_orm_to_iceberg(self, orm_table):  # type: ignore[no-untyped-def]
        location = orm_table.metadata_location
        if not location:
            return super()._convert_orm_to_iceberg(orm_table)  # raises NoSuchTableError
        metadata, _ = self.read_metadata(location)
        return Table(
            identifier=Catalog.identifier_to_tuple(orm_table.table_namespace)
            + (orm_table.table_name,),
            metadata=metadata,
            metadata_location=location,
            io=self._load_file_io(metadata.properties, location),
            catalog=self,
        )

    def swap(self, conn: Connection, identifier: Identifier, old: str | None, new: str) -> bool:
        """Point `identifier` at `new` if it still points at `old` (None: create its row);
        False when it moved meanwhile (or, creating, a row exists)."""
        namespace = Catalog.namespace_to_string(identifier[:-1])
        t = iceberg_tables_t.c
        key = and_(
            t.catalog_name == self.name,
            t.table_namespace == namespace,
            t.table_name == identifier[-1],
        )
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

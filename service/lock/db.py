"""The lock schema, the database clock, and engines for MySQL/MariaDB and SQLite.

Every dialect difference sits beside its reason. The schema itself is created by the Alembic
migrations in `migrations/`; `metadata` here is what they (and the code) agree on.
"""

from __future__ import annotations

import time
from collections import namedtuple
from collections.abc import Callable, Iterator, Mapping
from contextvars import ContextVar
from datetime import UTC, datetime
from typing import Any, TypeVar

from sqlalchemy import (
    BigInteger,
    Column,
    DateTime,
    Engine,
    Float,
    Index,
    Integer,
    MetaData,
    String,
    Table,
    Text,
    create_engine,
    event,
    literal_column,
    text,
)
from sqlalchemy.dialects import mysql
from sqlalchemy.engine import Connection
from sqlalchemy.exc import DBAPIError, OperationalError
from sqlalchemy.exc import TimeoutError as PoolTimeout
from sqlalchemy.sql.compiler import SQLCompiler
from sqlalchemy.sql.expression import ClauseElement, ColumnElement, Executable, Select

from service.wire.errors import LakelockError

__all__ = [
    "Connection",
    "DatabaseError",
    "Engine",
    "Hot",
    "Instant",
    "LockingRead",
    "PoolExhausted",
    "claims_t",
    "commit_leases_t",
    "debt_t",
    "driver_message",
    "due_samples_t",
    "due_t",
    "events_t",
    "followers_t",
    "iceberg_namespaces_t",
    "iceberg_tables_t",
    "intents_t",
    "is_unavailable",
    "keyset",
    "lag_t",
    "maintenance_leases_t",
    "make_engine",
    "metadata",
    "now",
    "readers_t",
    "recorded_events",
    "run_transaction",
    "runs_t",
    "tables_t",
    "wake",
    "woken",
]

metadata = MetaData()

# DATETIME(6) on MySQL/MariaDB: the default DATETIME drops microseconds, and expiry needs them
Instant = DateTime().with_variant(mysql.DATETIME(fsp=6), "mysql", "mariadb")

# text without MySQL's 64 KiB TEXT limit: a lease's partitions (a JSON array; NULL: the whole
# table) may hold 1,000 names of up to 512 characters, and an audit event's detail carries them
LongText = Text().with_variant(mysql.MEDIUMTEXT(), "mysql", "mariadb")
Scope = LongText

# SQLite autoincrements only an INTEGER PRIMARY KEY
BigId = BigInteger().with_variant(Integer, "sqlite")
NAME = 255  # an Iceberg identifier catalog.namespace.table
ID = 36  # uuid4, with dashes

tables_t = Table(
    "lakelock_tables",
    metadata,
    Column("name", String(NAME), primary_key=True),
    Column("ingest", String(16), nullable=False),  # running | paused
    Column("maintenance", String(16), nullable=False),  # enabled | disabled
    # enabled | disabled: whether a compactor's backpressure holds commits (docs/jobs.md §3)
    Column("backpressure", String(16), nullable=False, server_default="enabled"),
    Column("switch_reason", String(1024)),
    Column("switch_by", String(255)),
    Column("switch_at", Instant),
    # no maintenance lease nor intent on the table is live after this instant (NULL: none was
    # ever granted): a commit grant reads them only before it, so the common grant stays one
    # locking read. Raised with every grant, renewal and intent; lowered when one ends.
    Column("holds_until", Instant),
    Column("next_token", BigInteger, nullable=False),
    # no version column: a table's state version is the id of its newest event (leases.py)
    Column("created_at", Instant, nullable=False),
)


def _lease_table(name: str, *own: Column[Any], scoped: bool = True) -> Table:
    """A table of leases of one kind, one row per grant; `own` adds the kind's own columns,
    `scoped` the partitions a lease covers (NULL: the whole table)."""
    return Table(
        name,
        metadata,
        Column("id", String(ID), primary_key=True),
        Column("table_name", String(NAME), nullable=False),
        Column("holder", String(255), nullable=False),
        # the token that took it (docs/design.md §6); NULL: granted before principals were
        # recorded, so only an operator may end it
        Column("principal", String(255)),
        Column("request_id", String(128), nullable=False),
        *own,
        *((Column("partitions", Scope),) if scoped else ()),
        Column("ttl_s", Float, nullable=False),
        Column("acquired_at", Instant, nullable=False),
        Column("expires_at", Instant, nullable=False),
        Column("ended_at", Instant),
        Column("end", String(16)),  # released | expired | revoked
        Column("renewals", Integer, nullable=False, server_default="0"),
        Index(f"ix_{name}_live", "table_name", "ended_at", "expires_at"),
        # a repeated acquire is caught by the insert itself
        Index(f"ux_{name}_request", "table_name", "request_id", unique=True),
        # the sweeper's "expired but not ended, on any table" and pruning's "ended before the
        # cutoff"
        Index(f"ix_{name}_ended", "ended_at", "expires_at"),
    )


commit_leases_t = _lease_table("lakelock_commit_leases")
maintenance_leases_t = _lease_table(
    "lakelock_maintenance_leases", Column("token", BigInteger, nullable=False)
)
# claims (docs/design.md §5) in a table of their own: no query of the commit and maintenance paths
# (the commit grant, `holds_until`, the drain) ever reads them, as a claim excludes neither. A
# claim covers the whole table and carries no token: no partitions, no token column.
claims_t = _lease_table("lakelock_claims", scoped=False)

# an open intent (writer preference) of one maintenance request; deleted when it ends
intents_t = Table(
    "lakelock_intents",
    metadata,
    Column("table_name", String(NAME), primary_key=True),
    Column("request_id", String(128), primary_key=True),
    Column("holder", String(255), nullable=False),
    Column("principal", String(255)),  # the token that opened it, as a lease's
    Column("partitions", Scope),
    Column("opened_at", Instant, nullable=False),
    Column("expires_at", Instant, nullable=False),
    # drain: a maintenance request's writer preference; backpressure: a compactor holding the
    # writers of a partition whose debt passed its hard bound (docs/jobs.md §3)
    Column("cause", String(16), nullable=False, server_default="drain"),
    Index("ix_lakelock_intents_expires", "expires_at"),
)

events_t = Table(
    "lakelock_events",
    metadata,
    Column(
        "id", BigInteger().with_variant(Integer, "sqlite"), primary_key=True, autoincrement=True
    ),
    Column("at", Instant, nullable=False),
    Column("table_name", String(NAME), nullable=False),
    Column("event", String(32), nullable=False),
    Column("lease_id", String(ID)),
    Column("kind", String(16)),
    Column("holder", String(255)),
    Column("token", BigInteger),
    Column("actor", String(255)),
    Column("detail", LongText),
    Index("ix_lakelock_events_table", "table_name", "id"),
    Index("ix_lakelock_events_lease", "lease_id"),
)

runs_t = Table(
    "lakelock_runs",
    metadata,
    Column(
        "id", BigInteger().with_variant(Integer, "sqlite"), primary_key=True, autoincrement=True
    ),
    Column("table_name", String(NAME), nullable=False),
    Column("reported_at", Instant, nullable=False),
    Column("holder", String(255)),
    Column("outcome", String(32), nullable=False),
    Column("report", LongText, nullable=False),
    Index("ix_lakelock_runs_table", "table_name", "id"),
)


# the latest compaction debt a compactor reported for each table: one row per table, apart
# from lakelock_tables so the row every lease call locks and reads stays narrow
debt_t = Table(
    "lakelock_debt",
    metadata,
    Column("table_name", String(NAME), primary_key=True),
    Column("snapshot_id", BigInteger),
    Column("data_files", BigInteger, nullable=False),
    Column("small_files", BigInteger, nullable=False),
    Column("delete_files", BigInteger, nullable=False),
    Column("partitions_over_target", BigInteger, nullable=False),
    # past the hard bound (backpressure), and the most debt in one partition (migration 0012)
    Column("partitions_over_bound", BigInteger),
    Column("worst_partition", BigInteger),
    Column("records", BigInteger),
    # the compactor's own clock, as it sent it (RFC 3339): informational, never compared
    Column("measured_at", String(64)),
    Column("reported_at", Instant, nullable=False),  # the database clock
    Column("reported_by", String(255)),
)


# the latest source lag an ingest query reported for each table: one row per table, as debt_t
lag_t = Table(
    "lakelock_ingest_lag",
    metadata,
    Column("table_name", String(NAME), primary_key=True),
    Column("query_id", String(128), nullable=False),
    Column("batch_id", BigInteger, nullable=False),
    Column("partitions", LongText, nullable=False),  # JSON: {"topic:partition": records}
    Column("records", BigInteger, nullable=False),  # their sum, for ranking and the gauge
    Column("reported_at", Instant, nullable=False),  # the database clock
    Column("reported_by", String(255)),
)


# what each partition gained since it was last compacted, as commits land (docs/design.md
# §5.1): one row per (table, partition) with files counted; a compaction deletes it
due_t = Table(
    "lakelock_due",
    metadata,
    Column("table_name", String(NAME), primary_key=True),
    Column("partition_name", String(512), primary_key=True),  # MAX_NAME_CHARS
    Column("data_files", BigInteger, nullable=False),  # added since the last compaction
    Column("delete_files", BigInteger, nullable=False),
    # of the delete files, those that delete by equality (migration 0017)
    Column("equality_delete_files", BigInteger, nullable=False, server_default="0"),
    Column("commits", BigInteger, nullable=False),  # the commits that added them
    Column("first_at", Instant, nullable=False),  # when the first of them landed
    Column("due_at", Instant),  # when the counts reached the due threshold; NULL before
    Column("updated_at", Instant, nullable=False),
    Index("ix_lakelock_due_due_at", "due_at"),
)

# the time from due to compacted of each due partition compacted, for the figures of the last
# hour; pruned after a day
due_samples_t = Table(
    "lakelock_due_samples",
    metadata,
    Column("id", BigId, primary_key=True, autoincrement=True),
    Column("table_name", String(NAME), nullable=False),
    Column("partition_name", String(512), nullable=False),
    Column("due_at", Instant, nullable=False),
    Column("compacted_at", Instant, nullable=False),
    Column("seconds", Float, nullable=False),
    Index("ix_lakelock_due_samples_table", "table_name", "compacted_at"),
    Index("ix_lakelock_due_samples_at", "compacted_at"),
)

# the compactors that long-poll for due partitions (GET /v1/due): one row per holder
followers_t = Table(
    "lakelock_followers",
    metadata,
    # a follower is a token's own: another token's poll under the same holder is another row
    Column("principal", String(255), primary_key=True),
    Column("holder", String(255), primary_key=True),
    Column("tables", LongText, nullable=False),  # JSON: the table names and globs it follows
    Column("scope", LongText),  # JSON: its token's table patterns; NULL: every table
    Column("polled_at", Instant, nullable=False),
    Column("parked_until", Instant),  # parked on its long-poll until then; NULL: not parked
)


# the holds of jobs streaming out of a table: one row per (table, reader) while it is live
readers_t = Table(
    "lakelock_readers",
    metadata,
    Column("table_name", String(NAME), primary_key=True),
    Column("reader", String(128), primary_key=True),
    Column("snapshot_id", BigInteger, nullable=False),
    Column("snapshots_behind", BigInteger),
    Column("ttl_s", Float, nullable=False),
    Column("expires_at", Instant, nullable=False),
    Column("held_since", Instant, nullable=False),
    Column("advanced_at", Instant, nullable=False),
    Column("holder", String(255)),  # the principal that put it
    Index("ix_lakelock_readers_expiry", "expires_at"),
)


# the catalog front's answers to requests that carried an Idempotency-Key, kept for the
# key's lifetime (docs/catalog-front.md §4): one row per (principal, key)
idempotency_t = Table(
    "lakelock_idempotency",
    metadata,
    Column("principal", String(255), primary_key=True),
    Column("idempotency_key", String(36), primary_key=True),
    Column("fingerprint", String(64), nullable=False),  # sha256 of the request's method, path, body
    Column("status", Integer, nullable=False),
    Column("body", LongText),  # the answer's JSON; NULL for a table's (read from `location`)
    Column("location", String(1000)),  # the metadata file a table's answer is read from
    Column("created_at", Instant, nullable=False),
    Column("expires_at", Instant, nullable=False),
    Index("ix_lakelock_idempotency_expiry", "expires_at"),
)


# The catalog front's table pointers (docs/catalog-front.md): the two tables of Iceberg's
# JdbcCatalog (its V1 schema), column for column, so that an existing JDBC catalog's database is
# served as it is and pyiceberg's SqlCatalog reads them. `catalog_name` is the catalog's name
# (LAKELOCK_CATALOG_NAME); a namespace of several levels is joined with dots.
iceberg_tables_t = Table(
    "iceberg_tables",
    metadata,
    Column("catalog_name", String(255), primary_key=True),
    Column("table_namespace", String(255), primary_key=True),
    Column("table_name", String(255), primary_key=True),
    Column("metadata_location", String(1000)),
    Column("previous_metadata_location", String(1000)),
    Column("iceberg_type", String(5)),  # TABLE or VIEW; NULL in rows of older catalogs: a table
)

iceberg_namespaces_t = Table(
    "iceberg_namespace_properties",
    metadata,
    Column("catalog_name", String(255), primary_key=True),
    Column("namespace", String(255), primary_key=True),
    Column("property_key", String(255), primary_key=True),
    Column("property_value", String(1000)),
)


def now(conn: Connection) -> datetime:
    """The database clock, naive UTC with microseconds; read once per transaction.

    SQLite is a local file: every process using it shares this host's clock, and SQLite's own
    clock has only milliseconds, so the host clock is the database clock there.
    """
    if conn.dialect.name == "sqlite":
        return datetime.now(UTC).replace(tzinfo=None)
    at: datetime = conn.execute(text("SELECT UTC_TIMESTAMP(6)")).scalar_one()
    return at


def make_engine(url: str, *, pool_size: int = 40, timeout_s: float = 5.0) -> Engine:
    """An engine whose transactions serialise per table row on both dialects."""
    if url.startswith("sqlite"):
        engine = create_engine(
            url,
            connect_args={"timeout": max(timeout_s, 30.0), "check_same_thread": False},
        )

        @event.listens_for(engine, "connect")
        def _sqlite_connect(dbapi_conn: Any, _record: Any) -> None:
            # let SQLAlchemy, not pysqlite, decide when transactions begin ...
            dbapi_conn.isolation_level = None
            cursor = dbapi_conn.cursor()
            cursor.execute("PRAGMA journal_mode=WAL")
            cursor.execute("PRAGMA synchronous=NORMAL")
            cursor.execute("PRAGMA foreign_keys=ON")
            cursor.close()

        @event.listens_for(engine, "begin")
        def _sqlite_begin(conn: Connection) -> None:
            # ... and take the write lock up front: SQLite ignores FOR UPDATE, and a deferred
            # transaction can read "nothing live", then fail to write
            conn.exec_driver_sql("BEGIN IMMEDIATE")

        return engine
    return create_engine(
        url,
        pool_size=pool_size,
        max_overflow=pool_size,
        # every connection busy (a stuck database): give up like an unreachable one, with a 503,
        # instead of SQLAlchemy's default 30 s wait and a 500
        pool_timeout=timeout_s,
        # no ping per checkout: it costs a round trip on every call, and on a silent network
        # it doubles the time to a 503. A connection found dead on first use is replaced and
        # the transaction retried (run_transaction), the whole pool invalidated with it.
        pool_recycle=1800,
        # READ COMMITTED: after locking the table row, every later read sees the latest commits,
        # not a snapshot taken before the lock was granted (REPEATABLE READ's default)
        isolation_level="READ COMMITTED",
        # every checkout ends its transaction itself (engine.begin() commits or rolls back, a
        # closed Connection rolls back): the pool's own ROLLBACK on return is a wasted round trip
        pool_reset_on_return=None,
        connect_args={
            # the session clock in UTC, once per connection: SYSDATE() is then UTC (LockingRead)
            "init_command": "SET time_zone = '+00:00'",
            "connect_timeout": max(1, int(timeout_s)),
            # PyMySQL applies the read timeout to the handshake too: on a silent network a call
            # answers 503 after connect + read timeout, 2x LAKELOCK_DB_TIMEOUT_S at most. Our
            # statements take milliseconds.
            "read_timeout": max(1, int(timeout_s)),
            "write_timeout": max(1, int(timeout_s)),
        },
    )


# a row class named by the cursor's columns, which are known at run time only: called through
# this name, namedtuple is a plain function to the type checker
_row_class: Callable[[str, list[str]], type[Any]] = namedtuple


class Hot:
    """A statement of the lease path, written once with SQLAlchemy, sent straight through the
    DBAPI cursor on MySQL/MariaDB.

        LOCK = Hot(select(tables_t).where(tables_t.c.name == bindparam("name")).with_for_update())
        rows = LOCK.rows(conn, name="lake.db.t")   # rows with attribute access
        count = UPDATE.run(conn, id=lease_id, ...) # rows changed

    Its SQL is compiled once per dialect, so a call skips SQLAlchemy's statement, compile-cache
    and result layers (about three quarters of the Python time of a statement; see
    benchmarks/lease_throughput.py). The transaction is still the Connection's, and a driver
    error is raised as SQLAlchemy's (`IntegrityError`, `OperationalError`, a lost connection
    invalidated), so `run_transaction` retries and maps them as for any statement. SQLite runs
    the statement through SQLAlchemy: its datetimes are text that SQLAlchemy converts.
    """

    def __init__(self, stmt: Executable) -> None:
        assert isinstance(stmt, ClauseElement)  # built with SQLAlchemy's constructs: it compiles
        self.stmt = stmt
        self._compiled: dict[str, tuple[str, tuple[str, ...] | None]] = {}
        self._row: type[Any] | None = None

    def rows(self, conn: Connection, **params: Any) -> list[Any]:
        if conn.dialect.name == "sqlite":
            return list(conn.execute(self.stmt, params))
        cursor = self._execute(conn, params)
        try:
            found = cursor.fetchall()
            if self._row is None:
                self._row = _row_class("Row", [d[0] for d in cursor.description])
            return [self._row._make(row) for row in found]
        finally:
            cursor.close()

    def run(self, conn: Connection, **params: Any) -> int:
        if conn.dialect.name == "sqlite":
            return conn.execute(self.stmt, params).rowcount
        cursor = self._execute(conn, params)
        cursor.close()
        count: int = cursor.rowcount
        return count

    def _execute(self, conn: Connection, params: Mapping[str, Any]) -> Any:
        compiled = self._compiled.get(conn.dialect.driver)
        if compiled is None:
            statement = self.stmt.compile(dialect=conn.dialect)
            assert isinstance(statement, SQLCompiler)  # a query or DML, never DDL
            names = tuple(statement.positiontup or ()) if statement.positional else None
            compiled = self._compiled[conn.dialect.driver] = (statement.string, names)
        sql, names = compiled
        # the driver's paramstyle: positional (MySQLdb's %s) or named (PyMySQL's %(name)s)
        values = params if names is None else tuple(params[name] for name in names)
        dbapi_conn = conn.connection.dbapi_connection
        assert dbapi_conn is not None
        cursor = dbapi_conn.cursor()
        try:
            cursor.execute(sql, values)
        except conn.dialect.loaded_dbapi.Error as exc:
            cursor.close()
            lost = conn.dialect.is_disconnect(exc, dbapi_conn, cursor)
            if lost:
                conn.invalidate(exc)
            raise DBAPIError.instance(
                sql,
                values,
                exc,
                conn.dialect.loaded_dbapi.Error,
                connection_invalidated=lost,
                dialect=conn.dialect,
            ) from exc
        return cursor


# `SYSDATE(6)` is evaluated when the row is read, after a `FOR UPDATE` was granted its lock,
# not when the statement started (`UTC_TIMESTAMP()` would be): a call that waited for the lock
# never judges expiry with an instant from before the previous holder committed. It is UTC
# because every connection sets `time_zone = '+00:00'` (make_engine); a server started with
# `--sysdate-is-now` would break this and is not supported.
_CLOCK_AT_LOCK = literal_column("SYSDATE(6)", type_=Instant).label("db_now")


class LockingRead:
    """A `SELECT ... FOR UPDATE` that reads the database clock in the same statement, once the
    lock is granted (one round trip for both); on SQLite, where `BEGIN IMMEDIATE` already holds
    the lock, the clock is `now()`.

        LOCK = LockingRead(select(tables_t).where(tables_t.c.name == bindparam("name")))
        found = LOCK.first(conn, name="lake.db.t")     # (row, clock) or None
    """

    def __init__(self, query: Select[Any]) -> None:
        self._plain = Hot(query.with_for_update())
        self._clocked = Hot(query.add_columns(_CLOCK_AT_LOCK).with_for_update())

    def first(self, conn: Connection, **params: Any) -> tuple[Any, datetime] | None:
        if conn.dialect.name == "sqlite":
            rows = self._plain.rows(conn, **params)
            return (rows[0], now(conn)) if rows else None
        rows = self._clocked.rows(conn, **params)
        return (rows[0], rows[0].db_now) if rows else None


def keyset(
    conn: Connection,
    query: Select[Any],
    key: ColumnElement[Any],
    *,
    after: Any = None,
    descending: bool = False,
    batch: int = 1000,
) -> Iterator[Any]:
    """The rows of `query` in the order of `key` (unique), those past `after` only, read
    `batch` at a time, each batch starting past the last row of the one before: a caller that
    filters rows and stops once it has enough reads only the batches it used.

        for row in keyset(conn, select(events_t), events_t.c.id, descending=True): ...
    """
    order = key.desc() if descending else key.asc()
    while True:
        page = query.order_by(order).limit(batch)
        if after is not None:
            page = page.where(key < after if descending else key > after)
        rows = list(conn.execute(page))
        yield from rows
        if len(rows) < batch:
            return
        after = rows[-1]._mapping[key]


_MYSQL_RETRYABLE = {1205, 1213}  # lock wait timeout, deadlock: the transaction was rolled back

T = TypeVar("T")

recorded_events: ContextVar[list[dict[str, Any]] | None] = ContextVar(
    "lakelock_recorded_events", default=None
)
"""The audit events the running transaction recorded (set by run_transaction, appended to by
service.lock.audit.record), so metrics and logs follow committed transitions without a query."""

woken: ContextVar[set[str] | None] = ContextVar("lakelock_woken", default=None)
"""The wake channels the running transaction signalled (set by run_transaction, added to by
`wake`): its long-polls are woken once it commits, as those of a table whose events it wrote."""


def wake(channel: str) -> None:
    """Wake the long-polls parked on `channel` once the running transaction commits (none
    outside `run_transaction`)."""
    found = woken.get()
    if found is not None:
        found.add(channel)


def _is_retryable(exc: DBAPIError) -> bool:
    code = exc.orig.args[0] if exc.orig is not None and exc.orig.args else None
    if code in _MYSQL_RETRYABLE:
        return True
    return "database is locked" in str(exc.orig)


DatabaseError = DBAPIError
"""An error the database or its driver raised; `is_unavailable` tells an outage from a fault (a
bad statement, a schema behind the code)."""

PoolExhausted = PoolTimeout
"""No pooled connection came free within LAKELOCK_DB_TIMEOUT_S: a database too slow to answer."""


def driver_message(exc: BaseException) -> str:
    """The driver's own message, e.g. `(2003, "Can't connect to MySQL server on 'db' ...")`:
    it names the host, never the password, and leaves out the SQL that SQLAlchemy adds."""
    orig = getattr(exc, "orig", None)
    return f"{type(orig or exc).__name__}: {orig or exc}"


def is_unavailable(exc: BaseException) -> bool:
    """True for errors meaning the database cannot be reached (as opposed to a bad statement)."""
    if isinstance(exc, OperationalError):
        return not _is_retryable(exc)
    return isinstance(exc, DBAPIError) and exc.connection_invalidated


def run_transaction(
    engine: Engine,
    fn: Callable[[Connection], T],
    *,
    attempts: int = 4,
    on_commit: Callable[[list[dict[str, Any]]], None] | None = None,
    on_wake: Callable[[set[str]], None] | None = None,
) -> T:
    """Run `fn(conn)` in one transaction and return its result.

    A `LakelockError` raised by `fn` is a refusal decided by the protocol: the transaction still
    commits what `fn` recorded before deciding (ended expired leases, a `lease.renew_failed`
    event), then the error is raised. Any other exception rolls everything back. Retried, since
    nothing of the attempt was kept: a deadlock or lock timeout rolled back by the database,
    and a connection found dead before the commit was sent (the pool is refreshed with it). A
    connection lost during the commit is not retried: the outcome is unknown, the caller gets
    the error (a 503; clients retry acquires with the same request id).
    `on_commit` gets the audit events the committed transaction recorded, `on_wake` the wake
    channels it signalled (`wake`).
    """
    for attempt in range(1, attempts + 1):
        recorded: list[dict[str, Any]] = []
        channels: set[str] = set()
        refusal: LakelockError | None = None
        committing = False
        context = recorded_events.set(recorded)
        signalled = woken.set(channels)
        try:
            with engine.begin() as conn:
                try:
                    result = fn(conn)
                except LakelockError as exc:
                    refusal = exc
                committing = True
        except DBAPIError as exc:
            lost_before_commit = exc.connection_invalidated and not committing
            if attempt == attempts or not (_is_retryable(exc) or lost_before_commit):
                raise
            time.sleep(0.005 * attempt)
            continue
        finally:
            recorded_events.reset(context)
            woken.reset(signalled)
        if on_commit is not None and recorded:
            on_commit(recorded)
        if on_wake is not None and channels:
            on_wake(channels)
        if refusal is not None:
            raise refusal
        return result
    raise AssertionError("unreachable")

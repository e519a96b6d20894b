from datetime import timedelta

import pytest
from sqlalchemy import create_engine, inspect, text

from service.lock import leases, migrate, state
from service.lock.db import make_engine, now, run_transaction
from service.lock.rows import Caller
from service.wire.errors import Locked, NotOwner

pytestmark = pytest.mark.dialect  # on SQLite and MariaDB (tests/conftest.py)

TABLES = {
    "lakelock_tables",
    "lakelock_commit_leases",
    "lakelock_maintenance_leases",
    "lakelock_claims",
    "lakelock_debt",
    "lakelock_ingest_lag",
    "lakelock_readers",
    "lakelock_intents",
    "lakelock_events",
    "lakelock_runs",
    # the files counted per partition as commits land (migration 0014)
    "lakelock_due",
    "lakelock_due_samples",
    "lakelock_followers",
    # the catalog front's answers to requests with an Idempotency-Key (migration 0016)
    "lakelock_idempotency",
    # the JdbcCatalog's tables, which the catalog front serves (migration 0011)
    "iceberg_tables",
    "iceberg_namespace_properties",
}


@pytest.fixture
def empty_url(db_url):
    """The test database with no lakelock tables; at the head again afterwards (the MariaDB one
    is shared by the whole session)."""
    migrate.downgrade(db_url, "base")
    yield db_url
    migrate.upgrade(db_url)


def _row_before_scopes(url, *columns):
    """Columns of table lake.db.a's row in a database at revision 0004."""
    engine = create_engine(url)
    try:
        with engine.connect() as conn:
            query = f"SELECT {', '.join(columns)} FROM lakelock_tables WHERE name = 'lake.db.a'"
            return tuple(conn.execute(text(query)).one())
    finally:
        engine.dispose()


def _tables(url):
    engine = create_engine(url)
    try:
        return set(inspect(engine).get_table_names()) - {"alembic_version"}
    finally:
        engine.dispose()


def test_upgrade_downgrade_upgrade_on_both_databases(empty_url):
    assert _tables(empty_url) == set()
    migrate.upgrade(empty_url)
    assert _tables(empty_url) == TABLES
    migrate.downgrade(empty_url, "base")
    assert _tables(empty_url) == set()
    migrate.upgrade(empty_url)
    assert _tables(empty_url) == TABLES


def test_an_existing_jdbc_catalog_is_kept_as_it_is_and_never_dropped_by_a_downgrade(empty_url):
    engine = create_engine(empty_url)
    with engine.begin() as conn:  # a JdbcCatalog of the V0 schema, made before lakelock came
        conn.execute(
            text(
                "CREATE TABLE iceberg_tables (catalog_name VARCHAR(255) NOT NULL, "
                "table_namespace VARCHAR(255) NOT NULL, table_name VARCHAR(255) NOT NULL, "
                "metadata_location VARCHAR(1000), previous_metadata_location VARCHAR(1000), "
                "PRIMARY KEY (catalog_name, table_namespace, table_name))"
            )
        )
        conn.execute(
            text("INSERT INTO iceberg_tables VALUES ('lake', 'db', 'events', 'file:///m1', NULL)")
        )
    migrate.upgrade(empty_url)
    migrate.downgrade(empty_url, "base")
    with engine.connect() as conn:
        rows = conn.execute(text("SELECT table_name, iceberg_type FROM iceberg_tables")).all()
    engine.dispose()
    assert [tuple(r) for r in rows] == [("events", None)]  # given the V1 column, row kept
    assert "lakelock_tables" not in _tables(empty_url)
    migrate.upgrade(empty_url)


def test_an_older_database_is_brought_to_head(empty_url):
    migrate.upgrade(empty_url, "0001")
    assert "lakelock_runs" not in _tables(empty_url)
    migrate.upgrade(empty_url)
    engine = create_engine(empty_url)
    assert migrate.is_at_head(engine)
    engine.dispose()


def test_readyz_is_503_while_the_database_is_behind_head(api, db_url):
    assert api.get("/readyz").status_code == 200
    migrate.downgrade(db_url, "0001")
    response = api.get("/readyz")
    assert response.status_code == 503
    assert "python -m service migrate" in response.json()["detail"]
    migrate.upgrade(db_url)
    assert api.get("/readyz").status_code == 200


def test_schema_matches_the_code(db_url):
    from alembic.autogenerate import compare_metadata
    from alembic.runtime.migration import MigrationContext

    from service.lock.db import metadata

    engine = create_engine(db_url)
    with engine.connect() as conn:
        diff = compare_metadata(MigrationContext.configure(conn), metadata)
    engine.dispose()
    assert diff == []


def test_a_live_maintenance_lease_and_intent_survive_the_move_to_scoped_leases(empty_url):
    migrate.upgrade(empty_url, "0004")
    engine = make_engine(empty_url)
    with engine.begin() as conn:
        at = now(conn)
        conn.execute(
            text(
                "INSERT INTO lakelock_tables (name, ingest, maintenance, next_token, created_at, "
                "maint_lease_id, maint_holder, maint_request_id, maint_token, maint_ttl_s, "
                "maint_acquired_at, maint_expires_at) VALUES ('lake.db.a', 'running', "
                "'enabled', 8, :at, 'lease-a', 'compactor-1', 'run-a', 7, 600, :at, :later)"
            ),
            {"at": at, "later": at + timedelta(minutes=10)},
        )
        conn.execute(
            text(
                "INSERT INTO lakelock_tables (name, ingest, maintenance, next_token, created_at, "
                "intent_holder, intent_request_id, intent_opened_at, intent_expires_at) VALUES "
                "('lake.db.b', 'running', 'enabled', 1, :at, 'compactor-2', 'run-b', :at, :later)"
            ),
            {"at": at, "later": at + timedelta(minutes=10)},
        )
    engine.dispose()
    migrate.upgrade(empty_url)
    engine = make_engine(empty_url)
    try:
        a = run_transaction(engine, lambda conn: state.table_state(conn, table="lake.db.a"))
        b = run_transaction(engine, lambda conn: state.table_state(conn, table="lake.db.b"))
        assert [(x.lease_id, x.token, x.partitions) for x in a.maintenance_leases] == [
            ("lease-a", 7, None)
        ]
        assert [(x.request_id, x.partitions) for x in b.intents] == [("run-b", None)]
        for table, reason in (("lake.db.a", "maintenance"), ("lake.db.b", "intent")):
            with pytest.raises(Locked) as refused:
                run_transaction(
                    engine,
                    lambda conn, t=table: leases.acquire_commit(
                        conn,
                        table=t,
                        holder="ingest-1",
                        ttl=timedelta(seconds=30),
                        request_id="batch-1",
                        caller=Caller("ingest"),
                        partitions=["dt=2024-06-20"],
                    ),
                )
            assert refused.value.extra["reason"] == reason
    finally:
        engine.dispose()
    migrate.downgrade(empty_url, "0004")
    assert _row_before_scopes(empty_url, "maint_lease_id", "maint_token") == ("lease-a", 7)


def test_going_back_before_scopes_keeps_the_live_maintenance_lease(empty_url):
    migrate.upgrade(empty_url)
    engine = make_engine(empty_url)

    def acquire(partitions, request_id):
        return run_transaction(
            engine,
            lambda conn: leases.acquire_maintenance(
                conn,
                table="lake.db.a",
                holder="compactor-1",
                ttl=timedelta(minutes=10),
                request_id=request_id,
                intent_ttl=timedelta(seconds=5),
                caller=Caller("compactor"),
                partitions=partitions,
            ),
        )

    try:
        live = acquire(["dt=1"], "run-1")
        ended = acquire(["dt=2"], "run-2")  # a higher token, released
        run_transaction(
            engine,
            lambda conn: leases.release(
                conn,
                lease_id=ended.lease_id,
                caller=Caller("compactor"),
                holder="compactor-1",
                token=ended.token,
            ),
        )
    finally:
        engine.dispose()
    migrate.downgrade(empty_url, "0004")
    assert _row_before_scopes(empty_url, "maint_lease_id", "maint_end") == (live.lease_id, None)


def test_a_lease_granted_before_principals_is_ended_by_an_operator_only(empty_url):
    """Migration 0013: a row of unknown principal gives no job token anything."""
    migrate.upgrade(empty_url, "0012")
    engine = create_engine(empty_url)
    with engine.begin() as conn:
        conn.execute(
            text(
                "INSERT INTO lakelock_tables (name, ingest, maintenance, backpressure, "
                "next_token, created_at) VALUES ('lake.db.a', 'running', 'enabled', 'enabled', "
                "8, '2024-06-20 12:00:00')"
            )
        )
        conn.execute(
            text(
                "INSERT INTO lakelock_maintenance_leases (id, table_name, holder, request_id, "
                "token, partitions, ttl_s, acquired_at, expires_at) VALUES ("
                "'00000000-0000-4000-8000-000000000007', 'lake.db.a', 'compactor-1', 'run-1', "
                "7, NULL, 60, '2024-06-20 12:00:00', '2099-01-01 00:00:00')"
            )
        )
    engine.dispose()
    migrate.upgrade(empty_url)
    engine = make_engine(empty_url)
    lease_id = "00000000-0000-4000-8000-000000000007"
    try:
        for call in (
            lambda conn: leases.renew(
                conn, lease_id=lease_id, holder="compactor-1", caller=Caller("job"), token=7
            ),
            lambda conn: leases.release(
                conn, lease_id=lease_id, holder="compactor-1", caller=Caller("job"), token=7
            ),
        ):
            with pytest.raises(NotOwner) as refused:
                run_transaction(engine, call)
            assert refused.value.extra["reason"] == "other-principal"
            assert "before lakelock recorded who takes what" in refused.value.detail
        ended = run_transaction(
            engine,
            lambda conn: leases.release(conn, lease_id=lease_id, caller=Caller("ops", True)),
        )
        assert ended.state == "revoked" and ended.principal is None
    finally:
        engine.dispose()

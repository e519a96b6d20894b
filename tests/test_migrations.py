import pytest
from sqlalchemy import create_engine, inspect

from service import migrate

TABLES = {"lakelock_tables", "lakelock_commit_leases", "lakelock_events", "lakelock_runs"}


@pytest.fixture
def empty_url(db_url):
    migrate.downgrade(db_url, "base")
    return db_url


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

    from service.db import metadata

    engine = create_engine(db_url)
    with engine.connect() as conn:
        diff = compare_metadata(MigrationContext.configure(conn), metadata)
    engine.dispose()
    assert diff == []

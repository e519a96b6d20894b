"""Fixtures shared by the whole suite.

`db_url` runs a test once on SQLite (a file under tmp_path) and once on the real MariaDB named by
LAKELOCK_TEST_MARIADB_URL (skipped when unset; `.ci/run` sets it and fails if MariaDB is down).
Each MariaDB run gets its own database, migrated once per session and emptied between tests.
`api` is the app in-process (a starlette TestClient, which is an httpx.Client); `lakelock_server`
is a real `python -m service` process on a free loopback port, for the Spark jobs' tests.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator
from pathlib import Path

import httpx
import hypothesis
import pytest
from sqlalchemy import create_engine, text

from service.client import LeaseClient
from testkit import LocalService, free_port, fresh_database

MARIADB_URL = os.environ.get("LAKELOCK_TEST_MARIADB_URL")

# The property tests draw the same examples on every run (`fixed`): the suite, CI above all,
# fails only where the code changed, never on an example a new seed happened upon, and keeps no
# example database between runs. `bin/fuzz` explores (`--hypothesis-profile random`: new
# examples, more of them, a failure printed with the example to add as an @example).
hypothesis.settings.register_profile(
    "fixed", derandomize=True, database=None, deadline=None, print_blob=True
)
hypothesis.settings.register_profile(
    "random", max_examples=1000, database=None, deadline=None, print_blob=True
)
hypothesis.settings.load_profile("fixed")

TOKENS = {
    "reader": "reader-secret-0001",
    "job": "job-secret-00000002",
    "operator": "operator-secret-003",
}
TOKENS_ENV = ",".join(f"{role}-client:{role}:{secret}" for role, secret in TOKENS.items())


def auth(role: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {TOKENS[role]}"}


# -- databases -------------------------------------------------------------------------------


@pytest.fixture(scope="session")
def sqlite_template(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from service.lock import migrate

    path = tmp_path_factory.mktemp("sqlite-template") / "lakelock.db"
    migrate.upgrade(f"sqlite:///{path}")
    return path


@pytest.fixture(scope="session")
def mariadb_session_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    if not MARIADB_URL:
        if os.environ.get("LAKELOCK_REQUIRE_MARIADB"):
            pytest.fail("LAKELOCK_REQUIRE_MARIADB is set but LAKELOCK_TEST_MARIADB_URL is not")
        pytest.skip("LAKELOCK_TEST_MARIADB_URL is not set")
    # an unreachable MariaDB fails here, loudly: it is never a skip
    with fresh_database(
        "mariadb",
        mariadb_url=MARIADB_URL,
        workdir=tmp_path_factory.getbasetemp(),
        prefix="lakelock_test",
    ) as url:
        yield url


def _empty_mariadb(url: str) -> None:
    engine = create_engine(url)
    with engine.begin() as conn:
        for table in (
            "lakelock_commit_leases",
            "lakelock_maintenance_leases",
            "lakelock_claims",
            "lakelock_debt",
            "lakelock_due",
            "lakelock_due_samples",
            "lakelock_followers",
            "lakelock_ingest_lag",
            "lakelock_readers",
            "lakelock_intents",
            "lakelock_events",
            "lakelock_runs",
            "lakelock_tables",
            "iceberg_tables",
            "iceberg_namespace_properties",
        ):
            conn.execute(text(f"DELETE FROM {table}"))
    engine.dispose()


@pytest.fixture(params=["sqlite", pytest.param("mariadb", marks=pytest.mark.mariadb)])
def db_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    if request.param == "sqlite":
        path = tmp_path / "lakelock.db"
        shutil.copy(request.getfixturevalue("sqlite_template"), path)
        return f"sqlite:///{path}"
    url = request.getfixturevalue("mariadb_session_url")
    _empty_mariadb(url)
    return url


# -- the app in-process ----------------------------------------------------------------------


def make_settings(db_url: str, **overrides: object):
    from service.server.settings import load_settings

    values: dict[str, object] = {"database_url": db_url, "tokens": TOKENS_ENV, "auth": "on"}
    values.update(overrides)
    return load_settings(**values)


@pytest.fixture
def settings_overrides() -> dict[str, object]:
    """Override in a test module to change the app's settings (e.g. a short intent TTL)."""
    return {}


@pytest.fixture
def api(db_url: str, settings_overrides: dict[str, object]) -> Iterator[httpx.Client]:
    """The service in-process over `db_url`, as an httpx.Client that sends the operator token
    unless a request sets its own Authorization header."""
    from starlette.testclient import TestClient

    from service.server.app import create_app

    app = create_app(make_settings(db_url, **settings_overrides))
    with TestClient(app, headers=auth("operator"), raise_server_exceptions=False) as client:
        yield client


# -- a real server process -------------------------------------------------------------------

ServerProcess = LocalService


def start_server(
    db_url: str, log_dir: Path, *, port: int | None = None, **env: str
) -> LocalService:
    """Start the service as a process (the suite's tokens) and wait until /readyz answers."""
    port = port or free_port()
    return LocalService.start(
        db_url=db_url, log_path=log_dir / f"service-{port}.log", port=port, tokens=TOKENS, **env
    )


def start_front(
    request: pytest.FixtureRequest,
    tmp_path_factory: pytest.TempPathFactory,
    name: str,
    **env: str,
) -> LocalService:
    """A service process with the catalog front on, over the database `request.param` names
    (`sqlite`: a new file; `mariadb`: the session's database, emptied), its warehouse a new
    folder. The process carries `db_url`, `warehouse` and `folder` for the test's own reads."""
    folder = tmp_path_factory.mktemp(f"{name}-{request.param}")
    if request.param == "sqlite":
        from service.lock import migrate

        db_url = f"sqlite:///{folder / 'lakelock.db'}"
        migrate.upgrade(db_url)
    else:
        db_url = request.getfixturevalue("mariadb_session_url")
        _empty_mariadb(db_url)
    warehouse = folder / "warehouse"
    # a held commit answers 429 at once, unless the test parks it (tests/catalog/test_front.py)
    env.setdefault("LAKELOCK_CATALOG_HOLD_WAIT_S", "0")
    server = start_server(db_url, folder, LAKELOCK_CATALOG_WAREHOUSE=warehouse.as_uri(), **env)
    server.db_url = db_url  # type: ignore[misc]
    server.warehouse = warehouse  # type: ignore[attr-defined]
    server.folder = folder  # type: ignore[attr-defined]
    return server


BOTH_DATABASES = ["sqlite", pytest.param("mariadb", marks=pytest.mark.mariadb)]
"""The params of a module-scoped fixture that runs its tests on both databases."""


@pytest.fixture(scope="module")
def lakelock_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    """A real service process on SQLite, one per test module."""
    folder = tmp_path_factory.mktemp("lakelock-server")
    server = start_server(f"sqlite:///{folder / 'lakelock.db'}", folder)
    yield server
    server.stop()


@pytest.fixture(scope="module")
def job_client(lakelock_server: ServerProcess) -> Iterator[LeaseClient]:
    """A client of the module's service with the job role."""
    with LeaseClient(lakelock_server.url, token=lakelock_server.token("job")) as client:
        yield client


@pytest.fixture(scope="module")
def operator(lakelock_server: ServerProcess) -> Iterator[LeaseClient]:
    """A client of the module's service with the operator role."""
    with LeaseClient(lakelock_server.url, token=lakelock_server.token("operator")) as client:
        yield client

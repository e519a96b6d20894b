"""Fixtures shared by the whole suite.

`db_url` runs a test on SQLite (a file under tmp_path), and where its module is marked `dialect`
(the database's dialect matters) once more on the real MariaDB named by
LAKELOCK_TEST_MARIADB_URL (skipped when unset; `.ci/run` sets it and fails if MariaDB is down).
Each MariaDB run gets its own database, migrated once per session and emptied between tests.
`api` is the app in-process (a starlette TestClient, which is an httpx.Client); `lakelock_server`
is a real `python -m service` process on a free loopback port, for the Spark jobs' tests.
"""

from __future__ import annotations

import os
import shutil
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import hypothesis
import pytest
from sqlalchemy import create_engine, text
from sqlalchemy.engine import Engine

from demo.s3 import ENV as S3_ENV
from demo.s3 import REGION, LocalS3
from service.client import LeaseClient
from testkit import LocalService, free_port, fresh_database, spark_cds
from tests.support.tier import TIER

MARIADB_URL = os.environ.get("LAKELOCK_TEST_MARIADB_URL")

# The keys and region of the project's S3 server (demo.s3), where the service, Spark and
# pyiceberg read them on AWS: the standard AWS variables. Set before any test starts a Spark
# JVM, which takes its environment once, whichever module comes first.
os.environ.update(S3_ENV)

# Every JVM a test starts (the Spark driver in this process, the jobs', demo's and Flink's
# subprocesses, Trino) runs with the JIT's first compiler alone (TieredStopAtLevel=1): most live
# a minute or two, too short for the second one to pay for itself, and the driver here, which
# lives for the whole JVM unit, spends less with C1 alone too. C1 alone shrinks the code cache
# to 48 MB by default, which Spark and Iceberg fill: the JVM then spends nearly a third of its
# CPU sweeping it, so the cache keeps the JVM's usual 240 MB (docs/operating.md, "The tests",
# has the figures). Options both JDKs here take (17 and Trino's 25); a JAVA_TOOL_OPTIONS of the
# caller's own wins. The jobs users run and `python -m benchmarks.*` (what measures) keep the
# JVM's default; the bench tier's small runs check, and measure nothing.
os.environ.setdefault("JAVA_TOOL_OPTIONS", "-XX:TieredStopAtLevel=1 -XX:ReservedCodeCacheSize=240m")

# Every Spark driver a test starts (this process's, the jobs') maps the classes it would load
# from the class-data archive bin/test made (testkit.spark_cds, LAKELOCK_TEST_SPARK_CDS): a short
# job's CPU down by a third. Through SPARK_SUBMIT_OPTS, which spark-submit alone reads (Flink,
# Trino and Kafka have class paths of their own); a caller's own SPARK_SUBMIT_OPTS wins.
if (_cds := os.environ.get("LAKELOCK_TEST_SPARK_CDS")) and Path(_cds).is_file():
    os.environ.setdefault("SPARK_SUBMIT_OPTS", spark_cds.java_options(Path(_cds)))

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
# a second job token, another principal: for what one job token may not do to another's
OTHER_JOB = "job-b-secret-00000005"
TWO_JOBS_ENV = f"{TOKENS_ENV},job-b:job:{OTHER_JOB}"
SECRETS = {
    "a": TOKENS["job"],
    "b": OTHER_JOB,
    "reader": TOKENS["reader"],
    "operator": TOKENS["operator"],
}


def auth(role: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {TOKENS[role]}"}


# -- databases -------------------------------------------------------------------------------

pytest_plugins = ["tests.support.budget"]  # seconds per module, and the modules over their budget

FAST = TIER == "fast"
"""The fast tier (bin/test --fast): each test once, on SQLite and local files; its MariaDB and
S3 twins, and the tests of MariaDB or S3 alone (the `mariadb` and `s3` markers), are the full
run's."""


JVM_FOLDERS = ("tests/spark/",)
JVM_MODULES = ("tests/catalog/test_trino.py",)
"""The modules that start a JVM working both cores (Spark, Flink, Trino): bin/test's two
workers (pytest-xdist, `--dist loadscope`) run them on one worker, one after the other, since two
side by side only slow each other; every other module runs whole on either (OneJvmAtATime). A
test of a module marked `spark` or `flink` elsewhere fails, saying so: name it here."""
BENCHMARK_SUFFIX = "_benchmark.py"
"""A Spark benchmark's end-to-end run at a small size (tests/spark/*_benchmark.py, marked
`bench`): the benchmark runs in a process of its own, with its JVMs, and the worker only waits
for it, so each such module is a unit of its own on either worker (`bin/test -m bench`: two at
a time; beside the JVM modules when a run selects both). Such a test may not take the
in-process `spark` session (pytest_runtest_setup)."""
JVM_APART = (
    "tests/spark/test_cluster.py",  # a Spark standalone cluster and its driver
    "tests/spark/test_demo.py",  # the demo's service and jobs
    "tests/spark/test_flink_demo.py",  # the Flink demo's service, jobs and Flink
    "tests/spark/test_iceberg_versions.py",  # a job under each Iceberg version
)
"""Modules of tests/spark/ whose JVMs all run in processes of their own, as a benchmark's do
(runs_apart): each a unit of its own on either worker, beside the JVM unit, so that the other
worker takes its share of the JVM work. Such a test may not take the in-process `spark`
session either."""


def module_of(nodeid: str) -> str:
    """The test module's path in a test's node id."""
    return nodeid.split("::", 1)[0]


def runs_a_benchmark(nodeid: str) -> bool:
    module = module_of(nodeid)
    return module.startswith(JVM_FOLDERS) and module.endswith(BENCHMARK_SUFFIX)


def runs_apart(nodeid: str) -> bool:
    """A benchmark's module or one of JVM_APART: its JVMs in processes of its own."""
    return runs_a_benchmark(nodeid) or module_of(nodeid) in JVM_APART


def runs_a_jvm(nodeid: str) -> bool:
    module = module_of(nodeid)
    in_jvm_unit = module.startswith(JVM_FOLDERS) or module in JVM_MODULES
    return in_jvm_unit and not runs_apart(nodeid)


def pytest_xdist_make_scheduler(config: pytest.Config, log: Any) -> Any:
    """bin/test's scheduler (`--dist loadscope`): a work unit per module, and one for all the
    JVM modules (runs_a_jvm)."""
    if config.getoption("dist") != "loadscope":
        return None
    from xdist.scheduler import LoadScopeScheduling

    class OneJvmAtATime(LoadScopeScheduling):
        def _split_scope(self, nodeid: str) -> str:
            return "jvm" if runs_a_jvm(nodeid) else module_of(nodeid)

    # the units in the order of the collection, which longest_first made
    config.option.loadscopereorder = False
    return OneJvmAtATime(config, log)


def longest_first(items: list[pytest.Item]) -> list[pytest.Item]:
    """`items` in the order bin/test's workers take their units: the JVM unit, then those of
    the modules that run their JVMs apart (runs_apart: minutes each), then the other modules,
    most tests first. A worker takes the next unit once it is done with one, so the longest
    units start first and the run ends on short ones. Each module's tests keep their order."""
    count = Counter(module_of(item.nodeid) for item in items)

    def rank(item: pytest.Item) -> tuple[int, int, str]:
        module = module_of(item.nodeid)
        group = 0 if runs_a_jvm(module) else 1 if runs_apart(module) else 2
        return (group, -count[module] if group == 2 else 0, module)

    return sorted(items, key=rank)


def pytest_runtest_setup(item: pytest.Item) -> None:
    """Fails a test whose module is marked `spark` or `flink` where runs_a_jvm does not look,
    and a test of a module that runs its JVMs apart (runs_apart) that takes the in-process
    `spark` session (a failure reaches the screen from an xdist worker, where a collection
    error would not)."""
    marks = getattr(getattr(item, "module", None), "pytestmark", [])
    names = {m.name for m in (marks if isinstance(marks, list) else [marks])}
    if runs_apart(item.nodeid):
        if "spark" in getattr(item, "fixturenames", ()):
            pytest.fail(
                f"{module_of(item.nodeid)} runs beside the JVM modules: its JVMs run in "
                "processes of their own, a test here may not take the `spark` session "
                "(or take it out of tests/conftest.py's JVM_APART)",
                pytrace=False,
            )
    elif names & {"spark", "flink"} and not runs_a_jvm(item.nodeid):
        pytest.fail(
            f"{module_of(item.nodeid)} is marked spark or flink: put it in tests/spark/ "
            "or name it in tests/conftest.py's JVM_MODULES",
            pytrace=False,
        )


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """A test's MariaDB twin (the `mariadb` param of `db_url`, BOTH_DATABASES, FRONTS) only
    where its module says the database's dialect matters (the `dialect` marker: locking,
    clocks, upserts, keysets, migrations, concurrency invariants, outages); the others run on
    SQLite alone. The fast tier runs neither MariaDB nor S3 (FAST)."""
    kept, dropped = [], []
    for item in items:
        params = getattr(getattr(item, "callspec", None), "params", {}).values()
        if FAST:
            wanted = not any(item.get_closest_marker(m) for m in ("mariadb", "s3"))
        elif "mariadb" in params:
            wanted = item.get_closest_marker("dialect") is not None
        else:
            wanted = True
        (kept if wanted else dropped).append(item)
    if dropped:
        config.hook.pytest_deselected(items=dropped)
    items[:] = longest_first(kept)


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
            "lakelock_idempotency",
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


@pytest.fixture
def engine(db_url: str) -> Iterator[Engine]:
    """The service's engine over `db_url`, for a test's own reads and transactions
    (`run_transaction`), disposed after the test."""
    from service.lock.db import make_engine

    made = make_engine(db_url)
    yield made
    made.dispose()


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
    """A service process with the catalog front on, over the database and storage
    `request.param` names (`sqlite`: a new file; `mariadb`: the session's database, emptied;
    `sqlite-s3`: a new file, the warehouse on the session's S3 server), its warehouse a new
    folder or prefix. The process carries `db_url`, `store` (a Warehouse), `warehouse` (the
    local folder; None on S3) and `folder` for the test's own reads."""
    folder = tmp_path_factory.mktemp(f"{name}-{request.param}")
    database, _, storage = str(request.param).partition("-")
    if database == "sqlite":
        from service.lock import migrate

        db_url = f"sqlite:///{folder / 'lakelock.db'}"
        migrate.upgrade(db_url)
    else:
        db_url = request.getfixturevalue("mariadb_session_url")
        _empty_mariadb(db_url)
    if storage == "s3":
        s3 = request.getfixturevalue("s3_server")
        store = Warehouse(s3.warehouse(folder.name), s3)
        env = {**s3.settings, **env}
    else:
        store = Warehouse((folder / "warehouse").as_uri())
    # a held commit answers 429 at once, unless the test parks it (tests/catalog/test_front.py)
    env.setdefault("LAKELOCK_CATALOG_HOLD_WAIT_S", "0")
    server = start_server(db_url, folder, LAKELOCK_CATALOG_WAREHOUSE=store.uri, **env)
    server.db_url = db_url  # type: ignore[misc]
    server.store = store  # type: ignore[attr-defined]
    server.warehouse = store.path  # type: ignore[attr-defined]
    server.folder = folder  # type: ignore[attr-defined]
    return server


BOTH_DATABASES = ["sqlite", pytest.param("mariadb", marks=pytest.mark.mariadb)]
"""The params of a module-scoped fixture that runs its tests on both databases."""

FRONTS = [*BOTH_DATABASES, pytest.param("sqlite-s3", marks=pytest.mark.s3)]
"""Both databases with a warehouse of local files, and SQLite with one on S3 (the project's
S3 server): the catalog front's tests that hold for any storage."""


def front_fixture(name: str, params: list[Any], **env: str) -> Any:
    """A module-scoped fixture of a front (start_front) on each of `params`, with `env`,
    stopped after the module:

        front = front_fixture("idempotency", ["sqlite"], LAKELOCK_TOKENS=TWO_JOBS_ENV)
    """

    @pytest.fixture(scope="module", params=params)
    def front(
        request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
    ) -> Iterator[LocalService]:
        server = start_front(request, tmp_path_factory, name, **env)
        yield server
        server.stop()

    return front


# -- object storage --------------------------------------------------------------------------


@pytest.fixture(scope="session")
def s3_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalS3]:
    """The project's S3 server (demo.s3: S3Proxy) on loopback, one per session; its keys are
    in this process's environment (S3_ENV, above)."""
    s3 = LocalS3.start(tmp_path_factory.mktemp("s3"))
    yield s3
    s3.stop()


class Warehouse:
    """A warehouse as the tests read it, whatever its storage: `uri`, and every object in it."""

    def __init__(self, uri: str, s3: LocalS3 | None = None) -> None:
        self.uri, self.s3 = uri, s3
        self.path = None if s3 is not None else Path(uri.removeprefix("file://"))

    def objects(self, under: str = "") -> set[str]:
        """The URIs of the objects (files; on S3 marker objects too) under `under` (a URI in
        the warehouse, or a path relative to it), read from the storage itself: the S3
        server's folder, or the local one."""
        root = under if "://" in under else f"{self.uri}/{under}".rstrip("/")
        if self.s3 is None:
            folder = Path(root.removeprefix("file://"))
            found = folder.rglob("*") if folder.is_dir() else []
            return {p.as_uri() for p in found if p.is_file()}
        bucket, _, prefix = root.split("://", 1)[1].partition("/")
        return {f"s3://{bucket}/{key}" for key in self.s3.objects(prefix + "/", bucket=bucket)}

    def client_properties(self) -> dict[str, str]:
        """What a pyiceberg catalog of the warehouse is given besides its URI (its keys come
        from the environment)."""
        if self.s3 is None:
            return {}
        return {
            "s3.endpoint": self.s3.endpoint,
            "s3.region": REGION,
            "s3.path-style-access": "true",
        }


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

"""The jobs on a real Spark standalone cluster and a real Iceberg catalog service.

A master and two workers of one core each on loopback (tests/spark/standalone.py); the ingest
job and the compactor submitted with `spark-submit --master spark://127.0.0.1:<port>` in client
mode, exactly as docs/spark-submit.md gives the standalone recipe; one table in Iceberg's
JdbcCatalog on the MariaDB server of LAKELOCK_TEST_MARIADB_URL (a database of this run's own,
dropped after; skipped without it), with Debian's JDBC driver. pyiceberg's SQL catalog reads the
same catalog tables, independently of Spark, for every check.

The steps build on each other, in order (one cluster, one table, one lakelock service):

    ingest     three landing files, three micro-batches: rows = keys with their latest values
    revoke     a scheduled compactor's run whose rewrite is running on the executors loses its
               lease to an operator's revoke: its Spark jobs end cancelled, nothing is committed
    compact    its next tick compacts: fewer data files, the same rows, the token in the summary
    audit      `lakelock audit` through the catalog finds every commit inside its lease

Whatever the executors run comes with the submit: the workers have Spark's own jars and a
Python with nothing of lakelock (the one this virtualenv was made from); the Iceberg runtime
arrives through --jars and the ingest job's decoder through --py-files (both checked in the
executors' work folders).

`compactor plan` submits as `compactor run` does and plans as its first step; the command itself
is tested on local Spark (tests/spark/test_compactor_run.py), and a submit of its own here, a
driver more, would add half a minute and nothing the runs do not show.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, date, datetime
from pathlib import Path
from typing import Any

import httpx
import pytest

from demo.generate import KEY_FIELDS, EventGenerator
from lakelock_submit import jars as iceberg_jars
from lakelock_submit import py_files as executor_zip
from lakelock_submit import script
from service.client import LeaseClient
from testkit import free_port
from tests.spark.standalone import StandaloneCluster, spark_home

pytestmark = [pytest.mark.spark, pytest.mark.slow, pytest.mark.timeout(1200)]

MARIADB_URL = os.environ.get("LAKELOCK_TEST_MARIADB_URL")
MARIADB_JAR = Path("/usr/share/java/mariadb-java-client.jar")
TABLE = "lake.db.events"
FILES, PER_FILE = 3, 60
WAIT_S = 300  # bound on anything below; the steps go by counts and states, not by time
# the Python this virtualenv was made from, without the virtualenv: the workers' Python
BARE_PYTHON = Path(sys.base_prefix, "bin", "python{}.{}".format(*sys.version_info[:2]))


# -- the catalog -------------------------------------------------------------------------------


@dataclass(frozen=True)
class Catalog:
    """One Iceberg JdbcCatalog, as the jobs (Spark, Java) and as pyiceberg name it."""

    jar: Path
    spark_properties: dict[str, str]
    pyiceberg_properties: dict[str, str]
    warehouse: str

    def toml(self) -> str:
        """The jobs' `[catalog]` table."""
        properties = "\n".join(
            f"{json.dumps(k)} = {json.dumps(v)}" for k, v in self.spark_properties.items()
        )
        return (
            f'[catalog]\nname = "lake"\ntype = "jdbc"\nwarehouse = {json.dumps(self.warehouse)}\n'
            f"[catalog.properties]\n{properties}\n"
        )

    def table(self) -> Any:
        from service.ops.iceberg_audit import load_catalog_table

        return load_catalog_table(TABLE, properties=self.pyiceberg_properties)


def _require(jar: Path, package: str) -> None:
    if not jar.is_file():
        message = f"{jar} is missing: apt-get install {package} (.ci/run does)"
        if os.environ.get("LAKELOCK_REQUIRE_MARIADB"):
            pytest.fail(message)
        pytest.skip(message)


@pytest.fixture(scope="module")
def catalog(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Catalog]:
    warehouse = tmp_path_factory.mktemp("warehouse").as_uri()
    if not MARIADB_URL:
        # a SQLite JdbcCatalog refused the ingest job's commits (SQLITE_BUSY), see catalogs.md
        pytest.skip(
            "the cluster's catalog is a JdbcCatalog on MariaDB: set LAKELOCK_TEST_MARIADB_URL"
        )
    _require(MARIADB_JAR, "libmariadb-java")
    from sqlalchemy import create_engine, text
    from sqlalchemy.engine import make_url

    name = f"lakelock_test_catalog_{uuid.uuid4().hex[:8]}"
    server = make_url(MARIADB_URL)
    admin = create_engine(MARIADB_URL)
    with admin.begin() as conn:
        conn.execute(text(f"CREATE DATABASE {name}"))
    try:
        yield Catalog(
            MARIADB_JAR,
            {
                "uri": f"jdbc:mariadb://{server.host}:{server.port or 3306}/{name}",
                "jdbc.user": server.username or "root",
                "jdbc.password": server.password or "",
            },
            {
                "type": "sql",
                "uri": server.set(database=name).render_as_string(hide_password=False),
                "warehouse": warehouse,
            },
            warehouse,
        )
    finally:
        with admin.begin() as conn:
            conn.execute(text(f"DROP DATABASE IF EXISTS {name}"))
        admin.dispose()


# -- the cluster and the submits -------------------------------------------------------------


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[StandaloneCluster]:
    started = StandaloneCluster.start(tmp_path_factory.mktemp("cluster"), workers=2, cores=1)
    yield started
    started.stop()


@dataclass
class Submitter:
    cluster: StandaloneCluster
    catalog: Catalog
    service_url: str
    token: str
    workdir: Path

    @property
    def events_dir(self) -> Path:
        return self.workdir / "events"

    def args(
        self, job: str | Path, *job_args: str, py_files: bool = True, **conf: str
    ) -> list[str]:
        """The standalone recipe of docs/spark-submit.md, sized for this machine; `job` is a
        lakelock job or a script of one's own. `py_files=False` leaves out --py-files, which
        the ingest job then adds itself."""
        settings = {
            "spark.driver.host": "127.0.0.1",
            "spark.executor.memory": "512m",
            "spark.eventLog.enabled": "true",
            "spark.eventLog.dir": self.events_dir.as_uri(),
            # the executors' Python has nothing of lakelock installed: the ingest job's decoder
            # reaches them through --py-files, as docs/spark-submit.md gives it
            "spark.pyspark.python": str(BARE_PYTHON),
            "spark.pyspark.driver.python": sys.executable,
            **conf,
        }
        jar_list = ",".join(str(jar) for jar in [*iceberg_jars(), self.catalog.jar])
        return [
            "--driver-memory",
            "512m",
            *[part for key, value in settings.items() for part in ("--conf", f"{key}={value}")],
            "--jars",
            jar_list,
            *(["--py-files", str(executor_zip(self.workdir))] if py_files else []),
            str(job if isinstance(job, Path) else script(job)),
            *job_args,
        ]

    def env(self) -> dict[str, str]:
        env = {k: v for k, v in os.environ.items() if not k.startswith(("LAKELOCK_", "PYSPARK"))}
        # the job token reaches the client-mode driver through spark-submit's environment
        return {
            **env,
            "LAKELOCK_TOKEN": self.token,
            "SPARK_HOME": str(spark_home()),
            "SPARK_LOCAL_IP": "127.0.0.1",
        }

    def run(
        self, job: str | Path, *job_args: str, py_files: bool = True, master: str | None = None
    ) -> subprocess.CompletedProcess:
        """The job submitted to the cluster, or to `master` (`local[1]`: a driver alone, no
        executors started on the workers, for a job without tasks such as DDL)."""
        self.events_dir.mkdir(exist_ok=True)
        args = self.args(job, *job_args, py_files=py_files)
        return self.cluster.submit(args, env=self.env(), master=master)

    def start(self, job: str, *job_args: str, **conf: str) -> subprocess.Popen:
        self.events_dir.mkdir(exist_ok=True)
        log = (self.workdir / f"{job}-{uuid.uuid4().hex[:6]}.log").open("w")
        process = subprocess.Popen(
            self.cluster.submit_command(self.args(job, *job_args, **conf)),
            env=self.env(),
            cwd=self.workdir,
            stdout=log,
            stderr=subprocess.STDOUT,
            text=True,
        )
        process.log_path = Path(log.name)  # type: ignore[attr-defined]
        log.close()
        return process


@pytest.fixture(scope="module")
def submitter(cluster, catalog, lakelock_server, tmp_path_factory) -> Submitter:
    return Submitter(
        cluster,
        catalog,
        lakelock_server.url,
        lakelock_server.token("job"),
        tmp_path_factory.mktemp("submits"),
    )


def _compactor_config(submitter: Submitter, *, ttl: str = "30s") -> str:
    path = submitter.workdir / f"compactor-{ttl}.toml"
    path.write_text(
        f"[service]\nurl = {json.dumps(submitter.service_url)}\n"
        + submitter.catalog.toml()
        + f'[defaults.lease]\nttl = "{ttl}"\nmax_wait = "5m"\n'
        # a live commit lease makes its partitions hot: they are rewritten when due
        + "[defaults.plan]\nmin_small_files = 2\nmin_delete_files = 1\n"
        + "trigger_small_files = 2\ntrigger_delete_files = 1\n"
        + "stop_small_files = 200\nstop_delete_files = 200\n"
        + '[defaults.rewrite_data_files]\noptions = { "min-input-files" = 2 }\n'
        + f'[[tables]]\nname = "{TABLE}"\n'
    )
    return str(path)


def _output(done: subprocess.CompletedProcess | subprocess.Popen) -> str:
    if isinstance(done, subprocess.Popen):
        return done.log_path.read_text()[-6000:]  # type: ignore[attr-defined]
    return (done.stdout + done.stderr)[-6000:]


# -- reading what happened, independently of the jobs ------------------------------------------


def _rows(catalog: Catalog) -> list[dict[str, Any]]:
    """The table's rows through pyiceberg, shaped as the generator wrote them."""
    rows = []
    for row in catalog.table().scan().to_arrow().to_pylist():
        for key, value in row.items():
            if isinstance(value, datetime):
                row[key] = value.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")
            elif isinstance(value, date):
                row[key] = value.isoformat()
        rows.append(row)
    return sorted(rows, key=lambda r: (r["event_id"], r["dt"], r["hr"]))


def _files(catalog: Catalog) -> tuple[int, int]:
    """(data files, delete files) in the table's current snapshot."""
    table = catalog.table()
    data = deletes = 0
    for task in table.scan().plan_files():
        data += 1
        deletes += len(task.delete_files)
    return data, deletes


def _events(submitter: Submitter, app_prefix: str = "app-") -> dict[str, list[dict[str, Any]]]:
    """Spark's event logs of this module's applications, by application id."""
    logs = {}
    for path in sorted(submitter.events_dir.glob(f"{app_prefix}*")):
        name = path.name.removesuffix(".inprogress")
        logs[name] = [json.loads(line) for line in path.read_text().splitlines() if line]
    return logs


def _wait(what: str, check, timeout_s: float = WAIT_S, process=None):
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        found = check()
        if found:
            return found
        if process is not None and process.poll() is not None:
            raise AssertionError(f"the job ended before {what}:\n{_output(process)}")
        time.sleep(0.2)
    raise AssertionError(f"no {what} within {timeout_s:g}s")


CREATE_TABLE = """
import sys

from ingest_gate.job.config import config_from_args
from demo.generate import create_events_table
from jobkit.spark import build_session

config = config_from_args(sys.argv[1:])
create_events_table(build_session(config.catalog, master=None), config.table)
"""


# -- the steps -------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def ingested(submitter: Submitter) -> EventGenerator:
    landing = submitter.workdir / "landing"
    gen = EventGenerator(seed=19, update_ratio=0.3, duplicate_ratio=0.1)
    for _ in range(FILES):
        gen.write_file(landing, PER_FILE)
    config = submitter.workdir / "ingest.toml"
    config.write_text(
        f"table = {json.dumps(TABLE)}\n"
        f"landing_path = {json.dumps(str(landing))}\n"
        f"dead_letter_path = {json.dumps(str(submitter.workdir / 'dead-letter'))}\n"
        f"checkpoint_path = {json.dumps(str(submitter.workdir / 'checkpoint'))}\n"
        "max_files_per_trigger = 1\ntrigger_interval_s = 1.0\navailable_now = true\n"
        f"lakelock_url = {json.dumps(submitter.service_url)}\n"
        'holder = "ingest@cluster-test"\nlease_ttl_s = 30.0\npoll_s = 1.0\n'
        f"key_columns = {json.dumps(list(KEY_FIELDS))}\n" + submitter.catalog.toml()
    )
    # the table first, as its owner would create it: a job of one's own, same catalog, on
    # local Spark (DDL runs no task: executors on the workers would only start and stop)
    create = submitter.workdir / "create_table.py"
    create.write_text(CREATE_TABLE)
    done = submitter.run(create, "--config", str(config), master="local[1]")
    assert done.returncode == 0, _output(done)
    # without --py-files: the job ships its executors' Python itself
    done = submitter.run("ingest", "--config", str(config), py_files=False)
    assert done.returncode == 0, _output(done)
    return gen


def test_ingest_on_the_cluster_upserts_every_key_with_its_latest_values(
    ingested, submitter, catalog
):
    assert _rows(catalog) == ingested.expected_rows()
    summaries = [s.summary for s in catalog.table().snapshots()]
    merged = [s for s in summaries if s and "lakelock.lease-id" in s.additional_properties]
    assert len(merged) == FILES  # one gated MERGE per landing file
    # the Iceberg runtime (through the submit) and the decoder (added by the job, as the submit
    # had no --py-files) reached every executor, not through the workers, whose Python cannot
    # import lakelock
    work = submitter.cluster.workdir / "work"
    for shipped in ("iceberg-spark-runtime*.jar", "lakelock-executors-*.zip"):
        fetched = {path.parent for path in work.glob(f"app-*/*/{shipped}")}
        assert len(fetched) >= 2, f"both executors fetched {shipped}"
    bare = subprocess.run([BARE_PYTHON, "-c", "import ingest_gate"], cwd=work, capture_output=True)
    assert bare.returncode != 0, "the workers' Python has lakelock installed"


def _running_rewrite(ui: str) -> dict[str, Any] | None:
    """A running job of the compactor's rewrite with tasks on the executors, seen from the
    driver's REST API."""
    try:
        (app,) = httpx.get(f"{ui}/api/v1/applications", timeout=5).json()
        jobs = httpx.get(
            f"{ui}/api/v1/applications/{app['id']}/jobs", params={"status": "running"}, timeout=5
        ).json()
    except (httpx.TransportError, ValueError):
        return None
    for job in jobs:
        tags = job.get("jobTags") or []
        if any(t.startswith("lakelock-compactor-") for t in tags) and job["numActiveTasks"]:
            return {**job, "app_id": app["id"]}
    return None


@pytest.fixture(scope="module")
def ticks(ingested, submitter, catalog, operator, lakelock_server) -> dict[str, Any]:
    """One scheduled compactor on the cluster (`run --every 5s --ticks 2`), as a user runs it:
    its first run drains a writer's commit lease, gets its own and starts the rewrite on the
    executors, which the test then stops where they are (SIGSTOP) and an operator revokes the
    lease; the second tick compacts. The table before, what the driver's REST API showed of the
    cancelled job, and the runs the service recorded."""
    before = {"files": _files(catalog), "rows": _rows(catalog)}
    # hold a commit lease, as a writer would: the compactor plans, then drains on it
    writer = LeaseClient(lakelock_server.url, token=lakelock_server.token("job"))
    held = writer.acquire_commit(TABLE, holder="writer@cluster-test", ttl_s=120)
    ui_port = str(free_port())
    compactor = submitter.start(
        "compactor",
        *("run", "--every", "5s", "--ticks", "2"),
        *("--config", _compactor_config(submitter, ttl="6s")),
        **{"spark.ui.enabled": "true", "spark.ui.port": ui_port},
    )
    try:
        _wait(
            "intent of the draining compactor",
            lambda: operator.state(TABLE).get("intents"),
            process=compactor,
        )
        # the executors stop where they are: the rewrite's tasks, sent to them once the lease is
        # granted, stay running for as long as the test needs (a slow rewrite, made certain)
        (app,) = httpx.get(f"http://127.0.0.1:{ui_port}/api/v1/applications", timeout=5).json()
        executors = submitter.cluster.executors(app["id"])
        assert len(executors) == 2, executors
        submitter.cluster.signal_executors(executors, signal.SIGSTOP)
        try:
            writer.release(held)
            job = _wait(
                "running rewrite job",
                lambda: _running_rewrite(f"http://127.0.0.1:{ui_port}"),
                process=compactor,
            )
            (lease,) = operator.state(TABLE)["maintenance_leases"]
            operator.revoke(lease["lease_id"], reason="cluster test: host lost")
            app_log = submitter.events_dir / f"{job['app_id']}.inprogress"
            _wait(
                "end of the cancelled job",
                lambda: any(
                    e["Event"] == "SparkListenerJobEnd" and e["Job ID"] == job["jobId"]
                    for e in _log_lines(app_log)
                ),
                process=compactor,
            )
        finally:
            submitter.cluster.signal_executors(executors, signal.SIGCONT)
        compactor.wait(WAIT_S)
    finally:
        if compactor.poll() is None:
            compactor.kill()
        writer.close()
    output = _output(compactor)
    assert compactor.returncode == 0, output  # the scheduled mode goes on after a failed run
    reports = list(reversed(operator.runs(TABLE, limit=10)))  # oldest first
    return {
        "before": before,
        "job": job,
        "revoked": lease["lease_id"],
        "log": compactor.log_path.read_text(),  # type: ignore[attr-defined]
        "runs": [r["outcome"] for r in reports],
        "compacted": reports[-1],
        "files": _files(catalog),
        "rows": _rows(catalog),
    }


def test_a_revoked_lease_cancels_the_rewrite_running_on_the_executors(ticks, submitter, catalog):
    assert ticks["runs"][0] == "lease_lost", ticks["runs"]
    job = ticks["job"]
    log = _events(submitter)[job["app_id"]]
    # the jobs of the first run (tagged with its run: the second run's have a tag of their own)
    (run_tag,) = [t for t in job["jobTags"] if t.startswith("lakelock-compactor-")]
    cancelled = {
        e["Job ID"]
        for e in log
        if e["Event"] == "SparkListenerJobStart"
        and run_tag in (e.get("Properties") or {}).get("spark.job.tags", "").split(",")
    }
    assert job["jobId"] in cancelled
    ends = {e["Job ID"]: e["Job Result"] for e in log if e["Event"] == "SparkListenerJobEnd"}
    for job_id in cancelled:
        result = ends[job_id]
        assert result["Result"] == "JobFailed", result
        assert "cancel" in result["Exception"]["Message"].lower(), result
    stages = {
        stage["Stage ID"]
        for e in log
        if e["Event"] == "SparkListenerJobStart" and e["Job ID"] in cancelled
        for stage in e["Stage Infos"]
    }
    # its tasks had been sent to the cluster's executors when the cancel came
    started = [e for e in log if e["Event"] == "SparkListenerTaskStart" and e["Stage ID"] in stages]
    assert started and {e["Task Info"]["Executor ID"] for e in started} - {"driver"}
    assert "lease lost" in ticks["log"] and "cancelling Spark jobs" in ticks["log"]
    # nothing committed under the revoked lease
    summaries = [s.summary for s in catalog.table().snapshots()]
    leases = {s.additional_properties.get("lakelock.lease-id") for s in summaries if s}
    assert ticks["revoked"] not in leases


def _log_lines(path: Path) -> list[dict[str, Any]]:
    if not path.exists():
        path = path.with_suffix("")
    if not path.exists():
        return []
    lines = path.read_text().splitlines()
    out = []
    for line in lines:
        try:
            out.append(json.loads(line))
        except ValueError:
            break  # a line still being written
    return out


def test_the_next_tick_compacts_under_its_lease(ticks, ingested, catalog):
    assert ticks["runs"] == ["lease_lost", "compacted"], ticks["runs"]
    assert ticks["compacted"]["outcome"] == "compacted", ticks["compacted"]
    (data_before, _), (data_after, deletes_after) = ticks["before"]["files"], ticks["files"]
    assert data_after < data_before and deletes_after == 0
    assert ticks["rows"] == ticks["before"]["rows"] == ingested.expected_rows()
    summary = catalog.table().current_snapshot().summary.additional_properties
    assert "lakelock.token" in summary and "lakelock.lease-id" in summary
    assert summary["lakelock.lease-id"] != ticks["revoked"]


def test_lakelock_audit_reads_the_table_through_its_catalog(ticks, catalog, lakelock_server):
    properties = [
        part
        for key, value in catalog.pyiceberg_properties.items()
        for part in ("-p", f"{key}={value}")
    ]
    done = subprocess.run(
        [sys.executable, "-m", "service.ops.cli", "audit", TABLE, *properties, "--json"],
        env={
            **os.environ,
            "LAKELOCK_URL": lakelock_server.url,
            "LAKELOCK_TOKEN": lakelock_server.token("reader"),
        },
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    report = json.loads(done.stdout)
    assert report["verdict"] == "clean", report
    assert report["ingest_commits"] == FILES and report["maintenance_commits"] >= 1


def test_a_submit_without_the_iceberg_runtime_stops_with_one_line(submitter):
    config = submitter.workdir / "no-jars.toml"
    config.write_text('table = "local.db.events"\n')
    spark_submit = str(spark_home() / "bin" / "spark-submit")
    done = subprocess.run(
        [
            spark_submit,
            "--master",
            "local[1]",
            "--conf",
            f"spark.pyspark.driver.python={sys.executable}",
            str(script("ingest")),
            "--config",
            str(config),
        ],
        env=submitter.env(),
        cwd=submitter.workdir,
        capture_output=True,
        text=True,
        timeout=WAIT_S,
    )
    assert done.returncode == 2, _output(done)
    # spark-submit hands the Python driver's stderr on through its own stdout
    printed = (done.stdout + done.stderr).splitlines()
    (line,) = [line for line in printed if line.startswith("lakelock-ingest:")]
    assert "Iceberg Spark runtime is not on the driver's classpath" in line
    assert not any(line.startswith("Traceback") for line in printed)

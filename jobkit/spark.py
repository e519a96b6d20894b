"""The one place a Spark session with the Iceberg runtime and a catalog is built.

Both jobs call `build_session(CatalogConfig(...))`, started in one of two ways:

    python -m ingest_gate ...     Python starts Spark itself: the job's master (default
                                  local[*]) and Iceberg's Spark runtime (`iceberg_runtime`:
                                  1.11.0 through jobkit.maven, or 1.9.2 from the `spark`
                                  extra's wheel), or `jars_packages`
    spark-submit <entry script>   spark-submit started the driver: its --master, --jars,
                                  --packages and --conf win; the job adds its catalog and fills
                                  in only the settings the submit left out. The Iceberg runtime
                                  must come with the submit (--jars or --packages), since the
                                  driver's classpath is fixed by then; a missing one is a
                                  one-line error, not a failure at the first MERGE.

Catalogs (docs/catalogs.md has the properties of each):

    CatalogConfig()                                         # Hadoop catalog in ./var/warehouse
    CatalogConfig(name="lake", type="jdbc", warehouse="s3://bucket/wh",
                  properties={"uri": "jdbc:mariadb://db:3306/iceberg", "jdbc.user": "iceberg"})
    CatalogConfig(name="glue", type="glue", warehouse="s3://bucket/wh",
                  properties={"io-impl": "org.apache.iceberg.aws.s3.S3FileIO"})
    CatalogConfig(type="rest", properties={"uri": "https://catalog.example/api"})
"""

from __future__ import annotations

import logging
import os
import threading
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from jobkit.executors import ZIP_PREFIX, py_files, python_for_local_workers

if TYPE_CHECKING:
    from pyspark import SparkContext
    from pyspark.sql import SparkSession

__all__ = [
    "CatalogConfig",
    "ConnectorMissing",
    "IcebergMissing",
    "SparkJobGroups",
    "build_session",
    "bundled_iceberg_jar",
    "catalog_place",
    "error_message",
    "fenced_table",
    "iceberg_runtime",
    "load_table",
    "on_s3",
    "rest_catalog",
    "s3_conf",
    "submitted_conf",
]

log = logging.getLogger(__name__)

ICEBERG_EXTENSIONS = "org.apache.iceberg.spark.extensions.IcebergSparkSessionExtensions"

_CATALOG_TYPES = {
    # catalog type -> the properties Spark's SparkCatalog needs to pick the implementation
    "hadoop": {"type": "hadoop"},
    "hive": {"type": "hive"},
    "rest": {"type": "rest"},
    "glue": {"catalog-impl": "org.apache.iceberg.aws.glue.GlueCatalog"},
    "jdbc": {"catalog-impl": "org.apache.iceberg.jdbc.JdbcCatalog"},
}


@dataclass(frozen=True)
class CatalogConfig:
    """Which Iceberg catalog the jobs write through."""

    name: str = "local"
    type: str = "hadoop"
    warehouse: str = "var/warehouse"
    properties: dict[str, str] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.type not in _CATALOG_TYPES:
            raise ValueError(f"catalog type {self.type!r} is not one of {sorted(_CATALOG_TYPES)}")
        if not self.name.isidentifier():
            raise ValueError(f"catalog name {self.name!r} must be an identifier")

    @property
    def on_s3(self) -> bool:
        """Whether the tables are on S3: the warehouse is an `s3://` (`s3a://`, `s3n://`) URI,
        or a catalog property configures S3 access (`s3.endpoint`, ...: how a REST catalog's
        jobs say so, whose warehouse the catalog keeps)."""
        return on_s3(self.warehouse) or any(k.startswith("s3.") for k in self.properties)

    def spark_conf(self) -> dict[str, str]:
        prefix = f"spark.sql.catalog.{self.name}"
        warehouse = self.warehouse
        if "://" not in warehouse:
            warehouse = Path(warehouse).resolve().as_uri()
        conf = {prefix: "org.apache.iceberg.spark.SparkCatalog", f"{prefix}.warehouse": warehouse}
        conf.update({f"{prefix}.{k}": v for k, v in _CATALOG_TYPES[self.type].items()})
        if self.on_s3 and self.type == "jdbc":
            # a JdbcCatalog's files go through Hadoop's FileIO unless told: S3's own, per scheme
            conf[f"{prefix}.io-impl"] = "org.apache.iceberg.io.ResolvingFileIO"
        # Another application (the compactor, the ingest job) commits to the same tables. A cached
        # table would make a MERGE plan against a stale snapshot and fail Iceberg's validation
        # ("missing data files") although the lease kept the writers apart; load it fresh instead.
        conf[f"{prefix}.cache-enabled"] = "false"
        conf.update({f"{prefix}.{k}": v for k, v in self.properties.items()})
        return conf


S3_SCHEMES = ("s3", "s3a", "s3n")


def on_s3(uri: str | None) -> bool:
    """Whether `uri` names an object in S3 (any of its schemes)."""
    return bool(uri) and str(uri).split("://", 1)[0].lower() in S3_SCHEMES and "://" in str(uri)


def s3_conf(catalog: CatalogConfig) -> dict[str, str]:
    """Hadoop's S3 file system (`s3a`, and `s3://` through it) for what Spark itself reads and
    writes on S3 (a streaming query's checkpoints, a landing folder, `remove_orphan_files`'s
    listing of a table's folder), set from the catalog's own S3 properties so that one
    configuration serves both: `s3.endpoint`, `s3.path-style-access`, `client.region`. Keys
    come from the AWS chain (environment, instance or task role), never from here."""
    properties = catalog.properties
    conf = {"spark.hadoop.fs.s3.impl": "org.apache.hadoop.fs.s3a.S3AFileSystem"}
    endpoint = properties.get("s3.endpoint")
    if endpoint:
        conf["spark.hadoop.fs.s3a.endpoint"] = endpoint
        conf["spark.hadoop.fs.s3a.connection.ssl.enabled"] = str(
            endpoint.startswith("https://")
        ).lower()
    if "s3.path-style-access" in properties:
        conf["spark.hadoop.fs.s3a.path.style.access"] = properties["s3.path-style-access"]
    region = properties.get("client.region") or properties.get("s3.region")
    if region:
        conf["spark.hadoop.fs.s3a.endpoint.region"] = region
    return conf


def iceberg_runtime() -> list[Path]:
    """Iceberg's Spark runtime jar of the jobs' Iceberg (jobkit.maven.iceberg_version): 1.9.2's
    from the `spark` extra's wheel (no Maven needed), any other's fetched with Maven.

    Raises:
        IcebergMissing: LAKELOCK_ICEBERG_VERSION names a version lakelock does not run on.
        jobkit.maven.MavenMissing: the jar is not cached and Maven cannot fetch it.
    """
    from jobkit.maven import iceberg_version, jars

    try:
        version = iceberg_version()
    except ValueError as exc:
        raise IcebergMissing(str(exc)) from exc
    if version == "1.9.2":
        return [bundled_iceberg_jar()]
    return jars("spark-iceberg")


def bundled_iceberg_jar() -> Path:
    """Iceberg 1.9.2's Spark runtime jar, shipped by the `spark` extra's wheel."""
    import snowpark_connect_deps_iceberg

    jars = Path(snowpark_connect_deps_iceberg.__file__).parent / "jars"
    jar = jars / "iceberg-spark-runtime-3.5_2.12-1.9.2.jar"
    if not jar.exists():
        raise RuntimeError(
            f"{jar} is missing: install the spark extra (snowpark-connect-deps-iceberg==1.0.1)"
        )
    return jar


def submitted_conf() -> dict[str, str] | None:
    """The Spark conf that spark-submit started this driver with (its --master, --jars, --conf
    ...), or None when no spark-submit started it and Python starts Spark itself.

    spark-submit hands a Python driver the port of its running JVM in PYSPARK_GATEWAY_PORT;
    pyspark connects to it instead of launching one, and the JVM's system properties hold the
    submitted conf.
    """
    if "PYSPARK_GATEWAY_PORT" not in os.environ:
        return None
    from pyspark import SparkConf, SparkContext

    SparkContext._ensure_initialized()
    return dict(SparkConf().getAll())


class ConnectorMissing(RuntimeError):
    """A jar the job needs is not on the driver's classpath: pass it to spark-submit."""


class IcebergMissing(ConnectorMissing):
    """The Iceberg Spark runtime is not on the driver's classpath: pass it to spark-submit."""


def _on_driver(class_name: str) -> bool:
    from py4j.protocol import Py4JJavaError
    from pyspark import SparkContext

    try:
        # the driver's context class loader holds what spark-submit's --jars/--packages added
        SparkContext._jvm.org.apache.spark.util.Utils.classForName(  # type: ignore[union-attr]
            class_name, False, False
        )
    except Py4JJavaError:
        return False
    return True


def _check_iceberg_on_driver() -> None:
    from jobkit.maven import spark_packages

    if not _on_driver("org.apache.iceberg.spark.SparkCatalog"):
        raise IcebergMissing(
            "the Iceberg Spark runtime is not on the driver's classpath: pass it to spark-submit "
            '(--jars "$(python -m lakelock_submit jars)", or --packages '
            f"{spark_packages('spark-iceberg')}); see docs/spark-submit.md"
        )


def _check_sets_on_driver(jar_sets: Sequence[str], *, running_jvm: bool = False) -> None:
    """Each set's probe class must be on the driver's classpath. Under spark-submit the submit
    brings it; in a Python process whose Spark JVM an earlier session started (`running_jvm`),
    that first session fixed the driver's classpath: a later session's `spark.jars` reach the
    executors, not the driver."""
    from jobkit.maven import jar_set, spark_packages

    for name in jar_sets:
        probe = jar_set(name).probe_class
        if probe is None or _on_driver(probe):
            continue
        if running_jvm:
            how = (
                "this process's Spark JVM was started by an earlier session without it. Build "
                f'the first session of the process with jar_sets=("{name}",) (or '
                f"spark.jars.packages={spark_packages(name)})"
            )
        else:
            how = (
                f"pass it to spark-submit (--packages {spark_packages(name)}, the version of the "
                "cluster's Spark); see docs/spark-submit.md"
            )
        raise ConnectorMissing(f"{probe} is not on the driver's classpath: {how}")


def build_session(
    catalog: CatalogConfig,
    *,
    app_name: str = "lakelock",
    master: str | None = "local[*]",
    jars_packages: str | None = None,
    extra_conf: dict[str, str] | None = None,
    executor_packages: Sequence[str] = (),
    jar_sets: Sequence[str] = (),
    paths: Sequence[str] = (),
) -> SparkSession:
    """A SparkSession with Iceberg's SQL extensions and `catalog` registered.

    On S3 (the catalog's tables, or any of `paths`: checkpoints, landing folders), the
    `spark-s3` jars (Iceberg's S3FileIO, Hadoop's s3a) come too, and `s3_conf` when Python
    starts the driver.

    Started by Python: `master` (None leaves it to Spark's defaults) and `iceberg_runtime()`
    or `jars_packages`. Under spark-submit (see the module docstring): the submit's master,
    jars and conf, with the catalog and the defaults below added where the submit set nothing.
    `extra_conf` wins over everything here.

    Python on the executors (jobkit.executors): a local master's workers run this interpreter;
    elsewhere `executor_packages` (the packages the job's Python functions import) go to the
    executors as a zip, unless the submit already carried it (`--py-files`).

    `jar_sets` names further jars (jobkit.maven.sets, e.g. "spark-kafka"): fetched with Maven
    into a cache and added when Python starts the driver (as packages with `jars_packages`);
    under spark-submit they must come with the submit.

    Raises:
        IcebergMissing: under spark-submit, the Iceberg runtime was not submitted with the job.
        ConnectorMissing: under spark-submit, a jar set was not submitted with the job.
        jobkit.maven.MavenMissing: a jar set is not cached and Maven cannot fetch it.
    """
    from pyspark import SparkContext
    from pyspark.sql import SparkSession

    jvm_running = SparkContext._gateway is not None
    submitted = submitted_conf()
    s3 = catalog.on_s3 or any(on_s3(path) for path in paths)
    if s3 and "spark-s3" not in jar_sets:
        jar_sets = (*jar_sets, "spark-s3")
    if submitted is not None:
        _check_iceberg_on_driver()
        _check_sets_on_driver(jar_sets)
        if master and master != submitted.get("spark.master"):
            log.info(
                "spark master %s (from spark-submit; not %s)", submitted.get("spark.master"), master
            )
        master = None
    builder = SparkSession.builder.appName(app_name)
    if master:
        builder = builder.master(master)
    conf = _defaults(submitted, jars_packages=jars_packages, jar_sets=jar_sets)
    if s3 and submitted is None:
        # under spark-submit the cluster's Hadoop settings stand (EMR's s3:// is EMRFS)
        conf.update(s3_conf(catalog))
    conf.update(catalog.spark_conf())
    conf.update(extra_conf or {})
    ship = bool(executor_packages) and not _carries_executor_zip(submitted or conf)
    if master and master.startswith("local"):
        # a local driver talks to itself: bind loopback, not whatever the hostname resolves to
        os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
        python_for_local_workers()
        ship = False
    for key, value in conf.items():
        builder = builder.config(key, value)
    spark = builder.getOrCreate()
    if submitted is None and jvm_running and jar_sets:
        _check_sets_on_driver(jar_sets, running_jvm=True)
    if ship:
        zipped = py_files(executor_packages)
        log.info("executors get %s (%s)", zipped.name, ", ".join(executor_packages))
        spark.sparkContext.addPyFile(str(zipped))
    return spark


def _carries_executor_zip(conf: dict[str, str]) -> bool:
    return ZIP_PREFIX in conf.get("spark.submit.pyFiles", "")


def _defaults(
    submitted: dict[str, str] | None,
    *,
    jars_packages: str | None,
    jar_sets: Sequence[str] = (),
) -> dict[str, str]:
    """The conf lakelock sets unless spark-submit set it: Iceberg's SQL extensions (added to
    the submitted ones), UTC, few shuffle partitions, no UI; and the Iceberg jar when Python
    starts the driver."""
    defaults = {
        "spark.sql.extensions": ICEBERG_EXTENSIONS,
        "spark.sql.session.timeZone": "UTC",
        # small local runs: a handful of shuffle partitions, not 200 tiny tasks per MERGE
        "spark.sql.shuffle.partitions": os.environ.get("LAKELOCK_SHUFFLE_PARTITIONS", "4"),
        "spark.ui.enabled": "false",
        # the console progress bar garbles the jobs' one-line JSON logs on stderr
        "spark.ui.showConsoleProgress": "false",
    }
    if submitted is None:
        # the driver JVM is started with these; under spark-submit it runs already
        defaults["spark.driver.extraJavaOptions"] = "-Duser.timezone=UTC"
        from jobkit.maven import jars, spark_packages

        if jars_packages:
            defaults["spark.jars.packages"] = ",".join(
                [jars_packages, *(spark_packages(name) for name in jar_sets)]
            )
        else:
            # the runtime first: a bad LAKELOCK_ICEBERG_VERSION is its IcebergMissing
            runtime = iceberg_runtime()
            fetched = [jar for name in jar_sets for jar in jars(name)]
            defaults["spark.jars"] = ",".join(str(jar) for jar in runtime + fetched)
    conf = {k: v for k, v in defaults.items() if submitted is None or k not in submitted}
    if submitted is not None and "spark.sql.extensions" in submitted:
        extensions = submitted["spark.sql.extensions"].split(",")
        if ICEBERG_EXTENSIONS not in extensions:
            conf["spark.sql.extensions"] = ",".join([*extensions, ICEBERG_EXTENSIONS])
    return conf


class SparkJobGroups:
    """Runs Spark work in a cancellable job group and tag (the gate's MERGE, the
    compactor's steps; the `job_groups` of `Gate`).

        groups = SparkJobGroups(spark.sparkContext)
        groups.set("lakelock-commit-<lease>")    # in the thread that runs the MERGE
        groups.cancel("lakelock-commit-<lease>") # from any thread: running jobs are interrupted
        groups.clear()                           # back to the group that was set before

    Job groups are thread-local properties of the JVM thread. A streaming query sets its own group
    (its run id) on its thread, and `query.stop()` cancels that group, so `clear()` restores the
    previous group instead of wiping it.
    """

    _KEYS = (
        "spark.jobGroup.id",
        "spark.job.description",
        "spark.job.interruptOnCancel",
        "spark.job.tags",
    )

    def __init__(self, sc: SparkContext) -> None:
        self._sc = sc
        self._saved = threading.local()

    def set(self, group: str, description: str | None = None) -> None:
        """Put this thread's next Spark jobs into `group`, interruptible on cancel."""
        self._saved.props = {key: self._sc.getLocalProperty(key) for key in self._KEYS}
        self._sc.setJobGroup(group, description or group, interruptOnCancel=True)
        # the tag too: a job that an action starts from a thread of its own pool carries the
        # tags of the thread that made the pool, and cancelJobsWithTag reaches it
        self._sc.addJobTag(group)

    def clear(self) -> None:
        """Restore the job group this thread had before `set()`."""
        saved = getattr(self._saved, "props", None) or {}
        for key in self._KEYS:
            # None removes the property (pyspark's annotation says str)
            self._sc.setLocalProperty(key, saved.get(key))  # type: ignore[arg-type]
        self._saved.props = None

    def cancel(self, group: str) -> None:
        """Cancel the running jobs of `group`; the statement running them raises."""
        self._sc.cancelJobsWithTag(group)
        self._sc.cancelJobGroup(group)


_MAX_MESSAGE = 1000


def error_message(exc: BaseException) -> str:
    """One line for a report or a log: Iceberg's own message first.

    A failure in the JVM arrives as a py4j error whose text starts with "An error occurred while
    calling o123.sql" and wraps the real cause (a ValidationException inside a RuntimeException,
    a cancelled job): this gives the innermost cause, then the outer exception it came in.
    """
    throwable = getattr(exc, "java_exception", None) or getattr(exc, "_origin", None)
    if throwable is None:
        return f"{type(exc).__name__}: {exc}".splitlines()[0][:_MAX_MESSAGE]
    outer = f"{throwable.getClass().getName()}: {throwable.getMessage()}"
    root = throwable
    for _ in range(20):
        cause = root.getCause()
        if cause is None or cause.equals(root):
            break
        root = cause
    message = outer
    if not root.equals(throwable):
        inner = f"{root.getClass().getName()}: {root.getMessage()}"
        message = f"{inner} (in {outer})"
    return " ".join(message.split())[:_MAX_MESSAGE]


def load_table(spark: SparkSession, table: str) -> Any:
    """`table` as Iceberg's Java `Table`, loaded fresh through Spark's catalog (py4j): the spec
    and the snapshot are the latest committed, as each maintenance action must plan against.

    Raises:
        py4j.protocol.Py4JJavaError: the table cannot be loaded.
    """
    view = jvm(spark)
    # Spark finds a catalog it has not loaded yet through the JVM thread's active session: a
    # thread of its own (the follower's full plan) has none, and the name would fall to
    # spark_catalog; `spark` is made active here, as a query makes it active for its run
    view.org.apache.spark.sql.SparkSession.setActiveSession(spark._jsparkSession)
    return view.org.apache.iceberg.spark.Spark3Util.loadIcebergTable(spark._jsparkSession, table)


def jvm(spark: SparkSession) -> Any:
    """The py4j view of the session's JVM (a classic session has one; Spark Connect has none)."""
    view = spark._jvm
    if view is None:
        raise RuntimeError("this Spark session has no JVM: lakelock's jobs need a classic session")
    return view


@contextmanager
def fenced_table(spark: SparkSession, table: str, headers: Mapping[str, str]) -> Iterator[Any]:
    """`table` as `load_table` gives it, except in a REST catalog: there it is loaded through
    a catalog of its own whose requests carry `headers` (Iceberg's `header.<name>` catalog
    properties), so every commit made through it does, closed afterwards. lakelock's catalog
    front reads a commit's lease from them where the commit has no snapshot summary
    (`expire_snapshots`; docs/catalog-front.md); other REST catalogs ignore them."""
    base = rest_catalog(spark, table) if headers else None
    if base is None:
        yield load_table(spark, table)
        return
    name, _, identifier = table.partition(".")
    java = jvm(spark)
    properties = java.java.util.HashMap(base.properties())
    for key, value in headers.items():
        properties.put(f"header.{key}", str(value))
    catalog = java.org.apache.iceberg.rest.RESTCatalog()
    catalog.setConf(spark._jsc.hadoopConfiguration())
    catalog.initialize(name, properties)
    try:
        yield catalog.loadTable(java.org.apache.iceberg.catalog.TableIdentifier.parse(identifier))
    finally:
        catalog.close()


def rest_catalog(spark: SparkSession, table: str) -> Any | None:
    """The Java `RESTCatalog` behind the Spark catalog of `table` (`catalog.namespace.table`),
    or None when that catalog is of another kind."""
    plugin = spark._jsparkSession.sessionState().catalogManager().catalog(table.split(".")[0])
    if plugin.getClass().getName() not in _ICEBERG_PLUGINS:
        return None
    base = plugin.icebergCatalog()
    return base if base.getClass().getName() == _REST_CATALOG else None


_ICEBERG_PLUGINS = {
    "org.apache.iceberg.spark.SparkCatalog",
    "org.apache.iceberg.spark.SparkSessionCatalog",
}
_REST_CATALOG = "org.apache.iceberg.rest.RESTCatalog"


def catalog_place(catalog: CatalogConfig) -> str:
    """`catalog 'local' (hadoop, warehouse /abs/path)`: where a table was looked for."""
    where = f"catalog {catalog.name!r} ({catalog.type}"
    if catalog.type == "hadoop":
        warehouse = catalog.warehouse
        shown = warehouse if "://" in warehouse else str(Path(warehouse).resolve())
        where += f", warehouse {shown}"
    return where + ")"

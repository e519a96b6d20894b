"""The one place a Spark session with the Iceberg runtime and a catalog is built.

Both jobs call `build_session(CatalogConfig(...))`. Locally the Iceberg runtime jar comes from
the `snowpark-connect-deps-iceberg==1.0.1` wheel (Iceberg 1.9.2 for Spark 3.5, Scala 2.12); on a
cluster, set `jars_packages` (or leave `use_bundled_jar=False` and let the site provide it).

    CatalogConfig()                                         # Hadoop catalog in ./var/warehouse
    CatalogConfig(name="glue", type="glue", warehouse="s3://bucket/wh",
                  properties={"io-impl": "org.apache.iceberg.aws.s3.S3FileIO"})
    CatalogConfig(type="rest", properties={"uri": "https://catalog.example/api"})
"""

from __future__ import annotations

import os
import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from pyspark import SparkContext
    from pyspark.sql import SparkSession

__all__ = [
    "error_message",
    "CatalogConfig",
    "SparkJobGroups",
    "bundled_iceberg_jar",
    "build_session",
    "load_table",
]

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

    def spark_conf(self) -> dict[str, str]:
        prefix = f"spark.sql.catalog.{self.name}"
        warehouse = self.warehouse
        if "://" not in warehouse:
            warehouse = Path(warehouse).resolve().as_uri()
        conf = {prefix: "org.apache.iceberg.spark.SparkCatalog", f"{prefix}.warehouse": warehouse}
        conf.update({f"{prefix}.{k}": v for k, v in _CATALOG_TYPES[self.type].items()})
        # Another application (the compactor, the ingest job) commits to the same tables. A cached
        # table would make a MERGE plan against a stale snapshot and fail Iceberg's validation
        # ("missing data files") although the lease kept the writers apart; load it fresh instead.
        conf[f"{prefix}.cache-enabled"] = "false"
        conf.update({f"{prefix}.{k}": v for k, v in self.properties.items()})
        return conf


def bundled_iceberg_jar() -> Path:
    """The Iceberg Spark runtime jar shipped by the `spark` extra's wheel."""
    import snowpark_connect_deps_iceberg

    jars = Path(snowpark_connect_deps_iceberg.__file__).parent / "jars"
    jar = jars / "iceberg-spark-runtime-3.5_2.12-1.9.2.jar"
    if not jar.exists():
        raise RuntimeError(
            f"{jar} is missing: install the spark extra (snowpark-connect-deps-iceberg==1.0.1)"
        )
    return jar


def build_session(
    catalog: CatalogConfig,
    *,
    app_name: str = "lakelock",
    master: str | None = "local[*]",
    jars_packages: str | None = None,
    use_bundled_jar: bool = True,
    extra_conf: dict[str, str] | None = None,
) -> SparkSession:
    """A SparkSession with Iceberg's SQL extensions and `catalog` registered.

    `master=None` leaves the master to spark-submit. `extra_conf` wins over everything here.
    """
    from pyspark.sql import SparkSession

    builder = SparkSession.builder.appName(app_name)
    if master:
        builder = builder.master(master)
    if master and master.startswith("local"):
        # a local driver talks to itself: bind loopback, not whatever the hostname resolves to
        os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    conf = {
        "spark.sql.extensions": ICEBERG_EXTENSIONS,
        "spark.sql.session.timeZone": "UTC",
        # small local runs: a handful of shuffle partitions, not 200 tiny tasks per MERGE
        "spark.sql.shuffle.partitions": os.environ.get("LAKELOCK_SHUFFLE_PARTITIONS", "4"),
        "spark.ui.enabled": "false",
        # the console progress bar garbles the jobs' one-line JSON logs on stderr
        "spark.ui.showConsoleProgress": "false",
        "spark.driver.extraJavaOptions": "-Duser.timezone=UTC",
        **catalog.spark_conf(),
    }
    if jars_packages:
        conf["spark.jars.packages"] = jars_packages
    elif use_bundled_jar:
        conf["spark.jars"] = str(bundled_iceberg_jar())
    conf.update(extra_conf or {})
    for key, value in conf.items():
        builder = builder.config(key, value)
    return builder.getOrCreate()


class SparkJobGroups:
    """Runs the gate's Spark work in a cancellable job group (the `job_groups` of `Gate`).

        groups = SparkJobGroups(spark.sparkContext)
        groups.set("lakelock-commit-<lease>")    # in the thread that runs the MERGE
        groups.cancel("lakelock-commit-<lease>") # from any thread: running jobs are interrupted
        groups.clear()                           # back to the group that was set before

    Job groups are thread-local properties of the JVM thread. A streaming query sets its own group
    (its run id) on its thread, and `query.stop()` cancels that group, so `clear()` restores the
    previous group instead of wiping it.
    """

    _KEYS = ("spark.jobGroup.id", "spark.job.description", "spark.job.interruptOnCancel")

    def __init__(self, sc: SparkContext) -> None:
        self._sc = sc
        self._saved = threading.local()

    def set(self, group: str, description: str | None = None) -> None:
        """Put this thread's next Spark jobs into `group`, interruptible on cancel."""
        self._saved.props = {key: self._sc.getLocalProperty(key) for key in self._KEYS}
        self._sc.setJobGroup(group, description or group, interruptOnCancel=True)

    def clear(self) -> None:
        """Restore the job group this thread had before `set()`."""
        saved = getattr(self._saved, "props", None) or {}
        for key in self._KEYS:
            self._sc.setLocalProperty(key, saved.get(key))  # None removes the property
        self._saved.props = None

    def cancel(self, group: str) -> None:
        """Cancel the running jobs of `group`; the statement running them raises."""
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
    return spark._jvm.org.apache.iceberg.spark.Spark3Util.loadIcebergTable(
        spark._jsparkSession, table
    )

"""Jars from Maven Central, fetched once into a cache with Maven's own client (`mvn`).

    jars("spark-kafka")        # Spark's Kafka source, for a job that Python starts (local master)
    jars("kafka-broker")       # Apache Kafka's broker (bin/kafka-local)
    jars("flink-iceberg")      # Iceberg's Flink runtime, Hadoop's client, S3FileIO (jobkit.flink)
    jars("flink-kafka")        # Flink's Kafka connector, for the Flink writer's Kafka source
    jars("flink-mysql-cdc")    # Flink CDC's MySQL source and MySQL's JDBC driver (its mysql-cdc)
    jars("s3-server")          # S3Proxy, the S3-compatible server on loopback (demo.s3)
    jars("spark-s3")           # Iceberg's S3FileIO and Hadoop's s3a, for jobs on S3
    jars("spark-iceberg")      # Iceberg's Spark runtime (the jobs' default Iceberg, 1.11.0)
    jar_set("spark-kafka")     # what a set holds, every version named

The jobs' Iceberg is 1.11.0; `LAKELOCK_ICEBERG_VERSION=1.9.2` picks 1.9.2 for a site whose
cluster pins it (the Spark runtime then comes from the `spark` extra's wheel, with no Maven;
the Flink runtime and the AWS bundle at 1.9.2 from Maven). `sets(version)` gives either
version's sets; `jar_set(name)` is the chosen one's.

A set is its artifacts (`group:artifact:version`, or `...:version:classifier`) and their
dependencies as Maven resolves them (`dependency:copy-dependencies` over a small pom made for
the purpose), minus what its user already has on the classpath (pyspark's own jars, for the
Spark sets). Each set goes into its own folder under `~/.cache/lakelock/jars`
(`LAKELOCK_JARS_CACHE` moves it), named by the set and its versions, so another version is
another folder; a complete set is marked by a list of its jars and read from
there without asking Maven again. Nothing fetched is committed. On a cluster the site's usual
`--packages` line does the same (docs/spark-submit.md).
"""

from __future__ import annotations

import logging
import os
import re
import shutil
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path

__all__ = [
    "ICEBERG_VERSIONS",
    "JarSet",
    "MavenMissing",
    "cache_root",
    "copy_dependencies",
    "iceberg_version",
    "jar_set",
    "jars",
    "main",
    "sets",
    "spark_packages",
]

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class JarSet:
    """Artifacts (`group:artifact:version[:classifier]`) fetched together; `skip_present_in`
    names a folder of jars already on the user's classpath, left out by artifact name;
    `probe_class` is a class the set provides, to tell whether a driver already has it."""

    artifacts: tuple[str, ...]
    skip_present_in: str | None = None
    probe_class: str | None = None
    transitive: bool = True  # False: the artifacts alone (a jar that carries its dependencies)

    @property
    def folder_name(self) -> str:
        return "+".join(a.split(":", 1)[1].replace(":", "-") for a in self.artifacts)

    @property
    def packages(self) -> str:
        """The artifacts as `spark.jars.packages` / `--packages` names them (no classifier)."""
        return ",".join(":".join(a.split(":")[:3]) for a in self.artifacts)


SPARK_KAFKA_VERSION = "3.5.7"
"""Spark's Kafka source of the 3.5 line, as pyspark 3.5 needs it (Scala 2.12). The newest 3.5
release of the connector that Maven Central serves here; a 3.5.x connector runs on any 3.5.x
Spark. On a cluster, the connector of the cluster's own Spark version."""

FLINK_KAFKA_VERSION = "3.4.0-1.20"
"""Flink's Kafka connector built for Flink 1.20. Maven Central serves its plain jar here, not the
shaded `flink-sql-connector-kafka`; the plain one with its dependencies is the same connector."""

FLINK_CDC_VERSION = "3.3.0"
"""Flink CDC's release built for Flink 1.20 (its MySQL source reads a MySQL or MariaDB binlog)."""

KAFKA_VERSION = "4.1.1"
"""Apache Kafka's broker: 4.x runs in KRaft mode only (no ZooKeeper) on Java 17."""

ICEBERG_VERSIONS = ("1.11.0", "1.9.2")
"""The Iceberg versions the jobs run on, the default first: 1.11.0 (its REST client sends an
Idempotency-Key with each mutation when the catalog advertises one, docs/catalog-front.md §4),
and 1.9.2 for a cluster that pins it."""

HADOOP_VERSION = "3.3.6"
"""Hadoop's shaded client: Iceberg's Flink catalog needs Hadoop's `Configuration` even for a
REST catalog over local files; Flink ships no Hadoop."""

HADOOP_AWS = "org.apache.hadoop:hadoop-aws:3.3.4"
"""Hadoop's `s3a://` file system for pyspark 3.5's Hadoop (3.3.4): a streaming query's
checkpoints and a landing folder on S3. It brings the AWS SDK v1 bundle it was built with."""

S3PROXY = "org.gaul:s3proxy:4.1.0:jar-with-dependencies"
"""S3Proxy (Apache-2.0): an S3-compatible server over a local folder, one jar, Java 17."""


class MavenMissing(RuntimeError):
    """`mvn` is not installed, or could not fetch a set: the message says which."""


def iceberg_version() -> str:
    """The jobs' Iceberg: `LAKELOCK_ICEBERG_VERSION`, or the default (1.11.0).

    Raises:
        ValueError: a version lakelock does not run on (the message names those it does).
    """
    chosen = os.environ.get("LAKELOCK_ICEBERG_VERSION", "").strip() or ICEBERG_VERSIONS[0]
    if chosen not in ICEBERG_VERSIONS:
        raise ValueError(
            f"LAKELOCK_ICEBERG_VERSION={chosen!r}: lakelock's jobs run on Iceberg "
            f"{' or '.join(ICEBERG_VERSIONS)}; unset it for {ICEBERG_VERSIONS[0]}"
        )
    return chosen


def sets(iceberg: str) -> dict[str, JarSet]:
    """The jar sets of the jobs on Iceberg `iceberg` (one of ICEBERG_VERSIONS)."""
    aws = f"org.apache.iceberg:iceberg-aws-bundle:{iceberg}"
    return {
        "spark-kafka": JarSet(
            (f"org.apache.spark:spark-sql-kafka-0-10_2.12:{SPARK_KAFKA_VERSION}",),
            skip_present_in="pyspark",
            probe_class="org.apache.spark.sql.kafka010.KafkaSourceProvider",
        ),
        "kafka-broker": JarSet((f"org.apache.kafka:kafka_2.13:{KAFKA_VERSION}",)),
        # Iceberg's Spark runtime for Spark 3.5 (Scala 2.12): one shaded jar
        "spark-iceberg": JarSet(
            (f"org.apache.iceberg:iceberg-spark-runtime-3.5_2.12:{iceberg}",),
            transitive=False,
            probe_class="org.apache.iceberg.spark.SparkCatalog",
        ),
        # Iceberg's Flink runtime for Flink 1.20; Iceberg's Flink catalog needs Hadoop's
        # client; S3FileIO's SDK: a table on S3 is written as one on local files, through the
        # catalog (its endpoint and region from the front's /v1/config)
        "flink-iceberg": JarSet(
            (
                f"org.apache.iceberg:iceberg-flink-runtime-1.20:{iceberg}",
                f"org.apache.hadoop:hadoop-client-api:{HADOOP_VERSION}",
                f"org.apache.hadoop:hadoop-client-runtime:{HADOOP_VERSION}",
                aws,
            )
        ),
        # Flink's Kafka connector for Flink 1.20 (upsert-kafka and kafka; the formats
        # debezium-json and canal-json are flink-json's, in Flink's own lib) and kafka-clients
        "flink-kafka": JarSet((f"org.apache.flink:flink-connector-kafka:{FLINK_KAFKA_VERSION}",)),
        # Flink CDC's MySQL source, for Flink 1.20 (one shaded jar), and the JDBC driver it
        # reads the snapshot with, which Flink CDC 3 no longer bundles (its X DevAPI parts,
        # and their protobuf, unused)
        "flink-mysql-cdc": JarSet(
            (
                f"org.apache.flink:flink-sql-connector-mysql-cdc:{FLINK_CDC_VERSION}",
                "com.mysql:mysql-connector-j:8.0.33",
            ),
            transitive=False,
        ),
        # S3FileIO (what `s3://` tables are read and written with, chosen by Iceberg's
        # ResolvingFileIO) with the AWS SDK v2, shaded; and Hadoop's s3a
        "spark-s3": JarSet(
            (aws, HADOOP_AWS),
            skip_present_in="pyspark",
            probe_class="org.apache.iceberg.aws.s3.S3FileIO",
        ),
        "s3-server": JarSet((S3PROXY,), transitive=False),
    }


def jar_set(name: str) -> JarSet:
    """Set `name` of the chosen Iceberg (`iceberg_version()`).

    Raises:
        KeyError: an unknown set.
        ValueError: LAKELOCK_ICEBERG_VERSION names a version lakelock does not run on.
    """
    return sets(iceberg_version())[name]


def cache_root() -> Path:
    configured = os.environ.get("LAKELOCK_JARS_CACHE")
    return Path(configured) if configured else Path.home() / ".cache" / "lakelock" / "jars"


def spark_packages(name: str) -> str:
    """The set's artifacts for `spark.jars.packages` / `--packages` (a cluster's own way)."""
    return jar_set(name).packages


def jars(name: str) -> list[Path]:
    """The jars of set `name`, fetched into the cache on first use.

    Raises:
        KeyError: an unknown set.
        ValueError: LAKELOCK_ICEBERG_VERSION names a version lakelock does not run on.
        MavenMissing: not cached, and `mvn` is missing or failed (its last lines are named).
    """
    chosen = jar_set(name)
    folder = cache_root() / chosen.folder_name
    listing = folder / "jars.txt"
    if not listing.is_file():
        _fetch(chosen, folder)
    return [folder / line for line in listing.read_text().split() if line]


def _fetch(jar_set: JarSet, folder: Path) -> None:
    mvn = shutil.which("mvn")
    if mvn is None:
        raise MavenMissing(
            f"{', '.join(jar_set.artifacts)} are fetched with Maven (mvn), which is not "
            "installed: install Maven, or give Spark the packages yourself "
            "(spark.jars.packages / --packages)"
        )
    log.info("fetching %s from Maven into %s", ", ".join(jar_set.artifacts), folder)
    folder.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=folder.parent, prefix=".fetch-") as tmp:
        work = Path(tmp)
        (work / "pom.xml").write_text(_pom(jar_set.artifacts))
        what = ", ".join(jar_set.artifacts)
        copy_dependencies(mvn, work, work / "jars", what=what, transitive=jar_set.transitive)
        fetched = sorted(p.name for p in (work / "jars").glob("*.jar"))
        present = _present(jar_set.skip_present_in)
        kept = [name for name in fetched if _artifact_name(name) not in present]
        (work / "jars" / "jars.txt").write_text("\n".join(kept) + "\n")
        if folder.exists():  # another process got there first: keep its complete copy
            return
        (work / "jars").rename(folder)


def copy_dependencies(
    mvn: str, work: Path, into: Path, *, what: str, transitive: bool = True
) -> None:
    """Maven's `dependency:copy-dependencies` over the pom in `work`: its runtime jars (and
    theirs, with `transitive`) into `into`.

    Raises:
        MavenMissing: mvn failed (its last lines named, with `what` it was fetching).
    """
    done = subprocess.run(
        [
            mvn,
            "-q",
            "-B",
            "dependency:copy-dependencies",
            "-DincludeScope=runtime",
            f"-DexcludeTransitive={str(not transitive).lower()}",
            f"-DoutputDirectory={into}",
        ],
        cwd=work,
        capture_output=True,
        text=True,
        timeout=1800,
    )
    if done.returncode != 0:
        tail = "\n".join((done.stdout + done.stderr).strip().splitlines()[-5:])
        raise MavenMissing(f"mvn could not fetch {what}:\n{tail}")


def _present(where: str | None) -> set[str]:
    if where != "pyspark":
        return set()
    import pyspark

    folder = Path(pyspark.__file__).parent / "jars"
    return {_artifact_name(p.name) for p in folder.glob("*.jar")}


# the shortest name before a dotted version (and a numbered build: zstd-jni-1.5.6-10.jar)
_JAR = re.compile(r"^(.+?)-\d+(?:\.\d+)*(?:-\d+)?\.jar$")


def _artifact_name(jar: str) -> str:
    """`kafka-clients-3.4.1.jar` -> `kafka-clients` (the name without its version)."""
    match = _JAR.match(jar)
    return match.group(1) if match else jar


def _pom(artifacts: tuple[str, ...]) -> str:
    dependencies = "".join(_dependency(*artifact.split(":")) for artifact in artifacts)
    return (
        '<project xmlns="http://maven.apache.org/POM/4.0.0"><modelVersion>4.0.0</modelVersion>'
        "<groupId>lakelock</groupId><artifactId>jar-set</artifactId><version>1</version>"
        f"<packaging>pom</packaging><dependencies>{dependencies}</dependencies></project>"
    )


def _dependency(group: str, artifact: str, version: str, classifier: str = "") -> str:
    tagged = f"<classifier>{classifier}</classifier>" if classifier else ""
    return (
        f"<dependency><groupId>{group}</groupId><artifactId>{artifact}</artifactId>"
        f"<version>{version}</version>{tagged}</dependency>"
    )


def main(argv: list[str] | None = None) -> int:
    """`python -m jobkit.maven [SET ...]`: fetch the sets (all by default) into the cache and
    print where each is; bin/test runs it before the tests, so no test waits for Maven."""
    import sys

    try:
        chosen = sets(iceberg_version())
    except ValueError as exc:
        print(exc, file=sys.stderr)
        return 2
    names = (sys.argv[1:] if argv is None else argv) or sorted(chosen)
    for name in names:
        if name not in chosen:
            known = ", ".join(sorted(chosen))
            print(f"unknown jar set {name!r}; the sets: {known}", file=sys.stderr)
            return 2
        try:
            found = jars(name)
        except MavenMissing as exc:
            print(exc, file=sys.stderr)
            return 1
        print(f"{name}: {len(found)} jars in {found[0].parent if found else cache_root()}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

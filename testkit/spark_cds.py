"""A class-data archive (the JVM's AppCDS) for the Spark drivers the tests start.

    python -m testkit.spark_cds      # the archive's path, made once per JDK and Spark install
    java_options(path)               # what SPARK_SUBMIT_OPTS carries to use it

A Spark driver with Iceberg loads and verifies thousands of classes before its first query, and
a short job spends much of its CPU on that. The JVM can map classes it parsed and verified once
from an archive (`-XX:SharedArchiveFile`): a short Iceberg job that took 10.5 CPU-s took 6.5 with
it (docs/operating.md, "The tests"). The archive is made by a training run, a small job that
does what the tests' drivers do (an Iceberg table's DDL, writes, a MERGE with deletes, a
streaming foreachBatch, a compaction, metadata tables), with `-XX:ArchiveClassesAtExit`.

The JVM trusts an archive only for the JDK that wrote it, the JDK's own archive it lays over,
and the same application class path (each jar's size and time checked), so the archive is named
by all three: another JDK or a new virtualenv makes another. A driver whose class path differs (a
Spark standalone cluster's configuration folder, another virtualenv's Spark) runs as it would
without it, silently (`-Xlog:cds*=off`: the JVM's warning would reach the job's standard output).
Only the tests use it: the jobs users run and `python -m benchmarks.*` start as Spark starts
them.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

__all__ = ["archive", "java_options", "main", "spark_home"]

CACHE = Path.home() / ".cache" / "lakelock" / "cds"
TRAINING_TIMEOUT_S = 900
KEEP = 3  # archives kept in CACHE


def java_options(path: Path) -> str:
    """The driver's JVM options that map the archive at `path`, and keep the JVM quiet when
    it cannot (a JVM of another class path)."""
    return f"-XX:SharedArchiveFile={path} -Xlog:cds*=off"


def spark_home() -> Path:
    """The Spark install of this virtualenv (pyspark's folder: its bin/ and jars/)."""
    import pyspark

    return Path(pyspark.__file__).resolve().parent


def _java() -> Path:
    """The java that spark-submit starts: JAVA_HOME's, else the PATH's (bin/spark-class)."""
    home = os.environ.get("JAVA_HOME")
    found = Path(home, "bin", "java") if home else shutil.which("java")
    if not found:
        raise RuntimeError("no java: set JAVA_HOME or put java on the PATH")
    return Path(found).resolve()


def archive() -> Path:
    """The archive's path for this JDK and this Spark install (it may not exist yet)."""
    java = _java()
    digest = hashlib.sha256(f"{java}:{java.stat().st_mtime_ns}\n".encode())
    # the JDK's own archive, on which the JVM lays this one (`java -Xshare:dump` remakes it)
    base = java.parent.parent / "lib" / "server" / "classes.jsa"
    if base.is_file():
        digest.update(f"{base}:{base.stat().st_mtime_ns}\n".encode())
    for jar in sorted((spark_home() / "jars").glob("*.jar")):
        stat = jar.stat()
        digest.update(f"{jar.name}:{stat.st_size}:{stat.st_mtime_ns}\n".encode())
    return CACHE / f"spark-{digest.hexdigest()[:16]}.jsa"


def _train(path: Path) -> None:
    """Run the training job under spark-submit, the JVM writing its classes to `path` as it
    exits; written aside and renamed, so a half-written archive is never used."""
    from jobkit.maven import jars

    path.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="lakelock-cds-") as scratch:
        written = Path(scratch, path.name)
        jar_list = [*jars("spark-iceberg"), *jars("spark-kafka"), *jars("spark-s3")]
        env = {
            **os.environ,
            "SPARK_SUBMIT_OPTS": f"-XX:ArchiveClassesAtExit={written} -Xlog:cds*=off",
            "PYSPARK_PYTHON": sys.executable,
            "PYSPARK_DRIVER_PYTHON": sys.executable,
        }
        command = [
            str(spark_home() / "bin" / "spark-submit"),
            *("--master", "local[2]", "--driver-memory", "1g"),
            *("--conf", "spark.ui.enabled=false", "--conf", "spark.sql.shuffle.partitions=2"),
            *("--jars", ",".join(str(jar) for jar in jar_list)),
            __file__,
            *("--workload", scratch),
        ]
        done = subprocess.run(
            command,
            env=env,
            cwd=scratch,
            capture_output=True,
            text=True,
            timeout=TRAINING_TIMEOUT_S,
        )
        if done.returncode != 0 or not written.is_file():
            raise RuntimeError(
                f"the training job failed ({done.returncode}):\n{done.stderr[-3000:]}"
            )
        os.replace(written, path)
    # another JDK's or checkout's (150 MB each): the newest few stay, for a developer with
    # several checkouts
    made = sorted(path.parent.glob("spark-*.jsa"), key=lambda p: p.stat().st_mtime, reverse=True)
    for old in made[KEEP:]:
        old.unlink(missing_ok=True)


def _workload(scratch: str) -> None:
    """The training job, in the driver spark-submit started: what the tests' drivers do."""
    from jobkit.spark import CatalogConfig, build_session

    root = Path(scratch)
    # the session the jobs and the tests build, under the submit's master and jars
    spark = build_session(
        CatalogConfig(name="lake", warehouse=str(root / "warehouse")),
        app_name="lakelock-cds-training",
        master=None,
    )
    spark.sql(
        "CREATE TABLE lake.db.t (id bigint, v string, dt date) USING iceberg "
        "PARTITIONED BY (dt) TBLPROPERTIES ('format-version'='2', "
        "'write.delete.mode'='merge-on-read', 'write.update.mode'='merge-on-read', "
        "'write.merge.mode'='merge-on-read')"
    )
    spark.sql(
        "INSERT INTO lake.db.t SELECT id, cast(id AS string), date_add(DATE'2026-01-01', "
        "cast(id % 3 AS int)) FROM range(300)"
    )
    landing = root / "landing"
    landing.mkdir()
    for n in range(2):
        lines = "\n".join(f'{{"id": {i}, "v": "b{n}", "op": "u"}}' for i in range(n, 200, 7))
        (landing / f"{n}.json").write_text(lines + '\n{"id": 5, "v": null, "op": "d"}\n')

    def merge(batch, batch_id: int) -> None:
        batch.dropDuplicates(["id"]).createOrReplaceTempView("changes")
        batch.sparkSession.sql(
            "MERGE INTO lake.db.t t USING changes c ON t.id = c.id "
            "WHEN MATCHED AND c.op = 'd' THEN DELETE "
            "WHEN MATCHED THEN UPDATE SET t.v = c.v "
            "WHEN NOT MATCHED AND c.op <> 'd' THEN INSERT (id, v, dt) "
            "VALUES (c.id, c.v, DATE'2026-01-01')"
        )

    query = (
        spark.readStream.schema("id bigint, v string, op string")
        .option("maxFilesPerTrigger", 1)
        .json(str(landing))
        .writeStream.foreachBatch(merge)
        .option("checkpointLocation", str(root / "checkpoint"))
        .trigger(availableNow=True)
        .start()
    )
    query.awaitTermination()
    spark.sql("DELETE FROM lake.db.t WHERE id < 3")
    spark.sql(
        "CALL lake.system.rewrite_data_files(table => 'db.t', "
        "options => map('min-input-files', '2', 'delete-file-threshold', '1'))"
    ).collect()
    spark.sql("CALL lake.system.rewrite_position_delete_files(table => 'db.t')").collect()
    for meta in ("files", "delete_files", "snapshots", "manifests", "partitions", "refs"):
        spark.sql(f"SELECT * FROM lake.db.t.{meta}").collect()
    spark.table("lake.db.t").groupBy("dt").count().orderBy("dt").collect()
    spark.stop()


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if args[:1] == ["--workload"]:
        _workload(args[1])
        return 0
    try:
        path = archive()
        if not path.is_file():
            _train(path)
    except (RuntimeError, OSError, subprocess.TimeoutExpired) as failed:
        print(f"testkit.spark_cds: no archive: {failed}", file=sys.stderr)
        return 1
    print(path)
    return 0


if __name__ == "__main__":
    sys.exit(main())

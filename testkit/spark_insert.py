"""A Spark job on the jobs' Iceberg runtime (jobkit.spark.iceberg_runtime; run it with
LAKELOCK_ICEBERG_VERSION=1.11.0 for Iceberg 1.11) through a REST catalog: creates the table
`lakelock.db.<table>` and inserts three rows in one statement, then prints what it reads back
as one JSON line. Its own process, since a process's first Spark session fixes the driver's
classpath.

    python -m testkit.spark_insert --uri http://127.0.0.1:8737/iceberg --token SECRET --table t
"""

from __future__ import annotations

import argparse
import json

from jobkit.spark import CatalogConfig, build_session


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--uri", required=True)
    parser.add_argument("--token", required=True)
    parser.add_argument("--table", required=True)
    args = parser.parse_args()
    catalog = CatalogConfig(
        name="lakelock", type="rest", properties={"uri": args.uri, "token": args.token}
    )
    spark = build_session(
        catalog,
        app_name="lakelock-iceberg-1.11",
        master="local[1]",
        extra_conf={"spark.sql.shuffle.partitions": "1"},
    )
    spark.sparkContext.setLogLevel("ERROR")
    name = f"lakelock.db.{args.table}"
    spark.sql("CREATE NAMESPACE IF NOT EXISTS lakelock.db")
    spark.sql(f"CREATE TABLE {name} (id bigint) USING iceberg")
    spark.sql(f"INSERT INTO {name} VALUES (1), (2), (3)")
    version = spark.sparkContext._jvm.org.apache.iceberg.IcebergBuild.version()  # type: ignore[union-attr]
    ids = sorted(row.id for row in spark.table(name).collect())
    print(json.dumps({"iceberg": version, "ids": ids}), flush=True)
    spark.stop()


if __name__ == "__main__":
    main()

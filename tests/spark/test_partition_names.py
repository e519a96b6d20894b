"""Partition names three ways agree byte for byte: from a batch DataFrame (Iceberg's transform
functions), from the `partitions` metadata table, and Iceberg's own `spec.partitionToPath` of
every data file (and the data files' directories, which a Hadoop table names the same way)."""

from __future__ import annotations

from datetime import date, datetime

import pytest

from compactor.procedure import partition_filter
from jobkit.partition import (
    batch_partition_names,
    batch_partition_values,
    partition_name,
    partition_scope,
    read_spec,
    table_partition_names,
    transform_sql,
)
from jobkit.predicate import partition_predicate
from jobkit.spark import load_table

pytestmark = pytest.mark.spark

ODD = "a b/c=d%e"  # space, "/", "=", "%": each escaped in a path
ROWS = [
    # id, dt, hr, name, ts
    (1, date(2024, 6, 20), 13, ODD, datetime(2024, 6, 20, 13, 45, 0)),
    (2, date(2024, 6, 20), 13, "ab", datetime(2024, 6, 20, 13, 59, 59, 500000)),
    (3, date(2024, 6, 20), 14, "abc", datetime(2024, 6, 20, 14, 0, 0)),
    (4, date(2024, 6, 21), 0, "ü~+&", datetime(2024, 7, 1, 0, 0, 0)),
    (5, None, None, None, None),
    (6, date(1969, 12, 31), 23, "null", datetime(1969, 12, 31, 23, 30, 0)),
    (7, date(2024, 6, 20), 13, ODD, datetime(2025, 1, 1, 0, 0, 0)),
    (8, None, None, "null", None),
    (9, date(2024, 6, 22), 1, "it's a\\b", datetime(2024, 6, 22, 1, 0, 0)),  # a quote, a backslash
]
COLUMNS = "id bigint, dt date, hr int, name string, ts timestamp"

TABLES = {
    # table: (its columns besides id, its partitioning, names it must have)
    "ident": ("dt, hr, name", "dt, hr, name", {"dt=2024-06-20/hr=13/name=a+b%2Fc%3Dd%25e"}),
    "daily": ("ts", "days(ts)", {"ts_day=2024-06-20", "ts_day=null", "ts_day=1969-12-31"}),
    "hourly": ("ts", "hours(ts)", {"ts_hour=2024-06-20-13", "ts_hour=1969-12-31-23"}),
    "monthly": ("ts", "months(ts)", {"ts_month=2024-06", "ts_month=1969-12"}),
    "yearly": ("ts", "years(ts)", {"ts_year=2024", "ts_year=2025", "ts_year=1969"}),
    "bucketed": (
        "name",
        "bucket(16, id), truncate(6, name)",
        {"/name_trunc=a+b%2Fc%3D", "/name_trunc=null", "/name_trunc=%C3%BC%7E%2B%26"},
    ),
}


@pytest.fixture(scope="module")
def tables(spark):
    """Each table of TABLES with ROWS inserted, and the batch DataFrame of those rows."""
    spark.sql("CREATE NAMESPACE IF NOT EXISTS local.db")
    source = spark.createDataFrame(ROWS, COLUMNS)
    source.createOrReplaceTempView("source_rows")
    types = dict(c.split() for c in COLUMNS.split(", "))
    out = {}
    for name, (columns, partitioning, _) in TABLES.items():
        schema = ", ".join(f"{c} {types[c]}" for c in ["id", *columns.split(", ")])
        table = f"local.db.{name}"
        spark.sql(f"CREATE TABLE {table} ({schema}) USING iceberg PARTITIONED BY ({partitioning})")
        spark.sql(f"INSERT INTO {table} SELECT id, {columns} FROM source_rows")
        out[name] = (table, source.select("id", *columns.split(", ")))
    return out


def planned_paths(spark, table: str, expression=None) -> list[str]:
    """Iceberg's partitionToPath of each live data file its scan plans (under `expression`)."""
    jtable = load_table(spark, table)
    spec, scan = jtable.spec(), jtable.newScan()
    if expression is not None:
        scan = scan.filter(expression)
    paths = []
    tasks = scan.planFiles().iterator()
    while tasks.hasNext():
        paths.append(str(spec.partitionToPath(tasks.next().file().partition())))
    return paths


def iceberg_paths(spark, table: str) -> tuple[list[str], list[str]]:
    """Iceberg's partitionToPath of each live data file, and each data file's directory."""
    paths = planned_paths(spark, table)
    # a Hadoop table writes <location>/data/<partition path>/<file>; "/" in a value is escaped
    directories = [
        row["file_path"].rsplit("/data/", 1)[1].rsplit("/", 1)[0]
        for row in spark.sql(f"SELECT file_path FROM {table}.files").collect()
    ]
    return paths, directories


@pytest.mark.parametrize("name", sorted(TABLES))
def test_batch_metadata_and_iceberg_names_agree(spark, tables, name):
    table, batch = tables[name]
    spec = read_spec(spark, table)

    from_batch = batch_partition_names(batch, spec, catalog="local")
    from_metadata = table_partition_names(spark, table, spec)
    paths, directories = iceberg_paths(spark, table)

    assert from_batch == from_metadata == sorted(set(paths)) == sorted(set(directories))
    # the literal forms (a bucket number is whatever Iceberg's hash gives: matched as a part)
    assert all(any(part in n for n in from_batch) for part in TABLES[name][2])


def test_string_null_and_null_share_one_name(spark, tables):
    """Iceberg writes a null and the string "null" to one path: a scope that merges them is
    conservative, so the names collapse without harm."""
    spec = read_spec(spark, "local.db.ident")
    rows = spark.sql(
        "SELECT partition FROM local.db.ident.partitions WHERE partition.dt IS NULL"
    ).collect()
    assert sorted(repr(r["partition"]["name"]) for r in rows) == ["'null'", "None"]
    names = {partition_name(spec, r["partition"].asDict()) for r in rows}
    assert names == {"dt=null/hr=null/name=null"}
    paths, _ = iceberg_paths(spark, "local.db.ident")
    assert paths.count("dt=null/hr=null/name=null") >= 2  # two partitions, one path


def test_partition_scope_needs_every_source_column_in_the_key(spark, tables):
    assert partition_scope(spark, "local.db.ident", key_columns=["id", "dt", "hr", "name"]).usable
    refused = partition_scope(spark, "local.db.ident", key_columns=["id", "dt"])
    assert not refused.usable and "hr, name" in refused.reason


def test_partition_scope_refuses_live_files_of_an_older_spec(spark, tables):
    table = "local.db.evolved"
    spark.sql(f"CREATE TABLE {table} (id bigint, dt date) USING iceberg PARTITIONED BY (dt)")
    spark.sql(f"INSERT INTO {table} SELECT id, dt FROM source_rows")
    spark.sql(f"ALTER TABLE {table} ADD PARTITION FIELD bucket(4, id)")
    scope = partition_scope(spark, table, key_columns=["id", "dt"])
    assert not scope.usable and "specs [0]" in scope.reason
    assert [f.name for f in scope.spec.fields] == ["dt", "id_bucket_4"]


@pytest.mark.parametrize("name", sorted(TABLES))
def test_merge_filter_of_each_partition_selects_its_rows_in_the_pushed_down_scan(
    spark, tables, name
):
    """The gate's MERGE filter (ingest_gate.job.merge.partition_predicate): per partition of the
    batch, it holds for exactly the table rows in that partition, and Iceberg gets it as a scan
    filter (an unpushed filter would still be right, but would read every file)."""
    table, batch = tables[name]
    spec = read_spec(spark, table)
    values = batch_partition_values(batch, spec, catalog="local")
    transformed = [f"{transform_sql(f, 'local')} AS p{i}" for i, f in enumerate(spec.fields)]
    in_table = spark.table(table).selectExpr(*transformed).collect()
    for partition in values:
        predicate = partition_predicate(spec, [partition], catalog="local")
        found = spark.sql(f"SELECT count(*) FROM {table} t WHERE {predicate}").first()[0]
        assert found == sum(tuple(row) == partition for row in in_table) > 0, predicate
        plan = spark.sql(f"EXPLAIN SELECT * FROM {table} t WHERE {predicate}").first()[0]
        scan = next(line for line in plan.splitlines() if "BatchScan" in line)
        assert "[filters=," not in scan, scan
    everything = partition_predicate(spec, values, catalog="local")
    assert spark.sql(f"SELECT count(*) FROM {table} t WHERE {everything}").first()[0] == len(ROWS)


@pytest.mark.parametrize("name", sorted(TABLES))
def test_compactor_filter_of_each_partition_plans_exactly_its_files(spark, tables, name):
    """The compactor's filter (compactor.procedure.partition_filter), from the values the
    `partitions` metadata table gives: Iceberg's own scan planning under it finds exactly that
    partition's files, named by Iceberg's own partitionToPath."""
    table, _ = tables[name]
    spec, jtable = read_spec(spark, table), load_table(spark, table)
    rows = spark.sql(f"SELECT partition, file_count FROM {table}.partitions").collect()
    for row in rows:
        values = row["partition"].asDict()
        planned = planned_paths(spark, table, partition_filter(spark, table, jtable, [values]))
        # a null and the string "null" share a path, not a filter: the count tells them apart
        assert planned == [partition_name(spec, values)] * row["file_count"], values
    everything = [row["partition"].asDict() for row in rows]
    planned = planned_paths(spark, table, partition_filter(spark, table, jtable, everything))
    assert sorted(planned) == sorted(planned_paths(spark, table))

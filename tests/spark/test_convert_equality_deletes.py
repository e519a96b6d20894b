"""The compactor's convert_equality_deletes step (compactor.convert): equality deletes, written
by Iceberg's own generic Java writer as a Flink upsert writes them, resolved into position
deletes; the rows read the same by Iceberg's reader in Spark before and after, and by pyiceberg
(which reads position deletes and refuses equality deletes) afterwards."""

from __future__ import annotations

from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

import pytest
from pyiceberg.table import StaticTable

from compactor import convert as convert_module
from compactor.config import TableConfig
from compactor.plan import Step
from compactor.procedure import ProcedureFailed, run_step
from compactor.procedure_config import ConvertEqualityDeletesConfig, RewriteDataFilesConfig
from compactor.report import Outcome
from compactor.run import follow_table
from demo import equality
from jobkit.spark import load_table

pytestmark = pytest.mark.spark

PROPERTIES = {"lakelock.token": "7", "lakelock.lease-id": "lease-convert"}


def create(spark: Any, table: str, *, version: int = 2, partitioned: bool = True) -> None:
    """`table` (id, name, dt) by dt (or unpartitioned), three inserts of ten rows over two
    days, and a row without an id."""
    by = "PARTITIONED BY (dt) " if partitioned else ""
    spark.sql(
        f"CREATE TABLE {table} (id int, name string, dt string) USING iceberg "
        f"{by}TBLPROPERTIES ('format-version'='{version}')"
    )
    for batch in range(3):
        values = ", ".join(
            f"({i}, 'n{i}-{batch}', 'd{i % 2}')" for i in range(batch * 10, batch * 10 + 10)
        )
        spark.sql(f"INSERT INTO {table} VALUES {values}")
    spark.sql(f"INSERT INTO {table} VALUES (NULL, 'no id', 'd0')")


def delete_equal(
    spark: Any, table: str, dt: str, ids: Sequence[int | str | None], column: str = "id"
) -> None:
    """One equality delete file of `(column, dt)` rows in partition `dt`, committed alone."""
    equality.delete_equal(spark, table, {"dt": dt}, [column, "dt"], [(i, dt) for i in ids])


def rows(spark: Any, table: str) -> list[tuple[Any, ...]]:
    spark.sql(f"REFRESH TABLE {table}")
    return sorted(map(tuple, spark.table(table).collect()), key=repr)


def delete_files(spark: Any, table: str) -> list[tuple[int, str]]:
    """(content, dt) of the live delete files: 1 position, 2 equality."""
    found = spark.sql(
        f"SELECT data_file.content, data_file.partition.dt FROM {table}.entries WHERE status < 2"
    ).collect()
    return sorted((r[0], r[1]) for r in found if r[0] != 0)


def referenced(spark: Any, table: str) -> list[str | None]:
    """The data file each live position delete file names, None for none."""
    found = spark.sql(
        f"SELECT data_file.content, data_file.referenced_data_file FROM {table}.entries "
        "WHERE status < 2"
    ).collect()
    return [r[1] for r in found if r[0] == 1]


def data_paths(spark: Any, table: str) -> set[str]:
    return {r[0] for r in spark.sql(f"SELECT file_path FROM {table}.data_files").collect()}


def convert(spark: Any, table: str, partitions: Sequence[dict[str, Any]]) -> dict[str, Any]:
    step = Step("convert_equality_deletes", "test", partition_values=tuple(partitions))
    out = run_step(spark, table=table, step=step, properties=PROPERTIES)
    spark.sql(f"REFRESH TABLE {table}")
    return out


def pyiceberg_rows(spark: Any, table: str) -> list[tuple[Any, ...]]:
    metadata = load_table(spark, table).operations().current().metadataFileLocation()
    read = StaticTable.from_metadata(metadata).scan().to_arrow().to_pylist()
    return sorted(((r["id"], r["name"], r["dt"]) for r in read), key=repr)


def test_equality_deletes_become_position_deletes_and_the_rows_stay(spark):
    table = "local.db.converted"
    create(spark, table)
    delete_equal(spark, table, "d0", [0, 2, 12, None])
    delete_equal(spark, table, "d1", [1, 21, 99])
    # newer than the delete of id 0: it stays
    spark.sql(f"INSERT INTO {table} VALUES (0, 'again', 'd0')")
    before = rows(spark, table)
    assert (0, "again", "d0") in before and (2, "n2-0", "d0") not in before
    assert not [r for r in before if r[0] is None]  # the null id was deleted: nulls are equal
    with pytest.raises(ValueError, match="equality deletes"):
        pyiceberg_rows(spark, table)

    out = convert(spark, table, [{"dt": "d0"}])

    # rows 0, 2, 12 and the null id of the first inserts, in three data files (one position
    # delete file each, naming it); not the newer 0
    assert out["converted_equality_delete_files"] == 1
    assert out["added_position_delete_files"] == 3 and out["deleted_positions"] == 4
    assert rows(spark, table) == before
    # only d0's: d1's equality delete is another lease's partition
    assert delete_files(spark, table) == [(1, "d0")] * 3 + [(2, "d1")]
    named = referenced(spark, table)
    assert len(set(named)) == 3 and set(named) <= data_paths(spark, table)
    summary = spark.sql(
        f"SELECT operation, summary FROM {table}.snapshots ORDER BY committed_at DESC LIMIT 1"
    ).first()
    assert summary.operation == "replace"
    assert {k: summary.summary[k] for k in PROPERTIES} == PROPERTIES

    out = convert(spark, table, [])

    assert out["converted_equality_delete_files"] == 1 and out["deleted_positions"] == 2
    assert rows(spark, table) == before
    assert delete_files(spark, table) == [(1, "d0")] * 3 + [(1, "d1")] * 2
    # an independent reader agrees, now that no equality delete is left
    assert pyiceberg_rows(spark, table) == before
    # nothing left to convert: no commit
    snapshots = spark.sql(f"SELECT count(*) FROM {table}.snapshots").first()[0]
    assert convert(spark, table, [])["converted_equality_delete_files"] == 0
    assert spark.sql(f"SELECT count(*) FROM {table}.snapshots").first()[0] == snapshots


def test_equality_deletes_that_apply_to_nothing_are_removed_with_no_file_added(spark):
    table = "local.db.dangling"
    create(spark, table)
    delete_equal(spark, table, "d1", [99, 98])
    before = rows(spark, table)

    out = convert(spark, table, [{"dt": "d1"}])

    assert out["converted_equality_delete_files"] == 1
    assert out["added_position_delete_files"] == 0
    assert delete_files(spark, table) == []
    assert rows(spark, table) == before == pyiceberg_rows(spark, table)


def test_a_row_two_deletes_name_is_one_position(spark):
    """Equality deletes on other fields (id, then name) that delete the same row."""
    table = "local.db.twice"
    create(spark, table)
    delete_equal(spark, table, "d1", [3])
    delete_equal(spark, table, "d1", ["n3-0"], column="name")
    before = rows(spark, table)

    out = convert(spark, table, [{"dt": "d1"}])

    assert out["converted_equality_delete_files"] == 2 and out["deleted_positions"] == 1
    assert rows(spark, table) == before == pyiceberg_rows(spark, table)


def test_columns_are_read_by_field_id_after_a_rename(spark):
    """The data files hold `id`; the table and its equality deletes say `key` now."""
    table = "local.db.renamed"
    create(spark, table)
    spark.sql(f"ALTER TABLE {table} RENAME COLUMN id TO key")
    delete_equal(spark, table, "d0", [4, 14], column="key")
    before = rows(spark, table)
    assert (4, "n4-0", "d0") not in before

    out = convert(spark, table, [])

    assert out["deleted_positions"] == 2
    assert rows(spark, table) == before


def test_an_unpartitioned_table_is_converted_whole(spark):
    table = "local.db.unpartitioned"
    create(spark, table, partitioned=False)
    equality.delete_equal(spark, table, {}, ["id"], [(5,), (15,), (None,)])
    before = rows(spark, table)

    out = convert(spark, table, [])

    assert out["deleted_positions"] == 3
    assert rows(spark, table) == before == pyiceberg_rows(spark, table)


def test_two_tables_convert_at_once_in_one_session(spark):
    """As a follower runs several tables' steps in threads on one session."""
    tables = ["local.db.first", "local.db.second"]
    for table in tables:
        create(spark, table)
        delete_equal(spark, table, "d0", [0, 10, 20])
    before = {table: rows(spark, table) for table in tables}

    with ThreadPoolExecutor(2) as pool:
        outs = list(pool.map(lambda table: convert(spark, table, []), tables))

    assert [out["deleted_positions"] for out in outs] == [3, 3]
    for table in tables:
        assert rows(spark, table) == before[table] == pyiceberg_rows(spark, table)


def test_a_format_v3_table_is_left_as_it_is(spark):
    table = "local.db.version3"
    create(spark, table, version=3)
    delete_equal(spark, table, "d0", [0])
    before = rows(spark, table)

    out = convert(spark, table, [])

    assert out["skipped_format_v3"] == 1 and out["converted_equality_delete_files"] == 0
    assert delete_files(spark, table) == [(2, "d0")]
    assert rows(spark, table) == before


def test_a_rewrite_between_the_read_and_the_commit_makes_it_refuse(spark, monkeypatch):
    """A data rewrite outside any lease commits after the positions are written: the
    conversion commits nothing, removes what it wrote, and the rows stay."""
    table = "local.db.raced"
    create(spark, table)
    delete_equal(spark, table, "d0", [0, 10])
    before = rows(spark, table)
    written = []

    def and_a_rewrite(*args: Any) -> Any:
        added = write_positions(*args)
        written.extend(path for path, _, _ in added)
        spark.sql(
            f"CALL local.system.rewrite_data_files(table => '{table}', "
            "options => map('rewrite-all', 'true'))"
        )
        return added

    write_positions = convert_module._write_positions
    monkeypatch.setattr(convert_module, "_write_positions", and_a_rewrite)
    snapshots = spark.sql(f"SELECT count(*) FROM {table}.snapshots").first()[0]

    with pytest.raises(ProcedureFailed, match="was removed by snapshot"):
        convert(spark, table, [])

    assert written and not any(Path(urlparse(path).path).exists() for path in written)
    # the rewrite's commit, and none of the conversion's
    assert spark.sql(f"SELECT count(*) FROM {table}.snapshots").first()[0] == snapshots + 1
    assert rows(spark, table) == before


def test_the_follower_converts_and_keeps_a_big_file_until_its_rows_are_deleted(spark, job_client):
    """follow_table with conversion on: a compacted file with a few rows deleted stays, with
    a position delete file naming it; once `delete_ratio` of its rows are deleted, the same
    run's rewrite replaces it (Iceberg's delete-ratio-threshold counts the file-scoped
    positions the conversion wrote)."""
    table = "local.db.followed"
    spark.sql(
        f"CREATE TABLE {table} (id int, name string, dt string) USING iceberg "
        "PARTITIONED BY (dt) TBLPROPERTIES ('format-version'='2')"
    )
    spark.range(2000).selectExpr(
        "CAST(id AS int) AS id", "sha2(CAST(id AS string), 256) AS name", "'d0' AS dt"
    ).coalesce(1).writeTo(table).append()
    (big,) = data_paths(spark, table)
    config = TableConfig(
        table,
        rewrite_data_files=RewriteDataFilesConfig(
            options={"target-file-size-bytes": str(64 * 1024), "min-input-files": "2"}
        ),
        convert_equality_deletes=ConvertEqualityDeletesConfig(enabled=True),
    )

    def follow(deleted: Sequence[int]) -> dict[str, Any]:
        # a stream's batch: two small files and an equality delete, the partition due
        for n in (1, 2):
            spark.sql(f"INSERT INTO {table} VALUES ({10_000 + n}, 'new', 'd0')")
        delete_equal(spark, table, "d0", deleted)
        before = rows(spark, table)
        report = follow_table(spark, client=job_client, config=config, due={"dt=d0": (2, 1, 1)})
        assert report.outcome == Outcome.COMPACTED, (report.error, report.steps)
        assert rows(spark, table) == before == pyiceberg_rows(spark, table)
        return {s["procedure"]: s["output"] for s in report.steps}

    outputs = follow(list(range(10)))  # 0.5% of the big file's rows

    assert outputs["convert_equality_deletes"]["deleted_positions"] == 10
    # the big file and the small files' rewrite; one position delete file, on the big file
    assert big in data_paths(spark, table) and len(data_paths(spark, table)) == 2
    assert delete_files(spark, table) == [(1, "d0")]

    outputs = follow(list(range(10, 810)))  # 40% more: past the ratio of 0.3

    assert outputs["convert_equality_deletes"]["deleted_positions"] == 800
    assert big not in data_paths(spark, table)
    assert delete_files(spark, table) == []

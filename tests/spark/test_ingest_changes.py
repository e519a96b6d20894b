"""Any table, its own schema, change streams with deletes: the ingest job on local Spark and the
real Iceberg runtime, checked with pyiceberg (an independent reader) where it matters."""

from __future__ import annotations

import base64
import json
import logging
from datetime import UTC, date, datetime
from decimal import Decimal
from pathlib import Path

import pytest

from demo.generate import KEY_FIELDS, ChangeGenerator, create_events_table
from ingest_gate.job.config import load_config
from ingest_gate.job.gating import Ungated
from ingest_gate.job.run import BatchWriter, IngestError, run
from ingest_gate.job.target import TableMissing
from service.ops.iceberg_audit import metadata_file
from tests.spark.conftest import table_rows

pytestmark = pytest.mark.spark

WAIT_S = 180
PROPS = (
    "TBLPROPERTIES ('format-version'='2', 'write.merge.mode'='merge-on-read', "
    "'write.update.mode'='merge-on-read', 'write.delete.mode'='merge-on-read')"
)


def _config(tmp_path: Path, table: str, **overrides):
    values = {
        "table": table,
        "landing_path": str(tmp_path / "landing"),
        "dead_letter_path": str(tmp_path / "dead-letter"),
        "checkpoint_path": str(tmp_path / "checkpoint"),
        "available_now": True,
        "gate_enabled": False,
    }
    values.update(overrides)
    return load_config(overrides=values)


def pyiceberg_rows(warehouse: Path, table: str) -> list[dict]:
    from pyiceberg.table import StaticTable

    arrow = StaticTable.from_metadata(str(metadata_file(warehouse, table))).scan().to_arrow()
    return arrow.to_pylist()


def _lines(spark, lines):
    return spark.createDataFrame(
        [(line, "file:/landing/changes-1.jsonl", i) for i, line in enumerate(lines)],
        "raw string, _source_file string, _source_pos long",
    )


@pytest.mark.parametrize("fmt", ["debezium", "canal"])
def test_a_change_stream_with_deletes_and_key_changes_ends_in_the_source_state(
    spark, tmp_path, fmt
):
    table = f"local.db.changes_{fmt}"
    create_events_table(spark, table)
    config = _config(tmp_path, table, format=fmt, key_columns=KEY_FIELDS, max_files_per_trigger=1)
    gen = ChangeGenerator(
        seed=7, format=fmt, delete_ratio=0.2, key_change_ratio=0.1, bad_ratio=0.05
    )
    for _ in range(4):
        gen.write_file(config.landing_path, 60)

    handle = run(config, spark=spark)
    records = handle.wait(timeout=WAIT_S)

    assert table_rows(spark, table) == gen.expected_rows()
    summary = handle.summary()
    assert summary["records"] == 240 and summary["sources_read"] == 4
    assert summary["bad_records"] == gen.by_kind["bad"] > 0
    assert summary["deletes"] >= gen.by_kind["delete"] + gen.by_kind["key_change"]
    if fmt == "debezium":  # a tombstone follows each delete
        tombstones = sum(Path(f).read_text().splitlines().count("null") for f in gen.files)
        assert summary["skipped"] == {"tombstone": tombstones} and tombstones > 0
    assert all(r.outcome == "ungated" for r in records)
    # one file per batch: each batch names it as its last source
    assert [Path(r.last_source).name for r in records] == [Path(f).name for f in gen.files]


def test_replaying_any_stretch_of_a_change_stream_in_order_converges(spark, tmp_path):
    table = "local.db.replayed"
    create_events_table(spark, table)
    config = _config(tmp_path, table, format="debezium", key_columns=KEY_FIELDS)
    gen = ChangeGenerator(seed=11, delete_ratio=0.25, key_change_ratio=0.15, update_ratio=0.4)
    batches = [_lines(spark, gen.records(30)) for _ in range(4)]
    writer = BatchWriter(config, gate=Ungated(), query_id="q", replay_guard=False)
    for i, batch in enumerate(batches):
        writer(batch, i)
    final = table_rows(spark, table)
    assert final == gen.expected_rows()

    # offsets reset by hand to batch 1: batches 1..3 again, in order
    for i, batch in enumerate(batches[1:], start=1):
        writer(batch, 10 + i)

    assert table_rows(spark, table) == final


def test_the_table_is_the_schema_every_type_and_nested_shapes(spark, spark_warehouse, tmp_path):
    table = "local.db.typed"
    spark.sql(
        f"""CREATE TABLE {table} (
            id BIGINT NOT NULL, flag BOOLEAN, small INT, ratio FLOAT, score DOUBLE,
            price DECIMAL(9,2), day DATE, local_at TIMESTAMP_NTZ, at TIMESTAMP, name STRING,
            blob BINARY, tags ARRAY<STRING>, attrs MAP<STRING, BIGINT>,
            address STRUCT<city: STRING, zip: INT>)
        USING iceberg TBLPROPERTIES ('format-version'='2', 'write.merge.mode'='copy-on-write')"""
    )
    spark.sql(f"ALTER TABLE {table} SET IDENTIFIER FIELDS id")
    config = _config(tmp_path, table, format="debezium")  # the key: the identifier fields
    row = {
        "id": 1,
        "flag": True,
        "small": 7,
        "ratio": 0.5,
        "score": 2.25,
        "price": "12.30",
        "day": 19894,
        "local_at": 1718891100123,
        "at": "2024-06-20T15:45:00+02:00",
        "name": "Ann",
        "blob": base64.b64encode(b"\x00\xff").decode(),
        "tags": ["a", "b"],
        "attrs": {"x": 1},
        "address": {"city": "Oslo", "zip": 150},
        "nickname": "not a column",
    }
    lines = [
        json.dumps({"op": "c", "after": row}),
        json.dumps({"op": "c", "after": {**row, "id": 2, "small": "seven"}}),  # wrong type
    ]
    writer = BatchWriter(config, gate=Ungated(), query_id="q")
    writer(_lines(spark, lines), 0)

    record = writer.records[0]
    assert (record.bad_rows, record.unknown_fields, record.unknown_names) == (1, 2, ["nickname"])
    (got,) = pyiceberg_rows(spark_warehouse, table)
    assert got == {
        "id": 1,
        "flag": True,
        "small": 7,
        "ratio": 0.5,
        "score": 2.25,
        "price": Decimal("12.30"),
        "day": date(2024, 6, 20),
        "local_at": datetime(2024, 6, 20, 13, 45, 0, 123000),
        "at": datetime(2024, 6, 20, 13, 45, tzinfo=UTC),
        "name": "Ann",
        "blob": b"\x00\xff",
        "tags": ["a", "b"],
        "attrs": [("x", 1)],
        "address": {"city": "Oslo", "zip": 150},
    }


def test_identifier_fields_on_a_merge_on_read_table_take_the_merge_from_iceberg_1_10(
    spark, tmp_path
):
    """Iceberg 1.9 fails every merge-on-read MERGE into a table with identifier fields
    (apache/iceberg#11341, fixed in 1.10): on the jobs' 1.11 the job upserts such a table; a job
    pinned to 1.9.2 is refused at its first batch with the way out."""
    table = "local.db.identified"
    spark.sql(
        f"CREATE TABLE {table} (id BIGINT NOT NULL, v STRING, t TIMESTAMP) USING iceberg {PROPS}"
    )
    spark.sql(f"ALTER TABLE {table} SET IDENTIFIER FIELDS id")
    config = _config(tmp_path, table, format="json", key_columns=["id"], event_time_column="t")
    writer = BatchWriter(config, gate=Ungated(), query_id="q")
    first, then = ({"id": 1, "v": v, "t": f"2024-06-20T10:00:0{i}Z"} for i, v in enumerate("ab"))
    if str(spark._jvm.org.apache.iceberg.IcebergBuild.version()).startswith("1.9."):
        with pytest.raises(IngestError, match=r"apache/iceberg#11341.*DROP IDENTIFIER FIELDS id"):
            writer(_lines(spark, [json.dumps(first)]), 0)
        return
    writer(_lines(spark, [json.dumps(first)]), 0)
    writer(_lines(spark, [json.dumps(then)]), 1)  # a matched key: the update #11341 broke
    assert [(r["id"], r["v"]) for r in spark.table(table).collect()] == [(1, "b")]


def test_a_column_added_while_the_job_runs_is_written_from_the_next_batch(spark, tmp_path, caplog):
    table = "local.db.altered"
    spark.sql(f"CREATE TABLE {table} (userid STRING NOT NULL, name STRING) USING iceberg {PROPS}")
    config = _config(tmp_path, table, format="json", key_columns=["userid"], event_time_column="t")
    spark.sql(f"ALTER TABLE {table} ADD COLUMN t TIMESTAMP")
    writer = BatchWriter(config, gate=Ungated(), query_id="q")
    first = {"userid": "u1", "name": "A", "t": "2024-06-20T10:00:00Z", "level": 3}
    writer(_lines(spark, [json.dumps(first)]), 0)
    assert writer.records[0].unknown_names == ["level"]

    spark.sql(f"ALTER TABLE {table} ADD COLUMN level INT")
    with caplog.at_level(logging.WARNING, logger="ingest_gate.job.run"):
        writer(_lines(spark, [json.dumps({**first, "t": "2024-06-20T10:00:01Z"})]), 1)

    assert writer.records[1].unknown_fields == 0
    assert [(r["userid"], r["level"]) for r in spark.table(table).collect()] == [("u1", 3)]
    assert any("columns added ['level']" in r.getMessage() for r in caplog.records)


def test_a_missing_table_is_one_line_naming_catalog_table_and_how_to_create_it(spark, tmp_path):
    config = _config(tmp_path, "local.db.absent", format="debezium")
    with pytest.raises(TableMissing) as caught:
        run(config, spark=spark)
    line = str(caught.value)
    assert "\n" not in line
    assert line.startswith("local.db.absent: no such table in catalog 'local' (hadoop, warehouse")
    assert "CREATE TABLE local.db.absent" in line and "SET IDENTIFIER FIELDS" in line


def test_files_the_pattern_does_not_match_are_named_at_start_and_in_the_summary(
    spark, tmp_path, caplog
):
    table = "local.db.patterned"
    create_events_table(spark, table)
    gen = ChangeGenerator(seed=3)
    landing = tmp_path / "landing"
    landing.mkdir()
    (landing / "changes-0001.json").write_text("\n".join(gen.records(5)) + "\n")

    with caplog.at_level(logging.WARNING, logger="ingest_gate.job.run"):
        quiet = run(
            _config(tmp_path, table, format="debezium", key_columns=KEY_FIELDS), spark=spark
        )
        quiet.wait(timeout=WAIT_S)
    assert quiet.files_at_start == 0
    assert "no file matching '*.jsonl' was read" in quiet.summary()["note"]
    assert any("0 files in" in r.getMessage() for r in caplog.records)

    matched = _config(
        tmp_path / "again",
        table,
        format="debezium",
        key_columns=KEY_FIELDS,
        landing_path=str(landing),
        file_pattern="*.json",
    )
    handle = run(matched, spark=spark)
    handle.wait(timeout=WAIT_S)
    assert handle.files_at_start == 1 and "note" not in handle.summary()
    assert table_rows(spark, table) == gen.expected_rows()

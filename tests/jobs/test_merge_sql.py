import logging
from datetime import UTC, date, datetime
from decimal import Decimal
from types import SimpleNamespace
from typing import Any

import pytest

from demo.generate import events_table_sql
from ingest_gate.job.merge import merge_sql
from ingest_gate.job.table import (
    FANOUT_PROPERTY,
    TABLE_PROPERTIES,
    WRITE_MODE_PROPERTIES,
    check_write_modes,
    create_table_sql,
    ensure_clustered_writes,
    identifier_merge_refusal,
)
from jobkit.partition import PartitionField, PartitionSpec
from jobkit.predicate import merge_filter, partition_predicate, partition_superset, sql_literal
from jobkit.sql import quote_identifier


def _default_merge() -> str:
    return merge_sql(
        target="local.db.events",
        source="batch_7",
        key_columns=("event_id", "dt", "hr"),
        event_time_column="event_time",
    )


def test_merge_matches_on_every_key_column():
    assert "ON t.`event_id` = s.`event_id` AND t.`dt` = s.`dt` AND t.`hr` = s.`hr`\n" in (
        _default_merge()
    )


def test_merge_updates_only_when_the_batch_row_is_not_older():
    sql = _default_merge()
    assert "WHEN MATCHED AND s.`event_time` >= t.`event_time` THEN UPDATE SET *" in sql
    assert "WHEN NOT MATCHED THEN INSERT *" in sql
    assert sql.count("WHEN") == 2  # no delete clause, no unguarded update


def test_merge_statement_is_exactly_the_documented_one():
    assert _default_merge() == (
        "MERGE INTO `local`.`db`.`events` t\n"
        "USING `batch_7` s\n"
        "ON t.`event_id` = s.`event_id` AND t.`dt` = s.`dt` AND t.`hr` = s.`hr`\n"
        "WHEN MATCHED AND s.`event_time` >= t.`event_time` THEN UPDATE SET *\n"
        "WHEN NOT MATCHED THEN INSERT *"
    )


def test_identifiers_with_backquotes_cannot_break_out():
    assert quote_identifier("a`b.c") == "`a``b`.`c`"


def test_merge_refuses_no_key_or_time_as_key():
    with pytest.raises(ValueError, match="key_columns"):
        merge_sql(target="c.d.t", source="s", key_columns=(), event_time_column="ts")
    with pytest.raises(ValueError, match="must not be a key column"):
        merge_sql(target="c.d.t", source="s", key_columns=("id", "ts"), event_time_column="ts")


def test_the_click_event_ddl_is_merge_on_read_v2_partitioned_by_dt_and_hr():
    (create,) = events_table_sql("local.db.events")
    assert create.startswith("CREATE TABLE IF NOT EXISTS `local`.`db`.`events` (")
    assert "event_id STRING NOT NULL" in create
    assert "PARTITIONED BY (dt, hr)" in create
    for key, value in TABLE_PROPERTIES.items():
        assert f"'{key}' = '{value}'" in create
    assert TABLE_PROPERTIES["write.delete.granularity"] == "file"
    assert {TABLE_PROPERTIES[f"write.{op}.mode"] for op in ("merge", "update", "delete")} == {
        "merge-on-read"
    }


def test_an_unpartitioned_table_with_its_key_declared():
    create, identify = create_table_sql("local.db.t", columns="id BIGINT", identifier=("id",))
    assert "PARTITIONED" not in create
    assert identify == "ALTER TABLE `local`.`db`.`t` SET IDENTIFIER FIELDS `id`"


def test_a_table_of_format_3_for_deletion_vectors_and_no_other():
    (create,) = create_table_sql("local.db.t", columns="id BIGINT", format_version=3)
    assert "'format-version' = '3'" in create and "'format-version' = '2'" not in create
    with pytest.raises(ValueError, match=r"use 2 .* or 3"):
        create_table_sql("local.db.t", columns="id BIGINT", format_version=4)


def test_a_copy_on_write_table_rewrites_on_merge_update_and_delete_alike():
    (create,) = create_table_sql("local.db.t", columns="id BIGINT", write_mode="copy-on-write")
    for op in ("merge", "update", "delete"):
        assert f"'write.{op}.mode' = 'copy-on-write'" in create
    assert "merge-on-read" not in create
    with pytest.raises(ValueError, match=r"use merge-on-read .* or copy-on-write"):
        create_table_sql("local.db.t", columns="id BIGINT", write_mode="rewrite")


def test_a_change_stream_merge_deletes_then_updates_then_inserts_named_columns():
    sql = merge_sql(
        target="local.db.users",
        source="batch_7",
        key_columns=("userid",),
        columns=("userid", "name"),
        delete_column="_deleted",
    )
    assert sql == (
        "MERGE INTO `local`.`db`.`users` t\n"
        "USING `batch_7` s\n"
        "ON t.`userid` = s.`userid`\n"
        "WHEN MATCHED AND s.`_deleted` THEN DELETE\n"
        "WHEN MATCHED THEN UPDATE SET t.`userid` = s.`userid`, t.`name` = s.`name`\n"
        "WHEN NOT MATCHED AND NOT s.`_deleted` THEN INSERT (`userid`, `name`) "
        "VALUES (s.`userid`, s.`name`)"
    )


def test_identifier_fields_with_merge_on_read_are_refused_before_iceberg_1_10():
    mor = {"write.merge.mode": "merge-on-read"}
    refusal = identifier_merge_refusal(mor, identifier=("id",), iceberg_version="1.9.2")
    assert refusal is not None and "DROP IDENTIFIER FIELDS id" in refusal
    assert identifier_merge_refusal(mor, identifier=("id",), iceberg_version="1.10.0") is None
    assert identifier_merge_refusal(mor, identifier=(), iceberg_version="1.9.2") is None
    cow = {"write.merge.mode": "copy-on-write"}
    assert identifier_merge_refusal(cow, identifier=("id",), iceberg_version="1.9.2") is None


DT_HR = PartitionSpec(
    spec_id=0,
    fields=(
        PartitionField("dt", "date", "identity", "dt"),
        PartitionField("hr", "int", "identity", "hr"),
    ),
)


def _field(source_type: str, transform: str = "identity", source: str = "c") -> PartitionField:
    return PartitionField(source, source_type, transform, f"{source}_{transform}")


def test_merge_without_a_partition_filter_is_unchanged():
    assert _default_merge() == merge_sql(
        target="local.db.events",
        source="batch_7",
        key_columns=("event_id", "dt", "hr"),
        event_time_column="event_time",
        partition_filter=None,
    )


def test_partition_filter_is_anded_to_the_key_match():
    values = [(date(2024, 6, 20), 14), (date(2024, 6, 20), 13), (date(2024, 6, 20), 13)]
    predicate = partition_predicate(DT_HR, values, catalog="local")
    assert predicate == (
        "(t.`dt` = DATE'2024-06-20' AND t.`hr` = 13) OR (t.`dt` = DATE'2024-06-20' AND t.`hr` = 14)"
    )
    sql = merge_sql(
        target="local.db.events",
        source="batch_7",
        key_columns=("event_id", "dt", "hr"),
        event_time_column="event_time",
        partition_filter=predicate,
    )
    assert (
        "ON t.`event_id` = s.`event_id` AND t.`dt` = s.`dt` AND t.`hr` = s.`hr` AND "
        f"({predicate})\nWHEN MATCHED"
    ) in sql


def test_transforms_compare_through_icebergs_functions():
    spec = PartitionSpec(
        spec_id=3,
        fields=(
            PartitionField("ts", "timestamptz", "day", "ts_day"),
            PartitionField("id", "long", "bucket[16]", "id_bucket"),
            PartitionField("name", "string", "truncate[2]", "name_trunc"),
            PartitionField("ts", "timestamptz", "hour", "ts_hour"),
            PartitionField("x", "int", "void", "x_null"),
        ),
    )
    predicate = partition_predicate(
        spec, [(date(2024, 6, 20), 7, "ab", 475069, None)], catalog="my cat"
    )
    assert predicate == (
        "(`my cat`.system.days(t.`ts`) = DATE'2024-06-20'"
        " AND `my cat`.system.bucket(16, t.`id`) = 7"
        " AND `my cat`.system.truncate(2, t.`name`) = 'ab'"
        " AND `my cat`.system.hours(t.`ts`) = 475069)"
    )


def test_null_partition_values_test_the_column():
    assert partition_predicate(DT_HR, [(None, None)], catalog="local") == (
        "(t.`dt` IS NULL AND t.`hr` IS NULL)"
    )
    day = PartitionSpec(0, (PartitionField("ts", "timestamp", "day", "ts_day"),))
    assert partition_predicate(day, [(None,)], catalog="local") == "(t.`ts` IS NULL)"


def test_no_values_or_only_void_fields_give_no_filter():
    assert partition_predicate(DT_HR, [], catalog="local") is None
    void = PartitionSpec(0, (PartitionField("x", "int", "void", "x_null"),))
    assert partition_predicate(void, [(None,)], catalog="local") is None


def test_superset_lists_each_fields_values_once_in_order():
    values = [(date(2024, 6, 20), 23), (date(2024, 6, 21), 0), (date(2024, 6, 20), 22)]
    assert partition_superset(DT_HR, values, catalog="local") == (
        "t.`dt` IN (DATE'2024-06-20', DATE'2024-06-21') AND t.`hr` IN (0, 22, 23)"
    )
    assert partition_superset(DT_HR, values, catalog="local", alias=None) == (
        "`dt` IN (DATE'2024-06-20', DATE'2024-06-21') AND `hr` IN (0, 22, 23)"
    )


def test_superset_compares_transforms_through_icebergs_functions_and_tests_nulls():
    spec = PartitionSpec(
        spec_id=3,
        fields=(
            PartitionField("ts", "timestamptz", "day", "ts_day"),
            PartitionField("id", "long", "bucket[16]", "id_bucket"),
            PartitionField("x", "int", "void", "x_null"),
        ),
    )
    values = [(date(2024, 6, 20), 7, None), (None, 3, None), (date(2024, 6, 20), None, None)]
    assert partition_superset(spec, values, catalog="local") == (
        "(`local`.system.days(t.`ts`) IN (DATE'2024-06-20') OR t.`ts` IS NULL)"
        " AND (`local`.system.bucket(16, t.`id`) IN (3, 7) OR t.`id` IS NULL)"
    )
    assert partition_superset(spec, [(None, None, None)], catalog="local") == (
        "t.`ts` IS NULL AND t.`id` IS NULL"
    )


def test_superset_of_nothing_or_only_void_fields_is_no_filter():
    assert partition_superset(DT_HR, [], catalog="local") is None
    void = PartitionSpec(0, (PartitionField("x", "int", "void", "x_null"),))
    assert partition_superset(void, [(None,)], catalog="local") is None


def test_merge_filter_is_exact_up_to_the_limit_of_distinct_partitions():
    values = [(date(2024, 6, 20), 13), (date(2024, 6, 20), 14), (date(2024, 6, 20), 13)]
    exact = merge_filter(DT_HR, values, catalog="local", exact_max=2)
    assert (exact.kind, exact.predicate) == (
        "exact",
        partition_predicate(DT_HR, values, catalog="local"),
    )
    wide = merge_filter(DT_HR, values, catalog="local", exact_max=1)
    assert (wide.kind, wide.predicate) == (
        "superset",
        partition_superset(DT_HR, values, catalog="local"),
    )
    assert merge_filter(DT_HR, values, catalog="local", exact_max=0).kind == "superset"


@pytest.mark.parametrize(
    ("field", "value", "literal"),
    [
        (_field("boolean"), True, "TRUE"),
        (_field("long"), 3_000_000_000, "3000000000"),
        (_field("decimal(9,2)"), Decimal("1.50"), "1.50BD"),
        (_field("date"), date(2024, 6, 20), "DATE'2024-06-20'"),
        (
            _field("timestamp"),
            datetime(2024, 6, 20, 13, 45, 0, 500000),
            "TIMESTAMP_NTZ'2024-06-20 13:45:00.500000'",
        ),
        (
            _field("timestamptz"),
            datetime(2024, 6, 20, 13, 45, tzinfo=UTC),
            "TIMESTAMP'2024-06-20 13:45:00Z'",
        ),
        (_field("string"), "a b/c=d%e ü", "'a b/c=d%e ü'"),
        (_field("string"), "it's", "CAST(X'69742773' AS STRING)"),
        (_field("string"), "a\\b", "CAST(X'615c62' AS STRING)"),
        (_field("binary"), bytearray(b"\x00\xff"), "X'00ff'"),
    ],
)
def test_literals_keep_the_value_and_type(field, value, literal):
    assert sql_literal(value, field) == literal


def test_a_value_without_a_literal_form_is_refused():
    with pytest.raises(TypeError, match="c_identity"):
        sql_literal(1.5, _field("double"))


class FakeSpark:
    """Answers SHOW TBLPROPERTIES from `properties` and records every other statement."""

    def __init__(self, properties: dict[str, str]) -> None:
        self.properties = properties
        self.statements: list[str] = []

    def sql(self, statement: str) -> Any:
        if statement.startswith("SHOW TBLPROPERTIES"):
            rows = [{"key": k, "value": v} for k, v in self.properties.items()]
            return SimpleNamespace(collect=lambda: rows)
        self.statements.append(statement)
        return None


def test_a_table_without_a_writer_setting_is_set_to_the_clustered_writer(caplog):
    spark = FakeSpark({"format-version": "2"})
    with caplog.at_level(logging.INFO, logger="ingest_gate.job.table"):
        assert ensure_clustered_writes(spark, "local.db.events") is True
    assert spark.statements == [
        "ALTER TABLE `local`.`db`.`events` SET TBLPROPERTIES ('write.spark.fanout.enabled' = "
        "'false')"
    ]
    assert "set write.spark.fanout.enabled=false" in caplog.text


def test_a_clustered_table_is_left_alone_and_a_fanout_one_is_warned_about(caplog):
    clustered = FakeSpark({FANOUT_PROPERTY: "false"})
    assert ensure_clustered_writes(clustered, "local.db.events") is True
    fanout = FakeSpark({FANOUT_PROPERTY: "true"})  # its owner's choice: not altered
    with caplog.at_level(logging.WARNING, logger="ingest_gate.job.table"):
        assert ensure_clustered_writes(fanout, "local.db.events") is False
    assert clustered.statements == fanout.statements == []
    assert "SET TBLPROPERTIES ('write.spark.fanout.enabled' = 'false')" in caplog.text


@pytest.mark.parametrize(
    ("properties", "warned"),
    [
        (dict.fromkeys(WRITE_MODE_PROPERTIES, "merge-on-read"), []),
        (dict.fromkeys(WRITE_MODE_PROPERTIES, "copy-on-write"), []),  # chosen: logged
        ({}, list(WRITE_MODE_PROPERTIES)),  # Iceberg's default, copy-on-write, by omission
        ({"write.merge.mode": "copy-on-write"}, list(WRITE_MODE_PROPERTIES)),
    ],
)
def test_the_job_warns_of_write_modes_unset_or_mixed_not_of_one_chosen(properties, warned, caplog):
    spark = FakeSpark({**properties, "write.delete.granularity": "file"})
    with caplog.at_level(logging.INFO, logger="ingest_gate.job.table"):
        check_write_modes(spark, "local.db.events")
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert [m.split(" has ")[1].split("=")[0] for m in warnings] == warned
    assert all("or copy-on-write in all three" in m for m in warnings)

import pytest

from ingest_gate.merge import merge_sql, quote_identifier
from ingest_gate.table import TABLE_PROPERTIES, create_table_sql


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


def test_new_tables_are_merge_on_read_v2_partitioned_by_config():
    sql = create_table_sql("local.db.events", partition_columns=("dt", "hr"))
    assert sql.startswith("CREATE TABLE IF NOT EXISTS `local`.`db`.`events` (")
    assert "PARTITIONED BY (`dt`, `hr`)" in sql
    for key, value in TABLE_PROPERTIES.items():
        assert f"'{key}' = '{value}'" in sql
    assert TABLE_PROPERTIES["write.delete.granularity"] == "file"
    assert {TABLE_PROPERTIES[f"write.{op}.mode"] for op in ("merge", "update", "delete")} == {
        "merge-on-read"
    }


def test_unpartitioned_table_has_no_partition_clause():
    assert "PARTITIONED" not in create_table_sql("local.db.events", partition_columns=())

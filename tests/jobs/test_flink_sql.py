"""The Flink writer's SQL (flink_writer.sql): what a Flink user writes by hand, built from the
writer's options, and the options it refuses."""

from __future__ import annotations

import pytest

from flink_writer import sql


def options(**overrides: object) -> sql.Options:
    values: dict[str, object] = {
        "catalog_uri": "http://127.0.0.1:8737/iceberg",
        "table": "db.events",
        "columns": "event_id STRING, dt STRING, hr INT, v BIGINT",
        "key": ("event_id", "dt", "hr"),
        "partitioned_by": ("dt", "hr"),
        "landing": "file:///data/landing",
    }
    values.update(overrides)
    return sql.Options(**values)  # type: ignore[arg-type]


def test_the_catalog_is_lakelocks_rest_front_with_the_jobs_token():
    ddl = sql.catalog(options(), token="s3cr'et")
    assert "CREATE CATALOG `lakelock`" in ddl
    assert "'catalog-type' = 'rest'" in ddl
    assert "'uri' = 'http://127.0.0.1:8737/iceberg'" in ddl
    assert "'token' = 's3cr''et'" in ddl  # a quote in the token stays inside its literal


def test_an_upsert_table_is_made_as_flink_users_make_it():
    ddl = sql.target(options())
    assert ddl.startswith("CREATE TABLE IF NOT EXISTS `lakelock`.`db`.`events`")
    assert "PRIMARY KEY (`event_id`, `dt`, `hr`) NOT ENFORCED" in ddl
    assert "PARTITIONED BY (`dt`, `hr`)" in ddl
    assert "'format-version' = '2'" in ddl and "'write.upsert.enabled' = 'true'" in ddl


def test_an_append_table_has_no_upsert():
    ddl = sql.target(options(mode="append", key=()))
    assert "PRIMARY KEY" not in ddl and "upsert" not in ddl


def test_the_source_reads_the_landing_folder_with_the_tables_columns_and_watches_it():
    ddl = sql.source(options(monitor_interval_s=2), [("event_id", "STRING"), ("hr", "INT")])
    assert "`event_id` STRING,\n  `hr` INT" in ddl
    assert "'path' = 'file:///data/landing'" in ddl
    assert "'source.monitor-interval' = '2000ms'" in ddl
    assert sql.insert(options()) == (
        "INSERT INTO `lakelock`.`db`.`events` SELECT * FROM `lakelock_source`"
    )


@pytest.mark.parametrize(
    ("overrides", "says"),
    [
        ({"key": ()}, "needs its key columns"),
        ({"mode": "merge"}, "upsert or append"),
        ({"table": "events"}, "namespace.table"),
        ({"table": "db.ev`ents"}, "namespace.table"),
        ({"key": ("id; DROP",)}, "plain column"),
    ],
)
def test_options_a_writer_refuses(overrides, says):
    with pytest.raises(ValueError, match=says):
        options(**overrides)


def test_a_missing_table_needs_its_columns():
    with pytest.raises(ValueError, match="--columns"):
        sql.target(options(columns=""))


def test_another_catalog_replaces_the_front_for_a_comparison():
    straight = {"catalog-impl": "org.apache.iceberg.jdbc.JdbcCatalog", "uri": "jdbc:mariadb://h/c"}
    ddl = sql.catalog(options(catalog_properties=straight), token="unused")
    assert "'catalog-impl' = 'org.apache.iceberg.jdbc.JdbcCatalog'" in ddl
    assert "rest" not in ddl and "unused" not in ddl


COLUMNS = [("event_id", "STRING"), ("dt", "STRING"), ("hr", "INT"), ("v", "BIGINT")]


def kafka(**overrides: object) -> sql.Options:
    values: dict[str, object] = {
        "source": "kafka",
        "landing": "",
        "kafka_bootstrap": "127.0.0.1:9092",
        "kafka_topic": "events.upserts",
    }
    values.update(overrides)
    return options(**values)


def test_an_upsert_kafka_topic_is_keyed_by_the_tables_key_and_ends_when_bounded():
    ddl = sql.source(kafka(bounded=True), COLUMNS)
    assert "'connector' = 'upsert-kafka'" in ddl
    assert "'topic' = 'events.upserts'" in ddl
    assert "'properties.bootstrap.servers' = '127.0.0.1:9092'" in ddl
    assert "'key.format' = 'json'" in ddl and "'value.format' = 'json'" in ddl
    assert "PRIMARY KEY (`event_id`, `dt`, `hr`) NOT ENFORCED" in ddl
    assert "'scan.bounded.mode' = 'latest-offset'" in ddl
    # upsert-kafka always starts at the earliest offset; it takes no startup mode
    assert "scan.startup.mode" not in ddl


@pytest.mark.parametrize(
    ("fmt", "schema", "says"),
    [
        ("debezium-json", False, "'debezium-json.schema-include' = 'false'"),
        ("debezium-json", True, "'debezium-json.schema-include' = 'true'"),
        ("canal-json", False, "'format' = 'canal-json'"),
    ],
)
def test_a_change_stream_topic_is_read_from_its_earliest_offset_in_its_format(fmt, schema, says):
    ddl = sql.source(kafka(kafka_format=fmt, debezium_schema=schema), COLUMNS)
    assert "'connector' = 'kafka'" in ddl and says in ddl
    assert "'scan.startup.mode' = 'earliest-offset'" in ddl
    assert "PRIMARY KEY" not in ddl and "scan.bounded.mode" not in ddl


def test_a_bounded_landing_folder_is_read_once():
    ddl = sql.source(options(bounded=True), COLUMNS)
    assert "'connector' = 'filesystem'" in ddl and "monitor-interval" not in ddl


@pytest.mark.parametrize(
    ("overrides", "says"),
    [
        ({"source": "pulsar"}, "files, kafka"),
        ({"source": "files", "landing": ""}, "--landing"),
        ({"kafka_format": "avro"}, "upsert-kafka, debezium-json, canal-json"),
        ({"kafka_bootstrap": "broker"}, "--kafka-bootstrap"),
        ({"kafka_bootstrap": "h:1' , 'x' = 'y"}, "--kafka-bootstrap"),
        ({"kafka_topic": "t'opic"}, "--kafka-topic"),
        ({"kafka_group": ""}, "consumer group"),
        ({"key": ()}, "needs its key columns"),
        ({"mode": "append"}, "writes an upsert table"),  # its deletes would land as rows
        ({"landing": "/data"}, "--landing is for a files source"),
    ],
)
def test_kafka_options_a_writer_refuses(overrides, says):
    with pytest.raises(ValueError, match=says):
        kafka(**overrides)


def mysql(**overrides: object) -> sql.Options:
    values: dict[str, object] = {
        "source": "mysql-cdc",
        "landing": "",
        "key": ("id",),
        "mysql_address": "db.internal:3306",
        "mysql_user": "cdc",
        "mysql_database": "shop",
        "mysql_table": "user_member",
    }
    values.update(overrides)
    return options(**values)


def test_a_mysql_table_is_read_snapshot_first_with_its_key_and_the_password_given_apart():
    ddl = sql.source(mysql(), [("id", "INT"), ("name", "STRING")], password="pa'ss")
    assert "'connector' = 'mysql-cdc'" in ddl
    assert "'hostname' = 'db.internal'" in ddl and "'port' = '3306'" in ddl
    assert "'database-name' = 'shop'" in ddl and "'table-name' = 'user_member'" in ddl
    assert "'scan.startup.mode' = 'initial'" in ddl and "'server-time-zone' = 'UTC'" in ddl
    assert "'password' = 'pa''ss'" in ddl
    assert "PRIMARY KEY (`id`) NOT ENFORCED" in ddl
    # Debezium's consistent snapshot unless asked: Flink CDC's chunks can skip changes
    assert "'scan.incremental.snapshot.enabled' = 'false'" in ddl
    assert "'server-id' = '5400'" in ddl  # its one reader's
    chunked = sql.source(mysql(mysql_snapshot="incremental"), [("id", "INT")], password="p")
    assert "'scan.incremental.snapshot.enabled' = 'true'" in chunked
    assert "'server-id' = '5400-5404'" in chunked


@pytest.mark.parametrize(
    ("overrides", "says"),
    [
        ({"mysql_address": "db"}, "--mysql"),
        ({"mysql_snapshot": "fast"}, "mysql snapshot"),
        ({"mysql_address": "a:1,b:2"}, "--mysql"),
        ({"mysql_database": "sh op"}, "--mysql-database"),
        ({"mysql_table": "t;x"}, "--mysql-table"),
        ({"key": ()}, "needs its key columns"),
        ({"mode": "append"}, "writes an upsert table"),
        ({"bounded": True}, "no --bounded"),
        ({"mysql_server_id": "0"}, "--mysql-server-id"),
        ({"mysql_server_id": "5400-5401", "parallelism": 3}, "one per reader"),
        ({"mysql_server_id": "5400;x"}, "--mysql-server-id"),
        ({"mysql_time_zone": "UTC'"}, "time zone"),
        ({"mysql_database": "shop\n"}, "--mysql-database"),  # a name is matched whole
    ],
)
def test_mysql_options_a_writer_refuses(overrides, says):
    with pytest.raises(ValueError, match=says):
        mysql(**overrides)

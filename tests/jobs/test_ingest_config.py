from pathlib import Path

import pytest

from ingest_gate.job.config import ConfigError, IngestConfig, config_from_args, load_config
from ingest_gate.job.source import file_reader_options, kafka_reader_options


def _problems(exc: pytest.ExceptionInfo[ConfigError]) -> dict[str, str]:
    return dict(exc.value.problems)


def test_runs_with_no_config_everything_under_var(monkeypatch):
    monkeypatch.delenv("LAKELOCK_TOKEN", raising=False)
    config = load_config()
    assert config.table == "local.db.events"
    assert config.format == "json" and config.file_pattern == "*.jsonl"
    assert config.key_columns == ()  # the table's identifier fields
    assert config.event_time_column == "event_time"
    for path in (config.landing_path, config.dead_letter_path, config.checkpoint_path):
        assert path.startswith("var/")
    assert config.catalog.warehouse.startswith("var/")
    assert config.policy == "fail" and config.gate_enabled


def test_toml_file_overrides_defaults_and_flags_override_the_file(tmp_path: Path):
    path = tmp_path / "ingest.toml"
    path.write_text(
        'table = "glue.db.clicks"\n'
        'policy = "proceed"\n'
        "max_hold_s = 60\n"
        'key_columns = ["event_id"]\n'
        "[catalog]\n"
        'name = "glue"\ntype = "glue"\nwarehouse = "s3://bucket/wh"\n'
        '[catalog.properties]\n"io-impl" = "org.apache.iceberg.aws.s3.S3FileIO"\n'
    )
    config = config_from_args(["--config", str(path), "--max-hold-s", "5", "--available-now"])
    assert config.table == "glue.db.clicks"
    assert config.catalog.type == "glue"
    assert config.catalog.spark_conf()["spark.sql.catalog.glue.io-impl"].endswith("S3FileIO")
    assert config.policy == "proceed"
    assert config.max_hold_s == 5.0
    assert config.available_now is True
    assert config.key_columns == ("event_id",)


def test_every_bad_value_is_named_with_its_rule():
    with pytest.raises(ConfigError) as exc:
        load_config(
            overrides={
                "policy": "maybe",
                "lease_ttl_s": 0,
                "format": "avro",
                "max_batches": 0,
                "table": "events",
            }
        )
    problems = _problems(exc)
    assert problems["policy"] == "must be one of fail, proceed"
    assert "lease_ttl_s" in problems
    assert problems["format"] == "must be one of json, debezium, canal"
    assert problems["max_batches"] == "must be >= 1 when set"
    assert "catalog.namespace.table" in problems["table"]
    # the message itself lists them, one per line
    assert "  policy: must be one of fail, proceed" in str(exc.value)


def test_wrong_types_and_unknown_keys_are_refused(tmp_path: Path):
    path = tmp_path / "ingest.toml"
    path.write_text('max_hold_s = "long"\navailable_now = "yes"\nlandng_path = "x"\n')
    with pytest.raises(ConfigError) as exc:
        load_config(path)
    problems = _problems(exc)
    assert problems["max_hold_s"] == "must be a float"
    assert problems["available_now"] == "must be true or false"
    assert problems["landng_path"] == "unknown key"


def test_table_must_live_in_the_configured_catalog():
    with pytest.raises(ConfigError) as exc:
        load_config(overrides={"table": "prod.db.events"})
    assert "catalog.name 'local'" in _problems(exc)["table"]


def test_event_time_cannot_be_a_key_column():
    with pytest.raises(ConfigError) as exc:
        load_config(overrides={"key_columns": "event_id,event_time"})
    assert _problems(exc)["event_time_column"] == "must not be a key column"


def test_token_comes_from_the_environment_when_not_configured(monkeypatch):
    monkeypatch.setenv("LAKELOCK_TOKEN", "s3cret")
    assert load_config().lakelock_token == "s3cret"
    assert load_config(overrides={"lakelock_token": "other"}).lakelock_token == "other"


def test_kafka_needs_servers_and_a_topic():
    with pytest.raises(ConfigError) as exc:
        load_config(overrides={"source": "kafka"})
    assert "kafka.bootstrap.servers" in str(exc.value)
    assert "subscribe" in str(exc.value)


def test_kafka_options_pass_through_over_safe_defaults():
    config = load_config(
        overrides={
            "source": "kafka",
            "kafka": {
                "kafka.bootstrap.servers": "b1:9092,b2:9092",
                "subscribe": "clicks",
                "startingOffsets": "latest",
                "maxOffsetsPerTrigger": 10000,
            },
        }
    )
    assert kafka_reader_options(config) == {
        "kafka.bootstrap.servers": "b1:9092,b2:9092",
        "subscribe": "clicks",
        "startingOffsets": "latest",
        "maxOffsetsPerTrigger": "10000",
        "failOnDataLoss": "true",
    }


def test_file_source_reads_only_finished_jsonl_files():
    options = file_reader_options(IngestConfig(max_files_per_trigger=2))
    assert options == {"pathGlobFilter": "*.jsonl", "maxFilesPerTrigger": "2"}
    options = file_reader_options(IngestConfig(file_pattern="changes-*.json"))
    assert options == {"pathGlobFilter": "changes-*.json"}


def test_format_time_zone_and_pattern_come_from_file_or_flags(tmp_path: Path):
    path = tmp_path / "ingest.toml"
    path.write_text('format = "canal"\ntime_zone = "Asia/Shanghai"\nkey_columns = ["userid"]\n')
    config = config_from_args(["--config", str(path), "--file-pattern", "*.json"])
    assert (config.format, config.time_zone, config.file_pattern) == (
        "canal",
        "Asia/Shanghai",
        "*.json",
    )
    assert config_from_args(["--format", "debezium"]).format == "debezium"
    with pytest.raises(ConfigError) as exc:
        load_config(overrides={"time_zone": "Mars/Olympus", "partition_columns": ["dt"]})
    problems = _problems(exc)
    assert problems["time_zone"].startswith("must be a time zone name")
    assert "takes its partition spec from it" in problems["partition_columns"]


def test_no_gate_flag_and_empty_master_for_spark_submit():
    config = config_from_args(["--no-gate", "--spark-master", ""])
    assert config.gate_enabled is False
    assert config.spark_master is None

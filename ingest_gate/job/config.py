"""The one configuration object of the ingest job.

Defaults run with no file and no flags: a Hadoop catalog and every path under `./var/`, the
landing-folder source, the lakelock service on 127.0.0.1:8737. A TOML file overrides defaults and
flags override the file:

    IngestConfig()                                            # defaults
    load_config("ingest.toml")                                # file over defaults
    load_config("ingest.toml", overrides={"policy": "proceed"})
    config_from_args(["--config", "ingest.toml", "--available-now"])

The TOML file has top-level keys named as the fields below, plus two tables:

    table = "local.db.events"
    format = "debezium"       # or "json" (one row per line, the default), "canal"
    key_columns = ["event_id", "dt", "hr"]    # default: the table's identifier fields
    [catalog]                 # CatalogConfig: name, type, warehouse, properties
    type = "glue"
    source = "kafka"
    on_data_loss = "stop"     # or "skip": see ingest_gate.job.kafka
    [kafka]                   # Spark's Kafka reader options, passed through
    "kafka.bootstrap.servers" = "b1:9092"     # also --kafka-bootstrap-servers
    subscribe = "events"                      # also --kafka-subscribe
    maxOffsetsPerTrigger = "10000"

Every bad value is reported at once by `ConfigError`, one line per key with the rule it broke.
"""

from __future__ import annotations

import argparse
import os
import re
import socket
from collections.abc import Mapping, Sequence
from dataclasses import field
from typing import Annotated, Any, Literal
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from pydantic import AfterValidator, BeforeValidator, Field, model_validator
from pydantic.dataclasses import dataclass

from ingest_gate.job.decode import Format
from jobkit.config import (
    STRICT,
    Bool,
    Columns,
    ConfigError,
    TextMap,
    build,
    catalog_input,
    layered,
    rule,
)
from jobkit.spark import CatalogConfig

__all__ = [
    "FORMATS",
    "POLICIES",
    "SCOPES",
    "SOURCES",
    "ConfigError",
    "IngestConfig",
    "build_parser",
    "config_from_args",
    "load_config",
]

Policy = Literal["fail", "proceed"]
"""What the gate does after `max_hold_s` without a lease: raise, or commit and warn."""

Scope = Literal["partitions", "table"]
"""What a commit lease covers: `partitions` the batch's partitions when the table allows it
(docs/design.md §4; else the whole table, logged once), `table` always the whole table."""

Source = Literal["files", "kafka"]
"""`files`: a landing folder of JSON-lines files; `kafka`: Kafka topics (reader options in the
`[kafka]` table: "kafka.bootstrap.servers" and one of subscribe, subscribePattern, assign)."""

DataLoss = Literal["stop", "skip"]
"""Source `kafka`, when the topic no longer holds records the job has not read (retention):
`stop` the job, naming the ranges lost; `skip` them, each range an `ingest.gap` audit event."""

POLICIES: tuple[str, ...] = Policy.__args__
SCOPES: tuple[str, ...] = Scope.__args__
SOURCES: tuple[str, ...] = Source.__args__
DATA_LOSS: tuple[str, ...] = DataLoss.__args__

FORMATS: tuple[str, ...] = Format.__args__
"""`json`: one row per line; `debezium`: Debezium change events; `canal`: canal-json messages
(see ingest_gate.job.decode)."""

_IDENT = re.compile(r"^[A-Za-z_][A-Za-z0-9_]{0,63}$")


def _default_holder() -> str:
    return f"ingest@{socket.gethostname()}:{os.getpid()}"


def _table_name(value: str) -> str:
    parts = value.split(".")
    if len(parts) != 3 or not all(_IDENT.match(p) for p in parts):
        raise ConfigError([("", "must be catalog.namespace.table, each part an identifier")])
    return value


def _time_zone(value: str) -> str:
    try:
        ZoneInfo(value)
    except (ValueError, ZoneInfoNotFoundError):
        raise ConfigError([("", "must be a time zone name, e.g. UTC or Asia/Shanghai")]) from None
    return value


def _gone(text: str) -> BeforeValidator:
    """A key that no longer means anything: refused with what to do instead."""

    def refuse(value: Any) -> Any:
        if value is not None:
            raise ConfigError([("", text)])
        return value

    return BeforeValidator(refuse)


def _when_set(check: Any, text: str) -> AfterValidator:
    return rule(lambda v: v is None or check(v), f"{text} when set")


_NotEmpty = Annotated[str, rule(lambda v: v.strip() != "", "must not be empty")]
_Positive = Annotated[float, rule(lambda v: v > 0, "must be > 0")]


@dataclass(frozen=True, config=STRICT)
class IngestConfig:
    """Everything the ingest job reads, validated when built. Build it with `load_config` or
    `config_from_args`, whose ConfigError lists every bad key; the constructor raises
    pydantic's ValidationError."""

    table: Annotated[str, AfterValidator(_table_name)] = "local.db.events"
    catalog: Annotated[CatalogConfig, BeforeValidator(catalog_input)] = field(
        default_factory=CatalogConfig
    )
    source: Source = "files"
    landing_path: _NotEmpty = "var/landing"
    dead_letter_path: _NotEmpty = "var/dead-letter"
    checkpoint_path: _NotEmpty = "var/checkpoints/ingest"
    kafka: TextMap = field(default_factory=dict)
    on_data_loss: DataLoss = "stop"
    max_files_per_trigger: Annotated[int | None, _when_set(lambda v: v >= 1, "must be >= 1")] = None
    trigger_interval_s: _Positive = 10.0
    available_now: Bool = False
    max_batches: Annotated[int | None, _when_set(lambda v: v >= 1, "must be >= 1")] = None
    run_for_s: Annotated[float | None, _when_set(lambda v: v > 0, "must be > 0")] = None
    format: Format = "json"
    file_pattern: _NotEmpty = "*.jsonl"
    # empty: the table's identifier fields
    key_columns: Columns = ()
    event_time_column: Annotated[str, rule(_IDENT.match, "must be a column name")] = "event_time"
    time_zone: Annotated[str, AfterValidator(_time_zone)] = "UTC"
    partition_columns: Annotated[
        None,
        _gone(
            "is no longer read: the job writes into an existing table and takes its partition "
            "spec from it; create the table PARTITIONED BY (...) and drop this key"
        ),
    ] = None
    gate_enabled: Bool = True
    lakelock_url: str = "http://127.0.0.1:8737"
    lakelock_token: str | None = None
    holder: Annotated[
        str,
        rule(lambda v: 0 < len(v) <= 255 and v.isprintable(), "must be 1-255 printable characters"),
    ] = field(default_factory=_default_holder)
    lease_ttl_s: Annotated[
        float, rule(lambda v: 1 <= v <= 3600, "must be within [1, 3600] (the service's range)")
    ] = 30.0
    max_hold_s: Annotated[float, rule(lambda v: v >= 0, "must be >= 0")] = 300.0
    policy: Policy = "fail"
    poll_s: _Positive = 10.0
    lease_scope: Scope = "partitions"
    max_lease_partitions: Annotated[int, Field(ge=1)] = 1000
    exact_filter_max_partitions: Annotated[int, Field(ge=0)] = 100
    spark_master: str | None = "local[*]"

    @model_validator(mode="after")
    def _together(self) -> IngestConfig:
        """The rules that involve more than one key."""
        problems: list[tuple[str, str]] = []
        catalog = self.table.split(".")[0]
        if catalog != self.catalog.name:
            problems.append(
                ("table", f"its catalog {catalog!r} must be catalog.name {self.catalog.name!r}")
            )
        if self.source == "kafka":
            if not self.kafka.get("kafka.bootstrap.servers"):
                problems.append(("kafka", 'needs "kafka.bootstrap.servers"'))
            if not any(self.kafka.get(k) for k in ("subscribe", "subscribePattern", "assign")):
                problems.append(("kafka", 'needs one of "subscribe", "subscribePattern", "assign"'))
        if self.format == "json" and self.event_time_column in self.key_columns:
            problems.append(("event_time_column", "must not be a key column"))
        if self.gate_enabled and not re.match(r"^https?://[^/]+", self.lakelock_url):
            problems.append(("lakelock_url", "must be an http(s):// URL (or disable the gate)"))
        if problems:
            raise ConfigError(problems)
        return self


def load_config(
    path: str | os.PathLike[str] | None = None,
    *,
    overrides: Mapping[str, Any] | None = None,
) -> IngestConfig:
    """Defaults, then the TOML file at `path` (if any), then `overrides`; validated.

    `lakelock_token` falls back to the environment variable `LAKELOCK_TOKEN`, so the secret
    need not sit in a file or on a command line.

    Raises:
        ConfigError: the file cannot be read as TOML, or a key is unknown, has the wrong type
            or breaks a rule (every one listed).
    """
    values = layered(path, overrides)
    if values.get("lakelock_token") is None and os.environ.get("LAKELOCK_TOKEN"):
        values["lakelock_token"] = os.environ["LAKELOCK_TOKEN"]
    return build(IngestConfig, values, title="invalid ingest configuration")


def build_parser() -> argparse.ArgumentParser:
    """The command line of `python -m ingest_gate`: `--config FILE` plus one flag per key."""
    parser = argparse.ArgumentParser(
        prog="lakelock-ingest",
        description="Upsert a stream of events into an Iceberg table, gated by lakelock.",
        epilog="The bearer token for the lakelock service comes from LAKELOCK_TOKEN (a job-role "
        "secret of the service's LAKELOCK_TOKENS). Exit status: 0 stopped as configured, 1 the "
        "query failed (a restart resumes from the checkpoint), 2 a bad configuration, 3 the "
        "Kafka topics lost records not read yet (see --on-data-loss).",
    )
    parser.add_argument("--config", help="TOML file; flags override it")
    flags = {
        "table": "Iceberg table catalog.namespace.table",
        "source": "files | kafka",
        "landing_path": "folder of JSON-lines files (source files)",
        "dead_letter_path": "folder for records that fail the schema",
        "checkpoint_path": "streaming checkpoint folder",
        "max_files_per_trigger": "files per micro-batch (source files)",
        "kafka_bootstrap_servers": "source kafka: the brokers (the kafka table's "
        '"kafka.bootstrap.servers")',
        "kafka_subscribe": "source kafka: comma-separated topics (the kafka table's subscribe)",
        "on_data_loss": "stop | skip: source kafka, when retention deleted records not read yet",
        "trigger_interval_s": "seconds between micro-batches",
        "max_batches": "stop after this many micro-batches",
        "run_for_s": "stop after this many seconds",
        "format": "json | debezium | canal: what each record is",
        "file_pattern": "file names the landing folder source reads (default *.jsonl)",
        "key_columns": "comma-separated merge key (default: the table's identifier fields)",
        "event_time_column": "format json: the column that orders versions of a key",
        "time_zone": "format canal and json: zone of date-times without an offset (UTC)",
        "lakelock_url": "base URL of the lakelock service",
        "holder": "holder name sent with each lease",
        "lease_ttl_s": "commit lease TTL in seconds",
        "max_hold_s": "longest wait for a commit lease before the policy applies",
        "policy": "fail | proceed (after max_hold_s)",
        "poll_s": "longest single wait per lease request",
        "lease_scope": "partitions | table (what each commit lease covers)",
        "max_lease_partitions": "a batch in more partitions leases the whole table",
        "exact_filter_max_partitions": "a batch in more partitions limits its MERGE by one IN "
        "list per partition field (a superset), not by each partition",
        "spark_master": "Spark master (omit under spark-submit: pass an empty string)",
    }
    for key, help_text in flags.items():
        parser.add_argument("--" + key.replace("_", "-"), dest=key, help=help_text)
    parser.add_argument(
        "--available-now",
        dest="available_now",
        action="store_const",
        const=True,
        help="process what is there now, then stop",
    )
    parser.add_argument(
        "--no-gate",
        dest="gate_enabled",
        action="store_const",
        const=False,
        help="write without leases (no lakelock service; Iceberg validation only)",
    )
    return parser


def config_from_args(argv: Sequence[str] | None = None) -> IngestConfig:
    """Parse `argv` (flags over `--config` over defaults).

    Raises:
        ConfigError: as `load_config`.
        SystemExit: on unknown flags or `--help` (argparse).
    """
    args = vars(build_parser().parse_args(argv))
    path = args.pop("config")
    overrides = {k: v for k, v in args.items() if v is not None}
    # two reader options have flags of their own; they go into the [kafka] table
    kafka = {
        option: overrides.pop(flag)
        for flag, option in (
            ("kafka_bootstrap_servers", "kafka.bootstrap.servers"),
            ("kafka_subscribe", "subscribe"),
        )
        if flag in overrides
    }
    if kafka:
        overrides["kafka"] = kafka
    if overrides.get("spark_master") == "":
        overrides["spark_master"] = None
    return load_config(path, overrides=overrides)

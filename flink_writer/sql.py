"""The Flink SQL the writer runs, built from its options: pure functions, so they are tested
without Flink.

    catalog(name, uri=..., token=...)          CREATE CATALOG over lakelock's /iceberg
    target(options)                             CREATE TABLE IF NOT EXISTS, with the key
    source(options, columns)                    the source as a temporary table: a landing
                                                folder, or a Kafka topic (below)
    insert(options)                             INSERT INTO target SELECT * FROM source

Kafka (`source="kafka"`, Flink's Kafka SQL connector) in one of the change formats the seeds
write, each read as a changelog the upsert table takes:

    upsert-kafka     the message key (JSON of the key columns) and value (JSON of the row);
                     a tombstone (null value) deletes its key
    debezium-json    Debezium's change events (`before`/`after`/`op`), with or without its
                     schema envelope (`debezium_schema`); a delete deletes its row
    canal-json       canal's change events (`data`/`old`/`type`)

`bounded` ends a Kafka source at the topic's offsets when the job started (Flink's
`scan.bounded.mode = latest-offset`), and reads a landing folder once: the job then finishes,
its last checkpoint committed, so a run can be checked.

Names are quoted with backticks; a value in a WITH clause is a quoted literal. The token is a
catalog property, so it is passed here and never logged (flink_writer.job logs the statements
without it).
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass, field

__all__ = [
    "FORMATS",
    "MYSQL_SNAPSHOTS",
    "SOURCES",
    "Options",
    "catalog",
    "insert",
    "is_address",
    "quote",
    "source",
    "target",
]

SOURCE = "lakelock_source"
"""The temporary table over the source: the landing folder, the topic, the MySQL table."""

SOURCES = ("files", "kafka", "mysql-cdc")
FORMATS = ("upsert-kafka", "debezium-json", "canal-json")
"""A Kafka topic's formats: Flink's upsert-kafka connector, or its kafka connector with a
change format."""
MYSQL_SNAPSHOTS = ("consistent", "incremental")
"""How a mysql-cdc source reads the table before its binlog (docs/flink.md): one consistent
snapshot under a brief read lock, or Flink CDC's lock-free chunks, which can skip a change
committed in the snapshot's last second on a server without GTIDs (MariaDB, or MySQL with
`gtid_mode=OFF`)."""

# each matched whole (fullmatch: a trailing newline is no part of a name)
_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
# a Kafka topic's legal name; a bootstrap list of host:port; a server id or a range of them
_TOPIC = re.compile(r"[A-Za-z0-9._-]{1,249}")
_BOOTSTRAP = re.compile(r"[A-Za-z0-9.-]+:\d+(,[A-Za-z0-9.-]+:\d+)*")
_SERVER_IDS = re.compile(r"(\d{1,10})(-(\d{1,10}))?")
_TIME_ZONE = re.compile(r"[A-Za-z0-9_/+:-]{1,64}")


def is_address(text: str) -> bool:
    """One `host:port`."""
    return bool(_BOOTSTRAP.fullmatch(text)) and "," not in text


@dataclass(frozen=True)
class Options:
    """What the writer writes, and from where.

    `table` is `namespace.table` inside the catalog; `columns` the table's columns in Flink SQL
    (`event_id STRING, dt STRING, v BIGINT`), used when the job creates the table; `key` the
    primary key of an upsert table (Flink's `PRIMARY KEY ... NOT ENFORCED`, which Iceberg makes
    the identifier fields); `partitioned_by` identity partition columns.
    """

    catalog_uri: str
    table: str
    mode: str = "upsert"  # "upsert" | "append"
    columns: str = ""
    key: Sequence[str] = ()
    partitioned_by: Sequence[str] = ()
    landing: str = ""
    monitor_interval_s: float = 1.0
    catalog_name: str = "lakelock"
    properties: dict[str, str] = field(default_factory=dict)
    # another Iceberg catalog than lakelock's front (its Flink catalog properties, e.g.
    # catalog-impl, uri, warehouse): the same job straight to the catalog, for comparison
    catalog_properties: dict[str, str] = field(default_factory=dict)
    source: str = "files"  # one of SOURCES
    kafka_bootstrap: str = ""
    kafka_topic: str = ""
    kafka_format: str = "upsert-kafka"  # one of FORMATS
    kafka_group: str = "lakelock-flink-writer"
    debezium_schema: bool = False  # Debezium's JSON carries its schema envelope
    bounded: bool = False
    # mysql-cdc: the database's host:port, user, database and table (the password is the
    # job's, from its environment, never an option)
    mysql_address: str = ""
    mysql_user: str = ""
    mysql_database: str = ""
    mysql_table: str = ""
    mysql_server_id: str = "5400-5404"  # ids the readers take, one per parallel reader
    mysql_snapshot: str = "consistent"  # one of MYSQL_SNAPSHOTS
    mysql_time_zone: str = "UTC"  # the server's, for its TIMESTAMP columns
    parallelism: int = 1

    def __post_init__(self) -> None:
        if self.mode not in ("upsert", "append"):
            raise ValueError(f"mode {self.mode!r}: upsert or append")
        self._check_source()
        if self.mode == "upsert" and not self.key:
            raise ValueError("an upsert writer needs its key columns (--key event_id,dt,hr)")
        parts = self.table.split(".")
        if len(parts) != 2 or not all(_NAME.fullmatch(p) for p in parts):
            raise ValueError(f"table {self.table!r}: namespace.table, each a plain name")
        for name in (*self.key, *self.partitioned_by, self.catalog_name):
            if not _NAME.fullmatch(name):
                raise ValueError(f"{name!r} is not a plain column or catalog name")

    def _check_source(self) -> None:
        if self.source not in SOURCES:
            raise ValueError(f"source {self.source!r}: one of {', '.join(SOURCES)}")
        if self.source == "files":
            if not self.landing:
                raise ValueError("a files source needs its landing folder (--landing DIR)")
            return
        if self.landing:
            raise ValueError(f"--landing is for a files source, not {self.source}")
        if self.mode != "upsert":
            # a change stream's deletes and updates would land as rows of an append table
            raise ValueError(f"a {self.source} source writes an upsert table (--mode upsert)")
        if self.source == "kafka":
            self._check_kafka()
        else:
            self._check_mysql()

    def _check_mysql(self) -> None:
        if self.mysql_snapshot not in MYSQL_SNAPSHOTS:
            raise ValueError(
                f"mysql snapshot {self.mysql_snapshot!r}: consistent or incremental "
                "(--mysql-snapshot)"
            )
        if not is_address(self.mysql_address):
            raise ValueError(f"mysql address {self.mysql_address!r}: host:port (--mysql)")
        for what, name in (("database", self.mysql_database), ("table", self.mysql_table)):
            if not _NAME.fullmatch(name):
                raise ValueError(f"mysql {what} {name!r}: a plain name (--mysql-{what})")
        if self.bounded:
            raise ValueError("a mysql-cdc source reads its binlog without end (no --bounded)")
        if not _TIME_ZONE.fullmatch(self.mysql_time_zone):
            raise ValueError(f"mysql time zone {self.mysql_time_zone!r}: a zone name")
        ids = _SERVER_IDS.fullmatch(self.mysql_server_id)
        first, last = (int(ids[1]), int(ids[3] or ids[1])) if ids else (1, 0)
        if not ids or not 0 < first <= last or last - first + 1 < self.parallelism:
            raise ValueError(
                f"mysql server id {self.mysql_server_id!r}: an id or a range of them (5400-5404), "
                "one per reader, none any other replica of the server uses (--mysql-server-id)"
            )

    def _check_kafka(self) -> None:
        if self.kafka_format not in FORMATS:
            raise ValueError(f"format {self.kafka_format!r}: one of {', '.join(FORMATS)}")
        if not _BOOTSTRAP.fullmatch(self.kafka_bootstrap):
            raise ValueError(
                f"kafka bootstrap {self.kafka_bootstrap!r}: host:port[,host:port...] "
                "(--kafka-bootstrap)"
            )
        if not _TOPIC.fullmatch(self.kafka_topic):
            raise ValueError(f"kafka topic {self.kafka_topic!r}: a topic's name (--kafka-topic)")
        if not _TOPIC.fullmatch(self.kafka_group):
            raise ValueError(f"kafka group {self.kafka_group!r}: a consumer group's name")

    @property
    def qualified(self) -> str:
        return ".".join(quote(p) for p in (self.catalog_name, *self.table.split(".")))


def quote(name: str) -> str:
    return "`" + name.replace("`", "``") + "`"


def _literal(value: str) -> str:
    return "'" + value.replace("'", "''") + "'"


def _with(properties: dict[str, str]) -> str:
    return ",\n  ".join(f"{_literal(k)} = {_literal(v)}" for k, v in properties.items())


def catalog(options: Options, *, token: str) -> str:
    """The Iceberg REST catalog at lakelock's front, with the job's token; or the catalog
    `options.catalog_properties` name, without lakelock."""
    props = {"type": "iceberg"}
    if options.catalog_properties:
        props.update(options.catalog_properties)
    else:
        props.update({"catalog-type": "rest", "uri": options.catalog_uri, "token": token})
    return f"CREATE CATALOG {quote(options.catalog_name)} WITH (\n  {_with(props)}\n)"


def target(options: Options) -> str:
    """The table, when the job creates it: format v2; an upsert table with its key, upsert on
    (equality deletes, one commit per checkpoint), as Flink users write them."""
    if not options.columns:
        raise ValueError("the table does not exist: give its columns (--columns) to create it")
    columns = options.columns
    if options.key:
        columns += f",\n  PRIMARY KEY ({', '.join(map(quote, options.key))}) NOT ENFORCED"
    props = {"format-version": "2", **options.properties}
    if options.mode == "upsert":
        props["write.upsert.enabled"] = "true"
    partitioned = (
        f"\nPARTITIONED BY ({', '.join(map(quote, options.partitioned_by))})"
        if options.partitioned_by
        else ""
    )
    return (
        f"CREATE TABLE IF NOT EXISTS {options.qualified} (\n  {columns}\n){partitioned}\n"
        f"WITH (\n  {_with(props)}\n)"
    )


def source(options: Options, columns: Sequence[tuple[str, str]], *, password: str = "") -> str:
    """The source as a table of the target's columns (name, SQL type, as `DESCRIBE` answers
    them): the landing folder's JSON-lines files, watched for new files every
    `monitor_interval_s` (read once when `bounded`), or a Kafka topic (`_kafka`)."""
    fields = ",\n  ".join(f"{quote(name)} {kind}" for name, kind in columns)
    if options.source == "kafka":
        props = _kafka(options)
        if options.kafka_format == "upsert-kafka":  # the key's columns are the message key's
            fields += f",\n  PRIMARY KEY ({', '.join(map(quote, options.key))}) NOT ENFORCED"
    elif options.source == "mysql-cdc":
        props = _mysql_cdc(options, password)
        fields += f",\n  PRIMARY KEY ({', '.join(map(quote, options.key))}) NOT ENFORCED"
    else:
        props = {"connector": "filesystem", "path": options.landing, "format": "json"}
        if not options.bounded:
            props["source.monitor-interval"] = f"{int(options.monitor_interval_s * 1000)}ms"
    return f"CREATE TEMPORARY TABLE {quote(SOURCE)} (\n  {fields}\n) WITH (\n  {_with(props)}\n)"


def _mysql_cdc(options: Options, password: str) -> dict[str, str]:
    """Flink CDC's MySQL source: a snapshot of the table, then its binlog from the position the
    snapshot read at (`scan.startup.mode = initial`); a restart from a checkpoint goes on from
    the checkpoint's binlog position.

    A `consistent` snapshot is Debezium's: a read lock held only while the binlog position is
    read, then the rows in one consistent-snapshot transaction, so no change is lost or seen
    twice. An `incremental` one reads chunks without a lock and merges the binlog read meanwhile;
    it decides which binlog events came after a chunk by their second when the server has no
    GTIDs, and skips those of that second (apache/flink-cdc#2794)."""
    host, port = options.mysql_address.rsplit(":", 1)
    incremental = options.mysql_snapshot == "incremental"
    # a range, one id per parallel reader; Debezium's one reader takes a single id
    server_id = options.mysql_server_id if incremental else options.mysql_server_id.split("-")[0]
    return {
        "connector": "mysql-cdc",
        "hostname": host,
        "port": port,
        "username": options.mysql_user,
        "password": password,
        "database-name": options.mysql_database,
        "table-name": options.mysql_table,
        "server-id": server_id,
        "server-time-zone": options.mysql_time_zone,
        "scan.startup.mode": "initial",
        "scan.incremental.snapshot.enabled": str(incremental).lower(),
    }


def _kafka(options: Options) -> dict[str, str]:
    """The Kafka connector's options for the topic in `options.kafka_format`. A job started
    without a checkpoint reads the topic from its earliest offset (an upsert table then
    converges to the topic's last value per key); restarted from one, from its offsets."""
    props = {
        "topic": options.kafka_topic,
        "properties.bootstrap.servers": options.kafka_bootstrap,
        "properties.group.id": options.kafka_group,
    }
    if options.kafka_format == "upsert-kafka":
        props = {
            "connector": "upsert-kafka",
            **props,
            "key.format": "json",
            "value.format": "json",
        }
    else:
        props = {
            "connector": "kafka",
            **props,
            "scan.startup.mode": "earliest-offset",
            "format": options.kafka_format,
        }
        if options.kafka_format == "debezium-json":
            props["debezium-json.schema-include"] = str(options.debezium_schema).lower()
    if options.bounded:
        props["scan.bounded.mode"] = "latest-offset"
    return props


def insert(options: Options) -> str:
    return f"INSERT INTO {options.qualified} SELECT * FROM {quote(SOURCE)}"

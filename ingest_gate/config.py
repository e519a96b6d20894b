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
    key_columns = ["event_id", "dt", "hr"]
    [catalog]                 # CatalogConfig: name, type, warehouse, properties
    type = "glue"
    [kafka]                   # reader options passed through, e.g. "kafka.bootstrap.servers"
    "kafka.bootstrap.servers" = "b1:9092"
    subscribe = "events"

Every bad value is reported at once by `ConfigError`, one line per key with the rule it broke.
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import re
import socket
import tomllib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ingest_gate.schema import EVENT_COLUMNS
from ingest_gate.spark import CatalogConfig

__all__ = [
    "ConfigError",
    "IngestConfig",
    "POLICIES",
    "SCOPES",
    "SOURCES",
    "config_from_args",
    "load_config",
    "build_parser",
]

POLICIES = ("fail", "proceed")
"""What the gate does after `max_hold_s` without a lease: raise, or commit and warn."""

SCOPES = ("partitions", "table")
"""What a commit lease covers: `partitions` the batch's partitions when the table allows it
(DESIGN.md §3b; else the whole table, logged once), `table` always the whole table."""

SOURCES = ("files", "kafka")
"""`files`: a landing folder of JSON-lines files; `kafka`: a Kafka topic (cluster only)."""

_IDENT = re.compile(r"^[A-Za-z_][A-Za-z0-9_]{0,63}$")


class ConfigError(ValueError):
    """One or more configuration values broke a rule; fix the keys named, one per line."""

    def __init__(self, problems: Sequence[tuple[str, str]]) -> None:
        self.problems = list(problems)
        lines = [f"  {key}: {rule}" for key, rule in self.problems]
        super().__init__("invalid ingest configuration:\n" + "\n".join(lines))


def _default_holder() -> str:
    return f"ingest@{socket.gethostname()}:{os.getpid()}"


@dataclass(frozen=True)
class IngestConfig:
    """Everything the ingest job reads. Build it with `load_config` or `config_from_args`; the
    constructor does not validate, `validate()` does (and `load_config` calls it)."""

    table: str = "local.db.events"
    catalog: CatalogConfig = field(default_factory=CatalogConfig)
    source: str = "files"
    landing_path: str = "var/landing"
    dead_letter_path: str = "var/dead-letter"
    checkpoint_path: str = "var/checkpoints/ingest"
    kafka: Mapping[str, str] = field(default_factory=dict)
    max_files_per_trigger: int | None = None
    trigger_interval_s: float = 10.0
    available_now: bool = False
    max_batches: int | None = None
    run_for_s: float | None = None
    key_columns: tuple[str, ...] = ("event_id", "dt", "hr")
    event_time_column: str = "event_time"
    partition_columns: tuple[str, ...] = ("dt", "hr")
    gate_enabled: bool = True
    lakelock_url: str = "http://127.0.0.1:8737"
    lakelock_token: str | None = None
    holder: str = field(default_factory=_default_holder)
    lease_ttl_s: float = 30.0
    max_hold_s: float = 300.0
    policy: str = "fail"
    poll_s: float = 10.0
    lease_scope: str = "partitions"
    max_lease_partitions: int = 1000
    spark_master: str | None = "local[*]"

    def validate(self) -> IngestConfig:
        """Return self when every value is usable.

        Raises:
            ConfigError: listing every bad key and the rule it broke.
        """
        problems: list[tuple[str, str]] = []
        columns = {name for name, _ in EVENT_COLUMNS}
        parts = self.table.split(".")
        if len(parts) != 3 or not all(_IDENT.match(p) for p in parts):
            problems.append(("table", "must be catalog.namespace.table, each part an identifier"))
        elif parts[0] != self.catalog.name:
            problems.append(
                ("table", f"its catalog {parts[0]!r} must be catalog.name {self.catalog.name!r}")
            )
        if self.source not in SOURCES:
            problems.append(("source", f"must be one of {', '.join(SOURCES)}"))
        if self.source == "kafka":
            if not self.kafka.get("kafka.bootstrap.servers"):
                problems.append(("kafka", 'needs "kafka.bootstrap.servers"'))
            if not any(self.kafka.get(k) for k in ("subscribe", "subscribePattern", "assign")):
                problems.append(("kafka", 'needs one of "subscribe", "subscribePattern", "assign"'))
        for name in ("landing_path", "dead_letter_path", "checkpoint_path"):
            if not str(getattr(self, name)).strip():
                problems.append((name, "must not be empty"))
        for name in ("trigger_interval_s", "poll_s"):
            if not getattr(self, name) > 0:
                problems.append((name, "must be > 0"))
        if not self.max_hold_s >= 0:
            problems.append(("max_hold_s", "must be >= 0"))
        if not 1 <= self.lease_ttl_s <= 3600:
            problems.append(("lease_ttl_s", "must be within [1, 3600] (the service's range)"))
        for name in ("max_batches", "max_files_per_trigger"):
            value = getattr(self, name)
            if value is not None and value < 1:
                problems.append((name, "must be >= 1 when set"))
        if self.run_for_s is not None and not self.run_for_s > 0:
            problems.append(("run_for_s", "must be > 0 when set"))
        if self.lease_scope not in SCOPES:
            problems.append(("lease_scope", f"must be one of {', '.join(SCOPES)}"))
        if self.max_lease_partitions < 1:
            problems.append(("max_lease_partitions", "must be >= 1"))
        if self.policy not in POLICIES:
            problems.append(("policy", f"must be one of {', '.join(POLICIES)}"))
        if not self.key_columns:
            problems.append(("key_columns", "must name at least one column"))
        for name in ("key_columns", "partition_columns"):
            unknown = [c for c in getattr(self, name) if c not in columns]
            if unknown:
                problems.append((name, f"unknown column(s) {unknown}; known: {sorted(columns)}"))
        if self.event_time_column not in columns:
            problems.append(("event_time_column", f"unknown column; known: {sorted(columns)}"))
        elif self.event_time_column in self.key_columns:
            problems.append(("event_time_column", "must not be a key column"))
        if self.gate_enabled and not re.match(r"^https?://[^/]+", self.lakelock_url):
            problems.append(("lakelock_url", "must be an http(s):// URL (or disable the gate)"))
        if not self.holder or len(self.holder) > 255 or not self.holder.isprintable():
            problems.append(("holder", "must be 1-255 printable characters"))
        if problems:
            raise ConfigError(problems)
        return self


_SCALARS = {f.name for f in dataclasses.fields(IngestConfig)} - {"catalog", "kafka"}
_TUPLES = {"key_columns", "partition_columns"}


def _catalog_from(data: Any, problems: list[tuple[str, str]]) -> CatalogConfig | None:
    if not isinstance(data, Mapping):
        problems.append(("catalog", "must be a table of name, type, warehouse, properties"))
        return None
    unknown = set(data) - {"name", "type", "warehouse", "properties"}
    if unknown:
        problems.append(("catalog", f"unknown key(s) {sorted(unknown)}"))
        return None
    kwargs = dict(data)
    if "properties" in kwargs:
        kwargs["properties"] = {str(k): str(v) for k, v in dict(kwargs["properties"]).items()}
    try:
        return CatalogConfig(**kwargs)
    except (TypeError, ValueError) as exc:
        problems.append(("catalog", str(exc)))
        return None


def _coerce(values: Mapping[str, Any]) -> dict[str, Any]:
    """Turn loosely typed values (TOML, flags, env) into the field types, or raise ConfigError."""
    problems: list[tuple[str, str]] = []
    out: dict[str, Any] = {}
    types = {f.name: f.type for f in dataclasses.fields(IngestConfig)}
    for key, value in values.items():
        if key == "catalog":
            catalog = value if isinstance(value, CatalogConfig) else _catalog_from(value, problems)
            if catalog is not None:
                out[key] = catalog
            continue
        if key == "kafka":
            if not isinstance(value, Mapping):
                problems.append(("kafka", "must be a table of reader options"))
            else:
                out[key] = {str(k): str(v) for k, v in value.items()}
            continue
        if key not in _SCALARS:
            problems.append((key, "unknown key"))
            continue
        kind = str(types[key])
        try:
            if key in _TUPLES:
                if isinstance(value, str):
                    value = [v.strip() for v in value.split(",") if v.strip()]
                if not isinstance(value, list | tuple) or not all(
                    isinstance(v, str) for v in value
                ):
                    raise TypeError("must be a list of column names")
                out[key] = tuple(value)
            elif value is None:
                if "None" not in kind:
                    raise TypeError("must be set")
                out[key] = None
            elif kind.startswith("bool"):
                if isinstance(value, str) and value.lower() in ("true", "false"):
                    value = value.lower() == "true"
                if not isinstance(value, bool):
                    raise TypeError("must be true or false")
                out[key] = value
            elif kind.startswith("float"):
                if isinstance(value, bool):
                    raise TypeError("must be a number")
                out[key] = float(value)
            elif kind.startswith("int"):
                if isinstance(value, bool) or (isinstance(value, float) and not value.is_integer()):
                    raise TypeError("must be an integer")
                out[key] = int(value)
            else:
                if not isinstance(value, str):
                    raise TypeError("must be a string")
                out[key] = value
        except (TypeError, ValueError) as exc:
            rule = str(exc) if isinstance(exc, TypeError) else f"must be a {kind.split()[0]}"
            problems.append((key, rule))
    if problems:
        raise ConfigError(problems)
    return out


def load_config(
    path: str | os.PathLike[str] | None = None,
    *,
    overrides: Mapping[str, Any] | None = None,
) -> IngestConfig:
    """Defaults, then the TOML file at `path` (if any), then `overrides`; validated.

    `lakelock_token` falls back to the environment variable `LAKELOCK_TOKEN`, so the secret
    need not sit in a file or on a command line.

    Raises:
        ConfigError: a key is unknown, has the wrong type, or breaks a rule.
        FileNotFoundError: `path` does not exist.
        tomllib.TOMLDecodeError: the file is not TOML.
    """
    values: dict[str, Any] = {}
    if path is not None:
        values.update(tomllib.loads(Path(path).read_text(encoding="utf-8")))
    values.update({k: v for k, v in (overrides or {}).items()})
    if values.get("lakelock_token") is None and os.environ.get("LAKELOCK_TOKEN"):
        values["lakelock_token"] = os.environ["LAKELOCK_TOKEN"]
    return IngestConfig(**_coerce(values)).validate()


def build_parser() -> argparse.ArgumentParser:
    """The command line of `python -m ingest_gate`: `--config FILE` plus one flag per key."""
    parser = argparse.ArgumentParser(
        prog="lakelock-ingest",
        description="Upsert a stream of events into an Iceberg table, gated by lakelock.",
        epilog="The bearer token for the lakelock service comes from LAKELOCK_TOKEN (a job-role "
        "secret of the service's LAKELOCK_TOKENS). Exit status: 0 stopped as configured, 1 the "
        "query failed (a restart resumes from the checkpoint), 2 a bad configuration.",
    )
    parser.add_argument("--config", help="TOML file; flags override it")
    flags = {
        "table": "Iceberg table catalog.namespace.table",
        "source": "files | kafka",
        "landing_path": "folder of JSON-lines files (source files)",
        "dead_letter_path": "folder for records that fail the schema",
        "checkpoint_path": "streaming checkpoint folder",
        "max_files_per_trigger": "files per micro-batch (source files)",
        "trigger_interval_s": "seconds between micro-batches",
        "max_batches": "stop after this many micro-batches",
        "run_for_s": "stop after this many seconds",
        "key_columns": "comma-separated key columns",
        "event_time_column": "column that orders versions of a key",
        "partition_columns": "comma-separated partition columns of a new table",
        "lakelock_url": "base URL of the lakelock service",
        "holder": "holder name sent with each lease",
        "lease_ttl_s": "commit lease TTL in seconds",
        "max_hold_s": "longest wait for a commit lease before the policy applies",
        "policy": "fail | proceed (after max_hold_s)",
        "poll_s": "longest single wait per lease request",
        "lease_scope": "partitions | table (what each commit lease covers)",
        "max_lease_partitions": "a batch in more partitions leases the whole table",
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
    if overrides.get("spark_master") == "":
        overrides["spark_master"] = None
    return load_config(path, overrides=overrides)

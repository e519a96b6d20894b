"""What the compactor does to which table, from a TOML file or defaults.

    load_config("compactor.toml")                # CompactorConfig
    CompactorConfig(tables=(TableConfig("local.db.events"),))
    config.table("local.db.events")              # the table's TableConfig (defaults if unlisted)
    parse_duration("10m"), parse_duration("1h30m"), parse_duration("7d")
    check_floors(table_config)                   # raises RetentionRefused

A file looks like this; `[defaults]` applies to every table, a `[[tables]]` entry overrides it:

    every = "10m"
    [service]
    url = "http://127.0.0.1:8737"
    token_env = "LAKELOCK_TOKEN"        # the bearer token is read from this variable
    [catalog]
    name = "local"
    type = "hadoop"
    warehouse = "var/warehouse"
    [spark]
    master = "local[2]"
    [defaults.lease]
    ttl = "60s"
    max_wait = "10m"                    # drain wait before the run is skipped
    scope = "partitions"                # one lease per group of partitions; "table": one
                                        # whole-table lease for every step, as before scopes
    [defaults.plan]
    small_file_fraction = 0.75          # small = under this fraction of the target size
    min_small_files = 10
    min_delete_files = 10
    max_delete_ratio = 0.25             # delete files per data file
    max_snapshots = 500
    recent_days = 3                     # rewrite `recent_column >= today - 3 days` only
    recent_column = "dt"
    full_rewrite_at = "03:00"           # UTC; rewrite-all once a day at or after it
    hot_window = "15m"                  # a partition updated within it is hot (default 0: off)
    hot_min_small_files = 50            # a hot partition is rewritten, alone, only above these
    hot_min_delete_files = 50
    max_partitions_per_group = 10       # cold partitions rewritten under one lease
    [defaults.rewrite_data_files]
    strategy = "binpack"                # or "sort" (sort_order = "event_id ASC NULLS LAST")
    options = { "target-file-size-bytes" = 134217728, "min-input-files" = 5 }
    [defaults.rewrite_manifests]
    min_small_manifests = 50            # rewrite when this many manifests are small
    small_manifest_bytes = 6291456      # small = under 6 MiB (Iceberg's target is 8 MiB)
    [defaults.expire_snapshots]
    older_than = "5d"
    retain_last = 10
    [[tables]]
    name = "local.db.events"
    plan = { recent_days = 2 }

Retention floors are fixed, not settings: `expire_snapshots.older_than` at least 24h and
`retain_last` at least 5, `remove_orphan_files.older_than` at least 24h (`FLOORS`). A value
below its floor is refused at load time, not clamped: a config that asks for less is a mistake an
operator must see, not one to paper over.
"""

from __future__ import annotations

import re
import tomllib
from collections.abc import Mapping
from dataclasses import dataclass, field, fields, replace
from datetime import time, timedelta
from pathlib import Path
from types import MappingProxyType
from typing import Any

from ingest_gate.spark import CatalogConfig

__all__ = [
    "ConfigError",
    "RetentionRefused",
    "LeaseConfig",
    "PlanConfig",
    "RewriteDataFilesConfig",
    "RewritePositionDeletesConfig",
    "RewriteManifestsConfig",
    "ExpireSnapshotsConfig",
    "RemoveOrphanFilesConfig",
    "TableConfig",
    "CompactorConfig",
    "DEFAULT_REWRITE_OPTIONS",
    "FLOORS",
    "parse_duration",
    "format_duration",
    "check_floors",
    "load_config",
    "config_from_dict",
]


class ConfigError(ValueError):
    """The configuration is malformed; fix the key named in the message."""


class RetentionRefused(ConfigError):
    """A retention setting is below its safety floor; raise it (or lower the floor on purpose)."""


DEFAULT_REWRITE_OPTIONS: Mapping[str, str] = MappingProxyType(
    {
        "target-file-size-bytes": "134217728",
        "min-input-files": "5",
        "max-concurrent-file-group-rewrites": "5",
        # off: a partial commit could land after the lease is lost (see compactor.run)
        "partial-progress.enabled": "false",
        # merge-on-read tables: a data file with any position delete is worth rewriting
        "delete-file-threshold": "1",
    }
)


@dataclass(frozen=True)
class Floors:
    """The retention floors; fixed, no table can ask for less (see check_floors)."""

    # younger snapshots may still be read by running queries and the replay guard
    snapshot_age: timedelta = timedelta(hours=24)
    snapshots_retained: int = 5
    # a younger file may belong to a write that has not committed yet
    orphan_file_age: timedelta = timedelta(hours=24)


FLOORS = Floors()

_DURATION = re.compile(r"(\d+(?:\.\d+)?)\s*(ms|s|m|h|d|w)")
_UNITS = {"ms": 0.001, "s": 1, "m": 60, "h": 3600, "d": 86400, "w": 604800}


def parse_duration(text: str | int | float) -> timedelta:
    """`"90s"`, `"10m"`, `"1h30m"`, `"7d"` (or a number of seconds) as a timedelta.

    Raises:
        ConfigError: not a duration.
    """
    if isinstance(text, bool):
        raise ConfigError(f"not a duration: {text!r}")
    if isinstance(text, int | float):
        return timedelta(seconds=float(text))
    compact = text.strip().lower().replace(" ", "")
    parts = _DURATION.findall(compact)
    if not parts or "".join(n + u for n, u in parts) != compact:
        raise ConfigError(f"not a duration: {text!r} (use e.g. 30s, 10m, 1h30m, 7d)")
    return timedelta(seconds=sum(float(n) * _UNITS[u] for n, u in parts))


def format_duration(value: timedelta) -> str:
    """`"5d"`, `"24h"`, `"90m"`, `"45s"`: days from two days up, as people say them."""
    seconds = value.total_seconds()
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if seconds >= size * (2 if unit == "d" else 1) and seconds % size == 0:
            return f"{int(seconds // size)}{unit}"
    return f"{seconds:g}s"


@dataclass(frozen=True)
class LeaseConfig:
    """How the maintenance lease is held.

    LeaseConfig(ttl=timedelta(seconds=60), max_wait=timedelta(minutes=10))
    """

    ttl: timedelta = timedelta(seconds=60)
    # how long to keep the intent open while commits drain before skipping the run
    max_wait: timedelta = timedelta(minutes=10)
    # None: the Renewer's default (two thirds of the TTL)
    renew_deadline: timedelta | None = None
    # "partitions": a scoped lease per group of partitions (compactor.plan); "table": one
    # whole-table lease for every step, the behaviour before scopes (for comparison)
    scope: str = "partitions"


@dataclass(frozen=True)
class PlanConfig:
    """When a run pays off (see compactor.plan)."""

    small_file_fraction: float = 0.75
    min_small_files: int = 10
    min_delete_files: int = 10
    max_delete_ratio: float = 0.25
    max_snapshots: int = 500
    recent_days: int | None = None
    recent_column: str = "dt"
    full_rewrite_at: time | None = None
    # a partition a commit touched within this window is hot (0: only a live commit lease on
    # it makes it hot); hot partitions are rewritten only above the hot thresholds, alone
    hot_window: timedelta = timedelta(0)
    hot_min_small_files: int = 50
    hot_min_delete_files: int = 50
    max_partitions_per_group: int = 10


@dataclass(frozen=True)
class RewriteDataFilesConfig:
    """`rewrite_data_files`: strategy, sort order and Iceberg action options."""

    enabled: bool = True
    strategy: str = "binpack"
    sort_order: str | None = None
    options: Mapping[str, str] = field(default_factory=lambda: DEFAULT_REWRITE_OPTIONS)

    @property
    def target_file_size_bytes(self) -> int:
        return int(self.options["target-file-size-bytes"])

    @property
    def min_input_files(self) -> int:
        return int(self.options["min-input-files"])


@dataclass(frozen=True)
class RewritePositionDeletesConfig:
    """`rewrite_position_delete_files`: also drops deletes left dangling by a data rewrite."""

    enabled: bool = True
    options: Mapping[str, str] = field(default_factory=lambda: MappingProxyType({}))


@dataclass(frozen=True)
class RewriteManifestsConfig:
    """`rewrite_manifests`, planned only when at least `min_small_manifests` manifests of the
    current snapshot are under `small_manifest_bytes` (read from the `manifests` table)."""

    enabled: bool = True
    min_small_manifests: int = 50
    # Iceberg's commit.manifest.target-size-bytes is 8 MiB; three quarters of it, as for files
    small_manifest_bytes: int = 6 << 20


@dataclass(frozen=True)
class ExpireSnapshotsConfig:
    """`expire_snapshots` with its floors.

    Never expired, whatever the settings: the last `retain_last` snapshots, snapshots younger
    than `older_than`, the current one, and the latest snapshot of each streaming query
    (`lakelock.query-id` in its summary), which the streaming job's replay guard reads.
    """

    enabled: bool = True
    older_than: timedelta = timedelta(days=5)
    retain_last: int = 10


@dataclass(frozen=True)
class RemoveOrphanFilesConfig:
    """`remove_orphan_files`; off by default (it lists the whole table location)."""

    enabled: bool = False
    older_than: timedelta = timedelta(days=3)


@dataclass(frozen=True)
class TableConfig:
    """Everything about one table; `name` is the full Iceberg name `catalog.namespace.table`."""

    name: str
    lease: LeaseConfig = LeaseConfig()
    plan: PlanConfig = PlanConfig()
    rewrite_data_files: RewriteDataFilesConfig = RewriteDataFilesConfig()
    rewrite_position_delete_files: RewritePositionDeletesConfig = RewritePositionDeletesConfig()
    rewrite_manifests: RewriteManifestsConfig = RewriteManifestsConfig()
    expire_snapshots: ExpireSnapshotsConfig = ExpireSnapshotsConfig()
    remove_orphan_files: RemoveOrphanFilesConfig = RemoveOrphanFilesConfig()

    @property
    def small_file_bytes(self) -> int:
        """Files under this size count as small."""
        fraction = self.plan.small_file_fraction
        return int(self.rewrite_data_files.target_file_size_bytes * fraction)


@dataclass(frozen=True)
class CompactorConfig:
    """The whole compactor: service, catalog, tables, schedule."""

    tables: tuple[TableConfig, ...] = ()
    defaults: Mapping[str, Any] = field(default_factory=lambda: MappingProxyType({}))
    service_url: str = "http://127.0.0.1:8737"
    token_env: str = "LAKELOCK_TOKEN"
    catalog: CatalogConfig = CatalogConfig()
    spark_master: str | None = "local[*]"
    every: timedelta | None = None

    def table(self, name: str) -> TableConfig:
        """The config of `name`: its `[[tables]]` entry, else the defaults.

        Raises:
            ConfigError: the defaults are malformed.
        """
        for table in self.tables:
            if table.name == name:
                return table
        return table_config({"name": name, **self.defaults})


def check_floors(config: TableConfig) -> None:
    """Refuse retention settings below the fixed floors (`FLOORS`).

    Raises:
        RetentionRefused: with the key, the value, the floor and why the floor exists.
    """
    expire, orphans = config.expire_snapshots, config.remove_orphan_files
    problems = []
    if expire.enabled and expire.older_than < FLOORS.snapshot_age:
        problems.append(
            f"expire_snapshots.older_than={format_duration(expire.older_than)} is below the "
            f"floor of {format_duration(FLOORS.snapshot_age)}: younger snapshots "
            "may still be read by running queries and by the streaming job's replay guard"
        )
    if expire.enabled and expire.retain_last < FLOORS.snapshots_retained:
        problems.append(
            f"expire_snapshots.retain_last={expire.retain_last} is below the floor of "
            f"{FLOORS.snapshots_retained}"
        )
    if orphans.enabled and orphans.older_than < FLOORS.orphan_file_age:
        problems.append(
            f"remove_orphan_files.older_than={format_duration(orphans.older_than)} is below the "
            f"floor of {format_duration(FLOORS.orphan_file_age)}: a younger file "
            "may belong to a write that has not committed yet"
        )
    if problems:
        raise RetentionRefused(f"{config.name}: refused: " + "; ".join(problems))


# -- loading ---------------------------------------------------------------------------------


def load_config(path: str | Path) -> CompactorConfig:
    """Read a TOML file (see the module docstring).

    Raises:
        ConfigError: unreadable TOML, an unknown key or a bad value (named in the message).
        OSError: the file cannot be read.
    """
    with open(path, "rb") as fh:
        try:
            data = tomllib.load(fh)
        except tomllib.TOMLDecodeError as exc:
            raise ConfigError(f"{path}: {exc}") from exc
    return config_from_dict(data, source=str(path))


def config_from_dict(data: Mapping[str, Any], *, source: str = "config") -> CompactorConfig:
    """The config a parsed TOML document describes.

    Raises:
        ConfigError: an unknown key or a bad value.
    """
    _known(data, {"every", "service", "catalog", "spark", "defaults", "tables"}, source)
    service = dict(data.get("service", {}))
    _known(service, {"url", "token_env"}, f"{source}: [service]")
    spark = dict(data.get("spark", {}))
    _known(spark, {"master"}, f"{source}: [spark]")
    try:
        catalog = CatalogConfig(**dict(data.get("catalog", {})))
    except (TypeError, ValueError) as exc:
        raise ConfigError(f"{source}: [catalog]: {exc}") from exc
    defaults = dict(data.get("defaults", {}))
    if "name" in defaults:
        raise ConfigError(f"{source}: [defaults] cannot name a table")
    tables = []
    for entry in data.get("tables", []):
        if "name" not in entry:
            raise ConfigError(f"{source}: a [[tables]] entry has no name")
        tables.append(table_config(_merge(defaults, entry)))
    every = data.get("every")
    config = CompactorConfig(
        tables=tuple(tables),
        defaults=MappingProxyType(defaults),
        service_url=str(service.get("url", CompactorConfig.service_url)),
        token_env=str(service.get("token_env", CompactorConfig.token_env)),
        catalog=catalog,
        spark_master=spark.get("master", CompactorConfig.spark_master),
        every=None if every is None else parse_duration(every),
    )
    try:
        config.table("_defaults.db.t")  # malformed defaults fail here, not at the first run
    except ConfigError as exc:
        raise type(exc)(f"{source}: [defaults]: {exc}") from exc
    return config


def table_config(data: Mapping[str, Any]) -> TableConfig:
    """A TableConfig from one merged `[[tables]]` entry.

    Raises:
        ConfigError: an unknown key or a bad value.
    """
    name = str(data.get("name", ""))
    where = f"table {name!r}"
    if len(name.split(".")) not in (2, 3):
        raise ConfigError(f"{where}: name must be namespace.table or catalog.namespace.table")
    _known(data, {"name", *_SECTION_TYPES}, where)
    config = TableConfig(name=name)
    for section in _SECTION_TYPES:
        values = data.get(section)
        if values is not None:
            built = _section(_SECTION_TYPES[section], values, f"{where}: [{section}]")
            config = replace(config, **{section: built})
    _validate(config, where)
    return config


# keys that once made a floor configurable per table; named in the error, not just "unknown"
_FIXED_FLOORS = {"min_older_than", "min_retain_last"}


def _floors_text() -> str:
    return (
        f"expire_snapshots.older_than >= {format_duration(FLOORS.snapshot_age)}, "
        f"expire_snapshots.retain_last >= {FLOORS.snapshots_retained}, "
        f"remove_orphan_files.older_than >= {format_duration(FLOORS.orphan_file_age)}"
    )


_SECTION_TYPES: dict[str, type] = {
    "lease": LeaseConfig,
    "plan": PlanConfig,
    "rewrite_data_files": RewriteDataFilesConfig,
    "rewrite_position_delete_files": RewritePositionDeletesConfig,
    "rewrite_manifests": RewriteManifestsConfig,
    "expire_snapshots": ExpireSnapshotsConfig,
    "remove_orphan_files": RemoveOrphanFilesConfig,
}


def _section(cls: type, values: Mapping[str, Any], where: str) -> Any:
    allowed = {f.name: f for f in fields(cls)}
    for key in sorted(set(values) & _FIXED_FLOORS):
        raise ConfigError(
            f"{where}: {key} cannot be set: the retention floors are fixed "
            f"({_floors_text()}); set older_than / retain_last at or above them"
        )
    _known(values, set(allowed), where)
    kwargs: dict[str, Any] = {}
    defaults = cls()
    for key, value in values.items():
        current = getattr(defaults, key)
        try:
            kwargs[key] = _coerce(key, value, current)
        except (TypeError, ValueError) as exc:
            raise ConfigError(f"{where}: {key}: {exc}") from exc
    return cls(**kwargs)


def _coerce(key: str, value: Any, current: Any) -> Any:
    if key == "options":
        merged = dict(current)
        merged.update({str(k): _option_text(v) for k, v in dict(value).items()})
        return MappingProxyType(merged)
    if key in {"ttl", "max_wait", "renew_deadline", "older_than", "hot_window"}:
        return parse_duration(value)
    if key == "full_rewrite_at":
        return None if value in (None, "") else time.fromisoformat(str(value))
    if key in {"recent_days"}:
        return None if value is None else int(value)
    if isinstance(current, bool):
        if not isinstance(value, bool):
            raise ValueError(f"expected true or false, got {value!r}")
        return value
    if isinstance(current, int):
        return int(value)
    if isinstance(current, float):
        return float(value)
    return value if value is None else str(value)


def _option_text(value: Any) -> str:
    # Iceberg action options are strings; TOML gives ints and booleans
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


def _validate(config: TableConfig, where: str) -> None:
    rewrite, plan = config.rewrite_data_files, config.plan
    if rewrite.strategy not in {"binpack", "sort"}:
        raise ConfigError(f"{where}: rewrite_data_files.strategy must be binpack or sort")
    if rewrite.sort_order and rewrite.strategy != "sort":
        raise ConfigError(f"{where}: rewrite_data_files.sort_order needs strategy = 'sort'")
    for key in ("target-file-size-bytes", "min-input-files"):
        try:
            if int(rewrite.options[key]) < 1:
                raise ValueError
        except (KeyError, ValueError) as exc:
            raise ConfigError(
                f"{where}: rewrite_data_files.options[{key!r}] must be a positive integer"
            ) from exc
    if not 0 < plan.small_file_fraction <= 1:
        raise ConfigError(f"{where}: plan.small_file_fraction must be in (0, 1]")
    if plan.recent_days is not None and plan.recent_days < 0:
        raise ConfigError(f"{where}: plan.recent_days must be >= 0")
    if not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", plan.recent_column):
        raise ConfigError(f"{where}: plan.recent_column must be a column name")
    if config.lease.scope not in {"partitions", "table"}:
        raise ConfigError(f"{where}: lease.scope must be partitions or table")
    if plan.max_partitions_per_group < 1:
        raise ConfigError(f"{where}: plan.max_partitions_per_group must be at least 1")
    if plan.hot_window < timedelta(0):
        raise ConfigError(f"{where}: plan.hot_window must not be negative")
    if config.lease.ttl.total_seconds() < 1:
        raise ConfigError(f"{where}: lease.ttl must be at least 1s")
    manifests = config.rewrite_manifests
    if manifests.min_small_manifests < 1 or manifests.small_manifest_bytes < 1:
        raise ConfigError(
            f"{where}: rewrite_manifests.min_small_manifests and small_manifest_bytes "
            "must be positive"
        )
    # at load time, not at the first run: a bad retention never reaches a schedule
    check_floors(config)


def _known(values: Mapping[str, Any], allowed: set[str], where: str) -> None:
    unknown = sorted(set(values) - allowed)
    if unknown:
        raise ConfigError(f"{where}: unknown key(s) {unknown}; known: {sorted(allowed)}")


def _merge(base: Mapping[str, Any], override: Mapping[str, Any]) -> dict[str, Any]:
    merged = dict(base)
    for key, value in override.items():
        if isinstance(value, Mapping) and isinstance(merged.get(key), Mapping):
            merged[key] = _merge(merged[key], value)
        else:
            merged[key] = value
    return merged

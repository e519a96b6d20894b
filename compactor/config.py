"""What the compactor does to which table, from a TOML file or defaults.

    load_config("compactor.toml")                # CompactorConfig
    CompactorConfig(tables=(TableConfig("local.db.events"),))
    config.table("local.db.events")              # the table's TableConfig (defaults if unlisted)
    parse_duration("10m"), parse_duration("1h30m"), parse_duration("7d")

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
    trigger_small_files = 12            # a partition is due at this many small files,
    trigger_delete_files = 12           # or delete files,
    trigger_deleted_rows = 0.1          # or this share of its rows position-deleted,
    trigger_equality_deletes = 1        # or equality delete files
    stop_small_files = 24               # the hard bound: past it (small or delete files) the
    stop_delete_files = 24              # gate holds the partition's writers until compacted
    backpressure = true                 # (only while a compactor holds the table's claim)
    run_budget = "5m"                   # no group starts after this much of a run
    hot_window = "15m"                  # a partition updated within it is hot (default 0: off)
    hot_partitions_per_group = 2        # hot partitions (due ones only) rewritten under one lease
    max_partitions_per_group = 10       # cold partitions rewritten under one lease
    [defaults.rewrite_data_files]
    strategy = "binpack"                # or "sort" (sort_order = "event_id ASC NULLS LAST")
    options = { "target-file-size-bytes" = 134217728, "min-input-files" = 5 }
    [defaults.follow]                   # the rewrite of a partition the service says is due
    options = { "min-input-files" = 2, "delete-file-threshold" = 1 }   # over rewrite_data_files
    partitions_per_group = 10           # due partitions of a table under one lease
    [defaults.rewrite_manifests]
    min_small_manifests = 50            # rewrite when this many manifests are small
    small_manifest_bytes = 6291456      # small = under 6 MiB (Iceberg's target is 8 MiB)
    [defaults.expire_snapshots]
    older_than = "5d"
    retain_last = 10
    restart_point_age = "15d"           # a committer's restart point kept this long
    restart_points = 8                  # for the newest this many committers of a table
    [fleet]
    max_concurrent = 2                  # table runs at once in this process
    claim_ttl = "60s"                   # the claim on a table a run holds (renewed at a third)
    replan_after = "6h"                 # plan a table this long unplanned, healthy or not
    scheduler = "fair"                  # Spark scheduling of concurrent runs, or "fifo"
    [[tables]]
    name = "local.db.*"                 # a pattern: every table of local.db, listed each tick
    plan = { recent_days = 2 }
    [[tables]]
    name = "local.db.events"            # an exact name: its keys win over the pattern's
    plan = { min_small_files = 20 }

A `[[tables]]` name may be a shell-style pattern (`*`, `?`, `[...]` in the namespace or table
part; see compactor.patterns), expanded through the catalog at each tick. A table's settings
are the defaults, then every pattern it matches in file order, then its own exact entry.

Each procedure's keys, and the fixed retention floors a value below is refused at load time
for, are compactor.procedure_config's.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import field
from datetime import time, timedelta
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import AfterValidator, BeforeValidator, Field, model_validator
from pydantic.dataclasses import dataclass

from compactor.patterns import applying, check_name, is_pattern
from compactor.procedure_config import (
    DEFAULT_REWRITE_OPTIONS,
    FOLLOW_OPTIONS,
    ConvertEqualityDeletesConfig,
    ExpireSnapshotsConfig,
    FollowConfig,
    RemoveOrphanFilesConfig,
    RetentionRefused,
    RewriteDataFilesConfig,
    RewriteManifestsConfig,
    RewritePositionDeletesConfig,
    check_floors,
)
from jobkit.config import (
    STRICT,
    Bool,
    ConfigError,
    Duration,
    Positive,
    build,
    catalog_input,
    format_duration,
    layered,
    merge,
    parse_duration,
    rule,
)
from jobkit.spark import CatalogConfig

__all__ = [
    "CompactorConfig",
    "ConfigError",
    "FleetConfig",
    "LeaseConfig",
    "PlanConfig",
    "TableConfig",
    "TablePattern",
    "config_from_dict",
    "format_duration",
    "load_config",
    "parse_duration",
    "table_config",
]

TITLE = "invalid compactor configuration"


@dataclass(frozen=True, config=STRICT)
class LeaseConfig:
    """How the maintenance lease is held.

    LeaseConfig(ttl=timedelta(seconds=60), max_wait=timedelta(minutes=10))
    """

    ttl: Annotated[Duration, rule(lambda v: v.total_seconds() >= 1, "must be at least 1s")] = (
        timedelta(seconds=60)
    )
    # how long to keep the intent open while commits drain before skipping the run
    max_wait: Duration = timedelta(minutes=10)
    # None: the Renewer's default (two thirds of the TTL)
    renew_deadline: Duration | None = None
    # "partitions": a scoped lease per group of partitions (compactor.plan); "table": one
    # whole-table lease for every step, the behaviour before scopes (for comparison)
    scope: Literal["partitions", "table"] = "partitions"


def _time_of_day(value: Any) -> Any:
    return None if value in (None, "") else value


@dataclass(frozen=True, config=STRICT)
class PlanConfig:
    """When a run pays off (see compactor.plan)."""

    small_file_fraction: Annotated[float, Field(gt=0, le=1)] = 0.75
    min_small_files: int = 10
    min_delete_files: int = 10
    max_delete_ratio: float = 0.25
    max_snapshots: int = 500
    recent_days: Annotated[int, Field(ge=0)] | None = None
    recent_column: Annotated[
        str, rule(lambda v: re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", v), "must be a column name")
    ] = "dt"
    full_rewrite_at: Annotated[time | None, BeforeValidator(_time_of_day)] = None
    # a partition is due (compacted whether hot or cold) at any of these (compactor.plan)
    trigger_small_files: Positive = 12
    trigger_delete_files: Positive = 12
    trigger_deleted_rows: Annotated[float, Field(gt=0, le=1)] = 0.1
    trigger_equality_deletes: Positive = 1
    # the hard bound: a partition at either holds its writers until compacted (backpressure,
    # only while a compactor holds the table's claim)
    stop_small_files: Positive = 24
    stop_delete_files: Positive = 24
    backpressure: Bool = True
    # no group of a run starts after this much of it (0: no budget); the rest waits for the
    # next run, which takes the largest debt first again
    run_budget: Annotated[Duration, rule(lambda v: v >= timedelta(0), "must not be negative")] = (
        timedelta(minutes=5)
    )
    # a partition a commit touched within this window is hot (0: only a live commit lease on
    # it makes it hot); hot partitions are rewritten only when due, in small groups
    hot_window: Annotated[Duration, rule(lambda v: v >= timedelta(0), "must not be negative")] = (
        timedelta(0)
    )
    hot_partitions_per_group: Positive = 2
    max_partitions_per_group: Positive = 10

    @model_validator(mode="before")
    @classmethod
    def _no_hot_thresholds(cls, values: Any) -> Any:
        if isinstance(values, Mapping):
            gone = [key for key in ("hot_min_small_files", "hot_min_delete_files") if key in values]
            if gone:
                raise ConfigError(
                    [
                        (
                            key,
                            "was removed: a hot partition is compacted when it is due, as any "
                            "other (trigger_small_files, trigger_delete_files, "
                            "trigger_deleted_rows, trigger_equality_deletes)",
                        )
                        for key in gone
                    ]
                )
        return values

    @model_validator(mode="after")
    def _stops_above_triggers(self) -> PlanConfig:
        errors = [
            (
                stop,
                f"must be at least {trigger} ({getattr(self, trigger)}): the hard bound is "
                "where backpressure starts, past the trigger where compaction does",
            )
            for stop, trigger in (
                ("stop_small_files", "trigger_small_files"),
                ("stop_delete_files", "trigger_delete_files"),
            )
            if getattr(self, stop) < getattr(self, trigger)
        ]
        if errors:
            raise ConfigError(errors)
        return self


def _table_name(value: str) -> str:
    try:
        check_name(value)
    except ValueError as exc:
        raise ConfigError([("", str(exc))]) from None
    if is_pattern(value):
        raise ConfigError([("", "names one table: no pattern here")])
    return value


@dataclass(frozen=True, config=STRICT)
class TableConfig:
    """Everything about one table; `name` is the full Iceberg name `catalog.namespace.table`."""

    name: Annotated[str, AfterValidator(_table_name)]
    lease: LeaseConfig = LeaseConfig()
    plan: PlanConfig = PlanConfig()
    rewrite_data_files: RewriteDataFilesConfig = RewriteDataFilesConfig()
    rewrite_position_delete_files: RewritePositionDeletesConfig = RewritePositionDeletesConfig()
    convert_equality_deletes: ConvertEqualityDeletesConfig = ConvertEqualityDeletesConfig()
    rewrite_manifests: RewriteManifestsConfig = RewriteManifestsConfig()
    follow: FollowConfig = FollowConfig()
    expire_snapshots: ExpireSnapshotsConfig = ExpireSnapshotsConfig()
    remove_orphan_files: RemoveOrphanFilesConfig = RemoveOrphanFilesConfig()

    @model_validator(mode="after")
    def _min_input_under_the_trigger(self) -> TableConfig:
        # a partition due at trigger_small_files small files that Iceberg would not rewrite:
        # its group would have no step, and the partition would stay past its bound
        min_input = self.rewrite_data_files.min_input_files
        if min_input > self.plan.trigger_small_files:
            raise ConfigError(
                [
                    (
                        "rewrite_data_files.options['min-input-files']",
                        f"must be at most plan.trigger_small_files "
                        f"({self.plan.trigger_small_files}), got {min_input}: Iceberg would "
                        "leave a partition that is due as it is",
                    )
                ]
            )
        return self

    @property
    def small_file_bytes(self) -> int:
        """Files under this size count as small."""
        fraction = self.plan.small_file_fraction
        return int(self.rewrite_data_files.target_file_size_bytes * fraction)


@dataclass(frozen=True, config=STRICT)
class TablePattern:
    """A `[[tables]]` entry whose name is a pattern: its keys, as written, apply to every table
    the pattern matches (over the defaults, under an exact entry of the table).

    TablePattern("lake.db.*", {"plan": {"recent_days": 2}})
    """

    name: str
    overrides: Mapping[str, Any] = field(default_factory=dict)


_AT_LEAST_3S = "must be at least 3s"


@dataclass(frozen=True, config=STRICT)
class FleetConfig:
    """How one compactor process works through many tables (see compactor.fleet)."""

    # table runs at once in this process, over its one Spark session
    max_concurrent: Positive = 2
    # the claim a run holds on its table from before its plan to after its housekeeping, so
    # that another compactor process leaves the table alone (renewed at a third of it)
    claim_ttl: Annotated[Duration, rule(lambda v: v.total_seconds() >= 3, _AT_LEAST_3S)] = (
        timedelta(seconds=60)
    )
    # a table this process has not planned for this long is planned even when its summary
    # looks healthy (what the summary cannot show: manifests, a few small files among big
    # ones); None: only what the summary shows
    replan_after: Duration | None = timedelta(hours=6)
    # Spark's scheduling of concurrent runs: "fair" gives each run its own pool, so one huge
    # rewrite does not hold the others' tasks back; "fifo": Spark's default, first job first
    scheduler: Literal["fair", "fifo"] = "fair"


@dataclass(frozen=True, config=STRICT)
class CompactorConfig:
    """The whole compactor: service, catalog, tables (exact entries and patterns), schedule.

    config.table("lake.db.events")   # defaults, matching patterns, then its own entry
    config.selection                 # every [[tables]] name, patterns included, in file order
    """

    tables: tuple[TableConfig, ...] = ()
    defaults: Mapping[str, Any] = field(default_factory=dict)
    service_url: str = "http://127.0.0.1:8737"
    token_env: str = "LAKELOCK_TOKEN"
    catalog: Annotated[CatalogConfig, BeforeValidator(catalog_input)] = CatalogConfig()
    spark_master: str | None = "local[*]"
    every: Duration | None = None
    patterns: tuple[TablePattern, ...] = ()
    fleet: FleetConfig = FleetConfig()

    @property
    def selection(self) -> tuple[str, ...]:
        """The names of the `[[tables]]` entries, exact ones first, then the patterns."""
        return tuple(t.name for t in self.tables) + tuple(p.name for p in self.patterns)

    def table(self, name: str) -> TableConfig:
        """The config of `name`: its exact `[[tables]]` entry (built over the patterns it
        matches), else the defaults with every matching pattern's keys over them.

        Raises:
            ConfigError: the layers together are malformed (each is valid alone).
            RetentionRefused: together they ask for less than a floor.
        """
        for table in self.tables:
            if table.name == name:
                return table
        return table_config(
            layer(self.defaults, [p.overrides for p in applying(self.patterns, name)], name),
            where=f'tables["{name}"]',
        )


def layer(
    defaults: Mapping[str, Any], patterns: Sequence[Mapping[str, Any]], name: str
) -> dict[str, Any]:
    """One table's values: `defaults`, then each pattern's keys in order, then its `name`
    (tables merged key by key, as `jobkit.config.merge`)."""
    values = dict(defaults)
    for overrides in patterns:
        values = merge(values, overrides)
    return {**values, "name": name}


# -- loading ---------------------------------------------------------------------------------


@dataclass(frozen=True, config=STRICT)
class _Service:
    url: str = CompactorConfig.service_url
    token_env: str = CompactorConfig.token_env


@dataclass(frozen=True, config=STRICT)
class _Spark:
    master: str | None = CompactorConfig.spark_master


@dataclass(frozen=True, config=STRICT)
class _File:
    """A compactor TOML file as written (see the module docstring)."""

    every: Duration | None = None
    service: _Service = _Service()
    catalog: Annotated[CatalogConfig, BeforeValidator(catalog_input)] = CatalogConfig()
    spark: _Spark = _Spark()
    fleet: FleetConfig = FleetConfig()
    defaults: dict[str, Any] = field(default_factory=dict)
    tables: list[dict[str, Any]] = field(default_factory=list)


def load_config(
    path: str | Path | None, *, overrides: Mapping[str, Any] | None = None
) -> CompactorConfig:
    """Read a TOML file (see the module docstring), `overrides` (in the file's shape, e.g.
    `{"service": {"url": ...}}`: the command line's flags) over it.

    Raises:
        ConfigError: unreadable TOML, an unknown key or a bad value (each named).
    """
    source = "config" if path is None else str(path)
    return config_from_dict(layered(path, overrides), source=source)


def config_from_dict(data: Mapping[str, Any], *, source: str = "config") -> CompactorConfig:
    """The config a parsed TOML document describes.

    Raises:
        ConfigError: every unknown key and bad value, each named by its place in the file.
    """
    title = f"{TITLE} ({source})"
    problems: list[tuple[str, str]] = []
    try:
        file = build(_File, data)
    except ConfigError as exc:
        # go on with the tables, so that one pass names every mistake
        problems.extend(exc.problems)
        file = None
    raw_defaults = data.get("defaults", {})
    raw_tables = data.get("tables", [])
    raw_defaults = raw_defaults if isinstance(raw_defaults, Mapping) else {}
    raw_tables = (
        [t for t in raw_tables if isinstance(t, Mapping)] if isinstance(raw_tables, list) else []
    )
    bad = len(problems)
    if "name" in raw_defaults:
        problems.append(("defaults.name", "cannot be set: [defaults] apply to every table"))
    else:
        _collect(problems, {"name": "_defaults.db.t", **raw_defaults}, where="defaults")
    # bad defaults are named once, under defaults; the tables are then checked on their own
    defaults = raw_defaults if len(problems) == bad else {}
    patterns = _patterns(problems, raw_tables, defaults)
    tables = []
    for i, entry in enumerate(raw_tables):
        if "name" not in entry:
            problems.append((f"tables[{i}]", "has no name"))
            continue
        if not isinstance(entry["name"], str) or is_pattern(entry["name"]):
            continue
        layers = [p.overrides for p in applying(patterns, entry["name"])]
        values = merge(layer(defaults, layers, entry["name"]), entry)
        built = _collect(problems, values, where=f'tables["{entry["name"]}"]')
        if built is not None:
            tables.append(built)
    if problems or file is None:
        raise ConfigError(problems, title=title)
    return CompactorConfig(
        tables=tuple(tables),
        defaults=dict(file.defaults),
        service_url=file.service.url,
        token_env=file.service.token_env,
        catalog=file.catalog,
        spark_master=file.spark.master,
        every=file.every,
        patterns=tuple(patterns),
        fleet=file.fleet,
    )


def _patterns(
    problems: list[tuple[str, str]], raw_tables: list[Mapping[str, Any]], defaults: Mapping
) -> list[TablePattern]:
    """The pattern entries, each checked on its own over the defaults (with a stand-in name);
    a bad name or key is added to `problems`."""
    out = []
    for entry in raw_tables:
        name = entry.get("name")
        if not isinstance(name, str) or not is_pattern(name):
            continue
        where = f'tables["{name}"]'
        try:
            check_name(name)
        except ValueError as exc:
            problems.append((f"{where}.name", str(exc)))
            continue
        overrides = {k: v for k, v in entry.items() if k != "name"}
        stand_in = ".".join(part if not is_pattern(part) else "t" for part in name.split("."))
        if _collect(problems, merge(defaults, {**overrides, "name": stand_in}), where=where):
            out.append(TablePattern(name, overrides))
    return out


def _collect(
    problems: list[tuple[str, str]], data: Mapping[str, Any], *, where: str
) -> TableConfig | None:
    try:
        return table_config(data, where=where)
    except ConfigError as exc:
        problems.extend(exc.problems)
        return None


def table_config(data: Mapping[str, Any], *, where: str = "") -> TableConfig:
    """A TableConfig from one merged `[[tables]]` entry, its retention checked against the
    floors; Iceberg action options merge over DEFAULT_REWRITE_OPTIONS (those of `follow` over
    FOLLOW_OPTIONS).

    Raises:
        ConfigError: every unknown key and bad value, named under `where`.
        RetentionRefused: a retention setting below its floor.
    """
    where = where or f'tables["{data.get("name", "")}"]'
    values = dict(data)
    rewrite = values.get("rewrite_data_files")
    if isinstance(rewrite, Mapping) and isinstance(rewrite.get("options"), Mapping):
        options = {**DEFAULT_REWRITE_OPTIONS, **rewrite["options"]}
        values["rewrite_data_files"] = {**rewrite, "options": options}
    follow = values.get("follow")
    if isinstance(follow, Mapping) and isinstance(follow.get("options"), Mapping):
        values["follow"] = {**follow, "options": {**FOLLOW_OPTIONS, **follow["options"]}}
    config = build(TableConfig, values, where=where, title=TITLE)
    try:
        # at load time, not at the first run: a bad retention never reaches a schedule
        check_floors(config)
    except RetentionRefused as exc:
        raise RetentionRefused([(where, rule) for _, rule in exc.problems], title=TITLE) from None
    return config

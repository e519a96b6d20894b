"""What each Iceberg procedure the compactor calls is configured with (a table's
`[defaults.<procedure>]` or `[[tables]]` keys, compactor.config), and the retention floors no
table can go below.

    RewriteDataFilesConfig, FollowConfig, ConvertEqualityDeletesConfig,
    RewritePositionDeletesConfig, RewriteManifestsConfig, ExpireSnapshotsConfig,
    RemoveOrphanFilesConfig                   one procedure's settings each
    FLOORS                                    the fixed retention floors
    check_floors(table_config)                raises RetentionRefused below a floor

Retention floors are fixed, not settings: `expire_snapshots.older_than` at least 24h and
`retain_last` at least 5, `remove_orphan_files.older_than` at least 24h. A value below its floor
is refused at load time, not clamped: a config that asks for less is a mistake an operator must
see, not one to paper over.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import field
from datetime import timedelta
from types import MappingProxyType
from typing import Annotated, Any, Literal, Protocol

from pydantic import AfterValidator, BeforeValidator, Field, model_validator
from pydantic.dataclasses import dataclass

from jobkit.config import STRICT, Bool, ConfigError, Duration, Positive, format_duration, text_map

__all__ = [
    "DEFAULT_REWRITE_OPTIONS",
    "FLOORS",
    "FOLLOW_OPTIONS",
    "ConvertEqualityDeletesConfig",
    "ExpireSnapshotsConfig",
    "Floors",
    "FollowConfig",
    "RemoveOrphanFilesConfig",
    "RetentionRefused",
    "RewriteDataFilesConfig",
    "RewriteManifestsConfig",
    "RewritePositionDeletesConfig",
    "check_floors",
]


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


def _rewrite_options(value: Mapping[str, str]) -> Mapping[str, str]:
    for key in ("target-file-size-bytes", "min-input-files"):
        try:
            if int(value[key]) < 1:
                raise ValueError
        except (KeyError, ValueError):
            raise ConfigError([(f"[{key!r}]", "must be a positive integer")]) from None
    return dict(value)


@dataclass(frozen=True, config=STRICT)
class RewriteDataFilesConfig:
    """`rewrite_data_files`: strategy, sort order and Iceberg action options (strings, as
    Iceberg takes them; in a file, they merge over DEFAULT_REWRITE_OPTIONS)."""

    enabled: Bool = True
    strategy: Literal["binpack", "sort"] = "binpack"
    sort_order: str | None = None
    options: Annotated[
        Mapping[str, str], BeforeValidator(text_map), AfterValidator(_rewrite_options)
    ] = field(default_factory=lambda: dict(DEFAULT_REWRITE_OPTIONS))

    @model_validator(mode="after")
    def _sort_order_needs_sort(self) -> RewriteDataFilesConfig:
        if self.sort_order and self.strategy != "sort":
            raise ConfigError([("sort_order", "needs strategy = 'sort'")])
        return self

    @property
    def target_file_size_bytes(self) -> int:
        return int(self.options["target-file-size-bytes"])

    @property
    def min_input_files(self) -> int:
        return int(self.options["min-input-files"])


FOLLOW_OPTIONS: Mapping[str, str] = MappingProxyType(
    {
        # a due partition holds a few batches' files: two of them make a group worth rewriting
        "min-input-files": "2",
        # a data file with any delete applying to it is rewritten, the deletes applied
        "delete-file-threshold": "1",
    }
)


@dataclass(frozen=True, config=STRICT)
class FollowConfig:
    """How a compactor that follows the stream rewrites the partitions the service says are
    due (compactor.follow, docs/jobs.md §3): only their small files and the files deletes apply
    to, under one lease per `partitions_per_group` of them. `options` go over the table's
    `rewrite_data_files` options (FOLLOW_OPTIONS by default); the rewrite never splits a big
    file and never commits partial progress, whatever they say (compactor.plan.steps)."""

    options: Annotated[Mapping[str, str], BeforeValidator(text_map)] = field(
        default_factory=lambda: dict(FOLLOW_OPTIONS)
    )
    partitions_per_group: Positive = 10


@dataclass(frozen=True, config=STRICT)
class ConvertEqualityDeletesConfig:
    """`convert_equality_deletes` (compactor.convert, docs/jobs.md §3): a follow run first
    resolves its partitions' equality deletes into position deletes, and its rewrite then
    leaves a data file with position deletes as it is (unless small) until `delete_ratio` of
    its rows are deleted (Iceberg's `delete-ratio-threshold`), instead of rewriting every data
    file a delete applies to. Off by default in this release."""

    enabled: Bool = False
    delete_ratio: Annotated[float, Field(gt=0, le=1)] = 0.3


@dataclass(frozen=True, config=STRICT)
class RewritePositionDeletesConfig:
    """`rewrite_position_delete_files`: also drops deletes left dangling by a data rewrite."""

    enabled: Bool = True
    options: Annotated[Mapping[str, str], BeforeValidator(text_map)] = field(default_factory=dict)


@dataclass(frozen=True, config=STRICT)
class RewriteManifestsConfig:
    """`rewrite_manifests`, planned only when at least `min_small_manifests` manifests of the
    current snapshot are under `small_manifest_bytes` (read from the `manifests` table)."""

    enabled: Bool = True
    min_small_manifests: Positive = 50
    # Iceberg's commit.manifest.target-size-bytes is 8 MiB; three quarters of it, as for files
    small_manifest_bytes: Positive = 6 << 20


# keys that once made a floor configurable per table; named in the error, not just "unknown"
_FIXED_FLOORS = ("min_older_than", "min_retain_last")


def _floors_text() -> str:
    return (
        f"expire_snapshots.older_than >= {format_duration(FLOORS.snapshot_age)}, "
        f"expire_snapshots.retain_last >= {FLOORS.snapshots_retained}, "
        f"remove_orphan_files.older_than >= {format_duration(FLOORS.orphan_file_age)}"
    )


def _no_floor_keys(values: Any) -> Any:
    if isinstance(values, Mapping):
        fixed = [key for key in _FIXED_FLOORS if key in values]
        if fixed:
            raise ConfigError(
                [
                    (
                        "",
                        f"{key} cannot be set: the retention floors are fixed "
                        f"({_floors_text()}); set older_than / retain_last at or above them",
                    )
                    for key in fixed
                ]
            )
    return values


@dataclass(frozen=True, config=STRICT)
class ExpireSnapshotsConfig:
    """`expire_snapshots` with its floors.

    Never expired, whatever the settings: the last `retain_last` snapshots, snapshots younger
    than `older_than` and the current one. Restart points, the newest snapshot of each
    streaming query (`lakelock.query-id`, read by the streaming job's replay guard) and of each
    Flink committer (`flink.max-committed-checkpoint-id`), are kept besides for the newest
    `restart_points` committers of the table, while younger than `restart_point_age`: a job
    stopped longer restarts from a savepoint (docs/jobs.md §2), and ids that never commit again
    pin nothing for good.
    """

    enabled: Bool = True
    older_than: Duration = timedelta(days=5)
    retain_last: int = 10
    restart_point_age: Duration = timedelta(days=15)
    restart_points: Annotated[int, Field(ge=0, le=1000)] = 8

    _fixed = model_validator(mode="before")(_no_floor_keys)


@dataclass(frozen=True, config=STRICT)
class RemoveOrphanFilesConfig:
    """`remove_orphan_files`; off by default (it lists the whole table location)."""

    enabled: Bool = False
    older_than: Duration = timedelta(days=3)

    _fixed = model_validator(mode="before")(_no_floor_keys)


class Retained(Protocol):
    """What the floors judge of a table's config (compactor.config.TableConfig)."""

    @property
    def name(self) -> str: ...
    @property
    def expire_snapshots(self) -> ExpireSnapshotsConfig: ...
    @property
    def remove_orphan_files(self) -> RemoveOrphanFilesConfig: ...


def check_floors(config: Retained) -> None:
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
        raise RetentionRefused(
            [("", problem) for problem in problems], title=f"{config.name}: retention refused"
        )

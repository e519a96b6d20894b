"""The procedure calls a plan makes, each only when enabled and with work: the data and
position-delete rewrites of a scope, the manifests' rewrite, and the steps that take no lease
(docs/design.md §4, docs/jobs.md §2).

The rewrites' options make a run converge, so the plan after it says skip
(tests/spark/test_compactor_converges.py): `delete-file-threshold` = 1 rewrites every data file
a delete applies to, applying it, and the delete files then left applying to nothing are
dropped by a `remove_dangling_deletes` step (equality deletes) and by
`rewrite_position_delete_files` with `rewrite-all` (position deletes: the rewrite's data files
keep its starting sequence number, so it leaves their files behind, and without `rewrite-all`
Iceberg drops them only where a partition holds `min-input-files` of them).
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from datetime import datetime
from typing import Any

from compactor.config import TableConfig, format_duration
from compactor.plan.expiry import table_expiry
from compactor.plan.model import Mode, Step
from compactor.plan.rules import small_manifests
from compactor.stats import PartitionStats, TableStats, Totals

__all__ = ["REMOVE_DANGLING", "data_steps", "follow_steps", "manifest_steps", "unleased_steps"]

REMOVE_DANGLING = "remove-dangling-deletes"
"""The rewrite_data_files option whose commit Iceberg makes without lakelock's properties: the
plan turns it into a remove_dangling_deletes step (compactor.procedure)."""


def data_steps(
    config: TableConfig,
    mode: Mode,
    scope: Totals,
    *,
    small_ok: bool,
    where: str | None = None,
    partitions: Sequence[PartitionStats] = (),
) -> tuple[Step, ...]:
    """rewrite_data_files and rewrite_position_delete_files over `scope`, each only when it has
    work; limited to `partitions` when given (else to `where`, else the whole table)."""
    steps: list[Step] = []
    everything = mode is Mode.REWRITE_ALL
    names = tuple(str(p.name) for p in partitions)
    values = tuple(p.partition for p in partitions)
    rdf = config.rewrite_data_files
    # only when it has work: a run for manifests or snapshots alone need not plan a rewrite
    rdf_work = (
        everything or small_ok or scope.delete_files > 0 or scope.dangling_equality_delete_files > 0
    )
    if rdf.enabled and rdf_work:
        options = dict(rdf.options)
        if everything:
            options["rewrite-all"] = "true"
        if scope.delete_files:
            # a data file with any delete applying to it is rewritten, the deletes applied
            options.setdefault("delete-file-threshold", "1")
        # the delete files the rewrite leaves applying to nothing (module docstring), dropped
        # by a step of their own, whose commit carries the lease (compactor.procedure)
        dangling = options.pop(REMOVE_DANGLING, None)
        if dangling is None:
            # equality deletes only: position deletes go with rewrite_position_delete_files,
            # limited to the partitions (module docstring)
            equality = scope.equality_delete_files + scope.dangling_equality_delete_files
            dangling = "true" if equality else "false"
        steps.append(
            Step(
                "rewrite_data_files",
                "rewrite every data file" if everything else "compact small files, apply deletes",
                options=options,
                where=where,
                strategy=rdf.strategy,
                sort_order=rdf.sort_order,
                partitions=names,
                partition_values=values,
            )
        )
        if dangling == "true":
            steps.append(
                Step(
                    "remove_dangling_deletes",
                    "drop the delete files that apply to no live data file any more (in the "
                    "partitions of the scope when it has them, else the whole table; only "
                    "such files, which no writer relies on)",
                    partitions=names,
                    partition_values=values,
                )
            )
    rpd = config.rewrite_position_delete_files
    position = scope.position_delete_files + scope.dangling_position_delete_files
    if rpd.enabled and position:
        options = dict(rpd.options)
        # without it, partitions with fewer than min-input-files delete files keep their
        # dangling ones (module docstring)
        options.setdefault("rewrite-all", "true")
        steps.append(
            Step(
                "rewrite_position_delete_files",
                f"{position} position delete files before the run "
                f"({scope.dangling_position_delete_files} dangling): drop those that apply to "
                "no live data file",
                options=options,
                where=where,
                partitions=names,
                partition_values=values,
            )
        )
    return tuple(steps)


def follow_steps(
    config: TableConfig,
    partitions: Sequence[str],
    values: Sequence[Mapping[str, Any]],
    *,
    deletes: bool,
    equality: bool = False,
) -> tuple[Step, ...]:
    """The rewrite of `partitions` (their names, and `values` by partition field name) sized to
    the stream, for a compactor that follows it (compactor.follow): rewrite_data_files over
    their small files and the files a delete applies to (`follow.options` over the table's
    rewrite options: 2 input files make a group, one delete makes a file worth rewriting),
    a file of the plan's small size or more never selected for its size, no partial progress,
    binpack whatever the table's strategy (its sort waits for the full plan); then, with
    `deletes` (the
    service counted delete files added), remove_dangling_deletes and
    rewrite_position_delete_files over the same partitions, which drop the deletes the first
    step left applying to nothing (equality deletes, and position deletes). With
    `convert_equality_deletes` enabled and `equality` (the service counted equality deletes
    among them), a convert_equality_deletes step comes first, the rewrite leaves big files with
    few deleted rows alone, and no equality delete is left to drop.

    Raises:
        ValueError: no partitions, or not one value mapping per partition.
    """
    if not partitions or len(values) != len(partitions):
        raise ValueError("follow steps need partitions, and one value mapping each")
    names, mappings = tuple(partitions), tuple(values)
    steps: list[Step] = []
    convert = deletes and equality and config.convert_equality_deletes.enabled
    if convert:
        steps.append(
            Step(
                "convert_equality_deletes",
                "follow the stream: resolve the due partitions' equality deletes into position "
                "deletes",
                partitions=names,
                partition_values=mappings,
            )
        )
    rdf = config.rewrite_data_files
    if rdf.enabled:
        options = {**rdf.options, **config.follow.options}
        options.update(
            {
                # "small" as the plan counts it: a file of that size or more stays as it is
                # (unless a delete applies to it)
                "min-file-size-bytes": str(config.small_file_bytes),
                # a cancelled run must commit nothing (compactor.run)
                "partial-progress.enabled": "false",
            }
        )
        if convert:
            # a big file whose deletes are now positions is rewritten only once they delete
            # its share of rows (ConvertEqualityDeletesConfig)
            options.pop("delete-file-threshold", None)
            options["delete-ratio-threshold"] = str(config.convert_equality_deletes.delete_ratio)
        steps.append(
            Step(
                "rewrite_data_files",
                "follow the stream: compact the due partitions' small files, apply deletes",
                options=options,
                strategy="binpack",
                partitions=names,
                partition_values=mappings,
            )
        )
        if deletes and not convert:
            # the equality deletes (a Flink upsert's) the rewrite left applying to nothing:
            # rewrite_position_delete_files drops only position deletes
            steps.append(
                Step(
                    "remove_dangling_deletes",
                    "follow the stream: drop the delete files that apply to no live data file",
                    partitions=names,
                    partition_values=mappings,
                )
            )
    rpd = config.rewrite_position_delete_files
    if deletes and rpd.enabled:
        steps.append(
            Step(
                "rewrite_position_delete_files",
                "follow the stream: drop the position deletes that apply to no live data file",
                options={**rpd.options, "rewrite-all": "true"},
                partitions=names,
                partition_values=mappings,
            )
        )
    return tuple(steps)


def manifest_steps(stats: TableStats, config: TableConfig) -> tuple[Step, ...]:
    manifests = config.rewrite_manifests
    small = small_manifests(stats, config)
    if not manifests.enabled or small < manifests.min_small_manifests:
        return ()
    return (
        Step("rewrite_manifests", f"{small} of {len(stats.manifest_bytes)} manifests are small"),
    )


def unleased_steps(
    stats: TableStats, config: TableConfig, now: datetime, readers: Collection[int] = ()
) -> tuple[Step, ...]:
    """expire_snapshots and remove_orphan_files, which take no lease (docs/design.md §4)."""
    steps: list[Step] = []
    exp = config.expire_snapshots
    if exp.enabled:
        expiry = table_expiry(stats, config, now, readers)
        if expiry.expired:
            kept = f", keeping {len(expiry.kept_for_queries)} for streaming writers' restarts"
            held = f", keeping {len(expiry.kept_for_readers)} for readers"
            steps.append(
                Step(
                    "expire_snapshots",
                    f"{len(expiry.expired)} of {len(stats.snapshots)} snapshots older than "
                    f"{format_duration(exp.older_than)} beyond the last {exp.retain_last}"
                    + (kept if expiry.kept_for_queries else "")
                    + (held if expiry.kept_for_readers else ""),
                    older_than=expiry.older_than,
                    retain_last=expiry.retain_last,
                    snapshot_ids=expiry.snapshot_ids,
                )
            )
    orphans = config.remove_orphan_files
    if orphans.enabled:
        steps.append(
            Step(
                "remove_orphan_files",
                f"files older than {format_duration(orphans.older_than)} that no snapshot uses",
                older_than=now - orphans.older_than,
            )
        )
    return tuple(steps)

"""A table's compaction debt as the compactor reports it to the service after each plan and run.

debt = debt_of(stats, table_config)
# {"snapshot_id": 7, "data_files": 40, "small_files": 38, "delete_files": 9,
#  "partitions_over_target": 3, "records": 1000}
send_debt(client, "lake.db.events", debt)      # logs it; stores it on the service

small_files              data files under the small size (`plan.small_file_fraction` of the
                         target file size)
delete_files             delete files that still apply to live data, and dangling ones
partitions_over_target   partitions a rewrite would change: at least min-input-files small
                         files, or any delete file
partitions_over_bound    partitions at `plan.stop_small_files` or `plan.stop_delete_files`,
                         of those the plan looks at (`plan.recent_days`): the compactor is
                         behind on these; late data in an older partition waits for the
                         daily rewrite-all by design
worst_partition          the most small plus delete files in one partition
partitions               per partition with any, its small data files, its delete files and
                         of them the equality deletes that still apply (`{"dt=2024-06-20/hr=13":
                         {"data_files": 9, "delete_files": 4, "equality_delete_files": 1}}`; the
                         most indebted MAX_PARTITIONS): the service replaces its own counts of
                         each partition's files with them, the counts the commits added since
                         (docs/jobs.md §3), which decide when a partition is due
"""

from __future__ import annotations

import json
import logging
from datetime import datetime
from typing import Any

from compactor.config import TableConfig
from compactor.plan import over_bound, scope_of
from compactor.plan.rules import by_debt
from compactor.stats import TableStats
from service.client import LeaseClient
from service.wire.errors import LakelockError

__all__ = ["MAX_PARTITIONS", "debt_of", "partition_debt", "send_debt"]

MAX_PARTITIONS = 1000
"""The most partitions a debt report names (the most indebted): a body of a bounded size."""

log = logging.getLogger("compactor.debt")


def debt_of(stats: TableStats, config: TableConfig, *, measured_at: datetime) -> dict[str, Any]:
    """The debt `stats` show under `config`'s thresholds, read at `measured_at`."""
    totals = stats.totals()
    min_input = config.rewrite_data_files.min_input_files
    over = sum(
        1
        for p in stats.partitions
        if p.small_files >= min_input or p.delete_files or p.dangling_delete_files
    )
    return {
        "snapshot_id": stats.current_snapshot_id,
        "data_files": totals.data_files,
        "small_files": totals.small_files,
        "delete_files": totals.delete_files + totals.dangling_delete_files,
        "partitions_over_target": over,
        "partitions_over_bound": len(over_bound(scope_of(stats, config, measured_at)[2], config)),
        "worst_partition": max((p.debt for p in stats.partitions), default=0),
        "records": totals.data_records,
        "measured_at": measured_at.isoformat(),
        "partitions": partition_debt(stats),
    }


def partition_debt(stats: TableStats) -> dict[str, dict[str, int]]:
    """Per named partition with any, its small data files, delete files (applying or dangling:
    what a reader opens) and equality delete files that apply (a dangling one is older than
    every data file: no reader joins it), the most indebted MAX_PARTITIONS."""
    owing = [p for p in by_debt(stats.partitions) if p.name is not None and p.debt]
    return {
        str(p.name): {
            "data_files": p.small_files,
            "delete_files": p.all_delete_files,
            "equality_delete_files": p.equality_delete_files,
        }
        for p in owing[:MAX_PARTITIONS]
    }


def send_debt(client: LeaseClient | None, table: str, debt: dict[str, Any]) -> None:
    """Log `debt` as one JSON line and store it on the service; a service that cannot take it
    is logged, never raised: the run goes on."""
    # the line names how many partitions owe; the service gets each of them
    line = {**debt, "partitions": len(debt.get("partitions") or ())}
    log.info(json.dumps({"event": "compactor.debt", "table": table, **line}, sort_keys=True))
    if client is None:
        return
    try:
        client.report_debt(table, debt)
    except LakelockError as exc:
        log.warning("could not report the debt of %s to the service: %s", table, exc)

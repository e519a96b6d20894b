"""The demo's compactor (demo.pipeline): lakelock's compactor on the demo's table, following the
stream or on a timer, and its stand-in client for uncoordinated runs (the conflicts baseline).

    compact(spark, client, options, stop=..., on_run=...)   until `stop`, each run to `on_run`
    compact_once(spark, client, config) -> RunReport        one run under a claim on the table
    run_line(number, report) -> str                         the run's progress line
    UncoordinatedClient                                     grants every lease at once
"""

from __future__ import annotations

import threading
import uuid
from collections.abc import Callable
from datetime import timedelta
from typing import Any

from compactor.claim import Held, take
from compactor.config import CompactorConfig, FleetConfig, TableConfig
from compactor.fleet import Fleet
from compactor.follow import Follower
from compactor.report import RunReport, publish
from compactor.run import run_table
from demo.options import PipelineOptions
from service.client import Lease, LeaseClient

__all__ = ["HOLDER", "UncoordinatedClient", "compact", "compact_once", "run_line"]

HOLDER = "demo-compactor"


def compact(
    spark: Any,
    client: Any,
    options: PipelineOptions,
    *,
    stop: threading.Event,
    on_run: Callable[[RunReport], None],
) -> None:
    """lakelock's compactor on `options.table` until `stop`: following the stream
    (`options.follows`), else a run every `compact_every_s`; each run published, then handed
    to `on_run`. Whatever writes the table: the demo's ingest job, or a Flink job through the
    catalog front (whose commits count the due partitions as the gate's releases do)."""
    config = options.table_config()
    if options.follows:
        _follow(spark, client, config, options, stop=stop, on_run=on_run)
        return
    while not stop.wait(options.compact_every_s):
        report = compact_once(spark, client, config)
        publish(report, client=client)
        on_run(report)


def _follow(
    spark: Any,
    client: LeaseClient,
    config: TableConfig,
    options: PipelineOptions,
    *,
    stop: threading.Event,
    on_run: Callable[[RunReport], None],
) -> None:
    """Follow the stream until `stop` (compactor.follow): the demo's table only, one table run
    at a time, the full plan every `full_plan_every_s`."""
    fleet = Fleet(
        spark,
        client=client,
        config=CompactorConfig(
            tables=(config,),
            fleet=FleetConfig(max_concurrent=1, claim_ttl=timedelta(seconds=60)),
        ),
        selection=[config.name],
        holder=HOLDER,
    )
    follower = Follower(
        fleet, every_s=options.full_plan_every_s, poll_s=options.follow_poll_s, on_run=on_run
    )
    follower.run(stop)


def compact_once(spark: Any, client: Any, config: TableConfig) -> RunReport:
    """One run, under a claim on the table as the fleet takes it (so the run may hold back
    writers of partitions past the hard bound); uncoordinated, without one."""
    if isinstance(client, UncoordinatedClient):
        return run_table(spark, client=client, config=config, holder=HOLDER)
    got = take(client, config.name, holder=HOLDER, ttl_s=60)
    if isinstance(got, Held):  # no other compactor runs here; said if one ever does
        raise RuntimeError(f"the demo's table is claimed by {got.holder}")
    with got:
        return run_table(
            spark,
            client=client,
            config=config,
            holder=HOLDER,
            claim=got.lease,
            before_step=got.check,
        )


def run_line(number: int, report: RunReport) -> str:
    """A progress line for the compactor's run `number`: its outcome, what it did, its waits."""
    error = f" ({report.error.splitlines()[0][:120]})" if report.error else ""
    if report.mode == "follow":
        what = f"followed {', '.join(report.compacted) or 'nothing'}"
    else:
        what = (
            f"data files {(report.before or {}).get('data_files')} -> "
            f"{(report.after or {}).get('data_files')}"
        )
    return (
        f"compaction {number}: {report.outcome}{error}, {what}, "
        f"lease wait {report.lease_wait_s or 0:.1f}s, {report.duration_s or 0:.1f}s"
    )


class UncoordinatedClient:
    """A stand-in for LeaseClient that grants every maintenance lease at once and never
    refuses a renew: the compactor then runs as if lakelock did not exist."""

    def acquire_maintenance(self, table: str, *, holder: str, ttl_s: float, **_: Any) -> Lease:
        return Lease(
            lease_id=str(uuid.uuid4()),
            table=table,
            kind="maintenance",
            holder=holder,
            request_id="uncoordinated",
            token=0,
            ttl_s=ttl_s,
            remaining_s=ttl_s,
        )

    def renew(self, lease: Lease, **_: Any) -> Lease:
        return lease

    def release(self, lease: Lease) -> None:
        return None

    def report_run(self, table: str, report: dict[str, Any]) -> int:
        return 0

"""Pruning, as each replica runs it: `service.lock.retention.prune` every
LAKELOCK_PRUNE_INTERVAL_S on a thread of its own, counted in the metrics.

    thread = pruner(engine, settings, metrics); thread.start(); ...; thread.signal(); thread.join()
"""

from __future__ import annotations

import logging
import random
from datetime import timedelta

from service.lock.db import Engine
from service.lock.retention import Pruned, prune
from service.server.metrics import Metrics
from service.server.periodic import Periodic
from service.server.settings import Settings

__all__ = ["pruner"]

log = logging.getLogger("lakelock.retention")


def pruner(engine: Engine, settings: Settings, metrics: Metrics) -> Periodic:
    """`prune` every LAKELOCK_PRUNE_INTERVAL_S, its first pass at a random point of the first
    interval, so that replicas started together (a deploy) do not prune at the same instants;
    a pass stops after its current batch when the thread is signalled."""
    interval = settings.prune_interval_s

    def prune_once() -> None:
        pruned = prune(
            engine,
            retention=timedelta(days=settings.retention_days),
            batch_rows=settings.prune_batch_rows,
            pause=thread.wait,
        )
        _counted(pruned, metrics)

    thread = Periodic(
        "pruning",
        prune_once,
        interval_s=interval,
        first_wait_s=random.uniform(0, interval),
        thread="lakelock-pruner",
        logger=log,
    )
    return thread


def _counted(pruned: Pruned, metrics: Metrics) -> None:
    metrics.pruned.labels("events").inc(pruned.events)
    metrics.pruned.labels("commit_leases").inc(pruned.commit_leases)
    metrics.pruned.labels("maintenance_leases").inc(pruned.maintenance_leases)
    metrics.pruned.labels("claims").inc(pruned.claims)
    if pruned.events or pruned.commit_leases or pruned.maintenance_leases or pruned.claims:
        log.info(
            "pruned rows past the retention",
            extra={
                "events": pruned.events,
                "commit_leases": pruned.commit_leases,
                "maintenance_leases": pruned.maintenance_leases,
                "claims": pruned.claims,
                "batches": pruned.batches,
                "longest_batch_ms": round(pruned.longest_batch_s * 1000, 1),
            },
        )
